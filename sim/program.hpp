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

// Lanes per simulated rank: compute stream; pipeline sends (fwd, bwd); data-parallel gradient reductions;
// ZeRO-3 parameter gathers (prefetched, their own stream); PCIe host->device and device->host copies (full
// duplex, offload); the host CPU's work for this GPU (CPU Adam, at the GPU's share of host memory bandwidth).
enum Lane {
  kLaneCompute = 0, kLanePpFwd = 1, kLanePpBwd = 2, kLaneDp = 3, kLaneZero = 4, kLaneH2D = 5, kLaneD2H = 6,
  kLaneHost = 7, kLanes = 8
};

// zero_gather: ZeRO-3 parameter all-gather before a layer run; h2d / d2h: PCIe copies (offload: parameter
// loads, gradient stores, chunk moves); host_adam: the optimizer step on the host CPU; shared_reduce:
// all-reduce of weight-shared layers' gradients across the pipeline stages that share them (delink pseudo).
enum class TaskKind : uint8_t {
  fwd, bwd, optimizer, p2p_fwd, p2p_bwd, dp_reduce, dp_gather, embed_reduce, zero_gather, h2d, d2h, host_adam,
  shared_reduce
};
const char* task_kind_name(TaskKind k);

// What a task is (kept small: costs of compute tasks are derived on demand by task_cost()).
struct TaskInfo {
  TaskKind kind = TaskKind::fwd;
  bool embed = false, head = false;  // compute includes the embedding / the LM head
  int model_chunk = 0, mb = 0, bucket = 0;
  int layer_lo = 0, layer_hi = 0;     // compute covers layers [layer_lo, layer_hi)
  int peer = -1;                      // p2p: receiver's global rank
  double optimizer_s = 0;             // optimizer, h2d, d2h and host_adam task duration
  double pcie_bytes = 0;              // h2d / d2h: bytes copied
  bool expert = false;                // dp collectives: over the expert-data-parallel group (MoE experts)
  TierBytes sent;                     // comm tasks: payload bytes their rank sends, by tier
};

// Derived cost of a forward / backward compute task (zero for other kinds).
struct TaskCost {
  double duration_s = 0, compute_s = 0, recompute_s = 0, tp_s = 0, ep_s = 0, flops = 0, recompute_flops = 0;
  TierBytes tp_bytes;           // TP collective payload its rank sends
  double stored_bytes = 0;      // activations stored by a forward / released by a backward piece
  double transient_bytes = 0;   // extra live while it runs
  double head_transient_bytes = 0;  // CostModel::head_transient_bytes when it runs the head (not beside a layer's
                                    // transient: the head runs before or after its layers)
};
TaskCost task_cost(const CostModel& cm, const TaskInfo& ti);
long long moe_layers_between(const CostModel& cm, long long lo, long long hi);  // MoE layers among [lo, hi)

struct RankStatic {
  double weights_bytes = 0, gradients_bytes = 0, optimizer_bytes = 0, buffers_bytes = 0;
  double params = 0;  // parameters held (before ZeRO sharding of optimizer state)
  double host_bytes = 0;  // host memory for this GPU's offloaded state
  double pcie_bytes = 0;  // PCIe bytes per step (both directions)
};

// Memory held between two task events on one rank: from the start (or end) of `from` to the end of `to`.
// Categories follow MemoryBreakdown: gathered / loaded parameters are weights, transient gradients are
// gradients.
enum class MemCat : uint8_t { weights = 0, gradients = 1, buffers = 2 };
struct MemHold {
  int rank = 0, from = 0, to = 0;
  bool from_start = true;
  double bytes = 0;
  MemCat cat = MemCat::weights;
};

struct Program {
  EngineInput in;
  std::vector<TaskInfo> info;
  std::vector<int> sim_global;      // simulated rank -> global rank
  std::vector<int> sim_stage;       // simulated rank -> pipeline stage
  std::vector<RankStatic> statics;  // per simulated rank
  std::vector<MemHold> holds;       // transient memory (ZeRO-3 gathers, offload loads, unreduced gradients)
  std::string offload_note;         // chunked offload: why it does not fit, when it does not
  std::shared_ptr<const Topology> topo;  // shared: built once per cluster shape (topology_for)
  CostModel cm;
  bool full = false;
  bool symmetric = true;  // representative mode: every translate's flows see the same links and loads
  std::vector<int> engine_links;  // engine link id -> topology link id
};

// The cost model of the scenario's plan with its TP / EP collectives timed on `topo` (used by build_program
// and by the planner's analytic pass).
CostModel cost_model_on(const Scenario& sc, const Topology& topo);

// Whether compute is split per layer (parameters or gradients move layer by layer: ZeRO-2/3, granular or chunked
// offload, layered accumulation) rather than per model chunk.
bool per_layer_pieces(const Plan& p);
// Before building: the builder's task estimate, and about how many bytes the build and its engine run take
// (measured: ~1.3 KB per GPU of the cluster for the topology and collective rings, ~220 B per task; both rounded
// up). simulate() checks the latter against the memory available (exit 2 instead of bad_alloc).
double program_tasks_estimate(const Scenario& sc, bool full_cluster);
double program_bytes_estimate(const Scenario& sc, bool full_cluster);

// `exhaustive_symmetry` routes every copy of every representative flow even when the layout is aligned (tests).
Program build_program(const Scenario& sc, bool full_cluster, bool exhaustive_symmetry = false);

// The topology of the first `gpus` GPUs of a cluster, built once and shared (a search simulates many plans on
// one cluster). Thread-safe; keeps a handful of recent clusters.
std::shared_ptr<const Topology> topology_for(const Cluster& c, int gpus);

}  // namespace tp
