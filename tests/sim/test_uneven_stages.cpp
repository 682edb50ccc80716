// Uneven pipeline stages in the simulator: each stage's compute pieces cover exactly its layers (the embedding
// on the first stage, the head on the last), symmetric mode agrees with --full-cluster under every schedule
// that allows uneven stages, the per-stage breakdown shows the unequal work (compute proportional to the
// stage's layers) and the busiest stage sets the step.
#include <gtest/gtest.h>

#include <set>

#include "schedule/pipeline.hpp"
#include "sim/program.hpp"
#include "sim/simulate.hpp"
#include "sim_test_util.hpp"

using namespace tp;
using namespace tp::testutil;

namespace {

json cluster() {
  json c = finite_links_cluster();
  c["gpu"]["hbm_bandwidth_bytes_per_s"] = ideal_cluster()["gpu"]["hbm_bandwidth_bytes_per_s"];  // memory-bound ops free
  return c;
}

json with(json plan, const json& extra) {
  for (auto it = extra.begin(); it != extra.end(); ++it) plan[it.key()] = it.value();
  return plan;
}

}  // namespace

// Megatron-LM's account_for_embedding / loss_in_pipeline_split: 30 layers + 2 = 32 slots over pp 4 x v 2 = 8
// chunks of 4; the first chunk (stage 0) and the last (stage 3, its second chunk) give one slot away.
TEST(UnevenStages, AccountedSplitGivesTheFirstAndLastChunkOneLayerLess) {
  json plan = with(plan_json(1, 1, 4, 1, "interleaved"), {{"virtual_stages", 2},
                                                          {"account_for_embedding_in_pipeline_split", true},
                                                          {"account_for_loss_in_pipeline_split", true}});
  Scenario sc = make_scenario(gpt_model(30, 512, 8, 32000, 512), cluster(), 16, plan);
  EXPECT_EQ(sc.plan.chunk_layers, (std::vector<int>{3, 4, 4, 4, 4, 4, 4, 3}));
  EXPECT_EQ(sc.plan.stage_layers, (std::vector<int>{7, 8, 8, 7}));
  StageLayout lay = stage_layout(sc.plan, 30);
  EXPECT_EQ(lay.chunk_layers(0, 0), 3);  // stage 0, its first chunk: the embedding's chunk
  EXPECT_EQ(lay.chunk_layers(0, 1), 4);
  EXPECT_EQ(lay.chunk_layers(3, 1), 3);  // stage 3, its second chunk: the loss's chunk
  EXPECT_EQ(lay.first_layer(3, 1), 27);
  EXPECT_TRUE(lay.has_embedding(0, 0));
  EXPECT_TRUE(lay.has_head(3, 1));
  Result r = simulate(sc);  // and the simulation runs it
  EXPECT_GT(r.step_time_s, 0);
  // only the embedding: 31 slots do not split into 8 chunks
  json bad = with(plan_json(1, 1, 4, 1, "interleaved"), {{"virtual_stages", 2}, {"account_for_embedding_in_pipeline_split", true}});
  EXPECT_THROW(make_scenario(gpt_model(30, 512, 8, 32000, 512), cluster(), 16, bad), InputError);
}

TEST(UnevenStages, PiecesCoverEachStagesLayers) {
  const std::vector<int> split = {3, 5, 5, 3};
  for (int zero : {0, 3}) {  // whole chunks, and per-layer pieces (ZeRO-3)
    SCOPED_TRACE("zero " + std::to_string(zero));
    Scenario sc = make_scenario(gpt_model(16, 512, 8, 32000, 512), cluster(), 16,
                                with(plan_json(2, 1, 4, 1, "1f1b", "none", false, zero), {{"stage_layers", split}}));
    ASSERT_EQ(sc.plan.stage_layers, split);
    Program prog = build_program(sc, false);
    ASSERT_EQ((int)prog.sim_stage.size(), 4);
    int lo = 0;
    for (int r = 0; r < 4; ++r) {
      const int s = prog.sim_stage[r];
      std::multiset<int> fwd_layers;  // micro-batch 0's forward
      bool embed = false, head = false;
      for (int t : prog.in.lane_order[r * kLanes + kLaneCompute]) {
        const TaskInfo& ti = prog.info[t];
        if (ti.kind != TaskKind::fwd || ti.mb != 0) continue;
        for (int l = ti.layer_lo; l < ti.layer_hi; ++l) fwd_layers.insert(l);
        embed |= ti.embed;
        head |= ti.head;
      }
      std::multiset<int> want;
      for (int l = lo; l < lo + split[s]; ++l) want.insert(l);
      EXPECT_EQ(fwd_layers, want) << "stage " << s;
      EXPECT_EQ(embed, s == 0) << "stage " << s;
      EXPECT_EQ(head, s == 3) << "stage " << s;
      lo += split[s];
    }
  }
}

