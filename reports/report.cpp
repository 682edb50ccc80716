// report: `trainplan report` (docs/reports.md) — the command line, the ad-hoc spec built from scenario
// files, and the all-or-nothing write of the report folder.
// Invariants: everything (runs, checks, figures, the four renderings) is computed in memory before the
// first byte is written, so bad input exits 2 with nothing written; files are then written to temporary
// names and renamed only once all of them were written; figures/*.svg left from an earlier report in the
// same folder that this report does not produce are removed, so the folder matches data.json.
#include "report.hpp"

#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <set>

#include "models/safe_io.hpp"
#include "render.hpp"

namespace tp {

namespace fs = std::filesystem;
using namespace report;

namespace {

const char* kUsage =
    "usage: trainplan report SPEC.report.json --out DIR [--quiet]\n"
    "       trainplan report SCENARIO.json [SCENARIO.json ...] --out DIR [--quiet]\n"
    "  writes DIR/report.md, DIR/report.html (self-contained), DIR/figures/*.svg, DIR/data.json, DIR/data.csv\n";

struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// One run per scenario (kind plan when it has a search block), breakdown and memory of all, a timeline each,
// scaling and Pareto figures for plan runs; no checks.
Spec adhoc_spec(const std::vector<std::string>& files, const std::vector<json>& texts) {
  Spec s;
  s.base_dir = ".";
  std::set<std::string> ids;
  std::vector<std::string> all;
  for (size_t i = 0; i < files.size(); ++i) {
    RunSpec r;
    std::string stem = fs::path(files[i]).stem().string();
    r.id = stem.empty() ? "run" : stem;
    for (int k = 2; !ids.insert(r.id).second; ++k) r.id = stem + "-" + std::to_string(k);
    r.path = "$";
    r.kind = texts[i].is_object() && texts[i].contains("search") ? RunKind::plan : RunKind::simulate;
    r.scenario = r.scenario_file = files[i];
    all.push_back(r.id);
    s.runs.push_back(r);
  }
  // The title names the scenarios by their "name" (what their results and tables call them), else the file.
  s.title = "trainplan report: ";
  for (size_t i = 0; i < all.size(); ++i) {
    const bool named = texts[i].is_object() && texts[i].contains("name") && texts[i]["name"].is_string() &&
                       !texts[i]["name"].get<std::string>().empty();
    s.title += (i ? ", " : "") + (named ? texts[i]["name"].get<std::string>() : all[i]);
  }
  FigureSpec b;
  b.kind = FigureKind::breakdown;
  b.runs = all;
  s.figures.push_back(b);
  b.kind = FigureKind::memory;
  s.figures.push_back(b);
  for (const RunSpec& r : s.runs) {
    FigureSpec f;
    f.run = r.id;
    f.kind = FigureKind::timeline;
    s.figures.push_back(f);
    if (r.kind == RunKind::plan) {
      f.kind = FigureKind::scaling;
      s.figures.push_back(f);
      f.kind = FigureKind::pareto;
      s.figures.push_back(f);
    }
  }
  return s;
}

// Writes every file or none: fresh temporaries first, all renamed at the end (write_outputs_atomic).
void write_all(const fs::path& dir, const std::map<std::string, std::string>& files) {
  std::error_code ec;
  fs::create_directories(dir / "figures", ec);
  if (ec) throw InputError({"--out " + dir.string() + ": cannot create the folder: " + ec.message()});
  std::vector<OutputFile> outs;  // all files or none, each through a fresh temporary (models/safe_io.hpp)
  for (const auto& [rel, text] : files) outs.emplace_back((dir / rel).string(), text);
  write_outputs_atomic(outs);
  for (const auto& e : fs::directory_iterator(dir / "figures", ec))
    if (e.path().extension() == ".svg" && !files.count("figures/" + e.path().filename().string()))
      fs::remove(e.path(), ec);
}

int run(const std::vector<std::string>& args) {
  std::vector<std::string> inputs;
  std::string out;
  bool quiet = false;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--out") {
      if (i + 1 >= args.size()) throw UsageError("option --out needs a folder");
      out = args[++i];
    } else if (a == "--quiet") {
      quiet = true;
    } else if (a == "--help" || a == "-h") {
      std::cout << kUsage;
      return 0;
    } else if (a.rfind("--", 0) == 0) {
      throw UsageError("unknown option " + a);
    } else {
      inputs.push_back(a);
    }
  }
  if (inputs.empty()) throw UsageError("report needs a report spec or scenario files");
  if (out.empty()) throw UsageError("report needs --out DIR");
  Issues is;
  std::vector<json> texts;
  for (const std::string& f : inputs) texts.push_back(parse_json_file(f, f, is));
  if (!is.empty()) throw InputError(is.messages);
  bool spec_mode = false;
  for (size_t i = 0; i < texts.size(); ++i)
    if (texts[i].is_object() && texts[i].contains("runs")) {
      if (inputs.size() > 1) throw UsageError(inputs[i] + " is a report spec: give it alone (no scenario files with it)");
      spec_mode = true;
    }
  Spec spec;
  if (spec_mode) {
    fs::path base = fs::path(inputs[0]).parent_path();
    spec = spec_from_json(texts[0], base.empty() ? std::string(".") : base.string(), inputs[0]);
  } else {
    spec = adhoc_spec(inputs, texts);
  }
  std::vector<RunOut> runs = evaluate_runs(spec);
  Report rep;
  rep.spec = &spec;
  rep.runs = &runs;
  for (const Check& c : spec.checks) rep.checks.push_back(evaluate_check(spec, c, runs));
  rep.figures = make_figures(spec, runs);
  std::map<std::string, std::string> files;
  for (const Figure& f : rep.figures) files[f.file] = f.svg;
  files["report.md"] = render_md(rep);
  files["report.html"] = render_html(rep);
  files["data.json"] = render_data(rep).dump(2) + "\n";
  files["data.csv"] = render_csv(rep);
  write_all(out, files);
  if (!quiet) {
    int ok = 0;
    for (const CheckOut& c : rep.checks) ok += c.reproduced;
    std::cout << "trainplan report: wrote " << (fs::path(out) / "report.md").string() << ", report.html, data.json, "
              << "data.csv and " << rep.figures.size() << " figures";
    if (!spec.checks.empty()) std::cout << "; checks: " << ok << " of " << spec.checks.size() << " reproduced";
    std::cout << "\n";
  }
  return 0;
}

}  // namespace

int report_main(const std::vector<std::string>& args) {
  try {
    return run(args);
  } catch (const UsageError& e) {
    std::cerr << "error: " << e.what() << "\n" << kUsage;
    return 2;
  } catch (const InputError& e) {
    for (const auto& m : e.messages) std::cerr << "error: " << m << "\n";
    return 2;
  }
}

}  // namespace tp
