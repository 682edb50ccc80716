#!/usr/bin/env bash
# gpu_bundle.sh: runs scripts/gpu_check.sh and bench/run_gpu_bench.sh on a GPU machine that has the NVIDIA driver
# and CUDA runtime libraries but none of trainplan's build dependencies (no Boost, Eigen or Open MPI: a cloud GPU
# image), from binaries built elsewhere (x86-64, glibc >= the build machine's).
#   pack BUILD_DIR DEST   (on the build machine) copies cli/trainplan, libtrainplan_cuda.so, the shared libraries
#                         trainplan needs beyond glibc and libstdc++, the catalog, and Open MPI's runtime (mpirun, its plugins,
#                         PMIx, their libraries) into DEST (about 40 MB).
#   check DEST [OUT]      (on the GPU machine) puts Open MPI's runtime at the paths it was built for when the machine
#                         has no mpirun (only paths that do not exist yet), then runs run_gpu_bench.sh and
#                         gpu_check.sh on the bundle; with OUT, writes OUT/bench.txt, OUT/check.txt and
#                         OUT/gpu-check.tgz (every log).
#   bench DEST [OUT]      the same, the benchmark only (SKIP_BENCH=1: check without the benchmark).
#   offload DEST [OUT]    (on the GPU machine) bench/gpu_offload_scale.py: the largest model under a 16 GiB
#                         --gpu-memory-budget with chunked offload against without (issue 41; OFFLOAD_ARGS: more
#                         arguments); OUT/offload.txt and its logs in OUT/gpu-check.tgz.
#   validate DEST [OUT]   (on the GPU machine) bench/gpu_validate.py: calibrate --backend cuda, then validate --backend
#                         cuda on single-GPU plans (recompute modes, optimizer and chunked offload) against the 5 %
#                         targets (issue 41; VALIDATE_ARGS: more arguments); OUT/validate.txt, logs in OUT/gpu-check.tgz.
#   run DEST CMD...       (on the GPU machine) CMD under the bundle's environment (its libraries, cuDNN's, Open MPI),
#                         e.g. `run .gpub .gpub/cli/trainplan selftest --backend cuda`.
#   session DEST OUT      (on the GPU machine) the one prepared script for a lent GPU (issue 41: about 8 minutes,
#                         nothing built there): selftest first (a machine without a device stops here, exit 77), then
#                         check (SKIP_BENCH, no sanitizers), validate, the NCCL pair (calibrate and validate of a dp 2
#                         plan under mpirun with --comm nccl: refused in one line where NCCL cannot put two ranks on
#                         one GPU), offload and the benchmark (BENCH_CONFIGS, default gpt2-124m and gpt2-1.5b), each
#                         under `timeout` within SESSION_BUDGET_S (default 480) seconds in all; OUT/session.txt says
#                         what ran, for how long and how it ended.
# BASELINE_BUILD=DIR at pack: another build directory's trainplan and libtrainplan_cuda.so go into the bundle
# (DEST/baseline/cli/, with the catalog; built on this machine, so the bundle's libraries serve it too), and the
# benchmark runs every row with that program too, just before this build's (run_gpu_bench.sh's BASELINE_BIN): a
# before / after comparison on one machine in one call.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
mode=${1:-}

