#!/usr/bin/env bash
# Regenerates the golden simulate results under tests/golden/ from the bundled scenarios.
# Run after an intended change of the cost model or engine, review the diff, and commit it with the change.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin=${1:-$root/build/cli/trainplan}
for f in "$root"/scenarios/default.json "$root"/scenarios/examples/*.json; do
  name=$(basename "$f" .json)
  # exit 3: the plan does not fit (some examples show exactly that); the result is still written
  "$bin" simulate "$f" --json "$root/tests/golden/$name.json" --quiet || [ $? -eq 3 ]
  echo "wrote tests/golden/$name.json"
done
# trainplan export goldens (tests/export/test_export.cpp, Export.GoldenOutputs).
mkdir -p "$root/tests/golden/export"
(cd "$root" && for t in megatron nemo deepspeed; do "$bin" export scenarios/default.json --to $t --out tests/golden/export/default.$t.sh; done
 "$bin" export scenarios/examples/llama3-70b-128k-cp16.json --to megatron --out tests/golden/export/llama3-70b-128k-cp16.megatron.sh)
tmp=$(mktemp -d)
python3 - "$root" "$tmp" <<'PY'
import json, sys
j = json.load(open(sys.argv[1] + "/scenarios/examples/llama3-70b-dgx-h100.json"))
j["plan"].update({"zero": 3, "schedule": "1f1b", "virtual_stages": 1, "first_stage_layers": 18, "last_stage_layers": 18})
json.dump(j, open(sys.argv[2] + "/llama3-70b-zero3.json", "w"))
PY
(cd "$tmp" && "$bin" export llama3-70b-zero3.json --to torchtitan --out "$root/tests/golden/export/llama3-70b-zero3.torchtitan.sh")
rm -rf "$tmp"
echo "wrote tests/golden/export/*"
