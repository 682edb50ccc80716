// k_flash_mma: the flash attention kernels of k_flash.hpp on tensor cores, for fp32 storage with bf16 GEMM operands
// (training.precision "bf16") and head dims D = 16, 32, 48, 64: every product (S = q kᵀ, P v, dP = dout vᵀ, dS k,
// Pᵀ dout, dSᵀ q) is a 16 x 16 x 16 warp-matrix product of bf16 operands accumulated in fp32 (nvcuda::wmma on the
// GPU; the emulator's EmuCtx computes the same products, exec/kernels/emu.hpp). The operands are rounded where
// k_flash.hpp's bf16 path rounds them (q, k, v, dout, the normalised P, dS), so the two paths compute one function
// to fp32 accumulation order. The row work between the products (scale, mask, online max and sum, P, dS) is done
// by the lanes on a per-warp shared-memory copy of the 16 x kc tile, two lanes per row.
// Work: warps of 16 rows each (kWarps per kernel, TP_MMA_WARPS). Forward: 128-thread blocks, one item per (b, query
// head, 64 query rows), key tiles of 64. dQ: 64-thread blocks, one item per (b, query head, 32 query rows), key tiles
// of 64 (four warps' score tiles would not fit 48 KiB). dK / dV: 128-thread blocks, one item per (b, kv head, 64 key
// rows), query tiles of 32 of each query head of the group. Tiles are staged from global memory with 16-byte loads
// where rows allow (mma_stage); the backward's row terms rowsum(dout ⊙ out) are computed once, by the dQ kernel
// (two lanes' halves per row), which writes them to scratch for the dK / dV kernel.
// Invariants: as k_flash.hpp (block-uniform loop bounds, one writer per output element, no atomics); a warp
// syncs (syncwarp) between a fragment store and the lanes' reads, and between the lanes' writes and a fragment
// load; every fragment pointer is 32-byte aligned in shared memory (carve() rounds each buffer, rows and column
// offsets are multiples of 16 elements of strides that keep 32 bytes) and every ldm a multiple of 8 (bf16) or 4.
#pragma once
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "exec/kernels/k_rows.hpp"  // TP_ROW_LOOP

