// train: the rank runtime of `trainplan run`. See train.hpp.
// The step itself is exec/runtime/runtime_step.cpp (setup: exec/runtime/runtime.cpp); this file holds the checks, the data source and the JSON result.
#include "train.hpp"

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <unistd.h>

#include <csignal>

#include "exec/io/data.hpp"
#include "exec/model/gpt.hpp"
#include "exec/runtime/handover.hpp"
#include "exec/backends/ops.hpp"
#include "models/host_memory.hpp"
#include "sim/op_cost.hpp"
#include "sim/step_formulas.hpp"  // zero_shard

namespace tp::exec {

namespace {
volatile std::sig_atomic_t g_stop_signal = 0;
void on_stop_signal(int sig) { g_stop_signal = sig; }
}  // namespace

void install_stop_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}

int pending_stop_signal() { return (int)g_stop_signal; }

void check_runnable(const Scenario& sc) {
  std::vector<std::string> no;
  auto need = [&](bool ok, const std::string& what) { if (!ok) no.push_back(what); };
  // One plan's keys at `at` ($.plan, or the pseudo phase's $.plan.delink.plan).
  auto check_plan = [&](const Plan& p, const std::string& at) {
    // plan.offload "granular" runs with every ZeRO stage, cp, 2D and delinking (exec/runtime/offload/runtime_granular.hpp).
    // The vocabulary-parallel embedding splits the rows as evenly as it goes (exec/model/gpt.hpp GptShape::v_loc; 2D:
    // over the grid side, each block padded to the longest, exec/model/gpt2d.hpp).
    const int shards = p.tp_mode == TpMode::d2 ? p.tp_q() : p.tp;
    need(shards <= sc.model.vocab, at + ".tp: " + std::to_string(shards) + " vocabulary shards of a vocabulary of " +
                                       std::to_string(sc.model.vocab) + " rows would leave a rank without rows");
    // MoE (exec/model/moe.hpp) runs with every plan kind: expert parallelism over dp, SP, cp, delinking, and each offload.
    // plan.cp runs (exec/model/cp_attention.hpp); the scenario checks already refuse cp with tp_mode "2d".
    need(p.cp == 1 || p.tp_mode == TpMode::d1, at + ".cp with tp_mode \"2d\"");
    // TorchTitan's op-level checkpointing is a framework's policy the simulator and the TorchTitan export model;
    // the executor keeps whole tensors per layer (none / selective / full give the same losses).
    need(p.recompute != Recompute::selective_op, at + ".recompute \"selective_op\"");
  };
  check_plan(sc.plan, "$.plan");
  // fp8 runs Transformer Engine's delayed scaling (exec/model/fp8.hpp); the other recipes are simulated only.
  need(sc.training.precision != Precision::fp8 || sc.training.fp8_recipe == kDefaultFp8Recipe,
       "$.training.fp8_recipe \"" + sc.training.fp8_recipe + "\"" + (sc.training.fp8_recipe_given ? "" : " (the framework's default)") +
           " (run emulates Transformer Engine's \"delayed\" scaling only)");
  // plan.attention runs either way: "flash" as the fused ops (exec/backends/ops.hpp flash_attention_*), "unfused" saving P.
  // precision "fp8" runs the linear layers as emulated fp8 GEMMs (exec/model/fp8.hpp) on every backend and plan.
  // head_dim other than hidden / heads and the SwiGLU models' bias flags are part of the executor's layout
  // (exec/model/gpt.hpp GptShape: D, qkv_bias, proj_bias, mlp_bias).
  if (sc.delink.on() && sc.delink.plan) {
    // A pseudo plan of another layout runs on the first of the job's ranks (job_ranks) and hands its state to
    // the real plan's at the delink (exec/runtime/runtime_relayout.cpp); pp > 1 holds weight-group replicas
    // (RankRun::hold_weight_groups).
    check_plan(*sc.delink.plan, "$.plan.delink.plan");
  }
  if (!no.empty()) {
    std::vector<std::string> msgs;
    for (const std::string& w : no) msgs.push_back(w + ": not supported by `trainplan run` yet (simulate supports it)");
    throw InputError(msgs);
  }
}

bool runs_param_gather_under_forward(const Plan& p) {
  return p.overlap_param_gather && (p.zero == 1 || p.zero == 2) && p.data_ranks() > 1 &&
         p.offload.kind == OffloadKind::none;
}

