// handover: the windowed state exchange of Pseudo-to-Real over two layouts. See handover.hpp.
#include "exec/runtime/handover.hpp"

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

void append_runs(std::vector<IndexRun>& runs, const double* idx, long long n, long long at0) {
  for (long long i = 0; i < n; ++i) {
    if (idx[i] < 0) continue;
    const long long f = (long long)idx[i], at = at0 + i;
    if (!runs.empty() && runs.back().full + runs.back().n == f && runs.back().at + runs.back().n == at) ++runs.back().n;
    else runs.push_back({f, at, 1});
  }
}

template <class T>
void exchange_state(const Records<T>& mine, const std::vector<IndexRun>& want, long long out_n, long long total,
                    long long window, Comm& job, HandoverPart part, Placed<T>* out) {
  const bool weights = part == HandoverPart::weights;
  if (out && weights) out->w.assign((size_t)out_n, T(0));
  if (out && !weights) out->m1.assign((size_t)out_n, T(0)), out->m2.assign((size_t)out_n, T(0));
  // Per window [first | second], len each: the weights and the count of writers, or the two moments.
  const std::vector<T>& first = weights ? mine.w : mine.m1;
  std::vector<T> buf;
  size_t r = 0, q = 0;  // the next run of mine / want (sorted, each within one window)
  for (long long g0 = 0; g0 < total; g0 += window) {
    const long long len = std::min(window, total - g0), g1 = g0 + len;
    buf.assign(2 * (size_t)len, T(0));
    T *x = buf.data(), *y = x + len;
    for (; r < mine.runs.size() && mine.runs[r].full < g1; ++r) {
      const IndexRun& run = mine.runs[r];
      for (long long j = 0; j < run.n; ++j) {
        const long long d = run.full - g0 + j, s = run.at + j;
        x[d] = first[(size_t)s];
        y[d] = weights ? y[d] + T(1) : mine.m2[(size_t)s];
      }
    }
    job.all_reduce_sum(buf.data(), (long)(2 * len), sizeof(T) == 8 ? Dtype::f64 : Dtype::f32);
    for (long long j = 0; weights && j < len; ++j)
      if (y[j] != T(1))
        throw std::logic_error("Pseudo-to-Real over two layouts: element " + std::to_string(g0 + j) +
                               " of the single-rank layout was written by " + std::to_string((long long)y[j]) +
                               " ranks, not one (exec/runtime/handover.cpp)");
    for (; q < want.size() && want[q].full < g1; ++q) {
      const IndexRun& run = want[q];
      for (long long j = 0; out && j < run.n; ++j) {
        const long long s = run.full - g0 + j, d = run.at + j;
        if (weights) out->w[(size_t)d] = x[s];
        else out->m1[(size_t)d] = x[s], out->m2[(size_t)d] = y[s];
      }
    }
  }
}

template void exchange_state<float>(const Records<float>&, const std::vector<IndexRun>&, long long, long long,
                                    long long, Comm&, HandoverPart, Placed<float>*);
template void exchange_state<double>(const Records<double>&, const std::vector<IndexRun>&, long long, long long,
                                     long long, Comm&, HandoverPart, Placed<double>*);

}  // namespace tp::exec::detail