namespace tp::kernels {

constexpr long kMmaKeys = 64;       // keys per tile (forward, dQ)
constexpr long kMmaQueries = 32;    // queries per tile (dK, dV)
constexpr int kMmaMaxFrags = 4;     // head dims / 16
// A kernel's work item is 16 rows per warp: kWarps warps of 32 lanes (kMaxThreads), kRows = 16 kWarps query
// (forward, dQ) or key (dK, dV) rows.
#define TP_MMA_WARPS(W)                                   \
  static constexpr int kWarps = W;                        \
  static constexpr unsigned kMaxThreads = 32u * kWarps;   \
  static constexpr long kRows = 16L * kWarps;

// Whether the tensor-core kernels take a head dim.
TP_HD TP_INLINE bool flash_mma_fits(long D) { return D % 16 == 0 && D >= 16 && D <= 16 * kMmaMaxFrags; }

struct MmaGeom {
  long B = 0, Tq = 0, Tk = 0, H = 0, Hkv = 0, D = 0;
  long ldq = 0, ldkv = 0;  // row strides of q / dq and of k, v, dk, dv (exec/ops.hpp)
  TP_HD long ldk() const { return D + 8; }              // bf16 row tiles
  TP_HD long off() const { return Tk - Tq; }
  TP_HD long G() const { return H / Hkv; }
  TP_HD int nd() const { return int(D / 16); }
  static constexpr long lds = kMmaKeys + 4;             // float score tiles [16, kMmaKeys]
  static constexpr long ldp = kMmaKeys + 8;             // bf16 P / dS tiles
  static constexpr long ldt = kMmaQueries + 4;          // float transposed tiles [16 keys, 32 queries]
  static constexpr long ldt16 = kMmaQueries + 8;        // bf16 transposed tiles
};

// One work item of the query-side kernels (forward, dQ; both paths): sequence b, query head h of kv head kh, the
// tile of `rows` query rows from r0. This thread's row i (ic: clamped to the last row, for reads; live: the row
// exists) sees keys j <= lim; the tile's rows see keys [0, last); kvo: where kv head kh's rows of sequence b begin
// in k and v. Gm: FlashGeom or MmaGeom.
struct QueryTile {
  long bh, b, h, kh, r0, i, ic, lim, last, kvo;
  bool live;
};
template <class Gm>
TP_HD TP_INLINE QueryTile query_tile(const Gm& g, long item, long tiles, long rows, long lr) {
  QueryTile t;
  t.bh = item / tiles, t.b = t.bh / g.H, t.h = t.bh % g.H, t.kh = t.h / g.G();
  t.r0 = (item % tiles) * rows, t.i = t.r0 + lr, t.ic = t.i < g.Tq ? t.i : g.Tq - 1, t.lim = t.ic + g.off();
  t.last = k_min(g.Tq, t.r0 + rows) + g.off(), t.kvo = t.b * g.Tk * g.ldkv + t.kh * g.D, t.live = t.i < g.Tq;
  return t;
}

// Shared-memory buffers cut from one base, each starting on 32 bytes; with base 0 it only counts (host).
struct Carve {
  uintptr_t base = 0;
  size_t off = 0;
  template <class E>
  TP_HD E* take(long n) {
    off = (off + 31) / 32 * 32;
    E* p = reinterpret_cast<E*>(base + off);
    off += size_t(n) * sizeof(E);
    return p;
  }
};

// dst [rows, ldd] bf16 = rows [r0, r0 + n) of src (row stride `stride`, D columns), zeros past n. The block's
// threads take consecutive elements with 32-bit index arithmetic; float rows with D and the stride multiples of 4
// on a 16-byte boundary (every call of the model's, fused QKV included) are read four floats per load.
template <class Ctx, class T>
TP_HD void mma_stage(Ctx& c, bf16* dst, long ldd, const T* src, long stride, long r0, long n, long rows, long D) {
  const T* s0 = src + r0 * stride;
  const int nn = int(n), dd = int(D), ldo = int(ldd);
  if constexpr (std::is_same_v<T, float>) {
    if (dd % 4 == 0 && stride % 4 == 0 && ldo % 4 == 0 && aligned_to(s0, 16) && aligned_to(dst, 8)) {
      // Each thread issues kLoads loads before it converts any, so their latencies overlap.
      constexpr int kLoads = 4;
      const int q4 = dd / 4, total = int(rows) * q4, bd = int(c.bdim());
      for (int e0 = int(c.tid()); e0 < total; e0 += kLoads * bd) {
        F4 x[kLoads];
        TP_UNROLL for (int u = 0; u < kLoads; ++u) {
          const int e = e0 + u * bd, r = e / q4, d = (e - r * q4) * 4;
          x[u] = e < total && r < nn ? ld4(s0 + long(r) * stride + d) : F4{0.f, 0.f, 0.f, 0.f};
        }
        TP_UNROLL for (int u = 0; u < kLoads; ++u) {
          const int e = e0 + u * bd, r = e / q4, d = (e - r * q4) * 4;
          if (e < total) st4(dst + r * ldo + d, x[u]);  // (8-byte aligned: ldd and d are multiples of 4)
        }
      }
      return;
    }
  }
  const int total = int(rows) * dd;
  for (int e = int(c.tid()); e < total; e += int(c.bdim())) {
    const int r = e / dd, d = e - r * dd;
    dst[r * ldo + d] = to_bf16(r < nn ? float(ld(s0[long(r) * stride + d])) : 0.f);
  }
}
// dst[r, col] (+)= scale x (r, col) of the 16 x 16 accumulator f, for the warp's rows r with r < nrows (row stride
// `stride` in dst): f is staged in `tile` (ldt) and read back by the lanes, two per row, 8 columns each.
template <bool kAdd, class Ctx, class F, class T>
TP_HD TP_INLINE void mma_emit(Ctx& c, float* tile, long ldt, const F& f, T* dst, long stride, long nrows, float scale) {
  c.store(tile, f, unsigned(ldt));
  c.syncwarp();
  const int lane = int(c.tid() % 32u), row = lane / 2, half = lane % 2;
  if (row < nrows)
    for (int e = 0; e < 8; ++e) {
      T& y = dst[row * stride + half * 8 + e];
      const float x = scale * tile[row * ldt + half * 8 + e];
      y = st<T>(kAdd ? float(ld(y)) + x : x);
    }
  c.syncwarp();
}

template <class T>
struct FlashFwdMma {
  TP_MMA_WARPS(4)
  static constexpr const char* kName = "flash_attention_fwd (tensor cores)";
  static_assert(kRows <= kMmaKeys, "the query tile is staged in Ks");
  T* out;
  T* stats;
  const T* q;
  const T* k;
  const T* v;
  MmaGeom g;
  struct Smem {
    bf16 *Ks, *Vs;
    float* S;  // per warp [16, lds]
    bf16* P;   // per warp [16, ldp]
  };
  TP_HD static Smem carve(Carve& cv, const MmaGeom& g) {
    Smem s;
    s.Ks = cv.take<bf16>(kMmaKeys * g.ldk());
    s.Vs = cv.take<bf16>(kMmaKeys * g.ldk());
    s.S = cv.take<float>(kWarps * 16 * MmaGeom::lds);
    s.P = cv.take<bf16>(kWarps * 16 * MmaGeom::ldp);
    return s;
  }
  template <class Ctx>
  TP_HD void operator()(Ctx& c) const {
    Carve cv{reinterpret_cast<uintptr_t>(c.template shared<unsigned char>())};
    const Smem sm = carve(cv, g);
    const int warp = int(c.tid() / 32u), lane = int(c.tid() % 32u), row = lane / 2, half = lane % 2, nd = g.nd();
    float* Sw = sm.S + warp * 16 * MmaGeom::lds;
    bf16* Pw = sm.P + warp * 16 * MmaGeom::ldp;
    const long ldk = g.ldk(), tiles = (g.Tq + kRows - 1) / kRows;
    const float scale = 1.f / k_sqrt(float(g.D));
    TP_ROW_LOOP(c, item, g.B * g.H * tiles) {
      const QueryTile qt = query_tile(g, item, tiles, kRows, warp * 16 + row);
      const long bh = qt.bh, b = qt.b, h = qt.h, r0 = qt.r0, i = qt.i, lim = qt.lim, last = qt.last;
      const bool live = qt.live;
      const T* kb = k + qt.kvo;
      const T* vb = v + qt.kvo;
      typename Ctx::FragA qa[kMmaMaxFrags];
      c.sync();  // (the previous item's reads of Ks are done)
      mma_stage(c, sm.Ks, ldk, q + b * g.Tq * g.ldq + h * g.D, g.ldq, r0, k_min(kRows, g.Tq - r0), kRows, g.D);
      c.sync();
      TP_UNROLL for (int kd = 0; kd < kMmaMaxFrags; ++kd) if (kd < nd) c.load_a(qa[kd], sm.Ks + warp * 16 * ldk + kd * 16, unsigned(ldk));
      float m = k_neg_inf<float>(), l = 0, M = 0, inv = 0;
      typename Ctx::FragC o[kMmaMaxFrags];
      TP_UNROLL for (int dd = 0; dd < kMmaMaxFrags; ++dd) c.fill(o[dd], 0.f);
      for (int pass = 0; pass < 2; ++pass) {  // 0: max and sum of exp (online); 1: out = P v with the final P
        for (long j0 = 0; j0 < last; j0 += kMmaKeys) {
          const long n = k_min(kMmaKeys, last - j0);
          c.sync();
          mma_stage(c, sm.Ks, ldk, kb, g.ldkv, j0, n, kMmaKeys, g.D);
          if (pass == 1) mma_stage(c, sm.Vs, ldk, vb, g.ldkv, j0, n, kMmaKeys, g.D);
          c.sync();
          for (int sb = 0; sb < int(kMmaKeys / 16); ++sb) {
            typename Ctx::FragC acc;
            c.fill(acc, 0.f);
            TP_UNROLL for (int kd = 0; kd < kMmaMaxFrags; ++kd) if (kd < nd) {
              typename Ctx::FragBCol kf;
              c.load_b_col(kf, sm.Ks + sb * 16 * ldk + kd * 16, unsigned(ldk));
              c.mma(acc, qa[kd], kf, acc);
            }
            c.store(Sw + sb * 16, acc, unsigned(MmaGeom::lds));
          }
          c.syncwarp();
          const long c0 = half * (kMmaKeys / 2), c1 = c0 + kMmaKeys / 2;
          if (pass == 0) {
            // The online max and sum one tile at a time: the tile's max first, then its exps (independent of each
            // other; an element-by-element update would chain every exp on the previous one's max).
            float tm = k_neg_inf<float>();
            for (long cc = c0; cc < c1; ++cc)
              if (live && cc < n && j0 + cc <= lim) tm = k_max(tm, Sw[row * MmaGeom::lds + cc] * scale);
            if (tm > m) l = l > 0 ? l * k_exp(m - tm) : 0.f, m = tm;
            for (long cc = c0; cc < c1; ++cc)
              if (live && cc < n && j0 + cc <= lim) l += k_exp(Sw[row * MmaGeom::lds + cc] * scale - m);
          } else {
            for (long cc = c0; cc < c1; ++cc) {
              const bool ok = live && cc < n && j0 + cc <= lim;
              Pw[row * MmaGeom::ldp + cc] = to_bf16(ok ? k_exp(Sw[row * MmaGeom::lds + cc] * scale - M) * inv : 0.f);
            }
          }
          c.syncwarp();
          if (pass == 1)
            for (int sb = 0; sb < int(kMmaKeys / 16); ++sb) {
              typename Ctx::FragA pa;
              c.load_a(pa, Pw + sb * 16, unsigned(MmaGeom::ldp));
              TP_UNROLL for (int dd = 0; dd < kMmaMaxFrags; ++dd) if (dd < nd) {
                typename Ctx::FragBRow vf;
                c.load_b_row(vf, sm.Vs + sb * 16 * ldk + dd * 16, unsigned(ldk));
                c.mma(o[dd], pa, vf, o[dd]);
              }
            }
        }
        if (pass == 0) {  // the row's two halves: every lane of the pair gets the same bits
          const float m2 = c.shfl_xor(m, 1), l2 = c.shfl_xor(l, 1);
          M = k_max(m, m2);
          const float L = (l > 0 ? l * k_exp(m - M) : 0.f) + (l2 > 0 ? l2 * k_exp(m2 - M) : 0.f);
          inv = L > 0 ? 1.f / L : 0.f;
        }
      }
      T* orow = out + (b * g.Tq * g.H + h) * g.D + (r0 + warp * 16) * g.H * g.D;
      const long wrows = g.Tq - (r0 + warp * 16);  // this warp's rows that exist
      TP_UNROLL for (int dd = 0; dd < kMmaMaxFrags; ++dd) if (dd < nd)
        mma_emit<false>(c, Sw, MmaGeom::lds, o[dd], orow + dd * 16, g.H * g.D, wrows, 1.f);
      if (live && half == 0) stats[(bh * g.Tq + i) * 2] = st<T>(M), stats[(bh * g.Tq + i) * 2 + 1] = st<T>(inv);
    }
  }
};

// dq += scale dS k (dS = P (dP - rowsum(dout out)), P recomputed from the statistics); writes each query row's term
// rowsum(dout out) to `terms` for the dK / dV kernel, which runs after it.
template <class T>
struct FlashBwdDqMma {
  TP_MMA_WARPS(2)  // (four warps' score tiles would not fit 48 KiB beside Ks and Vs)
  static constexpr const char* kName = "flash_attention_bwd_dq (tensor cores)";
  T* dq;
  float* terms;  // [B, H, Tq]
  const T* dout;
  const T* out;
  const T* stats;
  const T* q;
  const T* k;
  const T* v;
  MmaGeom g;
  struct Smem {
    bf16 *Ks, *Vs;
    float *S, *dP;  // per warp [16, lds]
    bf16* dS;       // per warp [16, ldp]
  };
  TP_HD static Smem carve(Carve& cv, const MmaGeom& g) {
    Smem s;
    s.Ks = cv.take<bf16>(kMmaKeys * g.ldk());
    s.Vs = cv.take<bf16>(kMmaKeys * g.ldk());
    s.S = cv.take<float>(kWarps * 16 * MmaGeom::lds);
    s.dP = cv.take<float>(kWarps * 16 * MmaGeom::lds);
    s.dS = cv.take<bf16>(kWarps * 16 * MmaGeom::ldp);
    return s;
  }
  template <class Ctx>
  TP_HD void operator()(Ctx& c) const {
    Carve cv{reinterpret_cast<uintptr_t>(c.template shared<unsigned char>())};
    const Smem sm = carve(cv, g);
    const int warp = int(c.tid() / 32u), lane = int(c.tid() % 32u), row = lane / 2, half = lane % 2, nd = g.nd();
    float* Sw = sm.S + warp * 16 * MmaGeom::lds;
    float* Pw = sm.dP + warp * 16 * MmaGeom::lds;
    bf16* DSw = sm.dS + warp * 16 * MmaGeom::ldp;
    const long ldk = g.ldk(), tiles = (g.Tq + kRows - 1) / kRows;
    const float scale = 1.f / k_sqrt(float(g.D));
    TP_ROW_LOOP(c, item, g.B * g.H * tiles) {
      const QueryTile qt = query_tile(g, item, tiles, kRows, warp * 16 + row);
      const long bh = qt.bh, b = qt.b, h = qt.h, r0 = qt.r0, i = qt.i, lim = qt.lim, last = qt.last;
      const bool live = qt.live;
      const long nrows = k_min(kRows, g.Tq - r0);
      const long qbase = b * g.Tq * g.ldq + h * g.D, obase = (b * g.Tq * g.H + h) * g.D;
      const T* kb = k + qt.kvo;
      const T* vb = v + qt.kvo;
      typename Ctx::FragA qa[kMmaMaxFrags], oa[kMmaMaxFrags];
      c.sync();
      mma_stage(c, sm.Ks, ldk, q + qbase, g.ldq, r0, nrows, kRows, g.D);
      mma_stage(c, sm.Vs, ldk, dout + obase, g.H * g.D, r0, nrows, kRows, g.D);
      c.sync();
      TP_UNROLL for (int kd = 0; kd < kMmaMaxFrags; ++kd) if (kd < nd) {
        c.load_a(qa[kd], sm.Ks + warp * 16 * ldk + kd * 16, unsigned(ldk));
        c.load_a(oa[kd], sm.Vs + warp * 16 * ldk + kd * 16, unsigned(ldk));
      }
      // This row's term rowsum(dout out) in fp32, each lane of the pair over half the head dims.
      float part = 0;
      if (live)
        for (long d = half * (g.D / 2); d < (half + 1) * (g.D / 2); ++d)
          part += float(ld(dout[obase + i * g.H * g.D + d])) * float(ld(out[obase + i * g.H * g.D + d]));
      const float delta = part + c.shfl_xor(part, 1);
      if (live && half == 0) terms[bh * g.Tq + i] = delta;
      const float M = live ? float(ld(stats[(bh * g.Tq + i) * 2])) : 0.f;
      const float inv = live ? float(ld(stats[(bh * g.Tq + i) * 2 + 1])) : 0.f;
      typename Ctx::FragC acc[kMmaMaxFrags];
      TP_UNROLL for (int dd = 0; dd < kMmaMaxFrags; ++dd) c.fill(acc[dd], 0.f);
      for (long j0 = 0; j0 < last; j0 += kMmaKeys) {
        const long n = k_min(kMmaKeys, last - j0);
        c.sync();
        mma_stage(c, sm.Ks, ldk, kb, g.ldkv, j0, n, kMmaKeys, g.D);
        mma_stage(c, sm.Vs, ldk, vb, g.ldkv, j0, n, kMmaKeys, g.D);
        c.sync();
        for (int sb = 0; sb < int(kMmaKeys / 16); ++sb) {
          typename Ctx::FragC s, dp;
          c.fill(s, 0.f);
          c.fill(dp, 0.f);
          TP_UNROLL for (int kd = 0; kd < kMmaMaxFrags; ++kd) if (kd < nd) {
            typename Ctx::FragBCol f;
            c.load_b_col(f, sm.Ks + sb * 16 * ldk + kd * 16, unsigned(ldk));
            c.mma(s, qa[kd], f, s);
            c.load_b_col(f, sm.Vs + sb * 16 * ldk + kd * 16, unsigned(ldk));
            c.mma(dp, oa[kd], f, dp);
          }
          c.store(Sw + sb * 16, s, unsigned(MmaGeom::lds));
          c.store(Pw + sb * 16, dp, unsigned(MmaGeom::lds));
        }
        c.syncwarp();
        for (long cc = half * (kMmaKeys / 2); cc < (half + 1) * (kMmaKeys / 2); ++cc) {
          const bool ok = live && cc < n && j0 + cc <= lim;
          const float p = ok ? k_exp(Sw[row * MmaGeom::lds + cc] * scale - M) * inv : 0.f;
          DSw[row * MmaGeom::ldp + cc] = to_bf16(p * (Pw[row * MmaGeom::lds + cc] - delta));
        }
        c.syncwarp();
        for (int sb = 0; sb < int(kMmaKeys / 16); ++sb) {
          typename Ctx::FragA da;
          c.load_a(da, DSw + sb * 16, unsigned(MmaGeom::ldp));
          TP_UNROLL for (int dd = 0; dd < kMmaMaxFrags; ++dd) if (dd < nd) {
            typename Ctx::FragBRow kf;
            c.load_b_row(kf, sm.Ks + sb * 16 * ldk + dd * 16, unsigned(ldk));
            c.mma(acc[dd], da, kf, acc[dd]);
          }
        }
      }
      T* qrow = dq + qbase + (r0 + warp * 16) * g.ldq;
      const long wrows = g.Tq - (r0 + warp * 16);
      TP_UNROLL for (int dd = 0; dd < kMmaMaxFrags; ++dd) if (dd < nd)
        mma_emit<true>(c, Sw, MmaGeom::lds, acc[dd], qrow + dd * 16, g.ldq, wrows, scale);
    }
  }
};

// dk += scale dSᵀ q, dv += Pᵀ dout, over the query tiles of the G query heads of one kv head; the query rows'
// terms rowsum(dout out) are those the dQ kernel wrote.
template <class T>
struct FlashBwdDkvMma {
  TP_MMA_WARPS(4)
  static constexpr const char* kName = "flash_attention_bwd_dkv (tensor cores)";
  static constexpr long kStage = kRows > kMmaQueries ? kRows : kMmaQueries;  // rows of Qs and Os
  T* dk;
  T* dv;
  const float* terms;  // [B, H, Tq], from FlashBwdDqMma
  const T* dout;
  const T* stats;
  const T* q;
  const T* k;
  const T* v;
  MmaGeom g;
  struct Smem {
    bf16 *Qs, *Os;      // [kStage, ldk]: the query tile's q and dout (first: staging of k and v)
    float *Ms, *Is, *Ds; // per query row of the tile: max, 1 / sum, rowsum(dout out)
    float *St, *dPt;    // per warp [16, ldt]: scores and dP transposed (keys by queries)
    bf16 *Pt, *dSt;     // per warp [16, ldt16]
  };
  TP_HD static Smem carve(Carve& cv, const MmaGeom& g) {
    Smem s;
    s.Qs = cv.take<bf16>(kStage * g.ldk());
    s.Os = cv.take<bf16>(kStage * g.ldk());
    s.Ms = cv.take<float>(kMmaQueries);
    s.Is = cv.take<float>(kMmaQueries);
    s.Ds = cv.take<float>(kMmaQueries);
    s.St = cv.take<float>(kWarps * 16 * MmaGeom::ldt);
    s.dPt = cv.take<float>(kWarps * 16 * MmaGeom::ldt);
    s.Pt = cv.take<bf16>(kWarps * 16 * MmaGeom::ldt16);
    s.dSt = cv.take<bf16>(kWarps * 16 * MmaGeom::ldt16);
    return s;
  }
  template <class Ctx>
  TP_HD void operator()(Ctx& c) const {
    Carve cv{reinterpret_cast<uintptr_t>(c.template shared<unsigned char>())};
    const Smem sm = carve(cv, g);
    const int warp = int(c.tid() / 32u), lane = int(c.tid() % 32u), row = lane / 2, half = lane % 2, nd = g.nd();
    float* St = sm.St + warp * 16 * MmaGeom::ldt;
    float* dPt = sm.dPt + warp * 16 * MmaGeom::ldt;
    bf16* Pt = sm.Pt + warp * 16 * MmaGeom::ldt16;
    bf16* dSt = sm.dSt + warp * 16 * MmaGeom::ldt16;
    const long ldk = g.ldk(), tiles = (g.Tk + kRows - 1) / kRows;
    const float scale = 1.f / k_sqrt(float(g.D));
    TP_ROW_LOOP(c, item, g.B * g.Hkv * tiles) {
      const long bk = item / tiles, b = bk / g.Hkv, kh = bk % g.Hkv;
      const long j0 = (item % tiles) * kRows, j = j0 + warp * 16 + row;
      const long kbase = b * g.Tk * g.ldkv + kh * g.D, nkeys = k_min(kRows, g.Tk - j0);
      typename Ctx::FragA ka[kMmaMaxFrags], va[kMmaMaxFrags];
      c.sync();
      mma_stage(c, sm.Qs, ldk, k + kbase, g.ldkv, j0, nkeys, kRows, g.D);
      mma_stage(c, sm.Os, ldk, v + kbase, g.ldkv, j0, nkeys, kRows, g.D);
      c.sync();
      TP_UNROLL for (int kd = 0; kd < kMmaMaxFrags; ++kd) if (kd < nd) {
        c.load_a(ka[kd], sm.Qs + warp * 16 * ldk + kd * 16, unsigned(ldk));
        c.load_a(va[kd], sm.Os + warp * 16 * ldk + kd * 16, unsigned(ldk));
      }
      typename Ctx::FragC dka[kMmaMaxFrags], dva[kMmaMaxFrags];
      TP_UNROLL for (int dd = 0; dd < kMmaMaxFrags; ++dd) c.fill(dka[dd], 0.f), c.fill(dva[dd], 0.f);
      const long first = k_max(0L, j0 - g.off());  // the first query that sees a key of the item
      for (long gi = 0; gi < g.G(); ++gi) {
        const long h = kh * g.G() + gi, bh = b * g.H + h, qbase = b * g.Tq * g.ldq + h * g.D;
        const long obase = (b * g.Tq * g.H + h) * g.D;
        for (long i0 = first; i0 < g.Tq; i0 += kMmaQueries) {
          const long n = k_min(kMmaQueries, g.Tq - i0);
          c.sync();
          mma_stage(c, sm.Qs, ldk, q + qbase, g.ldq, i0, n, kMmaQueries, g.D);
          mma_stage(c, sm.Os, ldk, dout + obase, g.H * g.D, i0, n, kMmaQueries, g.D);
          for (long t = long(c.tid()); t < kMmaQueries; t += long(c.bdim())) {
            const long at = bh * g.Tq + i0 + t;
            sm.Ds[t] = t < n ? terms[at] : 0.f;
            sm.Ms[t] = t < n ? float(ld(stats[at * 2])) : 0.f;
            sm.Is[t] = t < n ? float(ld(stats[at * 2 + 1])) : 0.f;
          }
          c.sync();
          for (int qs = 0; qs < int(kMmaQueries / 16); ++qs) {
            typename Ctx::FragC s, dp;
            c.fill(s, 0.f);
            c.fill(dp, 0.f);
            TP_UNROLL for (int kd = 0; kd < kMmaMaxFrags; ++kd) if (kd < nd) {
              typename Ctx::FragBCol f;
              c.load_b_col(f, sm.Qs + qs * 16 * ldk + kd * 16, unsigned(ldk));
              c.mma(s, ka[kd], f, s);
              c.load_b_col(f, sm.Os + qs * 16 * ldk + kd * 16, unsigned(ldk));
              c.mma(dp, va[kd], f, dp);
            }
            c.store(St + qs * 16, s, unsigned(MmaGeom::ldt));
            c.store(dPt + qs * 16, dp, unsigned(MmaGeom::ldt));
          }
          c.syncwarp();
          for (long cc = half * (kMmaQueries / 2); cc < (half + 1) * (kMmaQueries / 2); ++cc) {
            const bool ok = j < g.Tk && cc < n && j <= i0 + cc + g.off();
            const float p = ok ? k_exp(St[row * MmaGeom::ldt + cc] * scale - sm.Ms[cc]) * sm.Is[cc] : 0.f;
            Pt[row * MmaGeom::ldt16 + cc] = to_bf16(p);
            dSt[row * MmaGeom::ldt16 + cc] = to_bf16(p * (dPt[row * MmaGeom::ldt + cc] - sm.Ds[cc]));
          }
          c.syncwarp();
          for (int qs = 0; qs < int(kMmaQueries / 16); ++qs) {
            typename Ctx::FragA pa, da;
            c.load_a(pa, Pt + qs * 16, unsigned(MmaGeom::ldt16));
            c.load_a(da, dSt + qs * 16, unsigned(MmaGeom::ldt16));
            TP_UNROLL for (int dd = 0; dd < kMmaMaxFrags; ++dd) if (dd < nd) {
              typename Ctx::FragBRow f;
              c.load_b_row(f, sm.Os + qs * 16 * ldk + dd * 16, unsigned(ldk));
              c.mma(dva[dd], pa, f, dva[dd]);
              c.load_b_row(f, sm.Qs + qs * 16 * ldk + dd * 16, unsigned(ldk));
              c.mma(dka[dd], da, f, dka[dd]);
            }
          }
        }
      }
      const long wrows = g.Tk - (j0 + warp * 16), at = kbase + (j0 + warp * 16) * g.ldkv;
      TP_UNROLL for (int dd = 0; dd < kMmaMaxFrags; ++dd) if (dd < nd) {
        mma_emit<true>(c, St, MmaGeom::ldt, dka[dd], dk + at + dd * 16, g.ldkv, wrows, scale);
        mma_emit<true>(c, St, MmaGeom::ldt, dva[dd], dv + at + dd * 16, g.ldkv, wrows, 1.f);
      }
    }
  }
};

template <class K>
inline unsigned mma_smem(const MmaGeom& g) {
  Carve cv;
  (void)K::carve(cv, g);
  return unsigned(cv.off);
}

}  // namespace tp::kernels
