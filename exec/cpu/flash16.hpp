// flash16: flash attention on bf16-stored q, k, v and out (exec/ops.hpp flash_attention_fwd16 / _bwd16) for a
// backend without kernels that read bf16: the operands unpacked into T scratch (each its strided span), the T op,
// out packed. It is the ops' definition, so the backends whose kernels read bf16 directly (emu and cuda in fp32)
// must give exactly its result. Host memory only (the CPU backend; the emulator, whose memory is the host's, for
// fp64).
#pragma once
#include <cstdint>
#include <vector>

namespace tp::ops::cpu {

// Elements spanned by `rows` rows of `width` at row stride ld.
inline long flash16_span(long rows, long ld, long width) { return rows > 0 ? (rows - 1) * ld + width : 0; }

// unpack(T* y, const uint16_t* x, long n), pack(uint16_t* y, const T* x, long n), fwd: the T op's signature.
template <class T, class Unpack, class Pack, class Fwd>
void flash16_fwd_unpacked(Unpack unpack, Pack pack, Fwd fwd, uint16_t* out, T* stats, const uint16_t* q,
                          const uint16_t* k, const uint16_t* v, long B, long Tq, long Tk, long H, long Hkv, long D,
                          long ldq, long ldkv) {
  const long nq = flash16_span(B * Tq, ldq, H * D), nk = flash16_span(B * Tk, ldkv, Hkv * D), no = B * Tq * H * D;
  std::vector<T> tq(static_cast<size_t>(nq)), tk(static_cast<size_t>(nk)), tv(static_cast<size_t>(nk)),
      to(static_cast<size_t>(no));
  unpack(tq.data(), q, nq), unpack(tk.data(), k, nk), unpack(tv.data(), v, nk);
  fwd(to.data(), stats, tq.data(), tk.data(), tv.data(), B, Tq, Tk, H, Hkv, D, ldq, ldkv);
  pack(out, to.data(), no);
}

// bwd: the T op's signature (dq, dk, dv accumulate as its).
template <class T, class Unpack, class Bwd>
void flash16_bwd_unpacked(Unpack unpack, Bwd bwd, T* dq, T* dk, T* dv, const T* dout, const uint16_t* out,
                          const T* stats, const uint16_t* q, const uint16_t* k, const uint16_t* v, long B, long Tq,
                          long Tk, long H, long Hkv, long D, long ldq, long ldkv) {
  const long nq = flash16_span(B * Tq, ldq, H * D), nk = flash16_span(B * Tk, ldkv, Hkv * D), no = B * Tq * H * D;
  std::vector<T> tq(static_cast<size_t>(nq)), tk(static_cast<size_t>(nk)), tv(static_cast<size_t>(nk)),
      to(static_cast<size_t>(no));
  unpack(tq.data(), q, nq), unpack(tk.data(), k, nk), unpack(tv.data(), v, nk), unpack(to.data(), out, no);
  bwd(dq, dk, dv, dout, to.data(), stats, tq.data(), tk.data(), tv.data(), B, Tq, Tk, H, Hkv, D, ldq, ldkv);
}

}  // namespace tp::ops::cpu