std::vector<std::string> run_notes(const Scenario& sc, bool fp64, const std::string& comm) {
  std::vector<std::string> notes;
  const Precision p = sc.training.precision;
  if (p == Precision::bf16)
    notes.push_back(std::string("$.training.precision \"bf16\": run computes every GEMM (the linear layers, attention's "
                                "products, the LM head, MoE's experts) on bf16 operands rounded to nearest even, accumulating in ") +
                    (fp64 ? "float64 (--fp64)" : "float32 (bf16 tensor cores on cuda)") +
                    "; each layer's input and saved activations are stored as bf16 from its forward to its "
                    "backward (LayerNorm's and flash's statistics and the router's probabilities stay in " +
                    (fp64 ? "float64" : "float32") + "); the GEMMs read bf16 copies of the weights, made once per "
                    "step from the " + (fp64 ? "float64" : "float32") + " master weights (not under chunked offload "
                    "or Optimus 2D); gradients, Adam state and the tensors between ops stay in " +
                    (fp64 ? "float64" : "float32") + " (no bf16 op table yet), so the element-wise ops run at that "
                    "width");
  if (p == Precision::fp16)
    notes.push_back(std::string("$.training.precision \"") + precision_name(p) + "\": run trains in " +
                    (fp64 ? "float64 (--fp64)" : "float32") +
                    " (the executor has no mixed precision yet), so its losses, step time and memory are " +
                    (fp64 ? "float64's" : "float32's") + ", not " + precision_name(p) + "'s");
  if (p == Precision::fp8)
    notes.push_back(std::string("$.training.precision \"fp8\": run emulates Transformer Engine's fp8 linear layers "
                                "(E4M3 inputs and weights, E5M2 gradients, delayed scaling) by casting each GEMM operand "
                                "to fp8 and back in ") +
                    (fp64 ? "float64" : "float32") + " (exec/model/fp8.hpp): the losses follow fp8's rounding; the GEMMs, step "
                    "time and memory are " + (fp64 ? "float64's" : "float32's") + ", not fp8's" +
                    (fp64 ? "" : " (on cuda with fp8 tensor cores the layers' GEMMs of two casts run on cuBLASLt's fp8 "
                                 "kernels, docs/cuda.md)"));
  // Overlaps the simulator costs but the executor does not run: say so, the results are the same.
  if (sc.plan.overlap_param_gather && sc.plan.offload.kind != OffloadKind::none)
    notes.push_back("$.plan.overlap_param_gather: with offload run all-gathers the updated parameters after the "
                    "optimizer, not under the next step's first forward: the results are the same, the step time is "
                    "not the overlap's the simulator predicts");
  // Overlaps run does, whose collectives a communicator without asynchronous progress completes inside the calls.
  std::string serial;
  if (sc.plan.tp_comm_overlap && sc.plan.sequence_parallel && sc.plan.tp > 1)
    serial = "plan.tp_comm_overlap's pieces run one after another";
  if (runs_param_gather_under_forward(sc.plan))
    serial += std::string(serial.empty() ? "" : " and ") + "plan.overlap_param_gather's all-gathers at the optimizer's end";
  if (comm == "mpi" && !serial.empty())
    notes.push_back("--comm mpi: run's collectives complete inside their calls (host-staged, rank-ordered sums), so " +
                    serial + ": the same results, no overlap (--comm nccl on a device backend overlaps them)");
  return notes;
}

int job_ranks(const Scenario& sc) {
  return std::max(sc.plan.gpus(), sc.delink.on() && sc.delink.plan ? sc.delink.plan->gpus() : 1);
}

void check_job_ranks(const Scenario& sc, const std::string& file, int world_size) {
  const int n = job_ranks(sc);
  if (world_size == n) return;
  const std::string what = n == sc.plan.gpus() ? "$.plan: dp x cp x tp x pp = " + std::to_string(n) + " ranks"
                                               : "$.plan.delink.plan: the pseudo phase's dp x cp x tp x pp = " +
                                                     std::to_string(n) + " ranks (more than the real plan's)";
  throw InputError({file + ": " + what + ", but this job has " + std::to_string(world_size) + " (launch with mpirun -np " +
                    std::to_string(n) + " or srun -n " + std::to_string(n) + ")"});
}

