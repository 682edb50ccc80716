#!/usr/bin/env python3
"""gpu_validate.py: predict -> run -> compare on one GPU (issue 41's calibrate / validate check).

Runs `trainplan calibrate --backend cuda` once, then `trainplan validate --backend cuda` on single-GPU plans of one
GPT (default GPT-2 124M's shape, bf16, flash attention): no recompute, selective and full recompute, optimizer
offload, chunked offload (a --device-budget arena) and both phases of Pseudo-to-Real delinking, and prints per plan the predicted and measured step time and
peak device memory (the backend allocator's high-water mark against the predicted tensors) with their errors
against the issue's 5 % targets. Every number printed was measured by the run it names; a plan that fails says how.

Without a device (`calibrate --backend cuda` exits 77) it prints "no device" and exits 0. `--backend emu-device`
runs the same plans on the emulated device (tiny shapes: --hidden 64 --heads 4 --layers 2 --vocab 256 --seq 32
--microbatch 2 --device-budget 1e6 --chunk-elements 16384 --quick), which checks the plumbing on a machine without a GPU; its times are
the emulator's, not a GPU's.

usage: gpu_validate.py TRAINPLAN OUT_DIR [--backend cuda|emu-device] [--quick] [--hidden H] [--heads A]
       [--layers L] [--seq S] [--vocab V] [--microbatch M] [--precision bf16|fp32] [--device-budget B]
       [--chunk-elements N] [--steps N]
       [--timeout S] [--total-timeout S] [--json FILE]
"""
import argparse, json, os, subprocess, sys, time

START = time.time()


def args_():
    a = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    a.add_argument("binary")
    a.add_argument("out")
    a.add_argument("--backend", default="cuda", choices=["cuda", "emu-device"])
    a.add_argument("--quick", action="store_true", help="calibrate --quick (a smoke test)")
    a.add_argument("--hidden", type=int, default=768)
    a.add_argument("--heads", type=int, default=12)
    a.add_argument("--layers", type=int, default=12)
    a.add_argument("--seq", type=int, default=1024)
    a.add_argument("--vocab", type=int, default=50304)
    a.add_argument("--microbatch", type=int, default=8)
    a.add_argument("--precision", default="bf16", choices=["bf16", "fp32"])
    a.add_argument("--device-budget", type=float, default=1.0 * 2**30,
                   help="chunked offload: the device arena in bytes (validate --device-budget)")
    a.add_argument("--chunk-elements", type=int, default=64 << 20, help="chunked offload: plan.offload.chunk_elements")
    a.add_argument("--steps", type=int, default=4)
    a.add_argument("--timeout", type=float, default=180, help="seconds per command")
    a.add_argument("--total-timeout", type=float, default=480, help="no command starts after this many seconds")
    a.add_argument("--json", default="")
    return a.parse_args()


