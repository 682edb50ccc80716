// The planner's analytic pass (planner/analytic.hpp) against the event simulation: on every bundled example
// scenario without a Pseudo-to-Real delink (scenarios/default.json, scenarios/examples/*.json), estimate_plan's
// step time is within 5% and its peak memory per GPU within 3% of simulate's. Prints the table.
// One exception, stated: PatrickStar's chunked offload, whose per-moment Belady moves the closed form does not
// replay (it counts the parameter chunks that do not fit next to the activations and the hybrid-Adam split):
// step time within 10% there; the event simulation confirms every plan the planner reports.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <vector>

#include "planner/analytic.hpp"
#include "planner/explain.hpp"  // plan_summary, same_plan
#include "planner/search.hpp"
#include "planner/space.hpp"
#include "planner_test_util.hpp"
#include "sim/simulate.hpp"

using namespace tp;
using tp::testutil::search_json;
using tp::testutil::search_scenario;
namespace fs = std::filesystem;

namespace {

const fs::path kSource = TP_SOURCE_DIR;

std::vector<fs::path> example_scenarios() {
  std::vector<fs::path> v = {kSource / "scenarios/default.json"};
  for (auto& e : fs::directory_iterator(kSource / "scenarios/examples"))
    if (e.is_regular_file() && e.path().extension() == ".json") v.push_back(e.path());
  std::sort(v.begin() + 1, v.end());
  return v;
}

}  // namespace

TEST(PlanAnalytic, StepTimeWithin5AndMemoryWithin3PercentOfSimulation) {
  const double step_tol = 0.05, mem_tol = 0.03, chunked_step_tol = 0.10;
  int checked = 0;
  double worst_step = 0, worst_mem = 0;
  std::printf("%-34s %11s %11s %7s %11s %11s %7s\n", "scenario", "sim step", "analytic", "err", "sim GB", "analytic",
              "err");
  for (const fs::path& f : example_scenarios()) {
    Scenario sc = load_scenario(f.string());
    if (sc.delink.on()) continue;
    SCOPED_TRACE(f.filename().string());
    SimOptions so;
    so.keep_memory_timeline = false;
    Result r = simulate(sc, so);
    AnalyticModel am(sc);  // keeps a reference to sc
    Estimate e = estimate_plan(am, sc.plan);
    ASSERT_GT(e.step_s, 0) << "the analytic model rejected the plan";
    double es = e.step_s / r.step_time_s - 1, em = e.peak_bytes / r.peak_bytes_per_gpu - 1;
    std::printf("%-34s %11.4f %11.4f %+6.1f%% %11.2f %11.2f %+6.1f%%\n", f.filename().string().c_str(), r.step_time_s,
                e.step_s, es * 100, r.peak_bytes_per_gpu / 1e9, e.peak_bytes / 1e9, em * 100);
    const double tol = sc.plan.offload.kind == OffloadKind::chunked ? chunked_step_tol : step_tol;
    EXPECT_LE(std::fabs(es), tol) << "step time: analytic " << e.step_s << " s, simulated " << r.step_time_s << " s";
    EXPECT_LE(std::fabs(em), mem_tol) << "peak memory: analytic " << e.peak_bytes << " B, simulated " << r.peak_bytes_per_gpu << " B";
    // fits agrees with the simulation unless the peak is within the tolerance of the capacity.
    if (std::fabs(r.peak_bytes_per_gpu / r.capacity_bytes - 1) > mem_tol) {
      EXPECT_EQ(e.fits, r.fits);
    }
    worst_step = std::max(worst_step, std::fabs(es));
    worst_mem = std::max(worst_mem, std::fabs(em));
    ++checked;
  }
  std::printf("worst: step time %.1f%%, peak memory %.1f%% over %d scenarios\n", worst_step * 100, worst_mem * 100, checked);
  EXPECT_GE(checked, 10);
}

