// plan: how one training step is parallelised (dp x tp x pp, tensor mode 1D/2D, schedule, micro-batching,
// accumulation mode, recompute, ZeRO stage, offload, expert parallelism), and the training run it belongs to.
// Validation against the model and cluster happens in scenario.cpp.
// Invariants after validation: global_batch == dp * microbatch * num_microbatches; tp_mode 2d => tp = q * q;
// ep divides dp and the model's experts; stage_layers is empty or pp positive counts summing to the layers,
// not all equal; offload.layers is sorted, unique and within [0, layers).
#pragma once
#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "hardware.hpp"

namespace tp {

// modular (Lamy-Poirier's MPP): layer l lives on pipeline stage l mod pp (a looping pipeline of one-layer
// chunks); with standard accumulation it runs Megatron's interleaved order, with layered accumulation the
// breadth-first (layer-major) order.
enum class Schedule { gpipe = 0, one_f_one_b = 1, interleaved = 2, modular = 3 };
// selective: Korthikanti et al.'s core attention (nothing under flash attention); selective_op: TorchTitan's
// op-level selective activation checkpointing (selective_ac_option "op": the block's forward reruns in the
// backward except every second bias-free matmul and the attention kernel, whose outputs are kept; see
// sim/op_cost.cpp); full: the whole layer from its input. kRecomputeOrder lists them by growing recompute work.
enum class Recompute { none = 0, selective = 1, full = 2, selective_op = 3 };
inline constexpr Recompute kRecomputeOrder[] = {Recompute::none, Recompute::selective, Recompute::selective_op,
                                                Recompute::full};
inline constexpr int kRecomputes = 4;
enum class TpMode { d1 = 0, d2 = 1 };  // "1d" Megatron column/row parallel; "2d" Optimus SUMMA on a q x q grid
// standard: micro-batch-major (each micro-batch runs all local layers); layered (LGA): layer-major, every
// micro-batch through one layer before the next layer.
enum class GradAccumulation { standard = 0, layered = 1 };
enum class OffloadKind { none = 0, optimizer = 1, granular = 2, chunked = 3 };
// flash: one fused IO-aware kernel (FlashAttention-2/3), no s x s tensor in HBM; unfused: Megatron-LM's 2021
// core (two batched GEMMs, softmax and dropout over the s x s scores).
enum class Attention { flash = 0, unfused = 1 };
const char* attention_name(Attention a);
const char* schedule_name(Schedule s);
const char* recompute_name(Recompute r);
const std::vector<std::string>& recompute_names();  // indexed by the enum's value
// plan.recompute_layers = N of L layers recompute, spread evenly: layer l does when floor((l+1) N / L) >
// floor(l N / L); recomputed_layers_between counts them in [lo, hi). One formula for the simulator and the executor.
inline long long recomputed_layers_between(int recompute_layers, long long layers, long long lo, long long hi) {
  if (recompute_layers < 0 || recompute_layers >= layers) return hi - lo;
  return hi * recompute_layers / layers - lo * recompute_layers / layers;
}
inline bool layer_recomputes(int recompute_layers, long long layers, long long l) {
  return recomputed_layers_between(recompute_layers, layers, l, l + 1) == 1;
}
const char* tp_mode_name(TpMode m);
const char* grad_accumulation_name(GradAccumulation g);
const char* offload_kind_name(OffloadKind k);

// CPU offload (JSON plan.offload = {"kind": ..., ...}).
//  optimizer (ZeRO-Offload): fp32 master weights and Adam moments live in host memory and the Adam step runs
//    on the host CPU; gradients go to the host after the backward, updated fp16 weights come back.
//  granular (M6-10T): the parameters of the chosen layers (or only their experts) live in host memory, are
//    loaded a layer ahead of each use (overlapped with compute), their gradients go back to the host and the
//    host CPU updates them; the other layers stay on the GPU.
//  chunked (PatrickStar): parameters, gradients and optimizer state in fixed-size chunks; a warm-up step
//    records the non-model memory per moment; chunks beyond the GPU budget are evicted (the one used
//    furthest in the future first); Adam is split between the GPU and the host CPU.
struct Offload {
  OffloadKind kind = OffloadKind::none;
  // granular: global layer indices whose parameters live in host memory (resolved from "layers" or
  // "fraction" at validation: sorted, unique).
  std::vector<int> layers;
  double fraction = 0;          // as given ("layers" wins when both are absent: fraction 1 = every layer)
  bool experts_only = false;    // "target": "layers" (whole layers) or "experts" (only MoE expert weights)
  int prefetch_layers = 1;      // how many offloaded layers ahead the host->device loads run
  // chunked
  long long chunk_elements = 64LL << 20;  // chunk capacity in elements (PatrickStar default 64 Mi)
  double gpu_memory_fraction = 0.8;       // usable GPU memory = fraction x HBM ("overall_gpu_mem")
  double warmup_chunk_fraction = 0.1;     // warm-up cap on GPU chunk memory, of the usable memory
  double hybrid_adam_margin = 0.8;        // share of the spare GPU margin given to optimizer-state chunks
  int prefetch_runs = 0;                  // runs ahead whose chunks load during the current run (0: PatrickStar's
                                          // synchronous moves; sim/chunks.hpp "Prefetch")
  bool on() const { return kind != OffloadKind::none; }
};

// The optimizer and its learning-rate schedule (JSON training.optimizer): what a framework's run needs beyond the
// plan (export/). They change no simulated cost. Defaults (docs/export.md): AdamW, lr 3e-4 decaying by cosine to
// lr / 10 over the run, warm-up 1 % of the steps (warmup_steps -1), weight decay 0.1, clipping at 1.0, betas 0.9 /
// 0.95, eps 1e-8; a checkpoint every 1000 steps and a log line every 10.
enum class LrDecay { cosine = 0, linear = 1, constant = 2 };
struct OptimizerSettings {
  double lr = 3e-4;
  double min_lr = -1;             // -1 = lr / 10
  LrDecay decay = LrDecay::cosine;
  long long warmup_steps = -1;    // -1 = 1 % of the run's steps (at least 1)
  double weight_decay = 0.1, grad_clip = 1.0, beta1 = 0.9, beta2 = 0.95, eps = 1e-8;
  double min_lr_value() const { return min_lr >= 0 ? min_lr : lr / 10; }
  long long warmup_of(long long steps) const { return warmup_steps >= 0 ? warmup_steps : std::max(1LL, steps / 100); }
};
const char* lr_decay_name(LrDecay d);

struct Training {
  long long global_batch = 0;  // sequences per optimizer step
  long long seq_len = 0;       // tokens per sequence (defaults to the model's)
  double tokens = 0;           // run length in tokens; 0 = not given (derived from the scaling law)
  double target_loss = 0;      // nats: the run stops at this loss (Kaplan + McCandlish); 0 = not given
  Precision precision = Precision::fp16;
  Precision grad_precision = Precision::fp32;  // main-gradient accumulation / reduction dtype (Megatron default fp32)
  // The framework's kernels: a name in the GPU's "kernel_profiles" whose curves replace the GPU's own (which
  // describe Megatron-Core / Transformer Engine); "" = the GPU's own. Applied to the scenario's GPU at load.
  std::string kernel_profile;
  // fp8 scaling recipe of the fp8 linear layers (models/fp8_recipe.hpp); not given: the framework's default
  // (resolved at load and by set_framework). Costed only under precision fp8.
  std::string fp8_recipe = "delayed";
  bool fp8_recipe_given = false;
  OptimizerSettings optimizer;
  bool optimizer_given = false;      // training.optimizer was in the scenario (echoed by scenario_to_json)
  long long checkpoint_every = 1000; // steps between checkpoints (export)
  long long log_every = 10;          // steps between log lines (export)
};

struct Plan {
  int dp = 1, tp = 1, pp = 1;
  int virtual_stages = 1;      // model chunks per pipeline rank (interleaving)
  long long microbatch = 1;    // sequences per micro-batch
  Schedule schedule = Schedule::one_f_one_b;
  bool sequence_parallel = false;
  Recompute recompute = Recompute::none;
  // Layers that recompute as `recompute` says (full or selective_op); the others recompute nothing. -1: every
  // layer. Spread evenly over the model (layer_recomputes): Megatron-LM's --recompute-method block
  // --recompute-num-layers, TorchTitan's selective_ac_option "k" (every k-th block), fms-fsdp's share p.
  int recompute_layers = -1;
  int zero = 0;                // 0..3: 1 optimizer state, 2 + gradients, 3 + parameters sharded over dp
  bool overlap_grad_reduce = true;  // DP gradient reduction in buckets during the last backward (Megatron's --overlap-grad-reduce)
  // The steady step's forward and backward captured once and replayed as a CUDA graph (Megatron-LM's
  // --enable-cuda-graph): each kernel costs the GPU's graph_kernel_overhead_s instead of kernel_overhead_s
  // (sim), and `trainplan run` captures it (exec/runtime/step_graph.hpp). Plans cuda_graph_blocker allows only.
  bool cuda_graphs = false;
  // Megatron-LM's --tp-comm-overlap (Transformer Engine userbuffers): the sequence-parallel all-gathers and
  // reduce-scatters of the forward and of the row-parallel backward run in pieces under the adjacent GEMM
  // instead of before / after it. Needs sequence_parallel (as Megatron).
  bool tp_comm_overlap = false;
  // Megatron-LM's --overlap-param-gather (ZeRO-1/2, distributed optimizer): the all-gather of the updated
  // parameters is issued bucket by bucket under the next step's first forward instead of after the optimizer.
  bool overlap_param_gather = false;
  TpMode tp_mode = TpMode::d1;
  // 2D grid placement ("tp_grid"): rows (tp rank k at row k / q, column k % q) or node_blocks (Optimus'
  // --rank-rearrange: each node's b x b GPUs, b * b = gpus_per_node, form one block of the grid).
  bool tp_grid_node_blocks = false;
  GradAccumulation grad_accumulation = GradAccumulation::standard;
  Offload offload;
  int ep = 1;                  // expert parallelism: experts of each MoE layer sharded over ep of the dp x cp data ranks
  // context parallelism (Megatron-LM's --context-parallel-size): each sequence split over cp ranks in 2 cp
  // chunks (causal load balancing), K and V exchanged around the cp ring; weights replicated over cp, so
  // gradients are reduced (and ZeRO shards) over the dp x cp data ranks.
  int cp = 1;
  Attention attention = Attention::flash;  // the core's kernel (cost model only; the 2021 published runs: unfused)
  // Uneven pipeline stages: layers of each stage (pp entries summing to the model's layers); empty = layers / pp
  // each. Resolved by validate_plan from "stage_layers" or Megatron's "first_stage_layers" / "last_stage_layers"
  // (given in the two fields below, 0 = not given; the rest split evenly over the middle stages).
  std::vector<int> stage_layers;
  int first_stage_layers = 0, last_stage_layers = 0;
  // Megatron-LM's --account-for-embedding-in-pipeline-split / --account-for-loss-in-pipeline-split: the
  // embedding and the loss each count as one layer when the layers are split into pp x v equal model chunks,
  // so the first (last) chunk holds one transformer layer fewer. Resolved by validate_plan into chunk_layers
  // (per global model chunk, looping order) and stage_layers (their sums per stage).
  bool account_for_embedding = false, account_for_loss = false;
  std::vector<int> chunk_layers;  // empty: every chunk of stage s holds stage_layers[s] / v layers
  int shared_layers = 0;       // not a JSON key: > 0 in a delink pseudo phase (k unique layers shared by all L)
  long long num_microbatches = 1;  // derived: global_batch / (dp * microbatch)
  int gpus() const { return dp * cp * tp * pp; }
  int data_ranks() const { return dp * cp; }  // ranks holding the same weights of a stage (dp x cp)
  int tp_q() const;            // 2D grid side q (tp = q * q); 1 for 1D
};

// Pseudo-to-Real (M6-10T), JSON plan.delink = {"unique_layers", "tokens", "global_batch"?, "plan"?}: a pseudo
// phase trains `unique_layers` weight sets shared by all L positions (group j = layers [j*L/k, (j+1)*L/k))
// for `tokens` tokens with its own plan and batch, then delinks (copies weights and optimizer state into L
// independent layers) and the real phase continues with the scenario's plan and training.
struct Delink {
  int unique_layers = 0;           // 0 = no pseudo phase
  double tokens = 0;               // pseudo-phase token budget (> 0)
  long long global_batch = 0;      // pseudo-phase global batch in sequences (0 = the real phase's)
  std::shared_ptr<struct Plan> plan;  // pseudo-phase plan; null = the real plan
  bool on() const { return unique_layers > 0; }
};

// Layer -> weight group under sharing (identity when shared_layers == 0).
inline long long weight_group(long long layer, long long layers, int shared_layers) {
  return shared_layers > 0 ? layer / (layers / shared_layers) : layer;
}

// Rank layout, Megatron-LM's default order (tp fastest, then cp, then dp, then pipeline stage):
// global = tp_rank + tp * (cp_rank + cp * (dp_rank + dp * stage)). RankCoord.dp is the DATA rank
// d = cp_rank + cp * dp_rank in [0, dp x cp): the ranks of a stage that hold the same weights (gradient
// reductions and ZeRO shards span them); cp group = data ranks [cp * dp_rank, +cp). Without cp, d = dp_rank.
struct RankCoord { int tp, dp, stage; };
inline RankCoord rank_coord(const Plan& p, int g) {
  const int d = p.data_ranks();
  return RankCoord{g % p.tp, (g / p.tp) % d, g / (p.tp * d)};
}
inline int rank_global(const Plan& p, int tp_rank, int data_rank, int stage) {
  return tp_rank + p.tp * (data_rank + p.data_ranks() * stage);
}
// 2D grid inside a TP group (Optimus): tp rank k sits at row k / q, column k % q. The row group (same row)
// is q consecutive ranks; the column group (same column) has stride q.
// With node_blocks, blocks of b x b consecutive tp ranks tile the grid row-major.
struct GridPos { int row, col; };
inline GridPos grid_pos(int tp_rank, int q, int block_side) {
  if (block_side <= 1) return GridPos{tp_rank / q, tp_rank % q};
  int per_block = block_side * block_side, blocks_per_row = q / block_side;
  int blk = tp_rank / per_block, i = tp_rank % per_block;
  return GridPos{(blk / blocks_per_row) * block_side + i / block_side, (blk % blocks_per_row) * block_side + i % block_side};
}
// Expert parallelism inside the data ranks (dp x cp, as Megatron-LM folds EP x EDP = DP x CP): ep group = data
// ranks [(d / ep) * ep, +ep); the expert-data-parallel group (replicas of the same experts) = data ranks with
// the same d % ep.

}  // namespace tp
