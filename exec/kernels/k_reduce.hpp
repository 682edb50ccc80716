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

// dwte[tokens[i] - v0, :] += dout[i, :] over rows in order (for tokens in the shard [v0, v0 + Vl)), every element of
// dwte owned by one thread that adds its rows in row order (the CPU backend's order: repeated tokens add up without
// atomics). The rows are first grouped by token, stably, in int32 scratch of 5 N (embedding_bwd_scratch):
//  1. EmbeddingRank, one thread per row: its rank among the earlier rows of its token, its token's row count and
//     first row (the head); the block's threads compare their tokens with the whole sequence in shared tiles;
//  2. EmbeddingStarts, one block: each head's segment start, an exclusive scan of the heads' counts in row order;
//  3. EmbeddingPlace, one thread per row: sorted[start of its head + rank] = row;
//  4. EmbeddingBwdWte, one thread per (head, column): its segment's rows in order.
// Work: N^2 token compares (shared memory) plus N C gradient reads, against N C buckets-walks before (2026-11-30:
// 1.35 ms per call for GPT-2 124M's 8,192 tokens on an H200).
inline constexpr long kEmbeddingSlots = 5;  // scratch int32 per row: rank, count, head, start, sorted
inline long embedding_bwd_scratch(long N) { return kEmbeddingSlots * N; }
struct EmbeddingRank {
  static constexpr const char* kName = "embedding_rank";
  int32_t* rank;   // [N] rank among the earlier rows of the same token; -1 outside the shard
  int32_t* count;  // [N] rows of the same token
  int32_t* head;   // [N] first row of the same token; -1 outside the shard
  const int32_t* tokens;
  long N, v0, Vl;
  template <class Ctx>
  TP_HD void operator()(Ctx& c) const {
    int32_t* tile = c.template shared<int32_t>();
    const long bd = long(c.bdim());
    for (long r0 = long(c.bid()) * bd; r0 < N; r0 += long(c.gdim()) * bd) {  // block-uniform
      const long r = r0 + long(c.tid());
      const int32_t tok = r < N ? tokens[r] : 0;
      const bool in = r < N && long(tok) - v0 >= 0 && long(tok) - v0 < Vl;
      long rk = 0, n = 0, first = -1;
      for (long k0 = 0; k0 < N; k0 += bd) {  // block-uniform
        c.sync();  // the previous tile is read
        if (k0 + long(c.tid()) < N) tile[c.tid()] = tokens[k0 + long(c.tid())];
        c.sync();
        const long kn = N - k0 < bd ? N - k0 : bd;
        if (in)
          for (long k = 0; k < kn; ++k)
            if (tile[k] == tok) {
              if (first < 0) first = k0 + k;
              rk += k0 + k < r;
              ++n;
            }
      }
      if (r < N) {
        rank[r] = in ? int32_t(rk) : -1;
        count[r] = int32_t(n);
        head[r] = in ? int32_t(first) : -1;
      }
    }
  }
};
struct EmbeddingStarts {
  static constexpr const char* kName = "embedding_starts";
  int32_t* start;  // [N] at each head: the rows of the heads before it
  const int32_t* count;
  const int32_t* head;
  long N;
  template <class Ctx>
  TP_HD void operator()(Ctx& c) const {  // one block: each thread a contiguous range, then a serial scan of ranges
    long* part = c.template shared<long>();
    const long bd = long(c.bdim()), per = (N + bd - 1) / bd, lo = long(c.tid()) * per;
    const long hi = lo + per < N ? lo + per : N;
    long sum = 0;
    for (long r = lo; r < hi; ++r) sum += head[r] == r ? count[r] : 0;
    part[c.tid()] = sum;
    c.sync();
    if (c.tid() == 0) {
      long run = 0;
      for (long t = 0; t < bd; ++t) {
        const long v = part[t];
        part[t] = run;
        run += v;
      }
    }
    c.sync();
    long run = part[c.tid()];
    for (long r = lo; r < hi; ++r)
      if (head[r] == r) start[r] = int32_t(run), run += count[r];
  }
};
struct EmbeddingPlace {
  static constexpr const char* kName = "embedding_place";
  int32_t* sorted;  // [rows in the shard] rows grouped by token (heads in row order), each group in row order
  const int32_t* rank;
  const int32_t* head;
  const int32_t* start;
  long N;
  template <class Ctx>
  TP_HD void operator()(Ctx& c) const {
    for (long r = long(c.bid()) * c.bdim() + c.tid(); r < N; r += long(c.gdim()) * c.bdim())
      if (head[r] >= 0) sorted[start[head[r]] + rank[r]] = int32_t(r);
  }
};
template <class T>
struct EmbeddingBwdWte {
  static constexpr const char* kName = "embedding_bwd_wte";
  T* dwte;
  const int32_t* tokens;
  const T* dout;
  const int32_t* sorted;
  const int32_t* head;
  const int32_t* start;
  const int32_t* count;
  long N, C, v0;
  template <class Ctx>
  TP_HD void operator()(Ctx& c) const {  // u = row * C + column: a warp reads one row's adjacent columns
    for (long u = long(c.bid()) * c.bdim() + c.tid(); u < N * C; u += long(c.gdim()) * c.bdim()) {
      const long r = u / C, col = u % C;
      if (head[r] != r) continue;
      T* w = dwte + (long(tokens[r]) - v0) * C + col;
      T acc = *w;
      const int32_t* rows = sorted + start[r];
      const long n = count[r];
      long i = 0;
      for (; i + 4 <= n; i += 4) {  // four loads in flight, added in order
        const T a = dout[long(rows[i]) * C + col], b = dout[long(rows[i + 1]) * C + col];
        const T d = dout[long(rows[i + 2]) * C + col], e = dout[long(rows[i + 3]) * C + col];
        acc = st<T>(ld(acc) + ld(a));
        acc = st<T>(ld(acc) + ld(b));
        acc = st<T>(ld(acc) + ld(d));
        acc = st<T>(ld(acc) + ld(e));
      }
      for (; i < n; ++i) acc = st<T>(ld(acc) + ld(dout[long(rows[i]) * C + col]));
      *w = acc;
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
                   long v0, long Vl, int32_t* scratch) {  // scratch: embedding_bwd_scratch(B * Tn) int32 (dwte only)
  const long N = B * Tn;
  if (dwte) {
    int32_t *rank = scratch, *count = scratch + N, *head = scratch + 2 * N, *start = scratch + 3 * N, *sorted = scratch + 4 * N;
    launch(EmbeddingRank{rank, count, head, tokens, N, v0, Vl},
           Dim{blocks_for(N, launch.block, launch.max_grid), launch.block, unsigned(launch.block * sizeof(int32_t))});
    launch(EmbeddingStarts{start, count, head, N}, Dim{1, launch.block, unsigned(launch.block * sizeof(long))});
    launch(EmbeddingPlace{sorted, rank, head, start, N}, Dim{blocks_for(N, launch.block, launch.max_grid), launch.block, 0});
    launch(EmbeddingBwdWte<T>{dwte, tokens, dout, sorted, head, start, count, N, C, v0},
           Dim{blocks_for(N * C, launch.block, launch.max_grid), launch.block, 0});
  }
  if (dwpe)
    launch(EmbeddingBwdWpe<T>{dwpe, dout, B, Tn, C},
           Dim{blocks_for(Tn * C, launch.block, launch.max_grid), launch.block, 0});
}

}  // namespace tp::kernels
