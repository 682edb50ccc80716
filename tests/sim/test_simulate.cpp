// End-to-end simulator checks: bubble fractions from the event simulation against closed forms, the
// representative (symmetric) mode against the full-cluster mode, determinism, network volume, memory
// timeline, the run estimate and the trace.
#include <gtest/gtest.h>

#include <cmath>
#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <set>

#include "sim/output.hpp"
#include "sim/program.hpp"
#include "sim/simulate.hpp"
#include "sim_test_util.hpp"

using namespace tp;
using namespace tp::testutil;

// Bubble fraction relative to the ideal (bubble-free) step: measured as (T - T_ideal) / T_ideal with the
// ideal being m (or m*v chunk) forward+backward passes of a middle stage. Tiny vocabulary, ideal cluster.
static double bubble_fraction(const char* schedule, int p, int v, int m, int layers) {
  Scenario sc = make_scenario(gpt_model(layers, 1024, 16, 8, 512), ideal_cluster(), m,
                              plan_json(1, 1, p, v, schedule));
  Result r = simulate(sc);
  const CostModel& cm = r.prog.cm;
  double per_layer = cm.layer_fwd.time_s + cm.layer_bwd.time_s;
  double ideal = per_layer * (double)layers / p * m;
  return (r.step_time_s - ideal) / ideal;
}

TEST(Simulate, BubbleFractionsMatchClosedForms) {
  // Seeds §6.4: L = 96, p = 8, m = 8: contiguous 1F1B bubble (p-1)/m = 7/8; interleaved with v = L/p = 12
  // (equivalent to MPP) gives (p-1)/(v m) = p(p-1)/(L m) = 56/768.
  EXPECT_NEAR(bubble_fraction("1f1b", 8, 1, 8, 96), 7.0 / 8, 0.02);
  EXPECT_NEAR(bubble_fraction("gpipe", 8, 1, 8, 96), 7.0 / 8, 0.02);
  EXPECT_NEAR(bubble_fraction("interleaved", 8, 12, 8, 96), 56.0 / 768, 0.01);
  EXPECT_NEAR(bubble_fraction("1f1b", 4, 1, 32, 32), 3.0 / 32, 0.01);
  EXPECT_NEAR(bubble_fraction("interleaved", 4, 2, 32, 32), 3.0 / 64, 0.01);
}

TEST(Simulate, BreakdownSumsToStepTime) {
  Scenario sc = load_scenario(std::string(TP_SOURCE_DIR) + "/scenarios/default.json");
  Result r = simulate(sc);
  EXPECT_NEAR(r.breakdown.total(), r.step_time_s, 1e-9 * r.step_time_s);
  for (const RankResult& rr : r.ranks) EXPECT_NEAR(rr.breakdown.total(), r.step_time_s, 1e-9 * r.step_time_s);
  EXPECT_GT(r.breakdown.bubble, 0);
  EXPECT_GT(r.breakdown.tp_comm_exposed, 0);
  EXPECT_GT(r.breakdown.recompute, 0);
  EXPECT_TRUE(r.fits);
}

static void expect_modes_agree(const Scenario& sc) {
  Result rep = simulate(sc);
  SimOptions full;
  full.full_cluster = true;
  Result all = simulate(sc, full);
  EXPECT_EQ((int)rep.ranks.size(), sc.plan.pp);
  EXPECT_EQ((int)all.ranks.size(), sc.plan.gpus());
  EXPECT_NEAR(rep.step_time_s / all.step_time_s, 1.0, 1e-9);
  EXPECT_NEAR(rep.breakdown.bubble, all.breakdown.bubble, 1e-9 * rep.step_time_s);
  EXPECT_NEAR(rep.breakdown.dp_comm_exposed, all.breakdown.dp_comm_exposed, 1e-9 * rep.step_time_s);
  EXPECT_NEAR(rep.peak_bytes_per_gpu / all.peak_bytes_per_gpu, 1.0, 1e-12);
  EXPECT_NEAR(rep.inter_bytes_per_gpu, all.inter_bytes_per_gpu, 1e-6 * (1 + rep.inter_bytes_per_gpu));
  EXPECT_NEAR(rep.intra_bytes_per_gpu, all.intra_bytes_per_gpu, 1e-6 * (1 + rep.intra_bytes_per_gpu));
}

