// export/common: what every target shares — the target names, refusals collected into one InputError, the
// run's accumulation and step counts, Megatron-style first / last stage layers, and shell formatting.
#include <cmath>
#include <algorithm>
#include <cstdio>

#include "export/export.hpp"

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
  r.need(p.offload.kind != OffloadKind::granular, "$.plan.offload.kind", "M6-10T granular layer offload (\"granular\")",
         "\"offload\": {\"kind\": \"optimizer\"} (ZeRO-Offload) where the target has it, else no offload");
}

long long accumulation_steps(const Scenario& sc) { return sc.plan.num_microbatches; }

long long train_steps(const Scenario& sc) {
  if (sc.training.tokens <= 0) return 0;
  const double per_step = (double)sc.training.global_batch * (double)sc.training.seq_len;
  return (long long)std::ceil(sc.training.tokens / per_step);
}

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

}  // namespace tp::exporting
