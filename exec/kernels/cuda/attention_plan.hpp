// attention_plan: the CUDA backend's attention as cuBLASLt GEMMs (gemm_plan.hpp) around the softmax kernels,
// as plain data so the CPU tests execute the same GEMM lists with the reference of cublasLtMatmul.
// Layouts (exec/backends/ops.hpp): q, out [B, T, H, D]; k, v [B, Tk, Hkv, D]; att [B, H, T, Tk] (Tk = T but for
// context parallelism's rectangular attention, attention_fwd_kv). Query head h = kvh * G + gi uses kv head kvh
// (G = H / Hkv). For fixed (b, gi) the Hkv heads form one strided batch: query-side stride G*D, kv-side stride
// D, score stride G*T*Tk. Every list holds B * G GEMMs.
// Forward: att = q kᵀ (scores) -> softmax(att / sqrt(D), causal) in place -> out = att v.
// Backward: dp = dout vᵀ -> softmax backward (overwrite dp with dS) -> dq += dS k, dk += dSᵀ q, dv += attᵀ dout
// (beta 1: the G query heads of one kv head add into dk, dv in order gi = 0, 1, ...).
#pragma once
#include <vector>

#include "exec/kernels/cuda/gemm_plan.hpp"

namespace tp::cuda {

struct AttnDims {
  long B, T, H, Hkv, D;
  long Tk = 0;  // keys per sequence; 0: T
  long G() const { return H / Hkv; }
  long K() const { return Tk ? Tk : T; }
};

// X [T, Tk] per query head = Y_q [T, D] (query-side, row stride H*D) · Z_kv [Tk, D]ᵀ (kv-side, row stride Hkv*D).
// Scores use (q, k); the backward's dP uses (dout, v).
inline std::vector<GemmArgs> attn_qk(const char* what, float* x, const float* yq, const float* zkv, AttnDims d) {
  std::vector<GemmArgs> v;
  const long G = d.G(), T = d.T, Tk = d.K(), D = d.D;
  for (long b = 0; b < d.B; ++b)
    for (long gi = 0; gi < G; ++gi) {
      GemmArgs s;
      s.what = what, s.M = T, s.N = Tk, s.K = D, s.tb = true, s.beta = 0, s.batch = int(d.Hkv);
      s.A = yq + b * T * d.H * D + gi * D, s.lda = d.H * D, s.sa = G * D;
      s.B = zkv + b * Tk * d.Hkv * D, s.ldb = d.Hkv * D, s.sb = D;
      s.C = x + (b * d.H + gi) * T * Tk, s.ldc = Tk, s.sc = G * T * Tk;
      v.push_back(s);
    }
  return v;
}

// out [T, D] per query head = att [T, Tk] · v [Tk, D].
inline std::vector<GemmArgs> attn_out(float* out, const float* att, const float* val, AttnDims d) {
  std::vector<GemmArgs> v;
  const long G = d.G(), T = d.T, Tk = d.K(), D = d.D;
  for (long b = 0; b < d.B; ++b)
    for (long gi = 0; gi < G; ++gi) {
      GemmArgs o;
      o.what = "attention_fwd att·v", o.M = T, o.N = D, o.K = Tk, o.beta = 0, o.batch = int(d.Hkv);
      o.A = att + (b * d.H + gi) * T * Tk, o.lda = Tk, o.sa = G * T * Tk;
      o.B = val + b * Tk * d.Hkv * D, o.ldb = d.Hkv * D, o.sb = D;
      o.C = out + b * T * d.H * D + gi * D, o.ldc = d.H * D, o.sc = G * D;
      v.push_back(o);
    }
  return v;
}

// dq += dS k; dk += dSᵀ q; dv += attᵀ dout (dS: the softmax backward of dP, [B, H, T, Tk] like att).
inline std::vector<GemmArgs> attn_grads(float* dq, float* dk, float* dv, const float* ds, const float* att,
                                        const float* q, const float* k, const float* dout, AttnDims d) {
  std::vector<GemmArgs> v;
  const long G = d.G(), T = d.T, Tk = d.K(), D = d.D;
  for (long b = 0; b < d.B; ++b)
    for (long gi = 0; gi < G; ++gi) {
      const long qo = b * T * d.H * D + gi * D, ko = b * Tk * d.Hkv * D, so = (b * d.H + gi) * T * Tk;
      GemmArgs g;
      g.N = D, g.beta = 1, g.batch = int(d.Hkv);
      g.lda = Tk, g.sa = G * T * Tk;
      GemmArgs a = g;  // dq [T, D] += dS [T, Tk] k [Tk, D]
      a.what = "attention_bwd dS·k", a.M = T, a.K = Tk, a.A = ds + so, a.B = k + ko, a.ldb = d.Hkv * D, a.sb = D;
      a.C = dq + qo, a.ldc = d.H * D, a.sc = G * D;
      GemmArgs c = g;  // dk [Tk, D] += dSᵀ q [T, D]
      c.what = "attention_bwd dSᵀ·q", c.M = Tk, c.K = T, c.ta = true, c.A = ds + so, c.B = q + qo, c.ldb = d.H * D;
      c.sb = G * D, c.C = dk + ko, c.ldc = d.Hkv * D, c.sc = D;
      GemmArgs e = g;  // dv [Tk, D] += attᵀ dout
      e.what = "attention_bwd attᵀ·dout", e.M = Tk, e.K = T, e.ta = true, e.A = att + so, e.B = dout + qo;
      e.ldb = d.H * D, e.sb = G * D;
      e.C = dv + ko, e.ldc = d.Hkv * D, e.sc = D;
      v.push_back(a), v.push_back(c), v.push_back(e);
    }
  return v;
}

// With bf16 GEMM operands: points each GEMM's A16 / B16 at the bf16 copy base16 (2-byte elements, laid out as
// the n floats at base) when its A / B lies in [base, base + n) and that copy's address is 16-byte aligned. An
// operand left without one is cast by the GEMM into an aligned buffer instead. (An H200 measured why: cuBLASLt's
// heuristic answers CUBLAS_STATUS_NOT_SUPPORTED for a bf16 operand told 2-byte alignment, e.g. the second query
// head's P at T = 7.) In training shapes (T a multiple of 8) every copy is aligned.
inline void attach_copies16(std::vector<GemmArgs>& v, const float* base, const void* base16, long n) {
  if (!base16) return;
  auto copy_of = [&](const float* p) -> const void* {
    if (p < base || p >= base + n) return nullptr;
    const void* c = static_cast<const char*>(base16) + 2 * (p - base);
    return alignment(c) == 16 ? c : nullptr;
  };
  for (GemmArgs& a : v) {
    if (const void* c = copy_of(a.A)) a.A16 = c;
    if (const void* c = copy_of(a.B)) a.B16 = c;
  }
}

}  // namespace tp::cuda
