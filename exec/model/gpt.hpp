// exec/model/: the model the executor trains, per op against exec/backends/ops.hpp: the GPT (this file; gpt.cpp,
// gpt_layout.cpp, gpt_bf16.cpp), its Optimus 2D form (gpt2d), MoE layers (moe), context parallelism
// (cp_attention) and fp8's delayed scaling (fp8).
// gpt: the executor's GPT, written per op against exec/backends/ops.hpp (no autograd): token (+ learned position)
// embeddings, pre-LayerNorm blocks with causal grouped-query attention and a GELU or SwiGLU MLP, a final
// LayerNorm and a tied LM head with softmax cross-entropy. The same architecture the simulator costs
// (models/transformer.hpp): "gelu" = GPT-2 style (biases, learned positions, LayerNorm with bias);
// "swiglu" = Llama style MLP without biases, no position table, LayerNorm without bias.
// Parameters live in ONE flat buffer in module order (embedding, layer 0 .. L-1, final norm) with named views,
// so optimizers, ZeRO sharding, chunks and checkpoints work on contiguous ranges. Weights are [in, out]
// row-major (y = x W). Pieces of the forward and backward are separate functions (embedding, one layer, the
// head) so that the runtime composes them in any schedule order.
// Tensor parallelism (Megatron 1D): a rank holds heads [r H/t, (r+1) H/t) of Q and the matching KV heads,
// columns [r F/t, (r+1) F/t) of fc1 and rows of proj / fc2; `tp` (may be null) all-reduces the row-parallel
// outputs in the forward and the column-parallel input gradients in the backward. The vocabulary is split
// too (VocabParallelEmbedding): rank r holds wte rows [r V/t, (r+1) V/t); the embedding all-reduces (SP:
// reduce-scatters) the masked lookups and the head computes the cross-entropy over the vocabulary shards with
// all-reduces of the row max, the sum of exponentials and the target logit. The position table is replicated.
#pragma once
#include <algorithm>
#include <cstdint>
#include <memory>
#include <new>
#include <type_traits>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "exec/backends/backend.hpp"
#include "exec/comm/comm.hpp"
#include "exec/model/cp_attention.hpp"
#include "models/transformer.hpp"

