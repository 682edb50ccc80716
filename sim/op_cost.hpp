// op_cost: the cost of every op of a transformer layer (and of the embedding and LM-head ends) for one
// micro-batch on one tensor-parallel rank: FLOPs, bytes, time, and the activation bytes it stores.
// Times come only from the GPU profile (matrix peak x efficiency curve by GEMM size; memory-bound ops from
// HBM bandwidth x efficiency by bytes; a per-kernel overhead) and from the TP collective model.
// Invariants: one micro-batch of b sequences of s tokens; tensor shapes per TP rank are noted per op;
// stored activation accounting reproduces Korthikanti et al. 2022 for GPT-style layers (unfused attention).
// plan.attention "flash" replaces the attention core by one fused FlashAttention op each way (attn.flash,
// attn.flash.bwd) with no s x s activation; training.precision "fp8" runs the linear layers' GEMMs in fp8
// with *.fp8_cast ops (docs/techniques.md).
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "collective.hpp"
#include "models/scenario.hpp"

namespace tp {

enum class OpClass { gemm = 0, attention = 1, elementwise = 2, tp_comm = 3, ep_comm = 4 };
inline constexpr int kOpClasses = 5;
const char* op_class_name(OpClass c);

struct Op {
  std::string name;      // e.g. "qkv", "attn.qk", "tp.ar1"; the trace prefixes layer / pass / micro-batch
  OpClass cls;
  double flops = 0;
  double bytes = 0;      // HBM bytes (compute ops) or collective buffer bytes (tp_comm)
  double time_s = 0;     // time on the compute stream (for overlapped comm: only the exposed part)
  double hidden_s = 0;   // comm time hidden under the preceding compute op (overlapped TP comm)
  bool recompute = false;
};

struct PassCost {
  std::vector<Op> ops;
  double time_s = 0;       // sum of op times
  double compute_s = 0;    // gemm + attention + elementwise, not recompute
  double recompute_s = 0;  // recompute ops (compute and their TP comm)
  double tp_comm_s = 0;    // exposed TP comm, not recompute
  double ep_comm_s = 0;    // expert-parallel all-to-alls (dispatch / combine), not recompute
  double flops = 0;        // hardware FLOPs including recompute
  double recompute_flops = 0;  // of which the recompute ops'
  TierBytes tp_bytes;      // TP (and EP all-to-all) collective bytes sent per GPU
  void add(const Op& op);
  void append(const PassCost& other, int times);
};

// Groups of the representative rank that collectives folded into compute ops run over:
// tp = the whole TP group (1D), tp_row / tp_col = its 2D grid row / column (Optimus), ep = its expert-parallel
// group (MoE all-to-alls), cp = its context-parallel group (the K / V ring).
enum class CommGroup { tp = 0, tp_row = 1, tp_col = 2, ep = 3, cp = 4 };
inline constexpr int kCommGroups = 5;

// Collective time (isolated) and per-member bytes, for collectives over one of the representative's groups.
struct TpComm {
  std::function<double(Coll, double, CommGroup)> time_s;
  std::function<TierBytes(Coll, double, CommGroup)> bytes;
};

struct CostModel {
  PassCost layer_fwd, layer_bwd;   // one layer, one micro-batch (bwd includes recompute)
  PassCost embed_fwd, embed_bwd;   // first model chunk only
  PassCost head_fwd, head_bwd;     // last model chunk only (final norm, LM head, loss)
  double layer_stored_bytes = 0;    // activations one layer keeps from its forward to its backward
  double layer_transient_bytes = 0; // extra live during one layer's backward (recomputed activations)
  double embed_stored_bytes = 0, head_stored_bytes = 0;
  // Live beside the stored activations at the end of the head's forward and the start of its backward: the logits'
  // copy in the activations' precision next to their fp32 one (Megatron-LM: the bf16 GEMM output beside its .float()
  // copy, then the gradient's bf16 cast beside the fp32 gradient; the executor: the packed gradient); 0 in fp32.
  double head_transient_bytes = 0;
  double layer_params = 0;          // parameters per GPU of one layer (after TP)
  double embed_params = 0;          // word (+ position) embedding per GPU on the first stage
  double head_params = 0;           // final norm + LM head copy per GPU on the last stage
  double model_flops_per_step = 0;  // 6N-style useful FLOPs of one step over the whole model and batch
  // Mixture of experts: a MoE layer (attention, router, dispatch / combine all-to-alls over ep, local experts).
  int moe_every = 0;                // 0 = dense model; layer l is MoE when (l + 1) % moe_every == 0
  PassCost moe_fwd, moe_bwd;        // one MoE layer, one micro-batch (bwd includes recompute)
  double moe_stored_bytes = 0, moe_transient_bytes = 0;
  double moe_params = 0;            // parameters per GPU of one MoE layer (dense part + local experts, after TP)
  double moe_expert_params = 0;     // of which the local experts' weights (reduced over the expert-dp group)
  // training.precision "fp8": Transformer Engine keeps an fp8 copy (1 byte per weight) of every linear-layer
  // weight next to its bf16 weight (counted in *_params); bytes per GPU of one layer, 0 otherwise. The
  // static-memory code adds them to the weights of each stage (not to gradients or optimizer state).
  double layer_fp8_weight_bytes = 0;  // dense layer: qkv, proj, fc1, fc2 weights (after TP)
  double moe_fp8_weight_bytes = 0;    // MoE layer: qkv, proj and the local experts' fc1, fc2 (not the router)
  // plan.recompute_layers (0 <= N < layers): the layers that do not recompute (models/plan.hpp
  // layer_recomputes) take these backward passes and stored bytes instead; layers = the model's.
  int recompute_layers = -1;
  long long layers = 0;
  PassCost layer_bwd_plain, moe_bwd_plain;
  double layer_stored_plain_bytes = 0, moe_stored_plain_bytes = 0;
  bool partial_recompute() const { return recompute_layers >= 0 && recompute_layers < layers; }
  // The backward pass of layer l (a MoE layer or not) under plan.recompute_layers.
  const PassCost& bwd_of(long long l, bool moe_layer) const {
    const bool rc = !partial_recompute() || layer_recomputes(recompute_layers, layers, l);
    return moe_layer ? (rc ? moe_bwd : moe_bwd_plain) : (rc ? layer_bwd : layer_bwd_plain);
  }
};

// plan.tp_mode 2d: Optimus SUMMA costs (op_cost_2d.cpp). MoE layers (model.moe.experts > 0) fill moe_*; MoE with
// 2D tensor parallelism is not modelled and throws std::invalid_argument.
CostModel build_cost_model(const Scenario& sc, const TpComm& tpc);

// Closed forms used by tests and the planner.
double layer_params_full(const Transformer& m);  // one dense layer, unsharded (weights, biases, norms)
double expert_params_full(const Transformer& m);  // one routed expert MLP, unsharded
// One MoE layer's routed experts held by a rank: E / ep local experts split over tp (the fc2 bias replicated), as
// the simulator's cost model and the executor's memory pre-check count them.
double local_expert_params(const Transformer& m, int ep, int tp);
double moe_layer_params_full(const Transformer& m);  // one MoE layer: attention, norms, router, experts, shared
double total_params(const Transformer& m);  // all parameters (embeddings included, tied counted once; MoE layers)
double active_params(const Transformer& m);  // per token: total less the (experts - top_k) idle experts per MoE layer
double megatron_flops_per_iteration(const Transformer& m, long long batch, long long seq, bool full_recompute);

}  // namespace tp
