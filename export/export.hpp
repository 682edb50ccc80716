// export: a scenario's plan as the configuration of the framework a cluster runs — Megatron-LM
// (pretrain_gpt.py arguments), NeMo 2 (nemo-run recipe overrides), DeepSpeed (ds_config.json plus the
// Megatron-DeepSpeed arguments) and TorchTitan (TOML job config). The option names are those of the framework
// versions cited in data/export/*.flags|keys and docs/export.md; the tests check every emitted name against
// those lists and parse the output back into the plan.
// Invariant: the output describes exactly the scenario's plan. A plan feature the target cannot express is an
// InputError (exit 2) naming the feature's JSON path and the nearest plan the target can run — never a
// silently different plan.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "models/scenario.hpp"

namespace tp::exporting {

enum class Target { megatron, nemo, deepspeed, torchtitan };
// "megatron" | "nemo" | "deepspeed" | "torchtitan"; anything else is an InputError naming --to.
Target target_of(const std::string& name);
const char* target_name(Target t);

// The target's configuration for the scenario's plan: a shell script (megatron, nemo, deepspeed) or a TOML
// file (torchtitan), each opening with comments that say what it is and what the user still supplies (data,
// tokenizer). `scenario_file` is named in messages.
std::string export_plan(const Scenario& sc, Target t, const std::string& scenario_file);

// --- shared by the target files (export/common.cpp) ---
// Ordered options of one command line or config: {name, value}; value "" for a flag without a value.
using Options = std::vector<std::pair<std::string, std::string>>;
// Collects what the target cannot express; throw_if_any raises one InputError listing them all.
struct Refusals {
  std::string target, file;
  std::vector<std::string> msgs;
  void need(bool ok, const std::string& path, const std::string& what, const std::string& nearest);
  void throw_if_any() const;
};
// Checks every target shares (delink, Optimus 2D, modular pipelines, layered accumulation).
void refuse_common(const Scenario& sc, Refusals& r);
// Gradient-accumulation steps (micro-batches per step per data rank) and optimizer steps of the run (0 when
// the scenario gives no token count).
long long accumulation_steps(const Scenario& sc);
long long train_steps(const Scenario& sc);
// Megatron-style first / last pipeline-stage layer counts when the stages are uneven with an even middle:
// {first, last}; {0, 0} for even stages. `ok` false when the split has no such form.
struct FirstLast { int first = 0, last = 0; bool ok = true; };
FirstLast first_last_layers(const Plan& p, long long layers);
// "a \\\n  --b c \\\n ..." lines of a shell command.
std::string shell_lines(const std::string& head, const Options& opts);
std::string num(double v);
std::string num(long long v);

std::string export_megatron(const Scenario& sc, const std::string& file);
std::string export_nemo(const Scenario& sc, const std::string& file);
std::string export_deepspeed(const Scenario& sc, const std::string& file);
std::string export_torchtitan(const Scenario& sc, const std::string& file);

}  // namespace tp::exporting
