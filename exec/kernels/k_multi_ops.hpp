// k_multi_ops: the multi-tensor ops of exec/backends/ops.def (adamw_multi, sum_squares_multi) bridged onto
// k_multi.hpp's kernels, once for every backend that launches kernels (k_elementwise_ops.hpp's rules).
// The segment tables arrive as host arrays; the bridge builds the kernels' table (pointers and start offsets) on the
// host and copies it into the op's scratch (R::upload), so an op is one copy and one launch (two for the sum)
// whatever the number of segments.
// Invariants: every segment's arguments are checked (R::check) before any work; segments of no elements are
// skipped; an op over no elements launches nothing (sum_squares_multi returns 0).
#pragma once
#include <cstddef>
#include <vector>

#include "exec/kernels/k_multi.hpp"
#include "exec/kernels/k_runner.hpp"

namespace tp::kernels {

// The start offsets of segments of n[0, count) elements (negative counts as 0): count + 1 entries, the last the total.
inline std::vector<long> multi_starts(const long* n, long count) {
  std::vector<long> start(size_t(count) + 1, 0);
  for (long s = 0; s < count; ++s) start[size_t(s) + 1] = start[size_t(s)] + (n[s] > 0 ? n[s] : 0);
  return start;
}
// Bytes rounded up to 8 (the tables' alignment in the scratch).
constexpr size_t multi_round8(size_t b) { return (b + 7) / 8 * 8; }

template <class R, class T>
void adamw_multi_op(const R& r, T* const* p, const T* const* g, T* const* m, T* const* v, const long* n, const T* wd,
                    long count, T lr, T b1, T b2, T eps, long t, T gscale) {
  const std::vector<long> start = multi_starts(n, count > 0 ? count : 0);
  const long total = start.back();
  r.run("adamw_multi", {{"segments", count}, {"n", total}, {"t", t}}, [&] {
    std::vector<AdamSeg<T>> seg;
    seg.reserve(size_t(count > 0 ? count : 0));
    for (long s = 0; s < count; ++s) {
      const size_t bytes = bytes_of<T>(n[s]);
      r.check("adamw_multi", "p", p[s], bytes);
      r.check("adamw_multi", "g", g[s], bytes);
      r.check("adamw_multi", "m", m[s], bytes);
      r.check("adamw_multi", "v", v[s], bytes);
      seg.push_back(AdamSeg<T>{p[s], g[s], m[s], v[s], acc_t<T>(wd[s])});
    }
    if (total <= 0) return;
    const size_t seg_bytes = multi_round8(sizeof(AdamSeg<T>) * seg.size());
    char* s = static_cast<char*>(r.scratch(seg_bytes + sizeof(long) * start.size()));
    r.upload(s, seg.data(), sizeof(AdamSeg<T>) * seg.size());
    r.upload(s + seg_bytes, start.data(), sizeof(long) * start.size());
    adamw_multi(r.launch(), reinterpret_cast<const AdamSeg<T>*>(s), reinterpret_cast<const long*>(s + seg_bytes),
                count, total, lr, b1, b2, eps, t, gscale);
  });
}

// The total, then the per-block partials, then the tables, in the scratch; the total read back.
template <class R, class T>
double sum_squares_multi_op(const R& r, const T* const* x, const long* n, long count) {
  const std::vector<long> start = multi_starts(n, count > 0 ? count : 0);
  const long total = start.back();
  double sum = 0;
  r.run("sum_squares_multi", {{"segments", count}, {"n", total}}, [&] {
    for (long s = 0; s < count; ++s) r.check("sum_squares_multi", "x", x[s], bytes_of<T>(n[s]));
    if (total <= 0) return;
    const size_t head = sizeof(double) * (size_t(r.launch().max_grid) + 1);
    const size_t ptr_bytes = multi_round8(sizeof(const T*) * size_t(count));
    char* s = static_cast<char*>(r.scratch(head + ptr_bytes + sizeof(long) * start.size()));
    r.upload(s + head, x, sizeof(const T*) * size_t(count));
    r.upload(s + head + ptr_bytes, start.data(), sizeof(long) * start.size());
    double* d = reinterpret_cast<double*>(s);
    sum_squares_multi(r.launch(), d, d + 1, reinterpret_cast<const T* const*>(s + head),
                      reinterpret_cast<const long*>(s + head + ptr_bytes), count, total);
    sum = r.read_back(d);
  });
  return sum;
}

}  // namespace tp::kernels
