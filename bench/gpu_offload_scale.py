#!/usr/bin/env python3
"""gpu_offload_scale.py: the model scale chunked offload (PatrickStar) buys on one GPU (issue 41's offload check).

Under `trainplan run --gpu-memory-budget BUDGET` (default 16 GiB: a smaller GPU, emulated by the backend's
allocator), finds the largest GPT of one family (hidden, heads, sequence, vocabulary fixed; the layer count grows)
that trains without offload and with `plan.offload` chunked, and prints the ratio of their parameter counts (the
issue's target: >= 5x; PatrickStar reports 2.27-2.5x DeepSpeed's model scale). Then it trains the largest chunked
model again without a budget and without offload, when the simulator says it fits the whole GPU, and prints the
chunked run's step time against it: what the scale costs in throughput.

The search is guided by the simulator, not by a sweep (each large chunked run takes a minute of host Adam): for each
mode, `trainplan simulate` predicts the device tensors (weights, gradients, optimizer state, activations, chunk arena;
not the framework's context, which the budget does not count) of every candidate layer count, and the host memory;
the largest candidate predicted to fit runs first, then the next larger while runs succeed (at most UP more), or the
next smaller while they fail (at most DOWN more). A run that exits 2 is out of memory (or refused); any other failure,
a run past --timeout, and a run not started because --total-timeout was spent are reported as they are (a timed-out
run counts as not trained: the search goes down). Every number printed was measured by the run it names; a mode with no successful run says so.

Without a device (`--backend cuda` exits 77) it prints "no device" and exits 0. `--backend emu-device` runs the same
search on the emulated device (tiny shapes: --hidden 64 --heads 4 --vocab 256 --seq 32 --budget-bytes 4e6
--chunk-elements 16384 --layers 1,2,4,8,16,32), which
checks the plumbing on a machine without a GPU.

usage: gpu_offload_scale.py TRAINPLAN OUT_DIR [--backend cuda|emu-device] [--budget-bytes B] [--arena-fraction F]
       [--chunk-elements N] [--prefetch-runs N] [--hidden H] [--heads A] [--seq S] [--vocab V] [--microbatch M] [--precision bf16|fp32]
       [--layers 2,4,...] [--steps N] [--timeout S] [--total-timeout S] [--up N] [--down N] [--json FILE]
"""
import argparse, json, os, subprocess, sys, time

GIB = 2**30
START = time.time()


def size(b):
    """Bytes as GiB, or MiB below one GiB."""
    return "%.2f GiB" % (b / GIB) if b >= GIB else "%.2f MiB" % (b / 2**20)


def count(n):
    """A parameter count as B or M."""
    return "%.2fB" % (n / 1e9) if n >= 1e9 else "%.2fM" % (n / 1e6)


def args_():
    a = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    a.add_argument("binary")
    a.add_argument("out")
    a.add_argument("--backend", default="cuda", choices=["cuda", "emu-device"])
    a.add_argument("--budget-bytes", type=float, default=16 * GIB)
    a.add_argument("--arena-fraction", type=float, default=0.5,
                   help="chunked: the chunk arena (--device-budget) as a share of the budget; the rest holds "
                        "activations, the embeddings' work and the GEMMs' scratch")
    a.add_argument("--chunk-elements", type=int, default=64 << 20, help="chunked: plan.offload.chunk_elements")
    a.add_argument("--prefetch-runs", type=int, default=1,
                   help="chunked: plan.offload.prefetch_runs (the next runs' chunks load on a copy stream; 0: "
                        "PatrickStar's synchronous moves)")
    a.add_argument("--hidden", type=int, default=2048)
    a.add_argument("--heads", type=int, default=16)
    a.add_argument("--seq", type=int, default=1024)
    a.add_argument("--vocab", type=int, default=50304)
    a.add_argument("--microbatch", type=int, default=1)
    a.add_argument("--precision", default="bf16", choices=["bf16", "fp32"])
    a.add_argument("--layers", default="2,4,6,8,12,16,20,24,32,40,48,64,80,96,112,128,160,192")
    a.add_argument("--steps", type=int, default=2)
    a.add_argument("--timeout", type=float, default=240)
    a.add_argument("--total-timeout", type=float, default=420,
                   help="no run starts after this many seconds from the start (a lent GPU's call is 10 minutes)")
    a.add_argument("--up", type=int, default=1)
    a.add_argument("--down", type=int, default=3)
    a.add_argument("--cluster", default="h200-single")
    a.add_argument("--json", default="")
    return a.parse_args()


