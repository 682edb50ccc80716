#!/usr/bin/env bash
# Fuzzes the input parsers: builds the libFuzzer targets of tests/fuzz with clang++ (ASan + UBSan) in a separate
# build dir and runs each for N seconds (default 60): fuzz_scenario (the scenario loader; seeds: the bundled
# scenarios and the bad-input corpus), fuzz_report_spec (report specs; seeds: the seed and test specs) and
# fuzz_search (search blocks; seeds: the search blocks of the bundled and bad-input scenarios). Crash inputs land
# in $FUZZ_BUILD_DIR/artifacts/TARGET-*; rerun one with: build-fuzz/tests/TARGET FILE.
# usage: scripts/fuzz.sh [SECONDS] [TARGET...]   env: FUZZ_BUILD_DIR (default build-fuzz), CXX (default clang++)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
seconds=${1:-60}
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(fuzz_scenario fuzz_report_spec fuzz_search)
build=${FUZZ_BUILD_DIR:-$root/build-fuzz}
cxx=${CXX:-clang++}
command -v "$cxx" >/dev/null || { echo "fuzz.sh: $cxx not found (libFuzzer needs clang)" >&2; exit 2; }

cmake -S "$root" -B "$build" -G Ninja -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DTRAINPLAN_FUZZ=ON -DTRAINPLAN_TESTS=ON -DTRAINPLAN_BENCH=OFF >/dev/null
ninja -C "$build" "${targets[@]}"

# Seeds go to scratch copies (libFuzzer adds new inputs to its corpus folder). The fuzzers run inside the scratch
# folder so relative hf_config paths resolve there (support/ holds the bad corpus' helper configs).
work=$(mktemp -d "${TMPDIR:-/tmp}/trainplan-fuzz.XXXXXX")
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/fuzz_scenario" "$work/fuzz_report_spec" "$work/fuzz_search" "$build/artifacts"
find "$root/scenarios" -maxdepth 1 -name '*.json' -exec cp {} "$work/fuzz_scenario/" \;
for f in "$root"/tests/bad_inputs/*.json; do cp "$f" "$work/fuzz_scenario/bad_$(basename "$f")"; done
for f in "$root"/scenarios/seeds/*.report.json "$root"/tests/reports/specs/*.json; do
  [ -f "$f" ] && cp "$f" "$work/fuzz_report_spec/$(basename "$(dirname "$f")")_$(basename "$f")"
done
python3 - "$root" "$work/fuzz_search" <<'PY'
import glob, json, os, sys
root, out = sys.argv[1], sys.argv[2]
for i, f in enumerate(sorted(glob.glob(root + "/scenarios/**/*.json", recursive=True) + glob.glob(root + "/tests/bad_inputs/*.json"))):
    try:
        s = json.load(open(f)).get("search")
    except Exception:
        continue
    if s is not None:
        open(os.path.join(out, "%03d_%s" % (i, os.path.basename(f))), "w").write(json.dumps(s))
PY
cp -r "$root/tests/bad_inputs/support" "$work/support"
# A dictionary of the formats' keys and values helps the fuzzers reach the deeper checks.
for k in name about model cluster training plan search hf_config layers hidden heads kv_heads ffn_hidden vocab \
         seq_len activation tied_embeddings moe gpu nodes gpus_per_node intra_node inter_node host kind \
         bandwidth_bytes_per_s latency_s efficiency nics_per_node nic_bandwidth_bits_per_s topology oversubscription \
         nodes_per_leaf memory_bytes pcie_bandwidth_bytes_per_s cpu_cores price_per_gpu_hour_usd power_per_gpu_w \
         matrix_flops_per_s vector_flops_per_s fp32 fp16 bf16 fp8 hbm_bytes hbm_bandwidth_bytes_per_s \
         matrix_efficiency memory_efficiency kernel_overhead_s power_w global_batch tokens precision grad_precision \
         dp tp pp virtual_stages microbatch schedule sequence_parallel recompute zero overlap_grad_reduce tp_mode \
         grad_accumulation offload delink ep cp gpipe 1f1b interleaved modular none selective full gelu swiglu \
         nvswitch nvlink pcie fat_tree rail_optimized selene v100-m6 h200-single gpt3-175b llama3-8b H100-SXM-80GB \
         max_gpus min_gpus gpu_counts objective top_k confirm confirm_budget_s memory_headroom \
         max_batch_over_critical fix compare ethernet_nic_bits_per_s ethernet_nics_per_node time_to_train cost \
         throughput_per_gpu stage_split even uneven attention flash unfused title claim source runs checks figures \
         id scenario sweep values key overrides quantity expect equals min max path metric run timeline scaling \
         pareto breakdown memory simulate; do
  printf '"\\"%s\\""\n' "$k"
done > "$work/dict"

cd "$work"
status=0
for t in "${targets[@]}"; do
  echo "fuzz.sh: $t for ${seconds}s"
  TRAINPLAN_CATALOG="$root/models/catalog" "$build/tests/$t" "$work/$t" -dict="$work/dict" \
    -max_total_time="$seconds" -timeout=10 -rss_limit_mb=4096 -max_len=16384 -print_final_stats=1 \
    -artifact_prefix="$build/artifacts/$t-" || { status=$?; echo "fuzz.sh: $t found a problem (exit $status); inputs are in $build/artifacts/" >&2; }
done
[ "$status" -eq 0 ] && echo "fuzz.sh: no crash in ${seconds}s per target (${targets[*]})"
exit "$status"
