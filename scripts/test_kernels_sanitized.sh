#!/usr/bin/env bash
# Builds the kernel tests alone (tests/kernels as its own CMake project: the block emulator and the kernel
# tests, nothing else of trainplan) with ThreadSanitizer or AddressSanitizer, and runs them with ctest.
# Usage: scripts/test_kernels_sanitized.sh thread|address [BUILD_DIR]   (ctest label kernels-sanitize)
set -euo pipefail
san=${1:?usage: $0 thread|address [BUILD_DIR]}
root=$(cd "$(dirname "$0")/.." && pwd)
build=${2:-$root/build-kernels-$san}
gen=()
command -v ninja >/dev/null && gen=(-G Ninja)
cmake -S "$root/tests/kernels" -B "$build" "${gen[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DTRAINPLAN_SANITIZE="$san" >/dev/null
cmake --build "$build" -j "$(nproc)"
export TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 ${TSAN_OPTIONS:-}"
export ASAN_OPTIONS="detect_leaks=1 ${ASAN_OPTIONS:-}"
ctest --test-dir "$build" --output-on-failure -j "$(nproc)"