// The estimate of a plan the search reports agrees with the point's own analytic estimate (layout_of and
// choice_of invert plan_from), and the analytic ranking of the top plans is close to the simulated one.
TEST(PlanAnalytic, EstimatePlanMatchesTheSearchsPoints) {
  Scenario sc = search_scenario(search_json("gpt3-1.3b", "dgx-h100", {{"min_gpus", 8}, {"max_gpus", 16}, {"top_k", 5}}, 2.6e10));
  PlanOptions opt;
  opt.threads = 2;
  PlanOutcome o = plan_search(sc, opt);
  ASSERT_FALSE(o.top.empty()) << o.note;
  AnalyticModel am(sc);
  for (const Candidate& c : o.top) {
    SCOPED_TRACE(plan_summary(c.plan, c.global_batch));
    Estimate e = estimate_plan(am, c.plan);
    EXPECT_NEAR(e.step_s, c.point.est.step_s, 1e-9 * c.point.est.step_s);
    EXPECT_NEAR(e.peak_bytes, c.point.est.peak_bytes, 1e-6 * c.point.est.peak_bytes);
    EXPECT_TRUE(e.fits);
    EXPECT_LE(std::fabs(e.step_s / c.sim->step_time_s - 1), 0.05);
    EXPECT_LE(std::fabs(e.peak_bytes / c.sim->peak_bytes_per_gpu - 1), 0.03);
  }
}

// Uneven pipeline stages (plan.stage_layers): the analytic estimate takes the busiest stage for the step and the
// fullest stage for memory; on the golden example (Llama 3 405B, 7 / 8 x 14 / 7 layers) and on Llama 3 70B over
// 8 stages with the planner's own Megatron-style split it is within 5% step time and 3% peak memory of simulate.
TEST(PlanAnalytic, UnevenStagesWithin5PercentStepAnd3PercentMemory) {
  Scenario golden = load_scenario((kSource / "scenarios/examples/llama3-405b-uneven.json").string());
  ASSERT_FALSE(golden.plan.stage_layers.empty());
  Scenario l70 = scenario_from_json(
      {{"name", "l70-uneven"}, {"model", "llama3-70b"}, {"cluster", "dgx-h100"},
       {"training", {{"global_batch", 256}, {"seq_len", 4096}, {"tokens", 1e12}, {"precision", "bf16"}}},
       {"plan", {{"dp", 4}, {"tp", 8}, {"pp", 8}, {"first_stage_layers", 7}, {"last_stage_layers", 7}, {"microbatch", 1},
                 {"schedule", "1f1b"}, {"sequence_parallel", true}, {"recompute", "selective"}, {"zero", 1}}}},
      ".", "l70-uneven");
  ASSERT_EQ(l70.plan.stage_layers, std::vector<int>({7, 11, 11, 11, 11, 11, 11, 7}));
  for (const Scenario* sc : {&golden, &l70}) {
    SCOPED_TRACE(sc->name);
    SimOptions so;
    so.keep_memory_timeline = false;
    Result r = simulate(*sc, so);
    AnalyticModel am(*sc);
    Estimate e = estimate_plan(am, sc->plan);
    double es = e.step_s / r.step_time_s - 1, em = e.peak_bytes / r.peak_bytes_per_gpu - 1;
    std::printf("%-20s step sim %.4f analytic %.4f (%+.2f%%), peak sim %.2f GB analytic %.2f GB (%+.2f%%)\n",
                sc->name.c_str(), r.step_time_s, e.step_s, es * 100, r.peak_bytes_per_gpu / 1e9, e.peak_bytes / 1e9, em * 100);
    EXPECT_LE(std::fabs(es), 0.05);
    EXPECT_LE(std::fabs(em), 0.03);
    // The same plan with the layers spread evenly where pp divides them: the busiest stage (the middle ones with
    // more layers, or the last with the LM head) sets the step. The estimate of the even plan is within 5% of its
    // simulation too, and where the two plans differ by more than 1% in simulation, the estimate orders them
    // the same way.
    if (sc->model.layers % sc->plan.pp == 0) {
      Scenario even = *sc;
      even.plan.stage_layers.clear();
      double sim_even = simulate(even, so).step_time_s, est_even = estimate_plan(am, even.plan).step_s;
      EXPECT_LE(std::fabs(est_even / sim_even - 1), 0.05);
      if (std::fabs(sim_even / r.step_time_s - 1) > 0.01) {
        EXPECT_EQ(est_even < e.step_s, sim_even < r.step_time_s) << "sim even " << sim_even << " estimate even " << est_even;
      }
    }
  }
}

