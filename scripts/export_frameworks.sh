#!/usr/bin/env bash
# export_frameworks.sh: the `export-frameworks` test label (not in the default run; `ctest -L export-frameworks` with
# -DTRAINPLAN_EXPORT_FRAMEWORKS=ON, or this script directly). Installs the frameworks' own parsers from PyPI into a
# virtual environment, exports a battery of plans with `trainplan export` to every target, and hands each script to
# its framework (tests/export/frameworks/check_exports.py). docs/export.md records the last result and versions.
#   scripts/export_frameworks.sh [BUILD_DIR]
# Environment: EXPORT_FW_VENV (default BUILD_DIR/export-frameworks/venv, reused when present), MEGATRON_LM_DIR (a
# Megatron-LM checkout at core_v0.15.3: megatron/training/arguments.py is not in any PyPI package), EXPORT_FW_PIP
# (extra pip arguments), EXPORT_FW_SKIP_INSTALL=1 (use the venv as it is).
# A framework whose install or import fails is reported "not run" with the reason; a parse failure fails the test.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}
bin=$build/cli/trainplan
venv=${EXPORT_FW_VENV:-$build/export-frameworks/venv}
out=$build/export-frameworks/battery
[ -x "$bin" ] || { echo "error: $bin not built" >&2; exit 2; }

if [ ! -x "$venv/bin/python" ]; then python3 -m venv "$venv" || exit 2; fi
py=$venv/bin/python
if [ "${EXPORT_FW_SKIP_INSTALL:-0}" != 1 ]; then
  # One pip call per framework, so that one that cannot install here leaves the others.
  "$py" -m pip install -q ${EXPORT_FW_PIP:-} torch numpy packaging || echo "note: torch did not install"
  "$py" -m pip install -q ${EXPORT_FW_PIP:-} "megatron-core==0.15.3" einops regex || echo "note: megatron-core did not install"
  "$py" -m pip install -q ${EXPORT_FW_PIP:-} deepspeed || echo "note: deepspeed did not install"
  "$py" -m pip install -q ${EXPORT_FW_PIP:-} "torchtitan==0.2.2" || echo "note: torchtitan did not install"
  "$py" -m pip install -q ${EXPORT_FW_PIP:-} nemo_run nemo_toolkit || echo "note: nemo did not install"
fi

# The battery: the bundled scenarios and plan variants of the llama3-70b example (those of tests/export), each to
# every target that takes it (a refusal is the documented answer, not a failure).
rm -rf "$out" && mkdir -p "$out/scenarios"
python3 - "$root" "$out/scenarios" <<'PY'
import json, sys, shutil, os
root, dst = sys.argv[1], sys.argv[2]
for f in ["scenarios/default.json", "scenarios/examples/llama3-70b-dgx-h100.json", "scenarios/examples/llama3-8b-dgx-h100-fp8.json",
          "scenarios/examples/llama3-405b-uneven.json", "scenarios/examples/llama3-70b-128k-cp16.json",
          "scenarios/examples/offload-optimizer.json", "scenarios/examples/gpt3-2.7b-frontera-gpipe.json"]:
    j = json.load(open(os.path.join(root, f)))
    if isinstance(j["model"], dict) and "hf_config" in j["model"]:
        j["model"]["hf_config"] = os.path.join(root, os.path.dirname(f), j["model"]["hf_config"])
    json.dump(j, open(os.path.join(dst, os.path.basename(f)), "w"))
base = json.load(open(os.path.join(root, "scenarios/examples/llama3-70b-dgx-h100.json")))
moe = {"name": "test-moe", "layers": 16, "hidden": 4096, "heads": 32, "kv_heads": 8, "ffn_hidden": 14336, "vocab": 32000,
       "seq_len": 8192, "activation": "swiglu", "tied_embeddings": False, "dropout": False}
one = {"pp": 1, "schedule": "1f1b", "virtual_stages": 1}
variants = {
    "zero3_full": ({"zero": 3, "dp": 32, "recompute": "full", **one}, None, None),
    "zero2_fp8": ({"zero": 2, "dp": 32, **one}, None, "fp8"),
    "zero0_1f1b": ({"zero": 0, "schedule": "1f1b", "virtual_stages": 1}, None, None),
    "cp2": ({"cp": 2, "dp": 4, "attention": "flash"}, None, None),
    "uneven_first_last": ({"schedule": "1f1b", "virtual_stages": 1, "first_stage_layers": 18, "last_stage_layers": 18}, None, None),
    "uneven_middle_zero3": ({"schedule": "1f1b", "virtual_stages": 1, "stage_layers": [10, 30, 20, 20], "zero": 3}, None, None),
    "uneven_interleaved_zero3": ({"virtual_stages": 2, "first_stage_layers": 18, "last_stage_layers": 18, "zero": 3}, None, None),
    "offload_zero1": ({"offload": {"kind": "optimizer"}}, None, None),
    "moe_ep4_zero1": ({"ep": 4, "tp": 4, "dp": 64, "zero": 1, **one}, {"moe": {"experts": 8, "top_k": 2}}, None),
    "moe_every2_pp3": ({"ep": 2, "pp": 3, "tp": 4, "dp": 16, "schedule": "1f1b", "virtual_stages": 1}, {"layers": 15, "moe": {"experts": 8, "top_k": 2, "every": 2}}, None),
    "ddp_only": ({"zero": 0, "tp": 1, "dp": 64, "sequence_parallel": False, **one}, None, None),
    "selective_flash_zero3": ({"zero": 3, "dp": 32, "recompute": "selective", "attention": "flash", **one}, None, None),
    "selective_unfused": ({"recompute": "selective", "attention": "unfused"}, None, None),
    "fp16_1f1b": ({"schedule": "1f1b", "virtual_stages": 1}, None, "fp16"),
}
for name, (plan, model, precision) in variants.items():
    j = json.loads(json.dumps(base))
    j["name"] = "llama3-70b-" + name.replace("_", "-")
    j["plan"].update(plan)
    if model is not None:
        m = dict(moe); m.update(model); j["model"] = m
    if precision:
        j["training"]["precision"] = precision
    json.dump(j, open(os.path.join(dst, name + ".json"), "w"))
PY
exported=0 refused=0
for s in "$out"/scenarios/*.json; do
  name=$(basename "$s" .json)
  for t in megatron nemo deepspeed torchtitan; do
    if "$bin" export "$s" --to $t --out "$out/$name.$t.sbatch" 2>"$out/$name.$t.refused"; then
      exported=$((exported + 1)); rm -f "$out/$name.$t.refused"
    else
      refused=$((refused + 1))
    fi
  done
done
echo "battery: $exported exports, $refused refused (documented nearest plans in $out/*.refused)"
MEGATRON_LM_DIR=${MEGATRON_LM_DIR:-}
PYTHONPATH=${MEGATRON_LM_DIR}${PYTHONPATH:+:$PYTHONPATH} "$py" "$root/tests/export/frameworks/check_exports.py" "$out"
