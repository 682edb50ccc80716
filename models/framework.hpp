// framework: a training framework as it runs (scenario training.framework: a catalog name from
// models/catalog/frameworks.json or an inline object). Three things a plan's prediction depends on beyond the
// model and the cluster:
//  - what the framework can run: the plans `simulate` accepts and `plan` searches by default;
//  - how it communicates: gradient buckets, when a pipeline's gradients are reduced, ZeRO-3 gathers in flight;
//  - its kernels (a kernel profile of the GPU).
// Research techniques (the seed papers' layered accumulation, modular pipelines, granular and chunked offload,
// Optimus 2D tensor parallelism, Pseudo-to-Real) are in no production framework's capabilities: a plan that uses
// them is simulated (writing it in the plan opts in) and labelled in every output; the planner searches them only
// when asked (search.fix.framework "any" or "research", or a fix naming them).
// Invariants after reading: every capability list is non-empty; comm numbers are finite and non-negative.
#pragma once
#include <algorithm>
#include <string>
#include <vector>

#include "plan.hpp"

namespace tp {

// What a framework can run (JSON "can_run"). Lists hold the values it accepts; a plan outside them is refused.
// An empty list (a default-constructed profile, as C++ callers build) accepts every value.
struct FrameworkCan {
  std::vector<Schedule> schedules;       // pipeline schedules (pp > 1); production: gpipe, 1f1b, interleaved
  std::vector<int> zero;                 // ZeRO stages (0 = plain data parallelism)
  int max_zero_with_pp = 3;              // highest ZeRO stage with pp > 1 (DeepSpeed's pipeline engine: 1)
  std::vector<OffloadKind> offload;      // production: none, optimizer
  std::vector<Recompute> recompute;
  std::vector<Precision> precisions;     // training.precision values
  // fp8 scaling recipes (models/fp8_recipe.hpp kFp8Recipes), the first its default (training.fp8_recipe absent).
  std::vector<std::string> fp8_recipes;
  int max_tp = 0;                        // 0: any tensor-parallel size
  bool sequence_parallel = true, context_parallel = true, expert_parallel = true, uneven_stages = true;
  bool tp_comm_overlap = true, overlap_param_gather = true;
  bool cuda_graphs = false;              // the step captured as a CUDA graph (plan.cuda_graphs)
  bool recompute_layers = true;          // a share of the layers recomputes (plan.recompute_layers)
  bool research = false;                 // also every research technique, unlabelled as a refusal (still labelled)
};

// How it communicates (JSON "communication").
struct FrameworkComm {
  // Data-parallel gradient bucket: max(bucket_min_params, bucket_params_per_data_rank x data ranks) parameters
  // (Megatron-LM: 40 M and 1 M; DeepSpeed's reduce_bucket_size: 500 M and 0), or one bucket per layer
  // (PyTorch FSDP's per-module reduce-scatter: "bucket": "layer").
  double bucket_min_params = 40e6, bucket_params_per_data_rank = 1e6;
  bool bucket_per_layer = false;
  // With pp > 1 the gradients are reduced after the pipeline flush, not during the last backward (DeepSpeed's
  // PipelineEngine: ReduceGrads after the schedule's last step).
  bool pp_reduce_after_flush = false;
  // ZeRO-3: parameters gathered at once (DeepSpeed's stage3_max_live_parameters); 0 = whole layers (the gathered
  // layer and the prefetched next one, as FSDP's per-block units).
  double zero3_live_params = 0;
};

// The best efficiency published for one GPU and precision class in the bundled reference runs (JSON
// "best_published": [{gpu, precision, model_tflops_per_gpu, source}]): a prediction above it is flagged.
struct PublishedBest {
  std::string gpu;           // catalog GPU name
  std::string precision;     // "16-bit" (fp16 / bf16) or "fp8"
  double model_tflops_per_gpu = 0;
  std::string source;        // the run it comes from
};

// What `trainplan fit` fitted for the framework on measured runs (JSON "fitted", every key optional): its
// kernels' speed against the catalog GPU's curves (compute and memory-bound ops alike), its fused attention
// kernels' against the GPU's attention curve on top of that (a framework's SDPA backend is not the kernel the
// curve was fitted on), its collectives' against the cluster's, and a fixed cost per step (optimizer launches, gradient clipping, logging, data
// loading). Applied by the scenario loader to the cluster's curves (apply_framework_fit) and by the step
// program / the planner's estimate as one task per step (framework_step_overhead_s): sim and planner alike.
struct FrameworkFit {
  double compute_efficiency_scale = 1, network_efficiency_scale = 1, step_overhead_s = 0, attention_efficiency_scale = 1;
  std::string source;  // what it was fitted on
  bool any() const {
    return compute_efficiency_scale != 1 || network_efficiency_scale != 1 || step_overhead_s != 0 || attention_efficiency_scale != 1;
  }
};

struct Framework {
  std::string name = "megatron-core";  // catalog name or "inline" (default-constructed: Megatron-Core's comm, any plan)
  std::string version;       // the framework's version the profile describes
  FrameworkCan can;
  FrameworkComm comm;
  std::string kernel_profile;  // the GPU kernel profile in force ("" = the GPU's own); training.kernel_profile wins
  std::vector<PublishedBest> best_published;
  FrameworkFit fit;
};

// The default framework (Megatron-Core, as NeMo and Megatron-Bridge run it).
inline constexpr const char* kDefaultFramework = "megatron-core";
inline constexpr const char* kResearchLabel =
    "research technique: predicted from the paper's model, not run by a production framework";

inline constexpr const char* kBeyondPublishedLabel =
    "simulated efficiency above the best published for this GPU and framework in the bundled reference runs "
    "(flagged, not capped)";
// The labels a plan carries in tables (planner, reports): " (FRAMEWORK)" when it is not `scenario_framework`,
// " [research]" and " [beyond published]" (legends: kResearchLabel, kBeyondPublishedLabel).
std::string plan_labels(const std::string& framework, const std::string& scenario_framework, bool research, bool beyond);

// Reads a framework profile (catalog entry or inline object) at `path`.
Framework read_framework(const json& v, const std::string& name, const std::string& path, Issues& is);
// training.framework: a catalog name (string) or an inline object; absent = kDefaultFramework.
Framework resolve_framework(const json* v, const std::string& path, Issues& is);
json framework_to_json(const Framework& f);
// The catalog's frameworks, read (throws InputError on a broken catalog).
std::vector<Framework> catalog_frameworks();

// The research techniques a plan uses, each named with its paper ("layered gradient accumulation (Lamy-Poirier)").
std::vector<std::string> research_techniques(const Plan& p, const Delink& d);

// Why `f` cannot run plan `p` in precision `pr`: one problem per entry, key = the plan key (under "$.plan"
// or "$.training") and text = what the framework runs instead (the nearest plan it can run). Research techniques
// are never refusals (they are labelled). Empty = it can run it.
struct Refusal { std::string key, text; };
std::vector<Refusal> framework_refusals(const Framework& f, const Plan& p, Precision pr);

// Gradient bucket of `f` (parameters) for `data_ranks` ranks; 0 = per layer (every layer's gradients a bucket).
double framework_bucket_params(const Framework& f, int data_ranks);
// ZeRO-2/3: the unreduced gradients one bucket of `bucket_total_params` holds at once. A bucket larger than the
// framework's (a layer piece of more parameters than DeepSpeed's 5e8-element reduce bucket or Megatron's 40 M)
// leaves as the backward produces it, one framework bucket at a time (DeepSpeed's ipg buffer, Megatron's
// bucketed grad buffer); a per-layer framework (FSDP's unit) holds the whole piece. Sim and planner both call it.
double grad_bucket_hold_params(const Framework& f, int data_ranks, double bucket_total_params);
// ZeRO-3: parameters one gather buffer holds for a run of `run_params` parameters (two buffers: the gathered
// run and the prefetched next). Whole runs, or half of the framework's live-parameter bound when it has one.
inline double zero3_buffer_params(const Framework& f, double run_params) {
  return f.comm.zero3_live_params > 0 ? std::min(run_params, f.comm.zero3_live_params / 2) : run_params;
}
// Whether a plan's data-parallel gradient reduction overlaps the last backward under `f`.
bool framework_overlaps_grad_reduce(const Framework& f, const Plan& p);

// The fp8 recipe a run under `f` uses when training.fp8_recipe is not given: its first, or "delayed".
std::string framework_default_fp8_recipe(const Framework& f);

// The framework's fixed cost per step (its fit; 0 when not fitted).
inline double framework_step_overhead_s(const Framework& f) { return f.fit.step_overhead_s; }
// Scales `gpu`'s compute and memory efficiency curves and the cluster fabrics' efficiency curves by the fit
// (each point's efficiency x scale, at most 1; an absent network curve becomes a constant one).
struct Cluster;
void apply_framework_fit(Cluster& cluster, const FrameworkFit& fit);

// The reference best for the GPU and precision (null when the bundled runs have none).
const PublishedBest* published_best(const Framework& f, const std::string& gpu, Precision pr);

}  // namespace tp
