#!/usr/bin/env bash
# Builds trainplan and runs the whole test suite with ctest (installs missing packages first).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bash "$root/scripts/build.sh"
ctest --test-dir "${BUILD_DIR:-$root/build}" --output-on-failure -j "$(nproc)"
