#!/usr/bin/env bash
# run_exec_bench.sh: the executor's speed target as a table — single-rank training throughput (hardware FLOPs
# per second of `trainplan run`) against the calibrated matrix-multiply peak of this machine, for a GPT with
# hidden >= 768 (target: >= 60 %). Also prints validate's predicted vs measured step time and peak memory.
#
# usage: bench/run_exec_bench.sh [SCENARIO ...]   (default: scenarios/exec/validate-gpt768-1r.json)
#   BUILD_DIR  build directory (default: <repo>/build)    STEPS  measured steps (default 5)
# Needs python3 (to read the JSON results). Writes its files under $BUILD_DIR/exec-bench/.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
src="$(cd "$here/.." && pwd)"
build="${BUILD_DIR:-$src/build}"
bin="$build/cli/trainplan"
steps="${STEPS:-5}"
out="$build/exec-bench"
mkdir -p "$out"
[[ -x "$bin" ]] || { echo "run_exec_bench.sh: $bin not built (bash scripts/build.sh)" >&2; exit 2; }
command -v python3 >/dev/null || { echo "run_exec_bench.sh: python3 is needed" >&2; exit 2; }
scenarios=("$@")
[[ ${#scenarios[@]} -gt 0 ]] || scenarios=("$src/scenarios/exec/validate-gpt768-1r.json")

echo "machine: $(lscpu | sed -n 's/^Model name: *//p' | head -1), $(nproc) cores; load: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
"$bin" calibrate --backend cpu --out "$out/profile.json" >&2
printf '| %-28s | %12s | %12s | %8s | %10s | %10s | %8s | %8s |\n' scenario "achieved GF/s" "peak GF/s" "of peak" \
  "pred step s" "meas step s" "step err" "mem err"
printf '|%s|%s|%s|%s|%s|%s|%s|%s|\n' "------------------------------" "--------------" "--------------" "----------" \
  "------------" "------------" "----------" "----------"
fail=0
for sc in "${scenarios[@]}"; do
  name=$(basename "$sc" .json)
  "$bin" validate "$sc" --profile "$out/profile.json" --steps "$steps" --json "$out/$name.validate.json" --quiet
  # Hardware FLOPs per step from the simulator on the same profile (recompute included).
  python3 - "$sc" "$out/profile.json" "$out/$name.scenario.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1])); s["cluster"] = json.load(open(sys.argv[2]))
s["training"]["precision"] = "fp32"; s["training"]["grad_precision"] = "fp32"
json.dump(s, open(sys.argv[3], "w"))
PY
  "$bin" simulate "$out/$name.scenario.json" --json "$out/$name.sim.json" --quiet
  python3 - "$out/$name.validate.json" "$out/$name.sim.json" "$out/profile.json" "$name" <<'PY' || fail=1
import json, sys
v = json.load(open(sys.argv[1])); sim = json.load(open(sys.argv[2])); prof = json.load(open(sys.argv[3]))
flops = sim["throughput"]["hardware_tflops_per_gpu"] * 1e12 * sim["step_time_s"]   # per rank per step
meas = v["measured"]["step_time_s"]
peak = prof["gpu"]["matrix_flops_per_s"]["fp32"]
ach = flops / meas
print("| %-28s | %12.1f | %12.1f | %7.1f%% | %10.4f | %10.4f | %+7.1f%% | %+7.1f%% |" % (
    sys.argv[4], ach / 1e9, peak / 1e9, 100 * ach / peak, v["predicted"]["step_time_s"], meas,
    100 * v["error"]["step_time"], 100 * v["error"]["peak_memory"]))
sys.exit(0 if ach / peak >= 0.6 else 1)
PY
done
echo "throughput target (>= 60 % of the calibrated matmul peak): $([[ $fail == 0 ]] && echo pass || echo FAIL)"
