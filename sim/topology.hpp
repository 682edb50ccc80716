// topology: the cluster as a Boost.Graph graph — GPUs, per-node switch (NVSwitch / NVLink mesh / PCIe root),
// NICs, leaf switches and an aggregated spine — with directed links (capacity, latency, tier) and
// deterministic up/down routing between any two GPUs.
// Invariants: every physical cable is two directed edges; link ids are dense [0, links.size());
// route(a, b) is a pure function of (a, b) and lists link ids from a to b (empty when a == b).
#pragma once
#include <boost/graph/adjacency_list.hpp>
#include <string>
#include <vector>

#include "../models/cluster.hpp"

namespace tp {

enum class Tier { intra = 0, pcie = 1, nic = 2, fabric = 3 };  // fabric = leaf <-> spine
inline constexpr int kTiers = 4;
const char* tier_name(Tier t);

enum class VertexKind { gpu, node_switch, nic, leaf, spine };

struct VertexInfo {
  VertexKind kind;
  int index;  // gpu id, node id, nic id, leaf id, or 0 for the spine
};

struct LinkInfo {
  int id;                       // dense link id
  double capacity_bytes_per_s;  // per direction
  double latency_s;
  Tier tier;
};

using TopoGraph = boost::adjacency_list<boost::vecS, boost::vecS, boost::directedS, VertexInfo, LinkInfo>;

struct Topology {
  TopoGraph graph;
  std::vector<LinkInfo> links;         // by link id (copy of the edge properties)
  std::vector<int> gpu_vertex;         // gpu id -> vertex
  std::vector<int> node_switch_vertex; // node -> vertex
  std::vector<int> nic_vertex;         // node * nics_per_node + k -> vertex
  std::vector<int> leaf_vertex;        // leaf id -> vertex
  int spine_vertex = -1;               // -1 when there is a single leaf
  int gpus_per_node = 1, nics_per_node = 1, nodes = 1, nodes_per_leaf = 1;
  NetTopology net = NetTopology::fat_tree;
  bool fabric_blocking = false;  // oversubscribed leaf uplinks: fabric links can limit a flow

  // Whether a link can ever limit a flow: a non-blocking fabric (oversubscription <= 1) carries whatever the
  // NICs feed it, so its links are left out of flow routes.
  bool can_bottleneck(int link) const { return fabric_blocking || links[link].tier != Tier::fabric; }

  int node_of(int gpu) const { return gpu / gpus_per_node; }
  int nic_of(int gpu) const;   // global NIC index used by this GPU for inter-node traffic
  int leaf_of_nic(int nic) const;
  // Link ids along the path a -> b. Same node: GPU -> node switch -> GPU. Other node:
  // GPU -> NIC (pcie tier) -> leaf (nic tier) [-> spine -> leaf (fabric tier)] -> NIC -> GPU.
  std::vector<int> route(int src_gpu, int dst_gpu) const;
  void route_into(int src_gpu, int dst_gpu, std::vector<int>& out) const;  // appends route(src, dst) to out
  double route_latency_s(const std::vector<int>& r) const;
  double latency_s(int src_gpu, int dst_gpu) const;  // = route_latency_s(route(src, dst)), without building it

 private:
  // O(1) link-id lookup tables filled by build_topology so that route() never scans out-edge lists
  // (boost::edge on a vecS list is linear in the out-degree, and a leaf may have hundreds of ports).
  std::vector<int> gpu_up_intra_, gpu_down_intra_;  // by gpu: gpu -> node switch, node switch -> gpu
  std::vector<int> gpu_up_pcie_, gpu_down_pcie_;    // by gpu: gpu -> its NIC, its NIC -> gpu
  std::vector<int> nic_up_, nic_down_;              // by nic: nic -> leaf, leaf -> nic
  std::vector<int> leaf_up_, leaf_down_;            // by leaf: leaf -> spine, spine -> leaf (-1 without spine)
  friend Topology build_topology(const Cluster& c, int gpus);
};

// Builds the topology for the first `gpus` GPUs of the cluster (whole nodes; gpus <= cluster size).
Topology build_topology(const Cluster& c, int gpus);

}  // namespace tp
