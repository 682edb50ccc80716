// k_flash_mma: the flash attention kernels of k_flash.hpp on tensor cores, for bf16 GEMM operands (training.precision
// "bf16"; q, k, v and out stored as fp32 or, S = bf16, as bf16) and head dims D = 16, 32, 48, 64, written as
// FlashAttention-2 writes them: every product
// (S = q kᵀ, P v, dP = dout vᵀ, dS k, Pᵀ dout, dSᵀ q) is a chain of m16n8k16 bf16 tensor-core instructions
// accumulating in fp32 registers (EmuCtx::mma16816; its fragment layout is documented in exec/kernels/emulator/emu.hpp), the
// operands read from shared memory with ldmatrix (ldsm4, ldsm4_t). Scores, probabilities and their gradients stay
// in the accumulator registers: each lane holds two rows' (g, g + 8) columns 2t, 2t + 1 of every 8-column tile, a
// row's four lanes reduce it with two shuffles, and an accumulator becomes the next product's A operand in place.
// The operands are rounded where k_flash.hpp's bf16 path rounds them (q, k, v, dout, P, dS), except that the forward
// is one pass with online rescaling (FlashAttention-2): P v takes P = exp(s - the running max) rounded, and out is
// divided by the row's sum at the end, where the reference rounds the normalised P.
// Work: 4 warps of 16 rows (TP_MMA_WARPS), 64 rows per item. Forward and dQ: one item per (b, query head, 64 query
// rows), key tiles of 64 (dQ in halves of 32 keys, for registers). dK / dV: one item per (b, kv head, 64 key
// rows), query tiles of 64 (in quarters of 16) of each query head of the group. Tiles are staged from global memory
// as bf16; the loop tiles (key tiles, dK / dV's query tiles) are double-buffered, the next loading (by cp.async when
// its rows are bf16 on 16 bytes: mma_stage_tile) while this one is computed, one sync per tile. The backward's row
// terms rowsum(dout ⊙ out), and dout rounded to bf16, are written once, by the dQ kernel, to scratch for the dK / dV
// kernel.
// Invariants: as k_flash.hpp (block-uniform loop bounds, one writer per output element, no atomics); every lane of a
// warp executes every mma16816 / ldsm4 (masks act on values, never on control flow); every ldmatrix row address is
// 16-byte aligned (carve() starts each buffer on 32 bytes, rows are (D + 8) bf16 = 2 D + 16 bytes, column offsets
// multiples of 8); register arrays are indexed only by unrolled constant-bound loops; a tile buffer is written (or
// its copies issued) only after the sync that follows every warp's last read of it, and read only after this
// thread's cp_async_wait and the sync after it.
#pragma once
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "exec/kernels/k_rows.hpp"  // TP_ROW_LOOP

namespace tp::kernels {

constexpr long kMmaKeys = 64;       // keys per tile (forward, dQ)
constexpr long kMmaQueries = 64;    // queries per tile (dK, dV)
constexpr int kMmaMaxFrags = 4;     // head dims / 16
constexpr int kMmaHalf = 32;        // columns of the backward's score tiles in registers at a time
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
  long ldq = 0, ldkv = 0;  // row strides of q / dq and of k, v, dk, dv (exec/backends/ops.hpp)
  bool async = false;      // the key tiles (k, v) are staged by cp.async (mma_async_fits)
  TP_HD long ldk() const { return D + 8; }              // bf16 row tiles (2 D + 16 bytes: 16-byte rows, no bank conflicts)
  TP_HD long tile() const { return kMmaKeys * ldk(); }  // elements of one key tile buffer (a multiple of 32 bytes)
  TP_HD long off() const { return Tk - Tq; }
  TP_HD long G() const { return H / Hkv; }
  TP_HD int nd() const { return int(D / 16); }
};

