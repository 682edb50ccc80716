#!/usr/bin/env python3
"""gpu_plans.py: every plan kind the cuda backend runs, trained on the GPU and compared with the cpu backend
(issue 11; called by scripts/gpu_check.sh). Each case is tiny-gpt.json with the plan changed; the cuda run
(under mpirun when it has several ranks, all sharing the machine's GPUs) must reproduce the losses of the same
model's one-rank fp32 cpu run to a relative 2e-4 over STEPS steps (both fp32; cuBLASLt sums in another order
than Eigen). A delinked run is compared with the cpu's delinked run; MoE plans (tiny-moe.json) with the
cpu run of the same MoE plan (to 1e-3: a flipped near-tied routing choice). Prints one table row per case and exits 1 if any failed. Cases listed in REFUSED must exit 2
on cuda (ops without CUDA kernels). NCCL_CASES (on cuda, or GPU_PLANS_NCCL=1): each plan with --comm nccl against
its --comm mpi run (rows nccl_*; issue 41).

usage: gpu_plans.py TRAINPLAN SOURCE_DIR LOG_DIR [MPIRUN]
"""
import json, os, re, subprocess, sys

STEPS = 4
BACKEND = os.environ.get("GPU_PLANS_BACKEND", "cuda")  # emu-device: try this script without a GPU
TOL = 2e-4
TOL_MOE = 1e-3
CHUNKED = {"kind": "chunked", "chunk_elements": 2048}
GRAN = {"kind": "granular", "layers": [1, 2]}
CASES = [  # name, plan changes, extra run options, compare with a delinked cpu run
    ("recompute_full", {"recompute": "full"}, [], False),
    ("chunked_tight", {"offload": CHUNKED}, ["--device-budget", "1000000"], False),
    ("optimizer_offload", {"offload": {"kind": "optimizer"}}, [], False),
    ("granular_offload", {"offload": GRAN}, [], False),
    ("delink_step2", {"delink": {"unique_layers": 2, "tokens": 768}}, ["--delink-step", "2"], True),
    ("dp2", {"dp": 2}, [], False),
    ("dp2_zero3_layered", {"dp": 2, "zero": 3, "grad_accumulation": "layered"}, [], False),
    ("tp2_sp_dp2_zero1", {"dp": 2, "tp": 2, "sequence_parallel": True, "zero": 1}, [], False),
    ("pp2_dp2_zero2_interleaved", {"dp": 2, "pp": 2, "zero": 2, "schedule": "interleaved", "virtual_stages": 2}, [], False),
    ("dp2_tp2_pp2", {"dp": 2, "tp": 2, "pp": 2}, [], False),
    ("tp2d_q2", {"tp": 4, "tp_mode": "2d"}, [], False),
    ("chunked_dp2_zero3", {"dp": 2, "zero": 3, "offload": CHUNKED}, ["--device-budget", "1000000"], False),
    ("chunked_prefetch_dp2_zero3", {"dp": 2, "zero": 3, "offload": dict(CHUNKED, prefetch_runs=2)},
     ["--device-budget", "1000000"], False),  # (the next runs' chunks on the copy stream)
    ("optimizer_dp2_pp2_zero2", {"dp": 2, "pp": 2, "zero": 2, "offload": {"kind": "optimizer"}}, [], False),
    ("granular_dp2_zero2", {"dp": 2, "zero": 2, "offload": GRAN}, [], False),
    ("flash", {"attention": "flash"}, [], False),  # the fused kernels (exec/kernels/k_flash.hpp)
    ("flash_tp2_sp_selective", {"tp": 2, "sequence_parallel": True, "attention": "flash", "recompute": "selective"}, [],
     False),
    ("cp2_flash", {"cp": 2, "attention": "flash"}, [], False),
    ("cp2_tp2_sp_dp2", {"dp": 2, "cp": 2, "tp": 2, "sequence_parallel": True, "attention": "flash"}, [], False),
]
MOE_CASES = [  # on tiny-moe.json (4 experts, top-2, capacity factor 1: copies are dropped)
    ("moe_single", {}),
    ("moe_dp2_ep2", {"dp": 2, "ep": 2}),
    ("moe_dp2_ep2_tp2_sp", {"dp": 2, "ep": 2, "tp": 2, "sequence_parallel": True}),
]
# training.precision "bf16" (bf16 GEMM operands, fp32 accumulation, saved activations stored as bf16: pack_bf16, the
# weight-gradient GEMMs on packed operands through matmul16; recompute re-rounds what it rebuilds; the weights' bf16
# copies, made per step, dropped with ZeRO-3's gathered and granular offload's loaded layers; under chunked offload
# the bf16 chunks themselves, with hybrid Adam where the budget leaves room) and "fp8": each against the cpu backend's run of the
# same scenario, to 2e-3 (another summation order can move a value across a bf16 rounding boundary).
BF16_CASES = [  # name, plan changes, base scenario, extra environment; fp8_* cases train in fp8 (exec/model/fp8.hpp)
    ("bf16_single", {}, "tiny-gpt", {}),
    ("bf16_dp2_tp2_sp_zero1", {"dp": 2, "tp": 2, "sequence_parallel": True, "zero": 1}, "tiny-gpt", {}),
    ("bf16_flash", {"attention": "flash"}, "tiny-gpt", {}),
    ("bf16_cp2_flash", {"cp": 2, "attention": "flash"}, "tiny-gpt", {}),
    ("bf16_chunked_tight", {"offload": CHUNKED}, "tiny-gpt", {}),
    ("bf16_chunked_dp2_zero3", {"dp": 2, "zero": 3, "offload": CHUNKED}, "tiny-gpt", {}),
    ("bf16_chunked_prefetch", {"offload": dict(CHUNKED, prefetch_runs=1)}, "tiny-gpt", {}),
    ("bf16_recompute_full", {"recompute": "full"}, "tiny-gpt", {}),
    ("bf16_pp2_selective", {"pp": 2, "recompute": "selective"}, "tiny-gpt", {}),
    ("bf16_tp2d_q2", {"tp": 4, "tp_mode": "2d"}, "tiny-gpt", {}),
    ("bf16_dp2_zero3_granular", {"dp": 2, "zero": 3, "offload": GRAN}, "tiny-gpt", {}),
    ("bf16_moe_dp2_ep2", {"dp": 2, "ep": 2}, "tiny-moe", {}),
    # optimizer offload: the GEMM weights only as bf16 on the device, from the host master copy (RankRun::host_master)
    ("bf16_optimizer_offload", {"offload": {"kind": "optimizer"}}, "tiny-gpt", {}),
    ("bf16_optimizer_dp2_zero2", {"dp": 2, "zero": 2, "offload": {"kind": "optimizer"}}, "tiny-gpt", {}),
    ("fp8_single", {}, "tiny-gpt", {}),
    ("fp8_dp2_tp2_sp_zero3", {"dp": 2, "tp": 2, "sequence_parallel": True, "zero": 3}, "tiny-gpt", {}),
    ("fp8_moe_dp2_ep2", {"dp": 2, "ep": 2}, "tiny-moe", {}),
]
# fp8: a value a few float ulp from the cpu's can round to the neighbouring fp8 value (1/16 apart for E4M3)
TOL_FP8 = 1e-2
TOL_BF16 = 2e-3
REFUSED = []  # (name, plan, base scenario) that cuda must refuse with exit 2
# --comm nccl (issue 41): each plan's collectives of GPU tensors on NCCL, against the same plan's cuda run with
# --comm mpi (host-staged, rank-ordered sums): NCCL sums in another order, so the losses agree to rounding, not bit
# for bit. Every rank shares the machine's GPU(s): NCCL before 2.30 refuses two ranks of one communicator on one GPU,
# so there the several-rank cases must be refused with exit 2 and the shared-GPU message (exec/comm/comm_device.cpp),
# and only the one-rank case runs on NCCL; from 2.30 on they run with NCCL_MULTI_RANK_GPU_ENABLE=1 (docs/cuda.md).
NCCL_CASES = [  # name, plan changes, base scenario
    ("single", {}, "tiny-gpt"),
    ("dp2", {"dp": 2}, "tiny-gpt"),
    ("dp2_zero1_overlap", {"dp": 2, "zero": 1, "overlap_grad_reduce": True}, "tiny-gpt"),
    ("dp2_zero3_layered", {"dp": 2, "zero": 3, "grad_accumulation": "layered"}, "tiny-gpt"),
    ("tp2_sp_dp2_zero1", {"dp": 2, "tp": 2, "sequence_parallel": True, "zero": 1}, "tiny-gpt"),
    ("pp2_dp2_zero2_interleaved", {"dp": 2, "pp": 2, "zero": 2, "schedule": "interleaved", "virtual_stages": 2},
     "tiny-gpt"),
    ("cp2_flash", {"cp": 2, "attention": "flash"}, "tiny-gpt"),
    ("moe_dp2_ep2", {"dp": 2, "ep": 2}, "tiny-moe"),
]
TOL_NCCL = 1e-4


