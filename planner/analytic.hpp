// analytic: the planner's fast pass — closed-form memory per GPU and an analytic step time for one plan,
// built from the simulator's own per-op cost model (sim/op_cost.hpp, cached per (tp, tp_mode, micro-batch,
// sequence parallelism, recompute, ep)) and closed-form collective times on the cluster's tiers. It ranks
// plans; the event simulation confirms the best. Formulas follow what the simulator's program emits
// (sim/program_build.cpp): pipeline bubbles by schedule (from the busiest stage under uneven stages),
// in-flight activations by schedule (max over first, second and last stages), gradient
// reductions per bucket (per micro-batch for ZeRO-2/3 under standard accumulation, once per layer under
// layered), ZeRO-3 gathers (2m or 2 per layer), offload copies and host Adam.
// Invariants: no allocation per evaluated plan (estimate() is arithmetic on cached scalars); every time is
// in seconds and every size in bytes per GPU.
#pragma once
#include <map>
#include <memory>
#include <mutex>
#include <tuple>

#include "models/scenario.hpp"
#include "sim/step_formulas.hpp"
#include "sim/topology.hpp"

namespace tp {

// Per (tp, tp_mode, grid, micro-batch, sp, recompute, ep, cp): one micro-batch through one layer on one TP rank.
struct MicroCost {
  bool ok = false;                     // false: the cost model rejects this combination (e.g. MoE with 2D)
  double layer_f_s = 0, layer_b_s = 0; // mean over the model's layers (dense / MoE mix), incl. TP comm, recompute
  double layer_compute_f_s = 0, layer_compute_b_s = 0;  // the same without TP / EP comm (for explanations)
  double embed_f_s = 0, embed_b_s = 0, head_f_s = 0, head_b_s = 0;
  double layer_stored_bytes = 0, layer_transient_bytes = 0;  // per layer (max of dense / MoE)
  double embed_stored_bytes = 0, head_stored_bytes = 0, head_transient_bytes = 0;
  double layer_params = 0, layer_expert_params = 0;  // mean per layer per GPU (after TP); experts part
  double embed_params = 0, head_params = 0;
  double p2p_bytes = 0;                // one pipeline send of one micro-batch
  double layer_fp8_weight_bytes = 0;   // fp8 training: the fp8 weight copies of one layer (mean)
};

// Per layout (dp, tp, tp_mode, grid, pp, ep): GPU counts and collective times that do not depend on the
// inner choices.
struct Layout {
  int dp = 1, tp = 1, pp = 1, ep = 1, cp = 1;
  TpMode tp_mode = TpMode::d1;
  bool node_blocks = false;
  Precision prec = Precision::fp16;  // training precision (the scenario's, or one of search.fix.precision)
  int gpus() const { return dp * cp * tp * pp; }
};

// The inner choices of one plan.
struct Choice {
  long long microbatch = 1, num_microbatches = 1;
  Schedule schedule = Schedule::one_f_one_b;
  int virtual_stages = 1;
  GradAccumulation acc = GradAccumulation::standard;
  int zero = 0;
  OffloadKind offload = OffloadKind::none;
  double offload_fraction = 0;          // granular: share of layers (or experts) in host memory
  bool experts_only = false;
  bool sp = false;
  bool overlap_param_gather = false;    // ZeRO-1/2: the updated parameters gathered under the first forward
  Recompute recompute = Recompute::none;
  // Uneven pipeline stages (0 = layers / pp on every stage): layers on the first stage, the largest middle stage
  // (0 when pp = 2) and the last stage (Megatron-LM's first / last-stage counts around an even middle).
  int first_layers = 0, mid_layers = 0, last_layers = 0;
};

struct Estimate {
  double step_s = 0;
  double compute_s = 0, bubble_s = 0, tp_comm_s = 0, pp_comm_s = 0, dp_comm_s = 0, optimizer_s = 0,
         offload_s = 0;                 // parts of step_s (exposed)
  double peak_bytes = 0, activation_bytes = 0, state_bytes = 0;
  double framework_bytes = 0;           // CUDA context, cuBLAS workspace, NCCL buffers, fragmentation (in peak)
  double host_bytes_per_node = 0;
  bool fits = false, host_fits = true;
};

// The planner's view of a scenario: model, cluster, training, and caches (thread-safe).
struct AnalyticModel {
  explicit AnalyticModel(const Scenario& sc);
  const Scenario& sc;
  double capacity_bytes = 0;            // usable HBM (after headroom)
  // Closed-form collective time of one collective over `g` members with `k` members per node (k = g: one
  // node), every GPU of the involved nodes running one such collective at the same time.
  double coll_s(int coll, int g, int k, double bytes) const;
  double p2p_s(bool inter, double bytes) const;
  const MicroCost& micro(const Layout& lay, long long microbatch, bool sp, Recompute rc) const;
  Estimate estimate(const Layout& lay, const MicroCost& mc, const Choice& ch) const;

 private:
  // Chunked offload's GPU state and step costs for estimate (analytic.cpp).
  struct ChunkedState {
    double weights = 0, optimizer_bytes = 0, gpu_adam_s = 0, offload_s = 0, host_bytes = 0;
    bool fits = true;
  };
  ChunkedState chunked_state(const MicroCost& mc, const Choice& ch, const Params& held, int dp, int edp,
                             const ElemBytes& eb, double act, double buffers, int sharing_host) const;
  std::shared_ptr<const Topology> topo_;
  LinkTiers lat_;
  mutable std::mutex mu_;
  mutable std::map<std::tuple<int, int, bool, long long, bool, int, int, int, int>, std::unique_ptr<MicroCost>> micro_;
};

// The layout and inner choices of a validated plan, and its estimate (tests and explanations).
Layout layout_of(const Plan& p, Precision prec);
Choice choice_of(const Plan& p, long long layers);
Estimate estimate_plan(const AnalyticModel& am, const Plan& p);

}  // namespace tp
