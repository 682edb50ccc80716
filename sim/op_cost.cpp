// op_cost: per-op FLOPs, bytes, times and stored activations of a transformer layer. See op_cost.hpp.
// Layout: Layer holds one rank's shapes and builds the attention / dense-MLP passes; MoeMlp the MoE MLP half;
// build_cost_model joins the dense layer, the MoE layer, the embedding and head, and the parameter counts.
// Notation: n = b*s tokens of the micro-batch, h hidden, f ffn_hidden, a heads, t = tp, e = activation bytes,
// kvd = kv_heads * head_dim, qw = heads * head_dim (the Q width, h unless the model sets head_dim),
// fe / fs = a routed expert's / the shared experts' inner size, tsp = t with sequence parallelism else 1.
// Context parallelism (cp > 1): each rank holds s / cp tokens of every sequence (n = b*s/cp) and its queries
// attend over the whole sequence's keys (s_k = s), receiving the other ranks' K and V around the cp ring
// while it computes (all-gather semantics over cp, buffer = the full K and V of the micro-batch, overlapped
// with the attention compute); the backward exchanges K, V again and reduce-scatters their gradients.
// Unfused attention with cp > 1 is the all-gather form trainplan's executor runs (exec/model/cp_attention.hpp): K and
// V are all-gathered before the attention (not overlapped) and copied into global order, and each of the
// rank's two chunks of Lc = s / (2 cp) queries attends only its causal prefix of keys, (2 cp + 1) Lc key blocks
// in all: on average s_kq = (2 cp + 1) s / (4 cp) keys per query instead of s.
#include "op_cost.hpp"

#include <algorithm>
#include <stdexcept>

#include "op_cost_internal.hpp"

namespace tp {

using detail::add_overlapped;

const char* op_class_name(OpClass c) {
  switch (c) {
    case OpClass::gemm: return "gemm";
    case OpClass::attention: return "attention";
    case OpClass::elementwise: return "elementwise";
    case OpClass::tp_comm: return "tp_comm";
    case OpClass::ep_comm: return "ep_comm";
  }
  return "?";
}

void PassCost::add(const Op& op) {
  ops.push_back(op);
  time_s += op.time_s;
  if (op.recompute) recompute_s += op.time_s;
  else if (op.cls == OpClass::tp_comm) tp_comm_s += op.time_s;
  else if (op.cls == OpClass::ep_comm) ep_comm_s += op.time_s;
  else compute_s += op.time_s;
  flops += op.flops;
  if (op.recompute) recompute_flops += op.flops;
}

void PassCost::append(const PassCost& o, int times) {
  for (int i = 0; i < times; ++i)
    for (auto& op : o.ops) add(op);
  tp_bytes.intra += times * o.tp_bytes.intra;
  tp_bytes.inter += times * o.tp_bytes.inter;
}

namespace {

// One 1D tensor-parallel layer on one rank: the micro-batch's shapes, the plan's switches and the op builders
// every pass shares (header notation). Built once per scenario; its methods append ops to a PassCost.
struct Layer {
  const Transformer& m;
  const Plan& p;
  detail::Ctx c;
  double b, s, s_q, n, h, f, a, V, t, kvd, qw;
  bool sp, tpo;  // tpo: SP collectives under the adjacent GEMM (--tp-comm-overlap)
  double tsp;
  bool gpt, swiglu, drop;  // gpt: GPT-style (biases, learned positions, dropout); drop: dropout ops and masks
  double e;
  bool flash;
  double s_kq, scores, cp_kv_bytes, f_in, mask, bh, kv_bh, dh, el;
  bool qkv_b, proj_b, mlp_b;  // all for gelu
  // Stored activations per layer per micro-batch (Korthikanti et al. 2022, generalised), set by the constructor.
  double repl_attn, repl_mlp, repl, sharded_attn, sharded_mlp, sharded, core, full_layer;
  // recompute selective_op (TorchTitan's op-level SAC): which linears' outputs the policy keeps. It counts the
  // block's bias-free aten.mm calls in forward order, q, k, v, o, then gate, up, down (SwiGLU) or fc1, fc2
  // (GELU: kept in the gate and down slots), and keeps every odd one; fp8 linears run torch._scaled_mm and
  // biased ones addmm, which it neither counts nor keeps. Everything else in the block reruns in the backward
  // except the attention kernel (and the cp K / V exchange inside it) and reduce-scatters, which are kept too.
  bool osac;
  bool keep_q = false, keep_k = false, keep_v = false, keep_o = false, keep_gate = false, keep_up = false,
       keep_down = false;

