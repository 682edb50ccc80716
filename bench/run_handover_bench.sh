#!/usr/bin/env bash
# run_handover_bench.sh: host memory of `trainplan run` at setup and at Pseudo-to-Real's handover, as a table:
# peak resident memory per rank (the run's peak_host_memory_bytes) of a 101M-parameter GPT (the tiny GPT widened
# to hidden 1024, 8 layers) under plans with and without a delink, beside the model's size. Setup and the
# handover hold a view, a window and a rank's own share, never the whole model (docs/perf/handover.md: results
# and the numbers before).
#
# usage: bench/run_handover_bench.sh        (needs mpirun and python3; 4 ranks, about 3 minutes on 2 cores)
#   BUILD_DIR  build directory (default: <repo>/build)
# Writes its files under $BUILD_DIR/handover-bench/.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
src="$(cd "$here/.." && pwd)"
build="${BUILD_DIR:-$src/build}"
bin="$build/cli/trainplan"
out="$build/handover-bench"
mkdir -p "$out"
[[ -x "$bin" ]] || { echo "run_handover_bench.sh: $bin not built (bash scripts/build.sh)" >&2; exit 2; }
command -v python3 >/dev/null || { echo "run_handover_bench.sh: python3 is needed" >&2; exit 2; }
command -v mpirun >/dev/null || { echo "run_handover_bench.sh: mpirun is needed" >&2; exit 2; }
root=()
[[ $(id -u) == 0 ]] && root=(--allow-run-as-root)

# The runs: name, real plan, pseudo plan (None: no delink; "same": a delink on the real plan).
python3 - "$src/scenarios/exec/tiny-gpt.json" "$out" <<'PY'
import json, sys
base = json.load(open(sys.argv[1]))
base["model"].update({"layers": 8, "hidden": 1024, "heads": 16, "vocab": 256, "seq_len": 64})
base["training"].update({"global_batch": 4, "seq_len": 64})
rows = [
    ("tp4", {"tp": 4, "microbatch": 1}, None),
    ("pp4", {"pp": 4, "microbatch": 1}, None),
    ("dp2_z1", {"dp": 2, "zero": 1, "microbatch": 1}, None),
    ("dp2_z1-from-tp2", {"dp": 2, "zero": 1, "microbatch": 1}, {"tp": 2, "microbatch": 2}),
    ("dp2_tp2_z1-from-tp2", {"dp": 2, "tp": 2, "zero": 1, "microbatch": 1}, {"tp": 2, "microbatch": 2}),
    ("pp2_dp2_z3-from-dp4_z1", {"pp": 2, "dp": 2, "zero": 3, "microbatch": 1}, {"dp": 4, "zero": 1, "microbatch": 1}),
    ("pp2", {"pp": 2, "microbatch": 1}, None),
    ("pp2-delink", {"pp": 2, "microbatch": 1}, "same"),
]
for name, real, pseudo in rows:
    s = json.loads(json.dumps(base))
    s["name"] = name
    s["plan"] = dict({"dp": 1, "tp": 1, "pp": 1}, **real)
    if pseudo is not None:
        d = {"unique_layers": 2, "tokens": 256}
        if pseudo != "same":
            d["plan"] = dict({"dp": 1, "tp": 1, "pp": 1}, **pseudo)
        s["plan"]["delink"] = d
    json.dump(s, open("%s/%s.json" % (sys.argv[2], name), "w"), indent=1)
PY

echo "machine: $(lscpu | sed -n 's/^Model name: *//p' | head -1), $(nproc) cores; load: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
printf '| %-24s | %5s | %10s | %-28s |\n' run ranks "model MB" "peak per rank MB"
printf '|%s|%s|%s|%s|\n' "--------------------------" "-------" "------------" "------------------------------"
for f in "$out"/*.json; do
  case "$f" in *.out.json) continue ;; esac
  name=$(basename "$f" .json)
  n=$(python3 -c "
import json, sys
p = json.load(open(sys.argv[1]))['plan']
g = lambda q: q.get('dp', 1) * q.get('tp', 1) * q.get('pp', 1) * q.get('cp', 1)
print(max(g(p), g(p['delink']['plan']) if 'plan' in p.get('delink', {}) else 1))" "$f")
  mpirun -np "$n" --oversubscribe "${root[@]}" "$bin" run "$f" --steps 2 --delink-step 1 --quiet \
    --json "$out/$name.out.json" >"$out/$name.log" 2>&1 || { echo "| $name | $n | run failed: $out/$name.log |"; continue; }
  python3 - "$out/$name.out.json" "$name" "$n" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
model_mb = 101099520 * 4 / 1e6
peaks = " / ".join("%.0f" % (x / 1e6) for x in r["peak_host_memory_bytes"])
print("| %-24s | %5s | %10.0f | %-28s |" % (sys.argv[2], sys.argv[3], model_mb, peaks))
PY
done
