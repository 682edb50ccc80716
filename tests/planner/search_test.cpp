// The planner's search (planner/search.hpp): the invariants of its results (best fits, top sorted by the
// simulated objective, every reported plan valid, by_gpus ascending, the Pareto front), determinism across
// thread counts and runs, search.fix, the objectives, ground truth on a space small enough to simulate every
// point, memory pruning when nothing fits, and search.compare.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <set>

#include "planner/explain.hpp"  // plan_summary, same_plan
#include "planner/search.hpp"
#include "planner_test_util.hpp"
#include "sim/simulate.hpp"

using namespace tp;
using tp::testutil::search_json;
using tp::testutil::search_scenario;

namespace {

// The search objective of a simulated plan, as the planner defines it (lower is better).
double objective_of(Objective o, const Result& r, int gpus) {
  switch (o) {
    case Objective::time_to_train: return r.run.time_s;
    case Objective::cost: return r.run.cost_usd;
    case Objective::throughput_per_gpu: return -r.tokens_per_s / gpus;
  }
  return 0;
}

// a dominates b in (GPUs, time to train, cost): no worse in all three, better in one.
bool dominates(const GpuPoint& a, const GpuPoint& b) {
  const Candidate &x = a.best, &y = b.best;
  bool le = a.gpus <= b.gpus && x.time_to_train_s <= y.time_to_train_s && x.cost_usd <= y.cost_usd;
  bool lt = a.gpus < b.gpus || x.time_to_train_s < y.time_to_train_s || x.cost_usd < y.cost_usd;
  return le && lt;
}

// validate_plan on a copy of a reported plan, at its global batch: no issue, same derived micro-batch count.
void expect_valid(const Scenario& sc, const Candidate& c) {
  Plan p = c.plan;
  Training t = sc.training;
  t.global_batch = c.global_batch;
  Issues is;
  validate_plan(sc.model, sc.cluster, t, p, is);
  EXPECT_TRUE(is.empty()) << plan_summary(c.plan, c.global_batch) << ": " << (is.empty() ? "" : is.messages[0]);
  EXPECT_EQ(p.num_microbatches, c.plan.num_microbatches);
  EXPECT_EQ(c.global_batch, (long long)c.plan.dp * c.plan.microbatch * c.plan.num_microbatches);
}

Result simulate_candidate(const Scenario& sc, const Candidate& c) {
  Scenario s = sc;
  s.search.reset();
  s.plan = c.plan;
  s.training.global_batch = c.global_batch;
  s.training.precision = c.point.lay.prec;
  SimOptions o;
  o.keep_memory_timeline = false;
  return simulate(s, o);
}

int gpu_cap(const Scenario& sc) { return sc.search->max_gpus > 0 ? sc.search->max_gpus : sc.cluster.total_gpus(); }

void expect_invariants(const Scenario& sc, const PlanOutcome& o) {
  const Search& se = *sc.search;
  ASSERT_FALSE(o.top.empty()) << o.note;
  EXPECT_LE((int)o.top.size(), se.top_k);
  EXPECT_TRUE(o.note.empty()) << o.note;
  // top: simulated, fitting, valid, within the GPU bounds, sorted by the simulated objective.
  for (size_t i = 0; i < o.top.size(); ++i) {
    const Candidate& c = o.top[i];
    SCOPED_TRACE("top[" + std::to_string(i) + "] " + plan_summary(c.plan, c.global_batch));
    ASSERT_TRUE(c.sim);
    EXPECT_TRUE(c.sim->fits);
    EXPECT_TRUE(c.sim->host_fits);
    EXPECT_LE(c.sim->peak_bytes_per_gpu, c.sim->capacity_bytes);
    EXPECT_GE(c.plan.gpus(), se.min_gpus);
    EXPECT_LE(c.plan.gpus(), gpu_cap(sc));
    expect_valid(sc, c);
    EXPECT_DOUBLE_EQ(c.objective, objective_of(se.objective, *c.sim, c.plan.gpus()));
    EXPECT_DOUBLE_EQ(c.time_to_train_s, c.sim->run.time_s);
    EXPECT_DOUBLE_EQ(c.cost_usd, c.sim->run.cost_usd);
    if (i > 0) {
      EXPECT_LE(o.top[i - 1].objective, c.objective);
    }
    for (size_t j = 0; j < i; ++j) EXPECT_FALSE(same_plan(o.top[j], c)) << "top holds a plan twice";
  }
  // The best's numbers are the simulation's: simulate its plan again.
  Result again = simulate_candidate(sc, o.top[0]);
  EXPECT_DOUBLE_EQ(again.step_time_s, o.top[0].sim->step_time_s);
  EXPECT_DOUBLE_EQ(again.peak_bytes_per_gpu, o.top[0].sim->peak_bytes_per_gpu);
  EXPECT_DOUBLE_EQ(again.run.time_s, o.top[0].sim->run.time_s);
  // by_gpus: ascending, one per GPU count, each fitting; none better than the best.
  ASSERT_FALSE(o.by_gpus.empty());
  for (size_t i = 0; i < o.by_gpus.size(); ++i) {
    const GpuPoint& g = o.by_gpus[i];
    SCOPED_TRACE("by_gpus " + std::to_string(g.gpus));
    if (i > 0) {
      EXPECT_LT(o.by_gpus[i - 1].gpus, g.gpus);
    }
    EXPECT_EQ(g.best.plan.gpus(), g.gpus);
    EXPECT_GE(g.gpus, se.min_gpus);
    EXPECT_LE(g.gpus, gpu_cap(sc));
    expect_valid(sc, g.best);
    if (g.simulated) {
      ASSERT_TRUE(g.best.sim);
      EXPECT_TRUE(g.best.sim->fits && g.best.sim->host_fits);
      EXPECT_LE(o.top[0].objective, g.best.objective);
    }
  }
  EXPECT_TRUE(std::any_of(o.by_gpus.begin(), o.by_gpus.end(), [&](const GpuPoint& g) { return g.gpus == o.top[0].plan.gpus(); }));
  // Pareto: a subset of by_gpus, non-dominated; every other by_gpus point dominated by a Pareto point.
  ASSERT_FALSE(o.pareto.empty());
  std::set<int> front;
  for (const GpuPoint& p : o.pareto) {
    front.insert(p.gpus);
    auto it = std::find_if(o.by_gpus.begin(), o.by_gpus.end(), [&](const GpuPoint& g) { return g.gpus == p.gpus; });
    ASSERT_NE(it, o.by_gpus.end()) << "Pareto point " << p.gpus << " not in by_gpus";
    EXPECT_TRUE(same_plan(it->best, p.best));
    for (const GpuPoint& g : o.by_gpus) EXPECT_FALSE(dominates(g, p)) << g.gpus << " GPUs dominates Pareto point " << p.gpus;
  }
  for (size_t i = 1; i < o.pareto.size(); ++i) EXPECT_LT(o.pareto[i - 1].gpus, o.pareto[i].gpus);
  for (const GpuPoint& g : o.by_gpus) {
    if (front.count(g.gpus)) continue;
    bool covered = std::any_of(o.pareto.begin(), o.pareto.end(), [&](const GpuPoint& p) { return dominates(p, g); });
    EXPECT_TRUE(covered) << g.gpus << " GPUs is off the front but no Pareto point dominates it";
  }
  // why: alternatives on the winner's GPU count, each with a reason.
  for (const Explanation& e : o.why) {
    EXPECT_FALSE(e.dimension.empty());
    EXPECT_FALSE(e.reason.empty()) << e.dimension;
    EXPECT_EQ(e.alt.plan.gpus(), o.top[0].plan.gpus()) << e.dimension;
    EXPECT_FALSE(same_plan(e.alt, o.top[0])) << e.dimension << ": the winner explained against itself";
  }
  // Stats.
  EXPECT_GT(o.stats.configurations_evaluated, 0);
  EXPECT_LE(o.stats.pruned_memory, o.stats.configurations_evaluated);
  EXPECT_GE(o.stats.simulated, (long long)o.top.size());
  EXPECT_GE(o.stats.seconds, 0);
}

json small_350m_search() { return {{"max_gpus", 16}, {"top_k", 5}}; }

Scenario small_350m() { return search_scenario(search_json("gpt3-350m", "selene", small_350m_search())); }

Scenario mid_13b(json extra = json::object()) {
  json s = {{"min_gpus", 8}, {"max_gpus", 32}, {"top_k", 4}};
  s.update(extra);
  return search_scenario(search_json("gpt3-1.3b", "dgx-h100", s, 2.6e10));
}

PlanOutcome run_search(const Scenario& sc, int threads = 2) {
  PlanOptions o;
  o.threads = threads;
  return plan_search(sc, o);
}

// Every plan the outcome reports (top, by_gpus, pareto, why).
std::vector<const Candidate*> reported(const PlanOutcome& o) {
  std::vector<const Candidate*> v;
  for (auto& c : o.top) v.push_back(&c);
  for (auto& g : o.by_gpus) v.push_back(&g.best);
  for (auto& g : o.pareto) v.push_back(&g.best);
  for (auto& e : o.why) v.push_back(&e.alt);
  return v;
}

}  // namespace

