// k_flash: fused causal attention (exec/backends/ops.hpp flash_attention_fwd / flash_attention_bwd) as three kernels that
// never hold a [Tq, Tk] matrix: the forward (out and the per-row statistics), the backward's dQ (one block per
// query tile, over the key tiles) and its dK, dV (one block per key tile, over the query tiles of every query
// head sharing the kv head), so no two blocks write one element and no atomics are needed: reruns are
// bit-identical.
// Layout: R = flash_lanes(D) adjacent threads share a row (a query or a key), each holding kFlashSlice of its
// head dims in registers; a row's dot products are summed over its R lanes by butterfly shuffles, so every lane
// of the group gets the same bits. Keys (forward, dQ) or queries (dK, dV) go through shared memory in tiles of
// kc rows, each row's slices padded to 33 words so that the R slices read at once sit in different banks.
// Numerics: the forward is two passes — the row max and sum of exp (online), then P = exp(s − max) / sum, the
// normalised P being the bf16 operand of P·V as attention_fwd_kv's — so it computes the function the CPU's flash
// and unfused attention compute; the backward recomputes P from the saved max and 1 / sum and uses
// FlashAttention-2's row term rowsum(dout ⊙ out). With bf16 operands each GEMM operand is rounded where
// attention_bwd_kv's GEMMs round it (q, k, v, dout, P, dS).
// Invariants: every loop that contains a sync or a shuffle has bounds that depend on the block's work item only
// (rows past the end compute on a clamped row and write nothing); a tile is read only between the two syncs
// around its load; the CUDA launch bound is kFlashBlock threads (K::kMaxThreads, cuda_launch.cuh), which gives
// each thread the registers for its 2 to 4 slices without spills.
#pragma once
#include "exec/kernels/k_fp8.hpp"
#include "exec/kernels/k_flash_mma.hpp"
#include "exec/kernels/k_rows.hpp"  // TP_ROW_LOOP

#include <type_traits>

