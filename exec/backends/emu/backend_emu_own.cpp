// backend_emu_own: the emu backend's own ops (exec/backends/ops.def TP_OWN_OP; every other op is a bridge of
// exec/kernels/k_ops.hpp on the emu runner): the GEMMs (the CPU backend's matmul behind the registry's checks),
// attention and flash attention. Attention is what a GPU does with cuBLASLt: per (batch, head) the products go through the CPU backend's matmul (the GEMMs) and the causal softmax and its backward through the
// softmax kernels (one launch over every head's rows); q, k, v and the gradients are permuted between the
// model's [B, T, H, D] and heads-major [B, H, T, D] scratch by a kernel, so each head's GEMM sees a contiguous
// matrix. Flash attention is the fused kernels of k_flash.hpp (the CUDA backend's), bf16 operands as the CPU's
// GEMMs are set.
// Invariants: as backend_emu.cpp — every argument is checked with need() before a kernel runs; scratch is the
// backend's own (registered emu memory, freed when the op returns).
#include <cmath>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "exec/backends/cpu/flash16.hpp"
#include "exec/backends/cpu/ops_cpu.hpp"
#include "exec/backends/emu/backend_emu.hpp"
#include "exec/kernels/k_bridge.hpp"
#include "exec/kernels/k_flash.hpp"

