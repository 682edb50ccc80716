// flash16: flash attention on bf16-stored q, k, v and out (exec/backends/ops.hpp flash_attention_fwd16 / _bwd16) for a
// backend without kernels that read bf16: the operands unpacked into T scratch (the fused QKV once, or each its
// strided span), the T op, out packed. It is the ops' definition, so the backends whose kernels read bf16 directly (emu and cuda in fp32)
// must give exactly its result. Host memory only (the CPU backend; the emulator, whose memory is the host's, for
// fp64).
#pragma once
#include <algorithm>
#include <cstdint>
#include <vector>

namespace tp::ops::cpu {

// Elements spanned by `rows` rows of `width` at row stride ld.
inline long flash16_span(long rows, long ld, long width) { return rows > 0 ? (rows - 1) * ld + width : 0; }

// q, k, v unpacked into tq (the model's call: three column blocks of one fused QKV buffer, unpacked once as one span;
// else each its own span); qp, kp, vp point at them inside tq.
template <class T, class Unpack>
void flash16_unpack_qkv(Unpack unpack, std::vector<T>& tq, const T*& qp, const T*& kp, const T*& vp, const uint16_t* q,
                        const uint16_t* k, const uint16_t* v, long nq, long nk) {
  const uint16_t* lo = std::min({q, k, v});
  const uint16_t* hi = std::max({q + nq, k + nk, v + nk});
  if (hi - lo <= nq + 2 * nk) {
    tq.resize(static_cast<size_t>(hi - lo));
    unpack(tq.data(), lo, long(hi - lo));
    qp = tq.data() + (q - lo), kp = tq.data() + (k - lo), vp = tq.data() + (v - lo);
    return;
  }
  tq.resize(static_cast<size_t>(nq + 2 * nk));
  unpack(tq.data(), q, nq), unpack(tq.data() + nq, k, nk), unpack(tq.data() + nq + nk, v, nk);
  qp = tq.data(), kp = tq.data() + nq, vp = tq.data() + nq + nk;
}

// unpack(T* y, const uint16_t* x, long n), pack(uint16_t* y, const T* x, long n), fwd: the T op's signature.
template <class T, class Unpack, class Pack, class Fwd>
void flash16_fwd_unpacked(Unpack unpack, Pack pack, Fwd fwd, uint16_t* out, T* stats, const uint16_t* q,
                          const uint16_t* k, const uint16_t* v, long B, long Tq, long Tk, long H, long Hkv, long D,
                          long ldq, long ldkv) {
  const long nq = flash16_span(B * Tq, ldq, H * D), nk = flash16_span(B * Tk, ldkv, Hkv * D), no = B * Tq * H * D;
  std::vector<T> tq, to(static_cast<size_t>(no));
  const T *qp, *kp, *vp;
  flash16_unpack_qkv(unpack, tq, qp, kp, vp, q, k, v, nq, nk);
  fwd(to.data(), stats, qp, kp, vp, B, Tq, Tk, H, Hkv, D, ldq, ldkv);
  pack(out, to.data(), no);
}

// bwd: the T op's signature (accumulating); dq, dk, dv are zeroed first (their columns only: the bf16 op
// overwrites them).
template <class T, class Unpack, class Bwd>
void flash16_bwd_unpacked(Unpack unpack, Bwd bwd, T* dq, T* dk, T* dv, const T* dout, const uint16_t* out,
                          const T* stats, const uint16_t* q, const uint16_t* k, const uint16_t* v, long B, long Tq,
                          long Tk, long H, long Hkv, long D, long ldq, long ldkv) {
  const long nq = flash16_span(B * Tq, ldq, H * D), nk = flash16_span(B * Tk, ldkv, Hkv * D), no = B * Tq * H * D;
  for (long r = 0; r < B * Tq; ++r) std::fill(dq + r * ldq, dq + r * ldq + H * D, T(0));
  for (long r = 0; r < B * Tk; ++r) {
    std::fill(dk + r * ldkv, dk + r * ldkv + Hkv * D, T(0));
    std::fill(dv + r * ldkv, dv + r * ldkv + Hkv * D, T(0));
  }
  std::vector<T> tq, to(static_cast<size_t>(no));
  const T *qp, *kp, *vp;
  flash16_unpack_qkv(unpack, tq, qp, kp, vp, q, k, v, nq, nk);
  unpack(to.data(), out, no);
  bwd(dq, dk, dv, dout, to.data(), stats, qp, kp, vp, B, Tq, Tk, H, Hkv, D, ldq, ldkv);
}

}  // namespace tp::ops::cpu
