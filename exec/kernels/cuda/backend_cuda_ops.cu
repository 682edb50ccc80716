// backend_cuda_ops: the CUDA backend's op tables. fp32: each ops:: contract (exec/backends/ops.hpp) bridged onto the
// kernels of exec/kernels/ (docs/kernels.md lists the interface differences: per-row losses, LayerNorm
// backward in two kernels) and cuBLASLt (matmul; attention as strided-batched GEMMs around the softmax kernels);
// flash attention as the fused kernels of k_flash.hpp.
// fp64: entries that throw "op X is not supported on cuda". The shard ops are in backend_cuda_shard.cu.
// Invariants: everything on g.stream; an error names the op and its shapes (TP_OP below).
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

#include "exec/kernels/cuda/backend_cuda_parts.hpp"
#include "exec/kernels/cuda/attention_plan.hpp"
#include "exec/kernels/cuda/gemm_lt.hpp"
#include "exec/kernels/cuda/op_profile.hpp"
#include "exec/kernels/cuda/fused_attention.hpp"
#include "exec/kernels/cuda_launch.cuh"
#include "exec/kernels/k_attn_glue.hpp"
#include "exec/kernels/kernels.hpp"
#include "exec/kernels/cuda/instantiate.cuh"

namespace tp::kernels {
TP_CUDA_INSTANTIATE(extern template, float)
extern template void copy<L, bf16, float>(const L&, bf16*, const float*, long);
extern template void copy<L, float, bf16>(const L&, float*, const bf16*, long);
extern template void pack_bf16<L, float>(const L&, bf16*, const float*, long);
extern template void layernorm_bwd_dx<L, float, bf16>(const L&, float*, const float*, const bf16*, const float*,
                                                     const float*, const float*, long, long);
extern template void layernorm_bwd_wb<L, float, bf16>(const L&, float*, float*, const float*, const bf16*,
                                                     const float*, const float*, long, long, float*);
extern template void layernorm_fwd16<L>(const L&, bf16*, float*, float*, const float*, const float*, const float*, long,
                                        long, float);
extern template void flash_attention_fwd<L, float>(const L&, float*, float*, const float*, const float*, const float*, long, long, long, long, long, long, long, long, bool);
extern template void flash_attention_bwd<L, float>(const L&, float*, float*, float*, const float*, const float*,
                                                  const float*, const float*, const float*, const float*, long, long,
                                                  long, long, long, long, long, long, bool, float*, bool);
extern template void flash_attention_fwd<L, float, bf16>(const L&, bf16*, float*, const bf16*, const bf16*, const bf16*,
                                                        long, long, long, long, long, long, long, long, bool);
extern template void flash_attention_bwd<L, float, bf16>(const L&, float*, float*, float*, const float*, const bf16*,
                                                        const float*, const bf16*, const bf16*, const bf16*, long, long,
                                                        long, long, long, long, long, long, bool, float*, bool);
}  // namespace tp::kernels