// ---- 1. results ----

TEST(PlanSearch, ResultInvariantsGpt350mSelene) {
  Scenario sc = small_350m();
  PlanOutcome o = run_search(sc);
  expect_invariants(sc, o);
}

TEST(PlanSearch, ResultInvariantsGpt13bDgxH100) {
  Scenario sc = mid_13b();
  PlanOutcome o = run_search(sc);
  expect_invariants(sc, o);
  for (const GpuPoint& g : o.by_gpus) EXPECT_GE(g.gpus, 8);
}

TEST(PlanSearch, ResultInvariantsFixedGlobalBatchAndGpuCounts) {
  json s = {{"gpu_counts", {2, 4, 8}}, {"top_k", 3}};
  Scenario sc = search_scenario(search_json("gpt2-124m", "dgx-h100", s, 5e9, 64));
  PlanOutcome o = run_search(sc);
  expect_invariants(sc, o);
  std::vector<int> counts;
  for (const GpuPoint& g : o.by_gpus) counts.push_back(g.gpus);
  EXPECT_EQ(counts, (std::vector<int>{2, 4, 8}));
  for (const Candidate* c : reported(o)) EXPECT_EQ(c->global_batch, 64);
}

TEST(PlanSearch, BestPerGpuCountIsWhatASearchRestrictedToThatCountFinds) {
  // by_gpus (and the Pareto front) answer "the best plan on G GPUs": a search with gpu_counts [G] must agree,
  // plan for plan (issue 38: at 512 GPUs the default search reported 39.98 days where a restricted one found
  // 38.81). GPT-3 13B on up to 512 Selene GPUs: at 12 GPUs the per-count pass once kept a family's analytic
  // best (59,043 against 58,152 s). Counts of 2 and 3 GPUs are left out: their plans (optimizer offload, a
  // thousand micro-batches) exceed the per-count simulation budget (kConfirmTaskBudget) that a restricted
  // search does not apply to its top list.
  auto scenario = [](const json& counts) {
    json s = {{"top_k", 4}};
    if (counts.is_null()) s["max_gpus"] = 512; else s["gpu_counts"] = counts;
    return search_scenario(search_json("gpt3-13b", "selene", s, 3e11));
  };
  PlanOutcome all = run_search(scenario(nullptr));
  int compared = 0;
  for (const GpuPoint& g : all.by_gpus) {
    if (g.gpus < 4) continue;
    SCOPED_TRACE(g.gpus);
    PlanOutcome r = run_search(scenario(json::array({g.gpus})));
    ASSERT_FALSE(r.top.empty());
    EXPECT_TRUE(same_plan(r.top.front(), g.best))
        << "by_gpus: " << plan_summary(g.best.plan, g.best.global_batch)
        << "\nrestricted: " << plan_summary(r.top.front().plan, r.top.front().global_batch);
    EXPECT_NEAR(r.top.front().objective, g.best.objective, 1e-9 * g.best.objective);
    ++compared;
  }
  EXPECT_GE(compared, 10);
}

