// fit_cmd: `trainplan fit RUNS.json --out PROFILE.json` — fits a framework profile's free parameters (sim/fit)
// to measured runs and writes the profile (a framework object that a scenario's training.framework takes).
// RUNS.json is either a runs file
//   {"framework": NAME|{...} (optional), "parameters": [...] (optional),
//    "runs": [{"name", "scenario": FILE|{...}, "step_time_s": X | "log": FILE, "skip_steps": 2,
//              "breakdown_s": {"compute": X, "dp_comm_exposed": Y, ...} (optional), "peak_memory_bytes": M (optional)}]}
// or a validation set ({"rows": [...]}, data/validation/*.json) whose rows of --framework are the runs.
// Paths inside a runs file are relative to it. Prints the fitted values with their standard errors, every
// run's error before and after, and the leave-one-out error.
#include "fit_cmd.hpp"

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <sstream>

#include "args.hpp"
#include "models/catalog.hpp"
#include "models/safe_io.hpp"
#include "sim/fit.hpp"
#include "sim/output.hpp"
#include "sim/train_logs.hpp"
#include "sim/validate_devset.hpp"

namespace tp {

namespace {

namespace fs = std::filesystem;

std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string x;
  while (std::getline(ss, x, ',')) if (!x.empty()) out.push_back(x);
  return out;
}

// The runs of a runs file; `base` and `params` from it when given.
std::vector<FitRun> runs_from_file(const json& j, const std::string& file, Framework& base, bool& base_given,
                                   std::vector<std::string>& params) {
  Issues is;
  Reader r(j, file + ": $", is);
  const fs::path dir = fs::path(file).parent_path();
  auto rel = [&](const std::string& p) { return p.empty() || p[0] == '/' ? p : (dir / p).string(); };
  if (const json* f = r.get("framework")) {
    base = resolve_framework(f, file + ": $.framework", is);
    base_given = true;
  }
  if (const json* p = r.get("parameters")) {
    if (!p->is_array()) is.add_got(file + ": $.parameters", "a list of parameter names", *p);
    else for (const json& x : *p) params.push_back(x.is_string() ? x.get<std::string>() : x.dump());
  }
  r.opt_str("about", "");
  const json* runs = r.get("runs");
  if (!runs || !runs->is_array() || runs->empty()) is.add(file + ": $.runs", "a non-empty list of runs {name, scenario, step_time_s | log}");
  r.finish({"about", "framework", "parameters", "runs"});
  if (!is.empty()) throw InputError(is.messages);
  std::vector<FitRun> out;
  for (size_t i = 0; i < runs->size(); ++i) {
    const std::string at = file + ": $.runs[" + std::to_string(i) + "]";
    Reader rr((*runs)[i], at, is);
    if (!rr.ok()) continue;
    FitRun run;
    run.name = rr.opt_str("name", "run " + std::to_string(i));
    const json* s = rr.get("scenario");
    const double step = rr.opt_num("step_time_s", 0, 1e-9, 1e9);
    const std::string log = rr.opt_str("log", "");
    const int skip = (int)rr.opt_int("skip_steps", 2, 0, 1000000);
    run.measured_peak_bytes = rr.opt_num("peak_memory_bytes", 0, 1, 1e15);
    if (const json* b = rr.get("breakdown_s")) {
      Reader br(*b, rr.at("breakdown_s"), is);
      if (br.ok()) {
        for (const std::string& c : kBreakdownClasses)
          if (br.has(c)) run.measured_classes.push_back({c, br.req_num(c, 0, 1e9)});
        br.finish(kBreakdownClasses);
      }
    }
    rr.finish({"name", "scenario", "step_time_s", "log", "skip_steps", "breakdown_s", "peak_memory_bytes"});
    if (!s) { is.add(at + ".scenario", "missing; expected a scenario file or an inline scenario"); continue; }
    if ((step > 0) == !log.empty()) { is.add(at, "give exactly one of step_time_s and log"); continue; }
    try {
      if (s->is_string()) run.scenario = load_scenario(rel(s->get<std::string>()));
      else run.scenario = scenario_from_json(*s, dir.string(), at + ".scenario");
      if (!base_given && !out.empty() && run.scenario.framework.name != out.front().scenario.framework.name)
        throw InputError({at + ": framework \"" + run.scenario.framework.name + "\" differs from the first run's \"" +
                          out.front().scenario.framework.name + "\"; fit one framework at a time, or name it in $.framework"});
      run.measured_s = step;
      if (!log.empty()) {
        const std::string text = read_file_capped(rel(log), (size_t)1 << 30, "training log");
        const Scenario& sc = run.scenario;
        const double gb = (double)sc.training.global_batch;
        const LogStepTimes lt = read_log_step_times(text, at + ".log (" + log + ")", gb, gb * sc.training.seq_len, sc.plan.gpus(), skip);
        run.measured_s = lt.median_s;
      }
    } catch (const InputError& e) {
      for (const std::string& m : e.messages) is.push(m.rfind(file, 0) == 0 ? m : at + ": " + m);
      continue;
    }
    out.push_back(std::move(run));
  }
  if (!is.empty()) throw InputError(is.messages);
  if (!base_given) base = out.front().scenario.framework;
  return out;
}

// The rows of a validation set that ran with `framework` ("" = rows without a framework: Megatron-Core).
std::vector<FitRun> runs_from_set(const json& set, const std::string& file, const std::string& framework) {
  std::vector<FitRun> out;
  for (const json& row : set.at("rows")) {
    const json& tr = row.contains("training") ? row["training"] : json::object();
    const std::string fw = row.value("framework", tr.is_object() ? tr.value("framework", std::string()) : std::string());
    if (fw != framework) continue;
    FitRun run;
    run.name = row.value("id", std::string("row"));
    try {
      run.measured_s = devset_published_step_s(row);
      run.scenario = scenario_from_json(devset_row_scenario(row, "", &set), ".", file + ": row " + run.name);
    } catch (const InputError&) {
      continue;  // a row trainplan cannot simulate yet (validate-published lists it as skipped)
    }
    out.push_back(std::move(run));
  }
  return out;
}

std::string pct(double x) {
  char b[32];
  std::snprintf(b, sizeof b, "%+.1f%%", 100 * x);
  return b;
}

}  // namespace

