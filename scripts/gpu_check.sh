#!/usr/bin/env bash
# gpu_check.sh: the first thing to run on a machine with an NVIDIA GPU (issue 11). Builds trainplan with the
# CUDA library (-DTRAINPLAN_CUDA=ON), prints --version, runs `selftest --backend cuda` (every op against the
# CPU float64 reference), a short training run on cuda compared with the cpu backend's losses, every plan kind
# the backend runs against the cpu losses (scripts/gpu_plans.py; several ranks under mpirun), and
# compute-sanitizer's memcheck, racecheck, initcheck and synccheck on the quick selftest (every kernel and
# cuBLASLt path on tiny shapes), and racecheck on one bf16 + flash training step, when compute-sanitizer is
# installed; a failing tool's row names the kernels its reports point at. Prints one summary table.
# Writes logs under $BUILD_DIR/gpu-check/.
#
# usage: scripts/gpu_check.sh            BUILD_DIR (default <repo>/build-gpu)   SKIP_BUILD=1 to reuse a build
#                                        SANITIZER_TOOLS (default all four; none: skip)   SANITIZER_TIMEOUT_S (default 300)
#                                        ONLY=sanitizers: the sanitizer steps alone (a short second look at the kernels)
# Exit: 0 every step passed (or was skipped for a stated reason), 1 a step failed, 77 no CUDA device here.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$root/build-gpu}
logs="$build/gpu-check"
if [[ "${SKIP_BUILD:-0}" != 1 ]]; then
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTRAINPLAN_CUDA=ON >/dev/null || exit 1
  ninja -C "$build" trainplan || exit 1
fi
mkdir -p "$logs"
bin="$build/cli/trainplan"
declare -a rows=()
failed=0
row() { rows+=("$(printf '| %-22s | %-8s | %s |' "$1" "$2" "$3")"); [[ "$2" == FAIL ]] && failed=1; return 0; }

"$bin" --version | tee "$logs/version.txt"
if [[ "${ONLY:-}" == sanitizers ]]; then
  out=$("$bin" selftest --backend cuda --quick 2>&1)
  [[ $? -eq 77 ]] && { echo "gpu_check.sh: $(echo "$out" | tail -1)"; echo "no device: nothing to check here"; exit 77; }
else
# TP_CUDA_SYNC=1: a fault is reported by the op that caused it, not by a later one.
TP_CUDA_SYNC=1 "$bin" selftest --backend cuda --json "$logs/selftest.json" >"$logs/selftest.txt" 2>&1
rc=$?
summary=$(grep -E "passed, [0-9]+ failed" "$logs/selftest.txt" | tail -1)
case $rc in
  0) row "selftest --backend cuda" ok "$summary" ;;
  77) echo "gpu_check.sh: $(tail -1 "$logs/selftest.txt")"; echo "no device: nothing to check here"; exit 77 ;;
  *) row "selftest --backend cuda" FAIL "exit $rc: ${summary:-see $logs/selftest.txt}" ;;
esac

# A short training run on the GPU against the CPU backend's float32 run of the same scenario: the losses agree
# to 1e-3 relative (both fp32; cuBLASLt without TF32 sums in another order than Eigen).
run_tiny() {  # backend, output json
  "$bin" run "$root/scenarios/exec/tiny-gpt.json" --backend "$1" --steps 3 --quiet --json "$2" >"${2%.json}.txt" 2>&1
}
TP_CUDA_SYNC=1 run_tiny cuda "$logs/run_cuda.json"
rc=$?
if [[ $rc -ne 0 ]]; then row "run tiny-gpt (3 steps)" FAIL "exit $rc: $(tail -1 "$logs/run_cuda.txt")"
elif ! run_tiny cpu "$logs/run_cpu.json"; then row "run tiny-gpt (3 steps)" FAIL "the cpu reference run failed: $logs/run_cpu.txt"
else
  cmp=$(python3 - "$logs/run_cuda.json" "$logs/run_cpu.json" <<'PY' 2>&1
import json, sys
g, w = (json.load(open(f))["losses"] for f in sys.argv[1:3])
err = max(abs(a - b) / abs(b) for a, b in zip(g, w)) if len(g) == len(w) and g else float("inf")
print(("ok" if err <= 1e-3 else "FAIL") + " losses cuda %s vs cpu %s, max rel diff %.2e" % (g, w, err))
PY
)
  case $cmp in ok*) row "run tiny-gpt (3 steps)" ok "${cmp#ok }" ;; *) row "run tiny-gpt (3 steps)" FAIL "${cmp#FAIL }" ;; esac
