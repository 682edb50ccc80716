// exec/runtime/: `trainplan run`: this entry point (train.cpp: checks, data source, JSON result), one rank's run
// (runtime_rank.hpp gives the design; runtime.cpp setup, runtime_step.cpp the step loop, runtime_update.cpp
// between the steps, runtime_state.cpp parameter state, runtime_relayout.cpp and handover Pseudo-to-Real over two
// layouts), device_oom (the out-of-memory message) and offload/ (chunked, optimizer and granular offload).
// train: `trainplan run` — trains the scenario's GPT with its plan for N steps on this process's rank and
// returns what it measured. Rank layout is the simulator's (models/plan.hpp: tp fastest, then dp, then
// stage); groups come from Comm::split. Every rank derives its weights from the same full initialisation and
// reads exactly the sequences it owns (exec/io/data.hpp), so any plan reproduces the single-rank run.
// Supported so far: data parallelism with ZeRO 0-3 x Megatron 1D tensor parallelism x pipelines (GPipe, 1F1B,
// interleaved, modular) with standard or layered accumulation, recompute none / selective / full, float32 or
// float64, 2D TP, sequence parallelism, delink, chunked offload (PatrickStar, exec/runtime/offload/chunk_store.hpp: a real
// device arena of --device-budget bytes), optimizer offload (ZeRO-Offload, exec/runtime/offload/host_optimizer.hpp) and granular
// offload with ZeRO 0-3, cp, 2D TP and delink (M6-10T, exec/runtime/offload/runtime_granular.hpp); a delink pseudo phase on its
// own plan of any layout (exec/runtime/runtime_relayout.cpp). Plan keys check_runnable
// refuses are rejected with exit code 2 before any rank starts work.
#pragma once
#include <cstdio>
#include <string>
#include <vector>

#include "exec/comm/comm.hpp"
#include "models/scenario.hpp"

