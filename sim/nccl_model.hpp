// nccl_model: a collective's time as NCCL runs it. For a communicator of R ranks on N nodes of a cluster:
//  1. the graphs NCCL's topology search builds (src/graph/search.cc), in closed form: the ring's channels and
//     per-channel speed (the speed from the search's list that carries the most bandwidth over the GPU's NVLinks
//     or PCIe and, across nodes, the node's NICs; channels duplicated as ncclTopoDupChannels does), the tree on
//     the ring's channels, NVLS (NVLink SHARP, NVSwitch systems from Hopper on) one channel per GPU of a node;
//  2. NCCL's tuning model (src/graph/tuning.cc, ncclTopoTuneModel): per function, algorithm and protocol a
//     latency (base + per-hop by link kind, ring steps, tree depth log2 N) and a bandwidth (channels x speed,
//     refined per protocol, converted from bus to algorithm bandwidth);
//  3. the choice (ncclTopoGetAlgoTime): the algorithm and protocol of least time lat + bytes / bw, with the tree
//     correction and the ring plateau, as NCCL picks; NCCL_ALGO / NCCL_PROTO-like forcing for comparisons;
//  4. what the run pays beyond NCCL's prediction: the pipeline's fill (not NCCL's; fitted, see nccl_tuning.hpp).
// Point-to-point (send/recv, all-to-all as NCCL's grouped sends) is not in NCCL's tuning model: each peer's bytes
// cross NVLink or the GPU's share of the NICs at the graph's bandwidth, with the ring Simple hop latency.
// Constants: models/nccl_tuning (catalog nccl.json, overridable per cluster). Units: seconds and bytes outside,
// NCCL's us and GB/s inside. Invariant: every time is finite and positive for bytes > 0 and ranks > 1.
#pragma once
#include <string>

#include "collective.hpp"
#include "models/cluster.hpp"
#include "models/nccl_tuning.hpp"

namespace tp {

// What NCCL's topology search sees of one node of the cluster, GB/s as NCCL counts it.
struct NcclSystem {
  NcclArch arch = NcclArch::ampere;
  NcclHw intra_hw = NcclHw::nvlink;  // nvlink (NVSwitch or NVLink mesh) or pci
  bool nvswitch = false;
  double gpu_intra_bw = 0;   // one GPU into the node's fabric: NVLinks x NCCL's per-link bandwidth, or PCIe
  double gpu_net_bw = 0;     // one GPU's path to a NIC: min(NIC, PCIe)
  double nic_bw = 0;         // one NIC
  int nics_per_node = 0, gpus_per_node = 1;
  bool collnet = false;      // in-network reduction (SHARP) on the fabric: CollNet, and NVLS across nodes
};
NcclSystem nccl_system(const Cluster& cl, const NcclTuning& t);

// The cluster's NCCL tuning: its "nccl" version's constants with its overrides applied (throws InputError).
NcclTuning nccl_tuning_for(const Cluster& cl);

// One graph of the search: channels and per-channel speed inside a node and across nodes (GB/s).
struct NcclGraph {
  int channels = 0;
  double bw_intra = 0, bw_inter = 0;
};

constexpr int kNcclFuncs = 5;  // Broadcast, Reduce, AllGather, ReduceScatter, AllReduce (NCCL's order)

// A communicator: the graphs and NCCL's tuning table for it.
struct NcclComm {
  NcclTuning tuning;
  NcclSystem sys;
  int ranks = 1, nodes = 1;
  NcclGraph ring, tree, nvls;
  double bw[kNcclFuncs][kNcclAlgos][kNcclProtos] = {};   // algorithm bandwidth, GB/s (0 = not available)
  double lat[kNcclFuncs][kNcclAlgos][kNcclProtos] = {};  // us
};
// `ranks` ranks, `ranks_per_node` on each node (ranks / ranks_per_node nodes). The communicator's GPUs use the
// NICs next to them (their share, at least one NIC). `node_busy`: the node's other GPUs run the same collective in
// their own communicators at the same time (the step's data-parallel groups), so a share below one NIC is a
// fraction of its bandwidth, and beyond a leaf switch the fabric's oversubscription applies.
NcclComm nccl_comm(const Cluster& cl, const NcclTuning& t, int ranks, int ranks_per_node, bool node_busy = false);

// One call: what NCCL runs and how long it takes.
struct NcclCall {
  std::string algo, proto;  // "Ring", "Simple"; "P2P" for send/recv and all-to-all
  int channels = 0;         // channels the launch uses at this size (NCCL's per-size channel tuning)
  double time_s = 0;
  double latency_s = 0;     // of which the latency term (the rest is bytes / bandwidth)
  double fill_s = 0;        // of the latency term, the pipeline's fill (NcclTuning::PipelineFill)
};
// `bytes` as nccl-tests counts it: the whole buffer (all-gather: the gathered output; reduce-scatter: the input;
// all-to-all: what one rank sends in all; send/recv: one message). force_algo / force_proto: -1 = NCCL's choice,
// else the index to use (throws InputError when the pair cannot run this function here).
NcclCall nccl_call(const NcclComm& c, Coll op, double bytes, int force_algo = -1, int force_proto = -1);

// The time of collective `c` of `bytes` over `g` ranks, `k` per node, on the cluster (its NCCL tuning cached per
// version and overrides; communicators cached per thread): what the step's collectives take under "nccl":
// {"step_collectives": true}. `node_busy` as for nccl_comm (the planner's closed form; the simulator shares the
// links through its flows instead).
NcclCall nccl_collective(const Cluster& cl, Coll c, int g, int k, double bytes, bool node_busy = false);

// nccl-tests' bus bandwidth factor: busbw = algbw x factor (all-reduce 2(R-1)/R; all-gather, reduce-scatter and
// all-to-all (R-1)/R; broadcast, reduce and send/recv 1).
double nccl_bus_factor(Coll op, int ranks);

}  // namespace tp
