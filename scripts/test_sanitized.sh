#!/usr/bin/env bash
# Builds trainplan and its unit and CLI tests with AddressSanitizer + UndefinedBehaviorSanitizer in a build
# directory of their own and runs them with ctest (issue 14). Open MPI's own leaks (its one-time allocations
# in MPI_Init and its plugins) are suppressed by scripts/lsan_openmpi.supp; any leak in trainplan's code, any
# out-of-bounds access and any undefined behaviour fails the run.
# Usage: scripts/test_sanitized.sh [BUILD_DIR] [ctest args...]   (ctest label `sanitize`, see README)
# Takes about 2 hours on 2 cores (the build, about 22 minutes, then ~86 minutes of tests, most of it the multi-rank executor
# oracles), so it is not part of the default `ctest` run.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build-sanitize}
shift || true
gen=()
command -v ninja >/dev/null && gen=(-G Ninja)
flags="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
cmake -S "$root" -B "$build" "${gen[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTRAINPLAN_CUDA=OFF -DTRAINPLAN_BENCH=OFF \
  -DCMAKE_CXX_FLAGS="$flags" -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" \
  -DCMAKE_SHARED_LINKER_FLAGS="-fsanitize=address,undefined" >/dev/null
cmake --build "$build" -j "$(nproc)"
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=0:strict_string_checks=1:detect_stack_use_after_return=0:${ASAN_OPTIONS:-}"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:${UBSAN_OPTIONS:-}"
export LSAN_OPTIONS="suppressions=$root/scripts/lsan_openmpi.supp:print_suppressions=0:${LSAN_OPTIONS:-}"
# The kernels' own sanitizer sub-builds and GPU tests are not rerun here.
ctest --test-dir "$build" --output-on-failure -j "$(nproc)" -LE "kernels-sanitize|gpu|sanitize" --timeout 1500 "$@"
