// The NCCL model (sim/nccl_model): NCCL's graphs and choices on the catalog's clusters as NCCL's own search and
// tuning model produce them, and the published nccl-tests results (data/validation/nccl-tests-set.json) at
// today's accuracy.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <numeric>

#include "models/catalog.hpp"
#include "models/cluster.hpp"
#include "sim/collective.hpp"
#include "sim/nccl_model.hpp"
#include "sim/step_formulas.hpp"
#include "sim/topology.hpp"
#include "sim/validate_nccl.hpp"

namespace tp {
namespace {

Cluster catalog_cluster(const std::string& name, int nodes = 0, bool collnet = false) {
  json c = *catalog_find("clusters", name);
  if (nodes > 0) c["nodes"] = nodes;
  if (collnet) c["nccl"] = {{"collnet", true}};
  Issues is;
  Cluster cl = read_cluster(c, name, is);
  EXPECT_TRUE(is.empty()) << is.messages.front();
  return cl;
}

double busbw_GBps(const NcclComm& c, Coll op, double bytes, int algo = -1, int proto = -1) {
  return bytes / nccl_call(c, op, bytes, algo, proto).time_s / 1e9 * nccl_bus_factor(op, c.ranks);
}

// The graphs NCCL's search finds on a DGX A100 and a DGX H100 (docs/collectives.md works them out): inside a node
// 12 ring channels at 20 / 30 GB/s (6 at 40 / 60 duplicated), across nodes one channel per NIC at the highest
// speed the NIC path takes (24 / 48 GB/s), NVLS one channel per GPU at 40 GB/s on the H100 only.
TEST(NcclModel, GraphsAreWhatNcclsSearchFindsOnDgxA100AndH100) {
  const Cluster a100 = catalog_cluster("selene"), h100 = catalog_cluster("dgx-h100");
  const NcclComm a1 = nccl_comm(a100, nccl_tuning_for(a100), 8, 8), h1 = nccl_comm(h100, nccl_tuning_for(h100), 8, 8);
  EXPECT_EQ(a1.ring.channels, 12);
  EXPECT_DOUBLE_EQ(a1.ring.bw_intra, 20.0);
  EXPECT_EQ(a1.nvls.channels, 0);
  EXPECT_EQ(h1.ring.channels, 12);
  EXPECT_DOUBLE_EQ(h1.ring.bw_intra, 30.0);
  EXPECT_EQ(h1.nvls.channels, 8);
  EXPECT_DOUBLE_EQ(h1.nvls.bw_intra, 40.0);
  const NcclComm a2 = nccl_comm(a100, nccl_tuning_for(a100), 16, 8), h2 = nccl_comm(h100, nccl_tuning_for(h100), 64, 8);
  EXPECT_EQ(a2.ring.channels, 8);
  EXPECT_DOUBLE_EQ(a2.ring.bw_inter, 24.0);
  EXPECT_EQ(h2.ring.channels, 8);
  EXPECT_DOUBLE_EQ(h2.ring.bw_inter, 48.0);
  // Two nodes: the tree's intra-node speed is raised below twice the inter-node one (A100: 24 -> 30).
  EXPECT_DOUBLE_EQ(a2.tree.bw_intra, 30.0);
}

// NCCL's choice by size: LL for small messages, Simple for large; NVLS inside an H100 node for large all-reduces,
// never on an A100; CollNet only where the fabric reduces in the network; forcing a pair NCCL cannot run here
// is an input error naming it.
TEST(NcclModel, ChoicesFollowNcclsTuningBySize) {
  const Cluster h100 = catalog_cluster("dgx-h100"), a100 = catalog_cluster("selene");
  const NcclComm h1 = nccl_comm(h100, nccl_tuning_for(h100), 8, 8), a1 = nccl_comm(a100, nccl_tuning_for(a100), 8, 8);
  EXPECT_EQ(nccl_call(h1, Coll::all_reduce, 4096).proto, "LL");
  EXPECT_EQ(nccl_call(h1, Coll::all_reduce, 1 << 30).algo, "NVLS");
  EXPECT_EQ(nccl_call(a1, Coll::all_reduce, 4096).proto, "LL");
  const NcclCall big = nccl_call(a1, Coll::all_reduce, 1 << 30);
  EXPECT_EQ(big.algo, "Ring");
  EXPECT_EQ(big.proto, "Simple");
  EXPECT_THROW(nccl_call(a1, Coll::all_reduce, 1 << 30, (int)NcclAlgo::nvls), InputError);
  const NcclComm h8 = nccl_comm(h100, nccl_tuning_for(h100), 64, 8);
  EXPECT_THROW(nccl_call(h8, Coll::all_reduce, 1 << 30, (int)NcclAlgo::collnet_chain), InputError);
  const Cluster sharp = catalog_cluster("dgx-h100", 0, true);
  const NcclComm s8 = nccl_comm(sharp, nccl_tuning_for(sharp), 64, 8);
  EXPECT_GT(busbw_GBps(s8, Coll::all_reduce, 1 << 30, (int)NcclAlgo::collnet_chain), 0);
  // Time grows with size and every time is finite and positive.
  double last = 0;
  for (double b = 8; b <= 16e9; b *= 4) {
    const double t = nccl_call(h8, Coll::all_reduce, b).time_s;
    EXPECT_TRUE(std::isfinite(t) && t > last) << b;
    last = t;
  }
}

// A cluster's "nccl" object overrides the version's constants, and a bad one is refused with its path.
TEST(NcclModel, ClusterOverridesTheTuningConstants) {
  json c = *catalog_find("clusters", "selene");
  c["nccl"] = {{"tuning", {{"ll_max_bw", {{1, 1, 1}, {1, 1, 1}, {1, 1, 1}, {1, 1, 1}}}}}};
  Issues is;
  const Cluster slow_ll = read_cluster(c, "cluster", is);
  ASSERT_TRUE(is.empty());
  const Cluster plain = catalog_cluster("selene");
  const NcclComm a = nccl_comm(plain, nccl_tuning_for(plain), 8, 8), b = nccl_comm(slow_ll, nccl_tuning_for(slow_ll), 8, 8);
  EXPECT_LT(busbw_GBps(b, Coll::all_reduce, 65536, (int)NcclAlgo::ring, (int)NcclProto::ll),
            0.5 * busbw_GBps(a, Coll::all_reduce, 65536, (int)NcclAlgo::ring, (int)NcclProto::ll));
  c["nccl"] = {{"tuning", {{"ll_max_bw", {{1, 1}}}, {"speeds_intra", {{3, 4}, {1}, {1}, {1}}}}}, {"versio", "2.30"}};
  Issues bad;
  read_cluster(c, "cluster", bad);
  ASSERT_EQ(bad.messages.size(), 3u);
  EXPECT_NE(bad.messages[0].find("cluster.nccl.tuning.ll_max_bw"), std::string::npos) << bad.messages[0];
  EXPECT_NE(bad.messages[1].find("descending"), std::string::npos) << bad.messages[1];
  EXPECT_NE(bad.messages[2].find("versio"), std::string::npos) << bad.messages[2];
}

// Published nccl-tests results: large messages (>= 1 GiB), the mid sizes (4-256 MiB) and the whole 1 MiB..8 GiB
// range at today's errors (docs/accuracy.md). The issue's target, 10 % from 1 MiB to 8 GiB, is met at 1 GiB and
// above on most rows; at 4-256 MiB NCCL's own model is 54 % off on average, and the pipeline fill brings that
// to 21 %.
TEST(NcclModel, PublishedNcclTestsStayAtTodaysErrors) {
  std::ifstream in(std::string(TP_SOURCE_DIR) + "/data/validation/nccl-tests-set.json");
  const json set = json::parse(in);
  const NcclTestsReport r = validate_nccl_tests(set, "nccl-tests-set.json");
  ASSERT_GE(r.counted, 150);
  double large_sum = 0, large_max = 0;
  int large = 0, large_within = 0;
  for (const auto& p : r.points)
    if (p.counted && p.bytes >= 1073741824.0) {
      large_sum += std::fabs(p.error());
      large_max = std::max(large_max, std::fabs(p.error()));
      large_within += std::fabs(p.error()) <= 0.10;
      ++large;
    }
  ASSERT_GT(large, 50);
  EXPECT_LT(large_sum / large, 0.10) << "mean |error| at >= 1 GiB";
  EXPECT_GE((double)large_within / large, 0.60) << "share within 10 % at >= 1 GiB";
  double mid_sum = 0;
  int mid = 0;
  for (const auto& p : r.points)
    if (p.bytes >= 4194304.0 && p.bytes <= 268435456.0) {
      mid_sum += std::fabs(p.error());
      ++mid;
    }
  ASSERT_GT(mid, 50);
  EXPECT_LT(mid_sum / mid, 0.23) << "mean |error| at 4-256 MiB";
  EXPECT_LT(r.mean_abs, 0.17) << "mean |error| over 1 MiB..8 GiB";
  EXPECT_GE(r.share_within_10pct, 0.55) << "share within 10 % over 1 MiB..8 GiB";
}

// The pipeline's fill: what the run pays beyond NCCL's own prediction, in the latency term; none for LL; it grows
// as the square root of the bandwidth term up to the saturation, then stays; all-zero constants turn it off.
TEST(NcclModel, PipelineFillGrowsAsTheRootOfTheBandwidthTermThenSaturates) {
  const Cluster h100 = catalog_cluster("dgx-h100");
  const NcclTuning t = nccl_tuning_for(h100);
  const NcclComm c = nccl_comm(h100, t, 8, 8);
  const int nvls = (int)NcclAlgo::nvls, simple = (int)NcclProto::simple;
  const NcclCall a = nccl_call(c, Coll::all_reduce, 16 << 20, nvls, simple), b = nccl_call(c, Coll::all_reduce, 64 << 20, nvls, simple);
  ASSERT_GT(a.fill_s, 0);
  EXPECT_LE(a.fill_s, a.latency_s);
  // Below saturation the bandwidth term is 4x at 4x the bytes: the fill doubles (2 sqrt(T x 2 x nvls_stage_us)).
  EXPECT_NEAR(b.fill_s / a.fill_s, 2.0, 1e-9);
  const double T_us = (a.time_s - a.latency_s) * 1e6;
  EXPECT_NEAR(a.fill_s * 1e6, 2 * std::sqrt(T_us * 2 * t.fill.nvls_stage_us), 1e-9);
  const NcclCall big = nccl_call(c, Coll::all_reduce, 4.0 * (1 << 30), nvls, simple), huge = nccl_call(c, Coll::all_reduce, 8.0 * (1 << 30), nvls, simple);
  EXPECT_NEAR(big.fill_s * 1e6, 2 * std::sqrt(t.fill.saturation_us * 2 * t.fill.nvls_stage_us), 1e-9);
  EXPECT_EQ(big.fill_s, huge.fill_s);
  EXPECT_EQ(nccl_call(c, Coll::all_reduce, 1 << 20, (int)NcclAlgo::ring, (int)NcclProto::ll).fill_s, 0);
  // Turned off by a cluster override: NCCL's own prediction.
  json j = *catalog_find("clusters", "dgx-h100");
  j["nccl"] = {{"tuning", {{"pipeline_fill", {{"nvls_stage_us", 0}, {"intra_hop_us", 0}, {"net_hop_us", 0}}}}}};
  Issues is;
  const Cluster off = read_cluster(j, "cluster", is);
  ASSERT_TRUE(is.empty()) << is.messages[0];
  const NcclCall o = nccl_call(nccl_comm(off, nccl_tuning_for(off), 8, 8), Coll::all_reduce, 16 << 20, nvls, simple);
  EXPECT_EQ(o.fill_s, 0);
  EXPECT_NEAR(o.time_s, a.time_s - a.fill_s, 1e-12);
}

// "nccl": {"step_collectives": true}: the step's all-reduces, reduce-scatters, all-gathers, all-to-alls and
// pipeline sends take NCCL's time, in the simulator's flows (alone on the network) and in the planner's closed form
// alike; off, the curves' time.
TEST(NcclModel, StepCollectivesTakeNcclsTimeWhenTheClusterAsks) {
  Cluster cl = catalog_cluster("dgx-h100", 4);
  const Topology topo = build_topology(cl, 32);
  std::vector<int> node(8), all(32);
  std::iota(node.begin(), node.end(), 0);
  std::iota(all.begin(), all.end(), 0);
  const LinkTiers lat{cl.intra.latency_s, cl.inter.latency_s};
  for (bool on : {false, true}) {
    cl.nccl.step_collectives = on;
    for (double S : {1e6, 64e6, 1e9})
      for (Coll c : {Coll::all_reduce, Coll::reduce_scatter, Coll::all_gather, Coll::all_to_all})
        for (const auto* group : {&node, &all}) {
          const int g = (int)group->size();
          const double t = collective_time_isolated_s(c, *group, S, topo, cl);
          const double nccl = nccl_collective(cl, c, g, 8, S).time_s;
          if (on) {
            EXPECT_NEAR(t, nccl, 1e-9 * nccl) << coll_name(c) << " " << S << " on " << g;
            EXPECT_NEAR(collective_closed_form_s(c, g, 8, S, cl, lat), nccl, 1e-9 * nccl);
          } else {
            EXPECT_GT(std::fabs(t / nccl - 1), 1e-6) << coll_name(c) << " " << S << " on " << g;  // the curves' own time
          }
        }
    for (double S : {1e5, 64e6})
      for (bool inter : {false, true}) {  // a pipeline send: ncclSend / ncclRecv inside a node or across nodes
        const double t = collective_time_isolated_s(Coll::p2p, {0, inter ? 8 : 1}, S, topo, cl);
        const double nccl = nccl_collective(cl, Coll::p2p, 2, inter ? 1 : 2, S).time_s;
        if (on) {
          EXPECT_NEAR(t, nccl, 1e-9 * nccl) << "p2p " << S << (inter ? " across nodes" : " in a node");
          EXPECT_NEAR(p2p_closed_form_s(inter, S, cl, lat), nccl, 1e-9 * nccl);
        } else {
          EXPECT_GT(std::fabs(t / nccl - 1), 1e-6) << "p2p " << S;
        }
      }
  }
}

// Groups that share a node's NICs: the simulator's concurrent flows and the planner's closed form agree. On
// Frontera's Quadro nodes (4 GPUs, one NIC), four data-parallel groups of 8 ranks, one GPU per node each, share
// each node's NIC; alone, a group would have it to itself.
TEST(NcclModel, ClosedFormSharesTheNodesNicsAsTheSimulatorsFlowsDo) {
  const Cluster cl = catalog_cluster("frontera-rtx", 8);
  ASSERT_TRUE(cl.nccl.step_collectives);
  const Topology topo = build_topology(cl, 32);
  std::vector<std::vector<int>> groups(4);
  for (int node = 0; node < 8; ++node)
    for (int j = 0; j < 4; ++j) groups[j].push_back(4 * node + j);
  const LinkTiers lat{cl.intra.latency_s, cl.inter.latency_s};
  const double S = 512e6;
  const double alone = collective_time_isolated_s(Coll::all_reduce, groups[0], S, topo, cl);
  const double together = collective_time_concurrent_s(Coll::all_reduce, groups, S, topo, cl);
  const double closed = collective_closed_form_s(Coll::all_reduce, 8, 1, S, cl, lat);
  EXPECT_NEAR(alone, nccl_collective(cl, Coll::all_reduce, 8, 1, S).time_s, 1e-9 * alone);
  EXPECT_GT(together, 3 * alone);
  EXPECT_NEAR(closed / together, 1.0, 0.10) << "closed form " << closed << " s, simulated " << together << " s";
}

}  // namespace
}  // namespace tp
