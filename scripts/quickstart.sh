#!/usr/bin/env bash
# Quick start: install what is missing, build, and simulate the bundled default scenario
# (GPT-3 175B on 1536 A100 GPUs of Selene) with JSON and Perfetto-trace outputs in out/, then search the best
# plan for GPT-3 175B on up to 1024 of those GPUs (scenarios/plan-default.json, out/plan.json).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bash "$root/scripts/build.sh"
mkdir -p "$root/out"
"${BUILD_DIR:-$root/build}/cli/trainplan" simulate "$root/scenarios/default.json" \
  --json "$root/out/default.json" --trace "$root/out/default.trace.json"
"${BUILD_DIR:-$root/build}/cli/trainplan" plan "$root/scenarios/plan-default.json" --json "$root/out/plan.json"
echo
echo "wrote out/default.json, out/default.trace.json (open the trace in https://ui.perfetto.dev) and out/plan.json"
