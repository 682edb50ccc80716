// program: turns (scenario, schedule, cost model, topology) into the engine's tasks for the simulated ranks.
// Representative mode simulates one rank per pipeline stage (dp = 0, tp = 0): every other rank is a
// translate of one of these in (dp, tp) and does the same work at the same time, so its flows are counted as
// multiplicities on the representative's links. That is exact only when every translate's flows see the same
// links and loads (groups aligned with nodes, leaves and NICs); build_program checks it and reports
// `symmetric = false` otherwise, and simulate() then falls back to full mode. Full mode simulates every rank
// and every flow.
// Rank layout: models/plan.hpp (rank_coord, rank_global).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "engine.hpp"
#include "op_cost.hpp"
#include "schedule/pipeline.hpp"

namespace tp {

enum Lane { kLaneCompute = 0, kLanePpFwd = 1, kLanePpBwd = 2, kLaneDp = 3, kLanes = 4 };

enum class TaskKind : uint8_t { fwd, bwd, optimizer, p2p_fwd, p2p_bwd, dp_reduce, dp_gather, embed_reduce };

// What a task is (kept small: costs of compute tasks are derived on demand by task_cost()).
struct TaskInfo {
  TaskKind kind = TaskKind::fwd;
  bool embed = false, head = false;  // compute includes the embedding / the LM head
  int model_chunk = 0, mb = 0, bucket = 0;
  int layer_lo = 0, layer_hi = 0;     // compute covers layers [layer_lo, layer_hi)
  int peer = -1;                      // p2p: receiver's global rank
  double optimizer_s = 0;             // optimizer task duration
  TierBytes sent;                     // comm tasks: payload bytes their rank sends, by tier
};

// Derived cost of a forward / backward compute task (zero for other kinds).
struct TaskCost {
  double duration_s = 0, compute_s = 0, recompute_s = 0, tp_s = 0, flops = 0;
  TierBytes tp_bytes;           // TP collective payload its rank sends
  double stored_bytes = 0;      // activations stored by a forward / released by a backward piece
  double transient_bytes = 0;   // extra live while it runs
};
TaskCost task_cost(const CostModel& cm, const TaskInfo& ti);

struct RankStatic {
  double weights_bytes = 0, gradients_bytes = 0, optimizer_bytes = 0, buffers_bytes = 0;
  double params = 0;  // parameters held (before ZeRO sharding of optimizer state)
};

struct Program {
  EngineInput in;
  std::vector<TaskInfo> info;
  std::vector<int> sim_global;      // simulated rank -> global rank
  std::vector<int> sim_stage;       // simulated rank -> pipeline stage
  std::vector<RankStatic> statics;  // per simulated rank
  std::shared_ptr<const Topology> topo;  // shared: built once per cluster shape (topology_for)
  CostModel cm;
  bool full = false;
  bool symmetric = true;  // representative mode: every translate's flows see the same links and loads
  std::vector<int> engine_links;  // engine link id -> topology link id
};

// `exhaustive_symmetry` routes every copy of every representative flow even when the layout is aligned (tests).
Program build_program(const Scenario& sc, bool full_cluster, bool exhaustive_symmetry = false);

// The topology of the first `gpus` GPUs of a cluster, built once and shared (a search simulates many plans on
// one cluster). Thread-safe; keeps a handful of recent clusters.
std::shared_ptr<const Topology> topology_for(const Cluster& c, int gpus);

}  // namespace tp
