#!/usr/bin/env bash
# Fuzzes the scenario loader: builds tests/fuzz/fuzz_scenario with clang++ and libFuzzer (ASan + UBSan) in a
# separate build dir and runs it for N seconds (default 60) over a seed corpus of the bundled scenarios and the
# bad-input corpus. Crash inputs land in $FUZZ_BUILD_DIR/artifacts/; rerun one with: fuzz_scenario FILE.
# usage: scripts/fuzz.sh [SECONDS]     env: FUZZ_BUILD_DIR (default build-fuzz), CXX (default clang++)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
seconds=${1:-60}
build=${FUZZ_BUILD_DIR:-$root/build-fuzz}
cxx=${CXX:-clang++}
command -v "$cxx" >/dev/null || { echo "fuzz.sh: $cxx not found (libFuzzer needs clang)" >&2; exit 2; }

cmake -S "$root" -B "$build" -G Ninja -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DTRAINPLAN_FUZZ=ON -DTRAINPLAN_TESTS=ON -DTRAINPLAN_BENCH=OFF >/dev/null
ninja -C "$build" fuzz_scenario

# Seeds go to a scratch copy (libFuzzer adds new inputs to its corpus folder). The fuzzer runs inside the scratch
# folder so relative hf_config paths resolve there (support/ holds the bad corpus' helper configs).
work=$(mktemp -d "${TMPDIR:-/tmp}/trainplan-fuzz.XXXXXX")
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/corpus" "$build/artifacts"
find "$root/scenarios" -maxdepth 1 -name '*.json' -exec cp {} "$work/corpus/" \;
for f in "$root"/tests/bad_inputs/*.json; do cp "$f" "$work/corpus/bad_$(basename "$f")"; done
cp -r "$root/tests/bad_inputs/support" "$work/support"
# A dictionary of the format's keys and values helps the fuzzer reach the deeper checks.
for k in name about model cluster training plan search hf_config layers hidden heads kv_heads ffn_hidden vocab \
         seq_len activation tied_embeddings moe gpu nodes gpus_per_node intra_node inter_node host kind \
         bandwidth_bytes_per_s latency_s efficiency nics_per_node nic_bandwidth_bits_per_s topology oversubscription \
         nodes_per_leaf memory_bytes pcie_bandwidth_bytes_per_s cpu_cores price_per_gpu_hour_usd power_per_gpu_w \
         matrix_flops_per_s vector_flops_per_s fp32 fp16 bf16 fp8 hbm_bytes hbm_bandwidth_bytes_per_s \
         matrix_efficiency memory_efficiency kernel_overhead_s power_w global_batch tokens precision grad_precision \
         dp tp pp virtual_stages microbatch schedule sequence_parallel recompute zero overlap_grad_reduce tp_mode \
         grad_accumulation offload delink ep gpipe 1f1b interleaved modular none selective full gelu swiglu \
         nvswitch nvlink pcie fat_tree rail_optimized selene v100-m6 h200-single gpt3-175b llama3-8b H100-SXM-80GB; do
  printf '"\\"%s\\""\n' "$k"
done > "$work/dict"

cd "$work"
status=0
TRAINPLAN_CATALOG="$root/models/catalog" "$build/tests/fuzz_scenario" "$work/corpus" -dict="$work/dict" \
  -max_total_time="$seconds" -timeout=10 -rss_limit_mb=4096 -max_len=16384 -print_final_stats=1 \
  -artifact_prefix="$build/artifacts/" || status=$?
if [ "$status" -ne 0 ]; then
  echo "fuzz.sh: the fuzzer found a problem (exit $status); inputs are in $build/artifacts/" >&2
else
  echo "fuzz.sh: no crash in ${seconds}s"
fi
exit "$status"
