// output: the renderings of a PlanOutcome — JSON (`plan --json`, keys in docs/reports.md), CSV and the
// terminal table. See search.hpp.
#include <cstdio>
#include <filesystem>
#include <iomanip>
#include <ostream>
#include <sstream>

#include "explain.hpp"
#include "sim/output.hpp"

namespace tp {

namespace {

json plan_json(const Plan& p, long long B) {
  Scenario s;
  s.plan = p;
  s.training.global_batch = B;
  json j = scenario_to_json(s)["plan"];
  j.erase("num_microbatches");  // derived: the plan is a valid scenario "plan" as it stands
  return j;
}

// The labels a candidate carries in every output: its framework when it is not the scenario's (a search over
// several frameworks), "[research]" when it uses a research technique, "[beyond published]" when its simulated
// efficiency is above the best published for the GPU and framework.
bool beyond_published(const Candidate& c) { return c.sim && result_notes_json(*c.sim).contains("beyond_published"); }
std::string candidate_summary(const Candidate& c, const Scenario& sc) {
  return plan_summary(c.plan, c.global_batch, c.point.lay.prec) +
         plan_labels(c.framework, sc.framework.name, !research_techniques(c.plan, Delink{}).empty(), beyond_published(c));
}
json candidate_labels(const Candidate& c) {
  json j = {{"framework", c.framework.empty() ? json(nullptr) : json(c.framework)}};
  const std::vector<std::string> rt = research_techniques(c.plan, Delink{});
  if (!rt.empty()) j["research_techniques"] = rt;
  if (beyond_published(c)) j["beyond_published"] = true;
  return j;
}

json analytic_json(const Estimate& e, double ttt, double cost) {
  return {{"step_time_s", e.step_s}, {"peak_bytes_per_gpu", e.peak_bytes}, {"time_to_train_s", ttt}, {"cost_usd", cost}};
}

json simulated_json(const Candidate& c) {
  const Result& r = *c.sim;
  json j = result_to_json(r);
  return {{"step_time_s", r.step_time_s}, {"peak_bytes_per_gpu", r.peak_bytes_per_gpu}, {"fits", r.fits},
          {"host_fits", r.host_fits}, {"time_to_train_s", r.run.time_s}, {"cost_usd", r.run.cost_usd},
          {"gpu_hours", r.run.gpu_hours}, {"steps", r.run.steps}, {"mfu", r.mfu}, {"tokens_per_s", r.tokens_per_s},
          {"tokens_per_s_per_gpu", r.tokens_per_s_per_gpu()}, {"model_tflops_per_gpu", r.model_tflops_per_gpu},
          {"mfu_peak_tflops", j["throughput"]["mfu_peak_tflops"]},
          {"mfu_peak_precision", j["throughput"]["mfu_peak_precision"]},
          {"mfu_fp8", j["throughput"].value("mfu_fp8", json(nullptr))},
          {"breakdown_s", j["breakdown_s"]}};
}

// The MFU cell of the text tables, naming its peak: "45.1% bf16"; fp8 training "80.1% bf16, 40.0% fp8".
std::string mfu_cell(double mfu, const std::string& peak_precision, double mfu_fp8) {
  std::string s = percent_text(mfu) + " " + peak_precision;
  if (mfu_fp8 > 0) s += ", " + percent_text(mfu_fp8) + " fp8";
  return s;
}

json gpu_point_json(const GpuPoint& g, const Scenario& sc) {
  const Candidate& c = g.best;
  const Estimate& e = c.point.est;
  json j = {{"gpus", g.gpus}, {"global_batch", c.global_batch}, {"simulated", g.simulated},
            {"time_to_train_s", c.time_to_train_s}, {"cost_usd", c.cost_usd},
            {"summary", candidate_summary(c, sc)}, {"precision", precision_name(c.point.lay.prec)}, {"plan", plan_json(c.plan, c.global_batch)}};
  j.update(candidate_labels(c));
  if (g.simulated) {
    j.update({{"step_time_s", c.sim->step_time_s}, {"mfu", c.sim->mfu}, {"peak_bytes_per_gpu", c.sim->peak_bytes_per_gpu}});
  } else {  // analytic numbers (the step is beyond the confirmation budget)
    j.update({{"step_time_s", e.step_s}, {"mfu", nullptr}, {"peak_bytes_per_gpu", e.peak_bytes}});
  }
  return j;
}

std::string pareto_title(long long min_gpus) {
  std::string t = "Pareto front (GPUs, time to train, cost)";
  if (min_gpus > 0)
    t += " from " + std::to_string(min_gpus) +
         " GPUs, the fewest where a plan fits without offload (search.min_gpus or fix.offload to see fewer)";
  return t;
}

std::string fixed_text(double v, int digits) {
  char b[64];
  std::snprintf(b, sizeof b, "%.*f", digits, v);
  return b;
}

}  // namespace

std::vector<std::string> plan_outcome_notes(const PlanOutcome& o) {
  std::vector<std::string> out;
  const Framework& f = o.scenario.framework;
  const std::vector<std::string>& searched = o.scenario.search->fix.framework;
  if (searched.empty()) {
    out.push_back("framework " + f.name + (f.version.empty() ? "" : " (" + f.version + ")") +
                  ": the plans it can run" + (f.can.research ? ", research techniques included" : ""));
  } else {
    std::string names;
    for (const std::string& n : searched) names += (names.empty() ? "" : ", ") + n;
    out.push_back("frameworks searched: " + names + "; a plan of another framework than " + f.name + " names it");
    if (!o.frameworks_left_out.empty()) {
      std::string left;
      for (const std::string& n : o.frameworks_left_out) left += (left.empty() ? "" : ", ") + n;
      out.push_back("left out of \"any\": " + left + " (cannot run the scenario's fixed choices: its precision, fp8 "
                    "recipe or a search.fix value)");
    }
  }
  bool research = false, beyond = false;
  auto see = [&](const Candidate& c) {
    research |= !research_techniques(c.plan, Delink{}).empty();
    beyond |= beyond_published(c);
  };
  for (const Candidate& c : o.top) see(c);
  for (const GpuPoint& g : o.pareto) see(g.best);
  for (const Explanation& e : o.why) see(e.alt);
  if (research) out.push_back(std::string("[research] ") + kResearchLabel);
  if (beyond) out.push_back(std::string("[beyond published] ") + kBeyondPublishedLabel);
  return out;
}

PlanAnswers plan_answers(const json& o) {
  PlanAnswers a;
  const double GiB = 1024.0 * 1024 * 1024;
  auto num = [](const json& j, const char* k) { return j.contains(k) && j[k].is_number() ? j[k].get<double>() : 0.0; };
  auto str = [](const json& j, const char* k) { return j.contains(k) && j[k].is_string() ? j[k].get<std::string>() : ""; };
  double capacity = 0;
  if (o.contains("best") && o["best"].is_object())
    capacity = o["best"].value("result", json::object()).value("memory", json::object()).value("capacity_bytes", 0.0);
  for (const json& n : o.value("notes", json::array()))
    if (n.is_string()) a.notes.push_back(n.get<std::string>());
  a.top_head = {"rank", "GPUs", "step (s)", "to train", "cost", "MFU (of peak)", "TFLOP/s/GPU", "tokens/s/GPU",
                "mem (GiB)", "analytic (s)", "plan"};
  for (const json& c : o.value("top", json::array())) {
    const json s = c.value("simulated", json::object()), an = c.value("analytic", json::object());
    a.top.push_back({std::to_string(c.value("rank", 0LL)), std::to_string(c.value("gpus", 0LL)),
                     fixed_text(num(s, "step_time_s"), 3), days_text(num(s, "time_to_train_s")),
                     usd_text(num(s, "cost_usd")), mfu_cell(num(s, "mfu"), str(s, "mfu_peak_precision"), num(s, "mfu_fp8")),
                     fixed_text(num(s, "model_tflops_per_gpu"), 1), fixed_text(num(s, "tokens_per_s_per_gpu"), 0),
                     fixed_text(num(s, "peak_bytes_per_gpu") / GiB, 1) + " / " + fixed_text(capacity / GiB, 1),
                     fixed_text(num(an, "step_time_s"), 3), str(c, "summary")});
  }
  a.pareto_title = pareto_title(o.value("min_gpus", 0LL));
  a.pareto_head = {"GPUs", "to train", "cost", "plan"};
  for (const json& g : o.value("pareto", json::array()))
    a.pareto.push_back({std::to_string(g.value("gpus", 0LL)), days_text(num(g, "time_to_train_s")),
                        usd_text(num(g, "cost_usd")),
                        str(g, "summary") + (g.value("simulated", true) ? "" : "  (analytic)")});
  for (const json& e : o.value("why", json::array()))
    a.why.push_back({"other " + str(e, "dimension") + ": " + str(e, "summary"), str(e, "reason") + ": " + str(e, "detail")});
  return a;
}

json plan_outcome_to_json(const PlanOutcome& o) {
  json j;
  j["scenario"] = scenario_to_json(o.scenario);
  const Search& se = *o.scenario.search;
  j["objective"] = objective_name(se.objective);
  j["framework"] = o.scenario.framework.name;  // the scenario's; each plan names its own (search.fix.framework)
  j["notes"] = plan_outcome_notes(o);
  if (!o.top.empty()) {
    const Candidate& b = o.top[0];
    j["best"] = {{"gpus", b.plan.gpus()}, {"global_batch", b.global_batch}, {"summary", candidate_summary(b, o.scenario)}, {"precision", precision_name(b.point.lay.prec)},
                 {"plan", plan_json(b.plan, b.global_batch)}, {"result", result_to_json(*b.sim)}};
    j["best"].update(candidate_labels(b));
  } else {
    j["best"] = nullptr;
  }
  j["top"] = json::array();
  for (size_t i = 0; i < o.top.size(); ++i) {
    const Candidate& c = o.top[i];
    j["top"].push_back({{"rank", i + 1}, {"gpus", c.plan.gpus()}, {"global_batch", c.global_batch},
                        {"summary", candidate_summary(c, o.scenario)}, {"precision", precision_name(c.point.lay.prec)}, {"plan", plan_json(c.plan, c.global_batch)},
                        {"objective", c.objective},
                        {"analytic", analytic_json(c.point.est, c.point.time_to_train_s, c.point.cost_usd)},
                        {"simulated", simulated_json(c)}});
    j["top"].back().update(candidate_labels(c));
  }
  j["by_gpus"] = json::array();
  for (const GpuPoint& g : o.by_gpus) j["by_gpus"].push_back(gpu_point_json(g, o.scenario));
  j["pareto"] = json::array();
  for (const GpuPoint& g : o.pareto) j["pareto"].push_back(gpu_point_json(g, o.scenario));
  j["why"] = json::array();
  for (const Explanation& e : o.why) {
    const Candidate& c = e.alt;
    j["why"].push_back({{"dimension", e.dimension}, {"gpus", c.plan.gpus()}, {"global_batch", c.global_batch},
                        {"summary", candidate_summary(c, o.scenario)}, {"precision", precision_name(c.point.lay.prec)}, {"plan", plan_json(c.plan, c.global_batch)},
                        {"reason", e.reason}, {"detail", e.detail},
                        {"time_to_train_s", c.sim ? json(c.sim->run.time_s) : json(nullptr)},
                        {"fits", c.sim ? json(c.sim->fits && c.sim->host_fits) : json(nullptr)}});
  }
  if (!o.note.empty()) j["note"] = o.note;
  if (o.min_gpus > 0) j["min_gpus"] = o.min_gpus;  // by_gpus / pareto start here (fewest GPUs fitting without offload)
  if (!o.shortest.empty()) {
    json v = json::array();
    for (const ShortestVariant& sv : o.shortest) {
      const PlanOutcome& x = *sv.outcome;
      json e = {{"name", sv.name}, {"label", sv.label}};
      if (!x.top.empty()) {
        const Candidate& c = x.top[0];
        e.update({{"gpus", c.plan.gpus()}, {"global_batch", c.global_batch}, {"step_time_s", c.sim->step_time_s},
                  {"time_to_train_s", c.time_to_train_s}, {"cost_usd", c.cost_usd}, {"mfu", c.sim->mfu},
                  {"peak_bytes_per_gpu", c.sim->peak_bytes_per_gpu}, {"memory_fraction", c.sim->peak_bytes_per_gpu / c.sim->capacity_bytes},
                  {"summary", candidate_summary(c, x.scenario)}, {"precision", precision_name(c.point.lay.prec)}, {"plan", plan_json(c.plan, c.global_batch)},
                  {"breakdown_s", result_to_json(*c.sim)["breakdown_s"]}});
      } else {
        e["note"] = x.note;
      }
      json bg = json::array();
      for (const GpuPoint& g : x.by_gpus) bg.push_back(gpu_point_json(g, o.scenario));
      e["by_gpus"] = bg;
      e["configurations_evaluated"] = x.stats.configurations_evaluated;
      v.push_back(e);
    }
    j["shortest_time"] = {{"variants", v}};
  }
  const SearchStats& s = o.stats;
  j["search"] = {{"configurations_evaluated", s.configurations_evaluated}, {"pruned_invalid", s.pruned_invalid},
                 {"pruned_memory", s.pruned_memory}, {"pruned_dominated", s.pruned_dominated}, {"simulated", s.simulated}, {"seconds", s.seconds},
                 {"analytic_seconds", s.analytic_seconds}, {"simulate_seconds", s.simulate_seconds},
                 {"configurations_per_second", s.analytic_seconds > 0 ? s.configurations_evaluated / s.analytic_seconds : 0.0},
                 {"threads", s.threads}};
  if (s.confirm_skipped > 0) {  // only when the budget bit (outputs of other searches unchanged)
    j["search"]["confirm_skipped"] = s.confirm_skipped;
    j["search"]["confirm_estimated_s"] = s.confirm_estimated_s;
    j["search"]["budget_note"] = o.budget_note;
  }
  return j;
}

std::string plan_outcome_to_csv(const PlanOutcome& o) {
  std::ostringstream c;
  c << "rank,gpus,dp,tp,tp_mode,pp,ep,schedule,virtual_stages,grad_accumulation,microbatch,num_microbatches,"
       "global_batch,zero,offload,recompute,sequence_parallel,step_time_s,peak_bytes_per_gpu,fits,time_to_train_s,"
       "cost_usd,mfu,analytic_step_time_s,mfu_peak_tflops,mfu_peak_precision,mfu_fp8,model_tflops_per_gpu,"
       "tokens_per_s_per_gpu,cp,precision,attention,stage_layers,tp_grid,framework,research_techniques,"
       "beyond_published\n";
  c << std::setprecision(9);
  for (size_t i = 0; i < o.top.size(); ++i) {
    const Candidate& k = o.top[i];
    const Plan& p = k.plan;
    const Result& r = *k.sim;
    c << i + 1 << "," << p.gpus() << "," << p.dp << "," << p.tp << "," << tp_mode_name(p.tp_mode) << "," << p.pp << ","
      << p.ep << "," << schedule_name(p.schedule) << "," << p.virtual_stages << ","
      << grad_accumulation_name(p.grad_accumulation) << "," << p.microbatch << "," << p.num_microbatches << ","
      << k.global_batch << "," << p.zero << "," << offload_kind_name(p.offload.kind) << "," << recompute_name(p.recompute)
      << "," << (p.sequence_parallel ? "true" : "false") << "," << r.step_time_s << "," << r.peak_bytes_per_gpu << ","
      << (r.fits ? "true" : "false") << "," << r.run.time_s << "," << r.run.cost_usd << "," << r.mfu << ","
      << k.point.est.step_s << "," << r.mfu_peak_flops_per_s / 1e12 << "," << precision_name(r.mfu_peak_precision) << ","
      << r.mfu_fp8 << "," << r.model_tflops_per_gpu << "," << r.tokens_per_s_per_gpu() << ",";
    // Every other plan field, so that a row is a plan (stage_layers "a/b/c" per stage, empty when even).
    std::string stages, research;
    for (int n : p.stage_layers) {
      if (!stages.empty()) stages += '/';
      stages += std::to_string(n);
    }
    for (const std::string& t : research_techniques(p, Delink{})) {
      if (!research.empty()) research += "; ";
      research += t;
    }
    c << p.cp << "," << precision_name(k.point.lay.prec) << "," << attention_name(p.attention) << "," << stages << ","
      << (p.tp_mode == TpMode::d2 ? (p.tp_grid_node_blocks ? "node_blocks" : "rows") : "") << ","
      << (k.framework.empty() ? o.scenario.framework.name : k.framework) << ",\"" << research << "\","
      << (beyond_published(k) ? "true" : "false") << "\n";
  }
  return c.str();
}


void print_plan_outcome(std::ostream& os, const PlanOutcome& o) {
  const Scenario& sc = o.scenario;
  const SearchStats& s = o.stats;
  char line[512];
  const Search& se = *sc.search;
  os << "plan search: " << sc.name << " (" << (sc.model.name.empty() ? sc.name : sc.model.name) << " on "
     << sc.cluster.name << ", ";
  if (!se.gpu_counts.empty()) {
    os << (se.gpu_counts.size() == 1 ? "GPU count " : "GPU counts ");
    for (size_t i = 0; i < se.gpu_counts.size(); ++i) os << (i ? ", " : "") << se.gpu_counts[i];
  } else {
    os << se.min_gpus << " to " << (se.max_gpus > 0 ? se.max_gpus : sc.cluster.total_gpus()) << " GPUs";
  }
  os << "), objective " << objective_name(se.objective) << "\n";
  std::snprintf(line, sizeof line,
                "  %lld configurations estimated (%lld over memory; %lld dominated and %lld invalid skipped) in %.2f s = %.0f per second on %d "
                "threads; %lld simulated in %.2f s\n",
                s.configurations_evaluated, s.pruned_memory, s.pruned_dominated, s.pruned_invalid, s.analytic_seconds,
                s.analytic_seconds > 0 ? s.configurations_evaluated / s.analytic_seconds : 0.0, s.threads, s.simulated,
                s.simulate_seconds);
  os << line;
  if (!o.budget_note.empty()) os << "  note: " << o.budget_note << "\n";
  for (const std::string& n : plan_outcome_notes(o)) os << "  " << n << "\n";
  if (o.top.empty()) { os << "\nno plan: " << o.note << "\n"; return; }
  os << "\ntop plans (simulated):\n";
  std::snprintf(line, sizeof line, "  %-4s %6s %10s %12s %9s %-18s %7s %8s %13s %12s  %s\n", "rank", "GPUs", "step (s)",
                "to train", "cost", "MFU (of peak)", "TFLOP/s", "tokens/s", "mem (GiB)", "analytic (s)", "plan");
  os << line;
  std::snprintf(line, sizeof line, "  %-4s %6s %10s %12s %9s %-18s %7s %8s %13s %12s\n", "", "", "", "", "", "", "per GPU",
                "per GPU", "", "");
  os << line;
  for (size_t i = 0; i < o.top.size(); ++i) {
    const Candidate& c = o.top[i];
    const Result& r = *c.sim;
    const double GiB = 1024.0 * 1024 * 1024;
    std::snprintf(line, sizeof line, "  %-4zu %6d %10.3f %12s %9s %-18s %7.1f %8.0f %6.1f/%-6.1f %12.3f  %s\n", i + 1,
                  c.plan.gpus(), r.step_time_s, days_text(r.run.time_s).c_str(), usd_text(r.run.cost_usd).c_str(),
                  mfu_cell(r.mfu, precision_name(r.mfu_peak_precision), r.mfu_fp8).c_str(), r.model_tflops_per_gpu,
                  r.tokens_per_s_per_gpu(), r.peak_bytes_per_gpu / GiB, r.capacity_bytes / GiB, c.point.est.step_s,
                  candidate_summary(c, sc).c_str());
    os << line;
  }
  os << "\n" << pareto_title(o.min_gpus) << ":\n";
  for (const GpuPoint& g : o.pareto) {
    std::snprintf(line, sizeof line, "  %6d GPUs  %12s  %9s  %s%s\n", g.gpus, days_text(g.best.time_to_train_s).c_str(),
                  usd_text(g.best.cost_usd).c_str(), candidate_summary(g.best, sc).c_str(), g.simulated ? "" : "  (analytic)");
    os << line;
  }
  if (!o.why.empty()) {
    os << "\nwhy the nearest alternatives lose:\n";
    for (const Explanation& e : o.why)
      os << "  - other " << e.dimension << ": " << candidate_summary(e.alt, sc) << "\n      " << e.reason
         << ": " << e.detail << "\n";
  }
  if (!o.shortest.empty()) {
    os << "\nshortest time to train:\n";
    for (const ShortestVariant& v : o.shortest) {
      const PlanOutcome& x = *v.outcome;
      if (x.top.empty()) { os << "  " << v.label << ": no plan (" << x.note << ")\n"; continue; }
      const Candidate& c = x.top[0];
      std::snprintf(line, sizeof line, "  %-12s on %5d GPUs  %s\n      %s\n", days_text(c.time_to_train_s).c_str(), c.plan.gpus(),
                    v.label.c_str(), candidate_summary(c, x.scenario).c_str());
      os << line;
    }
  }
}

json emitted_scenario(const json& raw, const std::string& file, const Candidate& c) {
  json j = raw;
  j.erase("search");
  j["plan"] = plan_json(c.plan, c.global_batch);
  j["training"]["global_batch"] = c.global_batch;
  j["training"]["precision"] = precision_name(c.point.lay.prec);
  // A plan of another framework than the scenario's (search.fix.framework) takes its framework along.
  const std::string given = j["training"].contains("framework") && j["training"]["framework"].is_string()
                                ? j["training"]["framework"].get<std::string>() : std::string(kDefaultFramework);
  if (!c.framework.empty() && c.framework != "inline" && c.framework != given) j["training"]["framework"] = c.framework;
  if (j.contains("model") && j["model"].is_object() && j["model"].contains("hf_config") && j["model"]["hf_config"].is_string()) {
    std::filesystem::path p = j["model"]["hf_config"].get<std::string>();
    if (p.is_relative()) j["model"]["hf_config"] = std::filesystem::absolute(std::filesystem::path(file).parent_path() / p).string();
  }
  return j;
}

json planner_choice(const json& result, const std::string& file, int k) {
  if (!result.is_object() || !result.contains("top") || !result["top"].is_array())
    throw InputError({file + ": $.top: missing; expected the --json output of `trainplan plan`"});
  const json& top = result["top"];
  if (k < 1 || k > (int)top.size())
    throw InputError({file + "#" + std::to_string(k) + ": the result has " + std::to_string(top.size()) +
                      " top plans; expected #1 to #" + std::to_string(top.size())});
  const json& t = top[k - 1];
  if (!t.contains("plan") || !t.contains("global_batch"))
    throw InputError({file + ": $.top[" + std::to_string(k - 1) + "]: expected plan and global_batch"});
  json choice = {{"plan", t["plan"]}, {"global_batch", t["global_batch"]}, {"precision", t.value("precision", std::string())}};
  if (t.contains("framework") && t["framework"].is_string() && t["framework"] != "inline") choice["framework"] = t["framework"];
  return choice;
}

}  // namespace tp
