// op_cost: per-op FLOPs, bytes, times and stored activations of a transformer layer. See op_cost.hpp.
// Notation: n = b*s tokens of the micro-batch, h hidden, f ffn_hidden, a heads, t = tp, e = activation bytes,
// kvd = kv_heads * head_dim, tsp = t with sequence parallelism else 1 (sequence-sharded tensors).
#include "op_cost.hpp"

#include <algorithm>

namespace tp {

const char* op_class_name(OpClass c) {
  switch (c) {
    case OpClass::gemm: return "gemm";
    case OpClass::attention: return "attention";
    case OpClass::elementwise: return "elementwise";
    case OpClass::tp_comm: return "tp_comm";
  }
  return "?";
}

void PassCost::add(const Op& op) {
  ops.push_back(op);
  time_s += op.time_s;
  if (op.recompute) recompute_s += op.time_s;
  else if (op.cls == OpClass::tp_comm) tp_comm_s += op.time_s;
  else compute_s += op.time_s;
  flops += op.flops;
}

void PassCost::append(const PassCost& o, int times) {
  for (int i = 0; i < times; ++i)
    for (auto& op : o.ops) add(op);
  tp_bytes.intra += times * o.tp_bytes.intra;
  tp_bytes.inter += times * o.tp_bytes.inter;
}

namespace {

struct Ctx {
  const Gpu* gpu;
  Precision prec;
  const TpComm* tpc;
  int t;
  bool sp;
  double e;  // activation element bytes

