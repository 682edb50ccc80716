// backend_cuda_ops: the CUDA backend's op tables. fp32: every op of exec/backends/ops.def; the kernel ops through the
// bridges of exec/kernels/k_ops.hpp on the CUDA runner (the code the emu backend runs in CI), the backend's own ops
// here: cuBLASLt GEMMs (matmul, linear_fwd with its epilogues; attention as strided-batched GEMMs around the softmax
// kernels) and flash attention (the fused kernels of k_flash.hpp, or cuDNN's SDPA for the bf16-stored forms).
// fp64: entries that throw "op X is not supported on cuda".
// Invariants: everything on g.stream; an error names the op and its shapes (run_op, backend_cuda_parts.hpp).
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
#include "exec/kernels/k_ops.hpp"

namespace tp::kernels {
// The kernels and the bridges are compiled for the device in kernels.cu only.
TP_CUDA_INSTANTIATE(extern template)
using CR = cuda::CudaRunner;
using T = float;
using ops::CeForm;
#define TP_OP(RET, NAME, PARAMS, ARGS) extern template RET NAME##_op<CR, float>(const CR&, TP_OP_UNPAREN PARAMS);
#define TP_OWN_OP(RET, NAME, PARAMS, ARGS)
#include "exec/backends/ops.def"
}  // namespace tp::kernels