def scenario(o, plan_extra):
    """The single-GPU scenario of one plan."""
    plan = {"dp": 1, "tp": 1, "pp": 1, "microbatch": o.microbatch, "attention": "flash"}
    plan.update(plan_extra)
    if plan.get("offload", {}).get("kind") == "chunked":
        plan["offload"]["chunk_elements"] = o.chunk_elements
    if plan.get("delink") == "half":
        plan["delink"] = {"unique_layers": max(1, o.layers // 2), "tokens": 1e12}
    return {"name": "gpu-validate",
            "model": {"name": "gpt", "layers": o.layers, "hidden": o.hidden, "heads": o.heads, "vocab": o.vocab,
                      "seq_len": o.seq, "activation": "gelu", "tied_embeddings": True, "dropout": False},
            "cluster": "dgx-h100",
            "training": {"framework": "research", "global_batch": o.microbatch, "seq_len": o.seq,
                         "precision": o.precision},
            "plan": plan}


PLANS = [
    ("no recompute", {"recompute": "none"}, []),
    ("selective recompute", {"recompute": "selective"}, []),
    ("full recompute", {"recompute": "full"}, []),
    ("optimizer offload", {"recompute": "full", "offload": {"kind": "optimizer"}}, []),
    ("chunked offload", {"recompute": "full", "offload": {"kind": "chunked"}}, ["--device-budget"]),
    ("chunked prefetch", {"recompute": "full", "offload": {"kind": "chunked", "prefetch_runs": 1}}, ["--device-budget"]),
    # Pseudo-to-Real: the real (delinked) model from step 1, then the pseudo phase (half the layers unique) throughout.
    ("delink, real phase", {"recompute": "full", "delink": "half"}, ["--delink-step", "1"]),
    ("delink, pseudo phase", {"recompute": "full", "delink": "half"}, ["--delink-step", "100000"]),
]


def run(cmd, log, timeout):
    """(exit code, seconds) of cmd with its output in log; 124 past the timeout; None when the time is spent."""
    left = START + ARGS.total_timeout - time.time()
    if left <= 0:
        return None, 0
    t0 = time.time()
    with open(log, "w") as f:
        try:
            rc = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, timeout=min(timeout, left)).returncode
        except subprocess.TimeoutExpired:
            rc = 124
    return rc, time.time() - t0


def tail(log):
    with open(log) as f:
        lines = [l.strip() for l in f if l.strip()]
    return lines[-1][:160] if lines else "(no output)"


def main():
    o = ARGS
    os.makedirs(o.out, exist_ok=True)
    prof = os.path.join(o.out, "profile.json")
    cal = [o.binary, "calibrate", "--backend", o.backend, "--out", prof] + (["--quick"] if o.quick else [])
    rc, sec = run(cal, prof + ".log", o.timeout)
    if rc == 77:
        print("no device: `trainplan calibrate --backend %s` exited 77: %s" % (o.backend, tail(prof + ".log")))
        return 0
    if rc != 0:
        print("calibrate failed (exit %s, %.0f s): %s" % (rc, sec, tail(prof + ".log")))
        return 1
    print("calibrate --backend %s: %.0f s; %s" % (o.backend, sec, tail(prof + ".log")))
    rows, failed = [], 0
    for name, extra, flags in PLANS:
        sc = os.path.join(o.out, name.replace(" ", "-") + ".json")
        with open(sc, "w") as f:
            json.dump(scenario(o, extra), f, indent=1)
        rep = sc + ".validate.json"
        cmd = [o.binary, "validate", sc, "--profile", prof, "--backend", o.backend, "--steps", str(o.steps), "--json", rep,
               "--tolerance", "0.05"]
        if "--device-budget" in flags:
            cmd += ["--device-budget", "%.0f" % o.device_budget]
        if "--delink-step" in flags:
            cmd += flags[flags.index("--delink-step"):flags.index("--delink-step") + 2]
        rc, sec = run(cmd, sc + ".log", o.timeout)
        if rc is None:
            rows.append({"plan": name, "state": "not run", "why": "--total-timeout spent"})
            continue
        if rc not in (0, 1) or not os.path.exists(rep):
            failed = 1
            rows.append({"plan": name, "state": "FAIL", "why": "exit %s: %s" % (rc, tail(sc + ".log"))})
            continue
        r = json.load(open(rep))
        rows.append({"plan": name, "state": "within 5 %" if rc == 0 else "outside 5 %", "seconds": sec,
                     "step_predicted_s": r["predicted"]["step_time_s"], "step_measured_s": r["measured"]["step_time_s"],
                     "step_error": r["error"]["step_time"], "peak_predicted_bytes": r["predicted"]["peak_memory_bytes"],
                     "peak_measured_bytes": r["measured"]["peak_memory_bytes"], "peak_error": r["error"]["peak_memory"],
                     "device_speed": r["machine_speed"]["after"]})
    print("\nvalidate --backend %s, %d layers x hidden %d, seq %d, micro-batch %d, %s, flash (%d steps, the first warm-up)"
          % (o.backend, o.layers, o.hidden, o.seq, o.microbatch, o.precision, o.steps))
    print("| plan | step predicted | measured | error | peak predicted | measured | error | result |")
    print("|---|---|---|---|---|---|---|---|")
    for w in rows:
        if "step_error" not in w:
            print("| %s | | | | | | | %s: %s |" % (w["plan"], w["state"], w["why"]))
            continue
        print("| %s | %.4g s | %.4g s | %+.1f %% | %.1f MiB | %.1f MiB | %+.1f %% | %s |" % (
            w["plan"], w["step_predicted_s"], w["step_measured_s"], 100 * w["step_error"],
            w["peak_predicted_bytes"] / 2**20, w["peak_measured_bytes"] / 2**20, 100 * w["peak_error"], w["state"]))
    if o.json:
        with open(o.json, "w") as f:
            json.dump({"backend": o.backend, "rows": rows}, f, indent=1)
    return failed


if __name__ == "__main__":
    ARGS = args_()
    sys.exit(main())
