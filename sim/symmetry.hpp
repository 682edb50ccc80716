// symmetry: the load that the copies of each representative flow put on the network (representative mode).
// A representative flow (sent by a simulated rank: dp = 0, tp = 0 of its stage) stands for the flows that the
// (dp, tp) translates of its source send in the same phase, all at its rate. For every link l of the set R (the
// links of all representative routes) copy_loads() counts how many copies cross l; that count is the flow's
// multiplicity on l. It also decides whether the layout is symmetric (every copy sees the same bottleneck links,
// capacities and loads as its representative) and how much larger the slowest copy's latency is.
// Two ways, same answer: exhaustive (route every copy: O(gpus) per flow) and, for layouts aligned with nodes
// (tp | gpus_per_node, dp*tp and gpus_per_node divide one another, equal GPUs per NIC, non-blocking fabric),
// a fast path that routes only the copies touching R's nodes: O(gpus_per_node x |R|), independent of dp.
#pragma once
#include <vector>

#include "collective.hpp"
#include "models/plan.hpp"

namespace tp {

struct RepFlow {
  int src = 0, dst = 0;                        // global ranks of the representative flow
  bool p2p = false;                            // pipeline send (its copies differ only in latency across leaves)
  bool group_spans_dp = false;                 // a DP-group collective: the group holds its own dp translates
  const std::vector<FlowReq>* phase = nullptr;  // all flows of its phase (collectives)
  std::vector<int> route;                      // bottleneck-capable links of its own route
};

struct CopyLoad {
  std::vector<int> links;     // links of R crossed by copies, ascending
  std::vector<double> mult;   // copies crossing each
  double extra_latency_s = 0;  // slowest copy's latency minus the representative's (pipeline sends)
};

struct CopyLoads {
  std::vector<CopyLoad> loads;  // per RepFlow
  bool symmetric = true;
};

CopyLoads copy_loads(const Plan& p, const Topology& topo, const std::vector<RepFlow>& flows, bool exhaustive = false);

}  // namespace tp
