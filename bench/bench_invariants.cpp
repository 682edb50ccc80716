// bench_invariants: the full sweep of the invariant battery (tests/planner/battery.hpp) over every family,
// the three planning questions included; prints one table per family and the total; exit 1 when an
// enforced invariant fails (the analytic rows are reported only).
// usage: bench_invariants [PLANS_PER_FAMILY=400] [SEED=38]
#include <cstdio>
#include <cstdlib>

#include "planner/battery.hpp"  // tests/planner/battery.hpp

int main(int argc, char** argv) {
  const int plans = argc > 1 ? std::atoi(argv[1]) : 400;
  const unsigned long long seed = argc > 2 ? std::strtoull(argv[2], nullptr, 10) : 38;
  tp::battery::Report all;
  for (const tp::battery::Family& f : tp::battery::families(true)) {
    tp::battery::Report r = tp::battery::run_family(f, plans, seed);
    std::printf("== %s\n%s\n", f.name.c_str(), tp::battery::table(r).c_str());
    std::fflush(stdout);
    tp::battery::merge(all, r);
  }
  std::printf("== all families\n%s", tp::battery::table(all).c_str());
  long long failed = 0;
  for (const auto& c : all.checks) failed += c.enforced ? c.failed : 0;  // the analytic rows are reported only
  return failed == 0 ? 0 : 1;
}
