#!/usr/bin/env bash
# run_planner_bench.sh: builds bench_planner (Release) and prints the planner's speed-target table
# (docs/perf/planner.md): analytic pass >= 100,000 configurations/s per core; full search for GPT-3 175B on up
# to 1024 GPUs < 10 s on 2 cores.
# usage: bench/run_planner_bench.sh [TABLE_FILE]      BUILD_DIR (default <repo>/build-bench)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
src="$(cd "$here/.." && pwd)"
build="${BUILD_DIR:-$src/build-bench}"
table_file="${1:-}"
cmake -S "$src" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTRAINPLAN_TESTS=OFF -DTRAINPLAN_BENCH=ON >/dev/null
cmake --build "$build" --target bench_planner >/dev/null
json="$build/bench_planner.json"
echo "load before: $(uptime)" >&2
"$build/bench/bench_planner" --benchmark_out="$json" --benchmark_out_format=json >&2
echo "load after:  $(uptime)" >&2
python3 - "$json" <<'PY' | tee ${table_file:+"$table_file"}
import json, sys, platform, os
d = json.load(open(sys.argv[1]))
b = {x["name"].split("/")[0]: x for x in d["benchmarks"]}
a, s = b["BM_AnalyticPass"], b["BM_PlanSearch"]
cps = a["configs_per_s"]
secs = s["real_time"]
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), platform.processor())
print(f"machine: {cpu}, {os.cpu_count()} cores")
print("| target | measured | goal | pass |")
print("|---|---|---|---|")
print(f"| analytic pass, configurations / s / core | {cps:,.0f} ({a['configs']:,.0f} per pass) | >= 100,000 | {'yes' if cps >= 1e5 else 'NO'} |")
print(f"| full search GPT-3 175B, up to 1024 GPUs, 2 threads | {secs:.2f} s ({s['configs']:,.0f} estimated, {s['simulated']:.0f} simulated) | < 10 s | {'yes' if secs < 10 else 'NO'} |")
PY