def nccl_version(binary):
    """(major, minor) of the NCCL `trainplan --version` loads, or None (not loaded)."""
    p = subprocess.run([binary, "--version"], capture_output=True, text=True)
    m = re.search(r"NCCL (\d+)\.(\d+)", p.stdout)
    return (int(m.group(1)), int(m.group(2))) if m else None


def max_rel_diff(got, want):
    """The largest relative difference of two loss curves (inf when their lengths differ or they are empty)."""
    return max(abs(a - b) / abs(b) for a, b in zip(got, want)) if len(got) == len(want) and got else float("inf")


def ranks(plan):
    return plan.get("dp", 1) * plan.get("tp", 1) * plan.get("pp", 1) * plan.get("cp", 1)


def write(base, logs, name, plan):
    j = json.loads(json.dumps(base))
    j["name"] = "gpu-" + name
    j["plan"].update(plan)
    f = os.path.join(logs, name + ".json")
    with open(f, "w") as o:
        json.dump(j, o, indent=2)
    return f


def run(binary, mpirun, scenario, backend, extra, out, env_add=None):
    with open(scenario) as f:
        n = ranks(json.load(f)["plan"])
    cmd = [binary, "run", scenario, "--backend", backend, "--steps", str(STEPS), "--quiet", "--json", out] + extra
    if n > 1:
        if not mpirun:
            return None, "mpirun not installed"
        cmd = [mpirun, "-np", str(n), "--oversubscribe"] + cmd
    if n > 1 and os.geteuid() == 0:
        cmd[1:1] = ["--allow-run-as-root"]
    env = dict(os.environ, TP_CUDA_SYNC="1", **(env_add or {})) if backend == "cuda" else None
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env)
    except subprocess.TimeoutExpired:
        return None, "timed out after 120 s"
    with open(out[:-5] + ".txt", "w") as lg:
        lg.write(p.stdout + p.stderr)
    if p.returncode != 0:
        lines = (p.stdout + p.stderr).strip().splitlines()
        # trainplan's own "error:" line, not the launcher's notes after it (mpirun's help aggregation)
        errs = [l for l in lines if l.startswith("error:")]
        return None, "exit %d: %s" % (p.returncode, errs[0] if errs else lines[-1] if lines else "")
    with open(out) as f:
        return json.load(f), ""