TEST(UnevenStages, SymmetricModeAgreesWithFullCluster) {
  json model = gpt_model(16, 1024, 16, 32000, 1024);
  struct Case { const char* what; json plan; long long batch; };
  std::vector<Case> cases = {
      {"1f1b", with(plan_json(2, 2, 4, 1, "1f1b"), {{"stage_layers", {3, 5, 5, 3}}}), 16},
      {"gpipe first/last", with(plan_json(2, 2, 3, 1, "gpipe"), {{"first_stage_layers", 4}, {"last_stage_layers", 4}}), 16},
      {"interleaved", with(plan_json(2, 2, 4, 2, "interleaved"), {{"stage_layers", {2, 6, 6, 2}}}), 16},
      {"zero3 1f1b", with(plan_json(4, 2, 2, 1, "1f1b", "selective", true, 3), {{"stage_layers", {7, 9}}}), 16},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    Scenario sc = make_scenario(model, cluster(), c.batch, c.plan);
    ASSERT_FALSE(sc.plan.stage_layers.empty());
    SimOptions sym, full;
    full.full_cluster = true;
    Result a = simulate(sc, sym), b = simulate(sc, full);
    EXPECT_FALSE(a.fallback_to_full);
    EXPECT_NEAR(a.step_time_s, b.step_time_s, 1e-9 * b.step_time_s);
    EXPECT_NEAR(a.peak_bytes_per_gpu, b.peak_bytes_per_gpu, 1e-9 * b.peak_bytes_per_gpu);
    EXPECT_NEAR(a.inter_bytes_per_gpu + a.intra_bytes_per_gpu, b.inter_bytes_per_gpu + b.intra_bytes_per_gpu,
                1e-6 * (b.inter_bytes_per_gpu + b.intra_bytes_per_gpu) + 1);
  }
}

TEST(UnevenStages, BusiestStageSetsTheStep) {
  json model = gpt_model(16, 1024, 16, 32000, 1024);
  Scenario even = make_scenario(model, cluster(), 32, plan_json(1, 1, 4, 1, "1f1b"));
  Scenario uneven = make_scenario(model, cluster(), 32, with(plan_json(1, 1, 4, 1, "1f1b"), {{"stage_layers", {3, 5, 5, 3}}}));
  Result e = simulate(even), u = simulate(uneven);
  ASSERT_EQ(u.ranks.size(), 4u);
  // Middle stages hold no ends: their compute is proportional to their layers (5 against the even plan's 4).
  EXPECT_NEAR(u.ranks[1].breakdown.compute, u.ranks[2].breakdown.compute, 1e-9 * u.ranks[1].breakdown.compute);
  EXPECT_NEAR(u.ranks[1].breakdown.compute / e.ranks[1].breakdown.compute, 5.0 / 4.0, 1e-9);
  EXPECT_LT(u.ranks[0].breakdown.compute, u.ranks[1].breakdown.compute);
  // The step follows the busiest stage: with this head (about 2.6 layers of work) the even split's busiest
  // stage is the last one, so taking a layer off the ends speeds the step up, and two make the middle the busiest.
  auto busiest = [](const Result& r) {
    double most = 0;
    for (const RankResult& rr : r.ranks) most = std::max(most, rr.breakdown.compute);
    return most;
  };
  Scenario more = make_scenario(model, cluster(), 32, with(plan_json(1, 1, 4, 1, "1f1b"), {{"stage_layers", {2, 6, 6, 2}}}));
  Result w = simulate(more);
  EXPECT_GT(e.ranks[3].breakdown.compute, e.ranks[1].breakdown.compute);  // even: the head makes the last stage busiest
  std::vector<const Result*> rs = {&e, &u, &w};
  for (const Result* a : rs) {
    EXPECT_GE(a->step_time_s, busiest(*a));
    for (const Result* b : rs) {
      if (busiest(*a) < busiest(*b)) { EXPECT_LT(a->step_time_s, b->step_time_s); }
    }
  }
  // The last stage holds the fewest layers and the head: less activation memory than the second stage.
  EXPECT_LT(u.ranks[3].stored_peak_bytes, u.ranks[1].stored_peak_bytes);
}
