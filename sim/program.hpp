// program: turns (scenario, schedule, cost model, topology) into the engine's tasks for the simulated ranks.
// Representative mode simulates one rank per pipeline stage (dp = 0, tp = 0): every other rank is a
// translate of one of these in (dp, tp) and does the same work at the same time, so its flows are counted as
// multiplicities on the representative's links. Full mode simulates every rank and every flow.
// Rank layout (Megatron's default order, tp fastest): global = tp_rank + tp * (dp_rank + dp * stage).
#pragma once
#include <string>
#include <vector>

#include "engine.hpp"
#include "op_cost.hpp"
#include "schedule/pipeline.hpp"

namespace tp {

enum Lane { kLaneCompute = 0, kLanePpFwd = 1, kLanePpBwd = 2, kLaneDp = 3, kLanes = 4 };
const char* lane_name(int lane);

enum class TaskKind : uint8_t { fwd, bwd, optimizer, p2p_fwd, p2p_bwd, dp_reduce, dp_gather, embed_reduce };

struct TaskInfo {
  TaskKind kind = TaskKind::fwd;
  int model_chunk = 0, mb = 0, bucket = 0;
  long long layer_hi = 0, layer_lo = 0;  // compute covers layers [layer_lo, layer_hi)
  bool embed = false, head = false;       // compute includes the embedding / the LM head
  double compute_s = 0, recompute_s = 0, tp_s = 0, optimizer_s = 0;  // split of a compute task's duration
  double act_alloc_bytes = 0;     // activations stored when the task ends (forward)
  double act_free_bytes = 0;      // activations released when the task ends (last backward piece)
  double transient_bytes = 0;     // extra live while the task runs
  int peer = -1;                  // p2p: receiver's global rank
  TierBytes sent;                 // payload bytes this task sends from its rank, by tier
  double flops = 0;               // hardware FLOPs of a compute task
};

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
  Topology topo;
  CostModel cm;
  bool full = false;
};

Program build_program(const Scenario& sc, bool full_cluster);

// Coordinates of a global rank.
struct RankCoord { int tp, dp, stage; };
RankCoord rank_coord(const Plan& p, int global);
int rank_global(const Plan& p, int tp_rank, int dp_rank, int stage);

}  // namespace tp
