// k_reduce: the kernels that reduce across rows or over a whole buffer — bias gradient and LayerNorm weight /
// bias gradients (column sums over rows), sum of squares (per-block partials, then one block), and the
// embedding lookup and its scatter-add backward (with a vocabulary offset for a vocabulary-parallel shard).
// All deterministic: no atomics; each output element is written by exactly one thread, in a fixed order.
// Column sums: a block covers 32 columns (one per lane) of one row chunk; its warps take the chunk's rows warp,
// warp + nwarps, ...; the per-warp partials meet in shared memory and warp 0 adds them in warp order; with
// several chunks a second kernel adds the chunks' partials in chunk order (column_chunks).
#pragma once
#include "exec/kernels/kcommon.hpp"

namespace tp::kernels {

// Column sums run in one pass when N is small, else in two: row chunks of at least kColumnRows rows (enough
// chunks to give the grid about kColumnBlocks blocks) write per-chunk partials, then one thread per column adds
// them in chunk order. The chunking depends only on N and C, so a result is the same on every run and device.
inline constexpr long kColumnRows = 32;
inline constexpr long kColumnBlocks = 1024;
TP_HD TP_INLINE long column_chunks(long N, long C) {
  const long tiles = (C + kWarp - 1) / kWarp, by_rows = (N + kColumnRows - 1) / kColumnRows;
  const long by_grid = tiles >= kColumnBlocks ? 1 : kColumnBlocks / tiles;
  const long r = by_rows < by_grid ? by_rows : by_grid;
  return r < 1 ? 1 : r;
}
// Scratch elements (acc_t) the column sums of an [N, C] input need: 0 in one pass, else 2 * chunks * C.
TP_HD TP_INLINE long column_sums_scratch(long N, long C) {
  const long r = column_chunks(N, C);
  return r > 1 ? 2 * r * C : 0;
}

// The value a column sum adds for element i of [N, C] (row-major), in two steps: load(i) reads what the value needs
// (Raw), take(raw, i) makes it. ColumnSums issues several rows' loads before it takes any (a store of a fused
// source's take might alias a later load, so loads and stores are kept apart). Each element is loaded and taken
// once, by one thread, in the sum's order, so a fused source (k_fused.hpp's ColPack16, ColGeluBwd16) may also write
// element i of an output of its own in take. ColRead: dy[i] itself.
template <class T>
struct ColRead {
  static constexpr const char* kName = nullptr;  // (the sum's own name)
  using Raw = acc_t<T>;
  const T* dy;
  TP_HD TP_INLINE Raw load(long i) const { return ld(dy[i]); }
  TP_HD TP_INLINE acc_t<T> take(Raw r, long) const { return r; }
};

// db[C] += sum_n dy[n, c]; LayerNorm (kLn): dw[c] += sum_n xhat[n, c] dy[n, c] and db[c] += sum_n dy[n, c],
// xhat = (x - mean[n]) rstd[n] (x stored as X: T, or bf16); dy[n, c] is the source's value of element n C + c
// (ColRead: dy itself). dw or db may be null. Work units are (32-column tile, row chunk) pairs; with chunks > 1 a unit writes its chunk's partials
// to part_w / part_b [chunks, C] instead of adding to dw / db.
template <class T, bool kLn, class Src = ColRead<T>, class X = T>
struct ColumnSums {
  static constexpr const char* kName = Src::kName ? Src::kName : kLn ? "layernorm_bwd_wb" : "bias_bwd";
  using A = acc_t<T>;
  T* dw;
  T* db;
  Src dy;
  const X* x;
  const A* mean;
  const A* rstd;
  long N, C;
  long chunks;   // row chunks (1: one pass)
  A* part_w;     // [chunks, C] when chunks > 1
  A* part_b;
  template <class Ctx>
  TP_HD void operator()(Ctx& c) const {
    const unsigned lane = c.tid() % kWarp, warp = c.tid() / kWarp, nw = c.bdim() / kWarp;
    A* sw = c.template shared<A>();  // [nw][32] partials of dw
    A* sb = sw + nw * kWarp;         // [nw][32] partials of db
    const long tiles = (C + kWarp - 1) / kWarp, rows_per = (N + chunks - 1) / chunks;
    for (long u = c.bid(); u < tiles * chunks; u += long(c.gdim())) {
      const long col = (u % tiles) * kWarp + lane, chunk = u / tiles;
      const long r0 = chunk * rows_per, r1 = r0 + rows_per < N ? r0 + rows_per : N;
      A pw = 0, pb = 0;
      if (col < C) {
        // kRows rows' loads issued before their adds (memory-level parallelism: one load in flight per thread
        // leaves the GPU's memory idle), the adds in the same row order as one at a time: the same bits.
        constexpr int kRows = 4;
        long n = r0 + warp;
        for (; n + (kRows - 1) * long(nw) < r1; n += kRows * long(nw)) {
          typename Src::Raw raw[kRows];
          A xh[kRows];
          TP_UNROLL for (int k = 0; k < kRows; ++k) {
            const long m = n + k * long(nw);
            raw[k] = dy.load(m * C + col);
            xh[k] = kLn ? (A(ld(x[m * C + col])) - mean[m]) * rstd[m] : A(0);
          }
          TP_UNROLL for (int k = 0; k < kRows; ++k) {
            const A d = dy.take(raw[k], (n + k * long(nw)) * C + col);
            pb += d;
            if (kLn) pw += xh[k] * d;
          }
        }
        for (; n < r1; n += nw) {
          const A d = dy.take(dy.load(n * C + col), n * C + col);
          pb += d;
          if (kLn) pw += (A(ld(x[n * C + col])) - mean[n]) * rstd[n] * d;
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
        if (chunks > 1) {
          part_w[chunk * C + col] = tw;
          part_b[chunk * C + col] = tb;
        } else {
          if (kLn && dw) dw[col] = st<T>(ld(dw[col]) + tw);
          if (db) db[col] = st<T>(ld(db[col]) + tb);
        }
      }
      c.sync();  // partials read before the next unit overwrites them
    }
  }
};
// Second pass: dw[c] += sum over chunks of part_w[chunk, c] (kLn), db likewise, in chunk order.
template <class T, bool kLn>
struct ColumnFinish {
  static constexpr const char* kName = kLn ? "layernorm_bwd_wb_finish" : "bias_bwd_finish";
  using A = acc_t<T>;
  T* dw;
  T* db;
  const A* part_w;
  const A* part_b;
  long C, chunks;
  template <class Ctx>
  TP_HD void operator()(Ctx& c) const {
    for (long col = long(c.bid()) * c.bdim() + c.tid(); col < C; col += long(c.gdim()) * c.bdim()) {
      A tw = 0, tb = 0;
      for (long r = 0; r < chunks; ++r) {
        tw += part_w[r * C + col];
        tb += part_b[r * C + col];
      }
      if (kLn && dw) dw[col] = st<T>(ld(dw[col]) + tw);
      if (db) db[col] = st<T>(ld(db[col]) + tb);
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
// out[0] = sum of in[0, n) (one block; kMax: the max, n >= 1) — — the second pass of the two-pass reductions (sum_squares, fp8_quantize's amax).
template <bool kMax>
struct ReduceDoubles {
  static constexpr const char* kName = kMax ? "max_doubles" : "sum_doubles";
  double* out;
  const double* in;
  long n;
  template <class Ctx>
  TP_HD void operator()(Ctx& c) const {
    double s = kMax ? k_neg_inf<double>() : 0.0;
    for (long i = c.tid(); i < n; i += c.bdim()) s = kMax ? k_max(s, in[i]) : s + in[i];
    s = block_reduce<kMax>(c, s, c.template shared<double>());
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

// dwte[tokens[i] - v0, :] += dout[i, :] over rows in order (for tokens in the shard). Work units are (column,
// token bucket) pairs: the unit of bucket b walks all rows and adds those whose shard row t has t % buckets == b
// (buckets a power of two),
// so every element of dwte has one owner that adds its rows in order — repeated tokens add up without atomics,
// in the CPU backend's order — and buckets × C threads share the work.
inline constexpr long kEmbeddingBuckets = 64;
template <class T>
struct EmbeddingBwdWte {
  static constexpr const char* kName = "embedding_bwd_wte";
  T* dwte;
  const int32_t* tokens;
  const T* dout;
  long N, C, v0, Vl, buckets;  // buckets: a power of two
  template <class Ctx>
  TP_HD void operator()(Ctx& c) const {
    for (long u = long(c.bid()) * c.bdim() + c.tid(); u < C * buckets; u += long(c.gdim()) * c.bdim()) {
      const long col = u % C, b = u / C;
      for (long r = 0; r < N; ++r) {
        const long t = long(tokens[r]) - v0;
        if (t >= 0 && t < Vl && (t & (buckets - 1)) == b) dwte[t * C + col] = st<T>(ld(dwte[t * C + col]) + ld(dout[r * C + col]));
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

template <class L, class T, bool kLn, class Src, class X>
void column_sums(const L& launch, T* dw, T* db, Src dy, const X* x, const acc_t<T>* mean, const acc_t<T>* rstd,
                 long N, long C, acc_t<T>* scratch) {
  const unsigned nw = launch.block / kWarp;
  const long chunks = column_chunks(N, C), tiles = (C + kWarp - 1) / kWarp;
  acc_t<T>* pw = chunks > 1 ? scratch : nullptr;
  acc_t<T>* pb = chunks > 1 ? scratch + chunks * C : nullptr;
  launch(ColumnSums<T, kLn, Src, X>{dw, db, dy, x, mean, rstd, N, C, chunks, pw, pb},
         Dim{blocks_for(tiles * chunks, 1, launch.max_grid), launch.block, unsigned(2 * nw * kWarp * sizeof(acc_t<T>))});
  if (chunks > 1)
    launch(ColumnFinish<T, kLn>{dw, db, pw, pb, C, chunks}, Dim{blocks_for(C, launch.block, launch.max_grid), launch.block, 0});
}
// db += the column sums of dy [N, C]. scratch: column_sums_scratch(N, C) elements (may be null when that is 0).
template <class L, class T>
void bias_bwd(const L& launch, T* db, const T* dy, long N, long C, acc_t<T>* scratch) {
  column_sums<L, T, false>(launch, nullptr, db, ColRead<T>{dy}, (const T*)nullptr, nullptr, nullptr, N, C, scratch);
}
// dw, db += the LayerNorm parameter gradients (either may be null; exec/backends/ops.hpp's layernorm_bwd is
// layernorm_bwd_dx plus this). scratch as bias_bwd's.
template <class L, class T, class X>
void layernorm_bwd_wb(const L& launch, T* dw, T* db, const T* dy, const X* x, const acc_t<T>* mean,
                      const acc_t<T>* rstd, long N, long C, acc_t<T>* scratch) {
  if (!dw && !db) return;
  column_sums<L, T, true>(launch, dw, db, ColRead<T>{dy}, x, mean, rstd, N, C, scratch);
}
// out[0] = sum of x^2 in double; scratch holds launch.max_grid doubles.
template <class L, class T>
void sum_squares(const L& launch, double* out, double* scratch, const T* x, long n) {
  const unsigned grid = blocks_for(n, launch.block, launch.max_grid);
  const unsigned smem = unsigned(kReduceSlots * sizeof(double));
  launch(SumSquaresPartial<T>{scratch, x, n}, Dim{grid, launch.block, smem});
  launch(ReduceDoubles<false>{out, scratch, long(grid)}, Dim{1, launch.block, smem});
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
  if (dwte) {
    long buckets = 1;
    while (buckets * 2 <= kEmbeddingBuckets && buckets * 2 <= Vl) buckets *= 2;
    launch(EmbeddingBwdWte<T>{dwte, tokens, dout, B * Tn, C, v0, Vl, buckets},
           Dim{blocks_for(C * buckets, launch.block, launch.max_grid), launch.block, 0});
  }
  if (dwpe)
    launch(EmbeddingBwdWpe<T>{dwpe, dout, B, Tn, C},
           Dim{blocks_for(Tn * C, launch.block, launch.max_grid), launch.block, 0});
}

}  // namespace tp::kernels
