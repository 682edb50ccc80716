// scenario: the public input format. Loads a scenario JSON, resolves catalog names and hf_config files,
// validates every key and every cross-field constraint, and either returns a complete Scenario or throws
// InputError listing every problem (JSON path + what was expected). Nothing deeper re-checks user input.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "cluster.hpp"
#include "framework.hpp"
#include "plan.hpp"
#include "search.hpp"
#include "transformer.hpp"

namespace tp {

struct Scenario {
  std::string name;
  Transformer model;
  Cluster cluster;
  Training training;
  Plan plan;
  Delink delink;  // from plan.delink; off unless given
  Framework framework;  // training.framework (catalog megatron-core when not given)
  bool framework_given = false;  // training.framework was in the scenario
  std::shared_ptr<const Gpu> gpu_as_given;  // the cluster's GPU before any kernel profile (set_framework)
  // The fabrics' efficiency curves before the framework's fit (intra, inter; set_framework).
  std::shared_ptr<const std::pair<Curve, Curve>> net_curves_as_given;
  // The planner's bounds (a scenario has a plan or a search block; only `trainplan plan` and reports accept
  // the latter). With a search block the plan is empty and training.global_batch may be 0 (searched).
  std::shared_ptr<Search> search;
  // Loading warnings: inputs that are valid but not fully modelled (e.g. a Hugging Face sliding_window), one
  // line each, without the "warning: " prefix. The CLI prints them on stderr; they do not change the exit code.
  std::vector<std::string> warnings;
};

// The pseudo phase of a delinked scenario: its plan (delink.plan or the real plan without offload) with
// shared_layers = unique_layers, its batch and token budget. Requires sc.delink.on().
Scenario pseudo_phase(const Scenario& sc);

// Puts framework `f` in force (the planner's search over several frameworks): its kernel profile on the GPU as
// given, unless training.kernel_profile names one. Throws InputError when the GPU lacks the profile.
void set_framework(Scenario& sc, const Framework& f);

// Parses a scenario from a JSON value. `base_dir` resolves relative paths; `where` names the source in messages.
Scenario scenario_from_json(const json& v, const std::string& base_dir, const std::string& where,
                            bool allow_search = false);
// Reads and parses a scenario file (throws InputError on any problem, including unreadable or malformed files).
Scenario load_scenario(const std::string& file, bool allow_search = false);
// Parses scenario text (used by the fuzz target and tests).
Scenario scenario_from_text(const std::string& text, const std::string& where = "scenario");
json scenario_to_json(const Scenario& s);  // fully resolved (catalog entries expanded)

// Checks the plan against model, cluster and training, appending problems to `issues` with paths under
// `plan_path`, `batch_path` (the global batch the micro-batches come from) and `cluster_path`. Also derives
// plan.num_microbatches, resolves a modular schedule's virtual_stages 0 (not given) to layers / pp and a granular
// offload's fraction to its layers. Shared with the planner and the delink pseudo plan ("$.plan.delink.plan").
// Why the GPU cannot train in precision `pr` ("" when it can): no peak for it; fp8 also needs bf16 (Transformer
// Engine keeps attention and the other GEMMs in bf16).
std::string precision_problem(const Gpu& g, Precision pr);
// Why a step of this plan cannot be captured as a CUDA graph ("" when it can: plan.cuda_graphs): the one rule the
// simulator (the graph's kernel overhead) and the executor (exec/runtime/step_graph.hpp) share. A capture needs a
// step of device work only, the same every step: one GPU, no offload, no mixture of experts (the routing reads loads
// back), ZeRO below 2. fp8 is captured: its scales live in device memory (exec/model/fp8.hpp).
std::string cuda_graph_blocker(const Transformer& m, const Plan& p);

void validate_plan(const Transformer& m, const Cluster& c, const Training& t, Plan& plan, Issues& issues,
                   const std::string& plan_path = "$.plan", const std::string& batch_path = "$.training.global_batch",
                   const std::string& cluster_path = "$.cluster");

}  // namespace tp
