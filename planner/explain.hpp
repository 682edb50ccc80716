// explain: internal to planner/ — confirming points with the event simulation (in parallel, memoised), the
// Pareto front, and why the nearest alternatives lose to the winner.
// Invariants: a point is simulated at most once per search; candidates compare by the simulated objective,
// then by the points' total order.
#pragma once
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "search.hpp"

namespace tp {
namespace detail {

bool point_less(const Point& a, const Point& b);

}  // namespace detail

bool candidate_less(const Candidate& a, const Candidate& b);
// A simulated candidate the search may report: fits the GPU within the search's memory headroom, and the host.
bool acceptable(const Candidate& c, double capacity_bytes);
bool same_plan(const Candidate& a, const Candidate& b);
inline const Point& point_of(const Candidate& c) { return c.point; }

struct Confirmer {
  Confirmer(const Scenario& sc, Objective obj, int threads);
  std::vector<Candidate> run(const std::vector<Point>& pts);  // simulates in parallel; same order as pts
  Candidate one(const Point& p);
  Candidate analytic(const Point& p) const;                   // not simulated: the point's analytic numbers
  // The search scenario with the point's plan and batch, validated (`valid` false if validate_plan objects,
  // which the space's mirroring of its rules should make impossible).
  Scenario scenario_of(const Point& p, bool* valid = nullptr) const;
  long long simulated() const { return simulated_; }
  std::function<void()> on_simulated;  // called after each simulation (from worker threads)
  // The confirmation's budget: `cost` estimates a point's simulation in seconds; once the estimates of the points
  // simulated reach `budget_s`, further points are skipped (left unsimulated, so never reported as confirmed).
  // The first point is always simulated. Deterministic: the estimates, not the clock, decide.
  std::function<double(const Point&)> cost;
  double budget_s = 1e300;
  long long skipped() const { return skipped_; }
  double estimated_s() const { return spent_s_; }
  double seconds() const { return seconds_; }
  const Scenario& sc;

 private:
  Candidate simulate_point(const Point& p);
  Objective obj_;
  int threads_;
  std::mutex mu_;
  std::map<std::vector<double>, Candidate> memo_;
  long long simulated_ = 0, skipped_ = 0;
  double seconds_ = 0, spent_s_ = 0;
};

// Non-dominated points in (GPUs, time-to-train, cost), ascending GPU count.
std::vector<GpuPoint> pareto_front(const std::vector<GpuPoint>& by_gpus);

// For each (dimension name, best alternative point): simulate it and say why it loses to `best`.
std::vector<Explanation> explain(Confirmer& cf, const Candidate& best, const std::vector<std::pair<std::string, Point>>& alts);

// A one-line plan summary, e.g. "dp 16 x tp 8 x pp 8, 1f1b, mb 1 x 8, ZeRO-1, selective, SP".
// One line per plan; `prec` the training precision the search chose (shown when fp8).
std::string plan_summary(const Plan& p, long long global_batch, Precision prec = Precision::fp16);

}  // namespace tp