// ---- 2. determinism ----

TEST(PlanSearch, DeterministicAcrossThreadCountsAndRuns) {
  Scenario sc = mid_13b();
  auto render = [&](int threads) {
    PlanOutcome o = run_search(sc, threads);
    json j = plan_outcome_to_json(o);
    EXPECT_TRUE(j.contains("search"));
    j.erase("search");  // timings and the thread count
    return std::make_pair(j.dump(), plan_outcome_to_csv(o));
  };
  auto one = render(1), two = render(2), again = render(2);
  EXPECT_EQ(one.first, two.first) << "threads 1 and 2 differ";
  EXPECT_EQ(two.first, again.first) << "two runs differ";
  EXPECT_EQ(one.second, two.second);
  EXPECT_EQ(two.second, again.second);
}

// ---- 3. search.fix ----

TEST(PlanSearch, FixRestrictsEveryReportedPlan) {
  json s = small_350m_search();
  s["fix"] = {{"tp_mode", "1d"}, {"zero", {1, 2}}, {"schedule", "modular"}};
  Scenario sc = search_scenario(search_json("gpt3-350m", "selene", s));
  PlanOutcome o = run_search(sc);
  expect_invariants(sc, o);
  for (const Candidate* c : reported(o)) {
    SCOPED_TRACE(plan_summary(c->plan, c->global_batch));
    EXPECT_EQ(c->plan.tp_mode, TpMode::d1);
    EXPECT_TRUE(c->plan.zero == 1 || c->plan.zero == 2);
    EXPECT_EQ(c->plan.schedule, Schedule::modular);
    EXPECT_GT(c->plan.pp, 1);  // modular needs a pipeline
  }
}

