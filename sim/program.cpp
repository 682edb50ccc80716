// program: building the engine's task graph from the shared schedule. See program.hpp.
#include "program.hpp"

#include "symmetry.hpp"

#include <algorithm>
#include <map>
#include <mutex>

namespace tp {

std::shared_ptr<const Topology> topology_for(const Cluster& c, int gpus) {
  static std::mutex mu;
  static std::vector<std::pair<std::string, std::shared_ptr<const Topology>>> cache;  // most recent last
  std::string key = cluster_to_json(c).dump() + "#" + std::to_string(gpus);
  std::lock_guard<std::mutex> lock(mu);
  for (size_t i = 0; i < cache.size(); ++i) {
    if (cache[i].first == key) {
      auto hit = cache[i];
      cache.erase(cache.begin() + i);
      cache.push_back(hit);
      return hit.second;
    }
  }
  auto topo = std::make_shared<const Topology>(build_topology(c, gpus));
  cache.push_back({key, topo});
  if (cache.size() > 4) cache.erase(cache.begin());
  return topo;
}

const char* task_kind_name(TaskKind k) {
  switch (k) {
    case TaskKind::fwd: return "fwd";
    case TaskKind::bwd: return "bwd";
    case TaskKind::optimizer: return "optimizer";
    case TaskKind::p2p_fwd: return "p2p_fwd";
    case TaskKind::p2p_bwd: return "p2p_bwd";
    case TaskKind::dp_reduce: return "dp_reduce";
    case TaskKind::dp_gather: return "dp_gather";
    case TaskKind::embed_reduce: return "embed_reduce";
    case TaskKind::zero_gather: return "zero_gather";
    case TaskKind::h2d: return "h2d";
    case TaskKind::d2h: return "d2h";
    case TaskKind::host_adam: return "host_adam";
    case TaskKind::shared_reduce: return "shared_reduce";
  }
  return "?";
}

long long moe_layers_between(const CostModel& cm, long long lo, long long hi) {
  if (cm.moe_every <= 0) return 0;
  return hi / cm.moe_every - lo / cm.moe_every;
}

TaskCost task_cost(const CostModel& cm, const TaskInfo& ti) {
  TaskCost tc;
  if (ti.kind != TaskKind::fwd && ti.kind != TaskKind::bwd) return tc;
  bool fwd = ti.kind == TaskKind::fwd;
  double moe = (double)moe_layers_between(cm, ti.layer_lo, ti.layer_hi);
  double dense = (double)(ti.layer_hi - ti.layer_lo) - moe;
  double moe_rc = moe, dense_rc = dense;  // of which recompute (plan.recompute_layers: not all)
  if (cm.partial_recompute()) {
    moe_rc = dense_rc = 0;
    for (long long l = ti.layer_lo; l < ti.layer_hi; ++l)
      if (layer_recomputes(cm.recompute_layers, cm.layers, l))
        (moe_layers_between(cm, l, l + 1) > 0 ? moe_rc : dense_rc) += 1;
  }
  auto add = [&](const PassCost& pc, double times) {
    if (times == 0) return;
    tc.duration_s += times * pc.time_s;
    tc.compute_s += times * pc.compute_s;
    tc.recompute_s += times * pc.recompute_s;
    tc.tp_s += times * pc.tp_comm_s;
    tc.ep_s += times * pc.ep_comm_s;
    tc.flops += times * pc.flops;
    tc.recompute_flops += times * pc.recompute_flops;
    tc.tp_bytes.intra += times * pc.tp_bytes.intra;
    tc.tp_bytes.inter += times * pc.tp_bytes.inter;
  };
  if (fwd) {
    add(cm.layer_fwd, dense);
    add(cm.moe_fwd, moe);
  } else {
    add(cm.layer_bwd, dense_rc);
    add(cm.moe_bwd, moe_rc);
    add(cm.layer_bwd_plain, dense - dense_rc);
    add(cm.moe_bwd_plain, moe - moe_rc);
  }
  if (ti.embed) add(fwd ? cm.embed_fwd : cm.embed_bwd, 1);
  if (ti.head) add(fwd ? cm.head_fwd : cm.head_bwd, 1);
  tc.stored_bytes = dense_rc * cm.layer_stored_bytes + moe_rc * cm.moe_stored_bytes +
                    (dense - dense_rc) * cm.layer_stored_plain_bytes + (moe - moe_rc) * cm.moe_stored_plain_bytes +
                    (ti.embed ? cm.embed_stored_bytes : 0) + (ti.head ? cm.head_stored_bytes : 0);
  tc.transient_bytes = std::max(dense_rc > 0 ? cm.layer_transient_bytes : 0.0, moe_rc > 0 ? cm.moe_transient_bytes : 0.0);
  tc.head_transient_bytes = ti.head ? cm.head_transient_bytes : 0.0;
  return tc;
}

}  // namespace tp
