// bench_planner: how fast `trainplan plan` searches (scenarios/bench/plan-gpt3-175b-1024.json).
// Speed targets (checked by bench/run_planner_bench.sh, which prints a pass/fail table; never by timed test
// assertions): the analytic pass estimates >= 100,000 configurations per second per core (BM_AnalyticPass runs
// it on one thread over the whole space of the scenario); the full search (analytic pass on every core, then
// the event simulations that confirm the best) finishes in < 10 s on 2 cores (BM_PlanSearch, 2 threads).
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <string>

#include "planner/analytic.hpp"
#include "planner/search.hpp"
#include "planner/space.hpp"
#include "sim/op_cost.hpp"

namespace {

std::string scenario_file() {
  if (const char* f = std::getenv("TRAINPLAN_PLAN_BENCH_SCENARIO")) return f;
  return std::string(TP_SOURCE_DIR) + "/scenarios/bench/plan-gpt3-175b-1024.json";
}

void BM_AnalyticPass(benchmark::State& state) {
  tp::Scenario sc = tp::load_scenario(scenario_file(), true);
  double n = (double)sc.model.layers * tp::layer_params_full(sc.model);
  tp::RunEstimate probe = tp::estimate_run(n, (double)sc.training.seq_len, sc.training.tokens, 1, 1, 0, 0);
  tp::SpaceLimits lim = tp::space_limits(sc, probe.critical_batch_tokens);
  std::vector<tp::Layout> layouts = tp::enumerate_layouts(sc, lim);
  tp::AnalyticModel am(sc);
  long long configs = 0;
  double sink = 0;
  for (auto _ : state) {
    for (const tp::Layout& lay : layouts) {
      long long dominated = 0;
      tp::enumerate_choices(sc, am, lay, lim, [&](const tp::Choice& ch, const tp::MicroCost& mc, long long) {
        tp::Estimate e = am.estimate(lay, mc, ch);
        sink += e.step_s;
        ++configs;
        return e.fits && e.host_fits;
      }, dominated);
    }
  }
  benchmark::DoNotOptimize(sink);
  state.counters["configs"] = benchmark::Counter((double)configs / state.iterations());
  state.counters["configs_per_s"] = benchmark::Counter((double)configs, benchmark::Counter::kIsRate);
}
BENCHMARK(BM_AnalyticPass)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_PlanSearch(benchmark::State& state) {
  tp::Scenario sc = tp::load_scenario(scenario_file(), true);
  tp::PlanOptions opt;
  opt.threads = (int)state.range(0);
  double evaluated = 0, simulated = 0;
  for (auto _ : state) {
    tp::PlanOutcome o = tp::plan_search(sc, opt);
    evaluated = (double)o.stats.configurations_evaluated;
    simulated = (double)o.stats.simulated;
    benchmark::DoNotOptimize(o.top.size());
  }
  state.counters["configs"] = evaluated;
  state.counters["simulated"] = simulated;
}
BENCHMARK(BM_PlanSearch)->Arg(2)->Unit(benchmark::kSecond)->UseRealTime()->Iterations(1);

}  // namespace

BENCHMARK_MAIN();