TEST(Simulate, SymmetricModeAgreesWithFullCluster) {
  // Megatron layout on DGX nodes: DP across nodes, pipeline across nodes, interleaving, ZeRO-1.
  expect_modes_agree(make_scenario("gpt3-6.7b", "selene", 64, plan_json(4, 8, 4, 2, "interleaved", "selective", true, 1)));
  // TP = 2: DP groups have 4 members per node -> hierarchical collectives; PP and DP share NICs.
  expect_modes_agree(make_scenario("gpt3-1.3b", "selene", 64, plan_json(8, 2, 2, 1, "1f1b", "full", false, 0)));
  // One NIC shared by 4 GPUs (Frontera): DP flows of all TP translates contend on it.
  expect_modes_agree(make_scenario("gpt2-355m", "frontera-rtx", 32, plan_json(4, 4, 2, 1, "gpipe", "none", false, 1)));
}

TEST(Simulate, SharedNicSlowsDataParallelReduction) {
  // Same plan on a cluster with 8 NICs per node vs 1 NIC per node: the 8 TP ranks' DP flows share the NIC.
  json c8 = ideal_cluster(8, 8);
  c8["inter_node"]["nic_bandwidth_bits_per_s"] = 8 * 25e9;
  json c1 = c8;
  c1["inter_node"]["nics_per_node"] = 1;
  c8["gpu"]["matrix_flops_per_s"]["fp16"] = 1e18;  // make compute negligible next to the all-reduce
  c1["gpu"]["matrix_flops_per_s"]["fp16"] = 1e18;
  auto run = [](json cluster) {
    return simulate(make_scenario(gpt_model(4, 4096, 32, 1024, 1024), cluster, 8, plan_json(8, 8, 1, 1, "1f1b")));
  };
  Result r8 = run(c8), r1 = run(c1);
  EXPECT_NEAR(r1.breakdown.dp_comm_exposed / r8.breakdown.dp_comm_exposed, 8.0, 0.5);
}

TEST(Simulate, DeterministicJson) {
  Scenario sc = load_scenario(std::string(TP_SOURCE_DIR) + "/scenarios/default.json");
  std::string a = result_to_json(simulate(sc)).dump();
  std::string b = result_to_json(simulate(sc)).dump();
  EXPECT_EQ(a, b);
}

TEST(Simulate, DataParallelNetworkVolume) {
  // dp = 4 over 4 nodes, one GPU each: ring all-reduce of fp32 grads sends 2 (d-1)/d * 4 P bytes per GPU.
  Scenario sc = make_scenario(gpt_model(4, 1024, 16, 1024, 512), ideal_cluster(4, 1), 16, plan_json(4, 1, 1, 1, "1f1b"));
  Result r = simulate(sc);
  double P = r.prog.statics[0].params;
  EXPECT_NEAR(r.inter_bytes_per_gpu / (2.0 * 3 / 4 * 4 * P), 1.0, 1e-9);
  EXPECT_DOUBLE_EQ(r.intra_bytes_per_gpu, 0);
}

TEST(Simulate, MemoryWallIsReported) {
  // GPT-3 175B on a single 80 GB GPU does not fit; 1.3B does.
  Result big = simulate(make_scenario("gpt3-175b", "selene", 8, plan_json(1, 1, 1, 1, "1f1b", "full")));
  EXPECT_FALSE(big.fits);
  EXPECT_GT(big.peak_bytes_per_gpu, big.capacity_bytes);
  Result small = simulate(make_scenario("gpt3-1.3b", "selene", 8, plan_json(1, 1, 1, 1, "1f1b", "full")));
  EXPECT_TRUE(small.fits);
}