def params(o, layers):
    """Parameters of the GPT (exec/model/gpt_layout.cpp): blocks, token and position embeddings, final norm."""
    h = o.hidden
    return layers * (12 * h * h + 13 * h) + o.vocab * h + o.seq * h + 2 * h


def scenario(o, layers, chunked, arena_fraction_of_hbm):
    plan = {"attention": "flash", "dp": 1, "tp": 1, "pp": 1, "microbatch": o.microbatch, "recompute": "full"}
    if chunked:
        plan["offload"] = {"kind": "chunked", "chunk_elements": o.chunk_elements,
                           "gpu_memory_fraction": arena_fraction_of_hbm, "prefetch_runs": o.prefetch_runs}
    return {
        "name": "offload-scale-%dl-%s" % (layers, "chunked" if chunked else "none"),
        "about": "bench/gpu_offload_scale.py: one member of a GPT family whose layer count grows",
        "model": {"name": "gpt-%dl-h%d" % (layers, o.hidden), "layers": layers, "hidden": o.hidden, "heads": o.heads,
                  "vocab": o.vocab, "seq_len": o.seq, "activation": "gelu", "tied_embeddings": True, "dropout": False},
        "cluster": o.cluster,
        "training": {"global_batch": o.microbatch, "seq_len": o.seq, "precision": o.precision},
        "plan": plan,
    }


def write(o, sc):
    f = os.path.join(o.out, sc["name"] + ".json")
    with open(f, "w") as w:
        json.dump(sc, w, indent=2)
    return f


def simulate(o, f):
    """(device tensor bytes, host bytes, capacity bytes) the simulator predicts, or None."""
    out = f[:-5] + ".sim.json"
    p = subprocess.run([o.binary, "simulate", f, "--quiet", "--json", out], capture_output=True, text=True)
    if p.returncode != 0:
        return None
    m = json.load(open(out))["memory"]
    dev = sum(v for k, v in m["breakdown_bytes"].items() if k != "framework")
    return dev, m.get("host_bytes_per_node", 0), m["capacity_bytes"]


def run(o, f, budget, arena):
    """(ok, step_s, peak_bytes, why) of `trainplan run` on f; budget/arena 0: none."""
    out = f[:-5] + (".budget" if budget else ".free") + ".run.json"
    left = o.total_timeout - (time.time() - START)
    if left < 10:
        return False, 0, 0, "not run: --total-timeout %.0f s spent" % o.total_timeout
    cmd = [o.binary, "run", f, "--backend", o.backend, "--steps", str(o.steps), "--lr", "1e-4", "--quiet",
           "--json", out]
    if budget:
        cmd += ["--gpu-memory-budget", "%d" % budget]
    if arena:
        cmd += ["--device-budget", "%d" % arena]
    t0 = time.time()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=min(o.timeout, left))
    except subprocess.TimeoutExpired:
        return False, 0, 0, "timed out after %.0f s" % min(o.timeout, left)
    with open(out[:-5] + ".txt", "w") as lg:
        lg.write(" ".join(cmd) + "\n" + p.stdout + p.stderr)
    if p.returncode == 77:
        raise SystemExit(77)
    if p.returncode != 0:
        lines = (p.stdout + p.stderr).strip().splitlines()
        kind = "out of memory" if p.returncode == 2 and "memory" in (p.stdout + p.stderr) else "exit %d" % p.returncode
        return False, 0, 0, "%s (%.0f s): %s" % (kind, time.time() - t0, lines[-1][:160] if lines else "")
    r = json.load(open(out))
    return True, r["step_time_s"][-1], r["peak_memory_bytes"][0], "%.0f s" % (time.time() - t0)


def host_available_bytes():
    try:
        for line in open("/proc/meminfo"):
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return float("inf")