TEST(PlanSearch, FixOtherKeys) {
  json s = small_350m_search();
  s["fix"] = {{"tp", 2}, {"sequence_parallel", true}, {"grad_accumulation", "layered"}, {"microbatch", {2}},
              {"recompute", {"selective", "full"}}, {"global_batch", {64, 128}}};
  Scenario sc = search_scenario(search_json("gpt3-350m", "selene", s));
  PlanOutcome o = run_search(sc);
  expect_invariants(sc, o);
  for (const Candidate* c : reported(o)) {
    SCOPED_TRACE(plan_summary(c->plan, c->global_batch));
    EXPECT_EQ(c->plan.tp, 2);
    EXPECT_TRUE(c->plan.sequence_parallel);
    EXPECT_EQ(c->plan.grad_accumulation, GradAccumulation::layered);
    EXPECT_EQ(c->plan.microbatch, 2);
    EXPECT_NE(c->plan.recompute, Recompute::none);
    EXPECT_TRUE(c->global_batch == 64 || c->global_batch == 128);
  }
}

// search.fix.precision: the search chooses the training precision per plan; on H100s fp8 GEMMs make the best
// plan fp8, and every reported plan is simulated in the precision it was estimated in.
TEST(PlanSearch, FixPrecisionSearchesFp8) {
  Scenario sc = mid_13b({{"fix", {{"precision", {"bf16", "fp8"}}}}});
  PlanOutcome o = run_search(sc);
  expect_invariants(sc, o);
  ASSERT_FALSE(o.top.empty());
  EXPECT_EQ(o.top[0].point.lay.prec, Precision::fp8);
  EXPECT_NE(plan_summary(o.top[0].plan, o.top[0].global_batch, o.top[0].point.lay.prec).find("fp8"), std::string::npos);
  ASSERT_TRUE(o.top[0].sim);
  EXPECT_EQ(o.top[0].sim->scenario.training.precision, Precision::fp8);
  Scenario only_bf16 = mid_13b({{"fix", {{"precision", "bf16"}}}});
  PlanOutcome b = run_search(only_bf16);
  ASSERT_FALSE(b.top.empty());
  for (const Candidate* c : reported(b)) EXPECT_EQ(c->point.lay.prec, Precision::bf16);
  EXPECT_LT(o.top[0].sim->step_time_s * o.top[0].plan.gpus() / o.top[0].global_batch,
            b.top[0].sim->step_time_s * b.top[0].plan.gpus() / b.top[0].global_batch);  // GPU-seconds per sequence
}

