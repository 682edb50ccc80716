#!/usr/bin/env python3
"""Fits one fp8 recipe's GEMM efficiency scale on Hopper (models/catalog/gpus.json "fp8_recipes") to the
published runs of data/validation/frameworks-set.json that use the recipe (training.fp8_recipe).

The scale multiplies the H100's fp8 GEMM curve (fitted on Transformer Engine's per-tensor-scaled runs) while the
recipe runs; the H100 and H200 share the die and get the same value, and so does the set's inline Grand Teton
H100 (a copy of the catalog H100's curves). Method: a golden-section search of the rows' mean |error| of
iteration time over the scale in [0.3, 1.2], each evaluation one `trainplan validate-published --json` on copies
of the catalog (TRAINPLAN_CATALOG) and of the set. Only the recipe's rows enter the score.

Usage: scripts/fit_fp8_recipe.py [--recipe rowwise] [--trainplan build/cli/trainplan] [--write]
"""
import argparse
import json
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fit_h100 import CATALOG, ROOT, copy_catalog  # noqa: E402

SET = os.path.join(ROOT, "data", "validation", "frameworks-set.json")
GPUS = ["H100-SXM-80GB", "H200-SXM-141GB"]
INLINE = ["grand-teton-h100"]  # clusters of the set whose inline GPU copies the catalog H100's curves


def set_scale(gpus, fset, recipe, scale):
    for name in GPUS:
        gpus[name]["fp8_recipes"][recipe]["gemm_efficiency_scale"] = round(scale, 4)
    for c in INLINE:
        fset["clusters"][c]["gpu"]["fp8_recipes"][recipe]["gemm_efficiency_scale"] = round(scale, 4)


def evaluate(trainplan, gpus, fset, recipe, tmp):
    with open(os.path.join(tmp, "gpus.json"), "w") as f:
        json.dump(gpus, f, indent=1)
    set_path = os.path.join(tmp, "set.json")
    with open(set_path, "w") as f:
        json.dump(fset, f, indent=1)
    out = os.path.join(tmp, "out.json")
    env = dict(os.environ, TRAINPLAN_CATALOG=tmp)
    subprocess.run([trainplan, "validate-published", "--suite", set_path, "--json", out], env=env, check=True,
                   stdout=subprocess.DEVNULL)
    ids = {r["id"] for r in fset["rows"] if r["training"].get("fp8_recipe") == recipe}
    with open(out) as f:
        rows = [r for r in json.load(f)["iteration_time"]["rows"] if r["row"] in ids]
    if not rows:
        raise SystemExit(f"no rows with fp8_recipe {recipe!r} in {SET}")
    return sum(abs(r["error"]) for r in rows) / len(rows), rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--recipe", default="rowwise")
    ap.add_argument("--trainplan", default=os.path.join(ROOT, "build", "cli", "trainplan"))
    ap.add_argument("--write", action="store_true")
    args = ap.parse_args()
    tmp = copy_catalog("fit_fp8_recipe_")
    try:
        with open(os.path.join(CATALOG, "gpus.json")) as f:
            gpus = json.load(f)
        with open(SET) as f:
            fset = json.load(f)

        def score(x):
            set_scale(gpus, fset, args.recipe, x)
            return evaluate(args.trainplan, gpus, fset, args.recipe, tmp)[0]

        lo, hi = 0.3, 1.2
        g = (5 ** 0.5 - 1) / 2
        a, b = hi - g * (hi - lo), lo + g * (hi - lo)
        fa, fb = score(a), score(b)
        while hi - lo > 0.002:
            if fa < fb:
                hi, b, fb = b, a, fa
                a = hi - g * (hi - lo)
                fa = score(a)
            else:
                lo, a, fa = a, b, fb
                b = lo + g * (hi - lo)
                fb = score(b)
        best = round((lo + hi) / 2, 3)
        set_scale(gpus, fset, args.recipe, best)
        mean, rows = evaluate(args.trainplan, gpus, fset, args.recipe, tmp)
        for r in rows:
            print(f"  {r['row']:<66} {100 * r['error']:+7.2f}%")
        print(f"{args.recipe}: gemm_efficiency_scale {best}, mean |error| {100 * mean:.2f}% over {len(rows)} rows")
        if args.write:
            with open(os.path.join(CATALOG, "gpus.json")) as f:
                orig = json.load(f)
            with open(SET) as f:
                oset = json.load(f)
            set_scale(orig, oset, args.recipe, best)
            with open(os.path.join(CATALOG, "gpus.json"), "w") as f:
                f.write(json.dumps(orig, indent=2, ensure_ascii=False) + "\n")
            with open(SET, "w") as f:
                f.write(json.dumps(oset, indent=1, ensure_ascii=False) + "\n")
            print("written to models/catalog/gpus.json and data/validation/frameworks-set.json")
    finally:
        shutil.rmtree(tmp)
    return 0


if __name__ == "__main__":
    sys.exit(main())