def search(o, chunked, cands, budget, arena, frac_of_hbm, host_cap):
    """The largest layer count that trains under the budget: (layers or 0, step_s, peak, [(layers, text)])."""
    predicted = []
    for L in cands:
        s = simulate(o, write(o, scenario(o, L, chunked, frac_of_hbm)))
        fits = s is not None and s[0] <= budget and s[1] <= host_cap
        predicted.append((L, fits))
    fit_idx = [i for i, (_, fits) in enumerate(predicted) if fits]
    i = fit_idx[-1] if fit_idx else 0
    tried, best = [], (0, 0.0, 0)
    ups = downs = 0
    direction = ""  # "up" after a success at the first candidate, "down" after a failure
    while 0 <= i < len(cands):
        L = cands[i]
        f = os.path.join(o.out, scenario(o, L, chunked, frac_of_hbm)["name"] + ".json")
        ok, step, peak, why = run(o, f, budget, arena if chunked else 0)
        tried.append((L, ("ok %.2f s/step, peak %s, %s" % (step, size(peak), why)) if ok else why))
        if ok:
            best = max(best, (L, step, peak))
            if direction == "down" or ups >= o.up:
                break
            direction, ups, i = "up", ups + 1, i + 1
        else:
            if direction == "up" or downs >= o.down:
                break
            direction, downs, i = "down", downs + 1, i - 1
    return best[0], best[1], best[2], tried


def main():
    o = args_()
    os.makedirs(o.out, exist_ok=True)
    cands = sorted({int(x) for x in o.layers.split(",") if x.strip()})
    budget, arena = int(o.budget_bytes), int(o.budget_bytes * o.arena_fraction)
    probe = simulate(o, write(o, scenario(o, cands[0], False, 0.5)))
    if probe is None:
        print("gpu_offload_scale.py: `trainplan simulate` refused the family's scenario: see %s" % o.out)
        return 2
    frac_of_hbm = arena / probe[2]
    host_cap = 0.8 * host_available_bytes()
    try:
        res = {m: search(o, m == "chunked", cands, budget, arena, frac_of_hbm, host_cap) for m in ("none", "chunked")}
    except SystemExit as e:
        if e.code == 77:
            print("| offload scale | - | no device: `trainplan run --backend %s` exited 77 |" % o.backend)
            return 0
        raise
    print("Model scale under a %s --gpu-memory-budget (%s, chunk arena %s, chunks of %d elements), GPT family hidden "
          "%d, heads %d, sequence %d, vocabulary %d, micro-batch %d, %s, full recompute, flash attention, %d steps:" %
          (size(budget), o.backend, size(arena), o.chunk_elements, o.hidden, o.heads, o.seq, o.vocab, o.microbatch,
           o.precision, o.steps))
    print("| offload | largest layers | parameters | step s | peak device | runs (layers: result) |")
    print("|---|---|---|---|---|---|")
    for m, (L, step, peak, tried) in res.items():
        runs = "; ".join("%d: %s" % t for t in tried)
        print("| %s | %s | %s | %s | %s | %s |" % (m, L or "none trained", count(params(o, L)) if L else "-",
                                                  "%.2f" % step if L else "-", size(peak) if L else "-", runs))
    out = {"budget_bytes": budget, "arena_bytes": arena, "backend": o.backend,
           "modes": {m: {"layers": r[0], "parameters": params(o, r[0]) if r[0] else 0, "step_s": r[1],
                         "peak_bytes": r[2], "runs": r[3]} for m, r in res.items()}}
    (ln, _, _, _), (lc, step_c, _, _) = res["none"], res["chunked"]
    if ln and lc:
        ratio = params(o, lc) / params(o, ln)
        out["scale"] = ratio
        print("scale: chunked offload trains %.2fx the parameters of no offload under the budget (target >= 5x: %s)" %
              (ratio, "met" if ratio >= 5 else "NOT met"))
    else:
        print("scale: not measured (a mode trained no model: see its runs)")
    if lc:  # the same model without a budget and without offload, where the simulator says it fits the GPU
        f = write(o, scenario(o, lc, False, 0.5))
        s = simulate(o, f)
        if s is not None and s[0] <= s[2]:
            ok, step, peak, why = run(o, f, 0, 0)
            if ok:
                out["unbudgeted_step_s"] = step
                print("throughput: the %d-layer model, chunked under the budget %.2f s/step, without budget or offload "
                      "%.2f s/step (peak %s): %.2fx slower" % (lc, step_c, step, size(peak), step_c / step))
            else:
                print("throughput: the %d-layer model without budget or offload did not run: %s" % (lc, why))
        else:
            print("throughput: the %d-layer model is predicted not to fit the whole GPU without offload; not run" % lc)
    if o.json:
        with open(o.json, "w") as w:
            json.dump(out, w, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