namespace tp::exec {

struct GptShape {
  long long layers = 0, C = 0, H = 0, Hkv = 0, D = 0, F = 0, V = 0, maxT = 0;
  bool gelu = true;  // GELU MLP, LayerNorm biases and learned positions (GPT-2); else SwiGLU, RMS-style norms
  bool qkv_bias = false, proj_bias = false, mlp_bias = false;  // SwiGLU models' biases (gelu models have all)
  int tp = 1, tp_rank = 0;
  // Mixture of experts (exec/model/moe.hpp; experts == 0: dense): layer l is a MoE layer when (l + 1) % moe_every == 0.
  long long experts = 0, top_k = 1, Fe = 0, moe_every = 1;
  double capacity_factor = 1.0;
  // Expert parallelism: this rank holds experts [ep_rank El, (ep_rank + 1) El), El = experts / ep (el()).
  int ep = 1, ep_rank = 0;
  long long Fs = 0;  // shared experts' inner size (one always-on MLP per MoE layer; 0: none)
  bool is_moe(long long l) const { return experts > 0 && (l + 1) % moe_every == 0; }
  long long el() const { return experts / ep; }
  long long fs_loc() const { return Fs / tp; }  // the shared experts' inner columns on this tp rank
  long long fs1_cols() const { return (gelu ? 1 : 2) * fs_loc(); }
  long long fe_loc() const { return Fe / tp; }  // an expert's inner columns on this tp rank
  long long fe1_cols() const { return (gelu ? 1 : 2) * fe_loc(); }
  // Local (this tp rank's) sizes.
  long long h_loc() const { return H / tp; }
  long long hkv_loc() const { return Hkv / tp; }
  long long f_loc() const { return F / tp; }
  // Vocabulary-parallel embedding / LM head (Megatron): with tp > 1 rank r holds rows [v_begin, v_begin + v_loc)
  // of wte, V split as evenly as it goes (the first V % t ranks one row more), so no rank is without rows while
  // V >= t (train.cpp refuses fewer rows than ranks). No padding rows (Megatron pads the vocabulary and trains
  // the padded classes too): every rank's logits are real classes, so the model is the single-rank one.
  long long v_begin() const { return tp_rank * (V / tp) + std::min<long long>(tp_rank, V % tp); }
  long long v_loc() const { return V / tp + (tp_rank < V % tp ? 1 : 0); }
  long long qkv_cols() const { return (h_loc() + 2 * hkv_loc()) * D; }
  long long fc1_cols() const { return (gelu ? 1 : 2) * f_loc(); }
  bool has_qkv_bias() const { return gelu || qkv_bias; }
  bool has_proj_bias() const { return gelu || proj_bias; }
  bool has_mlp_bias() const { return gelu || mlp_bias; }
};
GptShape gpt_shape(const Transformer& m, long long seq_len, int tp = 1, int tp_rank = 0);

struct ParamView {
  std::string name;  // "wte", "wpe", "L03.qkv_w", "lnf_w", ...
  long long offset = 0, count = 0;
  int layer = -1;    // -1 for embedding / head tensors
  bool decay = true; // weight decay applies (matrices), not to biases and norms
  long long rows = 1, cols = 0;  // this rank's block as [rows, cols] (matrices [in, out]; vectors rows = 1)
};

// Name -> view index of a parameter layout (1D and 2D), so the op pieces look parameters up in O(1).
struct ViewNames {
  std::unordered_map<std::string, size_t> index;
  void build(const std::vector<ParamView>& views);
  size_t find(const std::string& name) const;  // throws std::logic_error when absent
};

// The model's parameters as view indices (into the layout's views, whose rows x cols are the shapes), resolved
// once from the names so that the pieces do no string look-ups on the hot path; -1 where the model has no such
// tensor (biases and wpe under SwiGLU).
struct LayerParams {
  int ln1_w = -1, ln1_b = -1, qkv_w = -1, qkv_b = -1, proj_w = -1, proj_b = -1;
  int ln2_w = -1, ln2_b = -1, fc1_w = -1, fc1_b = -1, fc2_w = -1, fc2_b = -1;
  // MoE layers (instead of fc*): router [C, E]; this rank's El local experts stacked (the layer's last views):
  // ex_w1 [El C, Fe1], ex_b1 [El, Fe1], ex_w2 [El Fe, C], ex_b2 [El, C] (biases as the dense MLP's).
  int router_w = -1, ex_w1 = -1, ex_b1 = -1, ex_w2 = -1, ex_b2 = -1;
  // MoE layers with shared experts: sh_fc1_w [C, Fs1], sh_fc1_b [Fs1], sh_fc2_w [Fs, C], sh_fc2_b [C] (the dense
  // MLP's shapes and tp split with Fs inner columns), between the router and the experts.
  int sh_w1 = -1, sh_b1 = -1, sh_w2 = -1, sh_b2 = -1;
};
struct ModelParams {
  int wte = -1, wpe = -1, lnf_w = -1, lnf_b = -1;
  std::vector<LayerParams> layers;
};
ModelParams model_params(const ViewNames& names, long long layers);

struct WeightCopies16;  // below

// Where the parameters and gradients of a model's views are (shared by Gpt and Gpt2d). Per-view pointer
// tables (index = view index; may be null): the runtime sets them to the flat-buffer addresses, and chunked
// offload (exec/runtime/offload/chunk_store.hpp) moves them to the device arena while a view's chunk is resident. Null tables:
// params / grads + offset.
template <class T>
struct ParamTables {
  T* params = nullptr;  // flat parameters (lay.total)
  T* grads = nullptr;   // flat gradients (accumulated)
  T* const* ptab = nullptr;
  T* const* gtab = nullptr;
  WeightCopies16* w16 = nullptr;  // bf16 storage of the weights (null: off; Gpt::p16)
  // training.precision "bf16": the embedding lookup reads wte's bf16 values, as the tied LM head's GEMM does (wte's
  // copy where the model keeps one, Gpt::p16; else the looked-up rows rounded), and the positions (wpe) as T.
  bool bf16_lookup = false;
  template <class Lay>
  T* param_of(const Lay& lay, const std::string& name) const {
    size_t i = lay.view_index(name);
    return ptab ? ptab[i] : params + lay.views[i].offset;
  }
  template <class Lay>
  T* grad_of(const Lay& lay, const std::string& name) const {
    size_t i = lay.view_index(name);
    return gtab ? gtab[i] : grads + lay.views[i].offset;
  }
  // By view index (ModelParams), i >= 0.
  template <class Lay>
  T* param_at(const Lay& lay, int i) const { return ptab ? ptab[i] : params + lay.views[i].offset; }
  template <class Lay>
  T* grad_at(const Lay& lay, int i) const { return gtab ? gtab[i] : grads + lay.views[i].offset; }
};

// Parameter layout of one tp rank: views into the flat buffer, per-layer ranges.
struct GptLayout {
  GptShape s;
  std::vector<ParamView> views;
  long long total = 0;
  std::vector<long long> layer_begin, layer_end;  // per layer: [begin, end) in the flat buffer
  // per layer: where its local experts begin (they end at layer_end: [expert_begin, layer_end) are the ex_*
  // views, reduced over the expert-data-parallel group); layer_end for a dense layer
  std::vector<long long> expert_begin;
  long long embed_begin = 0, embed_end = 0, head_begin = 0, head_end = 0;
  ViewNames names;
  ModelParams params;  // the views by role
  const ParamView& view(const std::string& name) const { return views[view_index(name)]; }
  size_t view_index(const std::string& name) const { return names.find(name); }
};
// The layout of tp rank s.tp_rank and ep rank s.ep_rank (only the local experts' views are this rank's).
GptLayout gpt_layout(const GptShape& s);
// Per view of lay: 1 for the weights the 1D model reads only as their bf16 copies when it has them (Gpt::p16: the
// layers' QKV, projection, MLP and experts' matrices, and wte, which the LM head and the lookup read so), 0 for the
// rest (norms, biases, the positions, the router: read as T). Optimizer offload's bf16 working weights keep the
// former only as bf16 on the device.
std::vector<char> gemm_weight_views(const GptLayout& lay);

// Deterministic GPT-2 initialisation of the FULL (tp = 1) parameters from `seed`: N(0, 0.02) matrices, residual
// projections scaled by 1/sqrt(2 L), zero biases, unit norm weights. Every rank derives its shard from the same
// full tensors (shard_params), so any plan starts from the single-rank weights.
template <class T>
std::vector<T> init_full_params(const GptShape& full, uint64_t seed);
// One view of it (v: a view of gpt_layout(full); v.count values into dst), so a rank can shard view by view.
template <class T>
void init_full_view(const GptShape& full, const ParamView& v, uint64_t seed, T* dst);
// The tp shard of full parameters (layout `shard` with shard.s.tp = t) from the full buffer (layout `full`), with
// the local experts of ep rank shard.s.ep_rank.
template <class T>
std::vector<T> shard_params(const GptLayout& full, const std::vector<T>& full_params, const GptLayout& shard);
// One view of it: view v of a shard with shape s from its full view fv (full_view: fv's first element).
template <class T>
void shard_view(const GptShape& s, const ParamView& v, const ParamView& fv, const T* full_view, T* dst);

// The allocator of tensor buffers: memory of the backend that was current when the container was made
// (exec/backends/backend.hpp; kept with the container, so it is freed by the backend that allocated it), and resize()
// leaves new elements uninitialised (default-init) instead of zero-filling them on the host: activations and
// scratch are always written (by ops) before they are read. Constructing elements from values (assign from
// iterators, a fill value) writes them on the host: only for host-accessible backends.
template <class T>
struct NoInitAlloc {
  using value_type = T;
  using propagate_on_container_copy_assignment = std::true_type;
  using propagate_on_container_move_assignment = std::true_type;
  using propagate_on_container_swap = std::true_type;
  using is_always_equal = std::false_type;
  template <class U> struct rebind { using other = NoInitAlloc<U>; };
  const Backend* be;
  NoInitAlloc() noexcept : be(&current_backend()) {}
  template <class U> NoInitAlloc(const NoInitAlloc<U>& o) noexcept : be(o.be) {}
  T* allocate(std::size_t n) {
    if (n == 0) return nullptr;
    void* p = be->alloc(n * sizeof(T));
    if (!p) throw std::bad_alloc();
    return static_cast<T*>(p);
  }
  void deallocate(T* p, std::size_t) noexcept { be->free(p); }
  template <class U> void construct(U* p) noexcept { ::new ((void*)p) U; }
  template <class U, class... A> void construct(U* p, A&&... a) { ::new ((void*)p) U(std::forward<A>(a)...); }
  template <class U> bool operator==(const NoInitAlloc<U>& o) const noexcept { return be == o.be; }
  template <class U> bool operator!=(const NoInitAlloc<U>& o) const noexcept { return be != o.be; }
};
template <class T>
using Buf = std::vector<T, NoInitAlloc<T>>;

// bf16 storage of the weights (training.precision "bf16", exec/runtime/runtime_rank.hpp): the weight matrices' bf16 copies,
// which the GEMMs read (ops::matmul16, linear_fwd's w16). They are Megatron-LM's bf16 parameters; the T parameters are
// the optimizer's master copy, and gradients accumulate in T (Megatron's fp32 main gradients). A view's copy is made
// (ops::pack_bf16) at its first use in a step, from wherever the view's parameters then are (ParamTables), so a copy
// is the bf16 rounding of the weights the T GEMM would read, and training gives the same results with copies as
// without (bf16 GEMM operands round the same values). Invariant: a copy is only used in the step it was made in (the
// runtime calls next_step() before each step: the optimizer has changed the weights), and the runtime drops a
// view's copy when it releases that view's parameters (ZeRO-3's gathered layers, granular offload's loaded copies),
// so a copy is held no longer than the weights it copies. A held copy (hold) is the view's only device storage
// (optimizer offload's bf16 working weights, exec/runtime/runtime_rank.hpp host_master): the runtime writes it from the
// host's master copy after each optimizer step, and of() returns it as it is. An external copy (at) is another
// owner's bf16 storage of the view (chunked offload's bf16 chunk slots, exec/runtime/offload/chunk_store.hpp), set
// while it is valid (its chunk resident) and returned as it is; null: none.
struct WeightCopies16 {
  std::vector<Buf<uint16_t>> copy;  // per view (empty: none)
  std::vector<long> made;           // per view: the step its copy was made in
  std::vector<char> held;           // per view: written by the runtime, never made here
  std::vector<const uint16_t*> at;  // per view: an external copy (null: none)
  long step = 0;
  explicit WeightCopies16(size_t views) : copy(views), made(views, -1), held(views, 0), at(views, nullptr) {}
  void next_step() { ++step; }
  void drop(size_t v) { Buf<uint16_t>().swap(copy[v]); }
  // View v's n elements as a held copy (allocated here, written by the caller).
  uint16_t* hold(size_t v, long long n) {
    copy[v].resize((size_t)n);
    held[v] = 1;
    return copy[v].data();
  }
  // View v's copy, made from its n parameters at src unless it is this step's (or held: src unused, may be null).
  template <class T>
  const uint16_t* of(size_t v, const T* src, long long n);
  size_t bytes() const;
};

// C = op(A) op(B) + beta C (alpha 1), each operand read as its bf16 copy where that is given (A16: a saved activation
// still packed, LayerActs::packed; B16: a weight's copy, Gpt::p16; ops::matmul16), else as T (ops::matmul).
template <class T>
void gemm16(T* C, const T* A, const uint16_t* A16, const T* B, const uint16_t* B16, long M, long N, long K, bool ta,
            bool tb, T beta) {
  if (A16 || B16) ops::matmul16(C, A16 ? nullptr : A, A16, B16 ? nullptr : B, B16, M, N, K, ta, tb, T(1), beta);
  else ops::matmul(C, A, B, M, N, K, ta, tb, T(1), beta);
}

// A GEMM operand with its fp8 cast's scale and format (training.precision "fp8": Gpt::f8q); scale: the cast's
// {scale, 1 / scale} in the backend's memory (exec/model/fp8.hpp), null: not a cast (fp8 off, or the operand given
// otherwise).
template <class T>
struct Q8 {
  const T* p = nullptr;
  const T* scale = nullptr;
  int format = 0;
};
// The operand's rows from element `off` on (the same cast, scale and format); a null operand stays null.
template <class T>
Q8<T> q8_at(Q8<T> q, long off) {
  if (q.p) q.p += off;
  return q;
}
// gemm16 of A (or A16) and B (or B16); when both are fp8 casts, ops::matmul_fp8 on them (fp8 GEMMs where the backend
// has them; the same product as gemm16's elsewhere).
template <class T>
void gemm8(T* C, Q8<T> A, const uint16_t* A16, Q8<T> B, const uint16_t* B16, long M, long N, long K, bool ta, bool tb,
           T beta) {
  if (A.scale && B.scale && !A16 && !B16)
    ops::matmul_fp8(C, A.p, A.scale, A.format, B.p, B.scale, B.format, M, N, K, ta, tb, T(1), beta);
  else
    gemm16(C, A.p, A16, B.p, B16, M, N, K, ta, tb, beta);
}
// ops::linear_fwd; when both operands are fp8 casts, its contract's three ops with matmul_fp8 as the GEMM.
template <class T>
void linear8(T* y, T* pre, Q8<T> x, const uint16_t* x16, Q8<T> w, const uint16_t* w16, const T* b, long M, long N,
             long K) {
  if (!x.scale || !w.scale || x16 || w16) return ops::linear_fwd(y, pre, x.p, x16, w.p, w16, b, M, N, K);
  T* z = pre ? pre : y;
  ops::matmul_fp8(z, x.p, x.scale, x.format, w.p, w.scale, w.format, M, N, K, false, false, T(1), T(0));
  if (b) ops::add_bias(z, z, b, M, N, static_cast<const T*>(nullptr));
  if (pre) ops::gelu_fwd(y, pre, M * N);
}

// b's elements, or null when b is empty (an optional packed operand).
inline const uint16_t* data16(const Buf<uint16_t>& b) { return b.empty() ? nullptr : b.data(); }

// Sequence-parallel row shards: rank r of `tp` holds rows [r n/t, (r+1) n/t) of an [n, C] tensor.
template <class T>
void gather_rows(Comm* tp, const T* shard, T* full, long rows_loc, long C) {
  tp->all_gather(shard, full, rows_loc * C, dtype_of<T>());
}
template <class T>
void reduce_scatter_rows(Comm* tp, const T* full, T* shard, long rows_loc, long C) {
  tp->reduce_scatter_sum(full, shard, rows_loc * C, dtype_of<T>());
}

// Saved activations of one layer for one micro-batch (sizes per tp rank); the backward needs them (or a
// recompute of the layer from its input). Gpt::layer_bwd consumes them: it releases (or reuses as gradient
// scratch) each saved tensor once it is no longer needed, as an autograd engine frees saved tensors.
template <class T>
struct LayerActs {
  Buf<T> x_in;                         // [N, C] layer input (kept even with full recompute)
  // att: flash's statistics; q: under flash without cp the whole QKV output [N, Q] (read in place; k, v empty)
  Buf<T> ln1, ln1_mean, ln1_rstd, q, k, v, att, attn, x_mid, ln2, ln2_mean, ln2_rstd, fc1, act;
  // MoE layers (exec/model/moe.hpp): router probabilities [N, E], gates [N, k], slots [N, k], the experts' inputs
  // (received, [E cap, C]) and their outputs back at the router ([E cap, C]); fc1 / act hold the experts'.
  Buf<T> m_probs, m_gate, m_xe, m_ye;
  Buf<int32_t> m_slot;
  Buf<T> s_fc1, s_act;  // MoE layers' shared experts: fc1 output, activation [N, Fs1 / Fs local]
  // bf16 storage (training.precision "bf16", exec/runtime/runtime_step.cpp): from the end of the layer's forward to the
  // start of its backward the saved tensors are held as bf16 (ops::pack_bf16), half their bytes. LayerNorm's
  // statistics, flash's softmax statistics (att when att_is_stats) and the router's probabilities and gates stay
  // in T, as Megatron-LM keeps them in fp32. pack_bf16 moves each such nonempty tensor into b16 (its T buffer
  // freed); unpack_bf16 moves them back, each value now rounded to bf16.
  // Fields the 1D model's forward packed (or wrote packed) for a backward that reads them so (bit i: b16[i]) stay
  // packed through unpack_bf16 until released: ln1, ln2 and act (dense layers), and attn (unfused), the
  // weight-gradient GEMMs' A operands (ops::matmul16, through packed()); under GELU fc1 (gelu_bwd_bias16); under
  // flash without CP the fused QKV output q and attn (flash_attention_bwd16); x_in and x_mid, LayerNorm's
  // backwards' inputs (layernorm_bwd16; a full recompute unmarks x_in, clear_all_but_input). The forward marks them only under
  // Gpt::pack_operands16 (a MoE layer's experts and Optimus 2D mark none): what the forward marked, the backward
  // reads packed, and everything else is unpacked.
  std::vector<Buf<uint16_t>> b16;  // per packed field, in gpt.cpp bf16_fields' order (empty: not packed)
  uint32_t stay16 = 0;
  void pack_bf16(bool att_is_stats);
  // field (one of the packed fields) packed now, its T buffer freed; returns the copy (Gpt::pack_operands16).
  // stays: the backward reads it packed (stay16).
  const uint16_t* pack_now(Buf<T>& field, bool stays = false);
  // field (one of the packed fields, still in T) marked to stay packed once pack_bf16 has packed it (stay16).
  void stays_packed(const Buf<T>& field);
  // field's copy of n elements, to be written packed by the forward (no T value ever; it stays, as above).
  uint16_t* out16(Buf<T>& field, size_t n);
  // x_in rounded to bf16 in place (the layer computes from the input it saves), its packed copy kept beside it, so
  // pack_bf16 takes that copy instead of packing x_in again. Invariant: x_in is not changed until pack_bf16 (the
  // forward only reads it); a field whose copy is present when pack_bf16 runs is taken as packed and unchanged.
  void round_input();
  void unpack_bf16(bool att_is_stats);
  const uint16_t* packed(const Buf<T>& field) const;  // field's bf16 copy while packed, else null
  void release_packed(const Buf<T>& field);
  // (full recompute) everything but x_in and its packed copy freed, and nothing marked to stay packed: the backward's
  // unpack_bf16 gives the recomputed forward x_in in T, and that forward marks what it saves again.
  void clear_all_but_input();
  size_t bytes() const;
};
// x rounded to bf16 in place (pack, then unpack): a bf16-stored layer input, so a recompute from the saved input
// sees what the forward saw.
template <class T>
void round_bf16(Buf<T>& x);
template <class T>
void round_bf16(T* x, long n);

// Activations of the head for one micro-batch.
template <class T>
struct HeadActs {
  Buf<T> x_in, lnf, lnf_mean, lnf_rstd, probs;
};

struct Fp8State;                 // exec/model/fp8.hpp
enum class Fp8Operand : int;     // x, w, dy

// Sequence parallelism (Megatron SP, `sp` with tp > 1): between the attention and MLP blocks activations are
// split by rows over the tp ranks (rank r holds rows [r N/t, (r+1) N/t) of the flattened [B*Tn, C]): LayerNorm,
// biases and residuals run on the shard; an all-gather precedes each column-parallel linear and a
// reduce-scatter replaces each row-parallel all-reduce. The pieces then take and return row shards; LayerNorm
// and row-parallel bias gradients of the layers are partial per rank (the runtime all-reduces them over tp).
template <class T>
struct Gpt : ParamTables<T> {
  GptLayout lay;
  Comm* tp = nullptr;  // tensor-parallel group (null: tp = 1)
  bool sp = false;     // sequence parallelism (needs tp)
  // plan.tp_comm_overlap (with sp): the SP all-gathers and reduce-scatters in pieces under their GEMMs
  // (exec/model/sp_pieces.hpp), else whole before or after them.
  bool tp_overlap = false;
  // Context parallelism (exec/model/cp_attention.hpp; null: cp = 1): the pieces' Tn is then the LOCAL sequence
  // (T / cp rows: two chunks), positions are global and the attention spans the cp group's keys.
  const CpCtx* cpx = nullptr;
  // plan.attention "flash": ops::flash_attention_fwd / bwd, and LayerActs::att holds each query row's two softmax
  // statistics ([B, Hl, Tn, 2]) instead of the probabilities [B, Hl, Tn, Tn] (cp: cpx->flash, the same choice).
  bool flash = false;
  // Flash without cp reads q, k and v in place from the QKV output (row strides, exec/backends/ops.hpp flash_attention_fwd):
  // LayerActs::q then holds the whole [N, Q] output and k, v stay empty; otherwise q, k, v are copies.
  bool qkv_in_place() const { return flash && !cpx; }
  // Expert parallelism (exec/model/moe.hpp; null: ep = 1): the ep group the tokens are dispatched over, and the weight of
  // each micro-batch's load-balancing loss in the step's objective (coefficient x micro-batch / global batch).
  Comm* ep = nullptr;
  double moe_aux_weight = 0;
  mutable double moe_aux_sum = 0;  // the unweighted load-balancing losses of the MoE forwards so far (tests)

