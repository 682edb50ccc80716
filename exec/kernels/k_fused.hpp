// k_fused: steps of a bf16 training step fused with the bf16 packing of what they make, so a tensor is read once
// where it was read two or three times, and a T-valued result that is only ever packed is never stored:
// - gelu_fwd16: GELU of fc1's pre-activation, written as bf16 only, and the pre-activation's own bf16 copy;
// - bias_bwd16: a linear layer's bias gradient (bias_bwd) and the output gradient's bf16 copy for the two GEMMs
//   that read it (pack_bf16), from one read of the gradient (the column sums of k_reduce.hpp with a source);
// - gelu_bwd_bias16: the GELU backward from fc1 stored as bf16 (gelu_bwd_set's value), written only as the bf16
//   copy the GEMMs read, and summed into the fc1 bias gradient.
// Invariants: the same bits as the unfused ops: the element values are the unfused kernels' expressions, the
// column sums add in ColumnSums' order, and each element's bf16 copy is written by the thread that reads it.
#pragma once
#include "exec/kernels/k_elementwise.hpp"
#include "exec/kernels/k_fp8.hpp"
#include "exec/kernels/k_reduce.hpp"

namespace tp::kernels {

// y16 = gelu(x) and x16 = x, both as bf16: gelu_fwd, then pack_bf16 of y and of x. Float: four
// elements per thread (ld4 / st4) when the views are on their vector boundaries.
template <class T>
struct GeluFwd16 {
  static constexpr const char* kName = "gelu_fwd16";
  bf16* y16;
  bf16* x16;
  const T* x;
  long n;
  TP_HD TP_INLINE void one(long i) const {
    const acc_t<T> v = ld(x[i]);
    y16[i] = bf16_of(ld(st<T>(gelu_value(v))));
    x16[i] = bf16_of(v);
  }
  template <class Ctx>
  TP_HD void operator()(Ctx& c) const {
    if constexpr (std::is_same_v<T, float>) {
      if (aligned_to(x, 16) && aligned_to(y16, 8) && aligned_to(x16, 8)) {
        const long n4 = n / 4;
        TP_GRID_LOOP(c, i, n4) {
          const F4 v = ld4(x + 4 * i);
          st4(y16 + 4 * i, F4{gelu_value(v.x), gelu_value(v.y), gelu_value(v.z), gelu_value(v.w)});
          st4(x16 + 4 * i, v);
        }
        TP_GRID_LOOP(c, i, n - 4 * n4) one(4 * n4 + i);
        return;
      }
    }
    TP_GRID_LOOP(c, i, n) one(i);
  }
};

// ColumnSums' source (k_reduce.hpp's ColRead) for bias_bwd16: dy[i], also written to dy16[i] as bf16.
template <class T>
struct ColPack16 {
  static constexpr const char* kName = "bias_bwd16";
  using Raw = acc_t<T>;
  const T* dy;
  bf16* dy16;
  TP_HD TP_INLINE Raw load(long i) const { return ld(dy[i]); }
  TP_HD TP_INLINE acc_t<T> take(Raw v, long i) const {
    dy16[i] = bf16_of(v);
    return v;
  }
};
// ColumnSums' source for gelu_bwd_bias16: dx = gelu'(x16[i]) dy[i] rounded to T (GeluBwd's value), written to
// dx16[i] as bf16.
template <class T>
struct ColGeluBwd16 {
  static constexpr const char* kName = "gelu_bwd_bias16";
  struct Raw {
    acc_t<T> x, dy;
  };
  const bf16* x16;
  const T* dy;
  bf16* dx16;
  TP_HD TP_INLINE Raw load(long i) const { return Raw{acc_t<T>(ld(x16[i])), acc_t<T>(ld(dy[i]))}; }
  TP_HD TP_INLINE acc_t<T> take(Raw r, long i) const {
    const acc_t<T> v = ld(st<T>(gelu_grad(r.x) * r.dy));
    dx16[i] = bf16_of(v);
    return v;
  }
};

template <class L, class T>
void gelu_fwd16(const L& launch, bf16* y16, bf16* x16, const T* x, long n) {
  launch(GeluFwd16<T>{y16, x16, x, n}, flat_dim(launch, std::is_same_v<T, float> ? (n + 3) / 4 : n));
}
// db [C] += the column sums of dy [N, C], and dy16 = dy as bf16. scratch: column_sums_scratch(N, C) elements.
template <class L, class T>
void bias_bwd16(const L& launch, T* db, bf16* dy16, const T* dy, long N, long C, acc_t<T>* scratch) {
  column_sums<L, T, false>(launch, nullptr, db, ColPack16<T>{dy, dy16}, (const T*)nullptr, nullptr, nullptr, N, C,
                           scratch);
}
// dx = gelu'(x16) dy over [N, F]: dx16 = dx as bf16, and db [F] (may be null) += its column sums. dx16 may be x16
// (each element is read, then written, by one thread). scratch as bias_bwd16's.
template <class L, class T>
void gelu_bwd_bias16(const L& launch, bf16* dx16, T* db, const bf16* x16, const T* dy, long N, long F,
                     acc_t<T>* scratch) {
  column_sums<L, T, false>(launch, nullptr, db, ColGeluBwd16<T>{x16, dy, dx16}, (const T*)nullptr, nullptr, nullptr, N,
                           F, scratch);
}

}  // namespace tp::kernels
