// analytic: see analytic.hpp. Notation: L layers, p = pp, Lp = L / p layers per stage (uneven stages: n_first,
// n_mid, n_last; the busiest stage sets compute and bubble, the stage with most parameters the state), m micro-batches per
// step, v model chunks per stage, e activation / weight bytes, g gradient bytes; P parameters per GPU of the
// busiest stage (D dense + E expert). The stage ranks of a layout are placed like Megatron's (tp fastest,
// then dp, then stage): a dp group has min(dp, gpus_per_node / tp) members per node.
#include "analytic.hpp"

#include <algorithm>
#include <cmath>

#include "schedule/exchange.hpp"
#include "sim/op_cost.hpp"
#include "sim/program.hpp"
#include "sim/step_formulas.hpp"

namespace tp {

AnalyticModel::AnalyticModel(const Scenario& s) : sc(s) {
  double headroom = sc.search ? sc.search->memory_headroom : 0.0;
  capacity_bytes = sc.cluster.gpu.hbm_bytes * (1 - headroom);
  int gpn = sc.cluster.gpus_per_node;
  int gpus = std::min(sc.cluster.total_gpus(), std::max(2 * gpn, 2));
  topo_ = topology_for(sc.cluster, gpus);
  lat_.intra_latency_s = gpn > 1 ? topo_->latency_s(0, 1) : 0;
  lat_.inter_latency_s = gpus > gpn ? topo_->latency_s(0, gpn) : lat_.intra_latency_s;
}

// Ring all-reduce (coll 0), reduce-scatter (1), all-gather (2), closed form over the simulator's own phase
// list (sim/step_formulas.hpp).
double AnalyticModel::coll_s(int coll, int g, int k, double S) const {
  return collective_closed_form_s((Coll)coll, g, k, S, sc.cluster, lat_);
}

double AnalyticModel::p2p_s(bool inter, double bytes) const { return p2p_closed_form_s(inter, bytes, sc.cluster, lat_); }

const MicroCost& AnalyticModel::micro(const Layout& lay, long long mb, bool sp, Recompute rc) const {
  auto key = std::make_tuple(lay.tp, (int)lay.tp_mode, lay.node_blocks, mb, sp, (int)rc, lay.ep, lay.cp, (int)lay.prec);
  {
    std::lock_guard<std::mutex> lk(mu_);
    auto it = micro_.find(key);
    if (it != micro_.end()) return *it->second;
  }
  auto out = std::make_unique<MicroCost>();
  Scenario s = sc;
  s.search.reset();
  s.training.precision = lay.prec;
  Plan& p = s.plan;
  p = Plan{};
  p.attention = sc.search ? search_attention(sc.search->fix) : sc.plan.attention;  // one kind per model
  p.tp = lay.tp; p.dp = lay.ep; p.pp = 1; p.ep = lay.ep; p.cp = lay.cp; p.tp_mode = lay.tp_mode;
  p.tp_grid_node_blocks = lay.node_blocks;
  p.microbatch = mb; p.sequence_parallel = sp; p.recompute = rc;
  int gpus = std::min(sc.cluster.total_gpus(), std::max(lay.tp * lay.ep * lay.cp, 1));
  try {
    CostModel cm = cost_model_on(s, *topology_for(sc.cluster, gpus));
    const Transformer& M = sc.model;
    double L = (double)M.layers, Lm = cm.moe_every > 0 ? std::floor(L / cm.moe_every) : 0, Ld = L - Lm;
    MicroCost& o = *out;
    o.ok = true;
    o.layer_f_s = (Ld * cm.layer_fwd.time_s + Lm * cm.moe_fwd.time_s) / L;
    o.layer_b_s = (Ld * cm.layer_bwd.time_s + Lm * cm.moe_bwd.time_s) / L;
    o.layer_compute_f_s = (Ld * cm.layer_fwd.compute_s + Lm * cm.moe_fwd.compute_s) / L;
    o.layer_compute_b_s = (Ld * (cm.layer_bwd.compute_s + cm.layer_bwd.recompute_s) +
                           Lm * (cm.moe_bwd.compute_s + cm.moe_bwd.recompute_s)) / L;
    o.embed_f_s = cm.embed_fwd.time_s; o.embed_b_s = cm.embed_bwd.time_s;
    o.head_f_s = cm.head_fwd.time_s; o.head_b_s = cm.head_bwd.time_s;
    o.layer_stored_bytes = (Ld * cm.layer_stored_bytes + Lm * cm.moe_stored_bytes) / L;
    o.layer_transient_bytes = std::max(cm.layer_transient_bytes, Lm > 0 ? cm.moe_transient_bytes : 0.0);
    o.embed_stored_bytes = cm.embed_stored_bytes; o.head_stored_bytes = cm.head_stored_bytes;
    o.head_transient_bytes = cm.head_transient_bytes;
    o.layer_params = (Ld * cm.layer_params + Lm * cm.moe_params) / L;
    o.layer_expert_params = Lm * cm.moe_expert_params / L;
    o.embed_params = cm.embed_params; o.head_params = cm.head_params;
    o.p2p_bytes = pipeline_send_bytes(s, mb, lay.tp);
    o.layer_fp8_weight_bytes = (Ld * cm.layer_fp8_weight_bytes + Lm * cm.moe_fp8_weight_bytes) / L;
  } catch (const std::invalid_argument&) {
    out->ok = false;
  }
  std::lock_guard<std::mutex> lk(mu_);
  auto& slot = micro_[key];
  if (!slot) slot = std::move(out);
  return *slot;
}

// Activations at the peak: the first stage's layers and micro-batches in flight under the schedule (and its
// embedding), the last stage's with its LM head's logits, and with uneven stages the second stage's; plus one
// layer's transient buffers.
static double inflight_activation_bytes(const MicroCost& mc, const Choice& ch, int p, double m, double v, double Lp,
                                        double n_first, double n_mid, double n_last, bool layered, bool uneven) {
  double inflight_layers, inflight_mb;
  if (layered) { inflight_layers = m * Lp; inflight_mb = m; }
  else if (p == 1) { inflight_layers = Lp; inflight_mb = 1; }
  else if (ch.schedule == Schedule::gpipe) { inflight_layers = m * n_first; inflight_mb = m; }
  else if (ch.schedule == Schedule::one_f_one_b) { inflight_mb = std::min<double>(m, p); inflight_layers = inflight_mb * n_first; }
  else {
    double chunks = std::min(m * v, 2.0 * (p - 1) + (v - 1) * p + 1);
    inflight_layers = chunks * n_first / v;
    inflight_mb = std::min(m, std::ceil(chunks / v));
  }
  // (the stage with the LM head: its logits' copy or a layer's transient, whichever is larger: not at once)
  const double head_stage_transient = std::max(mc.layer_transient_bytes, mc.head_transient_bytes);
  double act = inflight_layers * mc.layer_stored_bytes + (p == 1 ? head_stage_transient : mc.layer_transient_bytes) +
               inflight_mb * mc.embed_stored_bytes + (p == 1 ? (layered ? m : 1) * mc.head_stored_bytes : 0);
  if (p > 1) {  // the last stage: fewer micro-batches in flight, the LM head's logits
    double last_mb = layered || ch.schedule == Schedule::gpipe ? m : 1;
    double last = (layered || ch.schedule == Schedule::gpipe ? m * n_last : (v > 1 ? std::min(m * v, (v - 1) * p + 1.0) * n_last / v : n_last)) *
                      mc.layer_stored_bytes + head_stage_transient + last_mb * mc.head_stored_bytes;
    act = std::max(act, last);
  }
  if (uneven && p > 2) {  // the second stage: one micro-batch fewer in flight than the first, a middle stage's layers
    double chunks = ch.schedule == Schedule::gpipe ? m * v
                    : v > 1 ? std::min(m * v, 2.0 * (p - 2) + (v - 1) * p + 1) : std::min<double>(m, p - 1);
    act = std::max(act, chunks * n_mid / v * mc.layer_stored_bytes + mc.layer_transient_bytes);
  }
  return act;
}

// PatrickStar (sim/chunks.hpp): fp16 parameter chunks (gradients reuse them) and optimizer-state chunks of this
// rank's shard; GPU budget = gpu_memory_fraction x HBM, less the all-gather buffer (dp chunks); hybrid Adam puts
// whole optimizer-state chunks on the GPU within hybrid_adam_margin of the spare margin; parameter chunks that
// do not fit next to the activations move over PCIe every step (two loads and one gradient store per moved
// byte) and the Adam of the CPU chunks runs on the host.
AnalyticModel::ChunkedState AnalyticModel::chunked_state(const MicroCost& mc, const Choice& ch, const Params& held,
                                                         int dp, int edp, const ElemBytes& eb, double act,
                                                         double buffers, int sharing_host) const {
  const Offload& o = sc.plan.offload;  // defaults (the search uses PatrickStar's defaults)
  const Host& host = sc.cluster.host;
  const double e = eb.e;
  const double budget = std::min(o.gpu_memory_fraction * sc.cluster.gpu.hbm_bytes, capacity_bytes);
  const double chunk_e = (double)o.chunk_elements;
  const double shard_params = zero_shard(held, ch.zero, 3, dp, edp);
  const double local_chunks = std::ceil(shard_params / chunk_e);
  const double param_bytes = local_chunks * chunk_e * e, os_chunk = chunk_e * eb.optimizer();
  const double comm_buf = dp > 1 ? dp * chunk_e * e : 0;
  const double gathered = dp > 1 ? (mc.layer_params / (dp * chunk_e) + 1) * (dp - 1) * chunk_e * e : 0;
  const double margin = std::max(0.0, budget - act - buffers - param_bytes) * o.hybrid_adam_margin;
  const double os_on_gpu = std::min(local_chunks, std::floor(margin / os_chunk)) * os_chunk;
  const double room = budget - act - buffers - comm_buf - os_on_gpu - std::max(0.0, gathered - comm_buf);
  const double resident = std::min(param_bytes, std::max(room, 0.0));
  const double moved = param_bytes - resident;
  const double host_os_params = shard_params * std::max(0.0, 1 - os_on_gpu / (local_chunks * os_chunk));
  ChunkedState cs;
  cs.weights = resident + gathered;
  cs.optimizer_bytes = os_on_gpu;
  cs.gpu_adam_s = gpu_adam_s(shard_params - host_os_params, sc.cluster.gpu, eb);
  // loaded and evicted twice (a move is a copy)
  cs.offload_s = pcie_copy_s(4 * moved, host) + host_adam_s(host_os_params, host, sharing_host, eb);
  cs.host_bytes = moved + host_os_params * eb.optimizer();
  cs.fits = budget - act - buffers >= (mc.layer_params / (dp * chunk_e) + 1) * dp * chunk_e * e;
  return cs;
}

Estimate AnalyticModel::estimate(const Layout& lay, const MicroCost& mc, const Choice& ch) const {
  Estimate r;
  const Cluster& C = sc.cluster;
  const Gpu& gpu = C.gpu;
  // dp below counts the data ranks (dp x cp): gradients are reduced and ZeRO shards over all of them.
  const int p = lay.pp, dp = lay.dp * lay.cp, gpn = C.gpus_per_node;
  const double L = (double)sc.model.layers, Lp = L / p, m = (double)ch.num_microbatches;
  Training tr = sc.training;
  tr.precision = lay.prec;
  const ElemBytes eb = elem_bytes(tr);
  const double e = eb.e, g = eb.g;
  const bool layered = ch.acc == GradAccumulation::layered;
  // model chunks per stage: interleaved v, modular one layer per chunk, otherwise the whole stage
  const double v = ch.schedule == Schedule::interleaved ? ch.virtual_stages : ch.schedule == Schedule::modular ? Lp : 1;
  const int edp = std::max(1, dp / lay.ep);
  // Layers per stage: the first (embedding), the largest middle one and the last (head); even: Lp each.
  const bool uneven = ch.first_layers > 0 && p > 1;
  const double n_first = uneven ? ch.first_layers : Lp, n_mid = uneven ? ch.mid_layers : Lp,
               n_last = uneven ? ch.last_layers : Lp;

  // ---- compute and bubble (busiest stage) ----
  const double t_l = mc.layer_f_s + mc.layer_b_s;
  const double embed_fb = mc.embed_f_s + mc.embed_b_s, head_fb = mc.head_f_s + mc.head_b_s;
  double t_stage = Lp * t_l + (embed_fb + mc.head_f_s + mc.head_b_s);  // one micro-batch through one stage
  double n_busy = Lp;  // layers of the busiest stage
  if (p > 1) {  // even: Lp t_l + the larger end
    const double t_first = n_first * t_l + embed_fb, t_last = n_last * t_l + head_fb;
    t_stage = std::max({t_first, t_last, n_mid * t_l});
    n_busy = t_stage == t_first ? n_first : t_stage == t_last ? n_last : n_mid;
  }
  r.compute_s = m * t_stage;
  r.tp_comm_s = m * n_busy * (t_l - mc.layer_compute_f_s - mc.layer_compute_b_s);
  if (p > 1) {
    if (layered && ch.schedule == Schedule::gpipe) {
      r.bubble_s = (p - 1) * ((Lp - 1) * m + 1) * t_l;
    } else {
      r.bubble_s = (p - 1) * t_stage / v;
    }
    bool inter = (long long)lay.tp * dp >= gpn;
    // the fill and drain's sends; where the exchanges block compute, sends wait on the critical path too, as the
    // simulator's groups make them: GPipe's forward and backward send of every micro-batch, 1F1B's one send per
    // steady forward-backward pair (the other waits under the peer's compute)
    Plan q;
    q.pp = p, q.schedule = ch.schedule, q.grad_accumulation = ch.acc;
    const double blocked = !exchanges_block_compute(q) ? 0 : ch.schedule == Schedule::gpipe ? 2 * m : m;
    r.pp_comm_s = (2 * (p - 1) + blocked) * p2p_s(inter, mc.p2p_bytes);
  }

  // ---- parameters per GPU: the stage holding the most (first: embedding, last: head) ----
  double P = Lp * mc.layer_params + (mc.embed_params + mc.head_params), n_P = Lp;
  if (p > 1) {  // even: Lp layers + the larger end
    const double P_first = n_first * mc.layer_params + mc.embed_params, P_last = n_last * mc.layer_params + mc.head_params;
    P = std::max({P_first, P_last, n_mid * mc.layer_params});
    n_P = P == P_first ? n_first : P == P_last ? n_last : n_mid;
  }
  const double P_layers = n_P * mc.layer_params, E = n_P * mc.layer_expert_params;
  const double D = P - E;
  Params off;  // granular offload: parameters living in host memory
  if (ch.offload == OffloadKind::granular) {
    off.expert = ch.offload_fraction * E;
    off.dense = ch.experts_only ? 0 : ch.offload_fraction * (P_layers - E);
  }
  const Params held{D, E};
  const OptimizerSplit osplit = optimizer_split(held, off, ch.offload, ch.zero, dp, edp);
  const double gpu_opt_params = osplit.gpu_params, host_opt_params = osplit.host_params;
  const bool zero3 = ch.zero >= 3 && dp > 1;
  const double layer_bytes_e = mc.layer_params * e;
  const StateBytes sb = state_bytes(held, off, ch.offload, ch.zero, dp, edp, eb);
  double weights = sb.weights, grads = sb.gradients, opt = sb.optimizer;
  // fp8 training: Transformer Engine's fp8 weight copies of the GPU-resident layers (ZeRO-3: of the gathered
  // layer and the prefetched next one)
  // (DeepSpeed: bounded by its live parameters, zero3_buffer_params)
  const double z3_share = mc.layer_params > 0 ? zero3_buffer_params(sc.framework, mc.layer_params) / mc.layer_params : 1.0;
  weights += zero3 ? 2 * mc.layer_fp8_weight_bytes * z3_share
                   : Lp * mc.layer_fp8_weight_bytes * (ch.offload == OffloadKind::granular && !ch.experts_only ? 1 - ch.offload_fraction : 1);
  double buffers = pipeline_buffer_bytes(p, mc.p2p_bytes);
  if (zero3) buffers += 2 * layer_bytes_e * z3_share;  // the gathered layer and the prefetched next one
  if (ch.offload == OffloadKind::granular) buffers += 2 * ch.offload_fraction * layer_bytes_e;

  // ---- activations in flight on the first stage ----
  const double act = inflight_activation_bytes(mc, ch, p, m, v, Lp, n_first, n_mid, n_last, layered, uneven);
  r.activation_bytes = act;

  // ---- data-parallel communication ----
  const int k_dp = std::max(1, std::min(dp, gpn / std::max(1, lay.tp)));
  const int k_edp = std::max(1, std::min(edp, gpn / std::max(1, lay.tp * lay.ep)));
  auto dp_coll = [&](int coll, double dense_params, double expert_params, double bytes_each) {
    if (lay.ep == 1) return coll_s(coll, dp, k_dp, (dense_params + expert_params) * bytes_each);
    return coll_s(coll, dp, k_dp, dense_params * bytes_each) + coll_s(coll, edp, k_edp, expert_params * bytes_each);
  };
  const double bwd_s = n_busy * mc.layer_b_s;  // one micro-batch's backward on a stage
  double dp_exposed = 0, pcie_exposed = 0, dp_total = 0;
  // Parameters are gathered and gradients leave once per run (consecutive pieces of one model chunk):
  // one run of all micro-batches under layered accumulation; one per micro-batch under 1F1B / GPipe; under
  // Megatron's interleaved order the warm-up (and cool-down) runs pp micro-batches of a chunk back to back,
  // the steady state alternates chunks: about m - pp + 1 runs per chunk and pass.
  const double runs = layered ? 1 : (v > 1 ? std::max(1.0, m - p + 1) : m);
  // The framework's gradient buckets over the stage's P parameters (0: one per layer) and whether the reduction
  // overlaps the backward (models/framework.hpp).
  const double bucket_p = framework_bucket_params(sc.framework, dp);
  const double dp_buckets = bucket_p > 0 ? std::max(1.0, std::ceil(P / bucket_p)) : std::max(1.0, n_P);
  const bool reduce_overlaps = !(sc.framework.comm.pp_reduce_after_flush && p > 1);
  if (dp > 1) {
    double red_one = dp_coll(ch.zero >= 1 ? 1 : 0, D, E, g);
    double red_times = ch.zero >= 2 ? runs : 1;
    double buckets = ch.zero >= 2 || layered ? n_P : dp_buckets;
    double red = red_one * red_times;
    dp_total = red;
    // Under the last backward (every micro-batch's with ZeRO-2 or layered accumulation), unless the framework
    // reduces a pipeline's gradients after its flush (then all of it is exposed).
    double window = reduce_overlaps ? (ch.zero >= 2 || layered ? m : 1) * bwd_s : 0.0;
    dp_exposed += std::max(red - window, 0.0) + (reduce_overlaps ? red_one / buckets : 0.0);
    if (ch.zero == 1 || ch.zero == 2) {  // updated parameters gathered: after the optimizer, or under the first forward
      const double gather = dp_coll(2, D, E, e);
      dp_total += gather;
      if (ch.overlap_param_gather && ch.offload != OffloadKind::chunked) {
        // In buckets (as the gradients), each before the first forward of its layers: the first bucket is
        // exposed, the rest hides under the first forward pass through the stage (every micro-batch's under
        // layered accumulation).
        const double first = gather / dp_buckets;
        const double window = (layered ? m : 1) * (n_busy * mc.layer_f_s + mc.embed_f_s);
        dp_exposed += first + std::max(gather - first - window, 0.0);
      } else {
        dp_exposed += gather;
      }
    }
    if (zero3) {
      // Gathers and reduce-scatters share the NIC: together they hide only under the step's compute.
      double gather_one = dp_coll(2, D / n_P, E / n_P, e);  // one layer
      double gathers = 2 * runs * n_P * gather_one;
      dp_total = red + gathers;
      dp_exposed = std::max(red + gathers - r.compute_s, 0.0) + red_one / buckets + gather_one;
    }
  }
  r.dp_comm_s = dp_exposed;
  // NCCL's kernels slow the compute they overlap (the GPU's compute_slowdown_under_comm, as sim/engine applies
  // it): the hidden part of the data-parallel communication lengthens the compute by that fraction.
  r.compute_s += gpu.compute_slowdown_under_comm * std::min(std::max(dp_total - dp_exposed, 0.0), r.compute_s);
  // ZeRO-2/3: unreduced gradient buckets (max(40e6, 1e6 dp) parameters or a whole run, in the gradient
  // dtype) live until their reduce-scatter ends. At the activation peak (the first backward) the first one
  // fills; a second coexists only when a bucket's reduce-scatter outlasts the backward that fills the next,
  // and by then that layer's activations (of every micro-batch in flight through it) are released.
  if (ch.zero >= 2 && dp > 1) {
    // A bucket closes at the framework's size or a layer, whichever is larger, and holds at most the framework's
    // (grad_bucket_hold_params). Chunked offload keeps the whole layer: its gradients reuse the parameter chunks,
    // and this term stands for the layer's margin in the chunk estimate (tested on the PatrickStar example).
    const double filled = std::max(framework_bucket_params(sc.framework, dp), mc.layer_params);
    const double bucket_params =
        std::min(P, ch.offload == OffloadKind::chunked ? filled : grad_bucket_hold_params(sc.framework, dp, filled));
    const double share = bucket_params / std::max(P, 1.0);
    const double rs_s = dp_coll(1, D * share, E * share, g);
    const double fill_s = (layered ? m : 1) * mc.layer_b_s * bucket_params / std::max(mc.layer_params, 1.0);
    const double released = (layered ? m : 1) * mc.layer_stored_bytes;
    buffers += bucket_params * g + (rs_s > fill_s ? std::max(0.0, bucket_params * g - released) : 0.0);
  }

  // ---- optimizer and offload ----
  const int sharing_host = std::min(lay.gpus(), gpn);
  auto host_adam = [&](double params) { return host_adam_s(params, C.host, sharing_host, eb); };
  auto pcie_s = [&](double bytes) { return pcie_copy_s(bytes, C.host); };
  r.optimizer_s = gpu_adam_s(gpu_opt_params, gpu, eb);
  double host_bytes = sb.host;
  bool chunks_fit = true;
  if (ch.offload == OffloadKind::optimizer) {
    pcie_exposed = host_adam(host_opt_params) + pcie_s(host_opt_params * e);
  } else if (ch.offload == OffloadKind::granular) {
    double off_shard = zero_shard(off, ch.zero, 3, dp, edp);  // what each run loads (ZeRO-3: this rank's shard)
    double loads = 2 * runs * off_shard * e, stores = runs * off_shard * e;
    pcie_exposed = std::max(pcie_s(loads + stores) - r.compute_s, 0.0) + host_adam(host_opt_params);
  } else if (ch.offload == OffloadKind::chunked) {
    const ChunkedState cs = chunked_state(mc, ch, held, dp, edp, eb, act, buffers, sharing_host);
    weights = cs.weights;
    grads = 0;
    opt = cs.optimizer_bytes;
    r.optimizer_s = cs.gpu_adam_s;
    pcie_exposed = cs.offload_s;
    host_bytes = cs.host_bytes;
    chunks_fit = cs.fits;
  }
  r.optimizer_s += framework_step_overhead_s(sc.framework);
  r.offload_s = pcie_exposed;
  r.state_bytes = weights + grads + opt + buffers;
  const int comms = rank_communicators(lay.tp, lay.cp, dp, lay.ep, p, sc.model.tied_embeddings);
  r.framework_bytes = framework_bytes(C, comms, r.state_bytes + act);
  r.peak_bytes = r.state_bytes + act + r.framework_bytes;
  r.fits = chunks_fit && r.peak_bytes <= capacity_bytes;
  r.host_bytes_per_node = host_bytes * std::min(lay.gpus(), gpn);
  r.host_fits = r.host_bytes_per_node <= C.host.memory_bytes || C.host.memory_bytes <= 0;
  r.step_s = r.compute_s + r.bubble_s + r.pp_comm_s + r.dp_comm_s + r.optimizer_s + r.offload_s;
  return r;
}

}  // namespace tp

