#!/usr/bin/env python3
"""Fits the A100's `llm-foundry` kernel profile (models/catalog/gpus.json) to llm-foundry's A100 rows.

The rows are MosaicML llm-foundry's 2023 A100 benchmark sweeps (MPT 350M to 70B, Composer FSDP, Triton
FlashAttention, PyTorch-eager elementwise ops) in data/validation/frameworks-set.json; they select the profile
with training.kernel_profile "llm-foundry", so nothing else moves. The free parameters are the large-op ends of
the profile's attention curve (Triton's forward and backward as llm-foundry ran them) and of its memory curve
(the eager elementwise passes: unfused LayerNorm, GELU, residual adds, the fp32 cross-entropy). The A100 40 GB
and 80 GB share the die and get the same points. No other set is read here; the independent checks of
DEVELOPERS.md are in none of the sets.

Method as scripts/fit_h100.py (whose curve rules it uses): coordinate descent on the rows' mean |error| of
iteration time with a penalty above 12 %, each evaluation one `trainplan validate-published --suite frameworks
--json` on a copy of the catalog (TRAINPLAN_CATALOG); curves stay monotone and below their caps.

Usage: scripts/fit_llmfoundry_a100.py [--trainplan build/cli/trainplan] [--rounds 6] [--write] [--leave-one-out]
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fit_h100 import CATALOG, MAX_TARGET, ROOT, copy_catalog, descend, report_fit, write_curves  # noqa: E402

GPUS = ["A100-SXM4-80GB", "A100-SXM4-40GB"]  # one die: the first is fitted, both are written
PROFILE = "kernel_profiles/llm-foundry/"
FREE = [(PROFILE + "attention_efficiency", i) for i in (2, 3, 4)] + \
       [(PROFILE + "memory_efficiency", i) for i in (2, 3, 4)]
SUITE = os.path.join(ROOT, "data", "validation", "frameworks-set.json")


def is_fitted_row(row_id):
    return row_id.startswith("llmfoundry-") and "-a100-" in row_id


def evaluate(trainplan, gpus, tmp, left_out=None):
    """(score, mean, worst, rows) over the fitted rows but `left_out` (every row is returned)."""
    for name in GPUS[1:]:  # the same die: copy the fitted profile over
        gpus[name]["kernel_profiles"] = json.loads(json.dumps(gpus[GPUS[0]]["kernel_profiles"]))
    with open(os.path.join(tmp, "gpus.json"), "w") as f:
        json.dump(gpus, f, indent=1)
    out = os.path.join(tmp, "out.json")
    env = dict(os.environ, TRAINPLAN_CATALOG=tmp)
    subprocess.run([trainplan, "validate-published", "--suite", SUITE, "--json", out], env=env, check=True,
                   stdout=subprocess.DEVNULL)
    with open(out) as f:
        rows = [r for r in json.load(f)["iteration_time"]["rows"] if is_fitted_row(r["row"])]
    if not rows:
        raise SystemExit("no llm-foundry A100 rows in " + SUITE)
    errs = [r["error"] for r in rows if r["row"] != left_out]
    mean = sum(abs(e) for e in errs) / len(errs)
    worst = max(abs(e) for e in errs)
    penalty = sum(max(0.0, abs(e) - MAX_TARGET) for e in errs)
    return mean + 2.0 * penalty, mean, worst, rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--trainplan", default=os.path.join(ROOT, "build", "cli", "trainplan"))
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--write", action="store_true")
    ap.add_argument("--leave-one-out", action="store_true",
                    help="also fit once without each row (from the catalog's values) and print its error then")
    args = ap.parse_args()
    tmp = copy_catalog("fit_llmf_a100_")
    try:
        with open(os.path.join(CATALOG, "gpus.json")) as f:
            gpus = json.load(f)
        g = gpus[GPUS[0]]
        descend(g, FREE, lambda: evaluate(args.trainplan, gpus, tmp), args.rounds)
        _, mean, worst, rows = evaluate(args.trainplan, gpus, tmp)
        report_fit(g, FREE, rows, mean, worst)
        if args.leave_one_out:
            loo = []
            for r in rows:
                with open(os.path.join(CATALOG, "gpus.json")) as f:
                    trial = json.load(f)
                descend(trial[GPUS[0]], FREE, lambda: evaluate(args.trainplan, trial, tmp, r["row"]), args.rounds)
                err = next(x["error"] for x in evaluate(args.trainplan, trial, tmp)[3] if x["row"] == r["row"])
                loo.append(abs(err))
                print(f"  left out {r['row']:<50} {100 * err:+7.2f}%", flush=True)
            print(f"leave-one-out: mean {100 * sum(loo) / len(loo):.2f}%  max {100 * max(loo):.2f}%")
        if args.write:
            write_curves(GPUS, g, FREE)
    finally:
        shutil.rmtree(tmp)
    return 0


if __name__ == "__main__":
    sys.exit(main())