TEST(Simulate, FirstStageHoldsPInFlightMicroBatches) {
  // 1F1B: stage 0 keeps p micro-batches of its L/p layers, i.e. L layers' worth of stored activations.
  Scenario sc = make_scenario(gpt_model(32, 2048, 16, 1024, 1024), ideal_cluster(), 16, plan_json(1, 1, 8, 1, "1f1b"));
  Result r = simulate(sc);
  double per_layer = r.prog.cm.layer_stored_bytes;
  double expected = 32 * per_layer + 8 * r.prog.cm.embed_stored_bytes;
  EXPECT_NEAR(r.ranks[0].stored_peak_bytes / expected, 1.0, 1e-9);
  // Last stage: one micro-batch in flight.
  EXPECT_NEAR(r.ranks[7].stored_peak_bytes / (4 * per_layer + r.prog.cm.head_stored_bytes), 1.0, 1e-9);
}

TEST(Simulate, RunEstimateFollowsScalingLaws) {
  // Seeds §5.1 worked example: N = 1.75e11 -> L(N) ~ 1.60 nats, B_crit ~ 2.1e7 tokens.
  RunEstimate e = estimate_run(1.75e11, 3.2e6, 0, 10.0, 1024, 2.0, 700);
  EXPECT_NEAR(e.loss_nats, 1.60, 0.01);
  EXPECT_NEAR(e.critical_batch_tokens / 2.1e7, 1.0, 0.05);
  EXPECT_NEAR(e.steps / (e.steps_min * (1 + e.critical_batch_tokens / 3.2e6)), 1.0, 1e-4);
  EXPECT_NEAR(e.gpu_hours, e.steps * 10.0 / 3600 * 1024, 1e-6 * e.gpu_hours);
  EXPECT_NEAR(e.cost_usd, e.gpu_hours * 2.0, 1e-6 * e.cost_usd);
  // With a token budget: steps = tokens / batch.
  RunEstimate t = estimate_run(1.75e11, 3.2e6, 3.2e11, 10.0, 1024, 2.0, 700);
  EXPECT_DOUBLE_EQ(t.steps, 1e5);
  EXPECT_TRUE(t.tokens_from_scenario);
  // With a target loss L* > L(N): S_min = S_c / (L* - L(N))^(1/a_S), B_crit at L*, S = S_min (1 + B_crit / B).
  ScalingLaw law;
  RunEstimate g = estimate_run(1.75e11, 3.2e6, 0, 10.0, 1024, 2.0, 700, law, 2.0);
  EXPECT_TRUE(g.from_target_loss);
  EXPECT_NEAR(g.steps_min, law.s_c / std::pow(2.0 - g.loss_nats, 1 / law.alpha_s), 1e-9 * g.steps_min);
  EXPECT_NEAR(g.critical_batch_tokens, law.b_star_tokens / std::pow(2.0, 1 / law.alpha_b), 1e-9 * g.critical_batch_tokens);
  EXPECT_DOUBLE_EQ(g.steps, std::ceil(g.steps_min * (1 + g.critical_batch_tokens / 3.2e6)));
  EXPECT_LT(g.steps, e.steps);  // a loss above the compute-efficient stopping point takes fewer steps
}