def main():
    binary, src, logs = sys.argv[1:4]
    mpirun = sys.argv[4] if len(sys.argv) > 4 else ""
    os.makedirs(logs, exist_ok=True)
    bases, refs = {}, {}
    for b in ("tiny-gpt", "tiny-moe"):
        with open(os.path.join(src, "scenarios/exec/%s.json" % b)) as f:
            bases[b] = json.load(f)
        ref_file = write(bases[b], logs, "ref_" + b, {})
        refs[b], why = run(binary, mpirun, ref_file, "cpu", [], os.path.join(logs, "ref_%s_cpu.json" % b))
        if refs[b] is None:
            print("| %-26s | FAIL     | the cpu reference run failed: %s |" % ("reference " + b, why))
            return 1
    failed = 0
    # MoE runs are compared with the cpu run of the same plan: in fp32 another summation order (tensor
    # parallelism, cuBLASLt) can flip a near-tied top-k choice, a discontinuity no tolerance of the dense cases covers.
    cases = [(n, p, e, o, "tiny-gpt") for n, p, e, o in CASES] + [(n, p, [], True, "tiny-moe") for n, p in MOE_CASES]
    def compare(name, plan, base, want, extra, tol, vs, env_add=None):
        """Runs the case on BACKEND against `want` (None: the cpu run of the same scenario); prints its row."""
        f = write(base, logs, name, plan)
        if want is None:
            want, why = run(binary, mpirun, f, "cpu", extra, os.path.join(logs, name + "_cpu.json"))
            if want is None:
                print("| %-26s | FAIL     | cpu run: %s |" % (name, why))
                return 1
        got, why = run(binary, mpirun, f, BACKEND, extra, os.path.join(logs, name + "_cuda.json"), env_add)
        if got is None:
            state = "skipped" if why == "mpirun not installed" else "FAIL"
            print("| %-26s | %-8s | %s |" % (name, state, why))
            return state == "FAIL"
        g, w = got["losses"], want["losses"]
        err = max_rel_diff(g, w)
        ok = err <= tol
        print("| %-26s | %-8s | %d ranks, %d steps, max rel loss diff %.1e vs %s; step %.1f ms |" %
              (name, "ok" if ok else "FAIL", ranks(plan), len(g), err, vs, 1e3 * min(got["step_time_s"])))
        return not ok

    for name, plan, extra, own_ref, b in cases:
        failed |= compare(name, plan, bases[b], None if own_ref else refs[b], extra,
                          TOL_MOE if b == "tiny-moe" else TOL, "cpu")
    for name, plan, b, env_add in BF16_CASES:
        base = json.loads(json.dumps(bases[b]))
        precision = "fp8" if name.startswith("fp8") else "bf16"
        base["training"]["precision"] = precision
        if precision == "fp8":
            base["cluster"] = "dgx-h100"  # fp8 needs a GPU with fp8 tensor cores (the scenario's check)
        extra = ["--device-budget", "1000000"] if "offload" in plan else []
        failed |= compare(name, plan, base, None, extra, TOL_FP8 if precision == "fp8" else TOL_BF16,
                          "the cpu %s run" % precision, env_add)
    if BACKEND == "cuda" or os.environ.get("GPU_PLANS_NCCL") == "1":
        failed |= nccl_cases(binary, mpirun, logs, bases)
    for name, plan, b in (REFUSED if BACKEND == "cuda" else []):
        f = write(bases[b], logs, name, plan)
        got, why = run(binary, mpirun, f, BACKEND, [], os.path.join(logs, name + "_cuda.json"))
        ok = got is None and why.startswith("exit 2")
        failed |= not ok
        print("| %-26s | %-8s | %s |" % (name, "ok" if ok else "FAIL", "refused: " + why if ok else "expected exit 2: " + why))
    return failed


