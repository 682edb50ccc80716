#!/usr/bin/env bash
# run_fit_bench.sh: how long `trainplan fit` takes (docs/fit.md), as a table: the frameworks set's DeepSpeed rows
# (17 runs) and its FSDP rows (72 runs, some of 512 GPUs with pipelines), each fitted with leave-one-out on
# 1 and 2 threads; wall and user seconds per fit, the runs and the fitted values' mean error after the fit. Every
# evaluation of the fit simulates every run, so the time follows the runs' simulation cost.
#
# usage: bench/run_fit_bench.sh          (about 4 minutes on 2 cores)
#   BUILD_DIR  build directory (default: <repo>/build)
# Writes its files under $BUILD_DIR/fit-bench/.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
src="$(cd "$here/.." && pwd)"
build="${BUILD_DIR:-$src/build}"
bin="$build/cli/trainplan"
out="$build/fit-bench"
mkdir -p "$out"
[[ -x "$bin" ]] || { echo "run_fit_bench.sh: $bin not built (bash scripts/build.sh)" >&2; exit 2; }
set_file="$src/data/validation/frameworks-set.json"

printf '%-12s %7s %5s %9s %9s  %s\n' framework threads runs "wall (s)" "user (s)" "errors (fit's own line)"
for fw in deepspeed fsdp; do
  for th in 1 2; do
    log="$out/$fw-$th.log"
    /usr/bin/env time -f '%e %U' -o "$out/time" "$bin" fit "$set_file" --framework "$fw" --threads "$th" \
      --out "$out/$fw.json" >"$log" 2>&1
    read -r wall user <"$out/time"
    runs=$(grep -m1 -o 'on [0-9]* runs' "$log" | awk '{print $2}' || true)
    after=$(grep -m1 -i 'mean |error|' "$log" | sed 's/^ *//' || true)
    printf '%-12s %7s %5s %9s %9s  %s\n' "$fw" "$th" "$runs" "$wall" "$user" "$after"
  done
done