TEST(Simulate, TraceHasLanesOpsAndMemory) {
  Scenario sc = make_scenario("gpt2-124m", "selene", 16, plan_json(2, 2, 2, 1, "1f1b", "selective", true, 1));
  SimOptions opt;
  Result r = simulate(sc, opt);
  json tr = trace_to_json(r);
  std::set<std::string> names, threads;
  int counters = 0;
  for (const json& e : tr["traceEvents"]) {
    if (e["ph"] == "X") names.insert(e["name"].get<std::string>());
    if (e["ph"] == "M" && e["name"] == "thread_name") threads.insert(e["args"]["name"].get<std::string>());
    if (e["ph"] == "C") ++counters;
  }
  for (const char* n : {"L00.fwd.qkv.mb0", "L11.bwd.fc1.dgrad.mb1", "L05.recompute.attn.qk.mb0", "pp.send.s0-s1.fwd.mb0",
                        "pp.send.s1-s0.bwd.mb3", "optimizer", "dp.allgather.params", "L00.fwd.tp.ag1.mb0"})
    EXPECT_TRUE(names.count(n)) << n;
  for (const char* t : {"step", "compute", "tp", "pp.fwd", "pp.bwd", "dp"}) EXPECT_TRUE(threads.count(t)) << t;
  EXPECT_GT(counters, 10);
}

TEST(Simulate, PipelineAndDataParallelFlowsShareTheNic) {
  // One GPU per node: a stage's pipeline sends and its DP ring both leave through the node's NIC, so their
  // engine flows name a common link and share its bandwidth.
  Scenario sc = make_scenario(gpt_model(4, 1024, 16, 1024, 512), ideal_cluster(8, 1), 8, plan_json(2, 1, 4, 1, "1f1b"));
  Program pg = build_program(sc, false);
  std::set<int> p2p_links, dp_links;
  for (size_t t = 0; t < pg.info.size(); ++t) {
    const TaskInfo& ti = pg.info[t];
    if (pg.in.tasks[t].rank != 1 || pg.in.tasks[t].coll < 0) continue;
    const CollShape& shape = pg.in.shapes[pg.in.colls[pg.in.tasks[t].coll].shape];
    for (auto& phase : shape)
      for (auto& f : phase)
        for (int l : f.links) (ti.kind == TaskKind::dp_reduce ? dp_links : p2p_links).insert(l);
  }
  std::vector<int> common;
  std::set_intersection(p2p_links.begin(), p2p_links.end(), dp_links.begin(), dp_links.end(), std::back_inserter(common));
  EXPECT_FALSE(common.empty());
}

TEST(Simulate, CliOutputIsByteIdenticalAcrossRuns) {
  std::string a = ::testing::TempDir() + "/tp_det_a.json", b = ::testing::TempDir() + "/tp_det_b.json";
  std::string cmd = std::string(TP_BINARY) + " simulate " + TP_SOURCE_DIR + "/scenarios/default.json --quiet --json ";
  ASSERT_EQ(std::system((cmd + a).c_str()), 0);
  ASSERT_EQ(std::system((cmd + b).c_str()), 0);
  std::ifstream fa(a), fb(b);
  std::string sa((std::istreambuf_iterator<char>(fa)), {}), sb((std::istreambuf_iterator<char>(fb)), {});
  EXPECT_GT(sa.size(), 1000u);
  EXPECT_EQ(sa, sb);
}

TEST(Simulate, TraceDetailLevels) {
  Scenario sc = make_scenario("gpt2-124m", "selene", 8, plan_json(1, 1, 2, 1, "1f1b"));
  Result r = simulate(sc);
  auto names = [&](TraceDetail d) {
    std::set<std::string> n;
    json tr = trace_to_json(r, d);  // keep the document alive while iterating its events
    for (const json& e : tr["traceEvents"])
      if (e["ph"] == "X") n.insert(e["name"].get<std::string>());
    return n;
  };
  auto layer = names(TraceDetail::layer), chunk = names(TraceDetail::chunk);
  EXPECT_TRUE(layer.count("L00.fwd.mb0"));
  EXPECT_TRUE(layer.count("L11.bwd.mb3"));
  EXPECT_FALSE(layer.count("L00.fwd.qkv.mb0"));
  EXPECT_TRUE(chunk.count("C00.fwd.mb0"));
  EXPECT_TRUE(chunk.count("C01.bwd.mb3"));
  EXPECT_FALSE(chunk.count("L00.fwd.mb0"));
}
