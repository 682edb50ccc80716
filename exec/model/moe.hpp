// moe: the executor's mixture-of-experts MLP with expert parallelism (the MLP half of a MoE layer of exec/model/gpt.hpp),
// as the simulator costs it (sim/op_cost.cpp "MoE layer"; models/transformer.hpp Moe):
//  - router: logits = ln2 x router_w [C, E] (no bias), softmax, top-k, gates renormalised over the k choices when
//    k > 1 (GShard; k = 1 keeps the raw probability, Switch); capacity per expert and micro-batch of this rank:
//    cap = ceil(capacity_factor x k x N / E) tokens (moe_capacity); copies beyond it are dropped (the token then
//    gets only its kept copies; with none its MLP output is 0 and the residual carries it);
//  - load-balancing loss (Switch / GShard): aux = E sum_e f_e P_e per layer and micro-batch (ops::moe_route),
//    weighted by model.moe.aux_loss_coeff (default 0.01, Switch Transformer's alpha) / micro-batches of the
//    global batch, so the objective is mean cross-entropy + coeff x mean over micro-batches of the summed
//    layers' aux. The reported loss is the cross-entropy alone;
//  - dispatch: the capacity-padded copies [E, cap, C] (expert e = ep rank e / El, El = E / ep local experts) go to
//    their ep rank with one all-to-all over the ep group (blocks of El cap C); each rank runs its El experts on
//    ep x cap rows each (padding rows compute and are discarded, as the simulator counts); a second all-to-all
//    returns the outputs, which are combined with the gates.
// Expert parallelism lies inside data parallelism (Megatron-LM): ep group = ep consecutive dp ranks of one
// (stage, tp rank); ep rank r = dp rank % ep. Experts are sharded over ep: a rank's layout (gpt_layout with
// GptShape::ep / ep_rank) holds only its El local experts [r El, (r+1) El) as the MoE layer's last views, so it
// allocates, updates and checkpoints only those (parameters, gradients, Adam moments, ZeRO slices). The runtime
// (exec/runtime/runtime_rank.hpp, exec/runtime/model_flat.hpp Unit) reduces and ZeRO-shards a MoE layer's dense part over the dp group
// and its experts over the expert-data-parallel group (the dp / ep ranks with the same ep rank), as the
// simulator counts them (sim/step_formulas.hpp Params, zero_shard).
// Tensor parallelism: each expert's fc1 columns / fc2 rows are split like the dense MLP's (shard_params).
//  - without SP every tp rank routes all N tokens (the same decisions: ln2 is replicated) and all-reduces the
//    experts' outputs over tp before their bias, and their input gradients in the backward (the simulator routes
//    1/t of the tokens per tp rank with all-gathers over tp: the same arithmetic, other collectives);
//  - with SP (as the simulator costs it) each tp rank routes its own N/t rows (a routing group: capacity and
//    load-balancing loss over them, the loss weighing 1/t of the micro-batch's), dispatches them over ep, and
//    the experts' inputs are all-gathered over tp before fc1 ([t E cap, C], tp-rank major) and their outputs
//    reduce-scattered after fc2; the backward all-gathers the output gradients, re-gathers the saved inputs
//    and reduce-scatters the input gradients. The router's and ex_b2's gradients are then partial per tp rank
//    (the runtime sums them with the other SP-replicated gradients).
// Shared experts (model.moe.shared_ffn_hidden > 0, DeepSeek / Qwen-MoE): a dense MLP of every token beside the
// routed experts (Gpt::layer_fwd: the dense MLP's code, views sh_fc*, split over tp like it; under SP on the
// gathered ln2), its output added to the routed one; its parameters are in the layer's dense part (reduced over dp).
// Context parallelism: each cp rank routes its own rows (its two chunks of every sequence of the micro-batch: a
// routing group, capacity and load-balancing loss over them, weighing 1/cp of the micro-batch's loss, as the
// simulator counts capacity per rank); the MLP is token-local, so nothing else changes.
// Invariants: N is this rank's routed tokens.
#pragma once
#include <cmath>

#include "exec/model/gpt.hpp"

namespace tp::exec {

// Tokens one expert takes from a micro-batch of n tokens on one rank (models/transformer.hpp, the simulator's too).
inline long moe_capacity(long n, long long experts, long long top_k, double capacity_factor) {
  return (long)moe_capacity_tokens(n, experts, top_k, capacity_factor);
}

// x_out[N, C] = MoE MLP of a.ln2 (overwritten; the caller adds the residual). Saves the router and expert
// activations in `a` (m_*, fc1, act).
// wl: the weight group (the fp8 casts' slots, exec/model/fp8.hpp).
template <class T>
void moe_mlp_fwd(const Gpt<T>& g, int wl, const LayerParams& W, LayerActs<T>& a, T* x_out, long N);
// dln[N, C] = gradient w.r.t. a.ln2 (overwritten) from dz[N, C]; accumulates the router's and the local experts'
// weight gradients (aux loss included). Consumes the MoE activations and a.ln2.
template <class T>
void moe_mlp_bwd(const Gpt<T>& g, int wl, const LayerParams& W, LayerActs<T>& a, const T* dz, T* dln, long N);

}  // namespace tp::exec
