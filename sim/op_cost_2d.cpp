// op_cost_2d: per-op costs of Optimus 2D (SUMMA) tensor parallelism (plan.tp_mode "2d", seeds §3.3-3.5).
// The TP group of p = q*q ranks is a q x q grid; rank (r, c) holds activations [n/q, h/q] (b/q sequences,
// an h/q slice of the hidden size) and weight blocks [h_in/q, h_out/q]; biases, norm parameters and position
// embeddings (h/q slices) live on grid row 0 only, which is the representative rank's row.
// Every linear [n, h_in] x [h_in, h_out] is SUMMA_AB: q sequential steps of {broadcast of an activation block
// [n/q, h_in/q] along the grid row, broadcast of a weight block [h_in/q, h_out/q] along the grid column, a
// local GEMM}, with no overlap. Backward: dX = SUMMA_ABT (weight broadcast along the column, GEMM, reduce of
// [n/q, h_in/q] along the row), dW = SUMMA_ATB (activation broadcast along the row, GEMM, reduce of
// [h_in/q, h_out/q] along the column). Each SUMMA collective is one op of q collectives: time = q x one
// collective, op.bytes = q x the block bytes, tp_bytes += q x TpComm::bytes (with collective_member_bytes,
// (q-1)/q of the block per broadcast / reduce, the mean over the rotating root).
// Invariants: every FLOP and every stored activation byte of the 1D tp = 1 layer is divided by q^2; with
// q = 1 all collectives cost 0 and the pass times, FLOPs, bytes and memory equal the tp = 1 1D model.
// Sequence parallelism does not apply (ignored); MoE layers are rejected by build_cost_model. Flash attention
// and fp8 linears use the 1D model's ops (op_cost_internal.hpp) on the rank's local heads and blocks.
#include <stdexcept>

#include "op_cost_internal.hpp"

namespace tp::detail {
namespace {

// One rank (r, c) of the q x q grid: the micro-batch's shapes, the plan's switches and the SUMMA building
// blocks every pass shares (header notation). Methods append ops to a PassCost.
struct Grid2d {
  const Transformer& m;
  const Plan& p;
  Ctx c;
  int qi;
  double q, q2, b, s, n, h, f, a, V, kvd, dh, qw;
  bool qkv_b, proj_b, mlp_b, gpt, swiglu, flash;  // biases all for gelu; gpt: biases, positions, LayerNorm
  double e, scores, f_in, mask, norm_w, stats, bh, kv_bh, el;
  static constexpr CommGroup row = CommGroup::tp_row, col = CommGroup::tp_col;

  Grid2d(const Scenario& sc, const TpComm& tpc)
      : m(sc.model), p(sc.plan), c(Ctx::of(sc, &tpc, sc.plan.tp, false)), qi(sc.plan.tp_q()) {
    q = qi, q2 = q * q;
    b = (double)p.microbatch, s = (double)sc.training.seq_len, n = b * s;
    h = (double)m.hidden, f = (double)m.ffn_hidden, a = (double)m.heads, V = (double)m.vocab;
    kvd = (double)m.kv_heads * m.head_dim(), dh = (double)m.head_dim();
    qw = (double)m.q_width();  // Q width heads x head_dim (h unless the model sets head_dim)
    qkv_b = m.has_qkv_bias(), proj_b = m.has_proj_bias(), mlp_b = m.has_mlp_bias();
    gpt = m.activation == Activation::gelu;
    swiglu = !gpt;
    c.g_row = qi;
    c.g_col = qi;
    e = c.e;
    scores = b * (a / q2) * s * s;  // attention score elements per rank: [b/q, a/q, s, s]
    f_in = swiglu ? 2 * f : f;      // fc1 output width (gate and up for SwiGLU)
    mask = m.dropout ? 1 : 0;       // dropout masks (1 byte per element) and ops
    norm_w = gpt ? 2 : 1;           // parameters per hidden unit of one norm (LayerNorm g, b; RMSNorm g)
    stats = gpt ? 2 : 1;            // row all-reduces per norm pass (mean and variance; RMSNorm: sum x^2)
    flash = p.attention == Attention::flash;
    bh = b * a / q2, kv_bh = b * (double)m.kv_heads / q2;  // (b/q)(a/q) query heads, kv heads alike
    el = c.fp8 ? 1 : e;  // stored bytes of a linear's input (fp8: its fp8 cast)
  }
  static void add(PassCost& pc, Op op, bool rc) { op.recompute = rc; pc.add(op); }

