#!/usr/bin/env bash
# Quick start: install what is missing, build, and simulate the bundled default scenario
# (GPT-3 175B on 1536 A100 GPUs of Selene) with JSON and Perfetto-trace outputs in out/.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bash "$root/scripts/build.sh"
mkdir -p "$root/out"
"${BUILD_DIR:-$root/build}/cli/trainplan" simulate "$root/scenarios/default.json" \
  --json "$root/out/default.json" --trace "$root/out/default.trace.json"
echo
echo "wrote out/default.json and out/default.trace.json (open the trace in https://ui.perfetto.dev)"
