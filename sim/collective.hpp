// collective: decomposition of collectives into phases of point-to-point flows on the topology.
// Algorithms: ring (each member sends to the next, 2(g-1) steps for all-reduce, g-1 for RS/AG) and
// hierarchical (intra-node ring reduce-scatter, inter-node ring over the members with the same local index
// on S/k bytes, intra-node all-gather), chosen automatically when a group has k > 1 members on each of
// n > 1 nodes. Per-member volumes: all-reduce 2(g-1)/g*S, reduce-scatter / all-gather (g-1)/g*S, p2p S.
// Rooted collectives (root = group[0]) are pipelined chains in ring order, one phase of g-1 flows of S bytes
// each (the data is cut into small chunks, so the chain costs one S transfer plus g-1 per-hop latencies):
// broadcast: member i sends S to member i+1 (i = 0..g-2); reduce: member i+1 sends S to member i, ending at
// the root. All-to-all: each member holds S bytes and sends S/g to every other member, one phase of g(g-1)
// direct flows with one step of latency. Per-member volumes: broadcast / reduce (g-1)/g*S (the mean over
// the members, i.e. what a member sends on average when the root rotates over the group, as in SUMMA),
// all-to-all (g-1)/g*S.
// Invariant: phases run one after another; the flows of one phase run concurrently.
#pragma once
#include <vector>

#include "topology.hpp"

namespace tp {

enum class Coll { all_reduce = 0, reduce_scatter = 1, all_gather = 2, p2p = 3, broadcast = 4, reduce = 5, all_to_all = 6 };
const char* coll_name(Coll c);

struct FlowReq {
  int src, dst;   // global GPU ids
  double bytes;   // wire bytes: payload divided by the tier's efficiency at this message size
  double payload; // bytes of data actually sent
};

struct Phase {
  std::vector<FlowReq> flows;
  int steps = 1;          // message steps (latency is paid per step)
  double latency_s = 0;   // steps * worst route latency
};

// The phases of a ring (hierarchical when the group spans n > 1 nodes with k > 1 members each): each phase is
// a set of concurrent rings of `ring` members, on one tier, each member sending `payload_fraction` x S to
// the next over `steps` latency steps; the tier's efficiency is read at `eff_fraction` x S.
struct RingPhase {
  bool inter = false;
  int ring = 1, steps = 0;
  double payload_fraction = 0, eff_fraction = 1;
};
struct RingPhases { RingPhase phase[3]; int count = 0; };
// all_reduce, reduce_scatter or all_gather over g members with k per node (k = g: one node; k = 1 or k not
// dividing g: a flat ring). Hierarchical: intra ring, inter rings over the members with the same local index,
// intra ring (as NCCL's and sim/collective.cpp's decomposition).
RingPhases collective_ring_phases(Coll c, int g, int k);

// `group` lists the members' global GPU ids in ring order (ascending rank). `bytes` is the collective's
// buffer size S (for p2p: group = {src, dst}).
std::vector<Phase> collective_phases(Coll c, const std::vector<int>& group, double bytes, const Topology& topo,
                                     const Cluster& cl);

// Time of the collective with the group alone on the network: per phase, max over its flows of
// bytes / (bottleneck capacity shared among the phase's own flows) + the phase latency.
double collective_time_isolated_s(Coll c, const std::vector<int>& group, double bytes, const Topology& topo,
                                  const Cluster& cl);

// Time of the same collective run at once by several disjoint groups (e.g. the q rows of a 2D grid, whose
// members share nodes and NICs): per phase, the flows of every group share the links; the slowest flow and
// the largest phase latency set the phase time.
double collective_time_concurrent_s(Coll c, const std::vector<std::vector<int>>& groups, double bytes,
                                    const Topology& topo, const Cluster& cl);

// Payload bytes member 0 sends, split into intra-node and inter-node (no efficiency inflation):
// network volume accounting for collectives folded into compute ops. Broadcast / reduce: the mean over the
// members ((g-1)/g*S in all; each ring edge's share is intra or inter by its endpoints' nodes), because the
// root of the collectives they are used for (SUMMA steps) rotates over the group. All-to-all: S/g to each
// other member, by that member's node.
struct TierBytes { double intra = 0, inter = 0; };
TierBytes collective_member_bytes(Coll c, const std::vector<int>& group, double bytes, const Topology& topo);

}  // namespace tp
