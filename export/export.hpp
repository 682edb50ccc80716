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
// plan.recompute_layers (N of the L layers, spread evenly) as Megatron's --recompute-method block: K layers of
// each model chunk; -1 when every layer recomputes. refuse_common refuses the splits the targets cannot say (a
// chunk's share not whole, uneven stages; TorchTitan: L / N not whole, as its every-k-th block).
long long recompute_block_layers(const Scenario& sc);
// Gradient-accumulation steps (micro-batches per step per data rank) and optimizer steps of the run: from
// training.tokens, else where `simulate` stops it (training.target_loss or Kaplan's compute-efficient point,
// sim/run_estimate.hpp) — the same count `simulate --json` reports as training.steps.
long long accumulation_steps(const Scenario& sc);
long long train_steps(const Scenario& sc);
// The run's optimizer and intervals (training.optimizer, checkpoint_every, log_every, with their defaults):
// warm-up resolved against the run's steps, the checkpoint interval capped at the run.
struct RunSettings {
  OptimizerSettings opt;
  long long steps = 0, warmup = 0, save_every = 0, log_every = 0;
  double min_lr = 0;
};
RunSettings run_settings(const Scenario& sc);
// Megatron-LM's (and Megatron-DeepSpeed's) data, optimizer, schedule, checkpoint and logging arguments for RunSettings.
void megatron_run_args(const Scenario& sc, const std::string& tokenizer_type, Options& o);
// Nodes and GPUs per node of the plan on the scenario's cluster (a plan smaller than a node takes part of one).
struct Launch { int nodes = 1, gpus_per_node = 1; };
Launch launch_of(const Scenario& sc);
// The opening of every export's Slurm batch script: "#!/bin/bash", what it is (`about` lines, already "# "-prefixed),
// the #SBATCH nodes / tasks / GPUs, then the only placeholders (DATA_PATH and TOKENIZER, required from the
// environment with a message saying what they are), CKPT_DIR, and the rendezvous (MASTER_ADDR = the job's first
// node, MASTER_PORT) — nothing defaults to localhost.
std::string sbatch_header(const Scenario& sc, const std::string& about, int tasks_per_node, const std::string& data_what);
// Megatron-Core's --pipeline-model-parallel-layout for the plan's chunks ("E" embedding, "t*n" n layers, "L" the
// loss, "|" between the pp x v model chunks in looping order: chunk g on stage g mod pp), quoted for the shell.
std::string pipeline_layout(const Plan& p, long long layers);
// Under flash attention trainplan's selective recompute recomputes nothing (the kernel keeps no s x s tensor; see
// docs/export.md): the exports then turn recompute off. Unfused: core attention (Megatron's "core_attn").
bool recomputes_nothing(const Plan& p);
// Megatron-style first / last pipeline-stage layer counts when the stages are uneven with an even middle:
// {first, last}; {0, 0} for even stages and for the account_for_embedding / loss split (Megatron-LM refuses
// both at once: its own flags state that split). `ok` false when the split has no such form.
struct FirstLast { int first = 0, last = 0; bool ok = true; };
FirstLast first_last_layers(const Plan& p, long long layers);
// Transformer layers of every model chunk in looping order (chunk g on stage g mod pp; pp x v chunks, v the
// virtual stages of an interleaved schedule, else 1) — the split the plan runs.
std::vector<int> chunk_layers(const Plan& p, long long layers);
// Which layers are MoE, as Megatron-LM's --moe-layer-freq list pattern: "([0]*(every-1)+[1])*n+[0]*rest"
// (trainplan's layer l is MoE when (l + 1) % every == 0; Megatron's integer form puts them at l % every == 0).
std::string moe_layer_pattern(const Transformer& m);
// "a \\\n  --b c \\\n ..." lines of a shell command.
std::string shell_lines(const std::string& head, const Options& opts);
std::string num(double v);
std::string num(long long v);

std::string export_megatron(const Scenario& sc, const std::string& file);
std::string export_nemo(const Scenario& sc, const std::string& file);
std::string export_deepspeed(const Scenario& sc, const std::string& file);
std::string export_torchtitan(const Scenario& sc, const std::string& file);

}  // namespace tp::exporting
