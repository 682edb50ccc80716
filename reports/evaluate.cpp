// evaluate: see evaluate.hpp. Plan runs go through planner/search.hpp; everything downstream reads only the
// JSON (plus the kept Result for timelines), so figures and tables are testable from fixtures.
#include "evaluate.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "planner/search.hpp"
#include "sim/output.hpp"

namespace tp::report {

namespace {

std::string dump_brief(const json& v) { return json_brief(v); }

// The scenario of a run point, loaded and validated ("where" names the spec, the run and the sweep value).
Scenario load_point(const Spec& spec, const RunSpec& r, size_t point) {
  json j = point_scenario_json(spec, r, point);
  // A spec's run: "spec.json: $.runs[2] (a.json, /training/global_batch = 64)"; an ad-hoc run: "a.json".
  std::string where = spec.file.empty() ? r.scenario_file : spec.file + ": " + r.path + " (" + r.scenario;
  if (r.sweep) where += ", " + r.sweep->pointer + " = " + dump_brief(r.sweep->values[point]);
  if (!spec.file.empty()) where += ")";
  std::filesystem::path dir = std::filesystem::path(r.scenario_file).parent_path();
  Scenario sc = scenario_from_json(j, dir.empty() ? std::string(".") : dir.string(), where,
                                   r.kind == RunKind::plan);
  if (r.kind == RunKind::plan && !sc.search)
    throw InputError({where + ": $.search: missing; a run of kind \"plan\" needs a scenario with a search block"});
  return sc;
}

[[noreturn]] void fail(const Spec& spec, const std::string& path, const std::string& what) {
  throw InputError({spec.file + ": " + path + ": " + what});
}

const json* at_pointer(const json& j, const std::string& ptr) {
  try {
    json::json_pointer p(ptr);
    if (!j.contains(p)) return nullptr;
    return &j.at(p);
  } catch (const json::exception&) {
    return nullptr;
  }
}

bool nearly_equal(double a, double b) { return std::fabs(a - b) <= 1e-9 * std::max({1.0, std::fabs(a), std::fabs(b)}); }

}  // namespace

std::vector<RunOut> evaluate_runs(const Spec& spec) {
  std::vector<RunOut> out;
  for (const RunSpec& r : spec.runs) {
    RunOut ro;
    ro.spec = &r;
    for (size_t i = 0; i < r.points(); ++i) {
      Point pt;
      if (r.sweep) {
        pt.x = r.sweep->x[i];
        pt.value = r.sweep->values[i];
      }
      Scenario sc = load_point(spec, r, i);
      if (i == 0) ro.name = sc.name;
      if (r.kind == RunKind::simulate) {
        SimOptions opt;
        opt.keep_memory_timeline = false;
        auto res = std::make_shared<Result>(simulate(sc, opt));
        pt.result = result_to_json(*res);
        if (!r.sweep) pt.sim = res;
      } else {
        PlanOutcome o = plan_search(sc);
        pt.result = plan_outcome_to_json(o);
        if (!r.sweep && !o.top.empty()) pt.sim = o.top.front().sim;
      }
      ro.points.push_back(std::move(pt));
    }
    out.push_back(std::move(ro));
  }
  // Runs of one scenario (told apart by overrides or sweeps) add their id to the shared name.
  std::vector<std::string> names;
  for (const RunOut& r : out) names.push_back(r.name);
  for (RunOut& r : out)
    if (!r.name.empty() && std::count(names.begin(), names.end(), r.name) > 1) r.name += " (" + r.spec->id + ")";
  return out;
}

const RunOut* find_run(const std::vector<RunOut>& runs, const std::string& id) {
  for (const RunOut& r : runs)
    if (r.spec->id == id) return &r;
  return nullptr;
}

json evaluate_quantity(const Spec& spec, const Quantity& q, const std::vector<RunOut>& runs) {
  switch (q.kind) {
    case Quantity::value: return q.number;
    case Quantity::from_run: {
      const RunOut* r = find_run(runs, q.run);
      if (!r) fail(spec, q.path + ".run", "no run \"" + q.run + "\"");
      size_t k = q.at >= 0 ? (size_t)q.at : 0;
      if (k >= r->points.size()) fail(spec, q.path + ".at", "out of range");
      const json* v = at_pointer(r->points[k].result, q.metric);
      if (!v) fail(spec, q.path + ".metric", "run \"" + q.run + "\"'s result has no " + q.metric);
      if (!v->is_number() && !v->is_boolean())
        fail(spec, q.path + ".metric", q.metric + " in run \"" + q.run + "\"'s result is " + dump_brief(*v) +
                                           "; expected a number or a boolean");
      return *v;
    }
    case Quantity::max_fit: {
      const RunOut* r = find_run(runs, q.run);
      if (!r) fail(spec, q.path + ".max_fit", "no run \"" + q.run + "\"");
      json best = nullptr;
      for (const Point& p : r->points) {
        const json& m = p.result.at("memory");
        bool fits = m.value("fits", false) && m.value("host_fits", true);
        if (fits && p.x.is_number() && (best.is_null() || p.x.get<double>() > best.get<double>())) best = p.x;
      }
      return best;
    }
    case Quantity::ratio: {
      json a = evaluate_quantity(spec, q.parts.at(0), runs), b = evaluate_quantity(spec, q.parts.at(1), runs);
      if (a.is_null() || b.is_null()) return nullptr;
      if (!a.is_number() || !b.is_number()) fail(spec, q.path + ".ratio", "both quantities must be numbers");
      if (b.get<double>() == 0) fail(spec, q.path + ".ratio[1]", "the denominator is zero");
      return a.get<double>() / b.get<double>();
    }
  }
  return nullptr;
}

CheckOut evaluate_check(const Spec& spec, const Check& c, const std::vector<RunOut>& runs) {
  CheckOut o;
  o.ours = evaluate_quantity(spec, c.ours, runs);
  if (o.ours.is_null()) return o;
  const std::string bounds = c.path + ".reproduced_if";
  if (!c.equals.is_null()) {
    if (c.equals.is_boolean() != o.ours.is_boolean())
      fail(spec, bounds + ".equals", std::string("ours is ") + (o.ours.is_boolean() ? "a boolean" : "a number") +
                                         ", equals is " + (c.equals.is_boolean() ? "a boolean" : "a number"));
    o.reproduced = o.ours.is_boolean() ? o.ours.get<bool>() == c.equals.get<bool>()
                                       : nearly_equal(o.ours.get<double>(), c.equals.get<double>());
    return o;
  }
  if (!o.ours.is_number()) fail(spec, bounds, "min / max need a number, but ours is a boolean (use equals)");
  double v = o.ours.get<double>();
  o.reproduced = (!c.min || v >= *c.min) && (!c.max || v <= *c.max);
  return o;
}

const json* sim_result(const json& result, RunKind kind) {
  if (kind == RunKind::simulate) return &result;
  const json* r = at_pointer(result, "/best/result");
  return r && r->is_object() ? r : nullptr;
}

std::string plan_summary(const json& p) {
  if (!p.is_object()) return "";
  auto I = [&](const char* k, long long d) { return p.contains(k) && p[k].is_number() ? p[k].get<long long>() : d; };
  auto S = [&](const char* k, const char* d) { return p.contains(k) && p[k].is_string() ? p[k].get<std::string>() : d; };
  std::string s = "dp " + std::to_string(I("dp", 1)) + " × tp " + std::to_string(I("tp", 1)) + " × pp " +
                  std::to_string(I("pp", 1));
  if (S("tp_mode", "1d") == "2d") s += " (2D)";
  if (I("ep", 1) > 1) s += ", ep " + std::to_string(I("ep", 1));
  s += ", " + S("schedule", "1f1b");
  if (I("virtual_stages", 1) > 1) s += " v" + std::to_string(I("virtual_stages", 1));
  s += ", mb " + std::to_string(I("microbatch", 1));
  if (S("grad_accumulation", "standard") == "layered") s += ", layered";
  if (p.value("sequence_parallel", false)) s += ", SP";
  if (S("recompute", "none") != "none") s += ", recompute " + S("recompute", "none");
  if (I("zero", 0) > 0) s += ", ZeRO-" + std::to_string(I("zero", 0));
  if (p.contains("offload") && p["offload"].is_object()) s += ", offload " + p["offload"].value("kind", std::string("?"));
  if (p.contains("delink")) s += ", delink";
  return s;
}

json key_metrics(const json& result, RunKind kind) {
  const json* r = sim_result(result, kind);
  if (!r) return json::object();
  const json& sim = *r;
  json plan = sim.contains("scenario") ? sim["scenario"].value("plan", json::object()) : json::object();
  if (kind == RunKind::plan && result["best"].contains("plan")) plan = result["best"]["plan"];
  long long gpus = plan.value("dp", 1LL) * plan.value("tp", 1LL) * plan.value("pp", 1LL);
  if (kind == RunKind::plan && result["best"].contains("gpus")) gpus = result["best"]["gpus"].get<long long>();
  json m;
  m["gpus"] = gpus;
  m["plan"] = plan_summary(plan);
  // The labels every output carries (sim/output.hpp result_notes): the framework when it is not the default, a
  // research technique, a prediction beyond the best published.
  // The training precision beside the plan (the report's plan column): the planner's choice or the scenario's.
  std::string prec = sim.contains("scenario") ? sim["scenario"]["training"].value("precision", std::string()) : "";
  if (kind == RunKind::plan && result["best"].contains("precision") && result["best"]["precision"].is_string())
    prec = result["best"]["precision"].get<std::string>();
  if (!prec.empty()) m["plan"] = m["plan"].get<std::string>() + ", " + prec;
  // A planner run: the labels of its best plan (planner/output.cpp candidate_labels); a simulation: its own.
  std::string fw;
  bool research = false, beyond = false;
  if (kind == RunKind::plan) {
    const json& b = result["best"];
    fw = b.contains("framework") && b["framework"].is_string() ? b["framework"].get<std::string>() : "";
    research = b.contains("research_techniques");
    beyond = b.contains("beyond_published");
  } else {
    fw = sim.contains("framework") ? sim["framework"].value("name", std::string()) : std::string();
    research = sim.contains("research");
    beyond = sim.contains("beyond_published");
  }
  m["plan"] = m["plan"].get<std::string>() + plan_labels(fw, kDefaultFramework, research, beyond);
  m["global_batch"] = sim.contains("scenario") ? sim["scenario"]["training"].value("global_batch", 0LL) : 0LL;
  if (kind == RunKind::plan && result["best"].contains("global_batch")) m["global_batch"] = result["best"]["global_batch"];
  m["step_time_s"] = sim.value("step_time_s", 0.0);
  m["mfu"] = sim.contains("throughput") ? sim["throughput"].value("mfu", 0.0) : 0.0;
  m["tokens_per_s"] = sim.contains("throughput") ? sim["throughput"].value("tokens_per_s", 0.0) : 0.0;
  const json mem = sim.value("memory", json::object());
  m["peak_bytes_per_gpu"] = mem.value("peak_bytes_per_gpu", 0.0);
  m["capacity_bytes"] = mem.value("capacity_bytes", 0.0);
  m["fits"] = mem.value("fits", false);
  m["host_fits"] = mem.value("host_fits", true);
  // A delinked run's whole-run numbers are the totals (pseudo phase + delink + real phase).
  const json* tot = at_pointer(sim, "/delink/total");
  const json tr = tot ? *tot : sim.value("training", json::object());
  m["time_to_train_s"] = tr.value("time_s", 0.0);
  m["gpu_hours"] = tr.value("gpu_hours", 0.0);
  m["cost_usd"] = tr.value("cost_usd", 0.0);
  return m;
}

}  // namespace tp::report