  Layer(const Scenario& sc, const TpComm& tpc)
      : m(sc.model), p(sc.plan), c(detail::Ctx::of(sc, &tpc, sc.plan.tp, sc.plan.sequence_parallel && sc.plan.tp > 1)) {
    b = (double)p.microbatch, s = (double)sc.training.seq_len, s_q = s / p.cp, n = b * s_q;
    h = (double)m.hidden, f = (double)m.ffn_hidden, a = (double)m.heads, V = (double)m.vocab;
    t = p.tp, kvd = (double)m.kv_heads * m.head_dim();
    qw = (double)m.q_width();
    sp = p.sequence_parallel && p.tp > 1;
    tpo = sp && p.tp_comm_overlap;
    tsp = sp ? t : 1;
    gpt = m.activation == Activation::gelu;
    swiglu = !gpt;
    drop = m.dropout;
    c.g_ep = p.ep;
    c.g_cp = p.cp;
    e = c.e;
    flash = p.attention == Attention::flash;
    // Keys each query's scores span: all s (the square of one rank, or flash's rectangle, whose causal half the
    // kernel skips by itself); unfused with cp: the causal prefixes of the rank's two chunks (header).
    s_kq = !flash && p.cp > 1 ? (2.0 * p.cp + 1) * s / (4.0 * p.cp) : s;
    scores = b * (a / t) * s_q * s_kq;        // attention score elements per rank
    cp_kv_bytes = e * b * s * 2 * kvd / t;    // the micro-batch's K and V per TP rank (cp ring buffer)
    f_in = swiglu ? 2 * f : f;                // fc1 output width (gate and up for SwiGLU)
    mask = drop ? 1 : 0;                      // dropout masks are 1 byte per element
    bh = b * a / t, kv_bh = b * (double)m.kv_heads / t, dh = (double)m.head_dim();
    el = c.fp8 ? 1 : e;  // fp8: bytes of a stored linear-layer input (Transformer Engine saves the fp8 cast)
    qkv_b = m.has_qkv_bias(), proj_b = m.has_proj_bias(), mlp_b = m.has_mlp_bias();
    // replicated across TP (sharded only with SP): LN1 in, QKV in, attn-out dropout mask | LN2 in, fc1 in, MLP
    // mask (fp8: the QKV and fc1 inputs are saved as their fp8 casts, el = 1 byte; e is a power of two, so the
    // regrouped products below are exact and equal the bf16 / fp16 formulas when el = e)
    repl_attn = (e + el + mask) * n * h, repl_mlp = (e + el + mask) * n * h;
    repl = (2 * e + 2 * el + 2 * mask) * n * h;
    // sharded over TP: Q, K, V, proj input | fc1 output (activation input), fc2 input (proj, fc2 inputs: el)
    sharded_attn = n * (e * (qw + 2 * kvd) + el * qw), sharded_mlp = n * (e * f_in + el * f);
    sharded = sharded_attn + sharded_mlp;
    // attention core per rank: softmax output, dropout mask, dropout output (GPT); softmax output only
    // otherwise. Flash attention keeps no s x s tensor: only the fp32 logsumexp statistics (4 bytes per query
    // and head) next to Q, K, V and the output above (dropout regenerates its mask from the RNG state).
    core = flash ? 4 * bh * s_q : (drop ? 2 * e + 1 : e) * scores;
    full_layer = repl / tsp + sharded / t + core;
    osac = p.recompute == Recompute::selective_op;
    int mm = 0;  // the policy's count of aten.mm calls
    auto kept = [&](bool biased) { return !c.fp8 && !biased && ++mm % 2 == 1; };
    keep_q = kept(qkv_b), keep_k = kept(qkv_b), keep_v = kept(qkv_b), keep_o = kept(proj_b);
    keep_gate = kept(mlp_b);
    if (swiglu) keep_up = kept(mlp_b);
    keep_down = kept(mlp_b);
  }
  // selective_op: bytes the policy keeps per micro-batch, attention half (the block's input, kept Q / K / V,
  // the row-parallel output projection's partial sums before their reduce-scatter, the attention kernel's
  // output and statistics, the reduce-scatter's output) and dense MLP half.
  double op_sac_attn_bytes() const {
    double kept_attn_core = flash ? e * n * qw / t + core : 0;  // the unfused core (bmm, softmax) reruns
    return e * n * h / tsp + e * n * ((keep_q ? qw : 0) + (keep_k ? kvd : 0) + (keep_v ? kvd : 0)) / t +
           (keep_o ? e * n * h : 0) + kept_attn_core + (sp ? e * n * h / t : 0);
  }
  double op_sac_mlp_bytes() const {
    return e * n * ((keep_gate ? f : 0) + (keep_up ? f : 0)) / t + (keep_down ? e * n * h : 0) + (sp ? e * n * h / t : 0);
  }

  // fp8 casts of a linear's input [rows, K] and weight [K, N] (forward) / of its output gradient (backward)
  void cast_fwd(PassCost& pc, const std::string& name, double rows, double K, double N, bool rc) const {
    if (!c.fp8) return;
    Op op = c.cast(name + ".fp8_cast", rows * K + K * N);
    op.recompute = rc;
    pc.add(op);
  }
  void cast_bwd(PassCost& pc, const std::string& name, double rows, double N) const {
    if (c.fp8) pc.add(c.cast(name + ".fp8_cast.bwd", rows * N));
  }
  // An op of a forward pass (recompute: of the backward's recomputation); a TP collective of one, hidden under
  // the GEMM before (after) it with tp_comm_overlap.
  static void add_fwd(PassCost& pc, Op op, bool recompute) { op.recompute = recompute; pc.add(op); }
  void add_fwd_tp(PassCost& pc, Op op, bool recompute) const {
    op.recompute = recompute;
    if (tpo) add_overlapped(pc, op);
    else pc.add(op);
  }

