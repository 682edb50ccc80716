// k_attn_glue: the small kernels between a library's fused attention (cuDNN's SDPA on the CUDA backend,
// exec/kernels/cuda/cudnn_sdpa.h) and exec/backends/ops.hpp's flash contract: the softmax statistics as ops' pairs from and
// to the library's log-sum-exp, and a strided bf16 -> fp32 row conversion (the library writes bf16 gradients; the
// ops overwrite fp32 ones in place in the fused QKV gradient's rows).
// Invariants: the pair (m, c) of a query row means P = exp(score - m) * c; a row's log-sum-exp l is the pair (l, 1)
// and the pair (m, c) the log-sum-exp m - log c, so either attention's backward can read the other's forward.
// Each output element is written by one thread; grid-stride loops; no shared memory.
#pragma once
#include <cmath>

#include "exec/kernels/k_elementwise.hpp"

namespace tp::kernels {

// stats[2 i] = lse[i], stats[2 i + 1] = 1 for i < n (n query rows).
template <class T>
struct StatsFromLse {
  static constexpr const char* kName = "stats_from_lse";
  T* stats;
  const float* lse;
  long n;
  template <class Ctx>
  TP_HD void operator()(Ctx& c) const {
    TP_GRID_LOOP(c, i, n) stats[2 * i] = st<T>(lse[i]), stats[2 * i + 1] = st<T>(1.f);
  }
};

// lse[i] = stats[2 i] - log(stats[2 i + 1]) for i < n.
template <class T>
struct LseFromStats {
  static constexpr const char* kName = "lse_from_stats";
  float* lse;
  const T* stats;
  long n;
  template <class Ctx>
  TP_HD void operator()(Ctx& c) const {
    TP_GRID_LOOP(c, i, n) lse[i] = float(ld(stats[2 * i])) - logf(float(ld(stats[2 * i + 1])));
  }
};

// y[r * ldy + j] = x[r * ldx + j] (bf16 -> fp32, exact) for r < rows, j < cols; four columns per thread when cols,
// both strides and both bases allow 16- and 8-byte vectors, else one.
struct UnpackRows {
  static constexpr const char* kName = "unpack_rows";
  float* y;
  const bf16* x;
  long ldy, ldx, rows, cols;
  template <class Ctx>
  TP_HD void operator()(Ctx& c) const {
    const bool v4 = cols % 4 == 0 && ldy % 4 == 0 && ldx % 4 == 0 && aligned_to(y, 16) && aligned_to(x, 8);
    if (v4) {
      const long c4 = cols / 4;
      TP_GRID_LOOP(c, i, rows * c4) {
        const long r = i / c4, j = 4 * (i % c4);
        st4(y + r * ldy + j, ld4(x + r * ldx + j));
      }
      return;
    }
    TP_GRID_LOOP(c, i, rows * cols) {
      const long r = i / cols, j = i % cols;
      y[r * ldy + j] = ld(x[r * ldx + j]);
    }
  }
};

template <class L, class T>
void stats_from_lse(const L& launch, T* stats, const float* lse, long n) {
  if (n > 0) launch(StatsFromLse<T>{stats, lse, n}, flat_dim(launch, n));
}
template <class L, class T>
void lse_from_stats(const L& launch, float* lse, const T* stats, long n) {
  if (n > 0) launch(LseFromStats<T>{lse, stats, n}, flat_dim(launch, n));
}
template <class L>
void unpack_rows(const L& launch, float* y, long ldy, const bf16* x, long ldx, long rows, long cols) {
  if (rows > 0 && cols > 0) launch(UnpackRows{y, x, ldy, ldx, rows, cols}, flat_dim(launch, rows * cols));
}

}  // namespace tp::kernels
