#!/usr/bin/env bash
# Configures and builds trainplan (Release) into build/ (or $BUILD_DIR). Installs missing packages first.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bash "$root/scripts/deps.sh"
build=${BUILD_DIR:-$root/build}
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
ninja -C "$build" -j "$(nproc)"