fi
# Out of device memory: GPT-2 124M's shape at micro-batch 128 in fp32 with unfused attention needs about 170 GiB
# of activations, more than any GPU has; run must exit 2 naming the simulator's predicted breakdown.
sed -e 's/"layers": 4, "hidden": 64, "heads": 4, "vocab": 256, "seq_len": 32/"layers": 12, "hidden": 768, "heads": 12, "vocab": 50304, "seq_len": 1024/' \
    -e 's/"global_batch": 8, "seq_len": 32/"global_batch": 128, "seq_len": 1024/' -e 's/"microbatch": 2/"microbatch": 128/' \
    "$root/scenarios/exec/tiny-gpt.json" >"$logs/oom.json"
"$bin" run "$logs/oom.json" --backend cuda --steps 1 --quiet >"$logs/oom.txt" 2>&1
rc=$?
if [[ $rc -eq 2 ]] && grep -q "The simulator predicts" "$logs/oom.txt"; then
  row "out of device memory" ok "exit 2: $(grep -o 'after allocating [0-9.]* [GM]iB' "$logs/oom.txt"), $(grep -o 'predicts [0-9.]* [GM]iB' "$logs/oom.txt")"
else row "out of device memory" FAIL "exit $rc: $(tail -1 "$logs/oom.txt" | cut -c1-200)"; fi

# Every plan kind the cuda backend runs (offloads, delinking, dp / ZeRO / tp+sp / pp / 2D under mpirun, with
# host staging), each against the cpu backend's losses; cp and MoE must be refused (scripts/gpu_plans.py).
mpi=$(command -v mpirun || true)
python3 "$root/scripts/gpu_plans.py" "$bin" "$root" "$logs/plans" $mpi >"$logs/plans.txt" 2>&1
rc=$?
while IFS= read -r line; do
  IFS='|' read -r _ name state detail _ <<<"$line"
  [[ -n "${state// /}" ]] && row "plan ${name// /}" "${state// /}" "$(echo "$detail" | sed 's/^ *//;s/ *$//')"
done < <(grep '^|' "$logs/plans.txt")
[[ $rc -ne 0 && -z "$(grep '^|' "$logs/plans.txt")" ]] && row "plans" FAIL "exit $rc: $(tail -1 "$logs/plans.txt")"
fi

cs=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null || true)
# One bf16 + flash training step of the tiny GPT (the tensor-core flash kernels, partial tiles included): the
# racecheck target besides the quick selftest, which runs out of time before its flash ops.
python3 - "$root/scenarios/exec/tiny-gpt.json" "$logs/tiny-bf16-flash.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
d.setdefault("training", {})["precision"] = "bf16"
d.setdefault("plan", {})["attention"] = "flash"
json.dump(d, open(sys.argv[2], "w"))
PY
sanitize() {  # tool, row name, what, command...
  local tool=$1 name=$2 what=$3; shift 3
  timeout "${SANITIZER_TIMEOUT_S:-300}" "$cs" --tool "$tool" --error-exitcode 9 "$@" >"$logs/$name.txt" 2>&1
  local rc=$? errs top
  errs=$(grep -Eo "ERROR SUMMARY: [0-9]+ error" "$logs/$name.txt" | tail -1)
  # the reports' kernels, most frequent first (among the printed reports)
  top=$(grep -E "^=========     at " "$logs/$name.txt" | sed -E 's/^=========     at (void )?//; s/\+0x[0-9a-f]+.*//; s/\([^()]*\)$//' |
        sort | uniq -c | sort -rn | head -3 | awk '{c=$1; $1=""; sub(/^ /, ""); printf "%s%s x%s", (NR>1?"; ":""), $0, c}')
  if [[ $rc -eq 0 ]]; then row "sanitizer $name" ok "${errs:-no errors} ($what)"
  else row "sanitizer $name" FAIL "exit $rc, ${errs:-see $logs/$name.txt}${top:+; in: $top}"; fi
}
for tool in ${SANITIZER_TOOLS:-memcheck racecheck initcheck synccheck}; do
  [[ $tool == none ]] && continue  # (SANITIZER_TOOLS=none: no sanitizer step)
  if [[ -z "$cs" ]]; then row "sanitizer $tool" skipped "compute-sanitizer not installed"; continue; fi
  sanitize "$tool" "$tool" "selftest --quick" "$bin" selftest --backend cuda --quick
  [[ $tool == racecheck ]] && sanitize racecheck racecheck-flash "one bf16 + flash step" \
    "$bin" run "$logs/tiny-bf16-flash.json" --backend cuda --steps 1 --quiet
done

echo
printf '| %-22s | %-8s | %s |\n' step result detail
printf '|%s|%s|%s|\n' "------------------------" "----------" "----------------------------------------"
printf '%s\n' "${rows[@]}"
echo "logs: $logs"
exit $failed
