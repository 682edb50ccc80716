// k_reduce: the kernels that reduce across rows or over a whole buffer — bias gradient and LayerNorm weight /
// bias gradients (column sums over rows), sum of squares (per-block partials, then one block), and the
// embedding lookup and its scatter-add backward (with a vocabulary offset for a vocabulary-parallel shard).
// All deterministic: no atomics; each output element is written by exactly one thread, in a fixed order.
// Column sums: a block covers 32 columns (one per lane); its warps take rows warp, warp + nwarps, ...; the
// per-warp partials meet in shared memory and warp 0 adds them in warp order.
#pragma once
#include "exec/kernels/kcommon.hpp"

namespace tp::kernels {

// db[C] += sum_n dy[n, c]; LayerNorm (kLn): dw[c] += sum_n xhat[n, c] dy[n, c] and db[c] += sum_n dy[n, c],
// xhat = (x - mean[n]) rstd[n]. dw or db may be null.
template <class T, bool kLn>
struct ColumnSums {
  static constexpr const char* kName = kLn ? "layernorm_bwd_wb" : "bias_bwd";
  using A = acc_t<T>;
  T* dw;
  T* db;
  const T* dy;
  const T* x;
  const A* mean;
  const A* rstd;
  long N, C;
  template <class Ctx>
  TP_HD void operator()(Ctx& c) const {
    const unsigned lane = c.tid() % kWarp, warp = c.tid() / kWarp, nw = c.bdim() / kWarp;
    A* sw = c.template shared<A>();  // [nw][32] partials of dw
    A* sb = sw + nw * kWarp;         // [nw][32] partials of db
    for (long c0 = long(c.bid()) * kWarp; c0 < C; c0 += long(c.gdim()) * kWarp) {
      const long col = c0 + lane;
      A pw = 0, pb = 0;
      if (col < C) {
        for (long n = warp; n < N; n += nw) {
          const A d = ld(dy[n * C + col]);
          pb += d;
          if (kLn) pw += (ld(x[n * C + col]) - mean[n]) * rstd[n] * d;
        }
      }
      sw[warp * kWarp + lane] = pw;
      sb[warp * kWarp + lane] = pb;
      c.sync();
      if (warp == 0 && col < C) {
        A tw = 0, tb = 0;
        for (unsigned k = 0; k < nw; ++k) {
          tw += sw[k * kWarp + lane];
          tb += sb[k * kWarp + lane];
        }
        if (kLn && dw) dw[col] = st<T>(ld(dw[col]) + tw);
        if (db) db[col] = st<T>(ld(db[col]) + tb);
      }
      c.sync();  // partials read before the next tile overwrites them
    }
  }
};

// partial[bid] = sum of x[i]^2 over the block's grid-stride share, in double.
template <class T>
struct SumSquaresPartial {
  static constexpr const char* kName = "sum_squares";
  double* partial;
  const T* x;
  long n;
  template <class Ctx>
  TP_HD void operator()(Ctx& c) const {
    double s = 0;
    for (long i = long(c.bid()) * c.bdim() + c.tid(); i < n; i += long(c.gdim()) * c.bdim()) {
      const double v = double(ld(x[i]));
      s += v * v;
    }
    s = block_sum(c, s, c.template shared<double>());
    if (c.tid() == 0) partial[c.bid()] = s;
  }
};
// out[0] = sum of in[0, n) (one block).
struct SumDoubles {
  static constexpr const char* kName = "sum_doubles";
  double* out;
  const double* in;
  long n;
  template <class Ctx>
  TP_HD void operator()(Ctx& c) const {
    double s = 0;
    for (long i = c.tid(); i < n; i += c.bdim()) s += in[i];
    s = block_sum(c, s, c.template shared<double>());
    if (c.tid() == 0) out[0] = s;
  }
};

// out[i, :] = wte[tokens[i] - v0, :] when 0 <= tokens[i] - v0 < Vl, else 0; plus wpe[(pos0 + i) % Tn, :] when
// wpe is not null. N = B * Tn rows.
template <class T>
struct EmbeddingFwd {
  static constexpr const char* kName = "embedding_fwd";
  using A = acc_t<T>;
  T* out;
  const int32_t* tokens;
  const T* wte;
  const T* wpe;
  long N, Tn, C, v0, Vl, pos0;
  template <class Ctx>
  TP_HD void operator()(Ctx& c) const {
    for (long i = long(c.bid()) * c.bdim() + c.tid(); i < N * C; i += long(c.gdim()) * c.bdim()) {
      const long r = i / C, col = i % C, t = long(tokens[r]) - v0;
      A o = (t >= 0 && t < Vl) ? A(ld(wte[t * C + col])) : A(0);
      if (wpe) o += ld(wpe[((pos0 + r) % Tn) * C + col]);
      out[i] = st<T>(o);
    }
  }
};

// dwte[tokens[i] - v0, :] += dout[i, :] over rows in order (for tokens in the shard). One thread per column
// walks all rows, so repeated tokens add up without atomics, in the CPU backend's order.
template <class T>
struct EmbeddingBwdWte {
  static constexpr const char* kName = "embedding_bwd_wte";
  T* dwte;
  const int32_t* tokens;
  const T* dout;
  long N, C, v0, Vl;
  template <class Ctx>
  TP_HD void operator()(Ctx& c) const {
    for (long col = long(c.bid()) * c.bdim() + c.tid(); col < C; col += long(c.gdim()) * c.bdim()) {
      for (long r = 0; r < N; ++r) {
        const long t = long(tokens[r]) - v0;
        if (t >= 0 && t < Vl) dwte[t * C + col] = st<T>(ld(dwte[t * C + col]) + ld(dout[r * C + col]));
      }
    }
  }
};
// dwpe[t, :] += sum over b of dout[b * Tn + t, :].
template <class T>
struct EmbeddingBwdWpe {
  static constexpr const char* kName = "embedding_bwd_wpe";
  using A = acc_t<T>;
  T* dwpe;
  const T* dout;
  long B, Tn, C;
  template <class Ctx>
  TP_HD void operator()(Ctx& c) const {
    for (long i = long(c.bid()) * c.bdim() + c.tid(); i < Tn * C; i += long(c.gdim()) * c.bdim()) {
      A s = ld(dwpe[i]);
      for (long b = 0; b < B; ++b) s += ld(dout[b * Tn * C + i]);
      dwpe[i] = st<T>(s);
    }
  }
};

// ---- op functions ----

template <class L, class T>
void bias_bwd(const L& launch, T* db, const T* dy, long N, long C) {
  const unsigned nw = launch.block / kWarp;
  launch(ColumnSums<T, false>{nullptr, db, dy, nullptr, nullptr, nullptr, N, C},
         Dim{blocks_for(C, kWarp, launch.max_grid), launch.block, unsigned(2 * nw * kWarp * sizeof(acc_t<T>))});
}
// dw, db += the LayerNorm parameter gradients (either may be null; exec/ops.hpp's layernorm_bwd is
// layernorm_bwd_dx plus this).
template <class L, class T>
void layernorm_bwd_wb(const L& launch, T* dw, T* db, const T* dy, const T* x, const acc_t<T>* mean,
                      const acc_t<T>* rstd, long N, long C) {
  if (!dw && !db) return;
  const unsigned nw = launch.block / kWarp;
  launch(ColumnSums<T, true>{dw, db, dy, x, mean, rstd, N, C},
         Dim{blocks_for(C, kWarp, launch.max_grid), launch.block, unsigned(2 * nw * kWarp * sizeof(acc_t<T>))});
}
// out[0] = sum of x^2 in double; scratch holds launch.max_grid doubles.
template <class L, class T>
void sum_squares(const L& launch, double* out, double* scratch, const T* x, long n) {
  const unsigned grid = blocks_for(n, launch.block, launch.max_grid);
  const unsigned smem = unsigned(kReduceSlots * sizeof(double));
  launch(SumSquaresPartial<T>{scratch, x, n}, Dim{grid, launch.block, smem});
  launch(SumDoubles{out, scratch, long(grid)}, Dim{1, launch.block, smem});
}
// Whole vocabulary: v0 = 0, Vl = V. pos0: position of row 0 (a sequence-parallel row shard starts later).
template <class L, class T>
void embedding_fwd(const L& launch, T* out, const int32_t* tokens, const T* wte, const T* wpe, long B, long Tn,
                   long C, long v0, long Vl, long pos0 = 0) {
  const long N = B * Tn;
  launch(EmbeddingFwd<T>{out, tokens, wte, wpe, N, Tn, C, v0, Vl, pos0},
         Dim{blocks_for(N * C, launch.block, launch.max_grid), launch.block, 0});
}
template <class L, class T>
void embedding_bwd(const L& launch, T* dwte, T* dwpe, const T* dout, const int32_t* tokens, long B, long Tn, long C,
                   long v0, long Vl) {
  if (dwte)
    launch(EmbeddingBwdWte<T>{dwte, tokens, dout, B * Tn, C, v0, Vl},
           Dim{blocks_for(C, launch.block, launch.max_grid), launch.block, 0});
  if (dwpe)
    launch(EmbeddingBwdWpe<T>{dwpe, dout, B, Tn, C},
           Dim{blocks_for(Tn * C, launch.block, launch.max_grid), launch.block, 0});
}

}  // namespace tp::kernels
