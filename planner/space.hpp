// space: the search space of `trainplan plan` — the layouts (dp, tp, tp_mode, grid, pp, ep) over the allowed
// GPU counts, and inside one layout every inner choice (micro-batch, sequence parallelism, recompute, global
// batch, schedule and virtual stages, stage split (even, or Megatron's uneven first / last counts), accumulation,
// ZeRO stage, offload). It mirrors validate_plan's rules so
// that only valid plans are estimated (validate_plan itself re-checks every plan that is simulated).
// Invariants: enumeration order is fixed (deterministic); search.fix restricts every dimension it names.
#pragma once
#include <functional>
#include <vector>

#include "analytic.hpp"

namespace tp {

struct SpaceLimits {
  std::vector<int> gpu_counts;     // allowed total GPU counts, ascending
  long long max_batch = 0;         // largest searched global batch (sequences); fixed batches ignore it
  std::vector<long long> batches;  // fixed global batches (training.global_batch or fix.global_batch); empty = searched
};

SpaceLimits space_limits(const Scenario& sc, double critical_batch_tokens);

// The search's fix narrowed to what the scenario's framework can run (sc.framework.can): for a key the user
// did not fix, the framework's values, research techniques only when the framework is "research"; for a key the
// user fixed, the user's values that the framework can run, research values kept (naming them opts in).
// Problems (a fixed key the framework cannot run at all) are added under "$.search.fix.<key>".
Fix framework_fix(const Scenario& sc, Issues& is);

// Every layout of the space (ascending GPU count, then tp_mode, tp, pp, ep).
std::vector<Layout> enumerate_layouts(const Scenario& sc, const SpaceLimits& lim);

// Calls visit(choice, cost, global_batch) for every valid inner choice of a layout (cost: the MicroCost of
// the choice's micro-batch, sp and recompute); visit returns whether the point fits in memory. Choices that a
// fitting point dominates (a higher recompute level, or offload, with everything else equal: more work, same
// layout and batch) are not visited but counted in `dominated`. Returns the number of invalid combinations.
long long enumerate_choices(const Scenario& sc, const AnalyticModel& am, const Layout& lay, const SpaceLimits& lim,
                            const std::function<bool(const Choice&, const MicroCost&, long long)>& visit,
                            long long& dominated, bool prune_dominated = true);

// The plan of a layout and choice (not yet validated: validate_plan derives num_microbatches, offload layers).
Plan plan_from(const Layout& lay, const Choice& ch);

// Megatron-style uneven stage splits of L layers over pp stages (at most two, written to `out`; returns how
// many): the middle stages get k = ceil(L / pp) or k + 1 layers each, the first and last share the rest as
// equally as possible (first <= last, both >= 1); pp = 2 with odd L: floor / ceil. The even split is not one.
struct StageSplit { int first = 0, mid = 0, last = 0; };  // 0 = even
int uneven_stage_splits(long long L, int pp, StageSplit out[2]);

}  // namespace tp
