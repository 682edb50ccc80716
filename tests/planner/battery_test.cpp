// The invariant battery (tests/planner/battery.hpp) on a bounded, deterministic sample of the planner's space:
// the CI families (a dense model in bf16 and fp8, a small MoE, an A100 fp16 model with 1D / 2D tensor
// parallelism and unfused attention), kPlans sampled plans each, every plan with its partners. Every invariant
// must be checked on at least one pair and hold on all. Prints the table; the full sweep is
// bench/run_invariants.sh.
#include <gtest/gtest.h>

#include <cstdio>

#include "battery.hpp"

using namespace tp;

namespace {
constexpr int kPlans = 64;  // per family (with partners: about 4 simulations each; about a second in all)
constexpr std::uint64_t kSeed = 38;
}  // namespace

TEST(InvariantBattery, SampledPlansKeepEveryInvariant) {
  battery::Report all;
  for (const battery::Family& f : battery::families(false)) {
    SCOPED_TRACE(f.name);
    battery::Report r = battery::run_family(f, kPlans, kSeed);
    EXPECT_GE(r.plans, kPlans / 2) << "too few valid plans sampled";
    battery::merge(all, r);
  }
  std::printf("%s", battery::table(all).c_str());
  for (const battery::Check& c : all.checks) {
    EXPECT_GT(c.checked, 0) << c.invariant << " was never checked";
    if (!c.enforced) continue;
    EXPECT_EQ(c.failed, 0) << c.invariant << ": " << (c.failures.empty() ? "" : c.failures.front());
    for (size_t i = 1; i < c.failures.size(); ++i) ADD_FAILURE() << c.invariant << ": " << c.failures[i];
  }
}
