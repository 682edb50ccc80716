// simulate: one scenario -> one predicted step and the whole run. Builds the program, runs the event engine,
// then derives the step-time breakdown, the memory timeline and its peak, network volume per tier,
// throughput and MFU, and the run estimate. Result is what `simulate --json` and `--trace` write.
#pragma once
#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "program.hpp"
#include "run_estimate.hpp"

namespace tp {

// Where one rank's step time goes. dp_comm_exposed includes ZeRO-3 parameter gathers; ep_comm_exposed is the
// MoE all-to-alls; offload_stall is waiting for PCIe copies or the host CPU (loads, gradient stores, CPU Adam);
// comm_slowdown is compute made slower by NCCL collectives running beside it (the GPU's
// compute_slowdown_under_comm, sim/engine).
struct Breakdown {
  double compute = 0, recompute = 0, bubble = 0, tp_comm_exposed = 0, pp_comm_exposed = 0, dp_comm_exposed = 0,
         optimizer = 0, ep_comm_exposed = 0, offload_stall = 0, comm_slowdown = 0;
  double total() const {
    return compute + recompute + bubble + tp_comm_exposed + pp_comm_exposed + dp_comm_exposed + optimizer +
           ep_comm_exposed + offload_stall + comm_slowdown;
  }
};

struct MemoryBreakdown {
  double weights = 0, gradients = 0, optimizer = 0, activations = 0, buffers = 0;
  double framework = 0;  // beyond the tensors: CUDA context, cuBLAS workspace, NCCL buffers, fragmentation
  double tensors() const { return weights + gradients + optimizer + activations + buffers; }
  double total() const { return tensors() + framework; }
};

struct MemSample { double t_s, bytes; };

struct RankResult {
  int global_rank = 0, stage = 0;
  Breakdown breakdown;
  MemoryBreakdown peak;        // at the moment of the rank's peak
  double stored_peak_bytes = 0;  // peak of stored activations alone (Korthikanti's measure)
  double host_bytes = 0;         // host memory for this GPU's offloaded state
  double pcie_bytes = 0;         // PCIe bytes per step, both directions
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
  // The peak MFU is against: the dense peak of the training's tensor precision (fp8 training: bf16, as fp8 runs
  // are usually reported). fp8 training also reports MFU against the fp8 peak (mfu_fp8; 0 otherwise).
  Precision mfu_peak_precision = Precision::bf16;
  double mfu_peak_flops_per_s = 0, mfu_fp8 = 0, fp8_peak_flops_per_s = 0;
  double tokens_per_s_per_gpu() const { return tokens_per_s / std::max(1, scenario.plan.gpus()); }
  RunEstimate run;
  long long events = 0;
  bool fallback_to_full = false;  // symmetric mode was asked for but the layout is not symmetric
  double wall_s = 0;  // time the simulation itself took
  double host_bytes_per_node = 0;  // offloaded state in host memory per node (busiest stage's GPUs)
  double pcie_bytes_per_gpu = 0;   // per step, both directions (busiest stage)
  bool host_fits = true;           // host_bytes_per_node <= the node's host memory
  std::string offload_note;        // chunked offload: why the chunks do not fit, when they do not
  Program prog;       // kept for the trace
  EngineOutput eo;
  // Pseudo-to-Real (plan.delink): the pseudo phase's own simulation, the one-time delink, and the totals.
  struct DelinkPhases {
    std::shared_ptr<struct Result> pseudo;
    double delink_s = 0;           // copying weights and optimizer state into L independent layers
    double delink_bytes_per_gpu = 0;
    bool relayout = false;         // the pseudo plan differs from the real one: states move over the network
    double time_s = 0, gpu_hours = 0, cost_usd = 0, energy_kwh = 0, tokens = 0;  // pseudo + delink + real
  };
  std::shared_ptr<DelinkPhases> delink;  // null unless the scenario delinks
};

Result simulate(const Scenario& sc, const SimOptions& opt = {});

// training.target_loss must lie above the model's converged loss L(N) (Kaplan); throws InputError otherwise.
// simulate() and the planner call it before any work.
void check_target_loss(const Scenario& sc);

}  // namespace tp
