// exec/measure/: the executor measured against the simulator: calibrate (a hardware profile of this machine) and
// validate (predicted vs measured step time, op classes and memory).
// validate: `trainplan validate SCENARIO.json --profile PROFILE.json [--backend B]` — runs the scenario's plan for a few steps
// with the executor and simulates the same scenario on the calibrated profile, then compares step time, time
// per op class and peak memory (docs/perf/validate.md).
// The simulated scenario is the scenario with: "cluster" = the profile (an inline cluster object from
// `trainplan calibrate`; nodes raised to hold the plan's ranks if needed), training.precision and
// grad_precision "fp32" (what the CPU backend computes in), plan.overlap_grad_reduce false (the executor starts each
// layer's reduction as its backward ends, but the host communicators complete it there: it runs inside the
// backward, not beside it).
// The plan first runs one unmeasured warm-up step (a separate run_training call), then `steps` measured steps.
// Measured (exec/prof/prof.hpp):
// - step time = median of rank 0's step times after the first step;
// - per op class = seconds inside the instrumented ops / collectives per steady step, per rank (steps after
//   the first when the runtime calls prof::step_begin / step_end, else all steps of the measured run); pp_comm includes the time
//   blocked waiting for a pipeline peer, so it is compared with the simulator's pp_comm_exposed + bubble;
//   "other" = step time - the classes (copies, allocation, zero fills: work the cost model has no op for);
// - peak memory = the highest tracked heap (operator new) in use during the steady steps minus the heap in use
//   before the run (per rank; the max over ranks is reported), and, for reference, the peak RSS growth.
// Predicted: step_time_s, peak_bytes_per_gpu, and per class the cost model's op times (Result.prog.cm passes,
// recompute ops in their class) summed over each simulated rank's compute tasks; optimizer, pp (exposed +
// bubble) and dp (exposed) from the rank's breakdown.
// With plan.offload "chunked" the simulator's peak is device memory only, so the measured peak compared is the
// executor's DEVICE peak (the chunk store's resident slots plus the tracked heap's growth above each step's
// start, per moment: activations and scratch; exec/runtime/offload/chunk_store.hpp), and measured.peak_heap_bytes (the whole
// heap: host pools, Adam state, arena) is reported next to it. With "optimizer" the device peak is the tracked
// heap's peak less the host optimizer's pinned buffers (master copy, gradient buffer, moments: allocated once,
// live through every step; exec/runtime/offload/host_optimizer.hpp).
#pragma once
#include <string>
#include <vector>

#include "exec/comm/comm.hpp"
#include "models/json_check.hpp"

namespace tp::exec {

struct ValidateOptions {
  int steps = 4;  // >= 2: the first step is warm-up
  // The executor's backend (`validate --backend`): cpu, or a device backend (cuda; emu, emu-device: the same code on
  // the CPU emulator). On a device backend the plan runs and is simulated in its own precision (fp8 as bf16: the
  // executor's fp8 is an emulation of the casts), peak memory is the backend allocator's high-water mark against
  // the predicted tensors (the simulator's framework memory, CUDA context and fragmentation, is not the
  // allocator's); the step times come from an unprofiled run and the per-class times from a second, 2-step run with
  // a device sync around every op (prof::set_sync: each op's device time, not its launch).
  std::string backend = "cpu";
  // The communicator (`validate --comm`): mpi (host-staged, rank-ordered sums) or nccl (cuda, emu-device: the device
  // communicator, exec/comm/device_comm.hpp), as `run --comm`.
  std::string comm = "mpi";
  // plan.delink (Pseudo-to-Real): run's --delink-step (-1: from delink.tokens). The measured steps (all but the
  // first) must lie in one phase, compared with that phase's simulation: 1, the real model; >= steps, the pseudo one.
  long delink_step = -1;
  // plan.offload "chunked": the executor's per-rank device arena (0: gpu_memory_fraction x the scenario
  // cluster's HBM). The simulated scenario gets gpu_memory_fraction = this / the profile's hbm_bytes.
  double device_budget_bytes = 0;
};

// Collective over `world` (world.size() must equal the plan's ranks: checked, InputError otherwise).
// `scenario_file`: the scenario; `profile`: the parsed profile (cluster object). Throws InputError on bad
// input (on every rank, before any training). Returns the report on rank 0 (null elsewhere).
json validate_run(const std::string& scenario_file, const json& profile, const std::string& profile_file,
                   const ValidateOptions& o, Comm& world);

// The human-readable comparison of a report. Op classes under 1 % of the measured step show "—" as error.
std::string validate_text(const json& report);

// validate --tolerance: the quantities (step time, peak memory) whose |predicted / measured - 1| exceeds
// `tolerance`, one line each ("step time: predicted 1.2 s, measured 1.0 s, error +20.0 % > 10.0 %"); empty
// when both are within it.
std::vector<std::string> validate_misses(const json& report, double tolerance);

}  // namespace tp::exec
