// chunk_policy: PatrickStar's chunk eviction, hybrid Adam's placement, the ADAM moment's reserve and the prefetch of the
// next runs' chunks, one policy for the simulator (sim/chunks.cpp) and the executor's chunk store
// (exec/runtime/offload/chunk_store.cpp).
// Invariants: a chunk's Belady key is its next access after moment k (T + its first access when the next use is
// in the next step, 2T when it is never used); the victim is the evictable chunk with the farthest key, ties (and
// the warm-up step, where every key is 0) keep the lowest position. A prefetch never evicts a chunk of the current
// moment or of the moments it loads for, and never takes the resident bytes above the moment's budget.
#pragma once
#include <algorithm>
#include <vector>

namespace tp {

// Bytes the ADAM moment keeps free on the device per chunk of `chunk_elements`: the fp32 parameter, gradient
// and two Adam moments of one chunk (4 x 4 bytes per element) staged for the host Adam.
inline double adam_moment_reserve_bytes(double chunk_elements) { return 16.0 * chunk_elements; }

// PatrickStar's hybrid Adam: how many of the first chunks (capacities in elements, in chunk order) keep their
// optimizer state (os_bytes an element) on the device: while the state's bytes so far stay within the margin
// max(0, overall - max_nonmodel - chunk_bytes) x ratio, chunk_bytes the chunks' own device bytes.
inline int hybrid_adam_chunks(const std::vector<double>& capacities, double os_bytes, double overall,
                              double max_nonmodel, double chunk_bytes, double ratio) {
  const double allowance = std::max(0.0, overall - max_nonmodel - chunk_bytes) * ratio;
  double used = 0;
  int n = 0;
  for (double cap : capacities) {
    if (used + cap * os_bytes > allowance) break;
    used += cap * os_bytes;
    ++n;
  }
  return n;
}

// Belady key of a chunk with sorted access moments `accesses`, at moment k of a step of `moments`.
inline int chunk_next_use(const std::vector<int>& accesses, int k, int moments) {
  auto it = std::upper_bound(accesses.begin(), accesses.end(), k);
  if (it != accesses.end()) return *it;
  return accesses.empty() ? 2 * moments : moments + accesses.front();
}

// The chunk to evict among the n candidates at(0..n-1) that evictable(c) allows: the farthest next_use(c), or
// under warm-up the first; -1 when none is evictable.
template <class At, class Evictable, class NextUse>
int chunk_victim(int n, At at, Evictable evictable, bool warmup, NextUse next_use) {
  int victim = -1, best = -1;
  for (int i = 0; i < n; ++i) {
    const int c = at(i);
    if (!evictable(c)) continue;
    const int key = warmup ? 0 : next_use(c);
    if (victim < 0 || key > best) victim = c, best = key;  // strict: ties keep the lowest position
  }
  return victim;
}

// Prefetch (plan.offload.prefetch_runs, steady steps only): at moment k, once its own chunks are loaded, the chunks of
// the next `depth` moments (k+1 .. k+depth, stopping at the step's last run `last`) that are not resident load on a
// copy stream while moment k computes. `wanted` lists them in moment order, then chunk order, each once.
template <class NeededAt, class Resident>
std::vector<int> chunk_prefetch_wanted(int k, int depth, int last, NeededAt needed_at, Resident resident) {
  std::vector<int> out;
  for (int j = k + 1; j <= std::min(k + depth, last); ++j)
    for (int c : needed_at(j))
      if (!resident(c) && std::find(out.begin(), out.end(), c) == out.end()) out.push_back(c);
  return out;
}

// One decision of a prefetch: evict `chunk` (device -> host, before moment k's run) or load it (on the copy stream).
struct PrefetchStep {
  int chunk = 0;
  bool load = false;
};

// The prefetch at moment k: for each wanted chunk in order, the evictions (Belady over the n candidates at(i) that
// are resident and not protected: protect(c) holds for the current moment's chunks and those of the moments
// prefetched for) that make resident + its bytes + extra fit `budget`, then its load; it stops at the first wanted
// chunk that cannot fit (the rest load at their own moment, as without prefetch). resident_bytes is updated.
template <class At, class Resident, class Protect, class Bytes, class NextUse>
std::vector<PrefetchStep> chunk_prefetch(const std::vector<int>& wanted, int n, At at, Resident resident,
                                         Protect protect, Bytes bytes, NextUse next_use, double budget, double extra,
                                         double& resident_bytes) {
  std::vector<PrefetchStep> steps;
  std::vector<int> gone;  // evicted by this prefetch
  auto is_gone = [&](int c) { return std::find(gone.begin(), gone.end(), c) != gone.end(); };
  for (int w : wanted) {
    const size_t kept = gone.size();
    double held = resident_bytes;
    while (held + bytes(w) + extra > budget) {
      const int victim = chunk_victim(
          n, at, [&](int c) { return resident(c) && !protect(c) && !is_gone(c); }, false, next_use);
      if (victim < 0) {  // w cannot fit: no eviction made for it, and nothing after it
        gone.resize(kept);
        return steps;
      }
      gone.push_back(victim);
      held -= bytes(victim);
    }
    for (size_t i = kept; i < gone.size(); ++i) steps.push_back({gone[i], false});
    resident_bytes = held + bytes(w);
    steps.push_back({w, true});
  }
  return steps;
}

}  // namespace tp
