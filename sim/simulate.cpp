// simulate: see simulate.hpp. Breakdown rule per rank: the compute lane's busy time splits into compute,
// recompute, exposed TP comm and optimizer; each idle gap before a compute task is charged to the prerequisite
// that ended last: the part of a pipeline transfer's window -> pp_comm_exposed, a data-parallel collective ->
// dp_comm_exposed, anything else (waiting for another stage's compute) -> bubble; the tail after the rank's
// last compute is dp_comm_exposed until the rank's own DP work ends, then bubble. So every rank's breakdown
// sums to the step time.
#include "simulate.hpp"

#include <algorithm>
#include <chrono>

namespace tp {

static double overlap(double a0, double a1, double b0, double b1) { return std::max(0.0, std::min(a1, b1) - std::max(a0, b0)); }

static bool is_dp(TaskKind k) { return k == TaskKind::dp_reduce || k == TaskKind::dp_gather || k == TaskKind::embed_reduce; }

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
      } else {
        bd.bubble += gap;
      }
    }
    if (ti.kind == TaskKind::optimizer) {
      bd.optimizer += ti.optimizer_s;
    } else {
      TaskCost tc = task_cost(pg.cm, ti);
      bd.compute += tc.compute_s;
      bd.recompute += tc.recompute_s;
      bd.tp_comm_exposed += tc.tp_s;
    }
    prev = eo.end_s[t];
  }
  // Tail: the rank's own DP work after its last compute delays the rank itself (dp exposed); the rest is
  // waiting for other ranks to finish the step (bubble).
  double own_end = prev;
  for (int t : pg.in.lane_order[r * kLanes + kLaneDp]) own_end = std::max(own_end, eo.end_s[t]);
  bd.dp_comm_exposed += own_end - prev;
  bd.bubble += std::max(0.0, step - own_end);
  return bd;
}

struct MemEvent { double t; int order; double d_act, d_transient; };

static void rank_memory(const Program& pg, const EngineOutput& eo, int r, RankResult& rr, bool keep) {
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
  }
  std::stable_sort(ev.begin(), ev.end(), [](const MemEvent& a, const MemEvent& b) {
    return a.t != b.t ? a.t < b.t : a.order < b.order;
  });
  double base = st.weights_bytes + st.gradients_bytes + st.optimizer_bytes + st.buffers_bytes;
  double act = 0, tr = 0, best = -1, best_act = 0, best_tr = 0, stored_peak = 0;
  if (keep) rr.memory.push_back({0, base});
  for (const MemEvent& e : ev) {
    act += e.d_act;
    tr += e.d_transient;
    stored_peak = std::max(stored_peak, act);
    if (act + tr > best) { best = act + tr; best_act = act; best_tr = tr; }
    if (keep) rr.memory.push_back({e.t, base + act + tr});
  }
  rr.peak.weights = st.weights_bytes;
  rr.peak.gradients = st.gradients_bytes;
  rr.peak.optimizer = st.optimizer_bytes;
  rr.peak.activations = std::max(0.0, best_act + best_tr);
  rr.peak.buffers = st.buffers_bytes;
  rr.stored_peak_bytes = stored_peak;
}

Result simulate(const Scenario& sc, const SimOptions& opt) {
  auto t0 = std::chrono::steady_clock::now();
  Result res;
  res.scenario = sc;
  res.options = opt;
  // Full mode simulates every rank: bound its size (the symmetric mode is bounded by validation).
  auto check_full_size = [&]() {
    double tasks = (double)sc.plan.gpus() * sc.plan.num_microbatches * sc.plan.virtual_stages * 4;
    if (tasks > 2e8)
      throw InputError({"--full-cluster: about " + std::to_string((long long)tasks) +
                        " tasks (every rank x micro-batch) exceeds the limit of 200000000; use the symmetric mode"});
  };
  if (opt.full_cluster) check_full_size();
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
  double busiest = -1, latest = -1, mem_peak = -1;
  double sent_intra = 0, sent_inter = 0, hw_flops = 0;
  for (int r = 0; r < R; ++r) {
    RankResult rr;
    rr.global_rank = pg.sim_global[r];
    rr.stage = pg.sim_stage[r];
    rr.breakdown = rank_breakdown(pg, eo, r, res.step_time_s);
    rank_memory(pg, eo, r, rr, opt.keep_memory_timeline);
    // Headline breakdown: the rank that finishes last (it sets the step time); ties -> the busiest.
    double own_end = 0;
    for (int lane = 0; lane < kLanes; ++lane)
      for (int t : pg.in.lane_order[r * kLanes + lane]) own_end = std::max(own_end, eo.end_s[t]);
    double busy = rr.breakdown.compute + rr.breakdown.recompute + rr.breakdown.tp_comm_exposed + rr.breakdown.optimizer;
    if (own_end > latest + 1e-12 || (own_end > latest - 1e-12 && busy > busiest + 1e-12)) {
      latest = std::max(latest, own_end);
      busiest = busy;
      res.breakdown = rr.breakdown;
      res.breakdown_rank = r;
    }
    if (rr.peak.total() > mem_peak) { mem_peak = rr.peak.total(); res.memory = rr.peak; }
    res.ranks.push_back(std::move(rr));
  }
  for (size_t t = 0; t < pg.info.size(); ++t) {
    TaskCost tc = task_cost(pg.cm, pg.info[t]);
    sent_intra += pg.info[t].sent.intra + tc.tp_bytes.intra;
    sent_inter += pg.info[t].sent.inter + tc.tp_bytes.inter;
    hw_flops += tc.flops;
  }
  res.intra_bytes_per_gpu = sent_intra / R;
  res.inter_bytes_per_gpu = sent_inter / R;
  res.peak_bytes_per_gpu = mem_peak;
  res.capacity_bytes = sc.cluster.gpu.hbm_bytes;
  res.fits = mem_peak <= res.capacity_bytes;

  const Plan& p = sc.plan;
  const int gpus = p.gpus();
  double batch_tokens = (double)sc.training.global_batch * sc.training.seq_len;
  res.tokens_per_s = batch_tokens / res.step_time_s;
  res.model_tflops_per_gpu = pg.cm.model_flops_per_step / res.step_time_s / gpus / 1e12;
  // Hardware FLOPs (recompute included): simulated ranks are a uniform sample of the GPUs (one per stage or all).
  res.hardware_tflops_per_gpu = hw_flops / R / res.step_time_s / 1e12;
  double peak = sc.cluster.gpu.matrix_flops_per_s[(int)sc.training.precision];
  res.mfu = res.model_tflops_per_gpu * 1e12 / peak;

  const Transformer& m = sc.model;
  double n_nonembed = (double)m.layers * layer_params_full(m);
  res.run = estimate_run(n_nonembed, batch_tokens, sc.training.tokens, res.step_time_s, gpus,
                         sc.cluster.price_per_gpu_hour_usd, sc.cluster.power_per_gpu_w);
  res.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return res;
}

}  // namespace tp