TEST(PlanSearch, FixNoPlanCanUseGivesNoPlanAndANote) {
  // gpt3-350m has 16 heads: tp 7 divides nothing. The space is empty; not a crash, not "out of memory".
  json s = small_350m_search();
  s["fix"] = {{"tp", 7}};
  Scenario sc = search_scenario(search_json("gpt3-350m", "selene", s));
  PlanOutcome o;
  ASSERT_NO_THROW(o = run_search(sc));
  EXPECT_TRUE(o.top.empty());
  EXPECT_TRUE(o.by_gpus.empty());
  EXPECT_TRUE(o.pareto.empty());
  EXPECT_TRUE(o.why.empty());
  EXPECT_EQ(o.stats.configurations_evaluated, 0);
  EXPECT_FALSE(o.note.empty());
  EXPECT_EQ(o.note.find("memory"), std::string::npos) << "nothing was evaluated, yet the note blames memory: " << o.note;
  json j = plan_outcome_to_json(o);
  EXPECT_TRUE(j["best"].is_null());
  EXPECT_TRUE(j["top"].empty());
  EXPECT_EQ(j["note"], o.note);
  std::string csv = plan_outcome_to_csv(o);
  EXPECT_EQ(std::count(csv.begin(), csv.end(), '\n'), 1);  // the header only
  // A fixed 2D grid the model's heads do not allow (q = 3 does not divide 16): empty as well.
  s["fix"] = {{"tp", 9}, {"tp_mode", "2d"}};
  PlanOutcome o2 = run_search(search_scenario(search_json("gpt3-350m", "selene", s)));
  EXPECT_TRUE(o2.top.empty());
  EXPECT_FALSE(o2.note.empty());
}

// ---- 4. objectives ----

TEST(PlanSearch, ObjectivesWinOnTheirOwnMetric) {
  auto with = [](const char* objective) {
    json s = {{"max_gpus", 16}, {"top_k", 3}, {"objective", objective}};
    return search_scenario(search_json("gpt3-350m", "dgx-h100", s));
  };
  Scenario st = with("time_to_train"), sc = with("cost"), sp = with("throughput_per_gpu");
  PlanOutcome t = run_search(st), c = run_search(sc), p = run_search(sp);
  expect_invariants(st, t);
  expect_invariants(sc, c);
  expect_invariants(sp, p);
  ASSERT_FALSE(t.top.empty() || c.top.empty() || p.top.empty());
  const Result &rt = *t.top[0].sim, &rc = *c.top[0].sim, &rp = *p.top[0].sim;
  auto per_gpu = [](const Result& r, const Candidate& k) { return r.tokens_per_s / k.plan.gpus(); };
  const double eps = 1e-9;
  EXPECT_LE(rt.run.time_s, rc.run.time_s * (1 + eps));
  EXPECT_LE(rt.run.time_s, rp.run.time_s * (1 + eps));
  EXPECT_LE(rc.run.cost_usd, rt.run.cost_usd * (1 + eps));
  EXPECT_LE(rc.run.cost_usd, rp.run.cost_usd * (1 + eps));
  EXPECT_GE(per_gpu(rp, p.top[0]), per_gpu(rt, t.top[0]) * (1 - eps));
  EXPECT_GE(per_gpu(rp, p.top[0]), per_gpu(rc, c.top[0]) * (1 - eps));
  // A model this small scales to every GPU allowed: the time winner uses all 16.
  EXPECT_EQ(t.top[0].plan.gpus(), 16);
  std::printf("objective winners: time %s (%.4g s, $%.4g), cost %s (%.4g s, $%.4g), throughput %s (%.4g tokens/s/GPU)\n",
              plan_summary(t.top[0].plan, t.top[0].global_batch).c_str(), rt.run.time_s, rt.run.cost_usd,
              plan_summary(c.top[0].plan, c.top[0].global_batch).c_str(), rc.run.time_s, rc.run.cost_usd,
              plan_summary(p.top[0].plan, p.top[0].global_batch).c_str(), per_gpu(rp, p.top[0]));
}

// ---- 5. ground truth on a small space ----

