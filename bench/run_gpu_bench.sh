#!/usr/bin/env bash
# run_gpu_bench.sh: the single-GPU training benchmark of issue 11. Trains GPT-2's shapes (124M: 12 layers, hidden
# 768, 12 heads; also with full recompute, with sequence 2048, 350M: 24 layers, hidden 1024, and 1.5B: 48 layers,
# hidden 1600, 25 heads, the issue's target model, in bf16 with flash only; vocabulary 50304) with `trainplan run
# --backend cuda` in fp32 (the first also with TF32 GEMMs, TP_CUDA_TF32=1; the first, the 350M and the 1.5B with
# training.precision "bf16": bf16 GEMM operands on tensor cores, the saved activations and the weights' copies in
# bf16, the other tensors in fp32), and prints one table
# row each: median step time over the steps after the first two (warm-up), tokens/s, achieved model TFLOP/s (the
# executor's own count, as Megatron-LM's log line), the peak device memory the backend allocated, the simulator's
# step time and tensor memory for the same scenario beside them (on the catalog's cluster of the GPU: h200-single
# on an H200, dgx-h100 otherwise), and MFU against that GPU's fp32 peak, or its dense bf16 peak for the bf16 rows
# (models/catalog/gpus.json). The bf16 rows are not all of the issue's bf16 mixed precision: the tensors between ops
# and the gradients are fp32, so the element-wise ops run at fp32's width; the table says so. Where there is no
# CUDA device it prints
# "no device" and exits 0; it never prints a number that was not measured.
# usage: bench/run_gpu_bench.sh     BUILD_DIR (default <repo>/build)   STEPS (default 8)   OUT_DIR for the run JSONs
#        VARIANTS=MODE (fp32 or tf32): the first model's MODE also as MODE+heur (TP_CUDA_GEMM_TUNE=0: cuBLASLt's first heuristic
#        algorithm instead of the fastest of its first 8, gemm_lt.cpp) and MODE+nocache (TP_CUDA_CACHE=0: every
#        tensor through cudaMalloc / cudaFree, backend_cuda.cpp)   PROFILE=1: op profiles (below), of the modes in
#        PROFILE_MODES (default: every mode of the first model), PROFILE_STEPS steps (default 4), GEMM tuning
#        PROFILE_TUNE (default 2: tuned, candidates on stderr; 0: no tuning, so the first step is not inflated),
#        PROFILE_MODEL (default: the first model; another must be among those run, e.g. gpt2-1.5b with
#        PROFILE_MODES=bf16+flash)
#        BENCH_CONFIGS="gpt2-124m ...": only these models; BENCH_MODES=a,b: every model's modes. The 1.5B row runs
#        only when BENCH_CONFIGS names it (BENCH_CONFIGS=gpt2-1.5b): its 1.5B fp32 master weights are initialised on
#        the host first, which the default set's time on a lent machine does not leave room for
# A mode MODE+flash runs the same scenario with plan.attention "flash" (the fused kernels of exec/kernels/k_flash.hpp,
# no [T, T] probabilities kept) instead of "unfused" (cuBLASLt GEMMs around the softmax kernels); the first model
# runs tf32+flash and bf16+flash beside its unfused rows. A mode ending in +nocopies runs with
# --no-bf16-weight-copies (each GEMM casts the fp32 weights itself): the first model's bf16+flash+nocopies row
# measures what the weights' bf16 copies save. A mode ending in +ownattn runs with TP_CUDA_ATTENTION=own: the
# bf16 flash ops on the project's own kernels instead of cuDNN's fused attention (exec/kernels/cuda/fused_attention.hpp),
# so bf16+flash against bf16+flash+ownattn measures what cuDNN's attention changes. A mode fp8... runs training.precision
# "fp8" (the emulated casts of exec/model/fp8.hpp around fp32 GEMMs: the first model's fp8+flash row, and the 1.5B's with
# BENCH_MODES=bf16+flash,fp8+flash), so fp8 against bf16 is in the table.
# Every row runs with CUDA graphs (the scenarios' plan.cuda_graphs true, --cuda-graphs auto: the step captured at the
# second step and replayed after, exec/runtime/step_graph.hpp; fp8's too since its scales live in device memory,
# exec/model/fp8.hpp); a mode ending in +nographs runs
# --cuda-graphs off, so the first model's bf16+flash against bf16+flash+nographs measures what the graphs save (a
# BASELINE_BIN's rows run a copy of the scenario without the key, which a build before it refuses).
# BASELINE_BIN=PATH (another build's trainplan with its libtrainplan_cuda.so beside it, e.g. the last commit
# measured): every row also runs with that program, just before the same row with this build's, and is printed as
# "MODE (base)": a comparison on the same machine in the same call. (A whole program, not only its library: the
# loader refuses a library of another C ABI version, exec/kernels/cuda/cuda_backend.h.)
# The PyTorch peer (issue 42): after trainplan's rows of gpt2-124m and gpt2-1.5b (PEER_CONFIGS, those among the models
# run), bench/peer_gpt2.py trains the same GPT-2 (same shapes, batch, sequence, data, AdamW settings, learning rate,
# STEPS, median after the first two steps) with PyTorch in bf16 (autocast over fp32 weights), torch.compile, causal
# F.scaled_dot_product_attention and the fused AdamW, as a row "bf16 peer"; then a side-by-side table of every bf16
# row and the peer's: tokens/s, model TFLOP/s and MFU by the project's count (Megatron-LM's, as trainplan's
# iteration line: per token 72 l h^2 + 12 l h s + 6 h V) and by llm.c's (6N + 6LCT, N every parameter), and each
# row's tokens/s over the peer's. PEER=0: no peer. PEER_COMPILE=0 (eager), 1 (whole model; the default) or blocks
# (each block compiled on its own; the 1.5B's default); a compilation that fails falls back to eager, and the row
# says so. PEER_TIMEOUT (default 300 s): the peer's run is ended after that, with no numbers. PEER_PYTHON: the Python
# with torch (default: /opt/torch/.venv/bin/python3, else python3); without torch or a CUDA device the row says
# "not run". PEER_ARGS: more arguments to peer_gpt2.py. docs/perf/gpu.md ("PyTorch peer") has the details.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$root/build}
bin="$build/cli/trainplan"
steps=${STEPS:-8}
[[ -x "$bin" ]] || { echo "run_gpu_bench.sh: $bin not built (bash scripts/build.sh)" >&2; exit 2; }
out=$("$bin" selftest --backend cuda --quick 2>&1)
rc=$?
row() { printf '| %-10s | %-9s | %-16s | %-8s | %-7s | %-18s | %s |\n' "$@"; }
row model precision "step ms (sim)" tokens/s TFLOP/s "peak GiB (sim)" "MFU / note"
printf '|%s|%s|%s|%s|%s|%s|%s|\n' "------------" "-----------" "------------------" "----------" "---------" \
  "--------------------" "----------------------------------"
