// export/common: what every target shares — the target names, refusals collected into one InputError, the
// run's accumulation and step counts, Megatron-style first / last stage layers, and shell formatting.
#include <cmath>
#include <algorithm>
#include <cctype>
#include <cstdio>

#include "export/export.hpp"
#include "sim/op_cost.hpp"
#include "sim/run_estimate.hpp"

namespace tp::exporting {

Target target_of(const std::string& name) {
  if (name == "megatron") return Target::megatron;
  if (name == "nemo") return Target::nemo;
  if (name == "deepspeed") return Target::deepspeed;
  if (name == "torchtitan") return Target::torchtitan;
  throw InputError({"--to: expected megatron, nemo, deepspeed or torchtitan, got \"" + name + "\""});
}

const char* target_name(Target t) {
  switch (t) {
    case Target::megatron: return "Megatron-LM";
    case Target::nemo: return "NeMo";
    case Target::deepspeed: return "DeepSpeed";
    case Target::torchtitan: return "TorchTitan";
  }
  return "?";
}

void Refusals::need(bool ok, const std::string& path, const std::string& what, const std::string& nearest) {
  if (!ok) msgs.push_back(file + ": " + path + ": " + what + " cannot be expressed in " + target + "; nearest plan " +
                          target + " runs: " + nearest);
}

void Refusals::throw_if_any() const {
  if (!msgs.empty()) throw InputError(msgs);
}

// Layers per model chunk (pp x virtual stages chunks of the model, even stages).
static long long chunk_layers(const Scenario& sc) {
  return sc.model.layers / ((long long)sc.plan.pp * std::max(1, sc.plan.virtual_stages));
}

void refuse_common(const Scenario& sc, Refusals& r) {
  const Plan& p = sc.plan;
  r.need(!sc.delink.on(), "$.plan.delink", "Pseudo-to-Real delinking (M6-10T)",
         "train the real model from the start (remove plan.delink)");
  r.need(p.tp_mode == TpMode::d1, "$.plan.tp_mode", "Optimus 2D tensor parallelism (\"2d\")",
         "\"tp_mode\": \"1d\" with the same tp (" + std::to_string(p.tp) + ")");
  r.need(p.schedule != Schedule::modular, "$.plan.schedule", "the modular pipeline (Lamy-Poirier)",
         "\"schedule\": \"interleaved\" with virtual_stages " + std::to_string(p.virtual_stages > 1 ? p.virtual_stages : 2));
  r.need(p.grad_accumulation == GradAccumulation::standard, "$.plan.grad_accumulation",
         "layered gradient accumulation", "\"grad_accumulation\": \"standard\"");
  r.need(p.offload.kind != OffloadKind::chunked, "$.plan.offload.kind", "PatrickStar chunked offload (\"chunked\")",
         "\"offload\": {\"kind\": \"optimizer\"} (ZeRO-Offload) where the target has it, else no offload");
  r.need(p.cp == 1 || p.attention == Attention::flash, "$.plan.attention",
         "context parallelism with unfused attention (trainplan's all-gather form; the frameworks run cp only inside "
         "a fused attention kernel)", "\"attention\": \"flash\" with the same cp (" + std::to_string(p.cp) + ")");
  r.need(sc.model.rope_scaling_factor >= 0, "$.model.hf_config",
         "a Hugging Face rope_scaling other than Llama 3.1's \"llama3\" (YaRN, linear, ...)",
         "the model without that rope_scaling");
  r.need(p.offload.kind != OffloadKind::granular, "$.plan.offload.kind", "M6-10T granular layer offload (\"granular\")",
         "\"offload\": {\"kind\": \"optimizer\"} (ZeRO-Offload) where the target has it, else no offload");
  r.need(p.recompute != Recompute::selective_op || r.target == "TorchTitan", "$.plan.recompute",
         "TorchTitan's op-level selective checkpointing (\"selective_op\")", "\"recompute\": \"full\"");
  const long long L = sc.model.layers, N = p.recompute_layers;
  if (N >= 0 && N < L) {
    const long long chunk = chunk_layers(sc);
    const bool titan = r.target == "TorchTitan";
    const bool ok = p.recompute == Recompute::full &&
                    (titan ? N == 0 || L % N == 0 : p.stage_layers.empty() && (chunk * N) % L == 0);
    r.need(ok, "$.plan.recompute_layers",
           titan ? "recompute of " + std::to_string(N) + " of " + std::to_string(L) + " layers other than every k-th block"
                 : "recompute of " + std::to_string(N) + " of " + std::to_string(L) + " layers other than the same number in "
                   "each model chunk of " + std::to_string(chunk) + " layers",
           "\"recompute_layers\" a divisor share of the layers, or no recompute_layers");
  }
}

long long recompute_block_layers(const Scenario& sc) {
  const Plan& p = sc.plan;
  const long long L = sc.model.layers, N = p.recompute_layers;
  if (N < 0 || N >= L) return -1;
  return chunk_layers(sc) * N / L;
}

long long accumulation_steps(const Scenario& sc) { return sc.plan.num_microbatches; }

long long train_steps(const Scenario& sc) {
  const double per_step = (double)sc.training.global_batch * (double)sc.training.seq_len;
  if (sc.training.tokens > 0) return (long long)std::ceil(sc.training.tokens / per_step);
  // As sim/simulate.cpp: non-embedding parameters of the dense layers, Kaplan's stopping point or target_loss.
  const double n_nonembed = (double)sc.model.layers * layer_params_full(sc.model);
  const RunEstimate r = estimate_run(n_nonembed, per_step, 0, 1.0, 1, 0, 0, ScalingLaw{}, sc.training.target_loss);
  return std::max(1LL, (long long)r.steps);
}

RunSettings run_settings(const Scenario& sc) {
  RunSettings s;
  s.opt = sc.training.optimizer;
  s.steps = train_steps(sc);
  s.warmup = std::min(s.steps, s.opt.warmup_of(s.steps));
  s.min_lr = s.opt.min_lr_value();
  s.save_every = std::min(s.steps, sc.training.checkpoint_every);
  s.log_every = std::min(s.steps, sc.training.log_every);
  return s;
}

Launch launch_of(const Scenario& sc) {
  Launch l;
  l.gpus_per_node = std::min(sc.cluster.gpus_per_node, sc.plan.gpus());
  l.nodes = (sc.plan.gpus() + l.gpus_per_node - 1) / l.gpus_per_node;
  return l;
}

// A Slurm job name: the scenario's name with anything but [A-Za-z0-9._-] replaced.
static std::string job_name(const std::string& name) {
  std::string s = name.empty() ? "trainplan" : name;
  for (char& c : s)
    if (!std::isalnum((unsigned char)c) && c != '.' && c != '_' && c != '-') c = '_';
  return s;
}

std::string sbatch_header(const Scenario& sc, const std::string& about, int tasks_per_node, const std::string& data_what) {
  const Launch l = launch_of(sc);
  std::string s = "#!/bin/bash\n" + about;
  s += "#SBATCH --job-name=" + job_name(sc.name) + "\n";
  s += "#SBATCH --nodes=" + num((long long)l.nodes) + "\n";
  s += "#SBATCH --ntasks-per-node=" + num((long long)tasks_per_node) + "\n";
  s += "#SBATCH --gpus-per-node=" + num((long long)l.gpus_per_node) + "\n";
  s += "#SBATCH --exclusive\n";
  s += "set -euo pipefail\n\n";
  s += "# The only placeholders: your data and tokenizer. Set them in the environment (sbatch --export) or here.\n";
  s += "DATA_PATH=${DATA_PATH:?\"set DATA_PATH to " + data_what + "\"}\n";
  s += "TOKENIZER=${TOKENIZER:?\"set TOKENIZER to your tokenizer (a Hugging Face name or folder; the model has a vocabulary of " +
       num(sc.model.vocab) + " tokens)\"}\n";
  s += "CKPT_DIR=${CKPT_DIR:-checkpoints/" + job_name(sc.name) + "}\n";
  s += "export DATA_PATH TOKENIZER CKPT_DIR\n";
  s += "# Rendezvous: the job's first node.\n";
  s += "MASTER_ADDR=$(scontrol show hostnames \"$SLURM_JOB_NODELIST\" | head -n 1)\n";
  s += "MASTER_PORT=${MASTER_PORT:-6000}\n";
  s += "export MASTER_ADDR MASTER_PORT\n";
  return s;
}

std::string pipeline_layout(const Plan& p, long long layers) {
  const std::vector<int> ch = chunk_layers(p, layers);
  std::string s = "'";
  for (size_t g = 0; g < ch.size(); ++g) {
    if (g) s += '|';
    if (g == 0) s += 'E';
    if (ch[g] > 0) s += ch[g] == 1 ? std::string("t") : "t*" + num((long long)ch[g]);  // Megatron unrolls x*n
    if (g + 1 == ch.size()) s += 'L';
  }
  return s + "'";
}

bool recomputes_nothing(const Plan& p) { return p.recompute == Recompute::selective && p.attention == Attention::flash; }

FirstLast first_last_layers(const Plan& p, long long layers) {
  FirstLast f;
  const std::vector<int>& s = p.stage_layers;
  if (s.empty() || p.pp < 2 || p.account_for_embedding || p.account_for_loss) return f;
  bool even = true;
  for (int n : s) even = even && n == s[0];
  if (even) return f;
  // Megatron: the middle stages split the rest evenly; first / last may differ (with pp 2 only those two).
  const size_t n = s.size();
  for (size_t i = 2; i + 1 < n; ++i) f.ok = f.ok && s[i] == s[1];
  const long long mid = n > 2 ? s[1] : 0;
  f.first = s[0];
  f.last = s[n - 1];
  if (n > 2 && f.first == mid) f.first = 0;  // only the last differs
  if (n > 2 && f.last == mid) f.last = 0;
  (void)layers;
  return f;
}

std::vector<int> chunk_layers(const Plan& p, long long layers) {
  if (!p.chunk_layers.empty()) return p.chunk_layers;
  const int v = p.schedule == Schedule::interleaved ? std::max(1, p.virtual_stages) : 1;
  std::vector<int> c((size_t)p.pp * v);
  for (size_t g = 0; g < c.size(); ++g)
    c[g] = (int)((p.stage_layers.empty() ? layers / p.pp : p.stage_layers[g % p.pp]) / v);
  return c;
}

std::string moe_layer_pattern(const Transformer& m) {
  const long long every = m.moe.every, groups = m.layers / every, rest = m.layers % every;
  std::string s = "([0]*" + num(every - 1) + "+[1])*" + num(groups);
  return rest > 0 ? s + "+[0]*" + num(rest) : s;
}

std::string shell_lines(const std::string& head, const Options& opts) {
  std::string out = head;
  for (const auto& [k, v] : opts) out += " \\\n  " + k + (v.empty() ? "" : " " + v);
  return out + "\n";
}

std::string num(long long v) { return std::to_string(v); }

std::string num(double v) {
  char b[64];
  std::snprintf(b, sizeof b, "%.10g", v);
  return b;
}

std::string export_plan(const Scenario& sc, Target t, const std::string& scenario_file) {
  switch (t) {
    case Target::megatron: return export_megatron(sc, scenario_file);
    case Target::nemo: return export_nemo(sc, scenario_file);
    case Target::deepspeed: return export_deepspeed(sc, scenario_file);
    case Target::torchtitan: return export_torchtitan(sc, scenario_file);
  }
  return {};
}

// Megatron-style data, optimizer and schedule, checkpoint and logging arguments (RunSettings; docs/export.md has the
// defaults), shared by Megatron-LM and Megatron-DeepSpeed, which differ only in the tokenizer type's name.
void megatron_run_args(const Scenario& sc, const std::string& tokenizer_type, Options& o) {
  const RunSettings rs = run_settings(sc);
  o.push_back({"--data-path", "\"$DATA_PATH\""});
  o.push_back({"--tokenizer-type", tokenizer_type});
  o.push_back({"--tokenizer-model", "\"$TOKENIZER\""});
  o.push_back({"--train-iters", num(rs.steps)});
  o.push_back({"--optimizer", "adam"});
  o.push_back({"--lr", num(rs.opt.lr)});
  o.push_back({"--min-lr", num(rs.min_lr)});
  o.push_back({"--lr-decay-style", lr_decay_name(rs.opt.decay)});
  o.push_back({"--lr-decay-iters", num(rs.steps)});
  o.push_back({"--lr-warmup-iters", num(rs.warmup)});
  o.push_back({"--weight-decay", num(rs.opt.weight_decay)});
  o.push_back({"--clip-grad", num(rs.opt.grad_clip)});
  o.push_back({"--adam-beta1", num(rs.opt.beta1)});
  o.push_back({"--adam-beta2", num(rs.opt.beta2)});
  o.push_back({"--adam-eps", num(rs.opt.eps)});
  o.push_back({"--save", "\"$CKPT_DIR\""});
  o.push_back({"--load", "\"$CKPT_DIR\""});
  o.push_back({"--save-interval", num(rs.save_every)});
  o.push_back({"--log-interval", num(rs.log_every)});
  o.push_back({"--eval-interval", num(rs.save_every)});
  o.push_back({"--eval-iters", "10"});
}

}  // namespace tp::exporting