namespace {

// Every plan of the scenario's model on the given GPU counts at its global batch, with the given recompute
// levels and ZeRO stages, no offload and micro-batch 1/2 — every tp (1D and 2D, both grid placements), pp, schedule and virtual
// stage count, accumulation and sequence parallelism, whatever the planner's space is — validated and
// simulated here. The planner's best (searching the same restriction) must be the fastest that fits, within 1%.
void expect_ground_truth(const char* model, const char* cluster, const char* precision, long long batch,
                         std::vector<int> counts, json recompute, std::vector<int> zeros = {0, 1}) {
  json s = {{"gpu_counts", counts},
            {"top_k", 3},
            // 2021-era setups (their memory pressure is the unfused attention's s x s activations)
            {"fix", {{"recompute", recompute}, {"offload", "none"}, {"zero", zeros}, {"microbatch", {1, 2}},
                     {"attention", "unfused"}}}};
  // Every plan kind, research techniques and GPipe included: the "research" framework (the ground truth below
  // enumerates them all).
  json sj = search_json(model, cluster, s, 1e10, batch, precision);
  sj["training"]["framework"] = "research";
  Scenario sc = search_scenario(sj);
  PlanOutcome o = run_search(sc);
  expect_invariants(sc, o);
  ASSERT_FALSE(o.top.empty()) << o.note;

  const Transformer& M = sc.model;
  int valid = 0, fitting = 0;
  double best_t = INFINITY;
  Plan best_plan;
  for (int n : counts)
    for (TpMode mode : {TpMode::d1, TpMode::d2})
      for (int tp = 1; tp <= n; ++tp)
        for (bool blocks : {false, true})
          for (int pp = 1; pp <= n; ++pp) {
            if (n % (tp * pp) != 0 || (blocks && mode == TpMode::d1)) continue;
            const int Lp = (int)M.layers / pp;
            for (long long mb : {1, 2})
              for (Schedule sched : {Schedule::gpipe, Schedule::one_f_one_b, Schedule::interleaved, Schedule::modular})
                for (int v = 1; v <= std::max(1, Lp); ++v)
                  for (GradAccumulation acc : {GradAccumulation::standard, GradAccumulation::layered})
                    for (int zero : zeros)
                      for (Recompute rc : sc.search->fix.recompute)
                      for (bool sp : {false, true}) {
                        Plan p;
                        p.dp = n / (tp * pp); p.tp = tp; p.pp = pp; p.tp_mode = mode; p.tp_grid_node_blocks = blocks;
                        p.microbatch = mb; p.schedule = sched; p.virtual_stages = v; p.grad_accumulation = acc;
                        p.zero = zero; p.sequence_parallel = sp; p.recompute = rc;
                        p.attention = search_attention(sc.search->fix);  // the kind the planner plans with
                        Issues is;
                        validate_plan(M, sc.cluster, sc.training, p, is);
                        if (!is.empty()) continue;
                        ++valid;
                        Scenario x = sc;
                        x.search.reset();
                        x.plan = p;
                        SimOptions so;
                        so.keep_memory_timeline = false;
                        Result r;
                        try {
                          r = simulate(x, so);
                        } catch (const std::exception& e) {  // a valid plan the simulator rejects: a bug
                          ADD_FAILURE() << plan_summary(p, batch) << ": " << e.what();
                          continue;
                        }
                        if (!r.fits || !r.host_fits) continue;
                        ++fitting;
                        if (r.run.time_s < best_t) { best_t = r.run.time_s; best_plan = p; }
                      }
          }
  std::printf("ground truth %s on %s: %d valid plans, %d fit; best %s: %.6g s to train\n  planner: %s: %.6g s (%+.3f%%)\n",
              model, cluster, valid, fitting, plan_summary(best_plan, batch).c_str(), best_t,
              plan_summary(o.top[0].plan, batch).c_str(), o.top[0].sim->run.time_s, (o.top[0].sim->run.time_s / best_t - 1) * 100);
  ASSERT_GT(fitting, 0);
  EXPECT_LT(fitting, valid) << "memory never binds: the case does not test memory pruning";
  // Within 1 % in general; within 1.5 % on the Quadro cluster, whose pipelined plans the analytic estimate puts
  // 10-19 % too fast (the open "analytic within 5 %" item of issue 38), so that a tie between a pipelined and a
  // tensor-parallel plan can be confirmed on the wrong side.
  EXPECT_LE(o.top[0].sim->run.time_s, best_t * (std::string(cluster) == "frontera-rtx" ? 1.015 : 1.01));
  EXPECT_GE(o.top[0].sim->run.time_s, best_t * (1 - 1e-12)) << "the planner beat every valid plan: the enumeration misses some";
}

}  // namespace

// Plenty of memory (A100 80 GB): data parallelism wins, but many pipelined plans do not fit (recompute none).
TEST(PlanSearch, GroundTruthGpt350mSelene) { expect_ground_truth("gpt3-350m", "selene", "bf16", 64, {4, 8}, "none"); }

// Little memory (Quadro RTX 5000, 16 GB; 4 GPUs per node, so 2D grids in node blocks too): the model must be split.
TEST(PlanSearch, GroundTruthGpt13bFronteraRtx) {
  expect_ground_truth("gpt3-1.3b", "frontera-rtx", "fp16", 32, {8, 16}, "selective");
}

