// search: `trainplan plan` — the search over every plan key for a scenario with a `search` block.
// Pipeline: enumerate (dp, tp, tp_mode, pp) layouts and, inside each, micro-batch, global batch, schedule,
// virtual stages, accumulation, ZeRO stage, offload, recompute, sequence parallelism and ep; prune invalid
// points with the scenario validator's rules and memory-infeasible ones with the closed-form memory model
// (planner/analytic.hpp); rank the rest with the analytic step-time estimate; confirm the best K with the
// event simulation (sim/simulate.hpp), whose numbers are the ones reported.
// Invariants: results are deterministic (ties broken by a total order on plans, whatever the thread count);
// every reported plan passed validate_plan; `best` and `top` carry simulated numbers, never analytic ones.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>
#include <utility>

#include "analytic.hpp"
#include "models/scenario.hpp"
#include "sim/simulate.hpp"

namespace tp {

// One point of the space as the analytic pass sees it: a layout, the inner choices, the global batch.
struct Point {
  Layout lay;
  Choice ch;
  long long batch = 0;             // global batch in sequences
  Estimate est;                    // analytic estimate
  double objective = 0;            // analytic objective (lower is better)
  double time_to_train_s = 0, cost_usd = 0;  // analytic
};

// A point confirmed by the event simulation.
struct Candidate {
  Point point;
  Plan plan;                       // validated; plan.num_microbatches derived, offload layers resolved
  long long global_batch = 0;
  std::shared_ptr<Result> sim;     // the simulation (memory timeline dropped; the program and trace kept for top[0])
  double objective = 0;            // the search objective from the simulation, lower is better
  double time_to_train_s = 0, cost_usd = 0;
  std::string framework;           // the framework profile it was searched and simulated with
};

struct Explanation {
  std::string dimension;           // the plan dimension it differs in ("pipeline parallelism", ...) or "memory"
  Candidate alt;                   // the alternative (simulated)
  std::string reason;              // dominant cause: "memory wall", "pipeline bubble", "exposed DP communication", ...
  std::string detail;              // one sentence with numbers
};

struct SearchStats {
  long long configurations_evaluated = 0;  // points whose memory and step time were estimated analytically
  long long pruned_invalid = 0;            // points rejected by the validator's rules
  long long pruned_memory = 0;             // of the evaluated, those over memory (closed form)
  long long pruned_dominated = 0;          // not estimated: a fitting point with less recompute / no offload dominates
  long long simulated = 0;                 // event simulations run to confirm
  long long confirm_skipped = 0;           // points left unsimulated: the confirmation budget was spent
  double confirm_estimated_s = 0;          // the simulations' estimated cost (what search.confirm_budget_s bounds)
  double seconds = 0, analytic_seconds = 0, simulate_seconds = 0;
  int threads = 1;
};

// Best plan per GPU count (for time-to-train against GPU count, and the Pareto front).
struct GpuPoint {
  int gpus = 0;
  Candidate best;                  // by the objective; simulated unless its simulation would exceed the budget
  bool simulated = true;           // false: analytic numbers (a step of more than kConfirmTaskBudget tasks)
};

// Event-simulation budget for confirming per-GPU-count points (tasks in the step program, about
// micro-batches x layers per stage x stages): the top plans are always simulated.
inline constexpr double kConfirmTaskBudget = 100000;

// The estimated seconds of one confirming simulation (search.confirm_budget_s bounds their sum): about 10 us per GPU
// (topology, collective rings) and 1 us per task of the step program, measured on one core of the development
// machines (2026-11).
double confirm_cost_s(const Scenario& sc, const Point& p);

struct PlanOutcome;
// search.compare: one variant of the shortest-time question (its own full search).
struct ShortestVariant {
  std::string name, label;         // e.g. "lga_mpp_ethernet", "with LGA + MPP, Ethernet-class network (...)"
  std::shared_ptr<PlanOutcome> outcome;
};

struct PlanOutcome {
  Scenario scenario;               // as loaded (search block, no plan)
  std::vector<Candidate> top;      // top K by the objective, all confirmed; top[0] is the best
  std::vector<GpuPoint> by_gpus;   // ascending GPU count
  std::vector<GpuPoint> pareto;    // non-dominated in (GPUs, time-to-train, cost), ascending GPU count
  std::vector<Explanation> why;    // why the nearest alternatives lose to top[0]
  SearchStats stats;
  std::string note;                // e.g. why nothing fits
  std::string budget_note;         // the confirmation budget was spent ("" when not)
  std::vector<std::string> frameworks_left_out;  // search.fix.framework "any": those that cannot run the fixed choices
  int min_gpus = 0;                // > 0: by_gpus starts here (the smallest count fitting without offload)
  std::vector<ShortestVariant> shortest;  // search.compare only
};

// Progress: the estimating phase's share of the fraction reported (the confirming simulations the rest).
inline constexpr double kProgressEstimateShare = 0.6;

struct PlanOptions {
  int threads = 0;                 // 0 = hardware concurrency
  // Progress callback (fraction done, seconds elapsed); called from the driving thread only.
  std::function<void(double, double)> progress;
};

// Runs the search of a scenario that has a search block. Throws InputError on a scenario without one.
PlanOutcome plan_search(const Scenario& sc, const PlanOptions& opt = {});

// `--json`: best (plan, global_batch and the simulated result with simulate --json's keys), top, pareto,
// by_gpus, why and search.{configurations_evaluated, seconds, ...}.
json plan_outcome_to_json(const PlanOutcome& o);

// `plan --emit`: the user's scenario (`raw`, as read from `file`) with its search block replaced by the
// candidate's plan, global batch and precision — a scenario simulate, run, validate and export accept. A
// relative model.hf_config path is made absolute (the emitted file lives elsewhere).
json emitted_scenario(const json& raw, const std::string& file, const Candidate& c);

// `run --plan PLAN.json[#k]`: the k-th (1-based; 1 = best) plan of a `plan --json` result, as
// {"plan": ..., "global_batch": ..., "precision": ...}. Throws InputError naming the file when absent.
json planner_choice(const json& result, const std::string& file, int k);
// `--csv`: one row per top candidate.
std::string plan_outcome_to_csv(const PlanOutcome& o);
// Terminal: top-K table, Pareto front, why the alternatives lose.
void print_plan_outcome(std::ostream& os, const PlanOutcome& o);

// The planner's answers as text cells, from a `plan --json` object, in print_plan_outcome's columns and units
// (sim/output.hpp's days_text, usd_text, percent_text, GiB): what reports render as tables.
struct PlanAnswers {
  std::vector<std::string> notes;                    // the framework searched and the labels' legend
  std::vector<std::string> top_head;                 // rank, GPUs, step (s), to train, cost, MFU, mem (GiB), ...
  std::vector<std::vector<std::string>> top;
  std::string pareto_title;                          // "Pareto front (GPUs, time to train, cost) from N GPUs, ..."
  std::vector<std::string> pareto_head;              // GPUs, to train, cost, plan
  std::vector<std::vector<std::string>> pareto;
  std::vector<std::pair<std::string, std::string>> why;  // ("other tp: <plan>", "<reason>: <detail>")
};
PlanAnswers plan_answers(const json& outcome);
// The notes every rendering of an outcome prints: the framework (or frameworks) searched, and the legend of the
// labels its plans carry ("[research] research technique: ...", "[beyond published] ...").
std::vector<std::string> plan_outcome_notes(const PlanOutcome& o);

}  // namespace tp