namespace tp::cuda {

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

// ---- the backend's own ops (exec/backends/ops.def TP_OWN_OP); every other op is a bridge of exec/kernels/k_ops.hpp ----
namespace own {

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
  run_op("matmul", {{"M", M}, {"N", N}, {"K", K}, {"trans_a", ta}, {"trans_b", tb}, {"align", align3(A, B, C)}}, [&] {
    if (K == 0) {
      empty_product(C, beta, M * N);
    } else {
      lt_gemm(matmul_args(C, A, B, M, N, K, ta, tb, alpha, beta));
    }
  });
}

// fp8 operands (training.precision "fp8"): where the device and shape take it (lt_fp8_usable), A and B are packed to fp8
// bytes in cuBLASLt's TN layout (Fp8Pack: op(A) as [M, K], op(B)ᵀ as [N, K], each byte the cast's grid value, with
// the scale sa[0] / sb[0] read on the device) and multiplied by cuBLASLt's fp8 kernels, the inverse scales sa[1] and
// sb[1] its scale pointers (device memory: a captured graph reads each step's); otherwise, or when cuBLASLt has no
// algorithm, matmul's GEMM on the casts' values (the emulation, as every other backend).
void matmul_fp8(F* C, const F* A, const F* sa, int fa, const F* B, const F* sb, int fb, long M, long N, long K, bool ta,
                bool tb, F alpha, F beta) {
  run_op("matmul_fp8", {{"M", M}, {"N", N}, {"K", K}, {"trans_a", ta}, {"trans_b", tb}, {"fa", fa}, {"fb", fb}}, [&] {
    if (K == 0) {
      empty_product(C, beta, M * N);
      return;
    }
    if (lt_fp8_usable(M, N, K, fa, fb)) {
      auto* a8 = static_cast<uint8_t*>(lt_fp8_scratch(0, size_t(M * K)));
      auto* b8 = static_cast<uint8_t*>(lt_fp8_scratch(1, size_t(N * K)));
      // (A is stored [K, M] when ta, else [M, K]; B [N, K] when tb, else [K, N]: gemm_plan.hpp fp8_transpose_a / _b)
      k::fp8_pack(launcher(), a8, A, ta ? K : M, ta ? M : K, ta ? M : K, sa, fa, fp8_transpose_a(ta));
      k::fp8_pack(launcher(), b8, B, tb ? N : K, tb ? K : N, tb ? K : N, sb, fb, fp8_transpose_b(tb));
      if (lt_fp8_gemm(C, a8, b8, sa + 1, sb + 1, M, N, K, fa, fb, alpha, beta)) return;
    }
    lt_gemm(matmul_args(C, A, B, M, N, K, ta, tb, alpha, beta));
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
  run_op("matmul16", {{"M", M}, {"N", N}, {"K", K}, {"trans_a", ta}, {"trans_b", tb}, {"A16", A16 != nullptr},
                      {"B16", B16 != nullptr}, {"align", align3(a, b, C)}}, [&] {
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
  run_op("linear_fwd", {{"M", M}, {"N", N}, {"K", K}, {"bias", b != nullptr}, {"gelu", pre != nullptr},
                        {"x16", x16 != nullptr}, {"w16", w16 != nullptr}}, [&] {
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
  run_op("attention_fwd", {{"B", B}, {"T", T}, {"H", H}, {"Hkv", Hkv}, {"D", D}}, [&] {
    if (Hkv <= 0 || H % Hkv != 0) throw std::runtime_error("H must be a multiple of Hkv");
    const AttnDims d{B, T, H, Hkv, D};
    for (const GemmArgs& a : attn_qk("attention_fwd q·kᵀ", att, q, kk, d)) lt_gemm(a);
    attention_fwd_rest(out, att, v, d);
  });
}

// dP (scratch [B, H, T, T]) = dout vᵀ; dS = softmax backward of dP, in place; then the gradient GEMMs.
void attention_bwd(F* dq, F* dk, F* dv, const F* dout, const F* att, const F* q, const F* kk, const F* v, long B,
                   long T, long H, long Hkv, long D) {
  run_op("attention_bwd", {{"B", B}, {"T", T}, {"H", H}, {"Hkv", Hkv}, {"D", D}}, [&] {
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
  run_op("attention_fwd_kv", {{"B", B}, {"Tq", Tq}, {"Tk", Tk}, {"H", H}, {"Hkv", Hkv}, {"D", D}}, [&] {
    if (Hkv <= 0 || H % Hkv != 0) throw std::runtime_error("H must be a multiple of Hkv");
    if (Tq > Tk) throw std::runtime_error("Tq must not exceed Tk");
    const AttnDims d{B, Tq, H, Hkv, D, Tk};
    for (const GemmArgs& a : attn_qk("attention_fwd_kv q·kᵀ", att, q, kk, d)) lt_gemm(a);
    attention_fwd_rest(out, att, v, d);
  });
}
void attention_bwd_kv(F* dq, F* dk, F* dv, const F* dout, const F* att, const F* q, const F* kk, const F* v, long B,
                      long Tq, long Tk, long H, long Hkv, long D) {
  run_op("attention_bwd_kv", {{"B", B}, {"Tq", Tq}, {"Tk", Tk}, {"H", H}, {"Hkv", Hkv}, {"D", D}}, [&] {
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
  run_op("flash_attention_fwd", {{"B", B}, {"Tq", Tq}, {"Tk", Tk}, {"H", H}, {"Hkv", Hkv}, {"D", D}}, [&] {
    flash_check(H, Hkv, Tq, Tk, D);
    if (B * Tq * H * D > 0)
      k::flash_attention_fwd(launcher(), out, stats, q, kk, v, B, Tq, Tk, H, Hkv, D, ldq, ldkv, lt_bf16());
  });
}
void flash_attention_bwd(F* dq, F* dk, F* dv, const F* dout, const F* out, const F* stats, const F* q, const F* kk,
                         const F* v, long B, long Tq, long Tk, long H, long Hkv, long D, long ldq, long ldkv) {
  run_op("flash_attention_bwd", {{"B", B}, {"Tq", Tq}, {"Tk", Tk}, {"H", H}, {"Hkv", Hkv}, {"D", D}}, [&] {
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
  run_op("flash_attention_fwd16", {{"B", B}, {"Tq", Tq}, {"Tk", Tk}, {"H", H}, {"Hkv", Hkv}, {"D", D}}, [&] {
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
  run_op("flash_attention_bwd16", {{"B", B}, {"Tq", Tq}, {"Tk", Tk}, {"H", H}, {"Hkv", Hkv}, {"D", D}}, [&] {
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

}  // namespace own
}  // namespace

// The fp32 table: every op of exec/backends/ops.def, the kernel ops through their bridges on the CUDA runner.
void fill_f32_table(exec::OpTable<float>& t) {
  using T = float;
  using ops::CeForm;
#define TP_OP(RET, NAME, PARAMS, ARGS) \
  t.NAME = [] PARAMS -> RET { return kernels::NAME##_op(CudaRunner{}, TP_OP_UNPAREN ARGS); };
#define TP_OWN_OP(RET, NAME, PARAMS, ARGS) t.NAME = &own::NAME;
#include "exec/backends/ops.def"
}

// The GPU backend computes in fp32 (bf16 next); fp64 is the CPU oracle's precision and is not faked here.
void fill_f64_unsupported(exec::OpTable<double>& t) {
#define TP_OP(RET, NAME, PARAMS, ARGS) TP_STUB(t, NAME, "f64");
#include "exec/backends/ops.def"
}

}  // namespace tp::cuda