namespace tp::exec {

struct RunOptions {
  std::string backend = "cpu";   // the compute backend (exec/backends/backend.hpp): cpu, emu, emu-device or cuda
  // The communicator of device tensors: "mpi" (host-staged on a device backend, rank-ordered exact sums) or "nccl"
  // (--backend cuda: collectives on the GPU, exec/comm/device_comm.hpp; host buffers and sends still over MPI).
  std::string comm = "mpi";
  int steps = 10;
  bool fp64 = false;
  uint64_t seed = 1234;
  double lr = 1e-3, min_lr_ratio = 0.1, weight_decay = 0.1, beta1 = 0.9, beta2 = 0.95, eps = 1e-8, grad_clip = 1.0;
  int warmup_steps = -1;         // -1: max(1, steps / 10)
  std::string data;              // token file (llm.c .bin); empty = the bundled tiny corpus
  bool progress = false;         // a progress line on stderr (rank 0)
  long delink_step = -1;         // plan.delink: the step at which to delink (-1: delink.tokens / tokens per step)
  std::string checkpoint_dir;    // where per-rank checkpoints go (empty: none)
  int checkpoint_every = 0;      // write one after every this many steps (0: never)
  bool resume = false;           // continue from the newest checkpoint that every rank completed
  bool resume_or_start = false;  // with resume: start at step 0 when every checkpoint found is incomplete or corrupt
  std::string trace;             // write a Chrome trace of the last step (lanes and op names as the simulator's)
  double device_budget_bytes = 0;  // plan.offload chunked: the device pool (arena) per rank in bytes;
                                   // 0 = gpu_memory_fraction x the scenario's cluster GPU hbm_bytes
  int log_every = -1;            // rank 0's iteration line every N steps (-1: 10, every step for runs <= 20; 0: none)
  // --metrics: rank 0 writes one JSON line per logged step here (step, loss, grad norm, learning rate, mean time
  // per iteration over the interval, tokens/s, TFLOP/s per GPU, peak memory), flushed at once; owned by the caller.
  std::FILE* metrics = nullptr;
  int keep_checkpoints = 3;      // complete checkpoints kept (older ones removed after a newer one is complete)
  // training.precision "bf16": the GEMMs read the weights' bf16 copies (exec/model/gpt.hpp WeightCopies16). Off, each GEMM
  // rounds the T weights itself: the same values (tests compare the two), no copies held.
  bool bf16_weight_copies = true;
  // --cuda-graphs: the steady step captured once and replayed (exec/runtime/step_graph.hpp) on a backend that
  // captures (cuda, emu-device): "auto" as plan.cuda_graphs says, "on" whatever it says (a plan whose step cannot be
  // captured is an error), "off" never.
  std::string cuda_graphs = "auto";
  long long handover_window = 0;  // Pseudo-to-Real over two layouts: single-rank elements per window of the
                                  // handover (exec/runtime/handover.hpp; 0: 4 Mi)
};

// SIGINT / SIGTERM: the handler records the signal; run_training finishes the step, stops every rank at the
// same step (checkpoint written when checkpointing is on) and reports it in RunResult::stop_signal.
void install_stop_handlers();
int pending_stop_signal();  // the signal received (0 none)

// plan.offload "chunked": what the chunk store of rank 0 did, per step (exec/runtime/offload/chunk_store.hpp); plan.offload
// "optimizer": rank 0's host optimizer (exec/runtime/offload/host_optimizer.hpp): kind, h2d_bytes / d2h_bytes per step and
// host_state_bytes (the pinned host state: master copy, gradient buffer, two moments); the chunk fields stay 0.
// "granular" (exec/runtime/offload/runtime_granular.hpp): the same, plus peak_loaded_bytes per step.
struct OffloadResult {
  bool on = false;
  std::string kind = "chunked";  // "chunked" or "optimizer"
  double host_state_bytes = 0;         // optimizer / granular: pinned host memory held
  std::vector<double> peak_loaded_bytes;  // granular: per step, the most device copies of offloaded layers held
  double budget_bytes = 0, arena_bytes = 0;  // the device budget and the arena actually allocated
  long long chunk_elements = 0;
  int chunks = 0;
  double chunk_bytes = 0;                    // all chunk slots (capacity x element size)
  std::vector<double> h2d_bytes, d2h_bytes, h2d_s, d2h_s;  // chunk moves (the seconds include the Adam copies)
  std::vector<double> h2d_moves, d2h_moves;
  std::vector<double> adam_h2d_bytes, adam_d2h_bytes;      // CPU Adam: resident chunks' grads out, params back
  std::vector<double> peak_arena_bytes;                    // resident chunk slots, peak in the step
  double peak_arena_bytes_max = 0;
  // Device memory as the simulator counts it (resident slots + non-model device memory, per moment; the
  // non-model part needs the tracked heap of `trainplan validate`, else it is 0), peak per step and overall.
  std::vector<double> peak_device_bytes;
  double peak_device_bytes_max = 0;
  std::vector<double> os_device_bytes;  // hybrid Adam: optimizer state on the device, per step
  std::vector<double> prefetch_h2d_bytes;  // chunked: the prefetch's loads per step (in h2d_bytes too)
  std::vector<double> prefetch_d2h_bytes;  // chunked: the prefetch's evictions per step (in d2h_bytes too)
  std::vector<double> early_d2h_bytes;     // optimizer: gradients sent during the backward per step (in d2h_bytes too)
};

struct RunResult {
  std::vector<double> losses;        // per step: mean token loss over the global batch
  std::vector<double> step_time_s;   // per step (rank 0's wall time, the step ends with the optimizer)
  // per step, on a backend with a device clock (cuda: CUDA events; emu-device: the host's clock at each record):
  // from the step's first work on the compute stream to its optimizer's end; empty elsewhere
  std::vector<double> device_step_time_s;
  double tokens_per_s = 0;           // over the steps after the first
  // Per rank: the peak device memory the backend allocated on a device backend (cuda, emu-device), else the
  // process's peak resident memory; and the process's peak resident memory on every backend.
  std::vector<double> peak_memory_bytes;
  std::vector<double> peak_host_memory_bytes;
  // per rank: parameter elements it stores (its stage's units; ZeRO-3 layers as slices; MoE: its local experts)
  // and optimizer moment elements (each of Adam's two), to compare with the simulator's per-GPU counts
  std::vector<double> param_elements, moment_elements;
  std::vector<double> grad_norm;     // per step, before clipping
  long delink_step = -1;             // the step that ran first on the delinked (real) model, -1 without delink
  long first_step = 0;               // losses[i] is step first_step + i (> 0 after a resume)
  std::vector<int> graph_steps;      // --cuda-graphs: per phase's run that captured one, the step captured as a graph
  json trace;                        // this rank's trace events of the last step (when RunOptions::trace is set)
  OffloadResult offload;             // plan.offload chunked (rank 0's store), optimizer or granular (its host state)
  int stop_signal = 0;               // SIGINT / SIGTERM stopped the run after the steps in `losses`
  std::string last_checkpoint;       // the newest complete checkpoint directory written or resumed from ("" none)
};

// Throws InputError (exit 2) for plans this executor cannot run yet; call on every rank before any work.
void check_runnable(const Scenario& sc);
// What `run` does differently from what the scenario says without refusing it, one line each for rank 0 to print
// as "note: ...": training.precision fp16 trains in float32 (float64 with --fp64); bf16 runs its GEMMs on bf16
// operands with tensors stored in float32 (Backend::set_bf16_gemm); fp8 emulates Transformer Engine's casts. comm (run's
// --comm; empty: not said): under "mpi" the overlaps' collectives complete inside their calls.
std::vector<std::string> run_notes(const Scenario& sc, bool fp64, const std::string& comm = "");
// plan.overlap_param_gather as run runs it: ZeRO-1/2's updated-parameter all-gathers under the next forward, without
// offload (whose parameters go through the host); otherwise after the optimizer.
bool runs_param_gather_under_forward(const Plan& p);
// The ranks a run of sc takes: its plan's GPUs, or a Pseudo-to-Real pseudo plan's when that has more (the
// other phase runs on the first ones); check_job_ranks throws InputError naming the plan when the job has another
// count.
int job_ranks(const Scenario& sc);
void check_job_ranks(const Scenario& sc, const std::string& file, int world_size);

// training.precision "bf16": whether the plan keeps bf16 copies of the weights (exec/model/gpt.hpp WeightCopies16; the
// runtime and run_bytes_per_rank ask here): not under chunked offload, whose chunks are the weights' only device
// storage (in bf16 where the store keeps bf16 chunks, RankRun::chunk_bf16_slots), nor under Optimus 2D, whose GEMMs
// read broadcast weight blocks (RunOptions::bf16_weight_copies can turn them off).
bool plan_keeps_bf16_weight_copies(const Scenario& sc);
// About the bytes one rank of `trainplan run` allocates (a lower bound: parameters, gradients and Adam state of its
// shard, one micro-batch's activations of its layers, the logits), and the check that it fits in the memory this
// process may allocate, times the ranks that share this machine (Open MPI's local size): InputError
// "... needs about X GB of memory; this machine has Y GB available" (exit 2) before any allocation.
double run_bytes_per_rank(const Scenario& sc, bool fp64);
// on_gpu (--backend cuda): the tensors live in device memory, so the host check is skipped; running out of
// device memory is reported by run_training with the simulator's prediction (exec/runtime/device_oom.hpp).
void check_run_memory(const Scenario& sc, bool fp64, bool on_gpu = false);

// plan.delink: the step that runs first on the delinked (real) model (--delink-step, else delink.tokens over the
// pseudo phase's batch; at least 1). exec/runtime/runtime_step.cpp.
long delink_step_of(const Scenario& sc, const RunOptions& o);

// Runs on every rank of `world` (world.size() must equal the plan's GPUs). Rank 0's result holds the losses.
RunResult run_training(const Scenario& sc, const RunOptions& o, Comm& world);

// The token stream of a run (a token file, or the bundled corpus); token ids must fit the model's vocabulary.
std::vector<uint16_t> load_run_tokens(const std::string& path, long long vocab);

json run_result_to_json(const RunResult& r, const Scenario& sc, const RunOptions& o);

}  // namespace tp::exec
