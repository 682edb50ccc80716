// simulate: see simulate.hpp. Breakdown rule per rank: the compute lane's busy time splits into compute,
// recompute, exposed TP comm and optimizer; each idle gap before a compute task is charged to the prerequisite
// that ended last: the part of a pipeline transfer's window -> pp_comm_exposed, a data-parallel collective ->
// dp_comm_exposed, anything else (waiting for another stage's compute) -> bubble; the tail after the rank's
// last compute is dp_comm_exposed until the rank's own DP work ends, then bubble. So every rank's breakdown
// sums to the step time.
#include "simulate.hpp"

#include <algorithm>
#include <chrono>

#include "models/host_memory.hpp"
#include "step_formulas.hpp"

namespace tp {

static double overlap(double a0, double a1, double b0, double b1) { return std::max(0.0, std::min(a1, b1) - std::max(a0, b0)); }

static bool is_dp(TaskKind k) {
  return k == TaskKind::dp_reduce || k == TaskKind::dp_gather || k == TaskKind::embed_reduce ||
         k == TaskKind::zero_gather || k == TaskKind::shared_reduce;
}
static bool is_offload(TaskKind k) { return k == TaskKind::h2d || k == TaskKind::d2h || k == TaskKind::host_adam; }

static Breakdown rank_breakdown(const Program& pg, const EngineOutput& eo, int r, double step) {
  Breakdown bd;
  const auto& order = pg.in.lane_order[r * kLanes + kLaneCompute];
  double prev = 0;
  for (int t : order) {
    const TaskInfo& ti = pg.info[t];
    double gap = eo.start_s[t] - prev;
    if (gap > 1e-15) {
      int crit = -1;
      for (int k = pg.in.dep_offset[t]; k < pg.in.dep_offset[t + 1]; ++k) {
        int d = pg.in.dep_ids[k];
        if (crit < 0 || eo.end_s[d] > eo.end_s[crit]) crit = d;
      }
      if (crit >= 0 && (pg.info[crit].kind == TaskKind::p2p_fwd || pg.info[crit].kind == TaskKind::p2p_bwd)) {
        double pp = overlap(eo.transfer_s[crit], eo.end_s[crit], prev, eo.start_s[t]);
        bd.pp_comm_exposed += pp;
        bd.bubble += gap - pp;
      } else if (crit >= 0 && is_dp(pg.info[crit].kind)) {
        bd.dp_comm_exposed += gap;
      } else if (crit >= 0 && is_offload(pg.info[crit].kind)) {
        bd.offload_stall += gap;
      } else {
        bd.bubble += gap;
      }
    }
    if (ti.kind == TaskKind::optimizer) {
      bd.optimizer += ti.optimizer_s;
    } else {
      TaskCost tc = task_cost(pg.cm, ti);
      bd.compute += tc.compute_s;
      // Longer than planned: slowed by collectives beside it (sim/engine's interference).
      bd.comm_slowdown += std::max(0.0, eo.end_s[t] - eo.start_s[t] - pg.in.tasks[t].duration_s);
      bd.recompute += tc.recompute_s;
      bd.tp_comm_exposed += tc.tp_s;
      bd.ep_comm_exposed += tc.ep_s;
    }
    prev = eo.end_s[t];
  }
  // Tail after the rank's last compute: time while its own offload work (host Adam, PCIe copies) runs is an
  // offload stall, time while only its data-parallel collectives run (or it waits for them) is exposed DP
  // communication; after its own work ends it waits for the other ranks (bubble).
  std::vector<std::pair<double, double>> dp_iv, off_iv;
  for (int lane : {kLaneDp, kLaneZero})
    for (int t : pg.in.lane_order[r * kLanes + lane]) dp_iv.push_back({eo.start_s[t], eo.end_s[t]});
  for (int lane : {kLaneH2D, kLaneD2H, kLaneHost})
    for (int t : pg.in.lane_order[r * kLanes + lane]) off_iv.push_back({eo.start_s[t], eo.end_s[t]});
  double own_end = prev;
  std::vector<double> cuts = {prev};
  for (auto* iv : {&dp_iv, &off_iv})
    for (auto [a, b] : *iv)
      if (b > prev) { cuts.push_back(std::max(a, prev)); cuts.push_back(b); own_end = std::max(own_end, b); }
  std::sort(cuts.begin(), cuts.end());
  auto covered = [](const std::vector<std::pair<double, double>>& iv, double a, double b) {
    for (auto [x, y] : iv) if (x <= a && y >= b) return true;
    return false;
  };
  for (size_t i = 0; i + 1 < cuts.size(); ++i) {
    double a = cuts[i], b = cuts[i + 1];
    if (b - a <= 0) continue;
    if (covered(off_iv, a, b) && !covered(dp_iv, a, b)) bd.offload_stall += b - a;
    else bd.dp_comm_exposed += b - a;
  }
  bd.bubble += std::max(0.0, step - own_end);
  return bd;
}

struct MemEvent { double t; int order; double d_act, d_transient; int cat = -1; };

static void rank_memory(const Program& pg, const EngineOutput& eo, int r, const std::vector<int>& holds, RankResult& rr,
                        bool keep) {
  const RankStatic& st = pg.statics[r];
  std::vector<MemEvent> ev;
  for (int t : pg.in.lane_order[r * kLanes + kLaneCompute]) {
    const TaskInfo& ti = pg.info[t];
    if (ti.kind != TaskKind::fwd && ti.kind != TaskKind::bwd) continue;
    TaskCost tc = task_cost(pg.cm, ti);
    if (tc.transient_bytes > 0) {
      ev.push_back({eo.start_s[t], 1, 0, tc.transient_bytes});
      ev.push_back({eo.end_s[t], 0, 0, -tc.transient_bytes});
    }
    if (tc.stored_bytes > 0)
      ev.push_back({eo.end_s[t], 0, ti.kind == TaskKind::fwd ? tc.stored_bytes : -tc.stored_bytes, 0});
    // The LM head's logits copy, a moment: beside everything the forward stored, at its end; at the backward's start
    // (the head's backward comes first), where the task's own transient (its layers' recompute) is not yet live,
    // only what it exceeds that transient by.
    const double head_tr = ti.kind == TaskKind::fwd ? tc.head_transient_bytes
                                                    : std::max(0.0, tc.head_transient_bytes - tc.transient_bytes);
    if (head_tr > 0) {
      const double at = ti.kind == TaskKind::fwd ? eo.end_s[t] : eo.start_s[t];
      const int order = ti.kind == TaskKind::fwd ? 0 : 1;
      ev.push_back({at, order, 0, head_tr});
      ev.push_back({at, order, 0, -head_tr});
    }
  }
  for (int hi : holds) {  // gathered / loaded parameters, unreduced gradients
    const MemHold& h = pg.holds[hi];
    ev.push_back({h.from_start ? eo.start_s[h.from] : eo.end_s[h.from], 1, 0, 0, (int)h.cat});
    ev.back().d_transient = h.bytes;
    ev.push_back({eo.end_s[h.to], 0, 0, -h.bytes, (int)h.cat});
  }
  std::stable_sort(ev.begin(), ev.end(), [](const MemEvent& a, const MemEvent& b) {
    return a.t != b.t ? a.t < b.t : a.order < b.order;
  });
  double base = st.weights_bytes + st.gradients_bytes + st.optimizer_bytes + st.buffers_bytes;
  double act = 0, tr = 0, best = -1, best_act = 0, best_tr = 0, stored_peak = 0;
  double held[3] = {0, 0, 0}, best_held[3] = {0, 0, 0};  // MemCat: weights, gradients, buffers
  if (keep) rr.memory.push_back({0, base});
  for (const MemEvent& e : ev) {
    act += e.d_act;
    if (e.cat >= 0) held[e.cat] += e.d_transient;
    else tr += e.d_transient;
    double dyn = act + tr + held[0] + held[1] + held[2];
    stored_peak = std::max(stored_peak, act);
    if (dyn > best) {
      best = dyn; best_act = act; best_tr = tr;
      for (int k = 0; k < 3; ++k) best_held[k] = held[k];
    }
    if (keep) rr.memory.push_back({e.t, base + dyn});
  }
  rr.peak.weights = st.weights_bytes + best_held[0];
  rr.peak.gradients = st.gradients_bytes + best_held[1];
  rr.peak.optimizer = st.optimizer_bytes;
  rr.peak.activations = std::max(0.0, best_act + best_tr);
  rr.peak.buffers = st.buffers_bytes + best_held[2];
  rr.stored_peak_bytes = stored_peak;
  rr.host_bytes = st.host_bytes;
  rr.pcie_bytes = st.pcie_bytes;
}

// Pseudo-to-Real: simulate the pseudo phase with its own plan and batch, cost the delink, sum the phases.
// Delinking copies the shared weight groups' weights and optimizer state into every layer: each GPU writes
// its real-phase model states (GPU part at HBM bandwidth, host part at its share of host memory bandwidth);
// when the pseudo plan lays the model out differently, the states also cross the network once (at the
// GPU's share of its node's NIC bandwidth).
static void add_delink(Result& res, const SimOptions& opt) {
  const Scenario& sc = res.scenario;
  auto d = std::make_shared<Result::DelinkPhases>();
  SimOptions po = opt;
  po.keep_memory_timeline = false;
  d->pseudo = std::make_shared<Result>(simulate(pseudo_phase(sc), po));
  const Cluster& c = sc.cluster;
  double gpu_state = res.memory.weights + res.memory.gradients + res.memory.optimizer, host_state = 0;
  for (const RankResult& rr : res.ranks) host_state = std::max(host_state, rr.host_bytes);
  d->delink_bytes_per_gpu = gpu_state + host_state;
  d->delink_s = gpu_state / c.gpu.hbm_bandwidth_bytes_per_s;
  if (host_state > 0 && c.host.memory_bandwidth_bytes_per_s > 0)
    d->delink_s += host_state / (c.host.memory_bandwidth_bytes_per_s / std::min(sc.plan.gpus(), c.gpus_per_node));
  Plan pp = sc.delink.plan ? *sc.delink.plan : sc.plan;
  d->relayout = pp.dp != sc.plan.dp || pp.tp != sc.plan.tp || pp.pp != sc.plan.pp || pp.tp_mode != sc.plan.tp_mode ||
                pp.ep != sc.plan.ep || pp.schedule != sc.plan.schedule || pp.virtual_stages != sc.plan.virtual_stages;
  if (d->relayout && sc.plan.gpus() > c.gpus_per_node) {
    double nic_per_gpu = c.inter.nics_per_node * c.inter.nic_bandwidth_bytes_per_s / c.gpus_per_node;
    d->delink_s += d->delink_bytes_per_gpu / nic_per_gpu;
  }
  const RunEstimate& a = d->pseudo->run;
  const RunEstimate& b = res.run;
  int gpus_real = sc.plan.gpus();
  double delink_gpu_h = d->delink_s * gpus_real / 3600;
  d->time_s = a.time_s + d->delink_s + b.time_s;
  d->gpu_hours = a.gpu_hours + delink_gpu_h + b.gpu_hours;
  d->cost_usd = a.cost_usd + delink_gpu_h * c.price_per_gpu_hour_usd + b.cost_usd;
  d->energy_kwh = a.energy_kwh + delink_gpu_h * c.power_per_gpu_w / 1000 + b.energy_kwh;
  d->tokens = a.tokens + b.tokens;
  res.delink = d;
}

void check_target_loss(const Scenario& sc) {
  double n_nonembed = (double)sc.model.layers * layer_params_full(sc.model), l = converged_loss(n_nonembed);
  if (sc.training.target_loss > 0 && sc.training.target_loss <= l)
    throw InputError({sc.name + ": $.training.target_loss: must be above the model's converged loss L(N) = " +
                      std::to_string(l) + " nats (Kaplan, N = non-embedding parameters), got " +
                      std::to_string(sc.training.target_loss)});
}

Result simulate(const Scenario& sc, const SimOptions& opt) {
  check_target_loss(sc);
  auto t0 = std::chrono::steady_clock::now();
  Result res;
  res.scenario = sc;
  res.options = opt;
  // Full mode simulates every rank: bound its size. Either mode: the memory the build needs must be there.
  auto check_full_size = [&]() {
    double tasks = program_tasks_estimate(sc, true);
    if (tasks > 2e8)
      throw InputError({"--full-cluster: about " + std::to_string((long long)tasks) +
                        " tasks (every rank x micro-batch) exceeds the limit of 200000000; use the symmetric mode"});
    require_memory("simulating every rank (" + std::to_string(sc.plan.gpus()) + " GPUs, about " +
                       std::to_string((long long)tasks) + " tasks)", program_bytes_estimate(sc, true));
  };
  if (opt.full_cluster) check_full_size();
  else require_memory("simulating " + std::to_string(sc.plan.gpus()) + " GPUs", program_bytes_estimate(sc, false));
  res.prog = build_program(sc, opt.full_cluster);
  if (!res.prog.symmetric) {  // layout not symmetric: the representative would not stand for every rank
    check_full_size();
    res.options.full_cluster = true;
    res.fallback_to_full = true;
    res.prog = build_program(sc, true);
  }
  res.eo = engine_run(res.prog.in);
  const Program& pg = res.prog;
  const EngineOutput& eo = res.eo;
  if (eo.deadlock) throw std::logic_error("simulation deadlock: the schedule left tasks that never became ready");
  res.step_time_s = eo.makespan_s;
  res.events = eo.events;

  const int R = pg.in.ranks;
  std::vector<std::vector<int>> holds_of(R);
  for (size_t i = 0; i < pg.holds.size(); ++i) holds_of[pg.holds[i].rank].push_back((int)i);
  double busiest = -1, latest = -1, mem_peak = -1;
  const Plan& pl = sc.plan;
  const int comms = rank_communicators(pl.tp, pl.cp, pl.data_ranks(), pl.ep, pl.pp, sc.model.tied_embeddings);
  double sent_intra = 0, sent_inter = 0, recompute_flops = 0;
  for (int r = 0; r < R; ++r) {
    RankResult rr;
    rr.global_rank = pg.sim_global[r];
    rr.stage = pg.sim_stage[r];
    rr.breakdown = rank_breakdown(pg, eo, r, res.step_time_s);
    rank_memory(pg, eo, r, holds_of[r], rr, opt.keep_memory_timeline);
    rr.peak.framework = framework_bytes(sc.cluster, comms, rr.peak.tensors());
    // Headline breakdown: the rank that finishes last (it sets the step time); ties -> the busiest.
    double own_end = 0;
    for (int lane = 0; lane < kLanes; ++lane)
      for (int t : pg.in.lane_order[r * kLanes + lane]) own_end = std::max(own_end, eo.end_s[t]);
    double busy = rr.breakdown.compute + rr.breakdown.recompute + rr.breakdown.tp_comm_exposed + rr.breakdown.optimizer +
                  rr.breakdown.ep_comm_exposed;
    if (own_end > latest + 1e-12 || (own_end > latest - 1e-12 && busy > busiest + 1e-12)) {
      latest = std::max(latest, own_end);
      busiest = busy;
      res.breakdown = rr.breakdown;
      res.breakdown_rank = r;
    }
    if (rr.peak.total() > mem_peak) { mem_peak = rr.peak.total(); res.memory = rr.peak; }
    res.host_bytes_per_node = std::max(res.host_bytes_per_node, rr.host_bytes * std::min(sc.plan.gpus(), sc.cluster.gpus_per_node));
    res.pcie_bytes_per_gpu = std::max(res.pcie_bytes_per_gpu, rr.pcie_bytes);
    res.ranks.push_back(std::move(rr));
  }
  for (size_t t = 0; t < pg.info.size(); ++t) {
    TaskCost tc = task_cost(pg.cm, pg.info[t]);
    sent_intra += pg.info[t].sent.intra + tc.tp_bytes.intra;
    sent_inter += pg.info[t].sent.inter + tc.tp_bytes.inter;
    recompute_flops += tc.recompute_flops;
  }
  res.intra_bytes_per_gpu = sent_intra / R;
  res.inter_bytes_per_gpu = sent_inter / R;
  res.peak_bytes_per_gpu = mem_peak;
  res.capacity_bytes = sc.cluster.gpu.hbm_bytes;
  res.host_fits = res.host_bytes_per_node <= sc.cluster.host.memory_bytes;
  res.offload_note = pg.offload_note;
  res.fits = mem_peak <= res.capacity_bytes && res.host_fits && pg.offload_note.empty();

  const Plan& p = sc.plan;
  const int gpus = p.gpus();
  double batch_tokens = (double)sc.training.global_batch * sc.training.seq_len;
  res.tokens_per_s = batch_tokens / res.step_time_s;
  res.model_tflops_per_gpu = pg.cm.model_flops_per_step / res.step_time_s / gpus / 1e12;
  // Hardware FLOPs: the model FLOPs plus the recomputed ones (Korthikanti et al. 2022's HFU; attention counted
  // by the model FLOPs' convention, so hardware FLOP/s are never below model FLOP/s). Simulated ranks are a
  // uniform sample of the GPUs (one per stage or all).
  res.hardware_tflops_per_gpu = res.model_tflops_per_gpu + recompute_flops / R / res.step_time_s / 1e12;
  // MFU against the dense peak of the training's tensor precision; fp8 training against its bf16 peak (only
  // the linear layers run in fp8), as fp8 runs are usually reported, and also against its fp8 peak.
  res.mfu_peak_precision = tensor_precision(sc.training.precision);
  res.mfu_peak_flops_per_s = sc.cluster.gpu.matrix_flops_per_s[(int)res.mfu_peak_precision];
  res.mfu = res.model_tflops_per_gpu * 1e12 / res.mfu_peak_flops_per_s;
  if (sc.training.precision == Precision::fp8) {
    res.fp8_peak_flops_per_s = sc.cluster.gpu.matrix_flops_per_s[(int)Precision::fp8];
    res.mfu_fp8 = res.model_tflops_per_gpu * 1e12 / res.fp8_peak_flops_per_s;
  }

  const Transformer& m = sc.model;
  double n_nonembed = (double)m.layers * layer_params_full(m);
  res.run = estimate_run(n_nonembed, batch_tokens, sc.training.tokens, res.step_time_s, gpus,
                         sc.cluster.price_per_gpu_hour_usd, sc.cluster.power_per_gpu_w, ScalingLaw{}, sc.training.target_loss);
  if (sc.delink.on()) add_delink(res, opt);
  res.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return res;
}

}  // namespace tp