namespace tp::exec::emu_be {
namespace {
namespace k = tp::kernels;

// ---- attention ----

// Contiguous scratch in emu memory for one op call.
template <class T>
struct Scratch {
  T* p = nullptr;
  explicit Scratch(long n) : p(static_cast<T*>(emu_backend().alloc(bytes_of<T>(n > 0 ? n : 1)))) {}
  ~Scratch() { emu_backend().free(p); }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
};
// [B, Tn, H, D] <-> heads-major [B, H, Tn, D] (one launch for all heads).
template <class T>
void to_heads(T* dst, const T* src, long B, long Tn, long H, long D) {
  launcher()(k::PermuteHeads<T, true>{dst, src, B, Tn, H, D}, k::flat_dim(launcher(), B * Tn * H * D));
}
template <class T>
void from_heads(T* dst, const T* src, long B, long Tn, long H, long D) {
  launcher()(k::PermuteHeads<T, false>{dst, src, B, Tn, H, D}, k::flat_dim(launcher(), B * Tn * H * D));
}

// The unfused attention core of Tq queries over Tk keys (Tq = Tk: the square causal form; Tq < Tk: context
// parallelism's rectangle, the mask aligned bottom-right): one body for both, the op's name in its checks.
template <class T>
void check_attention(const char* op, const T* q, const T* k, const T* v, const T* att, long B, long Tq, long Tk, long H,
                     long Hkv, long D) {
  need(op, "q", q, bytes_of<T>(B * Tq * H * D));
  need(op, "k", k, bytes_of<T>(B * Tk * Hkv * D));
  need(op, "v", v, bytes_of<T>(B * Tk * Hkv * D));
  need(op, "att", att, bytes_of<T>(B * H * Tq * Tk));
}

// att = softmax_causal(scale Q Kᵀ), out = att V: q, k, v permuted to heads-major, one scores GEMM per (b, h)
// straight into att, one softmax launch over all B H Tq rows (rect: the rectangular causal kernel,
// softmax_fwd_rect, the cuda backend's too; else causal by row % Tq), one GEMM per (b, h) for the output,
// permuted back.
template <class T>
void attention_fwd_any(const char* op, bool rect, T* out, T* att, const T* q, const T* k, const T* v, long B, long Tq,
                       long Tk, long H, long Hkv, long D) {
  check_attention(op, q, k, v, att, B, Tq, Tk, H, Hkv, D);
  need(op, "out", out, bytes_of<T>(B * Tq * H * D));
  if (B * Tq * H * D <= 0) return;
  const long group = H / Hkv, qd = Tq * D, kd = Tk * D, tt = Tq * Tk;
  const T sc = T(1) / std::sqrt(T(D));
  Scratch<T> Q(B * H * qd), K(B * Hkv * kd), V(B * Hkv * kd), O(B * H * qd);
  to_heads(Q.p, q, B, Tq, H, D);
  to_heads(K.p, k, B, Tk, Hkv, D);
  to_heads(V.p, v, B, Tk, Hkv, D);
  for (long b = 0; b < B; ++b)
    for (long h = 0; h < H; ++h)
      ops::cpu::matmul<T>(att + (b * H + h) * tt, Q.p + (b * H + h) * qd, K.p + (b * Hkv + h / group) * kd, Tq, Tk, D,
                          false, true, sc, T(0));
  if (rect) k::softmax_fwd_rect(launcher(), att, att, B * H * Tq, Tk, Tq, k::acc_t<T>(1));
  else k::softmax_fwd(launcher(), att, att, B * H * Tq, Tk, k::acc_t<T>(1), true);
  for (long b = 0; b < B; ++b)
    for (long h = 0; h < H; ++h)
      ops::cpu::matmul<T>(O.p + (b * H + h) * qd, att + (b * H + h) * tt, V.p + (b * Hkv + h / group) * kd, Tq, D, Tk,
                          false, false, T(1), T(0));
  from_heads(out, O.p, B, Tq, H, D);
}

// dV += Pᵀ dO; dS = softmax_bwd(P, dO Vᵀ) (one kernel launch over all rows, in place; no mask: P is 0 there);
// dQ += scale dS K; dK += scale dSᵀ Q. The gradients are permuted to heads-major, accumulated there by the GEMMs
// (beta 1; a kv head collects its query heads in order) and permuted back.
template <class T>
void attention_bwd_any(const char* op, T* dq, T* dk, T* dv, const T* dout, const T* att, const T* q, const T* k,
                       const T* v, long B, long Tq, long Tk, long H, long Hkv, long D) {
  check_attention(op, q, k, v, att, B, Tq, Tk, H, Hkv, D);
  need(op, "dq", dq, bytes_of<T>(B * Tq * H * D));
  need(op, "dk", dk, bytes_of<T>(B * Tk * Hkv * D));
  need(op, "dv", dv, bytes_of<T>(B * Tk * Hkv * D));
  need(op, "dout", dout, bytes_of<T>(B * Tq * H * D));
  if (B * Tq * H * D <= 0) return;
  const long group = H / Hkv, qd = Tq * D, kd = Tk * D, tt = Tq * Tk;
  const T sc = T(1) / std::sqrt(T(D));
  Scratch<T> Q(B * H * qd), K(B * Hkv * kd), V(B * Hkv * kd), dO(B * H * qd), dQ(B * H * qd), dK(B * Hkv * kd),
      dV(B * Hkv * kd), dS(B * H * tt);
  to_heads(Q.p, q, B, Tq, H, D);
  to_heads(K.p, k, B, Tk, Hkv, D);
  to_heads(V.p, v, B, Tk, Hkv, D);
  to_heads(dO.p, dout, B, Tq, H, D);
  to_heads(dQ.p, dq, B, Tq, H, D);
  to_heads(dK.p, dk, B, Tk, Hkv, D);
  to_heads(dV.p, dv, B, Tk, Hkv, D);
  for (long b = 0; b < B; ++b)
    for (long h = 0; h < H; ++h) {
      const long qh = (b * H + h) * qd, kh = (b * Hkv + h / group) * kd;
      ops::cpu::matmul<T>(dV.p + kh, att + (b * H + h) * tt, dO.p + qh, Tk, D, Tq, true, false, T(1), T(1));
      ops::cpu::matmul<T>(dS.p + (b * H + h) * tt, dO.p + qh, V.p + kh, Tq, Tk, D, false, true, T(1), T(0));
    }
  k::softmax_bwd<true>(launcher(), dS.p, att, dS.p, B * H * Tq, Tk, k::acc_t<T>(1));
  for (long b = 0; b < B; ++b)
    for (long h = 0; h < H; ++h) {
      const long qh = (b * H + h) * qd, kh = (b * Hkv + h / group) * kd;
      const T* S = dS.p + (b * H + h) * tt;
      ops::cpu::matmul<T>(dQ.p + qh, S, K.p + kh, Tq, D, Tk, false, false, sc, T(1));
      ops::cpu::matmul<T>(dK.p + kh, S, Q.p + qh, Tk, D, Tq, true, false, sc, T(1));
    }
  from_heads(dq, dQ.p, B, Tq, H, D);
  from_heads(dk, dK.p, B, Tk, Hkv, D);
  from_heads(dv, dV.p, B, Tk, Hkv, D);
}

void flash_head_dim(const char* op, long D) {
  if (D > k::kFlashMaxHeadDim)
    throw std::runtime_error(std::string(op) + ": head dim " + std::to_string(D) + " above the flash kernels' " +
                             std::to_string(k::kFlashMaxHeadDim));
}

// Elements spanned by `rows` rows of `width` at row stride ld.
long strided(long rows, long ld, long width) { return rows > 0 ? (rows - 1) * ld + width : 0; }

// The flash ops on S storage of q, k, v and out: T, or uint16_t (bf16, the *16 ops): fp32 reads and writes bf16
// in the kernels; fp64 (the oracle precision) is exec/backends/cpu/flash16.hpp's definition around the kernels.
template <class T, class S>
void flash_fwd_any(const char* op, S* out, T* stats, const S* q, const S* k, const S* v, long B, long Tq, long Tk,
                   long H, long Hkv, long D, long ldq, long ldkv) {
  need(op, "q", q, bytes_of<S>(strided(B * Tq, ldq, H * D)));
  need(op, "k", k, bytes_of<S>(strided(B * Tk, ldkv, Hkv * D)));
  need(op, "v", v, bytes_of<S>(strided(B * Tk, ldkv, Hkv * D)));
  need(op, "stats", stats, bytes_of<T>(B * H * Tq * 2));
  need(op, "out", out, bytes_of<S>(B * Tq * H * D));
  flash_head_dim(op, D);
  if (B * Tq * H * D <= 0) return;
  const bool b16 = ops::cpu::bf16_gemm();
  if constexpr (std::is_same_v<S, T>) {
    k::flash_attention_fwd(launcher(), out, stats, q, k, v, B, Tq, Tk, H, Hkv, D, ldq, ldkv, b16);
  } else if constexpr (std::is_same_v<T, float>) {
    auto bf = [](const uint16_t* p) { return reinterpret_cast<const k::bf16*>(p); };
    k::flash_attention_fwd(launcher(), reinterpret_cast<k::bf16*>(out), stats, bf(q), bf(k), bf(v), B, Tq, Tk, H, Hkv, D,
                           ldq, ldkv, b16);
  } else {
    ops::cpu::flash16_fwd_unpacked<T>(
        [](T* y, const uint16_t* x, long n) { k::copy(launcher(), y, reinterpret_cast<const k::bf16*>(x), n); },
        [](uint16_t* y, const T* x, long n) { k::pack_bf16(launcher(), reinterpret_cast<k::bf16*>(y), x, n); },
        [b16](T* o, T* st, const T* tq, const T* tk, const T* tv, long b, long tq_, long tk_, long h, long hkv, long d,
              long lq, long lkv) { k::flash_attention_fwd(launcher(), o, st, tq, tk, tv, b, tq_, tk_, h, hkv, d, lq, lkv, b16); },
        out, stats, q, k, v, B, Tq, Tk, H, Hkv, D, ldq, ldkv);
  }
}

template <class T, class S>
void flash_bwd_any(const char* op, T* dq, T* dk, T* dv, const T* dout, const S* out, const T* stats, const S* q,
                   const S* k, const S* v, long B, long Tq, long Tk, long H, long Hkv, long D, long ldq, long ldkv) {
  need(op, "q", q, bytes_of<S>(strided(B * Tq, ldq, H * D)));
  need(op, "dq", dq, bytes_of<T>(strided(B * Tq, ldq, H * D)));
  need(op, "dout", dout, bytes_of<T>(B * Tq * H * D));
  need(op, "out", out, bytes_of<S>(B * Tq * H * D));
  for (auto [name, p] : {std::pair<const char*, const S*>{"k", k}, {"v", v}})
    need(op, name, p, bytes_of<S>(strided(B * Tk, ldkv, Hkv * D)));
  for (auto [name, p] : {std::pair<const char*, const T*>{"dk", dk}, {"dv", dv}})
    need(op, name, p, bytes_of<T>(strided(B * Tk, ldkv, Hkv * D)));
  need(op, "stats", stats, bytes_of<T>(B * H * Tq * 2));
  flash_head_dim(op, D);
  if (B * Tq * H * D <= 0) return;
  const bool b16 = ops::cpu::bf16_gemm();
  std::vector<float> terms(size_t(k::flash_bwd_scratch(B, H, Tq, D)));
  // (accumulate: the T op; the bf16 op overwrites, as exec/backends/ops.hpp says, and the fp64 one through the definition)
  auto run = [&terms, b16](T* gq, T* gk, T* gv, const T* go, const auto* o, const T* st, const auto* tq, const auto* tk,
                           const auto* tv, long b, long tq_, long tk_, long h, long hkv, long d, long lq, long lkv,
                           bool accumulate = true) {
    k::flash_attention_bwd(launcher(), gq, gk, gv, go, o, st, tq, tk, tv, b, tq_, tk_, h, hkv, d, lq, lkv, b16,
                           terms.data(), accumulate);
  };
  if constexpr (std::is_same_v<S, T>) {
    run(dq, dk, dv, dout, out, stats, q, k, v, B, Tq, Tk, H, Hkv, D, ldq, ldkv);
  } else if constexpr (std::is_same_v<T, float>) {
    auto bf = [](const uint16_t* p) { return reinterpret_cast<const k::bf16*>(p); };
    run(dq, dk, dv, dout, bf(out), stats, bf(q), bf(k), bf(v), B, Tq, Tk, H, Hkv, D, ldq, ldkv, false);
  } else {
    ops::cpu::flash16_bwd_unpacked<T>(
        [](T* y, const uint16_t* x, long n) { k::copy(launcher(), y, reinterpret_cast<const k::bf16*>(x), n); }, run,
        dq, dk, dv, dout, out, stats, q, k, v, B, Tq, Tk, H, Hkv, D, ldq, ldkv);
  }
}

}  // namespace

}  // namespace tp::exec::emu_be