def nccl_cases(binary, mpirun, logs, bases):
    """NCCL_CASES: `--comm nccl` against `--comm mpi` on BACKEND; prints a row each; returns 1 if any failed."""
    ver = nccl_version(binary)
    shares = ver is not None and ver >= (2, 30)
    env = {"NCCL_MULTI_RANK_GPU_ENABLE": "1"} if shares else {}
    failed = 0
    for name, plan, b in NCCL_CASES:
        row = "nccl_" + name
        f = write(bases[b], logs, row, plan)
        mpi, why = run(binary, mpirun, f, BACKEND, [], os.path.join(logs, row + "_mpi.json"))
        if mpi is None:
            state = "skipped" if why == "mpirun not installed" else "FAIL"
            print("| %-26s | %-8s | the --comm mpi run: %s |" % (row, state, why))
            failed |= state == "FAIL"
            continue
        got, why = run(binary, mpirun, f, BACKEND, ["--comm", "nccl"], os.path.join(logs, row + "_nccl.json"), env)
        if got is None and ranks(plan) > 1 and not shares:
            ok = why.startswith("exit 2") and "share GPU" in why
            print("| %-26s | %-8s | %s |" % (row, "ok" if ok else "FAIL", (
                "refused as documented (NCCL %s < 2.30: ranks sharing a GPU): %s" % (
                    "%d.%d" % ver if ver else "not loaded", why[:120])) if ok else "expected the shared-GPU refusal: " + why))
            failed |= not ok
            continue
        if got is None:
            print("| %-26s | FAIL     | --comm nccl: %s |" % (row, why))
            failed = 1
            continue
        g, w = got["losses"], mpi["losses"]
        err = max_rel_diff(g, w)
        ok = err <= TOL_NCCL
        print("| %-26s | %-8s | %d ranks on NCCL %s, max rel loss diff %.1e vs --comm mpi; step %.1f ms (mpi %.1f) |" % (
            row, "ok" if ok else "FAIL", ranks(plan), "%d.%d" % ver if ver else "?", err,
            1e3 * min(got["step_time_s"]), 1e3 * min(mpi["step_time_s"])))
        failed |= not ok
    return failed


if __name__ == "__main__":
    sys.exit(main())