// Every recompute level and ZeRO stage: the planner skips a higher recompute level (and offload) once a cheaper
// one fits with everything else equal; the full enumeration checks that this dominance loses nothing.
TEST(PlanSearch, GroundTruthEveryRecomputeAndZeroStage) {
  expect_ground_truth("gpt3-1.3b", "frontera-rtx", "fp16", 32, {8}, {"none", "selective", "full"}, {0, 1, 2, 3});
}

// ---- 7. nothing fits ----

TEST(PlanSearch, NothingFitsGivesNoPlanAndANote) {
  json s = {{"max_gpus", 8}, {"top_k", 3}, {"fix", {{"offload", "none"}}}};
  Scenario sc = search_scenario(search_json("gpt3-175b", "frontera-rtx", s, 3e11, 0, "fp16"));
  PlanOutcome o = run_search(sc);
  EXPECT_TRUE(o.top.empty());
  EXPECT_TRUE(o.by_gpus.empty());
  EXPECT_TRUE(o.pareto.empty());
  EXPECT_GT(o.stats.configurations_evaluated, 0);
  EXPECT_EQ(o.stats.pruned_memory, o.stats.configurations_evaluated);
  EXPECT_NE(o.note.find("memory"), std::string::npos) << o.note;
  json j = plan_outcome_to_json(o);
  EXPECT_TRUE(j["best"].is_null());
  EXPECT_EQ(j["note"], o.note);
}

// ---- 8. search.compare ----

TEST(PlanSearch, CompareGivesFourVariants) {
  json s = {{"max_gpus", 16}, {"top_k", 3}, {"compare", json::object()}};
  Scenario sc = search_scenario(search_json("gpt3-350m", "selene", s));
  PlanOutcome o = run_search(sc);
  expect_invariants(sc, o);
  ASSERT_EQ(o.shortest.size(), 4u);
  std::vector<std::string> names;
  for (auto& v : o.shortest) names.push_back(v.name);
  EXPECT_EQ(names, (std::vector<std::string>{"standard_ib", "lga_mpp_ib", "standard_ethernet", "lga_mpp_ethernet"}));
  auto best = [&](int i) -> const Candidate& {
    const PlanOutcome& x = *o.shortest[i].outcome;
    EXPECT_FALSE(x.top.empty()) << o.shortest[i].name << ": " << x.note;
    return x.top[0];
  };
  for (int i = 0; i < 4; ++i) {
    SCOPED_TRACE(o.shortest[i].name);
    ASSERT_TRUE(o.shortest[i].outcome);
    const PlanOutcome& x = *o.shortest[i].outcome;
    ASSERT_FALSE(x.top.empty()) << x.note;
    EXPECT_TRUE(x.shortest.empty());
    EXPECT_FALSE(o.shortest[i].label.empty());
    bool restricted = i == 0 || i == 2;
    for (const Candidate* c : reported(x)) {
      if (!restricted) break;
      EXPECT_NE(c->plan.grad_accumulation, GradAccumulation::layered) << plan_summary(c->plan, c->global_batch);
      EXPECT_NE(c->plan.schedule, Schedule::modular) << plan_summary(c->plan, c->global_batch);
    }
    if (i >= 2) {
      EXPECT_DOUBLE_EQ(x.scenario.cluster.inter.nic_bandwidth_bytes_per_s, 100e9 / 8);
      EXPECT_EQ(x.scenario.cluster.inter.nics_per_node, 1);
    }
  }
  const double eps = 1e-9;
  // Allowing LGA + MPP never makes the shortest time longer on the same network.
  EXPECT_LE(best(1).time_to_train_s, best(0).time_to_train_s * (1 + eps));
  EXPECT_LE(best(3).time_to_train_s, best(2).time_to_train_s * (1 + eps));
  // A slower network never makes it shorter.
  EXPECT_GE(best(2).time_to_train_s, best(0).time_to_train_s * (1 - eps));
  EXPECT_GE(best(3).time_to_train_s, best(1).time_to_train_s * (1 - eps));
  json j = plan_outcome_to_json(o);
  ASSERT_TRUE(j.contains("shortest_time"));
  ASSERT_EQ(j["shortest_time"]["variants"].size(), 4u);
  for (int i = 0; i < 4; ++i) {
    const json& v = j["shortest_time"]["variants"][i];
    EXPECT_EQ(v["name"], names[i]);
    EXPECT_DOUBLE_EQ(v["time_to_train_s"].get<double>(), best(i).time_to_train_s);
  }
}