  void attention_core(PassCost& pc, bool recompute) const;
  void attention_fwd(PassCost& pc, bool recompute) const;
  void mlp_fwd(PassCost& pc, bool recompute) const;
  void column_bwd(PassCost& pc, const char* name, double K_in, double N_out, const char* tag) const;
  void row_bwd(PassCost& pc, const char* name, double K_in, double N_out, const char* tag) const;
  void mlp_bwd(PassCost& pc) const;
  void attention_bwd(PassCost& pc) const;
  // Stored and transient bytes under the plan's recompute of a layer that stores `full` bytes in all, `no_core`
  // without its attention core.
  // `op_sac` under selective_op.
  void stored(double full, double no_core, double op_sac, double& stored_bytes, double& transient_bytes) const;
  // The backward pass of a layer: recomputation first (as the plan says), then `mlp`'s and attention's.
  // selective_op reruns the forward through attention_fwd / mlp_fwd, which leave out what the policy keeps.
  template <class MlpFwd, class MlpBwd>
  PassCost backward(MlpFwd mlp_fwd_pass, MlpBwd mlp_bwd_pass) const {
    PassCost bwd;
    if (p.recompute == Recompute::full || osac) { attention_fwd(bwd, true); mlp_fwd_pass(bwd, true); }
    if (p.recompute == Recompute::selective && !flash) attention_core(bwd, true);  // flash: nothing to recompute
    mlp_bwd_pass(bwd);
    attention_bwd(bwd);
    return bwd;
  }
};

// ---- layer forward: attention half, dense MLP half --------------------------------------------------------
void Layer::attention_core(PassCost& pc, bool recompute) const {
  // cp: K and V of the other cp ranks; flash receives them around the ring while it computes, the unfused
  // (all-gather) form gathers them before its scores.
  auto cp_kv = [&]() {
    Op kv = c.comm_n("cp.kv", Coll::all_gather, cp_kv_bytes, 1, CommGroup::cp, pc);
    kv.recompute = recompute;
    return kv;
  };
  if (flash) {  // one fused kernel; dropout (GPT) fused into it
    if (recompute && osac) return;  // selective_op keeps its output
    Op fl = c.flash_fwd(bh, kv_bh, s_q, s, dh);
    fl.recompute = recompute;
    pc.add(fl);
    if (p.cp > 1) add_overlapped(pc, cp_kv());
  } else {
    if (p.cp > 1) {  // the gathered blocks put back in global order: K and V read and written once
      pc.add(cp_kv());
      Op ro = c.elem("cp.kv.reorder", 2 * cp_kv_bytes);
      ro.recompute = recompute;
      pc.add(ro);
    }
    Op qk = c.bgemm("attn.qk", b * a / t, s_q, (double)m.head_dim(), s_kq);  // [s_q,dh] x [dh,s_kq] per head
    Op sm = c.elem("attn.softmax", 2 * e * scores, OpClass::attention);
    Op av = c.bgemm("attn.av", b * a / t, s_q, s_kq, (double)m.head_dim());
    for (Op* op : {&qk, &sm}) { op->recompute = recompute; pc.add(*op); }
    if (drop) { Op dr = c.elem("attn.dropout", (2 * e + 1) * scores, OpClass::attention); dr.recompute = recompute; pc.add(dr); }
    av.recompute = recompute;
    pc.add(av);
  }
}

void Layer::attention_fwd(PassCost& pc, bool rc) const {
  add_fwd(pc, c.elem("ln1", 2 * e * n * h / tsp), rc);
  if (sp && !tpo) add_fwd(pc, c.comm("tp.ag1", Coll::all_gather, e * n * h, pc), rc);
  const bool rso = rc && osac;  // the selective_op rerun: what the policy kept is left out
  // [n,h] x [h,(qw+2kvd)/t]; the rerun: the Q / K / V columns not kept
  double qkv_w = rso ? (keep_q ? 0 : qw) + (keep_k ? 0 : kvd) + (keep_v ? 0 : kvd) : qw + 2 * kvd;
  if (qkv_w > 0) {
    cast_fwd(pc, "qkv", n, h, qkv_w / t, rc);
    add_fwd(pc, c.lin("qkv", n, h, qkv_w / t), rc);
  }
  if (tpo) add_fwd_tp(pc, c.comm("tp.ag1", Coll::all_gather, e * n * h, pc), rc);
  attention_core(pc, rc);
  if (!(rso && keep_o)) {
    cast_fwd(pc, "proj", n, qw / t, h, rc);
    add_fwd(pc, c.lin("proj", n, qw / t, h), rc);                          // [n,qw/t] x [qw/t,h]
  }
  if (!(rso && sp)) add_fwd_tp(pc, c.comm(sp ? "tp.rs1" : "tp.ar1", sp ? Coll::reduce_scatter : Coll::all_reduce, e * n * h, pc), rc);
  add_fwd(pc, c.elem("resid1", (3 * e + mask) * n * h / tsp), rc);
}

void Layer::mlp_fwd(PassCost& pc, bool rc) const {
  add_fwd(pc, c.elem("ln2", 2 * e * n * h / tsp), rc);
  if (sp && !tpo) add_fwd(pc, c.comm("tp.ag2", Coll::all_gather, e * n * h, pc), rc);
  const bool rso = rc && osac;  // the selective_op rerun: what the policy kept is left out
  // [n,h] x [h,f_in/t]; the rerun: the gate / up columns not kept
  double fc1_w = rso ? (keep_gate ? 0 : f) + (swiglu && !keep_up ? f : 0) : f_in;
  if (fc1_w > 0) {
    cast_fwd(pc, "fc1", n, h, fc1_w / t, rc);
    add_fwd(pc, c.lin("fc1", n, h, fc1_w / t), rc);
  }
  if (tpo) add_fwd_tp(pc, c.comm("tp.ag2", Coll::all_gather, e * n * h, pc), rc);
  add_fwd(pc, c.elem("act", (swiglu ? 3 : 2) * e * n * f / t), rc);
  if (!(rso && keep_down)) {
    cast_fwd(pc, "fc2", n, f / t, h, rc);
    add_fwd(pc, c.lin("fc2", n, f / t, h), rc);                            // [n,f/t] x [f/t,h]
  }
  if (!(rso && sp)) add_fwd_tp(pc, c.comm(sp ? "tp.rs2" : "tp.ar2", sp ? Coll::reduce_scatter : Coll::all_reduce, e * n * h, pc), rc);
  add_fwd(pc, c.elem("resid2", (3 * e + mask) * n * h / tsp), rc);
}

// ---- layer backward (recompute first): dense MLP half, attention half -------------------------------------
// Column-parallel linear backward: with SP, the input all-gather is redone under dgrad and the grad-input
// reduce-scatter overlaps wgrad; without SP, the grad-input all-reduce overlaps wgrad (Megatron async comm).
void Layer::column_bwd(PassCost& pc, const char* name, double K_in, double N_out, const char* tag) const {
  cast_bwd(pc, name, n, N_out);
  Op dg = c.lin(std::string(name) + ".dgrad", n, N_out, K_in);
  pc.add(dg);
  if (sp) add_overlapped(pc, c.comm(std::string("tp.ag.") + tag, Coll::all_gather, e * n * h, pc));
  pc.add(c.lin(std::string(name) + ".wgrad", K_in, n, N_out));
  add_overlapped(pc, c.comm(std::string(sp ? "tp.rs." : "tp.ar.") + tag,
                            sp ? Coll::reduce_scatter : Coll::all_reduce, e * n * h, pc));
}

void Layer::row_bwd(PassCost& pc, const char* name, double K_in, double N_out, const char* tag) const {
  if (sp && !tpo) pc.add(c.comm(std::string("tp.ag.") + tag, Coll::all_gather, e * n * h, pc));
  cast_bwd(pc, name, n, N_out);
  pc.add(c.lin(std::string(name) + ".dgrad", n, N_out, K_in));
  if (tpo) add_overlapped(pc, c.comm(std::string("tp.ag.") + tag, Coll::all_gather, e * n * h, pc));
  pc.add(c.lin(std::string(name) + ".wgrad", K_in, n, N_out));
}

void Layer::mlp_bwd(PassCost& pc) const {
  pc.add(c.elem("resid2.bwd", (3 * e + mask) * n * h / tsp));
  row_bwd(pc, "fc2", f / t, h, "fc2");
  pc.add(c.elem("act.bwd", (swiglu ? 5 : 3) * e * n * f / t));
  column_bwd(pc, "fc1", h, f_in / t, "fc1");
  pc.add(c.elem("ln2.bwd", 4 * e * n * h / tsp));
}

void Layer::attention_bwd(PassCost& pc) const {
  pc.add(c.elem("resid1.bwd", (3 * e + mask) * n * h / tsp));
  row_bwd(pc, "proj", qw / t, h, "proj");
  if (flash) {
    pc.add(c.flash_bwd(bh, kv_bh, s_q, s, dh));
  } else {
    pc.add(c.bgemm("attn.av.dgrad", bh, s_q, dh, s_kq));
    pc.add(c.bgemm("attn.av.wgrad", bh, s_kq, s_q, dh));
    if (drop) pc.add(c.elem("attn.dropout.bwd", (2 * e + 1) * scores, OpClass::attention));
    pc.add(c.elem("attn.softmax.bwd", 3 * e * scores, OpClass::attention));
    pc.add(c.bgemm("attn.qk.dgrad", bh, s_q, s_kq, dh));
    pc.add(c.bgemm("attn.qk.wgrad", bh, s_kq, s_q, dh));
  }
  // cp: K and V again, and their gradients reduce-scattered back to their owners: under flash's backward, or
  // (unfused, all-gather form) exposed
  if (p.cp > 1) {
    Op kv = c.comm_n("cp.kv.bwd", Coll::all_gather, cp_kv_bytes, 2, CommGroup::cp, pc);
    if (flash) {
      add_overlapped(pc, kv);
    } else {  // gathered K, V reordered (2), their gradients zeroed (1) and copied into send blocks (2), and
              // the rank's reduced share added to its own dK, dV (3 / cp)
      pc.add(kv);
      pc.add(c.elem("cp.kv.reorder.bwd", (5 + 3.0 / p.cp) * cp_kv_bytes));
    }
  }
  column_bwd(pc, "qkv", h, (qw + 2 * kvd) / t, "qkv");
  pc.add(c.elem("ln1.bwd", 4 * e * n * h / tsp));
}

void Layer::stored(double full, double no_core, double op_sac, double& stored_bytes, double& transient_bytes) const {
  switch (p.recompute) {
    case Recompute::selective_op: stored_bytes = op_sac; transient_bytes = full; break;
    case Recompute::none: stored_bytes = full; break;
    case Recompute::selective:
      if (flash) { stored_bytes = full; break; }  // nothing is recomputed (Megatron-LM)
      stored_bytes = no_core; transient_bytes = core; break;
    case Recompute::full: stored_bytes = e * n * h / tsp; transient_bytes = full; break;
  }
}

void dense_layer(const Layer& L, CostModel& cm) {
  PassCost fwd;
  L.attention_fwd(fwd, false);
  L.mlp_fwd(fwd, false);
  cm.layer_fwd = fwd;
  cm.layer_bwd = L.backward([&](PassCost& pc, bool rc) { L.mlp_fwd(pc, rc); }, [&](PassCost& pc) { L.mlp_bwd(pc); });
  L.stored(L.full_layer, L.repl / L.tsp + L.sharded / L.t, L.op_sac_attn_bytes() + L.op_sac_mlp_bytes(),
           cm.layer_stored_bytes, cm.layer_transient_bytes);
}

// ---- MoE layer: attention half as dense, then router, dispatch, local experts, combine ---------------------
// Token sharding: with tp > 1 every TP rank routes a disjoint 1/t share of the micro-batch's tokens,
// nt = n/t (its sequence shard with SP; without SP a slice of the replicated tokens, and the MoE output is
// all-gathered back to the replicated layout). The dispatch / combine all-to-alls over the ep group move
// S = e*nt*h*k*cf bytes per member buffer (capacity-padded token copies). The local experts (E/ep of them)
// are TP-sharded like the dense MLP, so the dispatched tokens are all-gathered over TP before fc1 (n*k*cf
// tokens per rank, Ce = cf*k*n*ep/E per local expert with the capacity rounded up per routing group, as the
// executor: models/transformer.hpp moe_capacity_tokens) and reduce-scattered after fc2.
// Shared experts (fs > 0) run as a dense TP-sharded MLP over all n tokens beside the routed ones.
struct MoeMlp {
  const Layer& L;
  double E, k, cf, kc, fe, fe_in, fs, fs_in, El, Ce, nt, S_a2a, S_tp;