namespace tp::kernels {

constexpr int kFlashSlice = 32;        // head dims per thread
constexpr unsigned kFlashBlock = 128;  // threads per block
constexpr long kFlashMaxHeadDim = 1024;

// Lanes per row: the smallest power of two R with kFlashSlice R >= D (1 to 32).
TP_HD TP_INLINE int flash_lanes(long D) {
  int r = 1;
  while (long(r) * kFlashSlice < D) r *= 2;
  return r;
}

struct FlashGeom {
  long B = 0, Tq = 0, Tk = 0, H = 0, Hkv = 0, D = 0;
  long ldq = 0, ldkv = 0;  // row strides of q / dq and of k, v, dk, dv (exec/backends/ops.hpp)
  int R = 1;   // lanes per row
  long kc = 1; // rows per shared-memory tile
  TP_HD long rs() const { return long(kFlashSlice + 1) * R; }  // a tile row's stride in shared words
  TP_HD long rows() const { return long(kFlashBlock) / R; }    // rows (queries or keys) per block
  TP_HD long off() const { return Tk - Tq; }                   // query i sees keys j <= i + off
  TP_HD long G() const { return H / Hkv; }
};

// The geometry for accumulation words of `acc_bytes`: the largest tile (a power of two, at most 64 rows) whose two
// row tiles and three per-row words fit in 40 KiB of shared memory.
inline FlashGeom flash_geom(long B, long Tq, long Tk, long H, long Hkv, long D, long ldq, long ldkv, unsigned acc_bytes) {
  FlashGeom g;
  g.B = B, g.Tq = Tq, g.Tk = Tk, g.H = H, g.Hkv = Hkv, g.D = D, g.ldq = ldq, g.ldkv = ldkv, g.R = flash_lanes(D);
  g.kc = 64;
  while (g.kc > 1 && (2 * g.kc * g.rs() + 3 * g.kc) * long(acc_bytes) > 40 * 1024) g.kc /= 2;
  return g;
}
inline unsigned flash_smem(const FlashGeom& g, unsigned acc_bytes) {
  return unsigned((2 * g.kc * g.rs() + 3 * g.kc) * long(acc_bytes));
}

// Shared word of row r, head dim d.
TP_HD TP_INLINE long flash_at(const FlashGeom& g, long r, long d) {
  return r * g.rs() + (d / kFlashSlice) * (kFlashSlice + 1) + d % kFlashSlice;
}
// dst (a tile of g.kc rows) = rows [r0, r0 + n) of src (row stride `stride`), 0 past n and past D; rounded to
// bf16 when `round`.
template <class Ctx, class T, class A>
TP_HD void flash_tile(Ctx& c, const FlashGeom& g, A* dst, const T* src, long stride, long r0, long n, bool round) {
  const int Dp = g.R * kFlashSlice, total = int(g.kc) * Dp;  // at most 64 x 1024: 32-bit index arithmetic
  for (int e = int(c.tid()); e < total; e += int(c.bdim())) {
    const int r = e / Dp, d = e - r * Dp;
    A x = r < n && d < g.D ? A(ld(src[(r0 + r) * stride + d])) : A(0);
    dst[flash_at(g, r, d)] = round ? bf16_round(x) : x;
  }
}
// x[kFlashSlice] = this lane's slice of row `row` (head dims s kFlashSlice ..), 0 past D, rounded when `round`.
template <class T, class A>
TP_HD TP_INLINE void flash_slice(A* x, const T* row, long D, int s, bool round) {
  TP_UNROLL for (int d = 0; d < kFlashSlice; ++d) {
    const long dd = long(s) * kFlashSlice + d;
    const A v = dd < D ? A(ld(row[dd])) : A(0);
    x[d] = round ? bf16_round(v) : v;
  }
}
template <class A>
TP_HD TP_INLINE A flash_dot(const A* x, const A* y) {
  A p = 0;
  TP_UNROLL for (int d = 0; d < kFlashSlice; ++d) p += x[d] * y[d];
  return p;
}

// out, stats (max, 1 / sum per query row) from q, k, v. One work item: kFlashBlock / R query rows of one (b, h).
template <class T, class S = T>
struct FlashFwd {
  static constexpr const char* kName = "flash_attention_fwd";
  static constexpr unsigned kMaxThreads = kFlashBlock;
  using A = acc_t<T>;
  S* out;
  T* stats;
  const S* q;
  const S* k;
  const S* v;
  FlashGeom g;
  bool bf16;
  template <class Ctx>
  TP_HD void operator()(Ctx& c) const {
    A* Ks = c.template shared<A>();
    A* Vs = Ks + g.kc * g.rs();
    const int R = g.R, s = int(c.tid() % unsigned(R));
    const long rows = g.rows(), lr = long(c.tid() / unsigned(R)), tiles = (g.Tq + rows - 1) / rows;
    const A scale = A(1) / k_sqrt(A(g.D));
    TP_ROW_LOOP(c, item, g.B * g.H * tiles) {
      const QueryTile qt = query_tile(g, item, tiles, rows, lr);
      const long bh = qt.bh, b = qt.b, h = qt.h, i = qt.i, ic = qt.ic, lim = qt.lim, last = qt.last;
      const bool live = qt.live;
      const S* kb = k + qt.kvo;
      const S* vb = v + qt.kvo;
      A qv[kFlashSlice];
      flash_slice(qv, q + (b * g.Tq + ic) * g.ldq + h * g.D, g.D, s, bf16);
      A m = k_neg_inf<A>(), l = 0;
      for (long j0 = 0; j0 < last; j0 += g.kc) {  // pass 1: max and sum of exp, online
        const long n = k_min(g.kc, last - j0);
        c.sync();
        flash_tile(c, g, Ks, kb, g.ldkv, j0, n, bf16);
        c.sync();
        for (long jj = 0; jj < n; ++jj) {
          const A x = group_sum(c, flash_dot(qv, Ks + flash_at(g, jj, long(s) * kFlashSlice)), R) * scale;
          if (j0 + jj <= lim) {
            if (x > m) l = l * k_exp(m - x) + A(1), m = x;
            else l += k_exp(x - m);
          }
        }
      }
      const A inv = A(1) / l;
      A o[kFlashSlice];
      TP_UNROLL for (int d = 0; d < kFlashSlice; ++d) o[d] = 0;
      for (long j0 = 0; j0 < last; j0 += g.kc) {  // pass 2: out = P v with the final P
        const long n = k_min(g.kc, last - j0);
        c.sync();
        flash_tile(c, g, Ks, kb, g.ldkv, j0, n, bf16);
        flash_tile(c, g, Vs, vb, g.ldkv, j0, n, bf16);
        c.sync();
        for (long jj = 0; jj < n; ++jj) {
          const A x = group_sum(c, flash_dot(qv, Ks + flash_at(g, jj, long(s) * kFlashSlice)), R) * scale;
          A p = j0 + jj <= lim ? k_exp(x - m) * inv : A(0);
          if (bf16) p = bf16_round(p);
          const A* vr = Vs + flash_at(g, jj, long(s) * kFlashSlice);
          TP_UNROLL for (int d = 0; d < kFlashSlice; ++d) o[d] += p * vr[d];
        }
      }
      if (live) {
        S* orow = out + ((b * g.Tq + i) * g.H + h) * g.D;
        TP_UNROLL for (int d = 0; d < kFlashSlice; ++d) {
          const long dd = long(s) * kFlashSlice + d;
          if (dd < g.D) orow[dd] = st<S>(o[d]);
        }
        if (s == 0) stats[(bh * g.Tq + i) * 2] = st<T>(m), stats[(bh * g.Tq + i) * 2 + 1] = st<T>(inv);
      }
    }
  }
};

// dq += scale dS k. One work item: kFlashBlock / R query rows of one (b, h), over the key tiles they see.
template <class T, class S = T>
struct FlashBwdDq {
  static constexpr const char* kName = "flash_attention_bwd_dq";
  static constexpr unsigned kMaxThreads = kFlashBlock;
  using A = acc_t<T>;
  T* dq;
  const T* dout;
  const S* out;
  const T* stats;
  const S* q;
  const S* k;
  const S* v;
  FlashGeom g;
  bool bf16;
  bool accumulate = true;  // dq += (else =: what adding to zeros gives)
  template <class Ctx>
  TP_HD void operator()(Ctx& c) const {
    A* Ks = c.template shared<A>();
    A* Vs = Ks + g.kc * g.rs();
    const int R = g.R, s = int(c.tid() % unsigned(R));
    const long rows = g.rows(), lr = long(c.tid() / unsigned(R)), tiles = (g.Tq + rows - 1) / rows;
    const A scale = A(1) / k_sqrt(A(g.D));
    TP_ROW_LOOP(c, item, g.B * g.H * tiles) {
      const QueryTile qt = query_tile(g, item, tiles, rows, lr);
      const long bh = qt.bh, b = qt.b, h = qt.h, i = qt.i, ic = qt.ic, lim = qt.lim, last = qt.last;
      const long qo = (b * g.Tq + ic) * g.ldq + h * g.D, oo = ((b * g.Tq + ic) * g.H + h) * g.D;
      const S* kb = k + qt.kvo;
      const S* vb = v + qt.kvo;
      A qv[kFlashSlice], dov[kFlashSlice], acc[kFlashSlice];
      flash_slice(qv, q + qo, g.D, s, bf16);
      flash_slice(acc, out + oo, g.D, s, false);  // (out, for the row term only)
      flash_slice(dov, dout + oo, g.D, s, false);
      const A delta = group_sum(c, flash_dot(dov, acc), R);
      TP_UNROLL for (int d = 0; d < kFlashSlice; ++d) {
        if (bf16) dov[d] = bf16_round(dov[d]);
        acc[d] = 0;
      }
      const A m = ld(stats[(bh * g.Tq + ic) * 2]), inv = ld(stats[(bh * g.Tq + ic) * 2 + 1]);
      for (long j0 = 0; j0 < last; j0 += g.kc) {
        const long n = k_min(g.kc, last - j0);
        c.sync();
        flash_tile(c, g, Ks, kb, g.ldkv, j0, n, bf16);
        flash_tile(c, g, Vs, vb, g.ldkv, j0, n, bf16);
        c.sync();
        for (long jj = 0; jj < n; ++jj) {
          const A* kr = Ks + flash_at(g, jj, long(s) * kFlashSlice);
          const A x = group_sum(c, flash_dot(qv, kr), R) * scale;
          const A dp = group_sum(c, flash_dot(dov, Vs + flash_at(g, jj, long(s) * kFlashSlice)), R);
          const A p = j0 + jj <= lim ? k_exp(x - m) * inv : A(0);
          A ds = p * (dp - delta);
          if (bf16) ds = bf16_round(ds);
          TP_UNROLL for (int d = 0; d < kFlashSlice; ++d) acc[d] += ds * kr[d];
        }
      }
      if (i < g.Tq) {
        T* r = dq + qo;
        TP_UNROLL for (int d = 0; d < kFlashSlice; ++d) {
          const long dd = long(s) * kFlashSlice + d;
          if (dd < g.D) r[dd] = st<T>((accumulate ? ld(r[dd]) : A(0)) + scale * acc[d]);
        }
      }
    }
  }
};

// dk += scale dSᵀ q, dv += Pᵀ dout. One work item: kFlashBlock / R key rows of one (b, kv head), over the query
// tiles that see them, for each of the G query heads sharing the kv head in turn.
template <class T, class S = T>
struct FlashBwdDkv {
  static constexpr const char* kName = "flash_attention_bwd_dkv";
  static constexpr unsigned kMaxThreads = kFlashBlock;
  using A = acc_t<T>;
  T* dk;
  T* dv;
  const T* dout;
  const S* out;
  const T* stats;
  const S* q;
  const S* k;
  const S* v;
  FlashGeom g;
  bool bf16;
  bool accumulate = true;  // dk, dv += (else =)
  template <class Ctx>
  TP_HD void operator()(Ctx& c) const {
    A* Qs = c.template shared<A>();
    A* Os = Qs + g.kc * g.rs();  // dout rows
    A* Ms = Os + g.kc * g.rs();  // per query row of the tile: max, 1 / sum, row term
    A* Is = Ms + g.kc;
    A* Ds = Is + g.kc;
    const int R = g.R, s = int(c.tid() % unsigned(R));
    const long rows = g.rows(), lr = long(c.tid() / unsigned(R)), tiles = (g.Tk + rows - 1) / rows;
    const A scale = A(1) / k_sqrt(A(g.D));
    TP_ROW_LOOP(c, item, g.B * g.Hkv * tiles) {
      const long bk = item / tiles, b = bk / g.Hkv, kh = bk % g.Hkv;
      const long j0 = (item % tiles) * rows, j = j0 + lr, jc = j < g.Tk ? j : g.Tk - 1;
      const long ko = (b * g.Tk + jc) * g.ldkv + kh * g.D;
      A kv[kFlashSlice], vv[kFlashSlice], dka[kFlashSlice], dva[kFlashSlice];
      flash_slice(kv, k + ko, g.D, s, bf16);
      flash_slice(vv, v + ko, g.D, s, bf16);
      TP_UNROLL for (int d = 0; d < kFlashSlice; ++d) dka[d] = 0, dva[d] = 0;
      const long first = k_max(0L, j0 - g.off());  // the first query that sees a key of the block
      for (long gi = 0; gi < g.G(); ++gi) {
        const long h = kh * g.G() + gi, bh = b * g.H + h;
        const S* qb = q + b * g.Tq * g.ldq + h * g.D;
        const T* ob = dout + (b * g.Tq * g.H + h) * g.D;
        for (long i0 = first; i0 < g.Tq; i0 += g.kc) {
          const long n = k_min(g.kc, g.Tq - i0);
          c.sync();
          flash_tile(c, g, Qs, qb, g.ldq, i0, n, bf16);
          flash_tile(c, g, Os, ob, g.H * g.D, i0, n, bf16);
          for (long t = long(c.tid()); t < n; t += long(c.bdim())) {
            const long qo = ((b * g.Tq + i0 + t) * g.H + h) * g.D;
            A dl = 0;
            for (long d = 0; d < g.D; ++d) dl += A(ld(dout[qo + d])) * A(ld(out[qo + d]));
            Ms[t] = ld(stats[(bh * g.Tq + i0 + t) * 2]), Is[t] = ld(stats[(bh * g.Tq + i0 + t) * 2 + 1]), Ds[t] = dl;
          }
          c.sync();
          for (long ii = 0; ii < n; ++ii) {
            const A* qr = Qs + flash_at(g, ii, long(s) * kFlashSlice);
            const A* orow = Os + flash_at(g, ii, long(s) * kFlashSlice);
            const A x = group_sum(c, flash_dot(kv, qr), R) * scale;
            const A dp = group_sum(c, flash_dot(vv, orow), R);
            const A p = j < g.Tk && j <= i0 + ii + g.off() ? k_exp(x - Ms[ii]) * Is[ii] : A(0);
            const A pr = bf16 ? bf16_round(p) : p;
            A ds = p * (dp - Ds[ii]);
            if (bf16) ds = bf16_round(ds);
            TP_UNROLL for (int d = 0; d < kFlashSlice; ++d) dva[d] += pr * orow[d], dka[d] += ds * qr[d];
          }
        }
      }
      if (j < g.Tk) {
        TP_UNROLL for (int d = 0; d < kFlashSlice; ++d) {
          const long dd = long(s) * kFlashSlice + d;
          if (dd < g.D) {
            dk[ko + dd] = st<T>((accumulate ? ld(dk[ko + dd]) : A(0)) + scale * dka[d]);
            dv[ko + dd] = st<T>((accumulate ? ld(dv[ko + dd]) : A(0)) + dva[d]);
          }
        }
      }
    }
  }
};

// ---- op functions (the launcher's max_grid caps the grid; the kernels loop over the rest) ----
// fp32 storage with bf16 operands and D in 16, 32, 48, 64 takes the tensor-core kernels (k_flash_mma.hpp); every
// other case the kernels above. S: the storage of q, k, v and out — T, or bf16 with T = float (bf16 storage of
// the saved activations, exec/backends/ops.hpp flash_attention_fwd16): out is then written rounded, and the operands are
// read as stored; the result is the T op's on the same (rounded) values, out rounded.

template <class L, class T, class S>
void flash_attention_fwd(const L& launch, S* out, T* stats, const S* q, const S* k, const S* v, long B, long Tq,
                         long Tk, long H, long Hkv, long D, long ldq, long ldkv, bool bf16) {
  static_assert(std::is_same_v<S, T> || (std::is_same_v<S, tp::kernels::bf16> && std::is_same_v<T, float>), "storage");
  if constexpr (std::is_same_v<T, float>) {
    if (bf16 && flash_mma_fits(D)) {
      const MmaGeom mg{B, Tq, Tk, H, Hkv, D, ldq, ldkv, mma_async_fits(k, ldkv, D) && mma_async_fits(v, ldkv, D)};
      using F = FlashFwdMma<T, S>;
      launch(F{out, stats, q, k, v, mg},
             Dim{blocks_for(B * H * ((Tq + F::kRows - 1) / F::kRows), 1, launch.max_grid), F::kMaxThreads, mma_smem<F>(mg)});
      return;
    }
  }
  const FlashGeom g = flash_geom(B, Tq, Tk, H, Hkv, D, ldq, ldkv, sizeof(acc_t<T>));
  const long items = B * H * ((Tq + g.rows() - 1) / g.rows());
  launch(FlashFwd<T, S>{out, stats, q, k, v, g, bf16},
         Dim{blocks_for(items, 1, launch.max_grid), kFlashBlock, flash_smem(g, sizeof(acc_t<T>))});
}
// Floats of scratch flash_attention_bwd takes (16-byte aligned): the query rows' terms rowsum(dout ⊙ out), then
// dout rounded to bf16 (from 16 bytes on), both written by the tensor-core dQ kernel and read by the dK / dV kernel
// (the scalar kernels compute their own and leave it untouched).
inline long flash_bwd_terms(long B, long H, long Tq) { return (B * H * Tq + 3) / 4 * 4; }
inline long flash_bwd_scratch(long B, long H, long Tq, long D) { return flash_bwd_terms(B, H, Tq) + (B * Tq * H * D + 1) / 2; }
template <class L, class T, class S>
void flash_attention_bwd(const L& launch, T* dq, T* dk, T* dv, const T* dout, const S* out, const T* stats,
                         const S* q, const S* k, const S* v, long B, long Tq, long Tk, long H, long Hkv, long D,
                         long ldq, long ldkv, bool bf16, float* scratch, bool accumulate = true) {
  static_assert(std::is_same_v<S, T> || (std::is_same_v<S, tp::kernels::bf16> && std::is_same_v<T, float>), "storage");
  if constexpr (std::is_same_v<T, float>) {
    if (bf16 && flash_mma_fits(D)) {
      const MmaGeom mg{B, Tq, Tk, H, Hkv, D, ldq, ldkv, mma_async_fits(k, ldkv, D) && mma_async_fits(v, ldkv, D)};
      using Q = FlashBwdDqMma<T, S>;
      using KV = FlashBwdDkvMma<T, S>;
      const long qi = B * H * ((Tq + Q::kRows - 1) / Q::kRows), ki = B * Hkv * ((Tk + KV::kRows - 1) / KV::kRows);
      tp::kernels::bf16* dout16 = reinterpret_cast<tp::kernels::bf16*>(scratch + flash_bwd_terms(B, H, Tq));
      launch(Q{dq, scratch, dout16, dout, out, stats, q, k, v, mg, accumulate},
             Dim{blocks_for(qi, 1, launch.max_grid), Q::kMaxThreads, mma_smem<Q>(mg)});
      launch(KV{dk, dv, scratch, dout16, stats, q, k, v, mg, mma_async_fits(q, ldq, D), mma_async_fits(dout16, H * D, D),
                accumulate},
             Dim{blocks_for(ki, 1, launch.max_grid), KV::kMaxThreads, mma_smem<KV>(mg)});
      return;
    }
  }
  const FlashGeom g = flash_geom(B, Tq, Tk, H, Hkv, D, ldq, ldkv, sizeof(acc_t<T>));
  const unsigned smem = flash_smem(g, sizeof(acc_t<T>));
  const long qitems = B * H * ((Tq + g.rows() - 1) / g.rows()), kitems = B * Hkv * ((Tk + g.rows() - 1) / g.rows());
  launch(FlashBwdDq<T, S>{dq, dout, out, stats, q, k, v, g, bf16, accumulate},
         Dim{blocks_for(qitems, 1, launch.max_grid), kFlashBlock, smem});
  launch(FlashBwdDkv<T, S>{dk, dv, dout, out, stats, q, k, v, g, bf16, accumulate},
         Dim{blocks_for(kitems, 1, launch.max_grid), kFlashBlock, smem});
}

}  // namespace tp::kernels
