// spec: the report spec (docs/reports.md) — parsing with exact key validation, and the scenario JSON each
// run point loads (the scenario file, then `overrides` as a JSON merge patch, then the sweep value at the
// sweep's JSON pointer).
// Invariants after read_spec: run ids are unique and non-empty; every quantity, check and figure refers to
// an existing run of the right kind (max_fit, sweep figures and `at` need a sweep run; scaling and pareto a
// plan run); every pointer parses; a sweep has as many x as values; paths are resolved against the spec's
// folder. Every problem is reported at once as "<spec file>: $.runs[1].sweep.pointer: ..." (InputError).
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "models/json_check.hpp"

namespace tp::report {

enum class RunKind { simulate, plan };

struct Sweep {
  std::string pointer;          // JSON pointer into the scenario
  std::vector<json> values;     // placed at pointer, one scenario per value
  std::vector<double> x;        // one per value
  std::string x_label;          // default: the pointer
};

struct RunSpec {
  std::string id, path;         // path: "$.runs[2]" (for messages)
  RunKind kind = RunKind::simulate;
  std::string scenario;         // as written in the spec
  std::string scenario_file;    // resolved against the spec's folder
  json overrides;               // null: none
  std::optional<Sweep> sweep;
  size_t points() const { return sweep ? sweep->values.size() : 1; }
};

// "ours": {"run", "metric", "at"?} | {"max_fit"} | {"ratio": [q1, q2]} | {"value"}.
struct Quantity {
  enum Kind { from_run, max_fit, ratio, value } kind = value;
  std::string run, metric, path;
  int at = -1;                  // sweep point index (metric of a sweep run)
  double number = 0;            // value
  std::vector<Quantity> parts;  // ratio: numerator, denominator
};

struct Check {
  std::string name, unit, assumption, path;
  json published;               // number, boolean, string or null
  Quantity ours;
  std::optional<double> min, max;
  json equals;                  // null: not given; else a number or boolean
};

enum class FigureKind { breakdown, memory, timeline, sweep, scaling, pareto };
const char* figure_kind_name(FigureKind k);

struct FigureSpec {
  FigureKind kind = FigureKind::breakdown;
  std::vector<std::string> runs;  // breakdown, memory
  std::string run, metric;        // timeline, sweep, scaling, pareto; sweep's metric pointer
  std::string path;
};

struct Spec {
  std::string file, base_dir;   // the spec file as given, and its folder
  std::string title, claim, source, about;
  std::vector<RunSpec> runs;
  std::vector<Check> checks;
  std::vector<FigureSpec> figures;
  const RunSpec* find(const std::string& id) const;
};

// Reads and validates a spec file (throws InputError listing every problem).
Spec read_spec(const std::string& file);
Spec spec_from_json(const json& j, const std::string& base_dir, const std::string& where);

// The scenario JSON of one point of a run (0 for a run without a sweep). Throws InputError naming the run.
json point_scenario_json(const Spec& spec, const RunSpec& r, size_t point);

}  // namespace tp::report
