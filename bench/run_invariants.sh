#!/usr/bin/env bash
# run_invariants.sh: builds bench_invariants (Release) and runs the invariant battery's full sweep over every
# family (tests/planner/battery.hpp): PLANS sampled plans per family (default 400), each with its partners;
# prints one table per family and the total; exit 1 when an enforced invariant fails.
# usage: bench/run_invariants.sh [PLANS] [SEED]      BUILD_DIR (default <repo>/build-bench)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
src="$(cd "$here/.." && pwd)"
build="${BUILD_DIR:-$src/build-bench}"
cmake -S "$src" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTRAINPLAN_TESTS=OFF -DTRAINPLAN_BENCH=ON >/dev/null
cmake --build "$build" --target bench_invariants >/dev/null
"$build/bench/bench_invariants" "${1:-400}" "${2:-38}"
