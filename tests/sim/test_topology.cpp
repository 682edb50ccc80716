// Tests for sim/topology: vertex and link counts, route shapes and tiers, rail-optimized routing,
// oversubscribed uplinks, route latency, consistency of route ids with the Boost graph, and build speed.
#include <gtest/gtest.h>

#include <chrono>

#include "sim/topology.hpp"

namespace tp {
namespace {

// A DGX-like node: 8 GPUs on an NVSwitch, 8 NICs of 50 GB/s, PCIe at 32 GB/s.
Cluster dgx_like(int nodes, int nodes_per_leaf, NetTopology net = NetTopology::fat_tree, double oversub = 1.0) {
  Cluster c;
  c.name = "dgx-like";
  c.nodes = nodes;
  c.gpus_per_node = 8;
  c.intra.kind = Fabric::nvswitch;
  c.intra.bandwidth_bytes_per_s = 450e9;
  c.intra.latency_s = 2e-6;
  c.inter.nics_per_node = 8;
  c.inter.nic_bandwidth_bytes_per_s = 50e9;
  c.inter.topology = net;
  c.inter.oversubscription = oversub;
  c.inter.nodes_per_leaf = nodes_per_leaf;
  c.inter.latency_s = 5e-6;
  c.host.pcie_bandwidth_bytes_per_s = 32e9;
  return c;
}

std::vector<Tier> tiers(const Topology& t, const std::vector<int>& r) {
  std::vector<Tier> out;
  for (int id : r) out.push_back(t.links.at(id).tier);
  return out;
}

// Link id of the directed edge u -> v, found by Boost (fails the test when there is none).
int edge_id(const Topology& t, int u, int v) {
  auto [e, ok] = boost::edge(u, v, t.graph);
  EXPECT_TRUE(ok) << "no edge " << u << " -> " << v;
  return ok ? t.graph[e].id : -1;
}

TEST(Topology, TierNames) {
  EXPECT_STREQ(tier_name(Tier::intra), "intra");
  EXPECT_STREQ(tier_name(Tier::pcie), "pcie");
  EXPECT_STREQ(tier_name(Tier::nic), "nic");
  EXPECT_STREQ(tier_name(Tier::fabric), "fabric");
}

TEST(Topology, CountsTwoNodesTwoLeaves) {
  Topology t = build_topology(dgx_like(2, 1), 16);
  // 16 GPUs + 2 node switches + 16 NICs + 2 leaves + 1 spine.
  EXPECT_EQ(boost::num_vertices(t.graph), 37u);
  // Cables: 16 GPU-switch + 16 GPU-NIC + 16 NIC-leaf + 2 leaf-spine = 50, two directed links each.
  EXPECT_EQ(t.links.size(), 100u);
  EXPECT_EQ(boost::num_edges(t.graph), 100u);
  EXPECT_EQ(t.nodes, 2);
  EXPECT_EQ(t.leaf_vertex.size(), 2u);
  EXPECT_GE(t.spine_vertex, 0);
  EXPECT_EQ(t.graph[t.spine_vertex].kind, VertexKind::spine);
  EXPECT_EQ(t.graph[t.gpu_vertex[9]].kind, VertexKind::gpu);
  EXPECT_EQ(t.graph[t.gpu_vertex[9]].index, 9);
  EXPECT_EQ(t.graph[t.nic_vertex[12]].kind, VertexKind::nic);
  EXPECT_EQ(t.graph[t.node_switch_vertex[1]].kind, VertexKind::node_switch);
  // Link ids are dense and the edge properties agree with the links table.
  for (size_t i = 0; i < t.links.size(); ++i) EXPECT_EQ(t.links[i].id, static_cast<int>(i));
  std::vector<int> seen(t.links.size(), 0);
  for (size_t v = 0; v < boost::num_vertices(t.graph); ++v) {
    auto [eb, ee] = boost::out_edges(v, t.graph);
    for (auto it = eb; it != ee; ++it) {
      const LinkInfo& li = t.graph[*it];
      ++seen.at(li.id);
      EXPECT_EQ(t.links.at(li.id).tier, li.tier);
      EXPECT_EQ(t.links.at(li.id).capacity_bytes_per_s, li.capacity_bytes_per_s);
    }
  }
  for (int n : seen) EXPECT_EQ(n, 1);
}

TEST(Topology, CountsOneLeafHasNoSpine) {
  Topology t = build_topology(dgx_like(2, 2), 16);
  EXPECT_EQ(boost::num_vertices(t.graph), 35u);  // no spine
  EXPECT_EQ(t.links.size(), 96u);               // 48 cables
  EXPECT_EQ(t.spine_vertex, -1);
}

TEST(Topology, PartialNodeRoundsUpToWholeNodes) {
  Topology t = build_topology(dgx_like(4, 1), 12);
  EXPECT_EQ(t.nodes, 2);
  EXPECT_EQ(t.gpu_vertex.size(), 16u);
  EXPECT_THROW(build_topology(dgx_like(1, 1), 9), std::invalid_argument);
  EXPECT_THROW(build_topology(dgx_like(1, 1), 0), std::invalid_argument);
}

TEST(Topology, RouteWithinNode) {
  Topology t = build_topology(dgx_like(2, 1), 16);
  EXPECT_TRUE(t.route(3, 3).empty());
  auto r = t.route(1, 6);
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(tiers(t, r), (std::vector<Tier>{Tier::intra, Tier::intra}));
  const int sw = t.node_switch_vertex[0];
  EXPECT_EQ(r[0], edge_id(t, t.gpu_vertex[1], sw));
  EXPECT_EQ(r[1], edge_id(t, sw, t.gpu_vertex[6]));
  EXPECT_DOUBLE_EQ(t.links[r[0]].capacity_bytes_per_s, 450e9);
  EXPECT_DOUBLE_EQ(t.route_latency_s(r), 2 * 2e-6);
}

TEST(Topology, RouteAcrossNodesSameLeaf) {
  Topology t = build_topology(dgx_like(2, 2), 16);
  auto r = t.route(2, 13);
  ASSERT_EQ(r.size(), 4u);
  EXPECT_EQ(tiers(t, r), (std::vector<Tier>{Tier::pcie, Tier::nic, Tier::nic, Tier::pcie}));
  const int nic_a = t.nic_vertex[t.nic_of(2)], nic_b = t.nic_vertex[t.nic_of(13)];
  const int leaf = t.leaf_vertex[0];
  EXPECT_EQ(r[0], edge_id(t, t.gpu_vertex[2], nic_a));
  EXPECT_EQ(r[1], edge_id(t, nic_a, leaf));
  EXPECT_EQ(r[2], edge_id(t, leaf, nic_b));
  EXPECT_EQ(r[3], edge_id(t, nic_b, t.gpu_vertex[13]));
  EXPECT_DOUBLE_EQ(t.links[r[0]].capacity_bytes_per_s, 32e9);
  EXPECT_DOUBLE_EQ(t.links[r[1]].capacity_bytes_per_s, 50e9);
  EXPECT_DOUBLE_EQ(t.route_latency_s(r), 2 * 5e-6);  // pcie adds no latency
}

TEST(Topology, RouteAcrossLeavesUsesSpine) {
  Topology t = build_topology(dgx_like(2, 1), 16);
  auto r = t.route(0, 15);
  ASSERT_EQ(r.size(), 6u);
  EXPECT_EQ(tiers(t, r),
            (std::vector<Tier>{Tier::pcie, Tier::nic, Tier::fabric, Tier::fabric, Tier::nic, Tier::pcie}));
  EXPECT_EQ(r[2], edge_id(t, t.leaf_vertex[0], t.spine_vertex));
  EXPECT_EQ(r[3], edge_id(t, t.spine_vertex, t.leaf_vertex[1]));
  EXPECT_DOUBLE_EQ(t.route_latency_s(r), 4 * 5e-6);
  // The reverse path uses the opposite directed links.
  auto back = t.route(15, 0);
  ASSERT_EQ(back.size(), 6u);
  for (size_t i = 0; i < 6; ++i) EXPECT_NE(back[i], r[5 - i]);
  EXPECT_EQ(back[2], edge_id(t, t.leaf_vertex[1], t.spine_vertex));
}

TEST(Topology, SharedNicMapping) {
  Cluster c = dgx_like(2, 1);
  c.inter.nics_per_node = 2;  // 4 GPUs per NIC
  Topology t = build_topology(c, 16);
  EXPECT_EQ(t.nic_of(0), 0);
  EXPECT_EQ(t.nic_of(3), 0);
  EXPECT_EQ(t.nic_of(4), 1);
  EXPECT_EQ(t.nic_of(8), 2);
  EXPECT_EQ(t.nic_of(15), 3);
  // GPUs 0 and 1 share the NIC -> leaf link but have their own GPU -> NIC links.
  auto r0 = t.route(0, 8), r1 = t.route(1, 9);
  EXPECT_NE(r0[0], r1[0]);
  EXPECT_EQ(r0[1], r1[1]);
  // Leaf uplink = 2 NICs * 50 GB/s.
  EXPECT_DOUBLE_EQ(t.links[r0[2]].capacity_bytes_per_s, 100e9);
}

TEST(Topology, RailOptimized) {
  Topology t = build_topology(dgx_like(2, 2, NetTopology::rail_optimized), 16);
  EXPECT_EQ(t.leaf_vertex.size(), 8u);  // one leaf per rail
  EXPECT_GE(t.spine_vertex, 0);
  EXPECT_EQ(t.leaf_of_nic(t.nic_of(0)), 0);
  EXPECT_EQ(t.leaf_of_nic(t.nic_of(8)), 0);
  EXPECT_EQ(t.leaf_of_nic(t.nic_of(9)), 1);
  // Same rail on different nodes: one leaf hop.
  auto same_rail = t.route(0, 8);
  EXPECT_EQ(tiers(t, same_rail), (std::vector<Tier>{Tier::pcie, Tier::nic, Tier::nic, Tier::pcie}));
  EXPECT_EQ(same_rail[1], edge_id(t, t.nic_vertex[0], t.leaf_vertex[0]));
  // Cross rail: through the spine.
  auto cross = t.route(0, 9);
  ASSERT_EQ(cross.size(), 6u);
  EXPECT_EQ(t.links[cross[2]].tier, Tier::fabric);
  EXPECT_EQ(cross[3], edge_id(t, t.spine_vertex, t.leaf_vertex[1]));
  // Second group of nodes gets its own rail leaves.
  Topology t4 = build_topology(dgx_like(4, 2, NetTopology::rail_optimized), 32);
  EXPECT_EQ(t4.leaf_vertex.size(), 16u);
  EXPECT_EQ(t4.leaf_of_nic(t4.nic_of(16 + 3)), 8 + 3);
}

TEST(Topology, OversubscriptionDividesUplink) {
  Topology t = build_topology(dgx_like(2, 1, NetTopology::fat_tree, 2.0), 16);
  auto r = t.route(0, 8);
  ASSERT_EQ(r.size(), 6u);
  EXPECT_DOUBLE_EQ(t.links[r[2]].capacity_bytes_per_s, 8 * 50e9 / 2.0);
  EXPECT_DOUBLE_EQ(t.links[r[3]].capacity_bytes_per_s, 8 * 50e9 / 2.0);
}

TEST(Topology, TenThousandGpusBuildsQuickly) {
  Cluster c = dgx_like(1250, 32);
  auto t0 = std::chrono::steady_clock::now();
  Topology t = build_topology(c, 10000);
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  std::printf("build_topology(10000 GPUs): %.2f ms\n", ms);
  EXPECT_EQ(t.nodes, 1250);
  EXPECT_EQ(t.leaf_vertex.size(), 40u);
  EXPECT_EQ(boost::num_vertices(t.graph), 10000u + 1250u + 10000u + 40u + 1u);
  EXPECT_EQ(t.links.size(), 2u * (10000u + 10000u + 10000u + 40u));
  EXPECT_LT(ms, 1000.0);  // generous for debug/sanitizer builds; ~ a few ms when optimized
  auto r = t.route(0, 9999);
  EXPECT_EQ(r.size(), 6u);
  EXPECT_EQ(r[3], edge_id(t, t.spine_vertex, t.leaf_vertex[39]));
}

}  // namespace
}  // namespace tp