double run_bytes_per_rank(const Scenario& sc, bool fp64) {
  const Plan& p = sc.plan;
  const Transformer& m = sc.model;
  const double e = fp64 ? 8 : 4, tp = p.tp, mb = (double)p.microbatch, s = (double)sc.training.seq_len;
  // MoE: a rank holds E / ep of each MoE layer's experts (exec/model/moe.hpp), counted as the simulator counts them
  const double moe_layers = m.moe.experts > 0 ? (double)m.moe_layers_in(0, m.layers) : 0;
  const double local_experts = moe_layers * local_expert_params(m, p.ep, p.tp) / p.pp;
  const double all_experts = moe_layers * (double)m.moe.experts * expert_params_full(m);
  const double params = (total_params(m) - all_experts) / (tp * p.pp) + local_experts;
  // Weights, gradients and Adam's two moments, each sharded over the data ranks by its ZeRO stage as the
  // simulator shards them (sim/step_formulas.hpp zero_shard; experts over the expert-data-parallel group), and
  // under ZeRO-3 the gathered layer and the next one. The executor reduce-scatters a unit's gradient when its
  // last backward of the step ends, so with several micro-batches in standard accumulation every unit's
  // gradient is whole until then: sharded only under layered accumulation or with one micro-batch.
  const Params pr{params - local_experts, local_experts};
  const int data = p.data_ranks(), edp = std::max(1, data / std::max(1, p.ep));
  const double gathered = p.zero >= 3 && data > 1 ? 2 * layer_params_full(m) / tp : 0;
  const bool grads_sharded = p.grad_accumulation == GradAccumulation::layered || p.num_microbatches <= 1;
  const double grads = grads_sharded ? zero_shard(pr, p.zero, 2, data, edp) : pr.total();
  const double state = e * (zero_shard(pr, p.zero, 3, data, edp) + gathered + grads + 2 * zero_shard(pr, p.zero, 1, data, edp));
  const double layers = (double)m.layers / p.pp;
  const double acts = mb * s * layers * (16.0 * m.hidden / tp + 2.0 * m.heads / tp * s);  // per layer: ~16 h + scores
  const double logits = 2.0 * mb * s * (double)m.vocab / tp;                              // logits and their gradient
  // training.precision "bf16": the saved activations are bf16 (LayerActs::pack_bf16), and the weights have bf16
  // copies (WeightCopies16; counted over every parameter, as Megatron-LM's bf16 parameters)
  const double acts_e = sc.training.precision == Precision::bf16 ? 2 : e;
  return state + (plan_keeps_bf16_weight_copies(sc) ? 2 * params : 0.0) + acts * acts_e + logits * e;
}

bool plan_keeps_bf16_weight_copies(const Scenario& sc) {
  const Plan& p = sc.plan;
  return sc.training.precision == Precision::bf16 && p.offload.kind != OffloadKind::chunked &&
         !(p.tp_mode == TpMode::d2 && p.tp > 1);
}

