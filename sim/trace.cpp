// trace: Chrome-trace JSON of one simulated step. See output.hpp for the lane layout and names.
// Compute tasks are expanded into their layer ops (forward ascending layers, backward descending, recompute
// ops labelled "recompute") at offsets that add up exactly to the task's simulated duration.
#include <cstdio>

#include "output.hpp"

namespace tp {

enum TraceTid {
  kTidStep = 0, kTidCompute = 1, kTidTp = 2, kTidPpFwd = 3, kTidPpBwd = 4, kTidDp = 5, kTidZero = 6, kTidH2D = 7,
  kTidD2H = 8, kTidHost = 9, kTidEp = 10, kTids = 11
};

static int tid_of_lane(int lane) {
  switch (lane) {
    case kLaneCompute: return kTidCompute;
    case kLanePpFwd: return kTidPpFwd;
    case kLanePpBwd: return kTidPpBwd;
    case kLaneZero: return kTidZero;
    case kLaneH2D: return kTidH2D;
    case kLaneD2H: return kTidD2H;
    case kLaneHost: return kTidHost;
    default: return kTidDp;
  }
}

namespace {
struct Emitter {
  json& ev;
  int pid;
  void x(const std::string& name, const char* cat, int tid, double t0_s, double dur_s, json args = nullptr) {
    json e = {{"name", name}, {"cat", cat}, {"ph", "X"}, {"pid", pid}, {"tid", tid}, {"ts", t0_s * 1e6}, {"dur", dur_s * 1e6}};
    if (!args.is_null()) e["args"] = std::move(args);
    ev.push_back(std::move(e));
  }
};
}  // namespace

// Emits the ops of `pc` for layer `layer` (or an end part), starting at t; returns the end time.
static double emit_pass(Emitter& em, const PassCost& pc, const std::string& prefix, const char* pass, int mb, double t) {
  for (const Op& op : pc.ops) {
    const char* ps = op.recompute ? "recompute" : pass;
    std::string name = part_op_name(prefix, ps, op.name, mb);
    if (op.cls == OpClass::tp_comm || op.cls == OpClass::ep_comm) {
      bool ep = op.cls == OpClass::ep_comm;
      int tid = ep ? kTidEp : kTidTp;
      const char* cat = ep ? "ep" : "tp";
      if (op.hidden_s > 0) em.x(name, cat, tid, t - op.hidden_s, op.hidden_s + op.time_s, {{"bytes", op.bytes}, {"overlapped_s", op.hidden_s}});
      else if (op.time_s > 0) em.x(name, cat, tid, t, op.time_s, {{"bytes", op.bytes}});
    } else {
      em.x(name, op_class_name(op.cls), kTidCompute, t, op.time_s, {{"flops", op.flops}, {"bytes", op.bytes}});
    }
    t += op.time_s;
  }
  return t;
}

json trace_to_json(const Result& r, TraceDetail detail) {
  const Program& pg = r.prog;
  const EngineOutput& eo = r.eo;
  json ev = json::array();
  const int R = pg.in.ranks;
  // Keep the trace a size a viewer opens: fall back to coarser detail past a few million slices.
  size_t layer_tasks = 0;
  for (const TaskInfo& ti : pg.info) layer_tasks += (size_t)(ti.layer_hi - ti.layer_lo);
  if (detail == TraceDetail::op && layer_tasks * (pg.cm.layer_bwd.ops.size() + 4) > 3000000) detail = TraceDetail::layer;
  if (detail == TraceDetail::layer && layer_tasks > 3000000) detail = TraceDetail::chunk;

  auto moe_layer = [&](int l) { return moe_layers_between(pg.cm, l, l + 1) > 0; };
  for (int rk = 0; rk < R; ++rk) {
    int g = pg.sim_global[rk];
    Emitter em{ev, 1000 + g};
    char pname[64];
    std::snprintf(pname, sizeof pname, "rank %d — sim (stage %d)", g, pg.sim_stage[rk]);
    ev.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", em.pid}, {"args", {{"name", pname}}}});
    ev.push_back({{"name", "process_sort_index"}, {"ph", "M"}, {"pid", em.pid}, {"args", {{"sort_index", 2 * g + 1}}}});
    const char* tnames[] = {"step", "compute", "tp", "pp.fwd", "pp.bwd", "dp", "zero", "pcie.h2d", "pcie.d2h", "host", "ep"};
    for (int t = 0; t < kTids; ++t) {
      ev.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", em.pid}, {"tid", t}, {"args", {{"name", tnames[t]}}}});
      ev.push_back({{"name", "thread_sort_index"}, {"ph", "M"}, {"pid", em.pid}, {"tid", t}, {"args", {{"sort_index", t}}}});
    }
    em.x("step 0", "step", kTidStep, 0, r.step_time_s);
    for (int lane = 0; lane < kLanes; ++lane) {
      for (int t : pg.in.lane_order[rk * kLanes + lane]) {
        const TaskInfo& ti = pg.info[t];
        double t0 = eo.start_s[t], t1 = eo.end_s[t];
        char name[160];
        switch (ti.kind) {
          case TaskKind::fwd:
          case TaskKind::bwd: {
            bool fwd = ti.kind == TaskKind::fwd;
            std::string base = chunk_op_name(ti.model_chunk, fwd ? Pass::fwd : Pass::bwd, ti.mb);
            if (detail == TraceDetail::chunk) {
              em.x(base, fwd ? "fwd" : "bwd", kTidCompute, t0, t1 - t0, {{"flops", task_cost(pg.cm, ti).flops}, {"layers", ti.layer_hi - ti.layer_lo}});
              break;
            }
            const char* ps = fwd ? "fwd" : "bwd";
            double tt = t0;
            // One part: its ops (op detail) or one slice named like "L07.fwd.mb3" (layer detail).
            auto part = [&](const PassCost& pc, const std::string& prefix) {
              if (detail == TraceDetail::op) return emit_pass(em, pc, prefix, ps, ti.mb, tt);
              em.x(part_op_name(prefix, ps, "", ti.mb), ps, kTidCompute, tt, pc.time_s, {{"flops", pc.flops}});
              return tt + pc.time_s;
            };
            if (fwd) {
              if (ti.embed) tt = part(pg.cm.embed_fwd, "embed");
              for (int l = ti.layer_lo; l < ti.layer_hi; ++l) tt = part(moe_layer(l) ? pg.cm.moe_fwd : pg.cm.layer_fwd, part_name(l));
              if (ti.head) tt = part(pg.cm.head_fwd, "head");
            } else {
              if (ti.head) tt = part(pg.cm.head_bwd, "head");
              for (int l = ti.layer_hi - 1; l >= ti.layer_lo; --l) tt = part(pg.cm.bwd_of(l, moe_layer(l)), part_name(l));
              if (ti.embed) tt = part(pg.cm.embed_bwd, "embed");
            }
            break;
          }
          case TaskKind::optimizer:
            em.x("optimizer", "optimizer", kTidCompute, t0, t1 - t0);
            break;
          case TaskKind::p2p_fwd:
          case TaskKind::p2p_bwd: {
            bool fwd = ti.kind == TaskKind::p2p_fwd;
            int s_from = pg.sim_stage[rk], s_to = rank_coord(r.scenario.plan, ti.peer).stage;
            em.x(p2p_op_name(s_from, s_to, fwd ? Pass::fwd : Pass::bwd, ti.mb), "pp", tid_of_lane(lane), eo.transfer_s[t], t1 - eo.transfer_s[t],
                 {{"bytes", ti.sent.intra + ti.sent.inter}, {"waited_s", eo.transfer_s[t] - t0}});
            break;
          }
          case TaskKind::dp_reduce:
          case TaskKind::dp_gather:
          case TaskKind::embed_reduce:
          case TaskKind::shared_reduce:
          case TaskKind::zero_gather: {
            const char* what = ti.kind == TaskKind::dp_gather ? "dp.allgather.params"
                               : ti.kind == TaskKind::embed_reduce ? "dp.allreduce.embedding"
                               : ti.kind == TaskKind::shared_reduce ? "pp.allreduce.shared_layers"
                               : ti.kind == TaskKind::zero_gather ? "zero.allgather"
                               : (r.scenario.plan.zero >= 1 ? "dp.reducescatter" : "dp.allreduce");
            const char* ex = ti.expert ? ".experts" : "";
            if (ti.kind == TaskKind::dp_reduce) std::snprintf(name, sizeof name, "%s%s.C%02d.b%d", what, ex, ti.model_chunk, ti.bucket);
            else if (ti.kind == TaskKind::zero_gather)
              std::snprintf(name, sizeof name, "%s%s.L%02d-L%02d.mb%d", what, ex, ti.layer_lo, ti.layer_hi - 1, ti.mb);
            else std::snprintf(name, sizeof name, "%s%s", what, ex);
            em.x(name, ti.kind == TaskKind::zero_gather ? "zero" : "dp", tid_of_lane(lane), eo.transfer_s[t],
                 t1 - eo.transfer_s[t], {{"bytes", ti.sent.intra + ti.sent.inter}});
            break;
          }
          case TaskKind::h2d:
          case TaskKind::d2h: {
            const char* dir = ti.kind == TaskKind::h2d ? "pcie.h2d" : "pcie.d2h";
            if (ti.layer_hi > ti.layer_lo)
              std::snprintf(name, sizeof name, "%s.L%02d-L%02d.mb%d", dir, ti.layer_lo, ti.layer_hi - 1, ti.mb);
            else std::snprintf(name, sizeof name, "%s.mb%d", dir, ti.mb);
            em.x(name, "offload", tid_of_lane(lane), t0, t1 - t0, {{"bytes", ti.pcie_bytes}});
            break;
          }
          case TaskKind::host_adam:
            em.x("host.adam", "offload", kTidHost, t0, t1 - t0);
            break;
        }
      }
    }
    if (rk < (int)r.ranks.size()) {
      for (const MemSample& ms : r.ranks[rk].memory)
        ev.push_back({{"name", "memory"}, {"ph", "C"}, {"pid", em.pid}, {"ts", ms.t_s * 1e6},
                      {"args", {{"bytes", ms.bytes}}}});
    }
  }
  return {{"traceEvents", ev},
          {"displayTimeUnit", "ms"},
          {"otherData", {{"producer", "trainplan simulate"}, {"scenario", r.scenario.name}, {"step_time_s", r.step_time_s}}}};
}

}  // namespace tp