namespace tp {

Layout layout_of(const Plan& p, Precision prec) {
  Layout l;
  l.prec = prec;
  l.dp = p.dp; l.tp = p.tp; l.pp = p.pp; l.ep = p.ep; l.cp = p.cp; l.tp_mode = p.tp_mode; l.node_blocks = p.tp_grid_node_blocks;
  return l;
}

Choice choice_of(const Plan& p, long long layers) {
  Choice c;
  c.microbatch = p.microbatch; c.num_microbatches = p.num_microbatches; c.schedule = p.schedule;
  c.virtual_stages = p.virtual_stages; c.acc = p.grad_accumulation; c.zero = p.zero; c.offload = p.offload.kind;
  c.experts_only = p.offload.experts_only;
  c.offload_fraction = p.offload.kind == OffloadKind::granular && layers > 0 ? (double)p.offload.layers.size() / layers : 0;
  c.sp = p.sequence_parallel && p.tp > 1; c.recompute = p.recompute;
  c.overlap_param_gather = p.overlap_param_gather && (p.zero == 1 || p.zero == 2) && p.data_ranks() > 1;
  if (!p.stage_layers.empty()) {  // uneven: first, the largest middle stage, last
    c.first_layers = p.stage_layers.front();
    c.last_layers = p.stage_layers.back();
    for (size_t s = 1; s + 1 < p.stage_layers.size(); ++s) c.mid_layers = std::max(c.mid_layers, p.stage_layers[s]);
  }
  return c;
}

Estimate estimate_plan(const AnalyticModel& am, const Plan& p) {
  Layout l = layout_of(p, am.sc.training.precision);
  Choice c = choice_of(p, am.sc.model.layers);
  const MicroCost& mc = am.micro(l, c.microbatch, c.sp, c.recompute);
  if (!mc.ok) return Estimate{};
  return am.estimate(l, mc, c);
}

}  // namespace tp
