// flows: incremental weighted max-min fair sharing of link bandwidth among point-to-point flows.
// Invariants: between two re-solves of a component every flow in it sends at a constant rate, so
// remaining bytes and link_bytes are settled lazily (only for the component being re-solved, at its old
// rates); an alive flow has exactly one (finish_t, id) entry in queue_; a flow is listed in link_flows_
// only while it still has bytes to send (afterwards it waits out latency_s with rate 0). All iteration is
// over vectors in id / insertion order, so results are deterministic.
// Model note: bandwidth is only re-divided at add()/complete(); a flow whose last byte has left keeps its
// share until the next re-solve of its component (at the latest its own completion, latency_s later).
#include "flows.hpp"

#include <algorithm>
#include <cmath>
#include <functional>
#include <queue>
#include <stdexcept>
#include <string>
#include <tuple>

namespace tp {

namespace {
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kDoneFraction = 1e-9;  // remaining below this fraction of the payload counts as sent
}  // namespace

FlowNet::FlowNet(std::vector<double> link_capacity_bytes_per_s)
    : cap_(std::move(link_capacity_bytes_per_s)),
      link_flows_(cap_.size()),
      link_bytes_(cap_.size(), 0.0),
      link_stamp_(cap_.size(), 0),
      link_local_(cap_.size(), -1) {
  for (size_t l = 0; l < cap_.size(); ++l)
    if (!(cap_[l] >= 0))
      throw std::invalid_argument("FlowNet: link " + std::to_string(l) + " has a negative or NaN capacity");
}

int FlowNet::add(const FlowSpec& f, double now) {
  const int n_links = static_cast<int>(cap_.size());
  if (!f.mult.empty() && f.mult.size() != f.links.size())
    throw std::invalid_argument("FlowNet::add: mult and links differ in length");
  for (int l : f.links)
    if (l < 0 || l >= n_links) throw std::invalid_argument("FlowNet::add: bad link id " + std::to_string(l));
  for (double m : f.mult)
    if (!(m > 0) || !std::isfinite(m)) throw std::invalid_argument("FlowNet::add: multiplicity must be > 0");
  if (!(f.bytes >= 0) || !std::isfinite(f.bytes) || !(f.latency_s >= 0))
    throw std::invalid_argument("FlowNet::add: bytes and latency_s must be finite and >= 0");

  owned_.push_back(f);
  if (owned_.back().mult.empty()) owned_.back().mult.assign(f.links.size(), 1.0);
  int id = add_ref(&owned_.back(), now);
  flush(now);
  return id;
}

void FlowNet::flush(double now) {
  if (seeds_.empty()) return;
  resolve_component(seeds_, now);
  seeds_.clear();
}

int FlowNet::add_ref(const FlowSpec* f, double now) {
  const int id = static_cast<int>(flows_.size());
  flows_.emplace_back();
  flow_stamp_.push_back(0);
  Flow& fl = flows_.back();
  fl.spec = f;
  fl.alive = true;
  fl.last_t = now;
  fl.finish_t = now + f->latency_s;
  ++active_count_;
  if (f->links.empty() || f->bytes <= 0) {  // pure latency: no bandwidth
    queue_.push({fl.finish_t, id});
    return id;
  }
  fl.remaining = f->bytes;
  fl.on_links = true;
  fl.finish_t = kInf;  // scheduled by the next re-solve (flush), not before
  for (int l : f->links) link_flows_[l].push_back(id);
  seeds_.insert(seeds_.end(), f->links.begin(), f->links.end());
  return id;
}

std::pair<double, int> FlowNet::next_completion() const {
  while (!queue_.empty()) {
    auto [t, id] = queue_.top();
    const Flow& fl = flows_[id];
    if (fl.alive && fl.finish_t == t) return {t, id};
    queue_.pop();  // stale entry
  }
  return {kInf, -1};
}

void FlowNet::complete(int id, double now) {
  complete_deferred(id, now);
  flush(now);
}

void FlowNet::complete_deferred(int id, double now) {
  if (id < 0 || id >= static_cast<int>(flows_.size()) || !flows_[id].alive)
    throw std::invalid_argument("FlowNet::complete: flow " + std::to_string(id) + " is not active");
  Flow& fl = flows_[id];
  if (fl.on_links) {
    // Completion means every byte arrived: credit what lazy settling has not counted yet.
    for (size_t i = 0; i < fl.spec->links.size(); ++i) link_bytes_[fl.spec->links[i]] += fl.spec->mult[i] * fl.remaining;
    fl.remaining = 0;
    take_off_links(id);
    seeds_.insert(seeds_.end(), fl.spec->links.begin(), fl.spec->links.end());
  }
  fl.alive = false;  // its queue entry becomes stale
  fl.rate = 0;
  fl.last_t = now;
  --active_count_;
}

double FlowNet::rate(int id) const {
  if (id < 0 || id >= static_cast<int>(flows_.size()))
    throw std::out_of_range("FlowNet::rate: no flow " + std::to_string(id));
  return flows_[id].rate;
}

void FlowNet::settle(int id, double now) {
  Flow& fl = flows_[id];
  const double dt = now - fl.last_t;
  if (fl.on_links && dt > 0 && fl.rate > 0 && fl.remaining > 0) {
    double sent = std::min(fl.rate * dt, fl.remaining);
    fl.remaining -= sent;
    // Treat round-off leftovers as sent: a tiny fraction of the payload, or below the clock's resolution.
    if (fl.remaining <= kDoneFraction * fl.spec->bytes ||
        fl.remaining <= fl.rate * 1e-15 * std::max(1.0, std::fabs(now))) {
      sent += fl.remaining;
      fl.remaining = 0;
    }
    for (size_t i = 0; i < fl.spec->links.size(); ++i) link_bytes_[fl.spec->links[i]] += fl.spec->mult[i] * sent;
  }
  if (now > fl.last_t) fl.last_t = now;
}

void FlowNet::take_off_links(int id) {
  Flow& fl = flows_[id];
  for (int l : fl.spec->links) {
    auto& v = link_flows_[l];
    v.erase(std::remove(v.begin(), v.end(), id), v.end());  // keeps insertion order; no-op on repeats
  }
  fl.on_links = false;
  fl.rate = 0;
}

void FlowNet::schedule(int id, double finish_t) {
  Flow& fl = flows_[id];
  if (fl.finish_t == finish_t) return;
  fl.finish_t = finish_t;
  queue_.push({finish_t, id});
}

void FlowNet::resolve_component(const std::vector<int>& seed_links, double now) {
  if (++stamp_ == 0) {  // wrapped: clear the marks once
    std::fill(flow_stamp_.begin(), flow_stamp_.end(), 0u);
    std::fill(link_stamp_.begin(), link_stamp_.end(), 0u);
    stamp_ = 1;
  }
  // 1. Collect the component: flows reachable from the seeds through shared links.
  std::vector<int>& comp_flows = comp_flows_;
  std::vector<int>& stack = stack_;
  comp_flows.clear();
  stack.clear();
  for (int l : seed_links)
    if (link_stamp_[l] != stamp_) { link_stamp_[l] = stamp_; stack.push_back(l); }
  while (!stack.empty()) {
    const int l = stack.back();
    stack.pop_back();
    for (int f : link_flows_[l]) {
      if (flow_stamp_[f] == stamp_) continue;
      flow_stamp_[f] = stamp_;
      comp_flows.push_back(f);
      for (int l2 : flows_[f].spec->links)
        if (link_stamp_[l2] != stamp_) { link_stamp_[l2] = stamp_; stack.push_back(l2); }
    }
  }
  std::sort(comp_flows.begin(), comp_flows.end());

  // 2. Settle at the old rates; flows with nothing left to send leave the links (finish_t stays).
  std::vector<int>& sending = sending_;
  sending.clear();
  for (int f : comp_flows) {
    settle(f, now);
    if (flows_[f].remaining <= 0) take_off_links(f);
    else sending.push_back(f);
  }
  if (sending.empty()) return;
  if (sending.size() == 1) {  // fast path: a lone flow gets its bottleneck share
    Flow& fl = flows_[sending[0]];
    double r = kInf;
    for (size_t i = 0; i < fl.spec->links.size(); ++i) r = std::min(r, cap_[fl.spec->links[i]] / fl.spec->mult[i]);
    fl.rate = r;
    schedule(sending[0], r > 0 ? now + fl.remaining / r + fl.spec->latency_s : kInf);
    return;
  }

  // 3. Progressive filling. All unfrozen flows share one rising `level`; link l saturates at
  //    level sat = ref + res / wsum (res = residual capacity at level `ref`, wsum = unfrozen multiplicity),
  //    which only changes when a flow on l freezes, so a lazy min-heap of (sat, local link) suffices.
  std::vector<LinkState>& ls = ls_;
  ls.clear();
  for (int f : sending) {
    Flow& fl = flows_[f];
    fl.rate = -1;  // marks "unfrozen"
    for (size_t i = 0; i < fl.spec->links.size(); ++i) {
      const int l = fl.spec->links[i];
      if (link_local_[l] < 0) {
        link_local_[l] = static_cast<int>(ls.size());
        ls.push_back({l, cap_[l], 0.0, 0.0, 0, 0});
      }
      LinkState& s = ls[link_local_[l]];
      s.wsum += fl.spec->mult[i];
      ++s.unfrozen;
    }
  }
  // Min-heap of (saturation level, local link, version) on reused storage.
  std::vector<HeapEntry>& heap = heap_;
  heap.clear();
  const auto cmp = std::greater<HeapEntry>();
  for (int i = 0; i < static_cast<int>(ls.size()); ++i) heap.push_back({ls[i].res / ls[i].wsum, i, 0u});
  std::make_heap(heap.begin(), heap.end(), cmp);
  double level = 0;
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), cmp);
    const HeapEntry top = heap.back();
    heap.pop_back();
    const double sat = top.sat;
    const int li = top.local;
    const unsigned version = top.version;
    if (version != ls[li].version || ls[li].unfrozen == 0) continue;
    level = std::max(level, sat);
    for (int f : link_flows_[ls[li].link]) {
      Flow& fl = flows_[f];
      if (fl.rate >= 0) continue;  // already frozen
      fl.rate = level;
      for (size_t i = 0; i < fl.spec->links.size(); ++i) {
        LinkState& s = ls[link_local_[fl.spec->links[i]]];
        s.res = std::max(0.0, s.res - (level - s.ref) * s.wsum);
        s.ref = level;
        s.wsum -= fl.spec->mult[i];
        --s.unfrozen;
        ++s.version;
        if (s.unfrozen > 0) {
          heap.push_back({level + s.res / std::max(s.wsum, 1e-300), link_local_[s.link], s.version});
          std::push_heap(heap.begin(), heap.end(), cmp);
        }
      }
    }
  }
  for (const LinkState& s : ls) link_local_[s.link] = -1;

  // 4. New completion times: last byte at now + remaining / rate, then the latency.
  for (int f : sending) {
    Flow& fl = flows_[f];
    if (fl.rate < 0) fl.rate = 0;  // unreachable: every flow crosses a link that saturates
    const double finish = fl.rate > 0 ? now + fl.remaining / fl.rate + fl.spec->latency_s : kInf;
    schedule(f, finish);
  }
}

}  // namespace tp
