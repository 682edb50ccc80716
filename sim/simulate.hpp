// simulate: one scenario -> one predicted step and the whole run. Builds the program, runs the event engine,
// then derives the step-time breakdown, the memory timeline and its peak, network volume per tier,
// throughput and MFU, and the run estimate. Result is what `simulate --json` and `--trace` write.
#pragma once
#include <string>
#include <vector>

#include "program.hpp"
#include "run_estimate.hpp"

namespace tp {

struct Breakdown {
  double compute = 0, recompute = 0, bubble = 0, tp_comm_exposed = 0, pp_comm_exposed = 0, dp_comm_exposed = 0,
         optimizer = 0;
  double total() const {
    return compute + recompute + bubble + tp_comm_exposed + pp_comm_exposed + dp_comm_exposed + optimizer;
  }
};

struct MemoryBreakdown {
  double weights = 0, gradients = 0, optimizer = 0, activations = 0, buffers = 0;
  double total() const { return weights + gradients + optimizer + activations + buffers; }
};

struct MemSample { double t_s, bytes; };

struct RankResult {
  int global_rank = 0, stage = 0;
  Breakdown breakdown;
  MemoryBreakdown peak;        // at the moment of the rank's peak
  double stored_peak_bytes = 0;  // peak of stored activations alone (Korthikanti's measure)
  std::vector<MemSample> memory;  // timeline (bytes in use)
};

struct SimOptions {
  bool full_cluster = false;
  bool keep_memory_timeline = true;
};

struct Result {
  Scenario scenario;
  SimOptions options;
  double step_time_s = 0;
  Breakdown breakdown;             // of the rank that finishes last (sets the step time)
  int breakdown_rank = 0;          // simulated rank the breakdown is for
  std::vector<RankResult> ranks;   // per simulated rank
  MemoryBreakdown memory;          // of the rank with the highest peak
  double peak_bytes_per_gpu = 0, capacity_bytes = 0;
  bool fits = false;
  double intra_bytes_per_gpu = 0, inter_bytes_per_gpu = 0;  // per step
  double tokens_per_s = 0, model_tflops_per_gpu = 0, hardware_tflops_per_gpu = 0, mfu = 0;
  RunEstimate run;
  long long events = 0;
  bool fallback_to_full = false;  // symmetric mode was asked for but the layout is not symmetric
  double wall_s = 0;  // time the simulation itself took
  Program prog;       // kept for the trace
  EngineOutput eo;
};

Result simulate(const Scenario& sc, const SimOptions& opt = {});

}  // namespace tp
