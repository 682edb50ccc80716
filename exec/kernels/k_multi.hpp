// k_multi: multi-tensor kernels, one launch for many segments (apex's multi_tensor_apply, llm.c's one AdamW launch
// over every parameter): the optimizer's AdamW over every run of the rank's parameters, and the gradient norm's sum
// of squares over every run with one read-back, instead of a launch (and, for the norm, a host synchronisation) per
// run.
// The segments lie end to end in one index space: segment s covers [start[s], start[s + 1]) (start[0] = 0,
// start[count] = the total), its element j being element j of its own arrays. Blocks take tiles of `tile` elements
// of that space in grid-stride order; a thread finds its first element's segment by binary search once per tile and
// walks forward (each thread's elements only increase), so no element searches.
// Invariants: an element of AdamWMulti is computed by adamw_at, AdamW's own formula, so one launch over segments is
// bit-identical to AdamW per segment; SumSquaresMulti's per-block partials are summed in a fixed order for a given
// grid (ReduceDoubles), as SumSquaresPartial's. The tables (segments, start) are read-only kernel memory.
#pragma once
#include "exec/kernels/k_elementwise.hpp"
#include "exec/kernels/k_reduce.hpp"

namespace tp::kernels {

// Elements per thread in a tile (the tile: launch.block times this).
constexpr long kMultiPerThread = 8;

// AdamWMulti's segment: the parameters, gradients and moments of one run, and its weight decay.
template <class T>
struct AdamSeg {
  T* p;
  const T* g;
  T* m;
  T* v;
  acc_t<T> wd;
};

// The largest s < count with start[s] <= i (i < start[count]): the segment of element i.
TP_HD TP_INLINE long multi_seg_of(const long* start, long count, long i) {
  long lo = 0, hi = count - 1;
  while (lo < hi) {
    const long mid = (lo + hi + 1) / 2;
    if (start[mid] <= i) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

// Calls f(s, j) for each element of this thread (segment s, its element j), tile by tile.
template <class Ctx, class F>
TP_HD TP_INLINE void multi_each(Ctx& c, const long* start, long count, long tile, F&& f) {
  const long total = start[count];
  for (long t0 = long(c.bid()) * tile; t0 < total; t0 += long(c.gdim()) * tile) {
    const long t1 = t0 + tile < total ? t0 + tile : total;
    long i = t0 + long(c.tid());
    if (i >= t1) continue;
    long s = multi_seg_of(start, count, i);
    for (; i < t1; i += long(c.bdim())) {
      while (start[s + 1] <= i) ++s;
      f(s, i - start[s]);
    }
  }
}

template <class T>
struct AdamWMulti {
  static constexpr const char* kName = "adamw_multi";
  const AdamSeg<T>* seg;
  const long* start;
  long count, tile;
  acc_t<T> lr, b1, b2, eps, c1, c2, gs;
  template <class Ctx>
  TP_HD void operator()(Ctx& c) const {
    multi_each(c, start, count, tile, [&](long s, long j) {
      const AdamSeg<T>& a = seg[s];
      adamw_at(j, a.p, a.g, a.m, a.v, static_cast<T*>(nullptr), lr, b1, b2, eps, a.wd, c1, c2, gs);
    });
  }
};

// partial[bid] = the sum of x^2 over the block's elements of every segment, in double.
template <class T>
struct SumSquaresMulti {
  static constexpr const char* kName = "sum_squares_multi";
  double* partial;
  const T* const* x;
  const long* start;
  long count, tile;
  template <class Ctx>
  TP_HD void operator()(Ctx& c) const {
    double s = 0;
    multi_each(c, start, count, tile, [&](long k, long j) {
      const double v = double(ld(x[k][j]));
      s += v * v;
    });
    s = block_sum(c, s, c.template shared<double>());
    if (c.tid() == 0) partial[c.bid()] = s;
  }
};

// A multi-tensor launch's tile (elements a block takes at a time), and its grid over `total` elements.
template <class L>
long multi_tile(const L& launch) {
  return long(launch.block) * kMultiPerThread;
}
template <class L>
Dim multi_dim(const L& launch, long total, unsigned smem) {
  return Dim{blocks_for(total, multi_tile(launch), launch.max_grid), launch.block, smem};
}

// AdamW step t >= 1 over count segments (start: count + 1 entries, start[count] > 0); the bias corrections in
// double, as adamw's.
template <class L, class T>
void adamw_multi(const L& launch, const AdamSeg<T>* seg, const long* start, long count, long total, double lr,
                 double b1, double b2, double eps, long t, double gscale) {
  using A = acc_t<T>;
  const A c1 = A(1.0 / (1.0 - std::pow(b1, double(t)))), c2 = A(1.0 / (1.0 - std::pow(b2, double(t))));
  launch(AdamWMulti<T>{seg, start, count, multi_tile(launch), A(lr), A(b1), A(b2), A(eps), c1, c2,
                       A(gscale)},
         multi_dim(launch, total, 0));
}
// out[0] = the sum of squares over count segments (total > 0 elements), in double; scratch: launch.max_grid doubles.
template <class L, class T>
void sum_squares_multi(const L& launch, double* out, double* scratch, const T* const* x, const long* start, long count,
                       long total) {
  const unsigned smem = unsigned(kReduceSlots * sizeof(double));
  const Dim d = multi_dim(launch, total, smem);
  launch(SumSquaresMulti<T>{scratch, x, start, count, multi_tile(launch)}, d);
  launch(ReduceDoubles<false>{out, scratch, long(d.grid)}, Dim{1, launch.block, smem});
}

}  // namespace tp::kernels