if [[ $rc -eq 77 ]]; then
  row gpt2-124m - - - - - "no device: $(echo "$out" | tail -1 | sed 's/^selftest: skipped: //')"
  exit 0
fi
if [[ $rc -eq 2 ]]; then
  row gpt2-124m - - - - - "$(echo "$out" | tail -1)"
  exit 2
fi
work=${OUT_DIR:-$(mktemp -d)}
mkdir -p "$work"
rm -f "$work/side.jsonl"
gpu=$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)
echo "device: $gpu; $("$bin" --version | grep '^cuda:')" >&2
# The simulator's prediction on the catalog's cluster of this GPU (one H200: h200-single; else the H100's).
cluster=dgx-h100 gpu_key=H100-SXM-80GB; [[ $gpu == *H200* ]] && cluster=h200-single gpu_key=H200-SXM-141GB
peak=$(python3 -c "import json;print(json.load(open('$root/models/catalog/gpus.json'))['$gpu_key']['matrix_flops_per_s']['fp32'])")
peak_bf16=$(python3 -c "import json;print(json.load(open('$root/models/catalog/gpus.json'))['$gpu_key']['matrix_flops_per_s']['bf16'])")
# name, layers, hidden, heads, sequence, micro-batch (= global batch), recompute, modes
configs=("gpt2-124m 12 768 12 1024 8 none fp32,tf32,bf16,tf32+flash,bf16+flash,bf16+flash+nographs,bf16+flash+nocopies,fp8+flash"
         "gpt2-124m-rc 12 768 12 1024 8 full fp32" "gpt2-124m-s2k 12 768 12 2048 4 none fp32"
         "gpt2-350m 24 1024 16 1024 4 none fp32,bf16" "gpt2-1.5b 48 1600 25 1024 8 none bf16+flash")