// One work item of the query-side kernels (forward, dQ; both paths): sequence b, query head h of kv head kh, the
// tile of `rows` query rows from r0, the last tile first (under the causal mask the last rows see the most keys:
// the longest items start first, so fewer run alone at the end of the grid). This thread's row i (ic: clamped to the last row, for reads; live: the row
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
  t.r0 = (tiles - 1 - item % tiles) * rows, t.i = t.r0 + lr, t.ic = t.i < g.Tq ? t.i : g.Tq - 1, t.lim = t.ic + g.off();
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
// on a 16-byte boundary (every call of the model's, fused QKV included) are read four floats per load, bf16 rows
// with D and the stride multiples of 8 on a 16-byte boundary copied eight at a time (16 bytes).
template <class Ctx, class T>
TP_HD void mma_stage(Ctx& c, bf16* dst, long ldd, const T* src, long stride, long r0, long n, long rows, long D) {
  const T* s0 = src + r0 * stride;
  const int nn = int(n), dd = int(D), ldo = int(ldd);
  if constexpr (std::is_same_v<T, bf16>) {
    if (dd % 8 == 0 && stride % 8 == 0 && ldo % 8 == 0 && aligned_to(s0, 16) && aligned_to(dst, 16)) {
      constexpr int kLoads = 4;  // (as below: the loads issued before the stores)
      const int q8 = dd / 8, total = int(rows) * q8, bd = int(c.bdim());
      for (int e0 = int(c.tid()); e0 < total; e0 += kLoads * bd) {
        B8 x[kLoads];
        TP_UNROLL for (int u = 0; u < kLoads; ++u) {
          const int e = e0 + u * bd, r = e / q8, d = (e - r * q8) * 8;
          x[u] = e < total && r < nn ? ld8(s0 + long(r) * stride + d) : B8{{0u, 0u, 0u, 0u}};
        }
        TP_UNROLL for (int u = 0; u < kLoads; ++u) {
          const int e = e0 + u * bd, r = e / q8, d = (e - r * q8) * 8;
          if (e < total) st8(dst + r * ldo + d, x[u]);
        }
      }
      return;
    }
  }
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
// Whether rows of src (row stride `stride`, D columns) can be staged by cp.async: bf16, D and the stride multiples
// of 8, on a 16-byte boundary (so is every row: the model's packed QKV under bf16 storage).
template <class T>
inline bool mma_async_fits(const T* src, long stride, long D) {
  return std::is_same_v<T, bf16> && D % 8 == 0 && stride % 8 == 0 && aligned_to(src, 16);
}
// mma_stage's tile by cp.async when `async` (the rows as mma_async_fits says; 16 bytes per copy, rows past n
// zero-filled), else mma_stage itself. Either way the tile is complete once every thread has waited for its copies
// (cp_async_wait) and the block has synced; the caller commits the group.
template <class Ctx, class T>
TP_HD void mma_stage_tile(Ctx& c, bool async, bf16* dst, long ldd, const T* src, long stride, long r0, long n, long rows,
                          long D) {
  if constexpr (std::is_same_v<T, bf16>) {
    if (async) {
      const bf16* s0 = src + r0 * stride;
      const int q8 = int(D / 8), total = int(rows) * q8, nn = int(n), ldo = int(ldd);
      for (int e = int(c.tid()); e < total; e += int(c.bdim())) {
        const int r = e / q8, d = (e - r * q8) * 8;
        c.cp_async16(dst + r * ldo + d, r < nn ? s0 + long(r) * stride + d : s0, r >= nn);
      }
    } else {  // (unaligned bf16 rows, which the model never passes: element by element, few registers)
      const int total = int(rows * D), dd = int(D), nn = int(n), ldo = int(ldd);
      for (int e = int(c.tid()); e < total; e += int(c.bdim())) {
        const int r = e / dd, d = e - r * dd;
        dst[r * ldo + d] = r < nn ? src[(r0 + r) * stride + d] : to_bf16(0.f);
      }
    }
    return;
  }
  mma_stage(c, dst, ldd, src, stride, r0, n, rows, D);
}
// Key tile j0 (n = its keys before `last`) of kb and vb into tile buffer `buf` of Ks and Vs, as one cp.async group.
template <class Ctx, class S>
TP_HD void mma_stage_kv(Ctx& c, const MmaGeom& g, bf16* Ks, bf16* Vs, int buf, const S* kb, const S* vb, long j0,
                        long last) {
  const long n = k_min(kMmaKeys, last - j0);
  mma_stage_tile(c, g.async, Ks + buf * g.tile(), g.ldk(), kb, g.ldkv, j0, n, kMmaKeys, g.D);
  mma_stage_tile(c, g.async, Vs + buf * g.tile(), g.ldk(), vb, g.ldkv, j0, n, kMmaKeys, g.D);
  c.cp_async_commit();
}

// ---- fragments (lane l: g = l / 4, t = l % 4; the layouts of EmuCtx::mma16816) ----
// A operand (16 x 16) of the warp's 16 rows of the row-major bf16 tile X (row stride ld), columns k0..k0+15.
template <class Ctx>
TP_HD TP_INLINE void frag_a(Ctx& c, uint32_t a[4], const bf16* X, long ld, int k0) {
  const int lane = int(c.tid() % 32u);
  c.ldsm4(a, X + (lane % 8 + 8 * ((lane / 8) % 2)) * ld + k0 + 8 * (lane / 16));
}
// B operands of the n-tiles n0 and n0 + 8 over k0..k0+15 where B(k, n) = Y[n ld + k] (Y row-major with the n index
// as row: k in "q kᵀ"): b = {b0, b1} of n0, then of n0 + 8.
template <class Ctx>
TP_HD TP_INLINE void frag_bt(Ctx& c, uint32_t b[4], const bf16* Y, long ld, int n0, int k0) {
  const int lane = int(c.tid() % 32u), m = lane / 8;
  c.ldsm4(b, Y + (n0 + lane % 8 + 8 * (m / 2)) * ld + k0 + 8 * (m % 2));
}
// The same where B(k, n) = Y[k ld + n] (v in "P v"): ldmatrix's transpose.
template <class Ctx>
TP_HD TP_INLINE void frag_b(Ctx& c, uint32_t b[4], const bf16* Y, long ld, int k0, int n0) {
  const int lane = int(c.tid() % 32u), m = lane / 8;
  c.ldsm4_t(b, Y + (k0 + lane % 8 + 8 * (m % 2)) * ld + n0 + 8 * (m / 2));
}
// acc[2 p], acc[2 p + 1] += a b for the n-tile pairs p < pairs (kMax at most) from n0 + 16 p, with frag_bt's b
// over k0..k0+15; mma_b the same with frag_b's.
template <int kMax, class Ctx>
TP_HD TP_INLINE void mma_bt(Ctx& c, float (*acc)[4], const uint32_t a[4], const bf16* Y, long ld, int n0, int k0, int pairs) {
  TP_UNROLL for (int p = 0; p < kMax; ++p) if (p < pairs) {
    uint32_t b[4];
    frag_bt(c, b, Y, ld, n0 + 16 * p, k0);
    c.mma16816(acc[2 * p], a, b);
    c.mma16816(acc[2 * p + 1], a, b + 2);
  }
}
template <int kMax, class Ctx>
TP_HD TP_INLINE void mma_b(Ctx& c, float (*acc)[4], const uint32_t a[4], const bf16* Y, long ld, int k0, int n0, int pairs) {
  TP_UNROLL for (int p = 0; p < kMax; ++p) if (p < pairs) {
    uint32_t b[4];
    frag_b(c, b, Y, ld, k0, n0 + 16 * p);
    c.mma16816(acc[2 * p], a, b);
    c.mma16816(acc[2 * p + 1], a, b + 2);
  }
}
// The A operand over columns 16 kc.. of an accumulator row of 8-column tiles: tiles 2 kc (lo) and 2 kc + 1 (hi),
// rounded to bf16.
TP_HD TP_INLINE void acc_to_a(uint32_t a[4], const float lo[4], const float hi[4]) {
  a[0] = pack_bf16x2(lo[0], lo[1]), a[1] = pack_bf16x2(lo[2], lo[3]);
  a[2] = pack_bf16x2(hi[0], hi[1]), a[3] = pack_bf16x2(hi[2], hi[3]);
}
// dst[r, col + (2t, 2t + 1)] (+)= scale x the accumulator tile f, for its rows r = g, g + 8 below nrows; with kAdd
// and not `old`, 0 + scale x f (what accumulating into zeros gives, -0 included).
template <bool kAdd, class T>
TP_HD TP_INLINE void frag_emit(int lane, const float f[4], T* dst, long stride, long col, long nrows, float scale,
                               bool old = true) {
  const int g = lane / 4, t = lane % 4;
  TP_UNROLL for (int e = 0; e < 4; ++e) {
    const long r = g + 8 * (e / 2);
    if (r < nrows) {
      T& y = dst[r * stride + col + 2 * t + e % 2];
      const float x = scale * f[e];
      y = st<T>(kAdd ? (old ? float(ld(y)) : 0.f) + x : x);
    }
  }
}
template <class T, class S = T>
struct FlashFwdMma {
  TP_MMA_WARPS(4)
  static constexpr const char* kName = "flash_attention_fwd (tensor cores)";
  static_assert(kRows <= kMmaKeys, "the query tile is staged in Ks");
  S* out;
  T* stats;
  const S* q;
  const S* k;
  const S* v;
  MmaGeom g;
  struct Smem {
    bf16 *Ks, *Vs;  // two tile buffers each, [2][kMmaKeys, ldk]: key tile t in buffer t % 2 (the query tile first in 1)
  };
  TP_HD static Smem carve(Carve& cv, const MmaGeom& g) {
    Smem s;
    s.Ks = cv.take<bf16>(2 * g.tile());
    s.Vs = cv.take<bf16>(2 * g.tile());
    return s;
  }
  template <class Ctx>
  TP_HD void operator()(Ctx& c) const {
    Carve cv{reinterpret_cast<uintptr_t>(c.template shared<unsigned char>())};
    const Smem sm = carve(cv, g);
    const int warp = int(c.tid() / 32u), lane = int(c.tid() % 32u), t4 = lane % 4, nd = g.nd();
    const long ldk = g.ldk(), tiles = (g.Tq + kRows - 1) / kRows;
    const float scale = 1.f / k_sqrt(float(g.D)), sl2 = scale * kLog2e;  // exp(s scale - x) = 2^(s sl2 - x log2 e)
    TP_ROW_LOOP(c, item, g.B * g.H * tiles) {
      const QueryTile qt = query_tile(g, item, tiles, kRows, warp * 16 + lane / 4);  // row g (row g + 8: i + 8)
      const long bh = qt.bh, b = qt.b, h = qt.h, r0 = qt.r0, last = qt.last;
      const long row[2] = {qt.i, qt.i + 8};
      const bool live[2] = {row[0] < g.Tq, row[1] < g.Tq};
      const S* kb = k + qt.kvo;
      const S* vb = v + qt.kvo;
      c.sync();  // (the previous item's reads of the buffers are done)
      mma_stage(c, sm.Ks + g.tile(), ldk, q + b * g.Tq * g.ldq + h * g.D, g.ldq, r0, k_min(kRows, g.Tq - r0), kRows, g.D);
      mma_stage_kv(c, g, sm.Ks, sm.Vs, 0, kb, vb, 0, last);  // key tile 0, in flight under the query fragments' loads
      c.sync();
      uint32_t qa[kMmaMaxFrags][4];
      TP_UNROLL for (int kd = 0; kd < kMmaMaxFrags; ++kd) if (kd < nd) frag_a(c, qa[kd], sm.Ks + g.tile() + warp * 16 * ldk, ldk, kd * 16);
      // o, and per row (g, g + 8) the running max m of the raw scores s = q·k and this lane's part of the sum
      float o[2 * kMmaMaxFrags][4] = {}, m[2] = {k_neg_inf<float>(), k_neg_inf<float>()}, l[2] = {0.f, 0.f};
      for (long j0 = 0; j0 < last; j0 += kMmaKeys) {
        const long n = k_min(kMmaKeys, last - j0);
        // The mask as one bound per row: the tile's columns below hi[r] exist and are visible to row r.
        const long hi[2] = {live[0] ? k_min(n, row[0] + g.off() - j0 + 1) : 0, live[1] ? k_min(n, row[1] + g.off() - j0 + 1) : 0};
        // Pipelined: this tile complete for every thread, and every warp done with the other buffer (the previous
        // tile, or the query tile), which the next tile then takes while this one is computed.
        c.template cp_async_wait<0>();
        c.sync();
        const int buf = int(j0 / kMmaKeys) % 2;
        if (j0 + kMmaKeys < last) mma_stage_kv(c, g, sm.Ks, sm.Vs, 1 - buf, kb, vb, j0 + kMmaKeys, last);
        const bf16* Ks = sm.Ks + buf * g.tile();
        const bf16* Vs = sm.Vs + buf * g.tile();
        float s[kMmaKeys / 8][4] = {};
        TP_UNROLL for (int kd = 0; kd < kMmaMaxFrags; ++kd) if (kd < nd)
          mma_bt<int(kMmaKeys / 16)>(c, s, qa[kd], Ks, ldk, 0, kd * 16, int(kMmaKeys / 16));
        // The mask; the tile's row max, then the running max, the rescale of l and o, and P = exp(scale (s - m)).
        float tm[2] = {k_neg_inf<float>(), k_neg_inf<float>()};
        TP_UNROLL for (int nt = 0; nt < int(kMmaKeys / 8); ++nt) TP_UNROLL for (int e = 0; e < 4; ++e) {
          if (nt * 8 + 2 * t4 + e % 2 >= hi[e / 2]) s[nt][e] = k_neg_inf<float>();
          tm[e / 2] = k_max(tm[e / 2], s[nt][e]);
        }
        float base[2];  // m sl2, in the exponent's units
        TP_UNROLL for (int r = 0; r < 2; ++r) {
          const float mn = k_max(m[r], group_max(c, tm[r], 4));
          base[r] = mn == k_neg_inf<float>() ? 0.f : mn * sl2;  // (a row without keys yet: every P is 0)
          const float alpha = k_exp2(m[r] * sl2 - base[r]);
          l[r] *= alpha;
          TP_UNROLL for (int dt = 0; dt < 2 * kMmaMaxFrags; ++dt) o[dt][2 * r] *= alpha, o[dt][2 * r + 1] *= alpha;
          m[r] = mn;
        }
        TP_UNROLL for (int nt = 0; nt < int(kMmaKeys / 8); ++nt) TP_UNROLL for (int e = 0; e < 4; ++e) {
          s[nt][e] = k_exp2(s[nt][e] * sl2 - base[e / 2]);
          l[e / 2] += s[nt][e];
        }
        TP_UNROLL for (int kc = 0; kc < int(kMmaKeys / 16); ++kc) {
          uint32_t pa[4];
          acc_to_a(pa, s[2 * kc], s[2 * kc + 1]);
          mma_b<kMmaMaxFrags>(c, o, pa, Vs, ldk, kc * 16, 0, nd);
        }
      }
      float inv[2];
      TP_UNROLL for (int r = 0; r < 2; ++r) {
        const float L = group_sum(c, l[r], 4);
        inv[r] = L > 0 ? 1.f / L : 0.f;
        TP_UNROLL for (int dt = 0; dt < 2 * kMmaMaxFrags; ++dt) o[dt][2 * r] *= inv[r], o[dt][2 * r + 1] *= inv[r];
      }
      S* orow = out + (b * g.Tq * g.H + h) * g.D + (r0 + warp * 16) * g.H * g.D;
      const long wrows = g.Tq - (r0 + warp * 16);  // this warp's rows that exist
      TP_UNROLL for (int dt = 0; dt < 2 * kMmaMaxFrags; ++dt) if (dt < 2 * nd)
        frag_emit<false>(lane, o[dt], orow, g.H * g.D, dt * 8, wrows, 1.f);
      TP_UNROLL for (int r = 0; r < 2; ++r)
        if (live[r] && t4 == 0)
          stats[(bh * g.Tq + row[r]) * 2] = st<T>(m[r] * scale), stats[(bh * g.Tq + row[r]) * 2 + 1] = st<T>(inv[r]);
    }
  }
};

// dq += scale dS k (dS = P (dP - rowsum(dout out)), P recomputed from the statistics); writes each query row's term
// rowsum(dout out) to `terms` for the dK / dV kernel, which runs after it.
template <class T, class S = T>
struct FlashBwdDqMma {
  TP_MMA_WARPS(4)
  static constexpr const char* kName = "flash_attention_bwd_dq (tensor cores)";
  static_assert(kRows <= kMmaKeys, "the query tile is staged in Ks");
  T* dq;
  float* terms;  // [B, H, Tq]
  bf16* dout16;  // [B, Tq, H, D]: dout rounded, as staged here, for the dK / dV kernel
  const T* dout;
  const S* out;
  const T* stats;
  const S* q;
  const S* k;
  const S* v;
  MmaGeom g;
  bool accumulate = true;  // dq += (else dq = the gradient: what adding it to zeros gives)
  struct Smem {
    bf16 *Ks, *Vs;  // two tile buffers each, as the forward's (first in buffer 1: the query tile's q and dout)
  };
  TP_HD static Smem carve(Carve& cv, const MmaGeom& g) {
    Smem s;
    s.Ks = cv.take<bf16>(2 * g.tile());
    s.Vs = cv.take<bf16>(2 * g.tile());
    return s;
  }
  template <class Ctx>
  TP_HD void operator()(Ctx& c) const {
    Carve cv{reinterpret_cast<uintptr_t>(c.template shared<unsigned char>())};
    const Smem sm = carve(cv, g);
    const int warp = int(c.tid() / 32u), lane = int(c.tid() % 32u), t4 = lane % 4, nd = g.nd();
    const long ldk = g.ldk(), tiles = (g.Tq + kRows - 1) / kRows;
    const float scale = 1.f / k_sqrt(float(g.D)), sl2 = scale * kLog2e;
    TP_ROW_LOOP(c, item, g.B * g.H * tiles) {
      const QueryTile qt = query_tile(g, item, tiles, kRows, warp * 16 + lane / 4);
      const long bh = qt.bh, b = qt.b, h = qt.h, r0 = qt.r0, last = qt.last;
      const long row[2] = {qt.i, qt.i + 8};
      const bool live[2] = {row[0] < g.Tq, row[1] < g.Tq};
      const long nrows = k_min(kRows, g.Tq - r0);
      const long qbase = b * g.Tq * g.ldq + h * g.D, obase = (b * g.Tq * g.H + h) * g.D;
      const S* kb = k + qt.kvo;
      const S* vb = v + qt.kvo;
      c.sync();  // (the previous item's reads of the buffers are done)
      mma_stage(c, sm.Ks + g.tile(), ldk, q + qbase, g.ldq, r0, nrows, kRows, g.D);
      mma_stage(c, sm.Vs + g.tile(), ldk, dout + obase, g.H * g.D, r0, nrows, kRows, g.D);
      mma_stage_kv(c, g, sm.Ks, sm.Vs, 0, kb, vb, 0, last);  // key tile 0, in flight meanwhile
      c.sync();
      for (int e = int(c.tid()); e < int(nrows * g.D / 8); e += int(c.bdim())) {  // (the staged dout, 16 bytes at a time)
        const int r = e / int(g.D / 8), d = (e - r * int(g.D / 8)) * 8;
        st8(dout16 + obase + (r0 + r) * g.H * g.D + d, ld8(sm.Vs + g.tile() + r * ldk + d));
      }
      uint32_t qa[kMmaMaxFrags][4], da[kMmaMaxFrags][4];
      TP_UNROLL for (int kd = 0; kd < kMmaMaxFrags; ++kd) if (kd < nd) {
        frag_a(c, qa[kd], sm.Ks + g.tile() + warp * 16 * ldk, ldk, kd * 16);
        frag_a(c, da[kd], sm.Vs + g.tile() + warp * 16 * ldk, ldk, kd * 16);
      }
      // The rows' terms rowsum(dout out) in fp32: each lane of the quad over a quarter of the head dims.
      float delta[2], M[2], inv[2];  // M: the row's max in log2 units (M log2 e)
      TP_UNROLL for (int r = 0; r < 2; ++r) {
        float part = 0;
        const long at = obase + row[r] * g.H * g.D;
        if (live[r])
          for (long d = t4 * (g.D / 4); d < (t4 + 1) * (g.D / 4); ++d) part += float(ld(dout[at + d])) * float(ld(out[at + d]));
        delta[r] = group_sum(c, part, 4);
        if (live[r] && t4 == 0) terms[bh * g.Tq + row[r]] = delta[r];
        M[r] = live[r] ? float(ld(stats[(bh * g.Tq + row[r]) * 2])) * kLog2e : 0.f;
        inv[r] = live[r] ? float(ld(stats[(bh * g.Tq + row[r]) * 2 + 1])) : 0.f;
      }
      float acc[2 * kMmaMaxFrags][4] = {};
      for (long j0 = 0; j0 < last; j0 += kMmaKeys) {
        const long n = k_min(kMmaKeys, last - j0);
        const long hi[2] = {live[0] ? k_min(n, row[0] + g.off() - j0 + 1) : 0, live[1] ? k_min(n, row[1] + g.off() - j0 + 1) : 0};  // (as the forward's)
        c.template cp_async_wait<0>();  // (pipelined as the forward's)
        c.sync();
        const int buf = int(j0 / kMmaKeys) % 2;
        if (j0 + kMmaKeys < last) mma_stage_kv(c, g, sm.Ks, sm.Vs, 1 - buf, kb, vb, j0 + kMmaKeys, last);
        const bf16* Ks = sm.Ks + buf * g.tile();
        const bf16* Vs = sm.Vs + buf * g.tile();
        for (int c0 = 0; c0 < int(kMmaKeys); c0 += kMmaHalf) {
          float s[kMmaHalf / 8][4] = {}, dp[kMmaHalf / 8][4] = {};
          TP_UNROLL for (int kd = 0; kd < kMmaMaxFrags; ++kd) if (kd < nd) {
            mma_bt<kMmaHalf / 16>(c, s, qa[kd], Ks, ldk, c0, kd * 16, kMmaHalf / 16);
            mma_bt<kMmaHalf / 16>(c, dp, da[kd], Vs, ldk, c0, kd * 16, kMmaHalf / 16);
          }
          TP_UNROLL for (int nt = 0; nt < kMmaHalf / 8; ++nt) TP_UNROLL for (int e = 0; e < 4; ++e) {
            const int r = e / 2;
            const float p = c0 + nt * 8 + 2 * t4 + e % 2 < hi[r] ? k_exp2(s[nt][e] * sl2 - M[r]) * inv[r] : 0.f;
            s[nt][e] = p * (dp[nt][e] - delta[r]);  // dS
          }
          TP_UNROLL for (int kc = 0; kc < kMmaHalf / 16; ++kc) {
            uint32_t dsa[4];
            acc_to_a(dsa, s[2 * kc], s[2 * kc + 1]);
            mma_b<kMmaMaxFrags>(c, acc, dsa, Ks, ldk, c0 + kc * 16, 0, nd);
          }
        }
      }
      T* qrow = dq + qbase + (r0 + warp * 16) * g.ldq;
      const long wrows = g.Tq - (r0 + warp * 16);
      TP_UNROLL for (int dt = 0; dt < 2 * kMmaMaxFrags; ++dt) if (dt < 2 * nd)
        frag_emit<true>(lane, acc[dt], qrow, g.ldq, dt * 8, wrows, scale, accumulate);
    }
  }
};

// dk += scale dSᵀ q, dv += Pᵀ dout, over the query tiles of the G query heads of one kv head; the warp's rows are
// keys, so Sᵀ = k qᵀ and dPᵀ = v doutᵀ come out transposed in the registers. The query rows' terms
// rowsum(dout out) and dout rounded to bf16 are those the dQ kernel wrote. The query tiles (G heads' in turn, one
// sequence u) are double-buffered as the forward's key tiles: q and dout by cp.async when their rows allow, the
// rows' statistics and terms by plain loads.
template <class T, class S = T>
struct FlashBwdDkvMma {
  TP_MMA_WARPS(4)
  static constexpr const char* kName = "flash_attention_bwd_dkv (tensor cores)";
  static_assert(kRows <= kMmaQueries, "the item's k, v rows are staged in a query tile buffer");
  static constexpr int kCols = 16;  // query columns of the score tiles in registers at a time (registers: no spills)
  T* dk;
  T* dv;
  const float* terms;   // [B, H, Tq], from FlashBwdDqMma
  const bf16* dout16;   // [B, Tq, H, D], from FlashBwdDqMma
  const T* stats;
  const S* q;
  const S* k;
  const S* v;
  MmaGeom g;
  bool async_q = false, async_o = false;  // q's, dout16's tiles by cp.async (mma_async_fits)
  bool accumulate = true;                 // dk, dv += (else =, as FlashBwdDqMma's)
  struct Smem {
    bf16 *Qs, *Os;        // two buffers each, [2][kMmaQueries, ldk]: query tile u's q and dout in u % 2 (k, v first in 1)
    float *Ms, *Is, *Ds;  // two buffers each, [2][kMmaQueries]: per query row max (log2 units), 1 / sum, rowsum(dout out)
  };
  TP_HD static long qtile(const MmaGeom& g) { return kMmaQueries * g.ldk(); }
  TP_HD static Smem carve(Carve& cv, const MmaGeom& g) {
    Smem s;
    s.Qs = cv.take<bf16>(2 * qtile(g));
    s.Os = cv.take<bf16>(2 * qtile(g));
    s.Ms = cv.take<float>(2 * kMmaQueries);
    s.Is = cv.take<float>(2 * kMmaQueries);
    s.Ds = cv.take<float>(2 * kMmaQueries);
    return s;
  }
  // The query tile of rows i0.. of query head h, sequence b, into buffer buf.
  template <class Ctx>
  TP_HD void stage(Ctx& c, const Smem& sm, int buf, long i0, long h, long b) const {
    const long n = k_min(kMmaQueries, g.Tq - i0), bh = b * g.H + h, ldk = g.ldk();
    mma_stage_tile(c, async_q, sm.Qs + buf * qtile(g), ldk, q + b * g.Tq * g.ldq + h * g.D, g.ldq, i0, n, kMmaQueries, g.D);
    mma_stage_tile(c, async_o, sm.Os + buf * qtile(g), ldk, dout16 + (b * g.Tq * g.H + h) * g.D, g.H * g.D, i0, n,
                   kMmaQueries, g.D);
    c.cp_async_commit();
    for (long t = long(c.tid()); t < kMmaQueries; t += long(c.bdim())) {
      const long at = bh * g.Tq + i0 + t;
      sm.Ds[buf * kMmaQueries + t] = t < n ? terms[at] : 0.f;
      sm.Ms[buf * kMmaQueries + t] = t < n ? float(ld(stats[at * 2])) * kLog2e : 0.f;
      sm.Is[buf * kMmaQueries + t] = t < n ? float(ld(stats[at * 2 + 1])) : 0.f;
    }
  }
  template <class Ctx>
  TP_HD void operator()(Ctx& c) const {
    Carve cv{reinterpret_cast<uintptr_t>(c.template shared<unsigned char>())};
    const Smem sm = carve(cv, g);
    const int warp = int(c.tid() / 32u), lane = int(c.tid() % 32u), t4 = lane % 4, nd = g.nd();
    const long ldk = g.ldk(), tiles = (g.Tk + kRows - 1) / kRows;
    const float scale = 1.f / k_sqrt(float(g.D)), sl2 = scale * kLog2e;
    TP_ROW_LOOP(c, item, g.B * g.Hkv * tiles) {
      const long bk = item / tiles, b = bk / g.Hkv, kh = bk % g.Hkv;
      const long j0 = (item % tiles) * kRows, jw = j0 + warp * 16 + lane / 4;
      const long key[2] = {jw, jw + 8};
      const long kbase = b * g.Tk * g.ldkv + kh * g.D, nkeys = k_min(kRows, g.Tk - j0);
      const long first = k_max(0L, j0 - g.off());  // the first query that sees a key of the item
      c.sync();  // (the previous item's reads of the buffers are done)
      mma_stage(c, sm.Qs + qtile(g), ldk, k + kbase, g.ldkv, j0, nkeys, kRows, g.D);
      mma_stage(c, sm.Os + qtile(g), ldk, v + kbase, g.ldkv, j0, nkeys, kRows, g.D);
      stage(c, sm, 0, first, kh * g.G(), b);  // query tile 0, in flight meanwhile
      c.sync();
      uint32_t ka[kMmaMaxFrags][4], va[kMmaMaxFrags][4];
      TP_UNROLL for (int kd = 0; kd < kMmaMaxFrags; ++kd) if (kd < nd) {
        frag_a(c, ka[kd], sm.Qs + qtile(g) + warp * 16 * ldk, ldk, kd * 16);
        frag_a(c, va[kd], sm.Os + qtile(g) + warp * 16 * ldk, ldk, kd * 16);
      }
      float dka[2 * kMmaMaxFrags][4] = {}, dva[2 * kMmaMaxFrags][4] = {};
      // The query tiles: rows i0.. of head h, the heads kh G .. kh G + G - 1 in turn (u counts them).
      for (long u = 0, h = kh * g.G(), i0 = first; h < (kh + 1) * g.G(); ++u) {
        const long n = k_min(kMmaQueries, g.Tq - i0);
        // The mask as bounds per key row: the tile's columns (queries) in [lo[r], hi[r]) exist and see key r.
        const long lo[2] = {key[0] - i0 - g.off(), key[1] - i0 - g.off()};
        const long hi[2] = {key[0] < g.Tk ? n : 0, key[1] < g.Tk ? n : 0};
        c.template cp_async_wait<0>();  // (pipelined as the forward's key tiles)
        c.sync();
        const int buf = int(u % 2);
        const long h1 = i0 + kMmaQueries < g.Tq ? h : h + 1, i1 = h1 == h ? i0 + kMmaQueries : first;  // the next
        if (h1 < (kh + 1) * g.G()) stage(c, sm, 1 - buf, i1, h1, b);
        const bf16* Qs = sm.Qs + buf * qtile(g);
        const bf16* Os = sm.Os + buf * qtile(g);
        const float* Ms = sm.Ms + buf * kMmaQueries;
        const float* Is = sm.Is + buf * kMmaQueries;
        const float* Ds = sm.Ds + buf * kMmaQueries;
        for (int c0 = 0; c0 < int(kMmaQueries) && c0 < n; c0 += kCols) {  // (block-uniform)
          float sT[kCols / 8][4] = {}, dpT[kCols / 8][4] = {};
          TP_UNROLL for (int kd = 0; kd < kMmaMaxFrags; ++kd) if (kd < nd) {
            mma_bt<kCols / 16>(c, sT, ka[kd], Qs, ldk, c0, kd * 16, kCols / 16);
            mma_bt<kCols / 16>(c, dpT, va[kd], Os, ldk, c0, kd * 16, kCols / 16);
          }
          TP_UNROLL for (int nt = 0; nt < kCols / 8; ++nt) TP_UNROLL for (int e = 0; e < 4; ++e) {
            const int col = c0 + nt * 8 + 2 * t4 + e % 2;  // the query i0 + col
            const float p = col >= lo[e / 2] && col < hi[e / 2] ? k_exp2(sT[nt][e] * sl2 - Ms[col]) * Is[col] : 0.f;
            sT[nt][e] = p;
            dpT[nt][e] = p * (dpT[nt][e] - Ds[col]);  // dSᵀ
          }
          TP_UNROLL for (int kc = 0; kc < kCols / 16; ++kc) {
            uint32_t pa[4], dsa[4];
            acc_to_a(pa, sT[2 * kc], sT[2 * kc + 1]);
            acc_to_a(dsa, dpT[2 * kc], dpT[2 * kc + 1]);
            mma_b<kMmaMaxFrags>(c, dva, pa, Os, ldk, c0 + kc * 16, 0, nd);
            mma_b<kMmaMaxFrags>(c, dka, dsa, Qs, ldk, c0 + kc * 16, 0, nd);
          }
        }
        h = h1, i0 = i1;
      }
      const long wrows = g.Tk - (j0 + warp * 16), at = kbase + (j0 + warp * 16) * g.ldkv;
      TP_UNROLL for (int dt = 0; dt < 2 * kMmaMaxFrags; ++dt) if (dt < 2 * nd) {
        frag_emit<true>(lane, dka[dt], dk + at, g.ldkv, dt * 8, wrows, scale, accumulate);
        frag_emit<true>(lane, dva[dt], dv + at, g.ldkv, dt * 8, wrows, 1.f, accumulate);
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
