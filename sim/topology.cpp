// topology: builds the cluster graph (GPUs, node switches, NICs, leaves, one aggregated spine) and routes
// between GPUs by fixed up/down paths.
// Invariants: vertices are laid out as [GPUs | node switches | NICs | leaves | spine?], so gpu_vertex[g] == g;
// every cable is added as two directed edges with consecutive dense ids (2k = "up"/outward, 2k+1 = back);
// links[id] equals the edge property with that id; route() uses the O(1) lookup tables built here and
// never searches the graph.
#include "topology.hpp"

#include <stdexcept>
#include <string>

namespace tp {

const char* tier_name(Tier t) {
  switch (t) {
    case Tier::intra: return "intra";
    case Tier::pcie: return "pcie";
    case Tier::nic: return "nic";
    case Tier::fabric: return "fabric";
  }
  return "?";
}

int Topology::nic_of(int gpu) const {
  const int node = gpu / gpus_per_node;
  const int local = gpu % gpus_per_node;
  return node * nics_per_node + local * nics_per_node / gpus_per_node;
}

int Topology::leaf_of_nic(int nic) const {
  const int node = nic / nics_per_node;
  const int rail = nic % nics_per_node;
  const int group = node / nodes_per_leaf;
  return net == NetTopology::rail_optimized ? group * nics_per_node + rail : group;
}

std::vector<int> Topology::route(int src_gpu, int dst_gpu) const {
  std::vector<int> r;
  r.reserve(6);
  route_into(src_gpu, dst_gpu, r);
  return r;
}

void Topology::route_into(int src_gpu, int dst_gpu, std::vector<int>& r) const {
  const int n_gpus = static_cast<int>(gpu_vertex.size());
  if (src_gpu < 0 || src_gpu >= n_gpus || dst_gpu < 0 || dst_gpu >= n_gpus)
    throw std::out_of_range("route: gpu " + std::to_string(src_gpu) + " -> " + std::to_string(dst_gpu) +
                            " outside [0, " + std::to_string(n_gpus) + ")");
  if (src_gpu == dst_gpu) return;
  if (node_of(src_gpu) == node_of(dst_gpu)) {
    r.push_back(gpu_up_intra_[src_gpu]);
    r.push_back(gpu_down_intra_[dst_gpu]);
    return;
  }
  const int nic_a = nic_of(src_gpu), nic_b = nic_of(dst_gpu);
  const int leaf_a = leaf_of_nic(nic_a), leaf_b = leaf_of_nic(nic_b);
  r.push_back(gpu_up_pcie_[src_gpu]);
  r.push_back(nic_up_[nic_a]);
  if (leaf_a != leaf_b) {
    r.push_back(leaf_up_[leaf_a]);
    r.push_back(leaf_down_[leaf_b]);
  }
  r.push_back(nic_down_[nic_b]);
  r.push_back(gpu_down_pcie_[dst_gpu]);
}

double Topology::latency_s(int a, int b) const {
  if (a == b) return 0;
  if (node_of(a) == node_of(b)) return links[gpu_up_intra_[a]].latency_s + links[gpu_down_intra_[b]].latency_s;
  const int nic_a = nic_of(a), nic_b = nic_of(b);
  const int leaf_a = leaf_of_nic(nic_a), leaf_b = leaf_of_nic(nic_b);
  double s = links[gpu_up_pcie_[a]].latency_s + links[nic_up_[nic_a]].latency_s + links[nic_down_[nic_b]].latency_s +
             links[gpu_down_pcie_[b]].latency_s;
  if (leaf_a != leaf_b) s += links[leaf_up_[leaf_a]].latency_s + links[leaf_down_[leaf_b]].latency_s;
  return s;
}

double Topology::route_latency_s(const std::vector<int>& r) const {
  double s = 0;
  for (int id : r) s += links.at(id).latency_s;
  return s;
}

namespace {

void require(bool ok, const std::string& what) {
  if (!ok) throw std::invalid_argument("build_topology: " + what);
}

// Adds one cable as two directed edges (u -> v gets the even id, v -> u the odd one); returns the u -> v id.
int add_cable(Topology& t, int u, int v, double cap_bytes_per_s, double latency_s, Tier tier) {
  const int id = static_cast<int>(t.links.size());
  const LinkInfo fwd{id, cap_bytes_per_s, latency_s, tier};
  const LinkInfo back{id + 1, cap_bytes_per_s, latency_s, tier};
  boost::add_edge(u, v, fwd, t.graph);
  boost::add_edge(v, u, back, t.graph);
  t.links.push_back(fwd);
  t.links.push_back(back);
  return id;
}

}  // namespace

Topology build_topology(const Cluster& c, int gpus) {
  require(c.gpus_per_node >= 1, "gpus_per_node must be >= 1");
  require(c.inter.nics_per_node >= 1, "nics_per_node must be >= 1");
  require(c.inter.nodes_per_leaf >= 1, "nodes_per_leaf must be >= 1");
  require(c.inter.oversubscription > 0, "oversubscription must be > 0");
  require(gpus >= 1, "gpus must be >= 1, got " + std::to_string(gpus));
  require(gpus <= c.total_gpus(), "gpus " + std::to_string(gpus) + " exceeds the cluster's " +
                                      std::to_string(c.total_gpus()));

  Topology t;
  t.gpus_per_node = c.gpus_per_node;
  t.nics_per_node = c.inter.nics_per_node;
  t.nodes = (gpus + c.gpus_per_node - 1) / c.gpus_per_node;
  t.nodes_per_leaf = c.inter.nodes_per_leaf;
  t.net = c.inter.topology;
  t.fabric_blocking = c.inter.oversubscription > 1.0;

  const int n_gpus = t.nodes * t.gpus_per_node;
  const int n_nics = t.nodes * t.nics_per_node;
  const int groups = (t.nodes + t.nodes_per_leaf - 1) / t.nodes_per_leaf;
  const int n_leaves = t.net == NetTopology::rail_optimized ? groups * t.nics_per_node : groups;
  const bool has_spine = n_leaves > 1;

  // Vertices in layout order; add_vertex returns consecutive descriptors 0, 1, 2, ...
  auto add_vertex = [&](VertexKind kind, int index) {
    const auto v = boost::add_vertex(t.graph);
    t.graph[v] = VertexInfo{kind, index};
    return static_cast<int>(v);
  };
  t.gpu_vertex.resize(n_gpus);
  for (int g = 0; g < n_gpus; ++g) t.gpu_vertex[g] = add_vertex(VertexKind::gpu, g);
  t.node_switch_vertex.resize(t.nodes);
  for (int n = 0; n < t.nodes; ++n) t.node_switch_vertex[n] = add_vertex(VertexKind::node_switch, n);
  t.nic_vertex.resize(n_nics);
  for (int k = 0; k < n_nics; ++k) t.nic_vertex[k] = add_vertex(VertexKind::nic, k);
  t.leaf_vertex.resize(n_leaves);
  for (int l = 0; l < n_leaves; ++l) t.leaf_vertex[l] = add_vertex(VertexKind::leaf, l);
  if (has_spine) t.spine_vertex = add_vertex(VertexKind::spine, 0);

  const int n_cables = 2 * n_gpus + n_nics + (has_spine ? n_leaves : 0);
  t.links.reserve(2 * static_cast<size_t>(n_cables));
  t.gpu_up_intra_.resize(n_gpus);
  t.gpu_down_intra_.resize(n_gpus);
  t.gpu_up_pcie_.resize(n_gpus);
  t.gpu_down_pcie_.resize(n_gpus);
  t.nic_up_.resize(n_nics);
  t.nic_down_.resize(n_nics);
  t.leaf_up_.assign(n_leaves, -1);
  t.leaf_down_.assign(n_leaves, -1);

  // GPU <-> node switch (intra tier) and GPU <-> its NIC (pcie tier).
  for (int g = 0; g < n_gpus; ++g) {
    const int sw = t.node_switch_vertex[t.node_of(g)];
    const int up = add_cable(t, t.gpu_vertex[g], sw, c.intra.bandwidth_bytes_per_s, c.intra.latency_s, Tier::intra);
    t.gpu_up_intra_[g] = up;
    t.gpu_down_intra_[g] = up + 1;
  }
  for (int g = 0; g < n_gpus; ++g) {
    const int nic = t.nic_vertex[t.nic_of(g)];
    const int up = add_cable(t, t.gpu_vertex[g], nic, c.host.pcie_bandwidth_bytes_per_s, 0.0, Tier::pcie);
    t.gpu_up_pcie_[g] = up;
    t.gpu_down_pcie_[g] = up + 1;
  }
  // NIC <-> leaf (nic tier); remember each leaf's total downlink capacity for its uplink.
  std::vector<double> leaf_down_cap(n_leaves, 0.0);
  for (int k = 0; k < n_nics; ++k) {
    const int leaf = t.leaf_of_nic(k);
    const int up = add_cable(t, t.nic_vertex[k], t.leaf_vertex[leaf], c.inter.nic_bandwidth_bytes_per_s,
                             c.inter.latency_s, Tier::nic);
    t.nic_up_[k] = up;
    t.nic_down_[k] = up + 1;
    leaf_down_cap[leaf] += c.inter.nic_bandwidth_bytes_per_s;
  }
  // Leaf <-> spine (fabric tier), oversubscribed.
  if (has_spine) {
    for (int l = 0; l < n_leaves; ++l) {
      const int up = add_cable(t, t.leaf_vertex[l], t.spine_vertex, leaf_down_cap[l] / c.inter.oversubscription,
                               c.inter.latency_s, Tier::fabric);
      t.leaf_up_[l] = up;
      t.leaf_down_[l] = up + 1;
    }
  }
  return t;
}

}  // namespace tp
