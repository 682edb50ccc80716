#!/usr/bin/env bash
# Builds trainplan and runs the whole test suite with ctest (installs missing packages first).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bash "$root/scripts/build.sh"
# ctest -j starts the longest tests first when it knows their times: a fresh build gets the committed ones
# (.ci/ctest-cost-data.txt, measured on a 2-core machine; docs/perf/ci.md), a used one keeps its own.
cost="${BUILD_DIR:-$root/build}/Testing/Temporary/CTestCostData.txt"
if [ ! -f "$cost" ] && [ -f "$root/.ci/ctest-cost-data.txt" ]; then
  mkdir -p "$(dirname "$cost")" && cp "$root/.ci/ctest-cost-data.txt" "$cost"
fi
ctest --test-dir "${BUILD_DIR:-$root/build}" --output-on-failure -j "$(nproc)"
