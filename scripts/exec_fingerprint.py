#!/usr/bin/env python3
"""exec_fingerprint: the executor's losses and gradient norms, to the last bit, for a spread of plan kinds on
the cpu, emu and emu-device backends, so that a refactor of exec/ can be checked to change nothing (issue 40:
"the losses stay bit-identical on every backend").

  scripts/exec_fingerprint.py BINARY OUT.json [--backends cpu,emu,emu-device] [--steps 2]
  then compare two OUT.json files with `cmp` (or `diff`): any difference in any digit is a change.

The plans cover every branch of the layer's forward and backward (exec/model/gpt.cpp): GELU and SwiGLU, unfused
and flash attention, tensor parallelism with and without sequence parallelism, Optimus 2D (the column-split LayerNorm), context parallelism, full
recompute, MoE with expert parallelism and shared experts, fp32, bf16 (packed operands) and fp8. Several ranks run
under mpirun --oversubscribe. Nothing here asserts: the output is the record."""
import json, os, subprocess, sys, tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

SWIGLU = {"activation": "swiglu", "kv_heads": 2, "ffn_hidden": 96, "tied_embeddings": False}
MOE_SHARED = {"moe": {"experts": 4, "top_k": 2, "capacity_factor": 1.0, "every": 2, "ffn_hidden": 128,
                      "shared_ffn_hidden": 128}}
CASES = [  # name, base scenario, model fields, training fields, plan fields
    ("gelu_unfused", "tiny-gpt.json", {}, {}, {}),
    ("gelu_flash_full", "tiny-gpt.json", {}, {}, {"attention": "flash", "recompute": "full"}),
    ("swiglu_flash", "tiny-gpt.json", SWIGLU, {}, {"attention": "flash"}),
    ("tp2", "tiny-gpt.json", {}, {}, {"tp": 2}),
    ("tp2_sp_flash", "tiny-gpt.json", SWIGLU, {}, {"tp": 2, "sequence_parallel": True, "attention": "flash"}),
    ("cp2_tp2_sp", "tiny-gpt.json", {}, {}, {"cp": 2, "tp": 2, "sequence_parallel": True, "attention": "flash"}),
    ("cp2_unfused_swiglu", "tiny-gpt.json", SWIGLU, {}, {"cp": 2}),
    ("tp2d_q2", "tiny-gpt.json", {}, {}, {"tp": 4, "tp_mode": "2d"}),
    ("bf16_unfused", "tiny-gpt.json", {}, {"precision": "bf16"}, {}),
    ("bf16_flash_swiglu", "tiny-gpt.json", SWIGLU, {"precision": "bf16"}, {"attention": "flash"}),
    ("bf16_tp2_sp", "tiny-gpt.json", {}, {"precision": "bf16"}, {"tp": 2, "sequence_parallel": True}),
    ("fp8", "tiny-gpt-fp8.json", {}, {}, {}),
    ("fp8_tp2_sp_flash", "tiny-gpt-fp8.json", {}, {}, {"tp": 2, "sequence_parallel": True, "attention": "flash"}),
    ("moe", "tiny-moe.json", {}, {}, {}),
    ("moe_shared_tp2_sp", "tiny-moe.json", MOE_SHARED, {}, {"tp": 2, "sequence_parallel": True}),
    ("moe_ep2_bf16", "tiny-moe.json", {}, {"precision": "bf16"}, {"dp": 2, "ep": 2}),
]


def ranks(plan):
    return plan.get("dp", 1) * plan.get("tp", 1) * plan.get("pp", 1) * plan.get("cp", 1)


def main():
    args = sys.argv[1:]
    if len(args) < 2:
        sys.exit(__doc__)
    binary, out = args[0], args[1]
    backends = ["cpu", "emu", "emu-device"]
    steps = 2
    if "--backends" in args: backends = args[args.index("--backends") + 1].split(",")
    if "--steps" in args: steps = int(args[args.index("--steps") + 1])
    tmp = tempfile.mkdtemp(prefix="exec-fingerprint-")
    record = {}
    for name, base, model, training, plan in CASES:
        sc = json.load(open(os.path.join(ROOT, "scenarios", "exec", base)))
        sc["model"].update(model)
        sc["training"].update(training)
        sc["plan"].update(plan)
        f = os.path.join(tmp, name + ".json")
        json.dump(sc, open(f, "w"), indent=1)
        n = ranks(sc["plan"])
        for be in backends:
            res = os.path.join(tmp, "%s.%s.out.json" % (name, be))
            cmd = [binary, "run", f, "--steps", str(steps), "--json", res, "--backend", be]
            if n > 1:
                cmd = ["mpirun", "--oversubscribe", "--allow-run-as-root", "-np", str(n)] + cmd
            p = subprocess.run(cmd, capture_output=True, text=True)
            key = "%s/%s" % (name, be)
            if p.returncode != 0:
                errs = [l for l in p.stderr.splitlines() if l.startswith("error")]
                record[key] = {"exit": p.returncode, "error": errs[0] if errs else p.stderr.strip()[-200:]}
            else:
                r = json.load(open(res))
                record[key] = {"losses": [repr(x) for x in r["losses"]],
                               "grad_norm": [repr(x) for x in r.get("grad_norm", [])]}
            print(key, json.dumps(record[key])[:150], flush=True)
    json.dump(record, open(out, "w"), indent=1, sort_keys=True)


if __name__ == "__main__":
    main()