  // Norm forward: γ/β broadcast from row 0 along the column, local statistics over the h/q slice, row
  // all-reduces of [n/q] fp32 partial sums, normalisation over [n/q, h/q].
  void norm_fwd(PassCost& pc, const std::string& name, bool rc) const {
    add(pc, c.comm_n(name + ".bcast_params", Coll::broadcast, e * norm_w * h / q, 1, col, pc), rc);
    add(pc, c.elem(name, 2 * e * n * h / q2), rc);
    add(pc, c.comm_n(name + ".ar_stats", Coll::all_reduce, 4 * n / q, stats, row, pc), rc);
  }
  void norm_bwd(PassCost& pc, const std::string& name) const {
    pc.add(c.elem(name + ".bwd", 4 * e * n * h / q2));
    pc.add(c.comm_n(name + ".bwd.ar_stats", Coll::all_reduce, 4 * n / q, stats, row, pc));
    pc.add(c.comm_n(name + ".params.reduce", Coll::reduce, e * norm_w * h / q, 1, col, pc));
  }
  // SUMMA_AB forward of a linear [n, h_in] x [h_in, h_out] (+ bias broadcast from row 0 when it has a bias).
  void linear_fwd(PassCost& pc, const std::string& name, double h_in, double h_out, bool bias, bool rc) const {
    add(pc, c.comm_n(name + ".bcast_a", Coll::broadcast, e * (n / q) * (h_in / q), q, row, pc), rc);      // [n/q,h_in/q]
    add(pc, c.comm_n(name + ".bcast_b", Coll::broadcast, e * (h_in / q) * (h_out / q), q, col, pc), rc);  // [h_in/q,h_out/q]
    // fp8: every received activation and weight block is cast (communication stays bf16)
    if (c.fp8) add(pc, c.cast(name + ".fp8_cast", q * ((n / q) * (h_in / q) + (h_in / q) * (h_out / q))), rc);
    add(pc, c.lin_rep(name, q, n / q, h_in / q, h_out / q), rc);  // q x [n/q,h_in/q] x [h_in/q,h_out/q]
    if (bias) add(pc, c.comm_n(name + ".bcast_bias", Coll::broadcast, e * h_out / q, 1, col, pc), rc);
  }
  // Backward: dX = dY W^T (SUMMA_ABT), then dW = X^T dY (SUMMA_ATB), then the bias gradient to row 0.
  void linear_bwd(PassCost& pc, const std::string& name, double h_in, double h_out, bool bias) const {
    pc.add(c.comm_n(name + ".dgrad.bcast_b", Coll::broadcast, e * (h_in / q) * (h_out / q), q, col, pc));
    if (c.fp8) pc.add(c.cast(name + ".fp8_cast.bwd", (n / q) * (h_out / q)));   // the local output gradient
    pc.add(c.lin_rep(name + ".dgrad", q, n / q, h_out / q, h_in / q));            // q x [n/q,h_out/q] x [h_out/q,h_in/q]
    pc.add(c.comm_n(name + ".dgrad.reduce", Coll::reduce, e * (n / q) * (h_in / q), q, row, pc));
    pc.add(c.comm_n(name + ".wgrad.bcast_a", Coll::broadcast, e * (n / q) * (h_in / q), q, row, pc));
    pc.add(c.lin_rep(name + ".wgrad", q, h_in / q, n / q, h_out / q));            // q x [h_in/q,n/q] x [n/q,h_out/q]
    pc.add(c.comm_n(name + ".wgrad.reduce", Coll::reduce, e * (h_in / q) * (h_out / q), q, col, pc));
    if (bias) pc.add(c.comm_n(name + ".bias.reduce", Coll::reduce, e * h_out / q, 1, col, pc));
  }
  // Attention core: local on b/q sequences and a/q heads, no communication.
  void attention_core(PassCost& pc, bool rc) const {
    if (flash) { add(pc, c.flash_fwd(bh, kv_bh, s, s, dh), rc); return; }
    add(pc, c.bgemm("attn.qk", b * a / q2, s, dh, s), rc);                   // (b/q)(a/q) x [s,dh] x [dh,s]
    add(pc, c.elem("attn.softmax", 2 * e * scores, OpClass::attention), rc);
    if (m.dropout) add(pc, c.elem("attn.dropout", (2 * e + 1) * scores, OpClass::attention), rc);
    add(pc, c.bgemm("attn.av", b * a / q2, s, s, dh), rc);                   // (b/q)(a/q) x [s,s] x [s,dh]
  }
  void forward(PassCost& pc, bool rc) const;
  PassCost backward() const;
};

// ---- layer forward ----------------------------------------------------------------------------------------
void Grid2d::forward(PassCost& pc, bool rc) const {
  norm_fwd(pc, "ln1", rc);
  linear_fwd(pc, "qkv", h, qw + 2 * kvd, qkv_b, rc);  // [n,h] x [h,qw+2kvd]
  attention_core(pc, rc);
  linear_fwd(pc, "proj", qw, h, proj_b, rc);        // [n,qw] x [qw,h]
  add(pc, c.elem("resid1", (3 * e + mask) * n * h / q2), rc);
  norm_fwd(pc, "ln2", rc);
  linear_fwd(pc, "fc1", h, f_in, mlp_b, rc);        // [n,h] x [h,f_in]
  add(pc, c.elem("act", (swiglu ? 3 : 2) * e * n * f / q2), rc);
  linear_fwd(pc, "fc2", f, h, mlp_b, rc);           // [n,f] x [f,h]
  add(pc, c.elem("resid2", (3 * e + mask) * n * h / q2), rc);
}

// ---- layer backward (recompute first) ---------------------------------------------------------------------
PassCost Grid2d::backward() const {
  PassCost bwd;
  if (p.recompute == Recompute::full) forward(bwd, true);
  if (p.recompute == Recompute::selective && !flash) attention_core(bwd, true);
  bwd.add(c.elem("resid2.bwd", (3 * e + mask) * n * h / q2));
  linear_bwd(bwd, "fc2", f, h, mlp_b);
  bwd.add(c.elem("act.bwd", (swiglu ? 5 : 3) * e * n * f / q2));
  linear_bwd(bwd, "fc1", h, f_in, mlp_b);
  norm_bwd(bwd, "ln2");
  bwd.add(c.elem("resid1.bwd", (3 * e + mask) * n * h / q2));
  linear_bwd(bwd, "proj", qw, h, proj_b);
  if (flash) {
    bwd.add(c.flash_bwd(bh, kv_bh, s, s, dh));
  } else {
    bwd.add(c.bgemm("attn.av.dgrad", b * a / q2, s, dh, s));
    bwd.add(c.bgemm("attn.av.wgrad", b * a / q2, s, s, dh));
    if (m.dropout) bwd.add(c.elem("attn.dropout.bwd", (2 * e + 1) * scores, OpClass::attention));
    bwd.add(c.elem("attn.softmax.bwd", 3 * e * scores, OpClass::attention));
    bwd.add(c.bgemm("attn.qk.dgrad", b * a / q2, s, s, dh));
    bwd.add(c.bgemm("attn.qk.wgrad", b * a / q2, s, s, dh));
  }
  linear_bwd(bwd, "qkv", h, qw + 2 * kvd, qkv_b);
  norm_bwd(bwd, "ln1");
  return bwd;
}

// ---- stored activations: the unsharded (tp = 1) layer of op_cost.cpp, every term / q^2 ---------------------
// (fp8: QKV, proj, fc1, fc2 inputs saved as fp8 casts, el = 1; flash: the fp32 statistics instead of s x s)
void stored_2d(const Grid2d& G, CostModel& cm) {
  const double e = G.e, el = G.el, n = G.n, h = G.h, mask = G.mask, q2 = G.q2, b = G.b, a = G.a, s = G.s;
  const double repl = (2 * e + 2 * el + 2 * mask) * n * h;
  const double sharded = n * (e * (G.qw + 2 * G.kvd + G.f_in) + el * (G.qw + G.f));
  const double core = G.flash ? 4 * b * a * s : (G.m.dropout ? 2 * e + 1 : e) * b * a * s * s;
  const double full_layer = (repl + sharded + core) / q2;
  switch (G.p.recompute) {
    case Recompute::none: cm.layer_stored_bytes = full_layer; break;
    case Recompute::selective:
      if (G.flash) { cm.layer_stored_bytes = full_layer; break; }  // nothing is recomputed
      cm.layer_stored_bytes = (repl + sharded) / q2; cm.layer_transient_bytes = core / q2; break;
    case Recompute::full: cm.layer_stored_bytes = e * n * h / q2; cm.layer_transient_bytes = full_layer; break;
    case Recompute::selective_op: throw std::logic_error("recompute selective_op with tp_mode 2d (refused by the plan rules)");
  }
}

// ---- embedding (VocabParallelEmbedding, weight [V/q, h/q] per rank) ----------------------------------------
void embed_2d(const Grid2d& G, CostModel& cm) {
  const Ctx& c = G.c;
  const double e = G.e, q = G.q, q2 = G.q2, n = G.n, h = G.h, V = G.V, s = G.s;
  PassCost ef, eb;
  // q steps: vocab block i (held by grid row i) broadcast along the column, masked lookup of the local
  // [n/q] tokens into [n/q, h/q]; GPT adds the position embedding [s, h/q] broadcast from row 0.
  ef.add(c.comm_n("embed.bcast_b", Coll::broadcast, e * (V / q) * (h / q), q, Grid2d::col, ef));
  if (G.gpt) ef.add(c.comm_n("embed.bcast_pos", Coll::broadcast, e * s * h / q, 1, Grid2d::col, ef));
  Op lk = c.elem("embed.lookup", (G.gpt ? 3 : 2) * e * n * h / q2);
  lk.bytes *= q;
  lk.time_s *= q;
  ef.add(lk);
  Op bk = c.elem("embed.bwd", 3 * e * n * h / q2);
  bk.bytes *= q;
  bk.time_s *= q;
  eb.add(bk);
  eb.add(c.comm_n("embed.bwd.reduce", Coll::reduce, e * (V / q) * (h / q), q, Grid2d::col, eb));  // block grads to owner row
  if (G.gpt) eb.add(c.comm_n("embed.pos.reduce", Coll::reduce, e * s * h / q, 1, Grid2d::col, eb));
  cm.embed_fwd = ef;
  cm.embed_bwd = eb;
  cm.embed_stored_bytes = G.mask * n * h / q2;
}

// ---- head: final norm, LM head logits = X W^T (SUMMA_ABT with W [V/q, h/q]), cross-entropy -----------------
void head_2d(const Grid2d& G, CostModel& cm) {
  const Ctx& c = G.c;
  const double e = G.e, q = G.q, q2 = G.q2, n = G.n, h = G.h, V = G.V;
  const CommGroup row = Grid2d::row, col = Grid2d::col;
  PassCost hf, hb;
  G.norm_fwd(hf, "final_norm", false);
  hf.add(c.comm_n("lm_head.bcast_b", Coll::broadcast, e * (V / q) * (h / q), q, col, hf));
  hf.add(c.gemm_rep("lm_head", q, n / q, h / q, V / q));                // q x [n/q,h/q] x [h/q,V/q]
  hf.add(c.comm_n("lm_head.reduce", Coll::reduce, e * (n / q) * (V / q), q, row, hf));
  hf.add(c.elem("loss", (e + 4 + 4) * n * V / q2));                     // fp32 softmax cross-entropy, [n/q, V/q]
  hf.add(c.comm_n("loss.ar", Coll::all_reduce, 4 * n / q, 3, row, hf));  // max, target logit, sum exp: [n/q]
  hb.add(c.elem("loss.bwd", (4 + e) * n * V / q2));
  // dX = dC W (SUMMA_AB): broadcast dC [n/q, V/q] along the row and W [V/q, h/q] along the column.
  hb.add(c.comm_n("lm_head.dgrad.bcast_a", Coll::broadcast, e * (n / q) * (V / q), q, row, hb));
  hb.add(c.comm_n("lm_head.dgrad.bcast_b", Coll::broadcast, e * (V / q) * (h / q), q, col, hb));
  hb.add(c.gemm_rep("lm_head.dgrad", q, n / q, V / q, h / q));          // q x [n/q,V/q] x [V/q,h/q]
  // dW = dC^T X (SUMMA_ATB): broadcast dC along the row, reduce [V/q, h/q] along the column.
  hb.add(c.comm_n("lm_head.wgrad.bcast_a", Coll::broadcast, e * (n / q) * (V / q), q, row, hb));
  hb.add(c.gemm_rep("lm_head.wgrad", q, h / q, n / q, V / q));          // q x [h/q,n/q] x [n/q,V/q] (dW^T)
  hb.add(c.comm_n("lm_head.wgrad.reduce", Coll::reduce, e * (V / q) * (h / q), q, col, hb));
  G.norm_bwd(hb, "final_norm");
  cm.head_fwd = hf;
  cm.head_bwd = hb;
  cm.head_stored_bytes = (2 * e * n * h + 4 * n * V) / q2;
}

// ---- parameters per GPU (representative = grid row 0: holds the bias and norm slices) ----------------------
void params_2d(const Grid2d& G, CostModel& cm) {
  const double h = G.h, q = G.q, q2 = G.q2, qw = G.qw, kvd = G.kvd, V = G.V;
  const double lin = h * (qw + 2 * kvd) + qw * h + h * G.f_in + G.f * h;  // weights, / q^2
  const double biases = (G.qkv_b ? qw + 2 * kvd : 0) + (G.proj_b ? h : 0) + (G.mlp_b ? G.f_in : 0) + (G.mlp_b ? h : 0);  // / q
  const double norms = 2 * G.norm_w * h;                                     // two norms, / q
  cm.layer_params = lin / q2 + (biases + norms) / q;
  if (G.c.fp8) cm.layer_fp8_weight_bytes = lin / q2;  // fp8 copies of the weight blocks, 1 byte each
  cm.embed_params = V * h / q2 + (G.gpt ? G.s * h / q : 0);
  cm.head_params = G.norm_w * h / q + ((G.m.tied_embeddings && G.p.pp == 1) ? 0 : V * h / q2);
}

}  // namespace

CostModel build_cost_model_2d(const Scenario& sc, const TpComm& tpc) {
  const Grid2d G(sc, tpc);
  CostModel cm;
  PassCost fwd;
  G.forward(fwd, false);
  cm.layer_fwd = fwd;
  cm.layer_bwd = G.backward();
  stored_2d(G, cm);
  embed_2d(G, cm);
  head_2d(G, cm);
  params_2d(G, cm);
  // ---- model FLOPs per step: 3 x forward (no recompute) over the whole batch, all q^2 TP ranks -------------
  // flash attention counted as the unfused core (full s x s scores), as in op_cost.cpp
  const double attn_convention = G.flash ? 4 * G.bh * G.s * G.s * G.dh * (1 - kCausalFraction) : 0;
  double fwd_flops_mb = (double)G.m.layers * (cm.layer_fwd.flops + attn_convention) + cm.head_fwd.flops;
  cm.model_flops_per_step = 3 * fwd_flops_mb * G.p.tp * (double)G.p.num_microbatches * G.p.data_ranks();
  return cm;
}

}  // namespace tp::detail
