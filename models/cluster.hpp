// cluster: nodes of GPUs, the intra-node fabric, the inter-node network, the host, and prices.
// Invariants: bandwidths are bytes/s per direction; a cluster has nodes * gpus_per_node GPUs.
#pragma once
#include <string>

#include "hardware.hpp"

namespace tp {

enum class Fabric { nvswitch = 0, nvlink = 1, pcie = 2 };
enum class NetTopology { fat_tree = 0, rail_optimized = 1 };

struct IntraNode {
  Fabric kind = Fabric::nvswitch;
  double bandwidth_bytes_per_s = 0;  // per GPU, per direction, into the fabric
  double latency_s = 0;              // per hop (per message step)
  Curve efficiency;                  // x = bytes of one collective -> fraction of bandwidth achieved
};

struct InterNode {
  int nics_per_node = 1;
  double nic_bandwidth_bytes_per_s = 0;  // per NIC, per direction (JSON gives bits/s)
  NetTopology topology = NetTopology::fat_tree;
  double oversubscription = 1.0;  // leaf downlink : uplink capacity ratio (>= 1)
  int nodes_per_leaf = 1;         // nodes whose NICs share one leaf switch (per rail if rail-optimized)
  double latency_s = 0;           // per hop
  Curve efficiency;               // x = bytes of one collective -> fraction of bandwidth achieved
};

struct Host {
  double memory_bytes = 0;
  double pcie_bandwidth_bytes_per_s = 0;  // per GPU, per direction
  int cpu_cores = 1;
  // Host DRAM bandwidth of one node, shared by its GPUs' host-side work (CPU Adam, pinned copies).
  // 0 = not given: plans with offload are rejected with a message naming this key.
  double memory_bandwidth_bytes_per_s = 0;
};

// How NCCL runs on the cluster (JSON "nccl", optional): the tuning constants' version, whether the fabric has
// in-network reduction (SHARP: NCCL's CollNet algorithms and NVLS across nodes), and any constants that override
// the version's (models/nccl_tuning.hpp names them).
struct ClusterNccl {
  std::string version;  // "" = the newest bundled
  bool collnet = false;
  // The step's data-parallel and tensor-parallel all-reduces, reduce-scatters and all-gathers take NCCL's time
  // (sim/nccl_model; JSON "step_collectives", the default); false: the fabrics' efficiency curves
  // (docs/collectives.md).
  bool step_collectives = true;
  json overrides = json::object();
  // Not JSON: a framework profile's fitted network efficiency scale (models/framework.hpp, apply_framework_fit)
  // divides the bandwidth term of NCCL's time as it scales the fabrics' curves. 1 = as NCCL's model says.
  double bandwidth_scale = 1;
};

struct Cluster {
  std::string name;
  ClusterNccl nccl;
  // NCCL's buffers per communicator a rank belongs to (channels x protocols x peers x NCCL_BUFFSIZE; JSON
  // "nccl_buffer_bytes_per_communicator", 0 when absent).
  double nccl_buffer_bytes_per_communicator = 0;
  Gpu gpu;
  int nodes = 1;
  int gpus_per_node = 1;
  IntraNode intra;
  InterNode inter;
  Host host;
  double price_per_gpu_hour_usd = 0;
  double power_per_gpu_w = 0;  // wall power per GPU including its share of host and network
  int total_gpus() const { return nodes * gpus_per_node; }
};

// Reads a cluster object; its "gpu" may be a catalog name or an inline GPU object.
Cluster read_cluster(const json& v, const std::string& path, Issues& issues);
json cluster_to_json(const Cluster& c);

}  // namespace tp