namespace tp::cuda {

float* column_scratch(long N, long C) {
  const long n = kernels::column_sums_scratch(N, C);
  return n > 0 ? static_cast<float*>(scratch(size_t(n) * sizeof(float))) : nullptr;
}

void cast_to_bf16(void* y, const float* x, long n) {
  if (n > 0) kernels::copy(launcher(), static_cast<kernels::bf16*>(y), x, n);
}
void cast_from_bf16(float* y, const void* x, long n) {
  if (n > 0) kernels::copy(launcher(), y, static_cast<const kernels::bf16*>(x), n);
}

kernels::CudaLauncher launcher() {
  kernels::CudaLauncher l;
  l.block = 256;
  l.max_grid = 4096;
  l.stream = g.stream;
  return l;
}

namespace {

namespace k = tp::kernels;
using F = float;

std::string dims(std::initializer_list<std::pair<const char*, long>> d) {
  std::string s;
  for (const auto& [n, v] : d) s += (s.empty() ? "" : ", ") + std::string(n) + " " + std::to_string(v);
  return s;
}

#define TP_UNPAREN(...) __VA_ARGS__
// Runs `body` on the backend's device; any error is rethrown as "cuda op NAME (SHAPES): ...".
#define TP_OP(name, shapes, ...)                                                                          \
  do {                                                                                                    \
    try {                                                                                                 \
      enter();                                                                                            \
      prof::OpTimer op_timer_(name, TP_UNPAREN shapes);                                                   \
      __VA_ARGS__;                                                                                        \
      after_op();                                                                                         \
    } catch (const std::exception& e_) {                                                                  \
      throw std::runtime_error(std::string("cuda op ") + name + " (" + dims shapes + "): " + e_.what()); \
    }                                                                                                     \
  } while (0)

// ---- unsupported entries: same signature as the table's, throwing with the op's name ----
const char* g_stub_names[128];
template <int I, class Fn>
struct Stub;
template <int I, class R, class... A>
struct Stub<I, R (*)(A...)> {
  static R fn(A...) { throw std::runtime_error(std::string("cuda: op ") + g_stub_names[I] + " is not supported on cuda"); }
};
#define TP_STUB(table, op, label)                            \
  do {                                                       \
    constexpr int i_ = __COUNTER__;                          \
    static_assert(i_ < 128);                                 \
    g_stub_names[i_] = label " " #op;                        \
    (table).op = &Stub<i_, decltype((table).op)>::fn;        \
  } while (0)

// ---- GEMMs ----
// The three pointers' alignments in bytes (16, 8, 4, ...) as one number ABC in decimal (161616: all 16), for messages
// and the op profile.
long align3(const void* a, const void* b, const void* c) {
  auto al = [](const void* p) { return long(alignment(p)); };
  auto w = [](long x) { return x >= 10 ? 100L : 10L; };
  return (al(a) * w(al(b)) + al(b)) * w(al(c)) + al(c);
}
// A GEMM without a product (K = 0): C = beta C, never reading C when beta is 0.
void empty_product(F* C, F beta, long n) {
  if (beta == F(0)) k::fill(launcher(), C, 0.f, n);
  else k::scale(launcher(), C, C, beta, n);
}
void matmul(F* C, const F* A, const F* B, long M, long N, long K, bool ta, bool tb, F alpha, F beta) {
  TP_OP("matmul", ({{"M", M}, {"N", N}, {"K", K}, {"trans_a", ta}, {"trans_b", tb}, {"align", align3(A, B, C)}}), {
    if (K == 0) {
      empty_product(C, beta, M * N);
    } else {
      lt_gemm(matmul_args(C, A, B, M, N, K, ta, tb, alpha, beta));
    }
  });
}

// A16 / B16 hold A / B as bf16 (a saved activation kept packed, a weight's bf16 copy): with bf16 operands on,
// cuBLASLt reads them as the operands' bf16 copies (GemmArgs::A16 / B16; A / B are given the copies' addresses only
// for the alignment checks); otherwise they are unpacked into scratch and the fp32 GEMM runs on them.
GemmArgs packed_args(F* C, const F* A, const uint16_t* A16, const F* B, const uint16_t* B16, long M, long N, long K,
                     bool ta, bool tb, F alpha, F beta) {
  if ((A == nullptr) == (A16 == nullptr) || (B == nullptr) == (B16 == nullptr))
    throw std::runtime_error("matmul16: each operand is given exactly once (A or A16, B or B16)");
  if (lt_bf16()) {
    GemmArgs a = matmul_args(C, A ? A : reinterpret_cast<const F*>(A16), B ? B : reinterpret_cast<const F*>(B16), M, N,
                             K, ta, tb, alpha, beta);
    a.A16 = A ? nullptr : A16;
    a.B16 = B ? nullptr : B16;
    return a;
  }
  const size_t a_n = A16 ? size_t(M * K + 63) / 64 * 64 : 0;  // (B's unpacked copy 256-byte aligned after A's)
  F* s = static_cast<F*>(scratch(sizeof(F) * (a_n + (B16 ? size_t(K * N) : 0))));
  if (A16) cast_from_bf16(s, A16, M * K), A = s;
  if (B16) cast_from_bf16(s + a_n, B16, K * N), B = s + a_n;
  return matmul_args(C, A, B, M, N, K, ta, tb, alpha, beta);
}
void matmul16(F* C, const F* A, const uint16_t* A16, const F* B, const uint16_t* B16, long M, long N, long K, bool ta,
              bool tb, F alpha, F beta) {
  const void* a = A ? static_cast<const void*>(A) : A16;
  const void* b = B ? static_cast<const void*>(B) : B16;
  TP_OP("matmul16", ({{"M", M}, {"N", N}, {"K", K}, {"trans_a", ta}, {"trans_b", tb}, {"A16", A16 != nullptr},
                      {"B16", B16 != nullptr}, {"align", align3(a, b, C)}}), {
    if (K == 0) {
      empty_product(C, beta, M * N);
    } else {
      GemmArgs g = packed_args(C, A, A16, B, B16, M, N, K, ta, tb, alpha, beta);
      g.what = "matmul16";
      lt_gemm(g);
    }
  });
}

// A linear layer's forward in one cuBLASLt call with a bias / GELU epilogue when cuBLASLt takes it (aligned
// vectors, an output row length that is a multiple of 8); otherwise the GEMM, then the bias and GELU kernels.
void linear_fwd(F* y, F* pre, const F* x, const uint16_t* x16, const F* w, const uint16_t* w16, const F* b, long M, long N,
                long K) {
  TP_OP("linear_fwd", ({{"M", M}, {"N", N}, {"K", K}, {"bias", b != nullptr}, {"gelu", pre != nullptr},
                        {"x16", x16 != nullptr}, {"w16", w16 != nullptr}}), {
    GemmArgs a = K == 0 ? GemmArgs{} : packed_args(y, x, x16, w, w16, M, N, K, false, false, 1.f, 0.f);
    a.what = "linear_fwd";
    a.bias = b, a.aux = pre, a.gelu = pre != nullptr;
    if (K == 0 || !lt_gemm(a)) {
      F* z = pre ? pre : y;
      matmul16(z, x, x16, w, w16, M, N, K, false, false, 1.f, 0.f);
      if (b && M * N > 0) k::add_bias(launcher(), z, z, b, M, N, static_cast<const F*>(nullptr));
      if (pre && M * N > 0) k::gelu_fwd(launcher(), y, pre, M * N);
    }
  });
}

// Attention: the GEMM lists of attention_plan.hpp (checked on the CPU) around the softmax kernels. With bf16 GEMM
// operands on, the softmax kernels also write the bf16 copies of P (forward and backward) and dS (backward) that
// the GEMMs over them read (GemmArgs::A16), instead of four casts of these [B, H, T, Tk] matrices per layer.

// bf16 scratch of n elements in slot s (0: P, 1: dS) when bf16 operands are on, else null.
k::bf16* copy16(int s, long n) {
  return lt_bf16() ? static_cast<k::bf16*>(lt_bf16_scratch(s, sizeof(k::bf16) * size_t(n))) : nullptr;
}
// Forward after the score GEMMs: P = softmax (in place, rectangular when Tq < Tk), then out = P v.
void attention_fwd_rest(F* out, F* att, const F* v, const AttnDims& d) {
  const long Tq = d.T, Tk = d.K(), na = d.B * d.H * Tq * Tk;
  k::bf16* p16 = copy16(0, na);
  const F scale = F(1.0 / std::sqrt(double(d.D)));
  if (Tq == Tk) k::softmax_fwd(launcher(), att, att, d.B * d.H * Tq, Tk, scale, true, p16);
  else k::softmax_fwd_rect(launcher(), att, att, d.B * d.H * Tq, Tk, Tq, scale, p16);
  std::vector<GemmArgs> outs = attn_out(out, att, v, d);
  attach_copies16(outs, att, p16, na);
  for (const GemmArgs& a : outs) lt_gemm(a);
}
// Backward after dP = dout vᵀ: dS = softmax backward of dP in place, then the gradient GEMMs.
void attention_bwd_rest(F* dq, F* dk, F* dv, F* dp, const F* dout, const F* att, const F* q, const F* kk,
                        const AttnDims& d) {
  const long na = d.B * d.H * d.T * d.K();
  k::bf16* p16 = copy16(0, na);
  k::bf16* ds16 = copy16(1, na);
  k::softmax_bwd<true>(launcher(), dp, att, dp, d.B * d.H * d.T, d.K(), F(1.0 / std::sqrt(double(d.D))), ds16, p16);
  std::vector<GemmArgs> grads = attn_grads(dq, dk, dv, dp, att, q, kk, dout, d);
  attach_copies16(grads, dp, ds16, na);
  attach_copies16(grads, att, p16, na);
  for (const GemmArgs& a : grads) lt_gemm(a);
}

void attention_fwd(F* out, F* att, const F* q, const F* kk, const F* v, long B, long T, long H, long Hkv, long D) {
  TP_OP("attention_fwd", ({{"B", B}, {"T", T}, {"H", H}, {"Hkv", Hkv}, {"D", D}}), {
    if (Hkv <= 0 || H % Hkv != 0) throw std::runtime_error("H must be a multiple of Hkv");
    const AttnDims d{B, T, H, Hkv, D};
    for (const GemmArgs& a : attn_qk("attention_fwd q·kᵀ", att, q, kk, d)) lt_gemm(a);
    attention_fwd_rest(out, att, v, d);
  });
}

// dP (scratch [B, H, T, T]) = dout vᵀ; dS = softmax backward of dP, in place; then the gradient GEMMs.
void attention_bwd(F* dq, F* dk, F* dv, const F* dout, const F* att, const F* q, const F* kk, const F* v, long B,
                   long T, long H, long Hkv, long D) {
  TP_OP("attention_bwd", ({{"B", B}, {"T", T}, {"H", H}, {"Hkv", Hkv}, {"D", D}}), {
    if (Hkv <= 0 || H % Hkv != 0) throw std::runtime_error("H must be a multiple of Hkv");
    const AttnDims d{B, T, H, Hkv, D};
    F* dp = static_cast<F*>(scratch(sizeof(F) * size_t(B * H * T * T)));
    for (const GemmArgs& a : attn_qk("attention_bwd dout·vᵀ", dp, dout, v, d)) lt_gemm(a);
    attention_bwd_rest(dq, dk, dv, dp, dout, att, q, kk, d);
  });
}

// Context parallelism's rectangular causal attention: Tq queries over Tk >= Tq keys (the mask bottom-right), the
// same GEMM lists with Tk keys and the rectangular softmax kernel.
void attention_fwd_kv(F* out, F* att, const F* q, const F* kk, const F* v, long B, long Tq, long Tk, long H, long Hkv,
                      long D) {
  TP_OP("attention_fwd_kv", ({{"B", B}, {"Tq", Tq}, {"Tk", Tk}, {"H", H}, {"Hkv", Hkv}, {"D", D}}), {
    if (Hkv <= 0 || H % Hkv != 0) throw std::runtime_error("H must be a multiple of Hkv");
    if (Tq > Tk) throw std::runtime_error("Tq must not exceed Tk");
    const AttnDims d{B, Tq, H, Hkv, D, Tk};
    for (const GemmArgs& a : attn_qk("attention_fwd_kv q·kᵀ", att, q, kk, d)) lt_gemm(a);
    attention_fwd_rest(out, att, v, d);
  });
}
void attention_bwd_kv(F* dq, F* dk, F* dv, const F* dout, const F* att, const F* q, const F* kk, const F* v, long B,
                      long Tq, long Tk, long H, long Hkv, long D) {
  TP_OP("attention_bwd_kv", ({{"B", B}, {"Tq", Tq}, {"Tk", Tk}, {"H", H}, {"Hkv", Hkv}, {"D", D}}), {
    if (Hkv <= 0 || H % Hkv != 0) throw std::runtime_error("H must be a multiple of Hkv");
    if (Tq > Tk) throw std::runtime_error("Tq must not exceed Tk");
    const AttnDims d{B, Tq, H, Hkv, D, Tk};
    F* dp = static_cast<F*>(scratch(sizeof(F) * size_t(B * H * Tq * Tk)));
    for (const GemmArgs& a : attn_qk("attention_bwd_kv dout·vᵀ", dp, dout, v, d)) lt_gemm(a);
    attention_bwd_rest(dq, dk, dv, dp, dout, att, q, kk, d);
  });
}

// Flash attention: the fused kernels of k_flash.hpp (no [Tq, Tk] matrix), bf16 operands as the GEMMs are set.
void flash_check(long H, long Hkv, long Tq, long Tk, long D) {
  if (Hkv <= 0 || H % Hkv != 0) throw std::runtime_error("H must be a multiple of Hkv");
  if (Tq > Tk) throw std::runtime_error("Tq must not exceed Tk");
  if (D > k::kFlashMaxHeadDim)
    throw std::runtime_error("head dim above the flash kernels' " + std::to_string(k::kFlashMaxHeadDim));
}
void flash_attention_fwd(F* out, F* stats, const F* q, const F* kk, const F* v, long B, long Tq, long Tk, long H,
                         long Hkv, long D, long ldq, long ldkv) {
  TP_OP("flash_attention_fwd", ({{"B", B}, {"Tq", Tq}, {"Tk", Tk}, {"H", H}, {"Hkv", Hkv}, {"D", D}}), {
    flash_check(H, Hkv, Tq, Tk, D);
    if (B * Tq * H * D > 0)
      k::flash_attention_fwd(launcher(), out, stats, q, kk, v, B, Tq, Tk, H, Hkv, D, ldq, ldkv, lt_bf16());
  });
}
void flash_attention_bwd(F* dq, F* dk, F* dv, const F* dout, const F* out, const F* stats, const F* q, const F* kk,
                         const F* v, long B, long Tq, long Tk, long H, long Hkv, long D, long ldq, long ldkv) {
  TP_OP("flash_attention_bwd", ({{"B", B}, {"Tq", Tq}, {"Tk", Tk}, {"H", H}, {"Hkv", Hkv}, {"D", D}}), {
    flash_check(H, Hkv, Tq, Tk, D);
    if (B * Tq * H * D > 0) {
      float* terms = static_cast<float*>(scratch(sizeof(float) * size_t(k::flash_bwd_scratch(B, H, Tq, D))));
      k::flash_attention_bwd(launcher(), dq, dk, dv, dout, out, stats, q, kk, v, B, Tq, Tk, H, Hkv, D, ldq, ldkv,
                             lt_bf16(), terms);
    }
  });
}
// The bf16-stored variants (exec/backends/ops.hpp): the same kernels reading and writing bf16.
const k::bf16* b16p(const uint16_t* p) { return reinterpret_cast<const k::bf16*>(p); }
// The library's fused attention (fused_attention.hpp: cuDNN's SDPA where it loaded and accepts the shape) or the
// own kernels. The library's forward writes each row's log-sum-exp, kept in stats as the pair (lse, 1); its
// backward reads the log-sum-exp of whichever pair stats holds (k_attn_glue.hpp), takes dout packed and writes bf16
// gradients, which are unpacked over dq, dk and dv (overwriting, as the own kernels do).
tp_sdpa_shape sdpa_shape(long B, long Tq, long Tk, long H, long Hkv, long D, long ldq, long ldkv) {
  return {B, Tq, Tk, H, Hkv, D, ldq, ldkv, 1.f / std::sqrt(float(D))};
}
size_t round_up(size_t bytes) { return (bytes + 255) / 256 * 256; }
void sdpa_check(int status, const char* what, const char* why) {
  if (status != TP_SDPA_OK) throw std::runtime_error(std::string(what) + ": " + why);
}
void note_refusals() {
  static size_t printed = 0;
  const auto& notes = attention_choice().notes();
  for (; printed < notes.size(); ++printed)
    std::fprintf(stderr, "note: cuda: fused attention %s; the own flash kernels run it\n", notes[printed].c_str());
}
long sdpa_workspace(const tp_sdpa_shape& s) {
  const long ws = attention_choice().workspace_or_own(s, g.stream);
  note_refusals();
  return ws;
}
// The library's forward: out, and each row's log-sum-exp as the stats pair (lse, 1).
void sdpa_fwd16(const tp_sdpa_shape& s, long ws, uint16_t* out, F* stats, const uint16_t* q, const uint16_t* kk,
                const uint16_t* v) {
  const long rows = s.B * s.H * s.Tq;
  char* base = static_cast<char*>(scratch(round_up(size_t(ws)) + sizeof(float) * size_t(rows)));
  float* lse = reinterpret_cast<float*>(base + round_up(size_t(ws)));
  char why[512] = "";
  sdpa_check(attention_choice().library().fwd(&s, out, lse, q, kk, v, base, why, sizeof why), "cuDNN attention forward",
             why);
  k::stats_from_lse(launcher(), stats, lse, rows);
}
// The library's backward: dout packed, the log-sum-exp from stats, the gradients as bf16 in q's and k's layouts
// (one region when dq, dk, dv are the fused QKV gradient's columns, as the model calls it, else three), then
// unpacked over dq, dk, dv.
void sdpa_bwd16(const tp_sdpa_shape& s, long ws, F* dq, F* dk, F* dv, const F* dout, const uint16_t* out,
                const F* stats, const uint16_t* q, const uint16_t* kk, const uint16_t* v) {
  const long B = s.B, Tq = s.Tq, Tk = s.Tk, H = s.H, Hkv = s.Hkv, D = s.D, ldq = s.ldq, ldkv = s.ldkv;
  const bool fused = ldq == ldkv && dk == dq + H * D && dv == dk + Hkv * D;
  const size_t nq = size_t(B * Tq * ldq), nkv = size_t(B * Tk * ldkv), rows = size_t(B * H * Tq);
  const size_t bytes[5] = {round_up(size_t(ws)), round_up(sizeof(float) * rows), round_up(2 * size_t(B * Tq * H * D)),
                           round_up(2 * nq), fused ? 0 : 2 * round_up(2 * nkv)};
  char* base = static_cast<char*>(scratch(bytes[0] + bytes[1] + bytes[2] + bytes[3] + bytes[4]));
  float* lse = reinterpret_cast<float*>(base + bytes[0]);
  k::bf16* dout16 = reinterpret_cast<k::bf16*>(base + bytes[0] + bytes[1]);
  k::bf16* dq16 = reinterpret_cast<k::bf16*>(base + bytes[0] + bytes[1] + bytes[2]);
  k::bf16* dk16 = fused ? dq16 + H * D : reinterpret_cast<k::bf16*>(base + bytes[0] + bytes[1] + bytes[2] + bytes[3]);
  k::bf16* dv16 = fused ? dk16 + Hkv * D : dk16 + round_up(2 * nkv) / 2;
  k::lse_from_stats(launcher(), lse, stats, long(rows));
  k::copy(launcher(), dout16, dout, B * Tq * H * D);
  char why[512] = "";
  sdpa_check(attention_choice().library().bwd(&s, dq16, dk16, dv16, dout16, out, lse, q, kk, v, base, why, sizeof why),
             "cuDNN attention backward", why);
  if (fused) {
    k::unpack_rows(launcher(), dq, ldq, dq16, ldq, B * Tq, (H + 2 * Hkv) * D);
  } else {
    k::unpack_rows(launcher(), dq, ldq, dq16, ldq, B * Tq, H * D);
    k::unpack_rows(launcher(), dk, ldkv, dk16, ldkv, B * Tk, Hkv * D);
    k::unpack_rows(launcher(), dv, ldkv, dv16, ldkv, B * Tk, Hkv * D);
  }
}
void flash_attention_fwd16(uint16_t* out, F* stats, const uint16_t* q, const uint16_t* kk, const uint16_t* v, long B,
                           long Tq, long Tk, long H, long Hkv, long D, long ldq, long ldkv) {
  TP_OP("flash_attention_fwd16", ({{"B", B}, {"Tq", Tq}, {"Tk", Tk}, {"H", H}, {"Hkv", Hkv}, {"D", D}}), {
    flash_check(H, Hkv, Tq, Tk, D);
    const tp_sdpa_shape s = sdpa_shape(B, Tq, Tk, H, Hkv, D, ldq, ldkv);
    const long ws = B * Tq * H * D > 0 ? sdpa_workspace(s) : -1;
    if (ws >= 0)
      sdpa_fwd16(s, ws, out, stats, q, kk, v);
    else if (B * Tq * H * D > 0)
      k::flash_attention_fwd(launcher(), reinterpret_cast<k::bf16*>(out), stats, b16p(q), b16p(kk), b16p(v), B, Tq, Tk,
                             H, Hkv, D, ldq, ldkv, lt_bf16());
  });
}
void flash_attention_bwd16(F* dq, F* dk, F* dv, const F* dout, const uint16_t* out, const F* stats, const uint16_t* q,
                           const uint16_t* kk, const uint16_t* v, long B, long Tq, long Tk, long H, long Hkv, long D,
                           long ldq, long ldkv) {
  TP_OP("flash_attention_bwd16", ({{"B", B}, {"Tq", Tq}, {"Tk", Tk}, {"H", H}, {"Hkv", Hkv}, {"D", D}}), {
    flash_check(H, Hkv, Tq, Tk, D);
    const tp_sdpa_shape s = sdpa_shape(B, Tq, Tk, H, Hkv, D, ldq, ldkv);
    const long ws = B * Tq * H * D > 0 ? sdpa_workspace(s) : -1;
    if (ws >= 0) {
      sdpa_bwd16(s, ws, dq, dk, dv, dout, out, stats, q, kk, v);
    } else if (B * Tq * H * D > 0) {
      float* terms = static_cast<float*>(scratch(sizeof(float) * size_t(k::flash_bwd_scratch(B, H, Tq, D))));
      k::flash_attention_bwd(launcher(), dq, dk, dv, dout, b16p(out), stats, b16p(q), b16p(kk), b16p(v), B, Tq, Tk, H,
                             Hkv, D, ldq, ldkv, lt_bf16(), terms, false);  // (overwrites: exec/backends/ops.hpp)
    }
  });
}

// ---- element-wise and row ops ----
void add_bias(F* y, const F* x, const F* b, long N, long C, const F* r) {
  TP_OP("add_bias", ({{"N", N}, {"C", C}, {"residual", r != nullptr}}), k::add_bias(launcher(), y, x, b, N, C, r));
}
void bias_bwd(F* db, const F* dy, long N, long C, uint16_t* dy16) {
  TP_OP((dy16 ? "bias_bwd16" : "bias_bwd"), ({{"N", N}, {"C", C}}), {
    if (N > 0 && C > 0 && dy16)
      k::bias_bwd16(launcher(), db, reinterpret_cast<k::bf16*>(dy16), dy, N, C, column_scratch(N, C));
    else if (N > 0 && C > 0)
      k::bias_bwd(launcher(), db, dy, N, C, column_scratch(N, C));
  });
}
void add(F* y, const F* a, const F* b, long n) { TP_OP("add", ({{"n", n}}), k::add(launcher(), y, a, b, n)); }
void accumulate(F* y, const F* x, long n) {
  TP_OP("accumulate", ({{"n", n}}), k::accumulate(launcher(), y, x, n));
}
void scale(F* y, const F* x, F s, long n) { TP_OP("scale", ({{"n", n}}), k::scale(launcher(), y, x, s, n)); }
void fill(F* y, F v, long n) { TP_OP("fill", ({{"n", n}}), k::fill(launcher(), y, v, n)); }
void copy(F* dst, const F* src, long n) { TP_OP("copy", ({{"n", n}}), k::copy(launcher(), dst, src, n)); }
void copy_rows(F* dst, long ds, const F* src, long ss, long rows, long cols) {
  TP_OP("copy_rows", ({{"dst_stride", ds}, {"src_stride", ss}, {"rows", rows}, {"cols", cols}}), {
    if (rows > 0 && cols > 0)
      check(cudaMemcpy2DAsync(dst, sizeof(F) * ds, src, sizeof(F) * ss, sizeof(F) * cols, rows,
                              cudaMemcpyDeviceToDevice, g.stream),
            "cudaMemcpy2DAsync");
  });
}
void pack_bf16(uint16_t* y, const F* x, long n) {
  TP_OP("pack_bf16", ({{"n", n}}), k::pack_bf16(launcher(), reinterpret_cast<k::bf16*>(y), x, n));
}
void unpack_bf16(F* y, const uint16_t* x, long n) {
  TP_OP("unpack_bf16", ({{"n", n}}), k::copy(launcher(), y, reinterpret_cast<const k::bf16*>(x), n));
}
void layernorm_fwd(F* y, F* mean, F* rstd, const F* x, const F* w, const F* b, long N, long C, F eps) {
  TP_OP("layernorm_fwd", ({{"N", N}, {"C", C}}), k::layernorm_fwd(launcher(), y, mean, rstd, x, w, b, N, C, eps));
}
void layernorm_fwd16(uint16_t* y16, F* mean, F* rstd, const F* x, const F* w, const F* b, long N, long C, F eps) {
  TP_OP("layernorm_fwd16", ({{"N", N}, {"C", C}}),
        k::layernorm_fwd16(launcher(), reinterpret_cast<k::bf16*>(y16), mean, rstd, x, w, b, N, C, eps));
}
void layernorm_bwd(F* dx, F* dw, F* db, const F* dy, const F* x, const F* w, const F* mean, const F* rstd, long N,
                   long C) {
  TP_OP("layernorm_bwd", ({{"N", N}, {"C", C}}), {
    k::layernorm_bwd_dx(launcher(), dx, dy, x, w, mean, rstd, N, C);
    k::layernorm_bwd_wb(launcher(), dw, db, dy, x, mean, rstd, N, C, column_scratch(N, C));
  });
}
void layernorm_bwd16(F* dx, F* dw, F* db, const F* dy, const uint16_t* x16, const F* w, const F* mean, const F* rstd,
                     long N, long C) {
  const k::bf16* x = reinterpret_cast<const k::bf16*>(x16);
  TP_OP("layernorm_bwd16", ({{"N", N}, {"C", C}}), {
    k::layernorm_bwd_dx(launcher(), dx, dy, x, w, mean, rstd, N, C);
    k::layernorm_bwd_wb(launcher(), dw, db, dy, x, mean, rstd, N, C, column_scratch(N, C));
  });
}
void gelu_fwd(F* y, const F* x, long n) { TP_OP("gelu_fwd", ({{"n", n}}), k::gelu_fwd(launcher(), y, x, n)); }
void gelu_fwd16(uint16_t* y16, uint16_t* x16, const F* x, long n) {
  TP_OP("gelu_fwd16", ({{"n", n}}), k::gelu_fwd16(launcher(), reinterpret_cast<k::bf16*>(y16),
                                                   reinterpret_cast<k::bf16*>(x16), x, n));
}
void gelu_bwd(F* dx, const F* x, const F* dy, long n) {
  TP_OP("gelu_bwd", ({{"n", n}}), k::gelu_bwd(launcher(), dx, x, dy, n));
}
void gelu_bwd_set(F* dx, const F* x, const F* dy, long n) {
  TP_OP("gelu_bwd_set", ({{"n", n}}), k::gelu_bwd_set(launcher(), dx, x, dy, n));
}
void gelu_bwd_bias16(uint16_t* dx16, F* db, const uint16_t* x16, const F* dy, long N, long Fd) {
  TP_OP("gelu_bwd_bias16", ({{"N", N}, {"F", Fd}}), {
    if (N > 0 && Fd > 0)
      k::gelu_bwd_bias16(launcher(), reinterpret_cast<k::bf16*>(dx16), db, reinterpret_cast<const k::bf16*>(x16), dy,
                         N, Fd, column_scratch(N, Fd));
  });
}
void swiglu_fwd(F* y, const F* gu, long N, long Fd) {
  TP_OP("swiglu_fwd", ({{"N", N}, {"F", Fd}}), k::swiglu_fwd(launcher(), y, gu, N, Fd));
}
void swiglu_bwd(F* dgu, const F* gu, const F* dy, long N, long Fd) {
  TP_OP("swiglu_bwd", ({{"N", N}, {"F", Fd}}), k::swiglu_bwd(launcher(), dgu, gu, dy, N, Fd));
}
void swiglu_bwd_set(F* dgu, const F* gu, const F* dy, long N, long Fd) {
  TP_OP("swiglu_bwd_set", ({{"N", N}, {"F", Fd}}), k::swiglu_bwd_set(launcher(), dgu, gu, dy, N, Fd));
}

// Per-row losses into scratch, read back and summed in row order in double.
F cross_entropy_fwd(F* probs, const F* logits, const int32_t* targets, long N, long V) {
  double sum = 0;
  TP_OP("cross_entropy_fwd", ({{"N", N}, {"V", V}}), {
    if (N > 0) {
      F* loss = static_cast<F*>(scratch(sizeof(F) * size_t(N)));
      k::cross_entropy_fwd(launcher(), probs, loss, logits, targets, N, V);
      std::vector<F> h(static_cast<size_t>(N));
      check(cudaMemcpyAsync(h.data(), loss, sizeof(F) * size_t(N), cudaMemcpyDeviceToHost, g.stream), "loss copy");
      check(cudaStreamSynchronize(g.stream), "loss read-back");
      for (F l : h) sum += l;
    }
  });
  return F(sum);
}
void cross_entropy_bwd(F* dl, const F* probs, const int32_t* targets, long N, long V, F s) {
  TP_OP("cross_entropy_bwd", ({{"N", N}, {"V", V}}), k::cross_entropy_bwd<false>(launcher(), dl, probs, targets, N, V, 0L, s));
}
void row_max(F* mx, const F* x, long N, long V) {
  TP_OP("row_max", ({{"N", N}, {"V", V}}), k::ce_shard_max(launcher(), mx, x, N, V));
}
constexpr long kAllVocab = 1L << 40;  // "every id is in the shard" for the unsharded embedding ops
void embedding_fwd(F* out, const int32_t* tok, const F* wte, const F* wpe, long B, long T, long C) {
  TP_OP("embedding_fwd", ({{"B", B}, {"T", T}, {"C", C}}), k::embedding_fwd(launcher(), out, tok, wte, wpe, B, T, C, 0L, kAllVocab));
}
void embedding_bwd(F* dwte, F* dwpe, const F* dout, const int32_t* tok, long B, long T, long C) {
  TP_OP("embedding_bwd", ({{"B", B}, {"T", T}, {"C", C}}), k::embedding_bwd(launcher(), dwte, dwpe, dout, tok, B, T, C, 0L, kAllVocab));
}
// The shard's rows: dwte_shard[tokens[n] - v0] += dout[n] for tokens in [v0, v0 + Vl) (the kernel's own contract).
void embedding_shard_bwd(F* dwte, const F* dout, const int32_t* tok, long N, long C, long v0, long Vl) {
  TP_OP("embedding_shard_bwd", ({{"N", N}, {"C", C}, {"v0", v0}, {"Vl", Vl}}),
        k::embedding_bwd(launcher(), dwte, static_cast<F*>(nullptr), dout, tok, 1L, N, C, v0, Vl));
}
void adamw(F* p, const F* gr, F* m, F* v, long n, F lr, F b1, F b2, F eps, F wd, long t, F gscale) {
  TP_OP("adamw", ({{"n", n}, {"t", t}}),
        k::adamw(launcher(), p, gr, m, v, static_cast<F*>(nullptr), n, lr, b1, b2, eps, wd, t, gscale));
}
double sum_squares(const F* x, long n) {
  double r = 0;
  TP_OP("sum_squares", ({{"n", n}}), {
    const kernels::CudaLauncher l = launcher();
    double* s = static_cast<double*>(scratch(sizeof(double) * (size_t(l.max_grid) + 1)));
    k::sum_squares(l, s, s + 1, x, n);
    check(cudaMemcpyAsync(&r, s, sizeof r, cudaMemcpyDeviceToHost, g.stream), "sum copy");
    check(cudaStreamSynchronize(g.stream), "sum read-back");
  });
  return r;
}
double fp8_quantize(F* y, const F* x, long n, F s, int format) {
  double r = 0;
  if (n <= 0) return r;
  TP_OP("fp8_quantize", ({{"n", n}, {"format", format}}), {
    const kernels::CudaLauncher l = launcher();
    double* sc = static_cast<double*>(scratch(sizeof(double) * (size_t(l.max_grid) + 1)));
    k::fp8_quantize(l, sc, sc + 1, y, x, n, s, format);
    check(cudaMemcpyAsync(&r, sc, sizeof r, cudaMemcpyDeviceToHost, g.stream), "amax copy");
    check(cudaStreamSynchronize(g.stream), "amax read-back");
  });
  return r;
}

}  // namespace

void fill_f32_table(exec::OpTable<float>& t) {
  t.matmul = matmul, t.matmul16 = matmul16, t.linear_fwd = linear_fwd, t.add_bias = add_bias, t.bias_bwd = bias_bwd, t.add = add, t.accumulate = accumulate;
  t.scale = scale, t.fill = fill, t.copy = copy, t.copy_rows = copy_rows;
  t.pack_bf16 = pack_bf16, t.unpack_bf16 = unpack_bf16;
  t.layernorm_fwd = layernorm_fwd, t.layernorm_fwd16 = layernorm_fwd16, t.layernorm_bwd = layernorm_bwd, t.layernorm_bwd16 = layernorm_bwd16;
  t.gelu_fwd = gelu_fwd, t.gelu_fwd16 = gelu_fwd16, t.gelu_bwd = gelu_bwd, t.gelu_bwd_set = gelu_bwd_set, t.gelu_bwd_bias16 = gelu_bwd_bias16;
  t.swiglu_fwd = swiglu_fwd, t.swiglu_bwd = swiglu_bwd, t.swiglu_bwd_set = swiglu_bwd_set;
  t.attention_fwd = attention_fwd, t.attention_bwd = attention_bwd;
  t.attention_fwd_kv = attention_fwd_kv, t.attention_bwd_kv = attention_bwd_kv;
  t.flash_attention_fwd = flash_attention_fwd, t.flash_attention_bwd = flash_attention_bwd;
  t.flash_attention_fwd16 = flash_attention_fwd16, t.flash_attention_bwd16 = flash_attention_bwd16;
  t.cross_entropy_fwd = cross_entropy_fwd, t.cross_entropy_bwd = cross_entropy_bwd, t.row_max = row_max;
  t.embedding_fwd = embedding_fwd, t.embedding_bwd = embedding_bwd, t.embedding_shard_bwd = embedding_shard_bwd;
  t.adamw = adamw, t.sum_squares = sum_squares, t.fp8_quantize = fp8_quantize;
  fill_f32_shard_ops(t);  // 2D tensor parallelism and vocabulary-parallel pieces (backend_cuda_shard.cu)
  fill_f32_moe_ops(t);    // mixture-of-experts router, dispatch, combine (backend_cuda_moe.cu)
}

// The GPU backend computes in fp32 (bf16 next); fp64 is the CPU oracle's precision and is not faked here.
void fill_f64_unsupported(exec::OpTable<double>& t) {
#define TP_S(op) TP_STUB(t, op, "f64")
  TP_S(matmul); TP_S(matmul16); TP_S(linear_fwd); TP_S(add_bias); TP_S(bias_bwd); TP_S(add); TP_S(accumulate); TP_S(scale); TP_S(fill); TP_S(copy);
  TP_S(copy_rows); TP_S(pack_bf16); TP_S(unpack_bf16); TP_S(layernorm_fwd); TP_S(layernorm_fwd16); TP_S(layernorm_bwd); TP_S(layernorm_bwd16); TP_S(ln_shard_sum); TP_S(ln_shard_sqdev);
  TP_S(ln_shard_apply); TP_S(ln_shard_bwd_sums); TP_S(ln_shard_bwd_apply); TP_S(gelu_fwd); TP_S(gelu_fwd16); TP_S(gelu_bwd);
  TP_S(gelu_bwd_set); TP_S(gelu_bwd_bias16); TP_S(swiglu_fwd); TP_S(swiglu_bwd); TP_S(swiglu_bwd_set); TP_S(attention_fwd);
  TP_S(attention_bwd); TP_S(cross_entropy_fwd); TP_S(cross_entropy_bwd); TP_S(row_max); TP_S(max_combine);
  TP_S(ce_shard_exp); TP_S(ce_shard_finish); TP_S(ce_shard_target_grad); TP_S(embedding_fwd); TP_S(embedding_bwd);
  TP_S(embedding_shard_fwd); TP_S(embedding_shard_bwd); TP_S(add_positions); TP_S(positions_bwd); TP_S(adamw);
  TP_S(sum_squares); TP_S(fp8_quantize); TP_S(attention_fwd_kv); TP_S(attention_bwd_kv);
  TP_S(flash_attention_fwd); TP_S(flash_attention_bwd); TP_S(flash_attention_fwd16); TP_S(flash_attention_bwd16);
#undef TP_S
}

}  // namespace tp::cuda
