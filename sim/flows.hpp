// flows: point-to-point transfers sharing link bandwidth by weighted max-min fairness (progressive filling).
// A flow may stand for `mult[i]` identical symmetric copies on its i-th link (representative simulation):
// all copies have the rep's rate, so link i carries mult[i] * rate of that flow.
// Invariants: rates change only when a flow is added or removed; remaining bytes are exact at those times;
// completion order is deterministic (ties broken by flow id). Only the connected component (flows linked by
// shared links) of a changed flow is re-solved.
#pragma once
#include <cstdint>
#include <limits>
#include <deque>
#include <queue>
#include <set>
#include <utility>
#include <vector>

namespace tp {

struct FlowSpec {
  std::vector<int> links;     // link ids of the route
  std::vector<double> mult;   // copies of this flow on each link (same length as links; 1 in full mode)
  double bytes = 0;           // payload (already inflated by 1/efficiency where the caller wants that)
  double latency_s = 0;       // added once after the last byte (propagation + per-step latency)
};

class FlowNet {
 public:
  explicit FlowNet(std::vector<double> link_capacity_bytes_per_s);
  // Starts a flow at time `now`; returns its id. A flow with no links or no bytes completes after latency_s.
  int add(const FlowSpec& f, double now);
  // As add(), but without copying and without re-solving: *f must stay alive and unchanged until the flow
  // completes, and flush(now) must be called before the next next_completion() or rate() query. The engine
  // batches every add and completion at one instant into a single re-solve this way.
  int add_ref(const FlowSpec* f, double now);
  void complete_deferred(int id, double now);
  void flush(double now);
  // Earliest completion among active flows: (time, id); id = -1 when none.
  std::pair<double, int> next_completion() const;
  // Removes the completed flow `id` at time `now` (= its completion time) and re-solves the rates it affected.
  void complete(int id, double now);
  double rate(int id) const;        // current rate in bytes/s (for tests and traces)
  int active() const { return active_count_; }
  // Bytes carried so far by each link (sum over copies); used for per-tier network volume.
  const std::vector<double>& link_bytes() const { return link_bytes_; }
 private:
  // Per-flow state. `remaining` is exact at `last_t`; a flow is "on links" (listed in link_flows_ and given
  // bandwidth) from add() until its last byte is settled; then it waits out its latency with rate 0.
  struct Flow {
    const FlowSpec* spec = nullptr;
    double remaining = 0, rate = 0, last_t = 0, finish_t = 0;
    bool alive = false;
    bool on_links = false;
  };
  std::vector<double> cap_;
  std::vector<Flow> flows_;
  std::vector<std::vector<int>> link_flows_;  // link -> ids of on-link flows, in insertion order
  std::vector<double> link_bytes_;
  int active_count_ = 0;
  std::deque<FlowSpec> owned_;                // specs copied by add() (stable addresses)
  // Min-heap of (finish_t, id); entries whose finish_t no longer matches the flow are stale and skipped.
  mutable std::priority_queue<std::pair<double, int>, std::vector<std::pair<double, int>>,
                              std::greater<std::pair<double, int>>> queue_;
  // Reused scratch of resolve_component.
  struct LinkState { int link; double res, ref, wsum; int unfrozen; unsigned version; };
  struct HeapEntry {
    double sat; int local; unsigned version;
    bool operator>(const HeapEntry& o) const {
      return sat != o.sat ? sat > o.sat : (local != o.local ? local > o.local : version > o.version);
    }
  };
  std::vector<int> comp_flows_, stack_, sending_, seeds_;
  std::vector<LinkState> ls_;
  std::vector<HeapEntry> heap_;
  // Scratch for resolve_component (stamp-marked to avoid clearing; sized lazily).
  std::vector<unsigned> flow_stamp_, link_stamp_;
  std::vector<int> link_local_;
  unsigned stamp_ = 0;
  void settle(int id, double now);
  void take_off_links(int id);
  void schedule(int id, double finish_t);
  // Settles, re-solves (progressive filling) and reschedules every flow connected to `seed_links`.
  void resolve_component(const std::vector<int>& seed_links, double now);
};

}  // namespace tp