pack() {
  local build=$1 d=$2
  rm -rf "$d"; mkdir -p "$d/cli" "$d/lib"
  cp "$build/cli/trainplan" "$d/cli/"
  cp "$build/exec/kernels/cuda/libtrainplan_cuda.so" "$d/cli/" || { echo "no CUDA library in $build" >&2; return 2; }
  # cuDNN's fused attention (loaded from beside libtrainplan_cuda.so; cuDNN itself comes from the GPU machine)
  cp "$build/exec/kernels/cuda/libtrainplan_cudnn.so" "$d/cli/" 2>/dev/null ||
    echo "gpu_bundle.sh: no libtrainplan_cudnn.so in $build: the bundle runs the own flash kernels" >&2
  cp -r "$root/models/catalog" "$d/cli/catalog"  # found beside the program (models/catalog.cpp)
  if [[ -n "${BASELINE_BUILD:-}" ]]; then
    mkdir -p "$d/baseline/cli" && cp "$BASELINE_BUILD/cli/trainplan" "$BASELINE_BUILD/exec/kernels/cuda/libtrainplan_cuda.so" \
      "$d/baseline/cli/" && cp -r "$root/models/catalog" "$d/baseline/cli/catalog" || return 2
    cp "$BASELINE_BUILD/exec/kernels/cuda/libtrainplan_cudnn.so" "$d/baseline/cli/" 2>/dev/null || true
  fi
  local ompi=/usr/lib/x86_64-linux-gnu/openmpi pmix=/usr/lib/x86_64-linux-gnu/pmix2
  local files=("$d/cli/trainplan" "$(readlink -f /usr/bin/orterun)" "$ompi"/lib/openmpi3/*.so "$pmix"/lib/pmix/*.so
               /usr/lib/x86_64-linux-gnu/libpmix.so.2)
  # Every library these load, except the C library, the C++ runtime and the loader (the GPU machine has its own).
  for f in "${files[@]}"; do ldd "$f" 2>/dev/null | awk '/=>/ && $3 != "" {print $3}'; done | sort -u |
    grep -Ev '/(libc|libm|libdl|librt|libpthread|libstdc\+\+|libgcc_s|ld-linux[^/]*)\.so' |
    while read -r lib; do cp -L "$lib" "$d/lib/"; done
  tar -C / -czf "$d/ompi-runtime.tgz" usr/bin/orterun "${ompi#/}" "${pmix#/}" usr/share/openmpi etc/openmpi \
    $(cd / && ls -d usr/share/pmix 2>/dev/null)
  du -sh "$d"
}

# The GPU machine's environment for the bundle in $1: CUDA libraries, the bundle's, and Open MPI (installed from
# the bundle when the machine has none).
setup() {
  local d=$1
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
  # The CUDA libraries (cuBLASLt) where a CUDA image keeps them, then the bundle's own.
  local cudalibs
  # cuDNN where a CUDA image keeps it, or PyTorch's wheels do (nvidia-cudnn-cu13), for the fused attention.
  cudalibs=$(ls -d /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib \
             /opt/torch/.venv/lib/python3*/site-packages/nvidia/cu13/lib \
             /opt/torch/.venv/lib/python3*/site-packages/nvidia/cudnn/lib 2>/dev/null | tr '\n' ':')
  export LD_LIBRARY_PATH="${cudalibs}${LD_LIBRARY_PATH:-}"
  # NCCL for --comm nccl (dlopened by libtrainplan_cuda.so): the machine's own where a CUDA image or PyTorch's
  # wheels (nvidia-nccl-cu13) keep it, unless TRAINPLAN_NCCL_LIB names one.
  if [[ -z "${TRAINPLAN_NCCL_LIB:-}" ]]; then
    local nccl
    nccl=$(ls /usr/lib/x86_64-linux-gnu/libnccl.so.2 /usr/local/cuda/lib64/libnccl.so.2 \
           /opt/torch/.venv/lib/python3*/site-packages/nvidia/nccl/lib/libnccl.so.2 \
           /opt/torch/.venv/lib/python3*/site-packages/nvidia/cu13/lib/libnccl.so.2 2>/dev/null | head -1)
    [[ -n $nccl ]] && export TRAINPLAN_NCCL_LIB=$nccl
  fi
  if command -v mpirun >/dev/null; then
    # The machine's own Open MPI (libmpi.so.40 is one ABI across 4.x): only what it lacks comes from the bundle, so
    # its mpirun never loads the bundle's PMIx or plugins' libraries.
    mkdir -p "$d/lib-missing"
    ldd "$d/cli/trainplan" | awk '/not found/ {print $1}' | while read -r lib; do ln -sf "$d/lib/$lib" "$d/lib-missing/"; done
    export LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$d/lib-missing"
  else
    export LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$d/lib"
    local skip=0
    for p in usr/lib/x86_64-linux-gnu/openmpi usr/lib/x86_64-linux-gnu/pmix2 usr/share/openmpi etc/openmpi; do
      [[ -e /$p ]] && skip=1
    done
    if [[ $skip == 0 ]] && tar -C / -xzf "$d/ompi-runtime.tgz"; then
      mkdir -p "$d/bin" && ln -sf /usr/bin/orterun "$d/bin/mpirun" && export PATH="$PATH:$d/bin"
    else echo "gpu_bundle.sh: Open MPI's paths exist but no mpirun: the several-rank plans are skipped" >&2; fi
  fi
  # Shared memory between the ranks of one machine, nothing that needs a fabric's libraries or ptrace.
  export OMPI_MCA_pml=ob1 OMPI_MCA_btl=self,vader OMPI_MCA_btl_vader_single_copy_mechanism=none OMPI_MCA_mtl=^ofi,psm,psm2
}

check() {
  local d; d=$(cd "$1" && pwd); local out=${2:-} only=${3:-}
  setup "$d"
  local logs=$d/gpu-check rep=${out:-$d} base=""
  mkdir -p "$logs" "$rep"
  [[ -x $d/baseline/cli/trainplan ]] && base=$d/baseline/cli/trainplan
  # The benchmark first (two short runs), then the checks; the reports go to OUT as they are written.
  [[ "${SKIP_BENCH:-0}" == 1 ]] ||
    BUILD_DIR=$d OUT_DIR=$logs/bench BASELINE_BIN=$base bash "$root/bench/run_gpu_bench.sh" 2>&1 | tee "$rep/bench.txt"
  [[ $only == bench ]] && { [[ -n "$out" ]] && tar -C "$d" -czf "$out/gpu-check.tgz" gpu-check; return 0; }
  BUILD_DIR=$d SKIP_BUILD=1 bash "$root/scripts/gpu_check.sh" 2>&1 | tee "$rep/check.txt"
  local rc=${PIPESTATUS[0]}
  [[ -n "$out" ]] && tar -C "$d" -czf "$out/gpu-check.tgz" gpu-check
  return "$rc"
}

