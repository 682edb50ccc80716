// collective: ring and hierarchical decomposition into flow phases. See collective.hpp.
#include "collective.hpp"

#include <algorithm>
#include <cmath>
#include <map>

#include "nccl_model.hpp"

namespace tp {

const char* coll_name(Coll c) {
  switch (c) {
    case Coll::all_reduce: return "allreduce";
    case Coll::reduce_scatter: return "reducescatter";
    case Coll::all_gather: return "allgather";
    case Coll::p2p: return "p2p";
    case Coll::broadcast: return "broadcast";
    case Coll::reduce: return "reduce";
    case Coll::all_to_all: return "alltoall";
  }
  return "?";
}

RingPhases collective_ring_phases(Coll c, int g, int k) {
  RingPhases r;
  if (g <= 1) return r;
  const double mult = c == Coll::all_reduce ? 2.0 : 1.0;
  auto flat = [&](bool inter) {
    r.phase[r.count++] = RingPhase{inter, g, (int)mult * (g - 1), mult * (g - 1) / g, 1.0};
  };
  if (k >= g) { flat(false); return r; }
  if (k <= 1 || g % k != 0) { flat(true); return r; }
  const int n = g / k;
  const RingPhase intra{false, k, k - 1, (double)(k - 1) / k, 1.0};
  const RingPhase inter{true, n, (int)mult * (n - 1), mult * (n - 1) / n / k, 1.0 / k};
  if (c == Coll::all_reduce) { r.phase[0] = intra; r.phase[1] = inter; r.phase[2] = intra; r.count = 3; }
  else if (c == Coll::reduce_scatter) { r.phase[0] = intra; r.phase[1] = inter; r.count = 2; }
  else { r.phase[0] = inter; r.phase[1] = intra; r.count = 2; }
  return r;
}

// Members grouped by node, in ring order. Hierarchical when every node holds the same k > 1 members, n > 1.
struct NodeSplit {
  std::vector<std::vector<int>> by_node;
  bool hierarchical = false;
};

static NodeSplit split_by_node(const std::vector<int>& group, const Topology& topo);

// Members per node as the NCCL model and the ring phases take it: k of a hierarchical group, g when the group is
// inside one node, else 1.
static int ranks_per_node(const NodeSplit& ns, int g) {
  return ns.hierarchical ? (int)ns.by_node.front().size() : (ns.by_node.size() == 1 ? g : 1);
}

static NodeSplit split_by_node(const std::vector<int>& group, const Topology& topo) {
  NodeSplit s;
  std::map<int, int> index;  // node -> position in by_node
  int last_node = -1, last_pos = -1;
  for (int g : group) {
    int n = topo.node_of(g);
    if (n != last_node) {  // groups are usually in rank order: consecutive members share a node
      auto it = index.find(n);
      if (it == index.end()) {
        it = index.emplace(n, (int)s.by_node.size()).first;
        s.by_node.emplace_back();
      }
      last_node = n;
      last_pos = it->second;
    }
    s.by_node[last_pos].push_back(g);
  }
  size_t k = s.by_node.front().size();
  bool equal = std::all_of(s.by_node.begin(), s.by_node.end(), [&](auto& v) { return v.size() == k; });
  s.hierarchical = equal && k > 1 && s.by_node.size() > 1;
  return s;
}

static double eff_at(const Curve& c, double bytes) { return c.points.empty() ? 1.0 : c.at(bytes); }

// One ring phase over `members`: member i sends `bytes_each` to member i+1.
static Phase ring_phase(const std::vector<int>& members, double payload_each, double eff, int steps,
                        const Topology& topo) {
  Phase ph;
  ph.steps = steps;
  int g = (int)members.size();
  double lat = 0;
  for (int i = 0; i < g && g > 1; ++i) {
    int a = members[i], b = members[(i + 1) % g];
    ph.flows.push_back({a, b, payload_each / eff, payload_each});
    lat = std::max(lat, topo.latency_s(a, b));
  }
  ph.latency_s = steps * lat;
  return ph;
}

// Rooted chains and all-to-all: one phase of direct flows, each with its own tier's efficiency at its size.
//  broadcast: group[i] -> group[i+1], S each, g-1 latency steps (pipelined chain from the root group[0]);
//  reduce:    group[i+1] -> group[i], S each, g-1 latency steps (chain ending at the root group[0]);
//  all_to_all: group[i] -> group[j] for all i != j, S/g each, one latency step.
static Phase direct_phase(Coll c, const std::vector<int>& group, double S, const Topology& topo, const Cluster& cl) {
  Phase ph;
  int g = (int)group.size();
  double lat = 0;
  // Efficiency at the collective's buffer size S (what each member moves in total), as for the ring
  // collectives: an all-to-all's g - 1 messages of S/g run concurrently, like one transfer of S.
  auto flow = [&](int a, int b, double payload) {
    bool same = topo.node_of(a) == topo.node_of(b);
    double e = eff_at(same ? cl.intra.efficiency : cl.inter.efficiency, S);
    ph.flows.push_back({a, b, payload / e, payload});
    lat = std::max(lat, topo.latency_s(a, b));
  };
  if (c == Coll::all_to_all) {
    for (int i = 0; i < g; ++i)
      for (int j = 0; j < g; ++j)
        if (i != j) flow(group[i], group[j], S / g);
    ph.steps = 1;
  } else {
    for (int i = 0; i + 1 < g; ++i) {
      if (c == Coll::broadcast) flow(group[i], group[i + 1], S);
      else flow(group[i + 1], group[i], S);
    }
    ph.steps = g - 1;
  }
  ph.latency_s = ph.steps * lat;
  return ph;
}

static void append(std::vector<Phase>& out, Phase&& p) {
  if (!p.flows.empty()) out.push_back(std::move(p));
}

// Time of phase lists run at once (one list per group): per phase the flows of every group share the links; the
// slowest flow and the largest phase latency set the phase time.
static double phases_time_s(const std::vector<std::vector<Phase>>& all, const Topology& topo) {
  size_t phases = 0;
  for (const auto& a : all) phases = std::max(phases, a.size());
  double total = 0;
  for (size_t k = 0; k < phases; ++k) {
    std::map<int, double> load;  // link -> number of this phase's flows on it (every group's)
    std::vector<std::vector<int>> routes;
    std::vector<double> wire;
    double latency = 0;
    for (const auto& ph_list : all) {
      if (k >= ph_list.size()) continue;
      const Phase& ph = ph_list[k];
      latency = std::max(latency, ph.latency_s);
      for (auto& f : ph.flows) {
        routes.push_back(topo.route(f.src, f.dst));
        wire.push_back(f.bytes);
        for (int l : routes.back()) load[l] += 1;
      }
    }
    double worst = 0;
    for (size_t i = 0; i < routes.size(); ++i) {
      double share = 1e300;
      for (int l : routes[i]) share = std::min(share, topo.links[l].capacity_bytes_per_s / load[l]);
      if (share < 1e300) worst = std::max(worst, wire[i] / share);
    }
    total += worst + latency;
  }
  return total;
}

// "nccl": {"step_collectives": true}: the phases keep their flows and routes (so concurrent collectives still
// share links) but take NCCL's time alone on the network: latencies scaled to NCCL's latency term, wire bytes
// to its bandwidth term (sim/nccl_model).
static void time_as_nccl(Coll c, int g, int k, double S, const Topology& topo, const Cluster& cl, std::vector<Phase>& out) {
  const NcclCall n = nccl_collective(cl, c, g, k, S);
  if (n.time_s <= 0 || out.empty()) return;
  double lat = 0;
  for (const Phase& ph : out) lat += ph.latency_s;
  const double flow_s = phases_time_s({out}, topo) - lat;
  // Each phase keeps its share of the latency (an equal share when the phases have none); the ratio is taken
  // before the product so that denormal latencies cannot overflow it.
  const double bw_f = flow_s > 0 ? (n.time_s - n.latency_s) / flow_s : 1;
  for (Phase& ph : out) {
    ph.latency_s = n.latency_s * (lat > 0 ? ph.latency_s / lat : 1.0 / (double)out.size());
    if (std::isfinite(bw_f))
      for (FlowReq& f : ph.flows) f.bytes *= bw_f;
  }
}

std::vector<Phase> collective_phases(Coll c, const std::vector<int>& group, double S, const Topology& topo,
                                     const Cluster& cl) {
  std::vector<Phase> out;
  if (c == Coll::p2p) {
    bool same = topo.node_of(group[0]) == topo.node_of(group[1]);
    double e = eff_at(same ? cl.intra.efficiency : cl.inter.efficiency, S);
    Phase ph;
    ph.flows.push_back({group[0], group[1], S / e, S});
    ph.latency_s = topo.latency_s(group[0], group[1]);
    out.push_back(std::move(ph));
    if (cl.nccl.step_collectives) time_as_nccl(c, 2, same ? 2 : 1, S, topo, cl, out);  // ncclSend / ncclRecv
    return out;
  }
  int g = (int)group.size();
  if (g <= 1 || S <= 0) return out;
  if (c == Coll::broadcast || c == Coll::reduce || c == Coll::all_to_all) {
    append(out, direct_phase(c, group, S, topo, cl));
    if (c == Coll::all_to_all && cl.nccl.step_collectives) {  // NCCL's grouped send / recv to every peer
      time_as_nccl(c, g, ranks_per_node(split_by_node(group, topo), g), S, topo, cl, out);
    }
    return out;
  }
  // The phase list (collective_ring_phases, shared with the closed form in sim/step_formulas.cpp), laid on
  // the members: a flat ring over the group, or per phase one ring per node (intra) / per local index (inter).
  NodeSplit ns = split_by_node(group, topo);
  const int k = ranks_per_node(ns, g);
  RingPhases rp = collective_ring_phases(c, g, k);
  for (int i = 0; i < rp.count; ++i) {
    const RingPhase& spec = rp.phase[i];
    double e = eff_at(spec.inter ? cl.inter.efficiency : cl.intra.efficiency, spec.eff_fraction * S);
    double payload = spec.payload_fraction * S;
    if (spec.ring == g) {
      append(out, ring_phase(group, payload, e, spec.steps, topo));
      continue;
    }
    Phase all;
    auto add_ring = [&](const std::vector<int>& members) {
      Phase p = ring_phase(members, payload, e, spec.steps, topo);
      all.steps = p.steps;
      all.latency_s = std::max(all.latency_s, p.latency_s);
      for (auto& f : p.flows) all.flows.push_back(f);
    };
    if (!spec.inter) {
      for (auto& members : ns.by_node) add_ring(members);
    } else {
      for (int j = 0; j < k; ++j) {
        std::vector<int> peers;
        for (auto& members : ns.by_node) peers.push_back(members[j]);
        add_ring(peers);
      }
    }
    append(out, std::move(all));
  }
  if (cl.nccl.step_collectives) time_as_nccl(c, g, k, S, topo, cl, out);
  return out;
}

double collective_time_concurrent_s(Coll c, const std::vector<std::vector<int>>& groups, double bytes,
                                    const Topology& topo, const Cluster& cl) {
  std::vector<std::vector<Phase>> all;
  for (const auto& g : groups) all.push_back(collective_phases(c, g, bytes, topo, cl));
  return phases_time_s(all, topo);
}

double collective_time_isolated_s(Coll c, const std::vector<int>& group, double bytes, const Topology& topo,
                                  const Cluster& cl) {
  return collective_time_concurrent_s(c, {group}, bytes, topo, cl);
}

TierBytes collective_member_bytes(Coll c, const std::vector<int>& group, double S, const Topology& topo) {
  TierBytes tb;
  int g = (int)group.size();
  if (c == Coll::p2p) {
    (topo.node_of(group[0]) == topo.node_of(group[1]) ? tb.intra : tb.inter) += S;
    return tb;
  }
  if (g <= 1) return tb;
  if (c == Coll::broadcast || c == Coll::reduce) {
    // Mean over members (rotating root): each of the g ring edges carries S in g-1 of the g root choices.
    double per_edge = (double)(g - 1) / g * S / g;
    for (int i = 0; i < g; ++i)
      (topo.node_of(group[i]) == topo.node_of(group[(i + 1) % g]) ? tb.intra : tb.inter) += per_edge;
    return tb;
  }
  if (c == Coll::all_to_all) {
    for (int j = 1; j < g; ++j) (topo.node_of(group[0]) == topo.node_of(group[j]) ? tb.intra : tb.inter) += S / g;
    return tb;
  }
  NodeSplit ns = split_by_node(group, topo);
  double mult = c == Coll::all_reduce ? 2.0 : 1.0;
  if (!ns.hierarchical) {
    double f = mult * (g - 1) / g * S;
    (ns.by_node.size() == 1 ? tb.intra : tb.inter) += f;
    return tb;
  }
  int k = (int)ns.by_node.front().size(), n = (int)ns.by_node.size();
  tb.intra = mult * (double)(k - 1) / k * S;
  tb.inter = mult * (double)(n - 1) / n * S / k;
  return tb;
}

}  // namespace tp