if [[ -n "${BENCH_MODES:-}" ]]; then
  for i in "${!configs[@]}"; do configs[$i]="${configs[$i]% *} $BENCH_MODES"; done
fi
# The PyTorch peer (bench/peer_gpt2.py) of one model in bf16, in this call: a row "bf16 peer" of the table, and a
# line of OUT_DIR/side.jsonl for the side-by-side table at the end.
peer_py=""
peer() {  # name layers hidden heads seq micro-batch
  local name=$1 log="$work/$1_peer.txt" comp=${PEER_COMPILE:-1} to=${PEER_TIMEOUT:-300} pk c
  [[ -z "${PEER_COMPILE:-}" && $name == gpt2-1.5b ]] && comp=blocks  # regional compilation: 1 block's compile, not 48
  if [[ -z $peer_py ]]; then  # the first Python with torch (the GPU image keeps it in /opt/torch/.venv)
    peer_py=python3
    for c in ${PEER_PYTHON:-} /opt/torch/.venv/bin/python3 python3; do
      "$c" -c 'import torch' 2>/dev/null && { peer_py=$c; break; }
    done
  fi
  pk=$(python3 -c "print($peak_bf16 / 1e12)")
  # shellcheck disable=SC2086  # PEER_ARGS: more arguments, split (e.g. "--device cpu" to check the plumbing)
  timeout -k 10 "$to" "$peer_py" "$root/bench/peer_gpt2.py" --name "$name" --layers "$2" --hidden "$3" --heads "$4" \
    --seq "$5" --batch "$6" --steps "$steps" --lr 1e-4 --precision bf16 --compile "$comp" --peak-tflops "$pk" \
    ${PEER_ARGS:-} >"$log" 2>&1
  local rc=$?
  if [[ $rc -eq 124 || $rc -eq 137 ]]; then row "$name" "bf16 peer" - - - - "timed out after $to s (PEER_TIMEOUT)"
  elif [[ $rc -ne 0 ]]; then row "$name" "bf16 peer" - - - - "failed (exit $rc): $(tail -1 "$log")"
  else python3 "$root/bench/peer_gpt2.py" --row "$log" --side "$work/side.jsonl" --name "$name"; fi
}
for cfg in "${configs[@]}"; do
  read -r name layers hidden heads seq mb rc_mode modes <<<"$cfg"
  [[ -n "${BENCH_CONFIGS:-}" && " $BENCH_CONFIGS " != *" $name "* ]] && continue
  [[ $name == gpt2-1.5b && " ${BENCH_CONFIGS:-} " != *" $name "* ]] && continue  # (asked for by name only)
  for prec in fp32 bf16 fp8; do
  [[ $prec != fp32 && $modes != *$prec* ]] && continue
  sc="$work/$name.json"; [[ $prec != fp32 ]] && sc="$work/$name-$prec.json"
  graphs=', "cuda_graphs": true'
  cat >"$sc" <<JSON
{
  "name": "bench-$name-1gpu",
  "about": "GPT-2's shapes on one GPU (run_gpu_bench.sh); byte tokens of the bundled corpus in a 50304 vocabulary.",
  "model": {"name": "$name", "layers": $layers, "hidden": $hidden, "heads": $heads, "vocab": 50304, "seq_len": $seq,
            "activation": "gelu", "tied_embeddings": true, "dropout": false},
  "cluster": "$cluster",
  "training": {"global_batch": $mb, "seq_len": $seq, "precision": "$prec"},
  "plan": {"attention": "unfused", "dp": 1, "tp": 1, "pp": 1, "microbatch": $mb, "recompute": "$rc_mode"$graphs}
}
JSON
  # The simulator's prediction for the same scenario (fp32; a TF32 row shares it): step time, and the device
  # memory of tensors (weights, gradients, optimizer state, activations, buffers; not the framework's context).
  "$bin" simulate "$sc" --quiet --json "${sc%.json}.sim.json" >/dev/null 2>&1 || echo '{}' >"${sc%.json}.sim.json"
  fl="${sc%.json}-flash.json"
  sed 's/"attention": "unfused"/"attention": "flash"/' "$sc" >"$fl"
  "$bin" simulate "$fl" --quiet --json "${fl%.json}.sim.json" >/dev/null 2>&1 || echo '{}' >"${fl%.json}.sim.json"
  done
  [[ -n "${VARIANTS:-}" && $cfg == "${configs[0]}" ]] &&
    modes=$(echo "$modes" | sed -E "s/(^|,)($VARIANTS)(,|$)/\1\2,\2+heur,\2+nocache\3/")
  for mode in ${modes//,/ }; do
    env=(); [[ $mode == tf32* ]] && env=(TP_CUDA_TF32=1)
    sc="$work/$name.json"; [[ $mode == bf16* ]] && sc="$work/$name-bf16.json"; [[ $mode == fp8* ]] && sc="$work/$name-fp8.json"
    [[ $mode == *+flash* ]] && sc="${sc%.json}-flash.json"
    [[ $mode == *+heur ]] && env+=(TP_CUDA_GEMM_TUNE=0)
    [[ $mode == *+nocache ]] && env+=(TP_CUDA_CACHE=0)
    [[ $mode == *+ownattn ]] && env+=(TP_CUDA_ATTENTION=own)
    for prog in ${BASELINE_BIN:+base} this; do
    tag=$mode; label=$mode; exe=$bin
    [[ $prog == base ]] && tag="$mode.base" label="$mode (base)" exe=$BASELINE_BIN
    args=(); [[ $mode == *+nocopies ]] && args=(--no-bf16-weight-copies)
    [[ $mode == *+nographs && $prog != base ]] && args+=(--cuda-graphs off)  # (a base build may predate the option)
    log="$work/${name}_$tag.txt"
    run_sc=$sc  # (a base build may predate plan.cuda_graphs: its copy of the scenario has no such key)
    if [[ $prog == base ]]; then run_sc="${sc%.json}.base.json"; sed 's/, "cuda_graphs": true//' "$sc" >"$run_sc"; fi
    env "${env[@]}" "$exe" run "$run_sc" --backend cuda --steps "$steps" --lr 1e-4 "${args[@]}" \
      --json "$work/${name}_$tag.json" >"$log" 2>&1
    rc=$?
    if [[ $rc -ne 0 ]]; then row "$name" "$label" - - - - "failed (exit $rc): $(tail -1 "$log")"; continue; fi
    python3 - "$work/${name}_$tag.json" "$log" "$label" "$peak" "${sc%.json}.sim.json" "$name" "$peak_bf16" \
      "$work/side.jsonl" <<'PY'
import json, re, statistics, sys
r = json.load(open(sys.argv[1])); log = open(sys.argv[2]).read(); mode = sys.argv[3]; peak = float(sys.argv[4])
sim = json.load(open(sys.argv[5]))
sim_ms = "%.1f" % (1e3 * sim["step_time_s"]) if "step_time_s" in sim else "-"
sim_gib = ("%.2f" % (sum(v for k, v in sim["memory"]["breakdown_bytes"].items() if k != "framework") / 2**30)
           if "memory" in sim else "-")
dev_gib = r["peak_memory_bytes"][0] / 2**30
t = r["step_time_s"][2:] or r["step_time_s"]
tf = [float(x) for x in re.findall(r"TFLOP/s/GPU\): ([0-9.]+)", log)][2:]
med = statistics.median(t); tflops = statistics.median(tf) if tf else float("nan")
tok = r["scenario"]["training"]["global_batch"] * r["scenario"]["training"]["seq_len"] / med
pbf = float(sys.argv[7])
note = ("%.1f %% of the fp32 peak (%.1f TFLOP/s)" % (100 * tflops * 1e12 / peak, peak / 1e12) if mode.startswith("fp32")
        else "MFU %.1f %% of the dense bf16 peak (%.1f TFLOP/s); bf16 GEMMs, saved activations and weight copies, "
        "fp32 tensors between ops (sim: bf16 storage)"
        % (100 * tflops * 1e12 / pbf, pbf / 1e12) if mode.startswith("bf16")
        else "MFU %.1f %% of the dense bf16 peak; cuBLASLt fp8 GEMMs where the GPU and shapes take them (else fp32 "
        "GEMMs on the casts), each cast's amax kept on the device" % (100 * tflops * 1e12 / pbf) if mode.startswith("fp8")
        else "TF32 GEMMs; H100/H200 SXM dense TF32 peak 494.7 TFLOP/s (datasheet)")
gs = r.get("graph_steps") or []  # (--cuda-graphs: the step captured; a base build's JSON has none)
note += "; CUDA graph captured at step %d, replayed after" % (gs[0] + 1) if gs else "; no CUDA graph"
losses = r.get("losses") or []
if losses:
    note += "; loss %.4f -> %.4f (max %.4f)" % (losses[0], losses[-1], max(losses))
print("| %-10s | %-9s | %-16s | %-8.0f | %-7.1f | %-18s | %s |" % (sys.argv[6], mode, "%.1f (%s)" % (med * 1e3, sim_ms),
      tok, tflops, "%.2f (%s)" % (dev_gib, sim_gib), note))
if mode.startswith("bf16"):  # for the side-by-side table with the PyTorch peer
    m = r["scenario"]["model"]
    with open(sys.argv[8], "a") as f:
        f.write(json.dumps({"name": sys.argv[6], "program": "trainplan " + mode, "layers": m["layers"],
                            "hidden": m["hidden"], "vocab": m["vocab"], "seq_len": r["scenario"]["training"]["seq_len"],
                            "median_step_s": med, "tokens_per_s": tok, "peak_tflops": pbf / 1e12}) + "\n")
PY
    done
  done
  [[ "${PEER:-1}" != 0 && " ${PEER_CONFIGS:-gpt2-124m gpt2-1.5b} " == *" $name "* ]] &&
    peer "$name" "$layers" "$hidden" "$heads" "$seq" "$mb"
done
# Side by side, when the peer ran: each bf16 row of trainplan and the peer's, model TFLOP/s and MFU by both counts.
grep -qs '"pytorch' "$work/side.jsonl" && python3 "$root/bench/peer_gpt2.py" --table "$work/side.jsonl"
# PROFILE=1: where a step's GPU time goes. One more run per mode of the first model (or PROFILE_MODEL), 4 steps, with
# the CUDA backend's op profile (TP_CUDA_PROFILE: GPU time between events around each op; exec/kernels/cuda/op_profile.hpp),
# printed after the table and kept as OUT_DIR/<model>_<mode>.prof.txt. Not part of the timed runs above.
if [[ "${PROFILE:-0}" == 1 ]]; then
  pcfg=${configs[0]}
  for cfg in "${configs[@]}"; do [[ ${cfg%% *} == "${PROFILE_MODEL:-}" ]] && pcfg=$cfg; done
  read -r name _ _ _ _ _ _ modes <<<"$pcfg"
  for mode in ${PROFILE_MODES:-${modes//,/ }}; do
    env=(TP_CUDA_PROFILE="$work/${name}_$mode.prof.txt" TP_CUDA_GEMM_TUNE="${PROFILE_TUNE:-2}")  # 2: candidates on stderr
    [[ $mode == tf32* ]] && env+=(TP_CUDA_TF32=1)
    [[ $mode == *+ownattn ]] && env+=(TP_CUDA_ATTENTION=own)
    sc="$work/$name.json"; [[ $mode == bf16* ]] && sc="$work/$name-bf16.json"
    [[ $mode == *+flash* ]] && sc="${sc%.json}-flash.json"
    args=(); [[ $mode == *+nocopies ]] && args=(--no-bf16-weight-copies)
    [[ $mode == *+nographs && $prog != base ]] && args+=(--cuda-graphs off)
    echo; echo "$name $mode:"
    env "${env[@]}" "$bin" run "$sc" --backend cuda --steps "${PROFILE_STEPS:-4}" --lr 1e-4 "${args[@]}" --quiet >/dev/null \
      2>"$work/${name}_$mode.prof.err" && cat "$work/${name}_$mode.prof.txt" || echo "profiled run failed"
  done
fi