// A search block without compare has no variants.
TEST(PlanSearch, NoCompareNoVariants) {
  PlanOutcome o = run_search(small_350m());
  EXPECT_TRUE(o.shortest.empty());
  EXPECT_FALSE(plan_outcome_to_json(o).contains("shortest_time"));
}

// ---- problems found while writing these tests (see the report; each fails until fixed) ----

// search.memory_headroom: "fraction of GPU memory kept free". The analytic pass prunes with it, but the
// confirmation accepts any plan whose simulated peak fits the whole HBM, so reported plans can eat into the
// headroom when the closed form underestimates the peak.
TEST(PlanSearch, MemoryHeadroomHoldsForSimulatedPlans) {
  const double h = 0.6;
  json s = {{"max_gpus", 8}, {"top_k", 5}, {"memory_headroom", h}};
  Scenario sc = search_scenario(search_json("gpt3-1.3b", "selene", s, 2.6e10));
  PlanOutcome o = run_search(sc);
  ASSERT_FALSE(o.top.empty()) << o.note;
  const double limit = (1 - h) * sc.cluster.gpu.hbm_bytes;
  for (const Candidate& c : o.top)
    EXPECT_LE(c.sim->peak_bytes_per_gpu, limit) << "top: " << plan_summary(c.plan, c.global_batch) << " uses "
                                                << c.sim->peak_bytes_per_gpu / limit * 100 << "% of the headroom limit";
  for (const GpuPoint& g : o.by_gpus)
    if (g.simulated) {
      EXPECT_LE(g.best.sim->peak_bytes_per_gpu, limit) << "by_gpus: " << plan_summary(g.best.plan, g.best.global_batch)
                                                       << " uses " << g.best.sim->peak_bytes_per_gpu / limit * 100
                                                       << "% of the headroom limit";
    }
}

// search.compare's restricted variants (no LGA, no MPP) intersect the user's fix.schedule with {gpipe, 1f1b,
// interleaved}; when the intersection is empty the variant must find nothing, not drop the restriction.
TEST(PlanSearch, CompareKeepsTheUsersFix) {
  json s = {{"max_gpus", 16}, {"top_k", 3}, {"fix", {{"schedule", "modular"}}}, {"compare", json::object()}};
  Scenario sc = search_scenario(search_json("gpt3-350m", "selene", s));
  PlanOutcome o = run_search(sc);
  ASSERT_EQ(o.shortest.size(), 4u);
  for (const ShortestVariant& v : o.shortest) {
    SCOPED_TRACE(v.name);
    for (const Candidate* c : reported(*v.outcome))
      EXPECT_EQ(c->plan.schedule, Schedule::modular) << plan_summary(c->plan, c->global_batch);
    if (v.name == "standard_ib" || v.name == "standard_ethernet") {
      EXPECT_TRUE(v.outcome->top.empty());
      EXPECT_FALSE(v.outcome->note.empty());
    }
  }
}

// search.target_loss is documented (models/search.hpp) as the run's stopping loss, but only
// training.target_loss reaches the planner. Either it acts like training.target_loss or the key is refused.
TEST(PlanSearch, SearchTargetLossIsUsedOrRefused) {
  json with_search = search_json("gpt3-350m", "selene", {{"max_gpus", 8}, {"top_k", 3}, {"target_loss", 3.2}});
  with_search["training"].erase("tokens");
  json with_training = search_json("gpt3-350m", "selene", {{"max_gpus", 8}, {"top_k", 3}});
  with_training["training"].erase("tokens");
  with_training["training"]["target_loss"] = 3.2;
  Scenario a;
  try {
    a = search_scenario(with_search);
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("$.search.target_loss"), std::string::npos) << e.what();
    return;  // refused: fine
  }
  PlanOutcome oa = run_search(a), ob = run_search(search_scenario(with_training));
  ASSERT_FALSE(oa.top.empty() || ob.top.empty());
  EXPECT_DOUBLE_EQ(oa.top[0].sim->run.time_s, ob.top[0].sim->run.time_s) << "search.target_loss was ignored";
}