  explicit MoeMlp(const Layer& l) : L(l) {
    const Transformer& m = L.m;
    E = (double)m.moe.experts, k = m.moe.top_k, cf = m.moe.capacity_factor;
    fe = (double)m.expert_ffn(), fe_in = L.swiglu ? 2 * fe : fe;
    fs = (double)m.moe.shared_ffn_hidden, fs_in = L.swiglu ? 2 * fs : fs;
    nt = L.t > 1 ? L.n / L.t : L.n;
    // Each rank routes its nt tokens as one group: cap tokens per expert (rounded up, as the executor), so kc
    // capacity-padded copies per routed token (k x cf when cap is whole); an expert takes cap from each of the
    // ep ranks' groups, gathered over the n / nt TP ranks.
    const double cap = (double)moe_capacity_tokens((long long)std::llround(nt), m.moe.experts, m.moe.top_k, cf);
    kc = E * cap / nt;
    El = E / L.p.ep, Ce = cap * L.p.ep * (L.n / nt);
    S_a2a = L.e * nt * L.h * kc, S_tp = L.e * L.n * L.h * kc;
  }
  void fwd(PassCost& pc, bool rc) const;
  void bwd(PassCost& pc) const;
};

void MoeMlp::fwd(PassCost& pc, bool rc) const {
  const detail::Ctx& c = L.c;
  const double e = L.e, n = L.n, h = L.h, t = L.t, tsp = L.tsp;
  const bool sp = L.sp, swiglu = L.swiglu;
  auto add = [&](Op op) { Layer::add_fwd(pc, op, rc); };
  add(c.elem("ln2", 2 * e * n * h / tsp));
  if (fs > 0) {
    if (sp) add(c.comm("moe.shared.tp.ag", Coll::all_gather, e * n * h, pc));
    add(c.gemm("moe.shared.fc1", n, h, fs_in / t));          // [n,h] x [h,fs_in/t]
    add(c.elem("moe.shared.act", (swiglu ? 3 : 2) * e * n * fs / t));
    add(c.gemm("moe.shared.fc2", n, fs / t, h));             // [n,fs/t] x [fs/t,h]
    if (t > 1) add(c.comm(sp ? "moe.shared.tp.rs" : "moe.shared.tp.ar", sp ? Coll::reduce_scatter : Coll::all_reduce, e * n * h, pc));
  }
  add(c.gemm("moe.router", nt, h, E));                       // [nt,h] x [h,E]
  add(c.elem("moe.permute", (kc + 1) * e * nt * h + 2 * 4 * nt * E));  // top-k, gather token copies
  add(c.comm_n("moe.dispatch", Coll::all_to_all, S_a2a, 1, CommGroup::ep, pc, OpClass::ep_comm));
  if (t > 1) add(c.comm("moe.tp.ag", Coll::all_gather, S_tp, pc));
  L.cast_fwd(pc, "moe.fc1", El * Ce, h, El * fe_in / t, rc);  // El experts' inputs and weights
  add(c.lin_rep("moe.fc1", El, Ce, h, fe_in / t));           // per local expert [Ce,h] x [h,fe_in/t]
  add(c.elem("moe.act", (swiglu ? 3 : 2) * e * n * kc * fe / t));
  L.cast_fwd(pc, "moe.fc2", El * Ce, fe / t, El * h, rc);
  add(c.lin_rep("moe.fc2", El, Ce, fe / t, h));              // per local expert [Ce,fe/t] x [fe/t,h]
  if (t > 1) add(c.comm("moe.tp.rs", Coll::reduce_scatter, S_tp, pc));
  add(c.comm_n("moe.combine", Coll::all_to_all, S_a2a, 1, CommGroup::ep, pc, OpClass::ep_comm));
  add(c.elem("moe.unpermute", (kc + 1) * e * nt * h));       // weighted sum of the k copies
  if (t > 1 && !sp) add(c.comm("moe.tp.ag_out", Coll::all_gather, e * n * h, pc));
  add(c.elem("resid2", (3 * e + L.mask) * n * h / tsp));
}

void MoeMlp::bwd(PassCost& pc) const {
  const detail::Ctx& c = L.c;
  const double e = L.e, n = L.n, h = L.h, t = L.t, tsp = L.tsp;
  const bool sp = L.sp, swiglu = L.swiglu;
  pc.add(c.elem("resid2.bwd", (3 * e + L.mask) * n * h / tsp));
  pc.add(c.elem("moe.unpermute.bwd", (kc + 1) * e * nt * h));
  pc.add(c.comm_n("moe.combine.bwd", Coll::all_to_all, S_a2a, 1, CommGroup::ep, pc, OpClass::ep_comm));
  if (t > 1) pc.add(c.comm("moe.tp.ag.bwd", Coll::all_gather, S_tp, pc));  // grad of the reduce-scatter
  L.cast_bwd(pc, "moe.fc2", El * Ce, h);
  pc.add(c.lin_rep("moe.fc2.dgrad", El, Ce, h, fe / t));     // [Ce,h] x [h,fe/t]
  pc.add(c.lin_rep("moe.fc2.wgrad", El, fe / t, Ce, h));     // [fe/t,Ce] x [Ce,h]
  pc.add(c.elem("moe.act.bwd", (swiglu ? 5 : 3) * e * n * kc * fe / t));
  L.cast_bwd(pc, "moe.fc1", El * Ce, fe_in / t);
  pc.add(c.lin_rep("moe.fc1.dgrad", El, Ce, fe_in / t, h));  // [Ce,fe_in/t] x [fe_in/t,h]
  if (t > 1) add_overlapped(pc, c.comm("moe.tp.ag.fc1", Coll::all_gather, S_tp, pc));  // re-gather fc1 input
  pc.add(c.lin_rep("moe.fc1.wgrad", El, h, Ce, fe_in / t));  // [h,Ce] x [Ce,fe_in/t]
  if (t > 1) add_overlapped(pc, c.comm("moe.tp.rs.fc1", Coll::reduce_scatter, S_tp, pc));
  pc.add(c.comm_n("moe.dispatch.bwd", Coll::all_to_all, S_a2a, 1, CommGroup::ep, pc, OpClass::ep_comm));
  pc.add(c.elem("moe.permute.bwd", (kc + 1) * e * nt * h + 2 * 4 * nt * E));
  pc.add(c.gemm("moe.router.dgrad", nt, E, h));              // [nt,E] x [E,h]
  pc.add(c.gemm("moe.router.wgrad", h, nt, E));              // [h,nt] x [nt,E]
  if (t > 1 && !sp) pc.add(c.comm("moe.tp.ag_in.bwd", Coll::all_gather, e * n * h, pc));
  if (fs > 0) {
    L.row_bwd(pc, "moe.shared.fc2", fs / t, h, "shared.fc2");
    pc.add(c.elem("moe.shared.act.bwd", (swiglu ? 5 : 3) * e * n * fs / t));
    L.column_bwd(pc, "moe.shared.fc1", h, fs_in / t, "shared.fc1");
  }
  pc.add(c.elem("ln2.bwd", 4 * e * n * h / tsp));
}

// The MoE layer's passes, stored bytes and parameters; returns the local experts' forward FLOPs of one
// micro-batch (fc1 + fc2, capacity padding included).
double moe_layer(const Layer& L, CostModel& cm) {
  const MoeMlp M(L);
  const double e = L.e, n = L.n, h = L.h, t = L.t, qw = L.qw, kvd = L.kvd;
  cm.moe_every = L.m.moe.every;
  PassCost mf;
  L.attention_fwd(mf, false);
  M.fwd(mf, false);
  double expert_fwd_flops = 0;
  for (const Op& op : mf.ops)
    if (op.name == "moe.fc1" || op.name == "moe.fc2") expert_fwd_flops += op.flops;
  cm.moe_fwd = mf;
  cm.moe_bwd = L.backward([&](PassCost& pc, bool rc) { M.fwd(pc, rc); }, [&](PassCost& pc) { M.bwd(pc); });
  // Stored: attention half as dense; MLP half: LN2 in, router in, MLP dropout mask (per token), router
  // probabilities (fp32), the dispatched tokens (fc1 input, before the TP gather) and the combined expert
  // outputs (gate-weight gradient), fc1 output and fc2 input scaled by k*cf; the shared experts' fc1 output
  // and fc2 input (their input is LN2's output, already counted).
  const double moe_mlp = L.repl_mlp / L.tsp + 4 * M.nt * M.E + 2 * e * M.nt * M.kc * h +
                         M.kc * (e * n * (M.fe_in + M.fe)) / t + e * n * (M.fs_in + M.fs) / t;
  const double moe_full = L.repl_attn / L.tsp + L.sharded_attn / t + L.core + moe_mlp;
  // selective_op: the MoE half reruns whole (grouped expert GEMMs and all-to-alls are not kept; the router's
  // logits, kept as its first aten.mm, are left out here as small)
  L.stored(moe_full, moe_full - L.core, L.op_sac_attn_bytes(), cm.moe_stored_bytes, cm.moe_transient_bytes);
  // Parameters per GPU: attention + both norms as the dense layer, router (replicated), local experts.
  const double attn_params = (h * (qw + 2 * kvd) + qw * h + (L.qkv_b ? qw + 2 * kvd : 0)) / t +
                             ((L.proj_b ? h : 0) + (L.gpt ? 4 * h : 2 * h));  // output bias + both norms
  cm.moe_expert_params = local_expert_params(L.m, L.p.ep, (int)t);
  const double shared_params =
      M.fs > 0 ? (h * M.fs_in + M.fs * h + (L.mlp_b ? M.fs_in : 0)) / t + (L.mlp_b ? h : 0) : 0;
  cm.moe_params = attn_params + h * M.E + cm.moe_expert_params + shared_params;
  // fp8 copies (1 byte each) of the attention linears' and the local experts' weights (not the router's)
  if (L.c.fp8) cm.moe_fp8_weight_bytes = (h * (qw + 2 * kvd) + qw * h) / t + M.El * (h * M.fe_in + M.fe * h) / t;
  return expert_fwd_flops;
}

// ---- embedding and head -----------------------------------------------------------------------------------
void embed_and_head(const Layer& L, CostModel& cm) {
  const detail::Ctx& c = L.c;
  const double e = L.e, n = L.n, h = L.h, t = L.t, tsp = L.tsp, V = L.V;
  const bool sp = L.sp;
  PassCost ef, eb;
  ef.add(c.elem("embed.lookup", (L.gpt ? 3 : 2) * e * n * h / tsp));
  if (t > 1) ef.add(c.comm(sp ? "tp.rs.embed" : "tp.ar.embed", sp ? Coll::reduce_scatter : Coll::all_reduce, e * n * h, ef));
  if (sp) eb.add(c.comm("tp.ag.embed", Coll::all_gather, e * n * h, eb));
  eb.add(c.elem("embed.bwd", 3 * e * n * h));
  cm.embed_fwd = ef;
  cm.embed_bwd = eb;
  cm.embed_stored_bytes = L.mask * n * h / tsp;
  PassCost hf, hb;
  hf.add(c.elem("final_norm", 2 * e * n * h / tsp));
  if (sp) hf.add(c.comm("tp.ag.head", Coll::all_gather, e * n * h, hf));
  hf.add(c.gemm("lm_head", n, h, V / t));                         // [n,h] x [h,V/t]
  hf.add(c.elem("loss", (e + 4 + 4) * n * V / t));                // fp32 softmax cross-entropy over V/t logits
  if (t > 1) hf.add(c.comm("tp.ar.loss", Coll::all_reduce, 3 * 4 * n, hf));
  hb.add(c.elem("loss.bwd", (4 + e) * n * V / t));
  hb.add(c.gemm("lm_head.dgrad", n, V / t, h));
  hb.add(c.gemm("lm_head.wgrad", h, n, V / t));
  if (t > 1) add_overlapped(hb, c.comm(sp ? "tp.rs.head" : "tp.ar.head", sp ? Coll::reduce_scatter : Coll::all_reduce, e * n * h, hb));
  hb.add(c.elem("final_norm.bwd", 4 * e * n * h / tsp));
  cm.head_fwd = hf;
  cm.head_bwd = hb;
  // Saved: the final norm's input and output (replicated over TP without SP, sequence-sharded with it:
  // Megatron's output layer saves the sharded input and re-gathers it) and the fp32 probabilities over V/t.
  cm.head_stored_bytes = 2 * e * n * h / tsp + 4 * n * V / t;
  cm.head_transient_bytes = e < 4 ? e * n * V / t : 0.0;
}

// ---- parameters per GPU -----------------------------------------------------------------------------------
void params_per_gpu(const Layer& L, CostModel& cm) {
  const double h = L.h, t = L.t, qw = L.qw, kvd = L.kvd, V = L.V;
  double lin = h * (qw + 2 * kvd) + qw * h + h * L.f_in + L.f * h;  // sharded over t
  double bias_sharded = (L.qkv_b ? qw + 2 * kvd : 0) + (L.mlp_b ? L.f_in : 0);      // column-parallel biases
  double repl_params = (L.proj_b ? h : 0) + (L.mlp_b ? h : 0) + (L.gpt ? 4 * h : 2 * h);  // row-parallel biases + two norms
  cm.layer_params = (lin + bias_sharded) / t + repl_params;
  if (L.c.fp8) cm.layer_fp8_weight_bytes = lin / t;  // Transformer Engine's fp8 weight copies, 1 byte per weight
  cm.embed_params = V * h / t + (L.gpt ? L.s * h : 0);
  cm.head_params = (L.gpt ? 2 * h : h) + ((L.m.tied_embeddings && L.p.pp == 1) ? 0 : V * h / t);
}

}  // namespace

CostModel build_cost_model(const Scenario& sc, const TpComm& tpc) {
  const Transformer& m = sc.model;
  const Plan& p = sc.plan;
  const bool moe = m.moe.experts > 0;
  if (p.tp_mode == TpMode::d2) {
    if (moe) throw std::invalid_argument("MoE layers with 2D (Optimus) tensor parallelism are not modelled");
    return detail::build_cost_model_2d(sc, tpc);
  }
  const Layer L(sc, tpc);
  CostModel cm;
  dense_layer(L, cm);
  const double expert_fwd_flops = moe ? moe_layer(L, cm) : 0;
  embed_and_head(L, cm);
  params_per_gpu(L, cm);

  // ---- model FLOPs per step: 3 x forward (no recompute) over the whole batch, all TP ranks -----------------
  // MoE layers count their forward with the experts' FLOPs on k copies per token (no capacity padding).
  // Flash attention (and the unfused cp form's causal prefixes) count as the unfused core would (full s x s
  // score GEMMs, Megatron's convention), so model FLOPs and MFU do not depend on the attention kernel.
  const double attn_convention = L.flash ? 4 * L.bh * L.s_q * L.s * L.dh * (1 - detail::kCausalFraction)
                                         : 4 * L.bh * L.s_q * (L.s - L.s_kq) * L.dh;
  const double layer_model_fwd = cm.layer_fwd.flops + attn_convention;
  double fwd_flops_mb = (double)m.layers * layer_model_fwd + cm.head_fwd.flops;
  if (moe) {
    double moe_layers = (double)m.moe_layers_in(0, m.layers);
    const double padding = m.moe.top_k / (MoeMlp(L).kc);  // useful share of the capacity-padded expert work
    double moe_useful = cm.moe_fwd.flops + attn_convention - expert_fwd_flops * (1 - padding);
    fwd_flops_mb = ((double)m.layers - moe_layers) * layer_model_fwd + moe_layers * moe_useful + cm.head_fwd.flops;
  }
  cm.model_flops_per_step = 3 * fwd_flops_mb * L.t * (double)p.num_microbatches * p.data_ranks();
  cm.layers = m.layers;
  cm.recompute_layers = p.recompute_layers;
  if (cm.partial_recompute()) {  // the layers that recompute nothing: the same layer without recompute
    Scenario plain = sc;
    plain.plan.recompute = Recompute::none;
    plain.plan.recompute_layers = -1;
    const CostModel pc = build_cost_model(plain, tpc);
    cm.layer_bwd_plain = pc.layer_bwd, cm.moe_bwd_plain = pc.moe_bwd;
    cm.layer_stored_plain_bytes = pc.layer_stored_bytes, cm.moe_stored_plain_bytes = pc.moe_stored_bytes;
  }
  return cm;
}

// Closed forms over the unsharded model: attention (weights, q/k/v and output biases), one MLP of inner size f
// (weights, biases), the layer's two norms (LayerNorm g, b for GPT-style; RMSNorm g otherwise).
static double attention_params_full(const Transformer& m) {
  double h = (double)m.hidden, qw = (double)m.q_width(), kvd = (double)m.kv_heads * m.head_dim();
  return h * (qw + 2 * kvd) + qw * h + (m.has_qkv_bias() ? qw + 2 * kvd : 0) + (m.has_proj_bias() ? h : 0);
}
static double mlp_params_full(const Transformer& m, double f) {
  double h = (double)m.hidden, f_in = m.activation == Activation::gelu ? f : 2 * f;
  return h * f_in + f * h + (m.has_mlp_bias() ? f_in + h : 0);
}
static double norm_params_full(const Transformer& m) { return (m.activation == Activation::gelu ? 4 : 2) * (double)m.hidden; }

double layer_params_full(const Transformer& m) {
  return attention_params_full(m) + mlp_params_full(m, (double)m.ffn_hidden) + norm_params_full(m);
}

double expert_params_full(const Transformer& m) { return mlp_params_full(m, (double)m.expert_ffn()); }

double local_expert_params(const Transformer& m, int ep, int tp) {
  if (m.moe.experts <= 0) return 0;
  const double h = (double)m.hidden, fe = (double)m.expert_ffn(), fe_in = m.activation == Activation::gelu ? fe : 2 * fe;
  const bool b = m.has_mlp_bias();
  return (double)(m.moe.experts / ep) * ((h * fe_in + fe * h + (b ? fe_in : 0)) / tp + (b ? h : 0));
}

double moe_layer_params_full(const Transformer& m) {
  double shared = m.moe.shared_ffn_hidden > 0 ? mlp_params_full(m, (double)m.moe.shared_ffn_hidden) : 0;
  return attention_params_full(m) + norm_params_full(m) + (double)m.hidden * (double)m.moe.experts +
         (double)m.moe.experts * expert_params_full(m) + shared;
}

double total_params(const Transformer& m) {
  double h = (double)m.hidden, V = (double)m.vocab;
  bool gpt = m.activation == Activation::gelu;
  double moe_layers = (double)m.moe_layers_in(0, m.layers), dense_layers = (double)m.layers - moe_layers;
  double layers = dense_layers * layer_params_full(m) + (moe_layers > 0 ? moe_layers * moe_layer_params_full(m) : 0);
  double emb = V * h + (gpt ? (double)m.seq_len * h : 0);
  double head = (gpt ? 2 * h : h) + (m.tied_embeddings ? 0 : V * h);
  return layers + emb + head;
}

double active_params(const Transformer& m) {
  double idle_experts = (double)(m.moe.experts - m.moe.top_k);
  return total_params(m) - (double)m.moe_layers_in(0, m.layers) * idle_experts * expert_params_full(m);
}

double megatron_flops_per_iteration(const Transformer& m, long long B, long long s, bool full_recompute) {
  double l = (double)m.layers, h = (double)m.hidden, V = (double)m.vocab, Bs = (double)B * (double)s;
  if (full_recompute) return 96 * Bs * l * h * h * (1 + (double)s / (6 * h) + V / (16 * l * h));
  return 72 * Bs * l * h * h * (1 + (double)s / (6 * h) + V / (12 * l * h));
}

}  // namespace tp