void check_run_memory(const Scenario& sc, bool fp64, bool on_gpu) {
  if (on_gpu) return;
  double job_local = 1;
  if (const char* v = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE")) job_local = std::max(1.0, std::atof(v));
  // The phase that needs more: Pseudo-to-Real's pseudo plan may hold the model on fewer ranks (its run holds the k
  // weight-group slots; counted here as every layer's, an upper bound); the real plan's run starts while its ranks
  // hold the handover (exec/runtime/handover.hpp): the
  // weights of their units once, their optimizer state's two moments, the pseudo phase's copies of record (at
  // most a tp x pp share, three values each) and one window of two values.
  double local = std::min(job_local, (double)sc.plan.gpus()), bytes = local * run_bytes_per_rank(sc, fp64);
  if (sc.delink.on()) {
    Scenario ps = sc;
    if (sc.delink.plan) ps.plan = *sc.delink.plan;
    const double lp = std::min(job_local, (double)ps.plan.gpus()), pseudo_bytes = lp * run_bytes_per_rank(ps, fp64);
    const double total = total_params(sc.model), held = total / (sc.plan.tp * sc.plan.pp);
    const double own = sc.plan.zero >= 1 ? held / sc.plan.dp : held;
    const double handover = (held + 2 * own + 3 * total / (ps.plan.tp * ps.plan.pp) +
                             2 * std::min(total, (double)detail::default_handover_window)) * (fp64 ? 8 : 4);
    bytes += std::min(job_local, (double)job_ranks(sc)) * handover;
    if (pseudo_bytes > bytes) local = lp, bytes = pseudo_bytes;
  }
  char ranks[64];
  std::snprintf(ranks, sizeof ranks, "%.0f rank%s", local, local == 1 ? "" : "s");
  require_memory(std::string("training this model (") + ranks + " on this machine, " + (fp64 ? "fp64" : "fp32") + ")",
                 bytes);
}

// The run's token stream: the given llm.c token file, or the bundled tiny corpus (byte tokens).
std::vector<uint16_t> load_run_tokens(const std::string& path, long long vocab) {
  std::vector<uint16_t> t;
  try {
    t = read_tokens(path.empty() ? ensure_corpus_tokens() : path);
  } catch (const std::runtime_error& e) {  // a user's token file that is missing, truncated or not one: bad input
    if (path.empty()) throw;
    throw InputError({std::string("--data ") + e.what()});
  }
  uint16_t mx = 0;
  for (uint16_t x : t) mx = std::max(mx, x);
  if ((long long)mx >= vocab)
    throw InputError({(path.empty() ? std::string("the bundled corpus") : path) + ": token id " + std::to_string(mx) +
                      " is outside the model's vocabulary (" + std::to_string(vocab) + ")"});
  return t;
}

json run_result_to_json(const RunResult& r, const Scenario& sc, const RunOptions& o) {
  json j = {{"scenario", scenario_to_json(sc)},
          {"precision", o.fp64 ? "fp64" : "fp32"},
          {"steps", o.steps},
          {"seed", o.seed},
          {"losses", r.losses},
          {"grad_norm", r.grad_norm},
          {"step_time_s", r.step_time_s},
          {"tokens_per_s", r.tokens_per_s},
          {"device_step_time_s", r.device_step_time_s},
          {"peak_memory_bytes", r.peak_memory_bytes},
          {"peak_host_memory_bytes", r.peak_host_memory_bytes},
          {"param_elements", r.param_elements},
          {"moment_elements", r.moment_elements},
          {"delink_step", r.delink_step},
          {"first_step", r.first_step},
          {"graph_steps", r.graph_steps}};
  if (r.stop_signal) j["stopped_by_signal"] = r.stop_signal;
  if (!r.last_checkpoint.empty()) j["last_checkpoint"] = r.last_checkpoint;
  if (r.offload.on && r.offload.kind != "chunked") {  // exec/runtime/offload/host_optimizer.hpp, exec/runtime/offload/runtime_granular.hpp
    const OffloadResult& f = r.offload;
    j["offload"] = {{"kind", f.kind}, {"h2d_bytes", f.h2d_bytes}, {"d2h_bytes", f.d2h_bytes},
                    {"host_state_bytes", f.host_state_bytes}};
    if (f.kind == "granular") j["offload"]["peak_loaded_bytes"] = f.peak_loaded_bytes;
    if (f.kind == "optimizer") j["offload"]["early_d2h_bytes"] = f.early_d2h_bytes;
  } else if (r.offload.on) {
    const OffloadResult& f = r.offload;
    j["offload"] = {{"kind", "chunked"},
                    {"budget_bytes", f.budget_bytes},
                    {"arena_bytes", f.arena_bytes},
                    {"chunk_elements", f.chunk_elements},
                    {"chunks", f.chunks},
                    {"chunk_bytes", f.chunk_bytes},
                    {"h2d_bytes", f.h2d_bytes},
                    {"d2h_bytes", f.d2h_bytes},
                    {"h2d_s", f.h2d_s},
                    {"d2h_s", f.d2h_s},
                    {"h2d_moves", f.h2d_moves},
                    {"d2h_moves", f.d2h_moves},
                    {"adam_h2d_bytes", f.adam_h2d_bytes},
                    {"adam_d2h_bytes", f.adam_d2h_bytes},
                    {"peak_arena_bytes", f.peak_arena_bytes},
                    {"peak_arena_bytes_max", f.peak_arena_bytes_max},
                    {"peak_device_bytes", f.peak_device_bytes},
                    {"peak_device_bytes_max", f.peak_device_bytes_max},
                    {"os_device_bytes", f.os_device_bytes},
                    {"prefetch_h2d_bytes", f.prefetch_h2d_bytes},
                    {"prefetch_d2h_bytes", f.prefetch_d2h_bytes}};
  }
  return j;
}

}  // namespace tp::exec