  // bf16 storage (training.precision "bf16"): the linear layers' GEMM operands are packed to bf16 once, where they are
  // made, and the GEMMs read the copies, instead of each GEMM rounding its operands (a GPU backend would cast them in
  // each). Forward: ln1, the attention output and, in dense layers, ln2 and the activation (LayerActs::pack_now; the
  // layer's saved-tensor pack then takes these copies); backward: each output gradient that two GEMMs read (the input
  // gradient's and the weight gradient's, the LM head's logits gradient included; grad16). The same values: the same
  // results. A MoE layer's experts share their output gradients' copies too (exec/model/moe.cpp); their forward inputs and
  // the router are rounded in each GEMM.
  bool pack_operands16 = false;
  // The copy of output gradient d[n] under pack_operands16 (ops::pack_bf16), else empty.
  Buf<uint16_t> grad16(const T* d, long n) const;
  // ops::bias_bwd into db (may be null: no bias) over output gradient d [N, C], and grad16 of d from the same pass.
  // Only where the bias's rows are the GEMMs' (not under SP) and d is what the GEMMs read (fp8 casts d later, and
  // packs nothing).
  Buf<uint16_t> bias_grad16(T* db, const T* d, long N, long C) const;

  // fp8 linear layers (exec/model/fp8.hpp; null: precision other than fp8): f8q casts operand `op` of linear `lin` of
  // weight group wl into tmp and returns it with the slot's scale and format, for gemm8 / linear8 (x itself, scale 0,
  // when off); `record` counts it in the slot's amax.
  Fp8State* fp8 = nullptr;
  Q8<T> f8q(Buf<T>& tmp, const T* x, long n, int wl, int lin, Fp8Operand op, bool record = true) const;
  // f8q of n elements x at element `off` of an operand of `total` elements, cast into that place of tmp (the
  // operand's rows cast as they arrive; fp8_operand_at).
  Q8<T> f8q_at(Buf<T>& tmp, long total, const T* x, long off, long n, int wl, int lin, Fp8Operand op,
               bool record = true) const;

