// handover: Pseudo-to-Real over two layouts hands the model's state (weights and Adam's two moments) from the
// pseudo plan's ranks to the real plan's through the single-rank layout (gpt_layout at tp 1 with every expert),
// one window of that layout at a time, so that no rank ever holds the whole model for it.
// Each pseudo-phase rank keeps only its copies of record (Records: runs of consecutive single-rank indices and
// their values); each real-phase rank names what it needs (runs of positions: the flat ranges its setup places
// for the weights, its own ranges for the moments); per window of `window` single-rank elements every rank of the job
// adds its records into one buffer, one sum over the job assembles the window, and each real rank takes its
// elements out of it. Two passes: the weights (with a count of writers) when the real phase's setup places its
// parameters, the moments once its optimizer state exists.
// Invariants: every element of the single-rank layout is written by exactly one rank over the job (checked per
// window: a logic_error naming the element, never a silently different model); a sum of one value and zeros is
// exact, so the real phase receives bit for bit the pseudo phase's values. Every rank of the job calls
// exchange_state for both parts in the same order with the same `total` and `window` (the windows' sums are
// collectives over the job).
#pragma once
#include <utility>
#include <vector>

#include "exec/comm/comm.hpp"

namespace tp::exec::detail {

// Elements [full, full + n) of the single-rank layout <-> positions [at, at + n) of a rank's values.
struct IndexRun {
  long long full = 0, at = 0, n = 0;
};

// Appends the runs of idx[0, n) (position at0 + i holds single-rank element idx[i]; < 0: none) to `runs`.
void append_runs(std::vector<IndexRun>& runs, const double* idx, long long n, long long at0);
// Runs in any order, split at multiples of `window` (each piece within one window), sorted by first element.
std::vector<IndexRun> split_and_sort(std::vector<IndexRun> runs, long long window);

// One rank's copies of record, added element by element in any order (finish: into windowed, sorted runs).
template <class T>
struct Records {
  std::vector<IndexRun> runs;  // at: the position in w, m1, m2
  std::vector<T> w, m1, m2;
  bool done = false;  // the pseudo phase reached the delink and exported (set by its exporter)
  std::vector<double> fp8_scale;  // precision fp8: the exporter's scales (exec/model/fp8.hpp; replicated on every rank)
  void add(long long full, T w_, T m1_, T m2_) {
    const long long at = (long long)w.size();
    IndexRun* last = runs.empty() ? nullptr : &runs.back();
    if (last && last->full + last->n == full && last->at + last->n == at) ++last->n;
    else runs.push_back({full, at, 1});
    w.push_back(w_), m1.push_back(m1_), m2.push_back(m2_);
  }
  void finish(long long window) { runs = split_and_sort(std::move(runs), window); }
  void release() { *this = Records(); }
};

// The real phase's elements taken from the exchange: the weights (w) in one pass, the moments (m1, m2) in another.
template <class T>
struct Placed {
  std::vector<T> w, m1, m2;
};
enum class HandoverPart { weights, moments };  // (the weights' pass also checks that each element is written once)

// The job's windows in order, for one part: `mine` (finished; empty for a rank without a pseudo-phase part)
// into each window's sum over `job`, and for a rank of the real phase (`out` not null) the elements named by
// `want` at their positions in out's vectors of `out_n` elements (positions no run names stay 0).
template <class T>
void exchange_state(const Records<T>& mine, const std::vector<IndexRun>& want, long long out_n, long long total,
                    long long window, Comm& job, HandoverPart part, Placed<T>* out);

// Pseudo-to-Real on one layout (the pseudo phase on the real plan): no exchange. Each rank keeps, in host memory,
// what its pseudo-phase run held (the weight-group slots: the flat ranges its setup placed, and its own ranges'
// moments) and the same rank's real-phase run takes each layer's state from its group's slot; units of equal size
// put a layer's element i at its slot's element i. Its peak is the real phase's state plus this copy of the k slots,
// where the windowed exchange holds every layer's copies of record and a staging copy besides.
template <class T>
struct LocalState {
  int shared = 0;                                     // k: the weight groups (slot g = layer g's unit)
  std::vector<std::pair<long long, long long>> ranges;  // the pseudo run's placed flat ranges, ascending
  std::vector<long long> base;                          // range i's start in w
  std::vector<T> w;
  std::vector<std::pair<int, int>> own;                 // per own range of the pseudo run: (unit, segment)
  std::vector<std::vector<T>> m1, m2;                   // its moments
  std::vector<double> fp8_scale;                        // the delinked scales (fp8)
  bool done = false;                                    // the pseudo phase reached the delink
};

// Elements per window when the run does not say (RunOptions::handover_window): 4 Mi.
constexpr long long default_handover_window = 1LL << 22;

}  // namespace tp::exec::detail