// The backend's own ops (exec/backends/ops.def TP_OWN_OP): the GEMMs through the CPU backend's matmul with the
// registry's checks, linear_fwd as its three ops, attention and flash attention.
namespace tp::exec::emu_be::own {

template <class T>
void matmul(T* C, const T* A, const T* B, long M, long N, long K, bool ta, bool tb, T alpha, T beta) {
  need("matmul", "A", A, bytes_of<T>(M * K));
  need("matmul", "B", B, bytes_of<T>(K * N));
  need("matmul", "C", C, bytes_of<T>(M * N));
  ops::cpu::matmul<T>(C, A, B, M, N, K, ta, tb, alpha, beta);
}
template <class T>
void matmul_fp8(T* C, const T* A, const T* sa, int fa, const T* B, const T* sb, int fb, long M, long N, long K, bool ta,
                bool tb, T alpha, T beta) {
  need("matmul_fp8", "sa", sa, bytes_of<T>(2));
  need("matmul_fp8", "sb", sb, bytes_of<T>(2));
  need("matmul_fp8", "A", A, bytes_of<T>(M * K));
  need("matmul_fp8", "B", B, bytes_of<T>(K * N));
  need("matmul_fp8", "C", C, bytes_of<T>(M * N));
  ops::cpu::matmul_fp8<T>(C, A, sa, fa, B, sb, fb, M, N, K, ta, tb, alpha, beta);
}
template <class T>
void matmul16(T* C, const T* A, const uint16_t* A16, const T* B, const uint16_t* B16, long M, long N, long K, bool ta,
              bool tb, T alpha, T beta) {
  if ((A == nullptr) == (A16 == nullptr) || (B == nullptr) == (B16 == nullptr))
    throw std::runtime_error("emu backend: matmul16: each operand is given exactly once (A or A16, B or B16)");
  if (A16) need("matmul16", "A16", A16, bytes_of<uint16_t>(M * K));
  else need("matmul16", "A", A, bytes_of<T>(M * K));
  if (B16) need("matmul16", "B16", B16, bytes_of<uint16_t>(K * N));
  else need("matmul16", "B", B, bytes_of<T>(K * N));
  need("matmul16", "C", C, bytes_of<T>(M * N));
  ops::cpu::matmul16<T>(C, A, A16, B, B16, M, N, K, ta, tb, alpha, beta);
}
template <class T>
void linear_fwd(T* y, T* pre, const T* x, const uint16_t* x16, const T* w, const uint16_t* w16, const T* b, long M,
                long N, long K) {
  composed_linear_fwd<emu_backend, T>(y, pre, x, x16, w, w16, b, M, N, K);
}


template <class T>
void attention_fwd(T* out, T* att, const T* q, const T* k, const T* v, long B, long Tn, long H, long Hkv, long D) {
  attention_fwd_any("attention_fwd", false, out, att, q, k, v, B, Tn, Tn, H, Hkv, D);
}
template <class T>
void attention_bwd(T* dq, T* dk, T* dv, const T* dout, const T* att, const T* q, const T* k, const T* v, long B,
                   long Tn, long H, long Hkv, long D) {
  attention_bwd_any("attention_bwd", dq, dk, dv, dout, att, q, k, v, B, Tn, Tn, H, Hkv, D);
}
template <class T>
void attention_fwd_kv(T* out, T* att, const T* q, const T* k, const T* v, long B, long Tq, long Tk, long H, long Hkv,
                      long D) {
  attention_fwd_any("attention_fwd_kv", true, out, att, q, k, v, B, Tq, Tk, H, Hkv, D);
}
template <class T>
void attention_bwd_kv(T* dq, T* dk, T* dv, const T* dout, const T* att, const T* q, const T* k, const T* v, long B,
                      long Tq, long Tk, long H, long Hkv, long D) {
  attention_bwd_any("attention_bwd_kv", dq, dk, dv, dout, att, q, k, v, B, Tq, Tk, H, Hkv, D);
}

template <class T>
void flash_attention_fwd(T* out, T* stats, const T* q, const T* k, const T* v, long B, long Tq, long Tk, long H,
                         long Hkv, long D, long ldq, long ldkv) {
  flash_fwd_any("flash_attention_fwd", out, stats, q, k, v, B, Tq, Tk, H, Hkv, D, ldq, ldkv);
}
template <class T>
void flash_attention_bwd(T* dq, T* dk, T* dv, const T* dout, const T* out, const T* stats, const T* q, const T* k,
                         const T* v, long B, long Tq, long Tk, long H, long Hkv, long D, long ldq, long ldkv) {
  flash_bwd_any("flash_attention_bwd", dq, dk, dv, dout, out, stats, q, k, v, B, Tq, Tk, H, Hkv, D, ldq, ldkv);
}
template <class T>
void flash_attention_fwd16(uint16_t* out, T* stats, const uint16_t* q, const uint16_t* k, const uint16_t* v, long B,
                           long Tq, long Tk, long H, long Hkv, long D, long ldq, long ldkv) {
  flash_fwd_any("flash_attention_fwd16", out, stats, q, k, v, B, Tq, Tk, H, Hkv, D, ldq, ldkv);
}
template <class T>
void flash_attention_bwd16(T* dq, T* dk, T* dv, const T* dout, const uint16_t* out, const T* stats, const uint16_t* q,
                           const uint16_t* k, const uint16_t* v, long B, long Tq, long Tk, long H, long Hkv, long D,
                           long ldq, long ldkv) {
  flash_bwd_any("flash_attention_bwd16", dq, dk, dv, dout, out, stats, q, k, v, B, Tq, Tk, H, Hkv, D, ldq, ldkv);
}

}  // namespace tp::exec::emu_be::own

namespace tp::exec::emu_be {

template <class T>
void set_own_ops(OpTable<T>& t) {
#define TP_OP(RET, NAME, PARAMS, ARGS)
#define TP_OWN_OP(RET, NAME, PARAMS, ARGS) t.NAME = &own::NAME<T>;
#include "exec/backends/ops.def"
}
template void set_own_ops<float>(OpTable<float>&);
template void set_own_ops<double>(OpTable<double>&);

}  // namespace tp::exec::emu_be