  double gemm_s(double flops, double bytes) const {
    double peak = gpu->matrix_flops_per_s[(int)prec];
    double t_math = flops / (peak * gpu->matrix_efficiency.at(flops));
    double t_mem = bytes / (gpu->hbm_bandwidth_bytes_per_s * gpu->memory_efficiency.at(bytes));
    return std::max(t_math, t_mem) + gpu->kernel_overhead_s;
  }
  double mem_s(double bytes) const {
    return bytes / (gpu->hbm_bandwidth_bytes_per_s * gpu->memory_efficiency.at(bytes)) + gpu->kernel_overhead_s;
  }
  // GEMM [M,K] x [K,N]
  Op gemm(const std::string& name, double M, double K, double N, OpClass cls = OpClass::gemm) const {
    Op op{name, cls};
    op.flops = 2 * M * K * N;
    op.bytes = (M * K + K * N + M * N) * e;
    op.time_s = gemm_s(op.flops, op.bytes);
    return op;
  }
  // Batched GEMM: `batch` products [M,K] x [K,N]
  Op bgemm(const std::string& name, double batch, double M, double K, double N) const {
    Op op{name, OpClass::attention};
    op.flops = 2 * batch * M * K * N;
    op.bytes = batch * (M * K + K * N + M * N) * e;
    op.time_s = gemm_s(op.flops, op.bytes);
    return op;
  }
  Op elem(const std::string& name, double bytes, OpClass cls = OpClass::elementwise) const {
    Op op{name, cls};
    op.bytes = bytes;
    op.time_s = mem_s(bytes);
    return op;
  }
  Op comm(const std::string& name, Coll c, double bytes, PassCost& pc) const {
    Op op{name, OpClass::tp_comm};
    op.bytes = bytes;
    op.time_s = t > 1 ? tpc->time_s(c, bytes, CommGroup::tp) : 0;
    if (t > 1) {
      TierBytes tb = tpc->bytes(c, bytes, CommGroup::tp);
      pc.tp_bytes.intra += tb.intra;
      pc.tp_bytes.inter += tb.inter;
    }
    return op;
  }
};

// Adds an overlapped TP collective: it runs while `under` (the op just added) computes; only the excess shows.
void add_overlapped(PassCost& pc, Op comm) {
  double under = pc.ops.empty() ? 0 : pc.ops.back().time_s;
  comm.hidden_s = std::min(comm.time_s, under);
  comm.time_s -= comm.hidden_s;
  pc.add(comm);
}

}  // namespace

CostModel build_cost_model(const Scenario& sc, const TpComm& tpc) {
  const Transformer& m = sc.model;
  const Plan& p = sc.plan;
  const double b = (double)p.microbatch, s = (double)sc.training.seq_len, n = b * s;
  const double h = (double)m.hidden, f = (double)m.ffn_hidden, a = (double)m.heads, V = (double)m.vocab;
  const double t = p.tp, kvd = (double)m.kv_heads * m.head_dim();
  const bool sp = p.sequence_parallel && p.tp > 1;
  const double tsp = sp ? t : 1;
  const bool gpt = m.activation == Activation::gelu;  // GPT-style: biases, learned positions, dropout
  const bool swiglu = !gpt;
  Ctx c{&sc.cluster.gpu, sc.training.precision, &tpc, p.tp, sp, (double)precision_bytes(sc.training.precision)};
  const double e = c.e;
  const double scores = b * (a / t) * s * s;  // attention score elements per rank
  const double f_in = swiglu ? 2 * f : f;      // fc1 output width (gate and up for SwiGLU)

  CostModel cm;
  // ---- layer forward ------------------------------------------------------------------------------------
  PassCost fwd;
  auto attention_core = [&](PassCost& pc, bool recompute) {
    Op qk = c.bgemm("attn.qk", b * a / t, s, (double)m.head_dim(), s);  // [s,dh] x [dh,s] per head
    Op sm = c.elem("attn.softmax", 2 * e * scores, OpClass::attention);
    Op av = c.bgemm("attn.av", b * a / t, s, s, (double)m.head_dim());
    for (Op* op : {&qk, &sm}) { op->recompute = recompute; pc.add(*op); }
    if (gpt) { Op dr = c.elem("attn.dropout", (2 * e + 1) * scores, OpClass::attention); dr.recompute = recompute; pc.add(dr); }
    av.recompute = recompute;
    pc.add(av);
  };
  auto forward = [&](PassCost& pc, bool recompute) {
    auto add = [&](Op op) { op.recompute = recompute; pc.add(op); };
    add(c.elem("ln1", 2 * e * n * h / tsp));
    if (sp) add(c.comm("tp.ag1", Coll::all_gather, e * n * h, pc));
    add(c.gemm("qkv", n, h, (h + 2 * kvd) / t));                 // [n,h] x [h,(h+2kvd)/t]
    attention_core(pc, recompute);
    add(c.gemm("proj", n, h / t, h));                            // [n,h/t] x [h/t,h]
    add(c.comm(sp ? "tp.rs1" : "tp.ar1", sp ? Coll::reduce_scatter : Coll::all_reduce, e * n * h, pc));
    add(c.elem("resid1", (3 * e + (gpt ? 1 : 0)) * n * h / tsp));
    add(c.elem("ln2", 2 * e * n * h / tsp));
    if (sp) add(c.comm("tp.ag2", Coll::all_gather, e * n * h, pc));
    add(c.gemm("fc1", n, h, f_in / t));                          // [n,h] x [h,f_in/t]
    add(c.elem("act", (swiglu ? 3 : 2) * e * n * f / t));
    add(c.gemm("fc2", n, f / t, h));                             // [n,f/t] x [f/t,h]
    add(c.comm(sp ? "tp.rs2" : "tp.ar2", sp ? Coll::reduce_scatter : Coll::all_reduce, e * n * h, pc));
    add(c.elem("resid2", (3 * e + (gpt ? 1 : 0)) * n * h / tsp));
  };
  forward(fwd, false);
  cm.layer_fwd = fwd;

  // ---- layer backward (with recompute first) --------------------------------------------------------------
  PassCost bwd;
  if (p.recompute == Recompute::full) forward(bwd, true);
  if (p.recompute == Recompute::selective) attention_core(bwd, true);
  // Column-parallel linear backward: with SP, the input all-gather is redone under dgrad and the grad-input
  // reduce-scatter overlaps wgrad; without SP, the grad-input all-reduce overlaps wgrad (Megatron async comm).
  auto column_bwd = [&](const char* name, double K_in, double N_out, const char* tag) {
    Op dg = c.gemm(std::string(name) + ".dgrad", n, N_out, K_in);
    bwd.add(dg);
    if (sp) add_overlapped(bwd, c.comm(std::string("tp.ag.") + tag, Coll::all_gather, e * n * h, bwd));
    bwd.add(c.gemm(std::string(name) + ".wgrad", K_in, n, N_out));
    add_overlapped(bwd, c.comm(std::string(sp ? "tp.rs." : "tp.ar.") + tag,
                               sp ? Coll::reduce_scatter : Coll::all_reduce, e * n * h, bwd));
  };
  auto row_bwd = [&](const char* name, double K_in, double N_out, const char* tag) {
    if (sp) bwd.add(c.comm(std::string("tp.ag.") + tag, Coll::all_gather, e * n * h, bwd));
    bwd.add(c.gemm(std::string(name) + ".dgrad", n, N_out, K_in));
    bwd.add(c.gemm(std::string(name) + ".wgrad", K_in, n, N_out));
  };
  bwd.add(c.elem("resid2.bwd", (3 * e + (gpt ? 1 : 0)) * n * h / tsp));
  row_bwd("fc2", f / t, h, "fc2");
  bwd.add(c.elem("act.bwd", (swiglu ? 5 : 3) * e * n * f / t));
  column_bwd("fc1", h, f_in / t, "fc1");
  bwd.add(c.elem("ln2.bwd", 4 * e * n * h / tsp));
  bwd.add(c.elem("resid1.bwd", (3 * e + (gpt ? 1 : 0)) * n * h / tsp));
  row_bwd("proj", h / t, h, "proj");
  {
    double bh = b * a / t, dh = (double)m.head_dim();
    bwd.add(c.bgemm("attn.av.dgrad", bh, s, dh, s));
    bwd.add(c.bgemm("attn.av.wgrad", bh, s, s, dh));
    if (gpt) bwd.add(c.elem("attn.dropout.bwd", (2 * e + 1) * scores, OpClass::attention));
    bwd.add(c.elem("attn.softmax.bwd", 3 * e * scores, OpClass::attention));
    bwd.add(c.bgemm("attn.qk.dgrad", bh, s, s, dh));
    bwd.add(c.bgemm("attn.qk.wgrad", bh, s, s, dh));
  }
  column_bwd("qkv", h, (h + 2 * kvd) / t, "qkv");
  bwd.add(c.elem("ln1.bwd", 4 * e * n * h / tsp));
  cm.layer_bwd = bwd;

  // ---- stored activations per layer per micro-batch (Korthikanti et al. 2022, generalised) --------------
  const double mask = gpt ? 1 : 0;  // dropout masks are 1 byte per element
  // replicated across TP (sharded only with SP): LN1 in, QKV in, attn-out dropout mask, LN2 in, fc1 in, MLP mask
  const double repl = (4 * e + 2 * mask) * n * h;
  // sharded over TP: Q, K, V, proj input, fc1 output (activation input), fc2 input
  const double sharded = e * n * (2 * h + 2 * kvd + f_in + f);
  // attention core per rank: softmax output, dropout mask, dropout output (GPT); softmax output only otherwise
  const double core = (gpt ? 2 * e + 1 : e) * scores;
  const double full_layer = repl / tsp + sharded / t + core;
  switch (p.recompute) {
    case Recompute::none: cm.layer_stored_bytes = full_layer; break;
    case Recompute::selective: cm.layer_stored_bytes = repl / tsp + sharded / t; cm.layer_transient_bytes = core; break;
    case Recompute::full: cm.layer_stored_bytes = e * n * h / tsp; cm.layer_transient_bytes = full_layer; break;
  }

  // ---- embedding and head ---------------------------------------------------------------------------------
  {
    PassCost ef, eb;
    ef.add(c.elem("embed.lookup", (gpt ? 3 : 2) * e * n * h / tsp));
    if (t > 1) ef.add(c.comm(sp ? "tp.rs.embed" : "tp.ar.embed", sp ? Coll::reduce_scatter : Coll::all_reduce, e * n * h, ef));
    if (sp) eb.add(c.comm("tp.ag.embed", Coll::all_gather, e * n * h, eb));
    eb.add(c.elem("embed.bwd", 3 * e * n * h));
    cm.embed_fwd = ef;
    cm.embed_bwd = eb;
    cm.embed_stored_bytes = mask * n * h / tsp;
  }
  {
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
    cm.head_stored_bytes = 2 * e * n * h / t + 4 * n * V / t;
  }

  // ---- parameters per GPU --------------------------------------------------------------------------------
  double lin = h * (h + 2 * kvd) + h * h + h * f_in + f * h;  // sharded over t
  double bias_sharded = gpt ? (h + 2 * kvd) + f : 0;          // column-parallel biases
  double repl_params = gpt ? (h + h + 4 * h) : 2 * h;         // row-parallel biases + two norms
  cm.layer_params = (lin + bias_sharded) / t + repl_params;
  cm.embed_params = V * h / t + (gpt ? s * h : 0);
  cm.head_params = (gpt ? 2 * h : h) + ((m.tied_embeddings && p.pp == 1) ? 0 : V * h / t);

  // ---- model FLOPs per step: 3 x forward (no recompute) over the whole batch, all TP ranks -----------------
  double fwd_flops_mb = (double)m.layers * cm.layer_fwd.flops + cm.head_fwd.flops;
  cm.model_flops_per_step = 3 * fwd_flops_mb * t * (double)p.num_microbatches * p.dp;
  return cm;
}

double layer_params_full(const Transformer& m) {
  double h = (double)m.hidden, f = (double)m.ffn_hidden, kvd = (double)m.kv_heads * m.head_dim();
  bool gpt = m.activation == Activation::gelu;
  double f_in = gpt ? f : 2 * f;
  return h * (h + 2 * kvd) + h * h + h * f_in + f * h + (gpt ? (h + 2 * kvd) + f + 6 * h : 2 * h);
}

double total_params(const Transformer& m) {
  double h = (double)m.hidden, V = (double)m.vocab;
  bool gpt = m.activation == Activation::gelu;
  double layer = layer_params_full(m);
  double emb = V * h + (gpt ? (double)m.seq_len * h : 0);
  double head = (gpt ? 2 * h : h) + (m.tied_embeddings ? 0 : V * h);
  return (double)m.layers * layer + emb + head;
}

double megatron_flops_per_iteration(const Transformer& m, long long B, long long s, bool full_recompute) {
  double l = (double)m.layers, h = (double)m.hidden, V = (double)m.vocab, Bs = (double)B * (double)s;
  if (full_recompute) return 96 * Bs * l * h * h * (1 + (double)s / (6 * h) + V / (16 * l * h));
  return 72 * Bs * l * h * h * (1 + (double)s / (6 * h) + V / (12 * l * h));
}

}  // namespace tp
