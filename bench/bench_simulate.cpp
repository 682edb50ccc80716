// bench_simulate: how fast trainplan simulates one training step of the bench scenarios (scenarios/bench/).
// Speed targets (checked by bench/run_bench.sh, which prints a pass/fail table; never by timed test assertions):
//   GPT-3 175B on 1536 GPUs < 20 ms, Megatron 1T on 3072 GPUs < 100 ms (representative mode),
//   GPT-3 175B on 1024 GPUs in full-cluster mode < 10 s, and the GPT-3 13B symmetry series (128 / 1024 / 9984
//   GPUs, same plan shape) about equally fast at every size. Technique cases (granular offload on GPT-3 175B,
//   Optimus 2D on 64 Frontera GPUs, LGA + MPP on GPT-3 175B) are timed without a fixed target.
// Each scenario is loaded once, outside the timing loop; the loop times tp::simulate (build the program, run the
// event engine, derive the results) with the memory timeline off, as `trainplan simulate` does without --trace.
// BM_BuildProgram / BM_Engine / BM_BuildTopology split the 1T case and both ends of the symmetry series into
// their phases (program construction, event engine, and the cluster graph that the program builds first).
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <string>

#include "models/scenario.hpp"
#include "sim/program.hpp"
#include "sim/simulate.hpp"
#include "sim/topology.hpp"