int cmd_fit(int argc, char** argv) {
  Args a = parse_args(argc, argv, 2, {"--out", "--framework", "--params", "--threads", "--json"}, {"--quiet"});
  if (a.positional.empty()) throw Usage("fit needs one or more RUNS.json (runs files or validation sets)");
  if (a.value("--out").empty()) throw Usage("fit needs --out PROFILE.json");
  const int threads = (int)count_option(a, "--threads", 1, 256, 2);
  Framework base;
  bool base_given = false;
  if (!a.value("--framework").empty()) {
    Issues fi;
    const json name = a.value("--framework");
    base = resolve_framework(&name, "--framework", fi);
    if (!fi.empty()) throw InputError(fi.messages);
    base_given = true;
  }
  std::vector<std::string> params;
  std::vector<FitRun> runs;
  std::string file;  // the files, for the report
  for (const std::string& f : a.positional) {
    file += (file.empty() ? "" : ", ") + f;
    Issues is;
    const json j = parse_json_file(f, f, is);
    if (!is.empty()) throw InputError(is.messages);
    std::vector<FitRun> more;
    if (j.is_object() && j.contains("rows")) {  // a validation set: the rows of --framework (default Megatron-Core)
      const std::string fw = base_given ? base.name : std::string(kDefaultFramework);
      if (!base_given) {
        Issues fi;
        base = resolve_framework(nullptr, "--framework", fi);
        base_given = true;
      }
      try {
        more = runs_from_set(j, f, fw == kDefaultFramework ? "" : fw);
      } catch (const json::exception& e) {
        throw InputError({f + ": unexpected validation-set layout: " + e.what()});
      }
      if (more.empty()) throw InputError({f + ": no row ran with framework \"" + fw + "\" (--framework)"});
    } else {
      more = runs_from_file(j, f, base, base_given, params);
    }
    for (auto& r : more) runs.push_back(std::move(r));
  }
  if (!a.value("--params").empty()) params = split_list(a.value("--params"));
  if (params.empty()) params = kFitDefaultParams;

  const FitResult fr = fit_framework(runs, base, params, threads);
  std::ostringstream os;
  char line[512];
  os << "trainplan fit: framework " << base.name << " on " << runs.size() << " runs (" << file << ")\n";
  json unc = json::object();
  for (size_t i = 0; i < fr.params.size(); ++i) {
    const std::string& p = fr.params[i];
    const double v = fit_param_value(fr.fit, p);
    const double se = fr.std_error[i];
    if (se >= 0) std::snprintf(line, sizeof line, "  %-26s %10.4f +- %.4f%s\n", p.c_str(), v, se, se > std::fabs(v) ? "  (not determined by these runs)" : "");
    else std::snprintf(line, sizeof line, "  %-26s %10.4f (no uncertainty: runs <= parameters or a flat direction)\n", p.c_str(), v);
    os << line;
    unc[p] = se >= 0 ? json(se) : json(nullptr);
  }
  bool memory = false;
  for (const FitRun& r : runs) memory = memory || r.measured_peak_bytes > 0;
  std::snprintf(line, sizeof line, "  %-44s %11s %11s %9s %9s %9s%s\n", "run", "measured s", "fitted s", "before", "after",
                "leave-out", memory ? "  peak memory (predicted vs measured)" : "");
  os << line;
  for (size_t i = 0; i < runs.size(); ++i) {
    const double m = runs[i].measured_s;
    std::string mem;
    if (runs[i].measured_peak_bytes > 0) mem = "  " + pct(fr.peak_bytes_after[i] / runs[i].measured_peak_bytes - 1);
    std::snprintf(line, sizeof line, "  %-44s %11.4g %11.4g %9s %9s %9s%s\n", runs[i].name.substr(0, 44).c_str(), m, fr.after_s[i],
                  pct(fr.before_s[i] / m - 1).c_str(), pct(fr.after_s[i] / m - 1).c_str(), pct(fr.loo_s[i] / m - 1).c_str(), mem.c_str());
    os << line;
  }
  std::snprintf(line, sizeof line, "  mean |error| before %.1f%%, after %.1f%%, leave-one-out %.1f%% (max %.1f%%, %.1f%%, %.1f%%)\n",
                100 * fr.mean_abs_before, 100 * fr.mean_abs_after, 100 * fr.mean_abs_loo, 100 * fr.max_abs_before,
                100 * fr.max_abs_after, 100 * fr.max_abs_loo);
  os << line << "  the leave-one-out error is the one to believe for a run not in the fit\n";
  if (!a.flag("--quiet")) std::cout << os.str();

  Framework out = base;
  out.fit = fr.fit;
  out.fit.source = "trainplan fit on " + std::to_string(runs.size()) + " runs of " + file +
                   " (leave-one-out mean |error| " + pct(fr.mean_abs_loo).substr(1) + ")";
  json prof = framework_to_json(out);
  prof["fitted"]["uncertainty"] = unc;
  prof["about"] = "framework profile fitted by trainplan fit: use it as a scenario's training.framework (inline object)";
  json report = {{"framework", base.name}, {"runs", json::array()}, {"mean_abs_error_before", fr.mean_abs_before},
                 {"mean_abs_error_after", fr.mean_abs_after}, {"mean_abs_error_loo", fr.mean_abs_loo}, {"profile", prof}};
  for (size_t i = 0; i < runs.size(); ++i)
  {
    report["runs"].push_back({{"name", runs[i].name}, {"measured_s", runs[i].measured_s}, {"before_s", fr.before_s[i]},
                              {"after_s", fr.after_s[i]}, {"leave_one_out_s", fr.loo_s[i]},
                              {"predicted_peak_bytes", fr.peak_bytes_after[i]}});
    if (runs[i].measured_peak_bytes > 0) report["runs"].back()["measured_peak_bytes"] = runs[i].measured_peak_bytes;
  }
  const std::string prof_text = prof.dump(2) + "\n", report_text = report.dump(2) + "\n";  // alive while written
  std::vector<OutputFile> files = {{a.value("--out"), prof_text}};
  if (!a.value("--json").empty()) files.push_back({a.value("--json"), report_text});
  write_outputs_atomic(files);
  return 0;
}

}  // namespace tp
