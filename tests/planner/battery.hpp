// battery: the invariant battery over the planner's plan space (issue 38). It samples valid plans of a search
// scenario deterministically (a seeded generator over the layouts and, inside a layout, over every valid inner
// choice), simulates each with partner plans that change one thing, and checks invariants that any correct
// simulator keeps. Each failure names the pair of plans that disagree. Used by the bounded CI sample
// (tests/planner/battery_test.cpp) and the full sweep (bench/bench_invariants.cpp, bench/run_invariants.sh).
// Invariants (names as printed):
//   states_dp_x_cp      model states sharded over dp x cp depend on the product, not the split: the static
//                       weights / gradients / optimizer bytes are equal, and the peaks of those classes differ
//                       by at most two of the largest transient holds (gathered runs, unreduced buckets).
//                       Not for chunked offload: PatrickStar keeps on the GPU the chunks that fit next to the
//                       activations, so what lives there follows the tokens on a rank (its policy, not sharding)
//   zero_monotone       a higher ZeRO stage never holds more static model state, nor (up to two of its
//                       transient holds) more model state at the peak
//   act_scale_tokens    stored activations scale with the tokens on a rank: 2x the micro-batch doubles them,
//                       2x cp (dp halved) halves them with flash attention (1 %; unfused attention's
//                       s x s scores are quadratic in the tokens of a sequence on a rank)
//   class_le_fp32       no memory class (weights, gradients, optimizer, buffers) exceeds the model's full fp32
//                       states (16 bytes per parameter of the whole model)
//   step_ge_peak_bound  step time >= model FLOPs per GPU / the GPU's highest dense peak
//   hw_ge_model_flops   hardware FLOP/s (recompute included) >= model FLOP/s
//   analytic_step_5pct  the planner's analytic step time within 5 % of the simulation (plans without offload)
//   analytic_mem_5pct   the analytic peak memory within 5 % of the simulation (plans without offload)
//   analytic_*_offload  the same for offload plans
//   The analytic rows are reported, not enforced: over the sampled space the closed form is not within 5 %
//   everywhere (docs/accuracy.md, "The invariant battery", lists where and why); it only ranks plans, and the
//   event simulation confirms every plan the planner reports.
// Invariants: deterministic for a seed; nothing here is timed.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "models/scenario.hpp"

namespace tp::battery {

// A search scenario whose space is sampled (model family x cluster x precisions).
struct Family {
  std::string name;
  json scenario;
};
// The CI families (small models and GPU counts) or, with `full`, also the three planning questions.
std::vector<Family> families(bool full);

struct Check {
  std::string invariant;
  bool enforced = true;               // false: reported only (the CI test does not fail on it)
  long long checked = 0, failed = 0;
  double worst = 0;                   // worst relative excess over the invariant's bound (0 when none failed)
  std::vector<std::string> failures;  // first few: "A: <plan> | B: <plan> | detail"
};

struct Report {
  long long plans = 0, simulations = 0;
  std::vector<Check> checks;  // one per invariant, in the order of the header comment
};

// Samples `plans` valid plans of the family's space (seeded), checks every invariant on them and their partners.
Report run_family(const Family& f, int plans, std::uint64_t seed);
void merge(Report& into, const Report& r);
std::string table(const Report& r);  // one row per invariant: checked, failed, worst excess, first failure

}  // namespace tp::battery
