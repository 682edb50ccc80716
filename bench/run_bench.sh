#!/usr/bin/env bash
# run_bench.sh: builds bench_simulate (Release) and prints the speed-target table of docs/perf/simulate.md.
#
# usage: bench/run_bench.sh [TABLE_FILE] [extra bench_simulate flags...]
#   BUILD_DIR  build directory (default: <repo>/build-bench; anything under build-*/ is git-ignored)
#   TRAINPLAN_BENCH_STRICT=1  exit 1 when a target fails (default: always exit 0 once the table is printed)
# The table goes to stdout and, when TABLE_FILE is given, to that file too. The raw Google Benchmark JSON is
# kept next to the binary ($BUILD_DIR/bench_simulate.json).
# Targets (from the issue): 175B on 1536 GPUs < 20 ms, 1T on 3072 GPUs < 100 ms, 175B on 1024 GPUs in
# full-cluster mode < 10 s; symmetry series: the 9984-GPU case at most 2x the 128-GPU case; a 405B model with
# cp 2, tp 8 and 16 uneven pipeline stages on 16,384 GPUs < 100 ms; a layout that is not symmetric (2:1
# oversubscribed fabric, every rank simulated): dp 16384 at most 32x dp 1024 (about linear in dp).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
src="$(cd "$here/.." && pwd)"
build="${BUILD_DIR:-$src/build-bench}"
table_file="${1:-}"
[[ $# -gt 0 ]] && shift

command -v python3 >/dev/null || { echo "run_bench.sh: python3 is needed to read the benchmark JSON" >&2; exit 2; }

cmake -S "$src" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTRAINPLAN_TESTS=OFF -DTRAINPLAN_BENCH=ON >/dev/null
cmake --build "$build" --target bench_simulate >/dev/null
bin="$build/bench/bench_simulate"
[[ -x "$bin" ]] || { echo "run_bench.sh: $bin was not built (is Google Benchmark installed? find_package(benchmark))" >&2; exit 2; }

json="$build/bench_simulate.json"
echo "load before: $(uptime)" >&2
"$bin" --benchmark_filter='^BM_Simulate/' --benchmark_repetitions=3 --benchmark_report_aggregates_only=true \
       --benchmark_out="$json" --benchmark_out_format=json "$@" >&2
echo "load after:  $(uptime)" >&2

table="$(python3 - "$json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
med = {}
for b in d["benchmarks"]:
    if b.get("aggregate_name") != "median" or not b["name"].startswith("BM_Simulate/"):
        continue
    name = b["run_name"].split("/", 1)[1]
    scale = {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}[b["time_unit"]]
    med[name] = (b["real_time"] * scale, int(b.get("gpus", 0)), b.get("full_cluster", 0) >= 0.5)

rows = [  # scenario, mode, target ms (None: no fixed target)
    ("gpt3-175b-1536", "representative", 20.0),
    ("megatron-1t-3072", "representative", 100.0),
    ("gpt3-175b-1024-full", "full-cluster", 10000.0),
    ("symmetry-gpt3-13b-128", "representative", None),
    ("symmetry-gpt3-13b-1024", "representative", None),
    ("symmetry-gpt3-13b-9984", "representative", None),
    ("gpt3-175b-1024-offload", "representative", None),
    ("optimus-2d-frontera-64", "representative", None),
    ("lga-mpp-gpt3-175b-1024", "representative", None),
    ("llama3-405b-cp2-uneven-16384", "representative", 100.0),
    ("oversubscribed-dp-1024", "representative", None),
    ("oversubscribed-dp-16384", "representative", None),
]
out = []
hdr = ("scenario", "GPUs", "mode", "median ms", "target ms", "result")
lines = []
failed = False
for name, mode, target in rows:
    if name not in med:
        lines.append((name, "?", mode, "missing", "-" if target is None else f"{target:g}", "FAIL"))
        failed = failed or target is not None
        continue
    ms, g, ran_full = med[name]
    if ran_full and mode != "full-cluster":
        mode = "full (fallback!)"  # the symmetric mode refused this layout: the speed is not representative-mode speed
    if target is None:
        res = "-"
    else:
        res = "pass" if ms < target else f"FAIL (x{ms / target:.2f})"
        failed = failed or ms >= target
    lines.append((name, str(g), mode, f"{ms:.3f}", "-" if target is None else f"{target:g}", res))
a, b = "symmetry-gpt3-13b-9984", "symmetry-gpt3-13b-128"
if a in med and b in med:
    r = med[a][0] / med[b][0]
    ok = r <= 2.0
    failed = failed or not ok
    lines.append(("symmetry ratio 9984/128", "-", "representative", f"ratio {r:.2f}", "ratio <= 2",
                  "pass" if ok else "FAIL"))
a, b = "oversubscribed-dp-16384", "oversubscribed-dp-1024"
if a in med and b in med:  # not symmetric: every rank runs; linear in dp is 16x, the old dp^2 cost was ~100x
    r = med[a][0] / med[b][0]
    ok = r <= 32.0
    failed = failed or not ok
    lines.append(("dp scaling ratio 16384/1024", "-", "full (not symmetric)", f"ratio {r:.2f}", "ratio <= 32",
                  "pass" if ok else "FAIL"))
w = [max(len(str(x[i])) for x in [hdr] + lines) for i in range(len(hdr))]
fmt = lambda r: "| " + " | ".join(str(c).ljust(w[i]) for i, c in enumerate(r)) + " |"
print(fmt(hdr))
print("|" + "|".join("-" * (x + 2) for x in w) + "|")
for l in lines:
    print(fmt(l))
print("RESULT: " + ("some targets FAILED" if failed else "all targets pass"))
PY
)"
echo "$table"
[[ -n "$table_file" ]] && printf '%s\n' "$table" > "$table_file"
if [[ "${TRAINPLAN_BENCH_STRICT:-0}" == 1 ]] && grep -q "FAIL" <<<"$table"; then exit 1; fi
exit 0