  T* p(const std::string& name) const { return this->param_of(lay, name); }
  T* g(const std::string& name) const { return this->grad_of(lay, name); }
  T* p(int view) const { return this->param_at(lay, view); }
  T* g(int view) const { return this->grad_at(lay, view); }
  // The view's bf16 copy under bf16 storage of the weights (WeightCopies16), else null.
  const uint16_t* p16(int view) const;

  // x[N, C] = embedding of tokens [B, Tn].
  void embed_fwd(T* x, const int32_t* tokens, long B, long Tn) const;
  void embed_bwd(const T* dx, const int32_t* tokens, long B, long Tn) const;
  // One block. The weights used are those of layer `wl` (a weight group under sharing).
  void layer_fwd(int wl, const T* x_in, T* x_out, LayerActs<T>& a, long B, long Tn) const;
  // dx_in[N, C] = gradient w.r.t. the layer input (overwritten), from dx_out (dx_in may be dx_out: in
  // place); accumulates weight grads. Consumes `a` (its buffers are released or reused as gradient scratch).
  // Under bf16 storage it reads what the forward marked packed (LayerActs::stay16) through LayerActs::packed.
  void layer_bwd(int wl, const T* dx_out, T* dx_in, LayerActs<T>& a, long B, long Tn) const;
  // Final norm, LM head (tied to wte), cross-entropy: returns the SUM of losses over the [B, Tn] targets.
  // x may be a.x_in (the caller moved the input there: no copy). loss_to (no tp group): the sum is written there, a
  // double in device memory (ops::cross_entropy_fwd_to: no read-back, for a captured step), and 0 returned.
  T head_fwd(const T* x, const int32_t* targets, HeadActs<T>& a, long B, long Tn, double* loss_to = nullptr) const;
  // dx[N, C] (overwritten) from the loss scaled by `scale` (e.g. 1 / tokens in the step). Consumes `a`.
  void head_bwd(T* dx, const int32_t* targets, HeadActs<T>& a, long B, long Tn, T scale) const;
};

}  // namespace tp::exec
