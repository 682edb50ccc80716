#!/usr/bin/env bash
# Regenerates the golden simulate results under tests/golden/ from the bundled scenarios.
# Run after an intended change of the cost model or engine, review the diff, and commit it with the change.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin=${1:-$root/build/cli/trainplan}
for f in "$root"/scenarios/default.json "$root"/scenarios/examples/*.json; do
  name=$(basename "$f" .json)
  "$bin" simulate "$f" --json "$root/tests/golden/$name.json" --quiet
  echo "wrote tests/golden/$name.json"
done
