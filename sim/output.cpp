// output: JSON result and terminal summary. See output.hpp. The trace lives in trace.cpp.
#include "output.hpp"

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>

#include "models/safe_io.hpp"
#include "op_cost.hpp"

namespace tp {

static json breakdown_json(const Breakdown& b) {
  return {{"compute", b.compute},
          {"recompute", b.recompute},
          {"bubble", b.bubble},
          {"tp_comm_exposed", b.tp_comm_exposed},
          {"pp_comm_exposed", b.pp_comm_exposed},
          {"dp_comm_exposed", b.dp_comm_exposed},
          {"optimizer", b.optimizer},
          {"ep_comm_exposed", b.ep_comm_exposed},
          {"offload_stall", b.offload_stall},
          {"comm_slowdown", b.comm_slowdown}};
}

static json memory_json(const MemoryBreakdown& m) {
  return {{"weights", m.weights},
          {"gradients", m.gradients},
          {"optimizer", m.optimizer},
          {"activations", m.activations},
          {"buffers", m.buffers}, {"framework", m.framework}};
}

// The bundled reference best the prediction exceeds (null when it does not, or when there is none).
static const PublishedBest* exceeded_best(const Result& r) {
  const Scenario& sc = r.scenario;
  const PublishedBest* b = published_best(sc.framework, sc.cluster.gpu.name, sc.training.precision);
  return b && r.model_tflops_per_gpu > b->model_tflops_per_gpu ? b : nullptr;
}

std::vector<std::string> result_notes(const Result& r) {
  const Scenario& sc = r.scenario;
  std::vector<std::string> out;
  out.push_back("framework " + sc.framework.name + (sc.framework.version.empty() ? "" : " (" + sc.framework.version + ")"));
  for (const std::string& t : research_techniques(sc.plan, sc.delink)) out.push_back(t + ": " + kResearchLabel);
  if (const PublishedBest* b = exceeded_best(r)) {
    char line[512];
    std::snprintf(line, sizeof line,
                  "beyond anything published: %.0f model TFLOP/s per GPU predicted, above the best published for %s "
                  "with %s (%.0f: %s)",
                  r.model_tflops_per_gpu, sc.cluster.gpu.name.c_str(), sc.framework.name.c_str(), b->model_tflops_per_gpu,
                  b->source.c_str());
    out.push_back(line);
  }
  return out;
}

json result_notes_json(const Result& r) {
  const Scenario& sc = r.scenario;
  json j;
  j["framework"] = {{"name", sc.framework.name}, {"version", sc.framework.version}};
  const std::vector<std::string> rt = research_techniques(sc.plan, sc.delink);
  if (!rt.empty()) j["research"] = {{"techniques", rt}, {"label", kResearchLabel}};
  if (const PublishedBest* b = exceeded_best(r))
    j["beyond_published"] = {{"model_tflops_per_gpu", r.model_tflops_per_gpu},
                             {"best_published_model_tflops_per_gpu", b->model_tflops_per_gpu},
                             {"source", b->source},
                             {"note", kBeyondPublishedLabel}};
  return j;
}

json result_to_json(const Result& r) {
  json j;
  j["scenario"] = scenario_to_json(r.scenario);
  j.update(result_notes_json(r));
  j["params_total"] = total_params(r.scenario.model);    // embeddings included, tied counted once
  j["params_active"] = active_params(r.scenario.model);  // per token: top_k routed experts (+ shared); = total if dense
  j["step_time_s"] = r.step_time_s;
  j["breakdown_s"] = breakdown_json(r.breakdown);
  j["breakdown_stage"] = r.ranks[r.breakdown_rank].stage;
  j["memory"] = {{"peak_bytes_per_gpu", r.peak_bytes_per_gpu},
                 {"capacity_bytes", r.capacity_bytes},
                 {"fits", r.fits},
                 {"breakdown_bytes", memory_json(r.memory)}};
  j["memory"]["host_bytes_per_node"] = r.host_bytes_per_node;
  j["memory"]["host_capacity_bytes"] = r.scenario.cluster.host.memory_bytes;
  j["memory"]["host_fits"] = r.host_fits;
  if (!r.offload_note.empty()) j["memory"]["offload_note"] = r.offload_note;
  j["network"] = {{"bytes_per_step_per_gpu", {{"intra_node", r.intra_bytes_per_gpu}, {"inter_node", r.inter_bytes_per_gpu},
                                             {"pcie", r.pcie_bytes_per_gpu}}}};
  j["throughput"] = {{"tokens_per_s", r.tokens_per_s},
                     {"tokens_per_s_per_gpu", r.tokens_per_s_per_gpu()},
                     {"model_tflops_per_gpu", r.model_tflops_per_gpu},
                     {"hardware_tflops_per_gpu", r.hardware_tflops_per_gpu},
                     {"mfu", r.mfu},
                     {"mfu_peak_tflops", r.mfu_peak_flops_per_s / 1e12},
                     {"mfu_peak_precision", precision_name(r.mfu_peak_precision)}};
  if (r.fp8_peak_flops_per_s > 0) {  // fp8 training: MFU against the fp8 peak too
    j["throughput"]["mfu_fp8"] = r.mfu_fp8;
    j["throughput"]["fp8_peak_tflops"] = r.fp8_peak_flops_per_s / 1e12;
  }
  const RunEstimate& e = r.run;
  j["training"] = {{"loss_nats", e.loss_nats},
                   {"critical_batch_tokens", e.critical_batch_tokens},
                   {"batch_tokens", e.batch_tokens},
                   {"tokens", e.tokens},
                   {"tokens_source", e.tokens_from_scenario ? "scenario" : e.from_target_loss ? "target_loss" : "scaling_law"},
                   {"steps", e.steps},
                   {"steps_min", e.steps_min},
                   {"time_s", e.time_s},
                   {"gpu_hours", e.gpu_hours},
                   {"cost_usd", e.cost_usd},
                   {"energy_kwh", e.energy_kwh}};
  json stages = json::array();
  for (const RankResult& rr : r.ranks) {
    if (r.options.full_cluster && rr.global_rank != rank_global(r.scenario.plan, 0, 0, rr.stage)) continue;
    stages.push_back({{"stage", rr.stage},
                      {"breakdown_s", breakdown_json(rr.breakdown)},
                      {"peak_bytes", rr.peak.total()},
                      {"stored_activation_peak_bytes", rr.stored_peak_bytes},
                      {"memory_bytes", memory_json(rr.peak)}});
    // Uneven pipeline stages: each stage's transformer layers (even plans: layers / pp, not repeated).
    if (!r.scenario.plan.stage_layers.empty()) stages.back()["layers"] = r.scenario.plan.stage_layers[rr.stage];
  }
  j["stages"] = stages;
  if (r.delink) {
    const Result& ps = *r.delink->pseudo;
    const RunEstimate& pe = ps.run;
    j["delink"] = {{"pseudo",
                    {{"plan", scenario_to_json(ps.scenario)["plan"]},
                     {"global_batch", ps.scenario.training.global_batch},
                     {"step_time_s", ps.step_time_s},
                     {"breakdown_s", breakdown_json(ps.breakdown)},
                     {"memory", {{"peak_bytes_per_gpu", ps.peak_bytes_per_gpu}, {"fits", ps.fits},
                                 {"host_bytes_per_node", ps.host_bytes_per_node}, {"breakdown_bytes", memory_json(ps.memory)}}},
                     {"tokens", pe.tokens}, {"steps", pe.steps}, {"time_s", pe.time_s}, {"gpu_hours", pe.gpu_hours},
                     {"cost_usd", pe.cost_usd}, {"energy_kwh", pe.energy_kwh}}},
                   {"delink_s", r.delink->delink_s},
                   {"delink_bytes_per_gpu", r.delink->delink_bytes_per_gpu},
                   {"relayout", r.delink->relayout},
                   {"real", {{"tokens", r.run.tokens}, {"time_s", r.run.time_s}, {"gpu_hours", r.run.gpu_hours}, {"cost_usd", r.run.cost_usd}}},
                   {"total", {{"tokens", r.delink->tokens}, {"time_s", r.delink->time_s}, {"gpu_hours", r.delink->gpu_hours},
                              {"cost_usd", r.delink->cost_usd}, {"energy_kwh", r.delink->energy_kwh}}}};
  }
  j["simulation"] = {{"mode", r.options.full_cluster ? "full" : "symmetric"},
                     {"symmetry_fallback", r.fallback_to_full},
                     {"simulated_ranks", (int)r.ranks.size()},
                     {"events", r.events}};
  return j;
}

static std::string fmt_time(double s) {
  char b[64];
  if (s >= 86400 * 2) std::snprintf(b, sizeof b, "%.1f days", s / 86400);
  else if (s >= 3600) std::snprintf(b, sizeof b, "%.1f h", s / 3600);
  else if (s >= 1) std::snprintf(b, sizeof b, "%.3f s", s);
  else std::snprintf(b, sizeof b, "%.3f ms", s * 1e3);
  return b;
}

std::string gib_text(double b) {
  char s[32];
  std::snprintf(s, sizeof s, "%.2f GiB", b / (1024.0 * 1024 * 1024));
  return s;
}
static std::string gib(double b) { return gib_text(b); }

std::string days_text(double seconds) {
  char s[32];
  std::snprintf(s, sizeof s, "%.2f days", seconds / 86400);
  return s;
}

std::string usd_text(double usd) {
  char s[32];
  double a = std::fabs(usd);
  if (a >= 1e9) std::snprintf(s, sizeof s, "$%.2fB", usd / 1e9);
  else if (a >= 1e6) std::snprintf(s, sizeof s, "$%.2fM", usd / 1e6);
  else if (a >= 1e3) std::snprintf(s, sizeof s, "$%.1fk", usd / 1e3);
  else std::snprintf(s, sizeof s, "$%.0f", usd);
  return s;
}

std::string percent_text(double frac) {
  char s[32];
  std::snprintf(s, sizeof s, "%.1f%%", 100 * frac);
  return s;
}

std::string mfu_text(const Result& r) {
  char s[160];
  int n = std::snprintf(s, sizeof s, "MFU %.1f%% of %s peak (%.0f TFLOP/s)", 100 * r.mfu, precision_name(r.mfu_peak_precision),
                        r.mfu_peak_flops_per_s / 1e12);
  if (r.fp8_peak_flops_per_s > 0 && n > 0 && n < (int)sizeof s)
    std::snprintf(s + n, sizeof s - n, ", %.1f%% of fp8 peak (%.0f TFLOP/s)", 100 * r.mfu_fp8, r.fp8_peak_flops_per_s / 1e12);
  return s;
}

// A parameter count in short form: 124.4M, 46.70B.
static std::string count_text(double n) {
  char b[32];
  if (n >= 1e9) std::snprintf(b, sizeof b, "%.2fB", n / 1e9);
  else if (n >= 1e6) std::snprintf(b, sizeof b, "%.1fM", n / 1e6);
  else std::snprintf(b, sizeof b, "%.0f", n);
  return b;
}

void print_summary(std::ostream& os, const Result& r) {
  const Scenario& sc = r.scenario;
  const Plan& p = sc.plan;
  char line[512];
  os << "trainplan simulate: " << sc.name << "\n";
  const double params = total_params(sc.model), active = active_params(sc.model);
  std::string counts = count_text(params) + " params" + (active < params ? ", " + count_text(active) + " active" : "");
  std::snprintf(line, sizeof line, "  model %s (%lld layers, hidden %lld, %lld heads, %s)  cluster %s (%d x %d %s)\n",
                sc.model.name.c_str(), sc.model.layers, sc.model.hidden, sc.model.heads, counts.c_str(),
                sc.cluster.name.c_str(), sc.cluster.nodes, sc.cluster.gpus_per_node, sc.cluster.gpu.name.c_str());
  os << line;
  std::snprintf(line, sizeof line,
                "  plan dp %d x %stp %d x pp %d = %d GPUs, %s schedule (v=%d), microbatch %lld x %lld micro-batches, "
                "SP %s, recompute %s, ZeRO-%d\n",
                p.dp, p.cp > 1 ? ("cp " + std::to_string(p.cp) + " x ").c_str() : "", p.tp, p.pp, p.gpus(),
                schedule_name(p.schedule), p.virtual_stages, p.microbatch,
                p.num_microbatches, p.sequence_parallel ? "on" : "off", recompute_name(p.recompute), p.zero);
  os << line;
  if (p.tp_mode != TpMode::d1 || p.grad_accumulation != GradAccumulation::standard || p.offload.on() || p.ep > 1 ||
      sc.model.moe.experts > 0) {
    std::snprintf(line, sizeof line, "  tensor %s (q=%d), %s accumulation, offload %s, ep %d%s\n", tp_mode_name(p.tp_mode),
                  p.tp_q(), grad_accumulation_name(p.grad_accumulation), offload_kind_name(p.offload.kind), p.ep,
                  sc.model.moe.experts > 0 ? (", MoE " + std::to_string(sc.model.moe.experts) + " experts top-" +
                                              std::to_string(sc.model.moe.top_k)).c_str() : "");
    os << line;
  }
  for (const std::string& n : result_notes(r)) os << "  " << n << "\n";
  os << "\n";
  os << "Step time  " << fmt_time(r.step_time_s) << "   (breakdown of pipeline stage "
     << r.ranks[r.breakdown_rank].stage << ")\n";
  const Breakdown& b = r.breakdown;
  auto row = [&](const char* name, double v) {
    std::snprintf(line, sizeof line, "  %-18s %12.4f s  %5.1f%%\n", name, v, 100.0 * v / r.step_time_s);
    os << line;
  };
  row("compute", b.compute);
  row("recompute", b.recompute);
  row("bubble", b.bubble);
  row("tp comm exposed", b.tp_comm_exposed);
  row("pp comm exposed", b.pp_comm_exposed);
  row("dp comm exposed", b.dp_comm_exposed);
  row("optimizer", b.optimizer);
  if (b.ep_comm_exposed > 0) row("ep comm exposed", b.ep_comm_exposed);
  if (b.offload_stall > 0 || p.offload.on()) row("offload stall", b.offload_stall);
  if (b.comm_slowdown > 0) row("compute slowed by comm", b.comm_slowdown);
  os << "\nMemory per GPU (peak " << gib(r.peak_bytes_per_gpu) << " of " << gib(r.capacity_bytes) << ": "
     << (r.fits ? "fits"
         : r.peak_bytes_per_gpu > r.capacity_bytes ? "DOES NOT FIT — memory wall"
         : !r.host_fits ? "fits the GPU, but host memory does not"
                        : "chunks do not fit") << ")\n";
  const MemoryBreakdown& m = r.memory;
  for (auto [name, v] : {std::pair{"weights", m.weights}, {"gradients", m.gradients}, {"optimizer", m.optimizer},
                         {"activations", m.activations}, {"buffers", m.buffers}, {"framework", m.framework}}) {
    std::snprintf(line, sizeof line, "  %-18s %12s\n", name, gib(v).c_str());
    os << line;
  }
  if (p.offload.on()) {
    std::snprintf(line, sizeof line, "  host memory per node %s of %s%s\n", gib(r.host_bytes_per_node).c_str(),
                  gib(sc.cluster.host.memory_bytes).c_str(), r.host_fits ? "" : " — DOES NOT FIT");
    os << line;
  }
  if (!r.offload_note.empty()) os << "  chunked offload: " << r.offload_note << "\n";
  std::snprintf(line, sizeof line, "\nNetwork per GPU per step  intra-node %s, inter-node %s%s%s\n",
                gib(r.intra_bytes_per_gpu).c_str(), gib(r.inter_bytes_per_gpu).c_str(),
                r.pcie_bytes_per_gpu > 0 ? ", PCIe " : "", r.pcie_bytes_per_gpu > 0 ? gib(r.pcie_bytes_per_gpu).c_str() : "");
  os << line;
  std::snprintf(line, sizeof line,
                "Throughput  %.0f tokens/s (%.0f per GPU), %.1f model TFLOP/s per GPU (%.1f with recompute), %s\n",
                r.tokens_per_s, r.tokens_per_s_per_gpu(), r.model_tflops_per_gpu, r.hardware_tflops_per_gpu,
                mfu_text(r).c_str());
  os << line;
  const RunEstimate& e = r.run;
  std::snprintf(line, sizeof line,
                "\nWhole run  %.3g tokens (%s) in %.0f steps; critical batch %.3g tokens (batch %.3g tokens, L(N) %.2f nats)\n",
                e.tokens, e.tokens_from_scenario ? "from the scenario" : "compute-efficient, Kaplan",
                e.steps, e.critical_batch_tokens, e.batch_tokens, e.loss_nats);
  os << line;
  std::snprintf(line, sizeof line, "  time to train %s, %.3g GPU-hours, %s, %.3g kWh\n", days_text(e.time_s).c_str(),
                e.gpu_hours, usd_text(e.cost_usd).c_str(), e.energy_kwh);
  os << line;
  if (r.delink) {
    const Result& ps = *r.delink->pseudo;
    std::snprintf(line, sizeof line,
                  "\nPseudo-to-Real  pseudo phase (%d unique layers, dp %d x tp %d x pp %d, batch %lld): step %s, peak %s (%s), "
                  "%.3g tokens in %s\n",
                  sc.delink.unique_layers, ps.scenario.plan.dp, ps.scenario.plan.tp, ps.scenario.plan.pp,
                  ps.scenario.training.global_batch, fmt_time(ps.step_time_s).c_str(), gib(ps.peak_bytes_per_gpu).c_str(),
                  ps.fits ? "fits" : "does not fit", ps.run.tokens, fmt_time(ps.run.time_s).c_str());
    os << line;
    std::snprintf(line, sizeof line, "  delink %s%s; real phase %.3g tokens in %s; total %s, %.3g GPU-hours, %s\n",
                  fmt_time(r.delink->delink_s).c_str(), r.delink->relayout ? " (re-layout)" : "", r.run.tokens,
                  days_text(r.run.time_s).c_str(), days_text(r.delink->time_s).c_str(), r.delink->gpu_hours,
                  usd_text(r.delink->cost_usd).c_str());
    os << line;
  }
  std::snprintf(line, sizeof line, "\n(simulated %d ranks%s, %lld events, %.1f ms)\n", (int)r.ranks.size(),
                r.fallback_to_full ? " — every rank: this layout is not symmetric" : "", r.events, r.wall_s * 1e3);
  os << line;
}

void write_file_atomic(const std::string& path, const std::string& text) { write_outputs_atomic({OutputFile(path, text)}); }

}  // namespace tp
