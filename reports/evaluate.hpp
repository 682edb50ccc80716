// evaluate: runs a spec — every run point is loaded (spec.hpp's scenario JSON) and simulated or planned —
// then evaluates the checks' quantities against the results, and extracts the key numbers of a result.
// Invariants: results are the public JSON of `simulate --json` / `plan --json`, so quantities address them
// with the same pointers users see; a run point's Result is kept only where a timeline can use it (runs
// without a sweep); quantity errors (missing key, wrong type, division by zero) are InputErrors naming the
// check's path, like spec errors.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "sim/simulate.hpp"
#include "spec.hpp"

namespace tp::report {

struct Point {
  json x;                               // the sweep's x (null without a sweep)
  json value;                           // the sweep value (null without a sweep)
  json result;                          // simulate --json keys, or plan --json keys
  std::shared_ptr<const Result> sim;    // simulate: the Result; plan: the best plan's (null in sweeps)
};

struct RunOut {
  const RunSpec* spec = nullptr;
  std::string name;                     // the scenario's "name" (point 0's), "name (id)" when runs share it
  std::vector<Point> points;            // one per sweep value; one without a sweep
  // How reports name the run (tables, figure titles, legends): the scenario's name, else the run's id.
  const std::string& label() const { return name.empty() ? spec->id : name; }
};

struct CheckOut {
  json ours;                            // number, boolean or null (max_fit where nothing fits)
  bool reproduced = false;
};

// Loads and simulates / plans every run point, in spec order.
std::vector<RunOut> evaluate_runs(const Spec& spec);
const RunOut* find_run(const std::vector<RunOut>& runs, const std::string& id);

json evaluate_quantity(const Spec& spec, const Quantity& q, const std::vector<RunOut>& runs);
CheckOut evaluate_check(const Spec& spec, const Check& c, const std::vector<RunOut>& runs);

// The simulate --json result inside a run's result: itself for simulate, best.result for plan (null when the
// planner found nothing that fits).
const json* sim_result(const json& result, RunKind kind);

// Key numbers of one run point: gpus, plan (one-line summary), global_batch, step_time_s, mfu, tokens_per_s,
// peak_bytes_per_gpu, capacity_bytes, fits, host_fits, time_to_train_s, gpu_hours, cost_usd. Empty object
// when there is no simulated result (a plan run where nothing fits).
json key_metrics(const json& result, RunKind kind);

// "dp 16 × tp 8 × pp 12, 1f1b, mb 1, SP, recompute selective, ZeRO-1" from a plan JSON object.
std::string plan_summary(const json& plan);

}  // namespace tp::report
