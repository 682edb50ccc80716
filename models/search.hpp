// search: the scenario's "search" block (used instead of "plan") — the bounds of `trainplan plan`'s search.
// Invariants after parsing: every list in Fix is non-empty and holds valid values of its key (an empty list
// means "not fixed"); min_gpus <= max_gpus; confirm >= top_k.
#pragma once
#include <string>
#include <vector>

#include "plan.hpp"

namespace tp {

enum class Objective { time_to_train = 0, cost = 1, throughput_per_gpu = 2 };
const char* objective_name(Objective o);

// Plan keys held at given values ("fix": {"tp_mode": "1d", "zero": [1, 2]}): allowed values per key.
// Pipeline stage splits a search may use: the even one (pp divides the layers) and Megatron-style uneven ones
// (fewer layers on the first and last stages: --decoder-first/last-pipeline-num-layers).
enum class StageSplitKind { even, uneven };

struct Fix {
  std::vector<int> dp, tp, pp, virtual_stages, zero, ep, cp;
  std::vector<long long> microbatch, global_batch;
  std::vector<Schedule> schedule;
  std::vector<Recompute> recompute;
  std::vector<TpMode> tp_mode;
  std::vector<GradAccumulation> grad_accumulation;
  std::vector<OffloadKind> offload;
  std::vector<bool> sequence_parallel;
  std::vector<Attention> attention;
  std::vector<Precision> precision;  // training.precision values the search may choose (empty: the scenario's)
  std::vector<StageSplitKind> stage_split;  // "even" / "uneven" pipeline stage splits (empty: both)
  // Frameworks searched (catalog names; "any": every catalog framework, "research" included); empty = the
  // scenario's training.framework.
  std::vector<std::string> framework;
};

// The attention kind a search plans with: flash unless the fix allows only "unfused". Flash dominates unfused
// (less work, no s x s activations), so it is not searched as a choice.
Attention search_attention(const Fix& f);

// "compare": the shortest-time question of Lamy-Poirier — the search repeated with LGA+MPP forbidden and
// allowed, on the cluster's own inter-node network and on an Ethernet-class one.
struct Compare {
  bool on = false;
  double ethernet_nic_bits_per_s = 100e9;  // per node
  int ethernet_nics_per_node = 1;
};

// search.memory_headroom's default: the share of HBM a team leaves free beyond what trainplan models (CUDA
// graphs, allocator spikes, MoE token imbalance): Ascend MindSpeed's memory guide caps the PyTorch process at
// 0.94 of device memory (torch_npu.npu.set_per_process_memory_fraction(0.94)); docs/techniques.md.
inline constexpr double kDefaultMemoryHeadroom = 0.06;

struct Search {
  int max_gpus = 0;                 // 0 = the cluster's GPUs
  int min_gpus = 1;
  bool min_gpus_given = false;      // false: the Pareto front starts where a plan fits without offload (if any)
  std::vector<int> gpu_counts;      // explicit GPU counts (empty: every count the layouts reach)
  Objective objective = Objective::time_to_train;
  int top_k = 5;
  double confirm_budget_s = 300;    // estimated simulation seconds the confirmation may spend (planner/search.hpp)
  int confirm = 0;                  // analytic-best points the event simulation confirms (0 = max(3 top_k, 12))
  double memory_headroom = kDefaultMemoryHeadroom;  // fraction of GPU memory kept free
  double max_batch_over_critical = 1.0;  // global batch tokens <= this x Kaplan's B_crit (searched batches)
  Fix fix;
  Compare compare;
};

// Reads "search" at `path` (exact keys; messages name the JSON path).
Search read_search(const json& v, const std::string& path, Issues& issues);
json search_to_json(const Search& s);

}  // namespace tp
