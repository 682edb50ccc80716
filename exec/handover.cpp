// handover: the windowed state exchange of Pseudo-to-Real over two layouts. See handover.hpp.
#include "exec/handover.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace tp::exec::detail {

std::vector<IndexRun> split_and_sort(std::vector<IndexRun> runs, long long window) {
  std::vector<IndexRun> out;
  out.reserve(runs.size());
  for (const IndexRun& r : runs)
    for (long long o = 0; o < r.n;) {  // up to the next multiple of window
      const long long f = r.full + o, n = std::min(r.n - o, (f / window + 1) * window - f);
      out.push_back({f, r.at + o, n});
      o += n;
    }
  std::sort(out.begin(), out.end(), [](const IndexRun& a, const IndexRun& b) { return a.full < b.full; });
  return out;
}

void append_runs(std::vector<IndexRun>& runs, const std::vector<double>& idx, long long at0) {
  for (size_t i = 0; i < idx.size(); ++i) {
    if (idx[i] < 0) continue;
    const long long f = (long long)idx[i], at = at0 + (long long)i;
    if (!runs.empty() && runs.back().full + runs.back().n == f && runs.back().at + runs.back().n == at) ++runs.back().n;
    else runs.push_back({f, at, 1});
  }
}

std::vector<IndexRun> index_runs(const std::vector<double>& idx, long long window) {
  std::vector<IndexRun> runs;
  append_runs(runs, idx, 0);
  return split_and_sort(std::move(runs), window);
}

template <class T>
void exchange_state(const Records<T>& mine, const std::vector<IndexRun>& want, long long flat_n, long long total,
                    long long window, Comm& job, Placed<T>* out) {
  if (out)
    for (std::vector<T>* v : {&out->w, &out->m1, &out->m2}) v->assign((size_t)flat_n, T(0));
  std::vector<T> buf;  // [w | m1 | m2 | count], len each
  size_t r = 0, q = 0;  // the next run of mine / want (sorted, each within one window)
  for (long long g0 = 0; g0 < total; g0 += window) {
    const long long len = std::min(window, total - g0), g1 = g0 + len;
    buf.assign(4 * (size_t)len, T(0));
    T *w = buf.data(), *a1 = w + len, *a2 = a1 + len, *cnt = a2 + len;
    for (; r < mine.runs.size() && mine.runs[r].full < g1; ++r) {
      const IndexRun& x = mine.runs[r];
      for (long long j = 0; j < x.n; ++j) {
        const long long d = x.full - g0 + j, s = x.at + j;
        w[d] = mine.w[(size_t)s], a1[d] = mine.m1[(size_t)s], a2[d] = mine.m2[(size_t)s], cnt[d] += T(1);
      }
    }
    job.all_reduce_sum(buf.data(), (long)(4 * len), sizeof(T) == 8 ? Dtype::f64 : Dtype::f32);
    for (long long j = 0; j < len; ++j)
      if (cnt[j] != T(1))
        throw std::logic_error("Pseudo-to-Real over two layouts: element " + std::to_string(g0 + j) +
                               " of the single-rank layout was written by " + std::to_string((long long)cnt[j]) +
                               " ranks, not one (exec/handover.cpp)");
    for (; q < want.size() && want[q].full < g1; ++q) {
      const IndexRun& x = want[q];
      if (!out) continue;
      for (long long j = 0; j < x.n; ++j) {
        const long long s = x.full - g0 + j, d = x.at + j;
        out->w[(size_t)d] = w[s], out->m1[(size_t)d] = a1[s], out->m2[(size_t)d] = a2[s];
      }
    }
  }
}

template void exchange_state<float>(const Records<float>&, const std::vector<IndexRun>&, long long, long long,
                                    long long, Comm&, Placed<float>*);
template void exchange_state<double>(const Records<double>&, const std::vector<IndexRun>&, long long, long long,
                                     long long, Comm&, Placed<double>*);

}  // namespace tp::exec::detail