# One of bench/gpu_*.py on the bundle (the machine set up first): SCRIPT NAME EXTRA DEST [OUT]; OUT/NAME.txt, and
# the logs in OUT/gpu-check.tgz.
pycheck() {
  local script=$1 name=$2 extra=$3 d; d=$(cd "$4" && pwd); local out=${5:-}
  setup "$d"
  local rep=${out:-$d}
  mkdir -p "$d/gpu-check" "$rep"
  # shellcheck disable=SC2086  # extra: more arguments, split
  python3 "$root/bench/$script" "$d/cli/trainplan" "$d/gpu-check/$name" --json "$d/gpu-check/$name.json" $extra 2>&1 |
    tee "$rep/$name.txt"
  local rc=${PIPESTATUS[0]}
  [[ -n "$out" ]] && tar -C "$d" -czf "$out/gpu-check.tgz" gpu-check
  return "$rc"
}

# The lent GPU's one call: each step under what is left of the budget, what ran written to OUT/session.txt.
session() {
  local d; d=$(cd "$1" && pwd); local out=${2:?OUT}
  mkdir -p "$out"
  local budget=${SESSION_BUDGET_S:-480} t0=$SECONDS log=$out/session.txt
  : >"$log"
  step() {  # NAME SECONDS CMD...: CMD under the smaller of SECONDS and what is left
    local name=$1 want=$2; shift 2
    local left=$((budget - (SECONDS - t0)))
    if ((left < 20)); then echo "$name: not run (the budget is spent)" | tee -a "$log"; return 0; fi
    ((want > left)) && want=$left
    local s0=$SECONDS rc=0
    timeout "$want" "$@" >"$out/$name.log" 2>&1 || rc=$?
    echo "$name: exit $rc after $((SECONDS - s0)) s (limit $want s)$([[ $rc == 124 ]] && echo ', timed out')" | tee -a "$log"
    return 0
  }
  local tp=$d/cli/trainplan
  ( setup "$d"; timeout 120 "$tp" selftest --backend cuda ) >"$out/selftest.log" 2>&1
  local rc=$?
  echo "selftest: exit $rc after $((SECONDS - t0)) s" | tee -a "$log"
  if [[ $rc == 77 ]]; then echo "no CUDA device: nothing else ran" | tee -a "$log"; return 77; fi
  step check 150 env SKIP_BENCH=1 bash "$root/scripts/gpu_bundle.sh" check "$d" "$out/check"
  step validate 120 bash "$root/scripts/gpu_bundle.sh" validate "$d" "$out/validate"
  local sc=$out/nccl-dp2.json mpi=(mpirun -np 2 --oversubscribe)
  [[ $(id -u) == 0 ]] && mpi+=(--allow-run-as-root)
  sed 's/"dp": 1,/"dp": 2,/' "$root/scenarios/exec/tiny-gpt.json" >"$sc"
  step nccl_calibrate 60 bash "$root/scripts/gpu_bundle.sh" run "$d" "${mpi[@]}" "$tp" calibrate --backend cuda \
    --comm nccl --quick --out "$out/nccl-node.json"
  [[ -f $out/nccl-node.json ]] &&
    step nccl_validate 60 bash "$root/scripts/gpu_bundle.sh" run "$d" "${mpi[@]}" "$tp" validate "$sc" --profile \
      "$out/nccl-node.json" --backend cuda --comm nccl --steps 3 --json "$out/nccl-validate.json"
  step offload 120 bash "$root/scripts/gpu_bundle.sh" offload "$d" "$out/offload"
  step bench 200 env BENCH_CONFIGS="${BENCH_CONFIGS:-gpt2-124m gpt2-1.5b}" bash "$root/scripts/gpu_bundle.sh" bench "$d" \
    "$out/bench"
  echo "session: $((SECONDS - t0)) s of $budget" | tee -a "$log"
}

case $mode in
  session) session "${2:?DEST}" "${3:?OUT}" ;;
  pack) pack "${2:?BUILD_DIR}" "${3:?DEST}" ;;
  check) check "${2:?DEST}" "${3:-}" ;;
  bench) check "${2:?DEST}" "${3:-}" bench ;;
  offload) pycheck gpu_offload_scale.py offload "${OFFLOAD_ARGS:-}" "${2:?DEST}" "${3:-}" ;;
  validate) pycheck gpu_validate.py validate "${VALIDATE_ARGS:-}" "${2:?DEST}" "${3:-}" ;;
  run) d=$(cd "${2:?DEST}" && pwd) && shift 2 && setup "$d" && "$@" ;;
  *) echo "usage: gpu_bundle.sh pack BUILD_DIR DEST | check DEST [OUT] | bench DEST [OUT] | offload DEST [OUT] | validate DEST [OUT] | run DEST CMD... | session DEST OUT" >&2; exit 2 ;;
esac