// The planner's Megatron-style candidates: middle stages ceil(L / pp) or one more, first and last share the rest.
TEST(PlanSpace, UnevenStageSplitsFollowMegatronsFirstLastRule) {
  StageSplit s[2];
  ASSERT_EQ(uneven_stage_splits(126, 16, s), 1);  // Llama 3 405B: 7 + 14 x 8 + 7
  EXPECT_EQ(s[0].first, 7); EXPECT_EQ(s[0].mid, 8); EXPECT_EQ(s[0].last, 7);
  ASSERT_EQ(uneven_stage_splits(70, 12, s), 1);  // 5 + 10 x 6 + 5 (k = 7 leaves nothing for the ends)
  EXPECT_EQ(s[0].first, 5); EXPECT_EQ(s[0].mid, 6); EXPECT_EQ(s[0].last, 5);
  ASSERT_EQ(uneven_stage_splits(80, 8, s), 1);  // k = 10 is the even split; k = 11: 7 + 6 x 11 + 7
  EXPECT_EQ(s[0].first, 7); EXPECT_EQ(s[0].mid, 11); EXPECT_EQ(s[0].last, 7);
  ASSERT_EQ(uneven_stage_splits(25, 2, s), 1);  // no middle stage: 12 / 13
  EXPECT_EQ(s[0].first, 12); EXPECT_EQ(s[0].last, 13);
  EXPECT_EQ(uneven_stage_splits(24, 2, s), 0);
  for (long long L : {24LL, 70LL, 80LL, 126LL})
    for (int pp = 2; pp <= 16; ++pp) {
      int n = uneven_stage_splits(L, pp, s);
      for (int i = 0; i < n; ++i) {
        EXPECT_EQ(s[i].first + (long long)(pp - 2) * s[i].mid + s[i].last, L) << L << " over " << pp;
        EXPECT_GE(s[i].first, 1);
        EXPECT_LE(s[i].first, s[i].last);
        EXPECT_LE(s[i].last - s[i].first, 1);
      }
    }
}

// pp need not divide the layers: the search finds Llama 3 405B's 16-stage layouts (126 layers) with the uneven
// split, and the plans it reports validate and simulate.
TEST(PlanSpace, SearchOffersUnevenStagesWherePpDoesNotDivideTheLayers) {
  Scenario sc = search_scenario(search_json("llama3-405b", "dgx-h100",
                                            {{"min_gpus", 1024}, {"max_gpus", 1024}, {"top_k", 2},
                                             {"fix", {{"pp", {16}}, {"tp", {8}}, {"schedule", {"1f1b"}}}}},
                                            1e12, 1024));
  PlanOptions opt;
  opt.threads = 2;
  PlanOutcome o = plan_search(sc, opt);
  ASSERT_FALSE(o.top.empty()) << o.note;
  for (const Candidate& c : o.top) {
    SCOPED_TRACE(plan_summary(c.plan, c.global_batch));
    EXPECT_EQ(c.plan.pp, 16);
    EXPECT_EQ(c.plan.stage_layers, std::vector<int>({7, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 7}));
    ASSERT_TRUE(c.sim);
  }
}

// search.fix.stage_split: "even" forbids the uneven candidates (pp must then divide the layers: 126 over 16 has no
// plan), "uneven" forbids the even split (80 layers over 8 stages: only 7 + 6 x 11 + 7).
TEST(PlanSpace, FixStageSplitChoosesEvenOrUneven) {
  PlanOptions opt;
  opt.threads = 2;
  Scenario even = search_scenario(search_json("llama3-405b", "dgx-h100",
                                              {{"min_gpus", 1024}, {"max_gpus", 1024}, {"top_k", 2},
                                               {"fix", {{"pp", {16}}, {"tp", {8}}, {"stage_split", {"even"}}}}},
                                              1e12, 1024));
  EXPECT_TRUE(plan_search(even, opt).top.empty());
  Scenario uneven = search_scenario(search_json("llama3-70b", "dgx-h100",
                                                {{"min_gpus", 512}, {"max_gpus", 512}, {"top_k", 3},
                                                 {"fix", {{"pp", {8}}, {"tp", {8}}, {"stage_split", {"uneven"}}}}},
                                                1e12, 512));
  PlanOutcome o = plan_search(uneven, opt);
  ASSERT_FALSE(o.top.empty()) << o.note;
  for (const Candidate& c : o.top) {
    SCOPED_TRACE(plan_summary(c.plan, c.global_batch));
    ASSERT_EQ(c.plan.stage_layers.size(), 8u);
    EXPECT_EQ(c.plan.stage_layers.front(), 7);
    EXPECT_EQ(c.plan.stage_layers[3], 11);
  }
  Scenario even70 = search_scenario(search_json("llama3-70b", "dgx-h100",
                                              {{"min_gpus", 512}, {"max_gpus", 512}, {"top_k", 3},
                                               {"fix", {{"pp", {8}}, {"tp", {8}}, {"stage_split", {"even"}}}}},
                                              1e12, 512));
  for (const Candidate& c : plan_search(even70, opt).top) EXPECT_TRUE(c.plan.stage_layers.empty());
}