namespace {

std::string bench_dir() {
  if (const char* d = std::getenv("TRAINPLAN_BENCH_SCENARIOS")) return d;
  return std::string(TP_SOURCE_DIR) + "/scenarios/bench";
}

// Loads a bench scenario; on failure marks the benchmark as errored (the run goes on) and returns false.
bool load(benchmark::State& state, const std::string& file, tp::Scenario& sc) {
  try {
    sc = tp::load_scenario(bench_dir() + "/" + file);
    return true;
  } catch (const tp::InputError& e) {
    std::string msg = file + ":";
    for (auto& m : e.messages) msg += " " + m;
    state.SkipWithError(msg.c_str());
  } catch (const std::exception& e) {
    state.SkipWithError((file + ": " + e.what()).c_str());
  }
  return false;
}

int gpus(const tp::Scenario& sc) { return sc.plan.gpus(); }

void BM_Simulate(benchmark::State& state, const std::string& file, bool full_cluster) {
  tp::Scenario sc;
  if (!load(state, file, sc)) return;
  tp::SimOptions opt;
  opt.full_cluster = full_cluster;
  opt.keep_memory_timeline = false;
  long long events = 0;
  int ranks = 0;
  double step = 0;
  bool ran_full = full_cluster;
  for (auto _ : state) {
    tp::Result r = tp::simulate(sc, opt);
    ran_full = r.options.full_cluster;  // true also when a non-symmetric layout fell back to full mode
    events = r.events;
    ranks = (int)r.ranks.size();
    step = r.step_time_s;
    benchmark::DoNotOptimize(r.step_time_s);
  }
  state.counters["events"] = (double)events;
  state.counters["simulated_ranks"] = ranks;
  state.counters["gpus"] = gpus(sc);
  state.counters["step_time_s"] = step;
  state.counters["full_cluster"] = ran_full ? 1 : 0;
}

void BM_BuildProgram(benchmark::State& state, const std::string& file) {
  tp::Scenario sc;
  if (!load(state, file, sc)) return;
  size_t tasks = 0, links = 0;
  for (auto _ : state) {
    tp::Program p = tp::build_program(sc, false);
    tasks = p.in.tasks.size();
    links = p.topo->links.size();
    benchmark::DoNotOptimize(p.in.tasks.data());
  }
  state.counters["tasks"] = (double)tasks;
  state.counters["links"] = (double)links;
  state.counters["gpus"] = gpus(sc);
}

void BM_Engine(benchmark::State& state, const std::string& file) {
  tp::Scenario sc;
  if (!load(state, file, sc)) return;
  tp::Program p = tp::build_program(sc, false);
  long long events = 0;
  for (auto _ : state) {
    tp::EngineOutput eo = tp::engine_run(p.in);
    events = eo.events;
    benchmark::DoNotOptimize(eo.makespan_s);
  }
  state.counters["events"] = (double)events;
  state.counters["tasks"] = (double)p.in.tasks.size();
  state.counters["gpus"] = gpus(sc);
}

// The cluster graph alone (built for every GPU of the plan, whatever the mode).
void BM_BuildTopology(benchmark::State& state, const std::string& file) {
  tp::Scenario sc;
  if (!load(state, file, sc)) return;
  int g = gpus(sc);
  size_t links = 0;
  for (auto _ : state) {
    tp::Topology t = tp::build_topology(sc.cluster, g);
    links = t.links.size();
    benchmark::DoNotOptimize(t.links.data());
  }
  state.counters["links"] = (double)links;
  state.counters["gpus"] = g;
}

struct Entry { const char* name; const char* file; bool full; };
const Entry kEntries[] = {
    {"gpt3-175b-1536", "gpt3-175b-1536.json", false},
    {"megatron-1t-3072", "megatron-1t-3072.json", false},
    {"gpt3-175b-1024-full", "gpt3-175b-1024-full.json", true},
    {"symmetry-gpt3-13b-128", "symmetry-gpt3-13b-128.json", false},
    {"symmetry-gpt3-13b-1024", "symmetry-gpt3-13b-1024.json", false},
    {"symmetry-gpt3-13b-9984", "symmetry-gpt3-13b-9984.json", false},
    // Techniques (no fixed targets): per-layer programs with PCIe loads / stores and host Adam, Optimus 2D
    // (SUMMA collectives folded into compute ops, 64-GPU TP group across nodes), LGA + MPP (layered order over
    // one-layer looping chunks).
    {"gpt3-175b-1024-offload", "gpt3-175b-1024-offload.json", false},
    {"optimus-2d-frontera-64", "optimus-2d-frontera-64.json", false},
    {"lga-mpp-gpt3-175b-1024", "lga-mpp-gpt3-175b-1024.json", false},
    // Today's runs: a 405B model with context parallelism and uneven pipeline stages on 16,384 GPUs.
    {"llama3-405b-cp2-uneven-16384", "llama3-405b-cp2-uneven-16384.json", false},
    // A layout that is not symmetric (rings across 2:1 oversubscribed leaf uplinks): the simulator falls back to
    // every rank; the cost should grow about linearly with dp (16x the GPUs, at most ~20x the time).
    {"oversubscribed-dp-1024", "oversubscribed-dp-1024.json", false},
    {"oversubscribed-dp-16384", "oversubscribed-dp-16384.json", false},
};

const bool registered = [] {
  for (const Entry& e : kEntries) {
    std::string file = e.file;
    bool full = e.full;
    benchmark::RegisterBenchmark((std::string("BM_Simulate/") + e.name).c_str(),
                                 [file, full](benchmark::State& s) { BM_Simulate(s, file, full); })
        ->Unit(benchmark::kMillisecond);
  }
  // Phase split: the 1T case (largest representative program) and the two ends of the symmetry series.
  for (const char* name : {"megatron-1t-3072", "symmetry-gpt3-13b-128", "symmetry-gpt3-13b-9984"}) {
    std::string file = std::string(name) + ".json";
    benchmark::RegisterBenchmark((std::string("BM_BuildProgram/") + name).c_str(),
                                 [file](benchmark::State& s) { BM_BuildProgram(s, file); })
        ->Unit(benchmark::kMillisecond);
    benchmark::RegisterBenchmark((std::string("BM_Engine/") + name).c_str(),
                                 [file](benchmark::State& s) { BM_Engine(s, file); })
        ->Unit(benchmark::kMillisecond);
    benchmark::RegisterBenchmark((std::string("BM_BuildTopology/") + name).c_str(),
                                 [file](benchmark::State& s) { BM_BuildTopology(s, file); })
        ->Unit(benchmark::kMillisecond);
  }
  return true;
}();

}  // namespace

BENCHMARK_MAIN();
