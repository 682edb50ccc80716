// chunk_policy: PatrickStar's chunk eviction, hybrid Adam's placement and the ADAM moment's reserve, one policy for the simulator
// (sim/chunks.cpp) and the executor's chunk store (exec/runtime/offload/chunk_store.cpp).
// Invariants: a chunk's Belady key is its next access after moment k (T + its first access when the next use is
// in the next step, 2T when it is never used); the victim is the evictable chunk with the farthest key, ties (and
// the warm-up step, where every key is 0) keep the lowest position.
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

}  // namespace tp
