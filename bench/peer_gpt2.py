#!/usr/bin/env python3
"""peer_gpt2.py: the PyTorch peer of `trainplan run --backend cuda` in bench/run_gpu_bench.sh (issue 42).

Trains the GPT-2 that exec/model/gpt.cpp trains ("activation": "gelu" scenarios) with PyTorch on one GPU, with
torch.compile, F.scaled_dot_product_attention (causal) and the fused AdamW, and prints one line
`peer-result: {JSON}` with the median step time of the steps after the first WARMUP, tokens/s, model TFLOP/s and
MFU by two counts:
  project: Megatron-LM's model FLOPs per iteration, as trainplan's iteration line counts them
           (sim/op_cost.cpp megatron_flops_per_iteration, no recompute):
           72 B s l h^2 (1 + s/(6h) + V/(12 l h)), i.e. per token 72 l h^2 + 12 l h s + 6 h V;
  llm.c:   flops_per_token = 6 N + 6 L C T (llm.c train_gpt2.cu, gpt2_estimate_mfu), N = model->num_parameters:
           every parameter, the (padded, 50304-row) token embedding and the position embedding, biases and
           LayerNorms included (llm.c's comment: "we are over-estimating by including LayerNorm params, biases,
           and the position embedding weights"); T the sequence length.
MFU is against the GPU's dense bf16 peak (fp32 peak for --precision fp32) from models/catalog/gpus.json (H200 and
H100 SXM: 989.4 TFLOP/s dense bf16), or --peak-tflops.

The model, as exec/model/gpt.cpp / gpt_layout.cpp build it: token and learned position embeddings, pre-LayerNorm blocks
(LayerNorm with bias, eps 1e-5; fused QKV with bias; causal attention; projection with bias; MLP 4C with biases and
GELU's tanh approximation), a final LayerNorm and an LM head tied to the token embedding (no bias); mean
cross-entropy. Initialisation N(0, 0.02), proj and fc2 weights 0.02 / sqrt(2 L), biases 0, norm weights 1 (the
same distribution as gpt_layout.cpp, not the same numbers). AdamW as trainplan run's defaults (exec/runtime/train.hpp):
betas (0.9, 0.95), eps 1e-8, weight decay 0.1 on the matrices and both embeddings (not on biases and norms),
global gradient-norm clipping at 1.0, linear warm-up over max(1, steps / 10) steps then cosine to 0.1 x lr
(exec/runtime/runtime_state.cpp). Data: the bundled corpus (data/tiny_corpus.txt) as byte tokens, each sequence at the
offset trainplan's sampler picks (exec/io/data.cpp sequence_offset, seed 1234), so both programs see the same batches.

Precision "bf16": torch.autocast(bfloat16) over fp32 parameters (fp32 master weights, fp32 gradients and AdamW
state, as trainplan's bf16 mode keeps them): the GEMMs and attention run in bf16, autocast keeps LayerNorm, the
softmax cross-entropy and the residual sums in fp32; GELU runs on the bf16 GEMM output. trainplan's bf16 mode
(run_gpu_bench.sh's header) also runs bf16 GEMM operands with fp32 masters; what differs: its logits and the
tensors between ops are fp32, PyTorch's GEMM outputs are bf16.

Without torch or without a CUDA device (and without --device cpu) it says so and exits 0, printing no number.
--tiny --device cpu: a small model on the CPU, to check that the script runs and the loss falls (not a benchmark).

Environment: PEER_COMPILE=0 (eager), 1 (torch.compile of the whole model; default), blocks (each transformer
block and the head compiled on their own: regional compilation, one compiled graph reused by every block, far less
compile time for 48 layers). The first step's time (compilation and first use included) is printed separately.
When compilation fails in the first step, that step runs again eager and the result says so (compile_error).
"""
import argparse
import json
import math
import os
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MASK64 = (1 << 64) - 1


def splitmix64(x):
    z = (x + 0x9E3779B97F4A7C15) & MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return z ^ (z >> 31)


def sequence_offset(n_tokens, step, index, seq_len, seed):  # exec/io/data.cpp
    h = splitmix64(splitmix64(splitmix64(seed) ^ step) ^ index)
    return h % (n_tokens - seq_len)


def flops_per_token(layers, hidden, vocab, seq):
    """(project's count, llm.c's count, llm.c's N) per token for the GPT-2 above, no recompute."""
    l, h, V, s = layers, hidden, vocab, seq
    project = 72 * l * h * h * (1 + s / (6 * h) + V / (12 * l * h))
    n_params = l * (12 * h * h + 13 * h) + V * h + s * h + 2 * h  # layers, wte (tied), wpe, final LayerNorm
    llmc = 6 * n_params + 6 * l * h * s
    return project, llmc, n_params


def catalog_peak(device_name, precision):
    """Dense matrix peak (FLOP/s) of this GPU from the project's catalog, None when it has no entry."""
    key = "H200-SXM-141GB" if "H200" in device_name else "H100-SXM-80GB" if "H100" in device_name else None
    if key is None:
        return None
    try:
        with open(os.path.join(ROOT, "models", "catalog", "gpus.json")) as f:
            return float(json.load(f)[key]["matrix_flops_per_s"]["bf16" if precision == "bf16" else "fp32"])
    except (OSError, KeyError, ValueError):
        return None


def print_row(log, side, name):
    """--row: run_gpu_bench.sh's row from the peer's log; a measured result also goes to side (JSON lines)."""
    lines = [ln for ln in open(log) if ln.startswith("peer-result: ")]
    r = json.loads(lines[-1][len("peer-result: "):]) if lines else {"name": name, "skipped": "no result line"}
    fmt = "| %-10s | %-9s | %-16s | %-8s | %-7s | %-18s | %s |"
    if "skipped" in r:
        print(fmt % (r["name"], "bf16 peer", "-", "-", "-", "-", "not run: " + r["skipped"]))
        return
    comp = {"0": "eager", "1": "torch.compile", "blocks": "torch.compile per block"}[r["compile"]]
    if r.get("compile_error"):
        comp += " (torch.compile failed: %s)" % r["compile_error"]
    mfu = ("MFU %.1f %% (llm.c's count: %.1f TFLOP/s, %.1f %%) of the dense bf16 peak"
           % (100 * r["mfu_project"], r["tflops_llmc"], 100 * r["mfu_llmc"]) if r["peak_tflops"]
           else "llm.c's count: %.1f TFLOP/s" % r["tflops_llmc"])
    note = ("%s; PyTorch %s on %s, %s (first step %.1f s), SDPA, %s AdamW, autocast bf16 over fp32 weights; "
            "loss %.4f -> %.4f" % (mfu, r["torch"], r["device"], comp, r["first_step_s"],
                                   "fused" if r["fused_adamw"] else "unfused", r["losses"][0], r["losses"][-1]))
    mem = "%.2f (-)" % (r["peak_memory_bytes"] / 2**30) if r["peak_memory_bytes"] else "-"
    print(fmt % (r["name"], "bf16 peer", "%.1f (-)" % (1e3 * r["median_step_s"]), "%.0f" % r["tokens_per_s"],
                 "%.1f" % r["tflops_project"], mem, note))
    r["program"] = "pytorch peer (%s)" % comp
    with open(side, "a") as f:
        f.write(json.dumps(r) + "\n")


def print_table(side):
    """--table: trainplan's bf16 rows and the peer's (side: JSON lines, run_gpu_bench.sh), by both counts."""
    rs = [json.loads(ln) for ln in open(side) if ln.strip()]
    pk = next((r["peak_tflops"] for r in rs if r.get("peak_tflops")), None)
    print("\nside by side in bf16, one GPU, one call: model TFLOP/s by the project's count (Megatron-LM's) and by "
          "llm.c's (6N + 6LCT); MFU against the dense bf16 peak (%s TFLOP/s)" % ("%.1f" % pk if pk else "unknown"))
    print("| model | program | step ms | tokens/s | TFLOP/s | MFU | TFLOP/s (llm.c) | MFU (llm.c) | tokens/s vs peer |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rs:
        fp, fl, _ = flops_per_token(r["layers"], r["hidden"], r["vocab"], r["seq_len"])
        tok = r["tokens_per_s"]
        peer = [p for p in rs if p["name"] == r["name"] and p["program"].startswith("pytorch")]
        mfu = lambda f: "%.1f %%" % (100 * f * tok / (pk * 1e12)) if pk else "-"
        print("| %s | %s | %.1f | %.0f | %.1f | %s | %.1f | %s | %s |" % (
            r["name"], r["program"], 1e3 * r["median_step_s"], tok, fp * tok / 1e12, mfu(fp), fl * tok / 1e12, mfu(fl),
            "%.2f x" % (tok / peer[0]["tokens_per_s"]) if peer else "-"))


def say(msg):
    print("peer_gpt2.py: " + msg, file=sys.stderr, flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--name", default="gpt2-124m")
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--hidden", type=int, default=768)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--vocab", type=int, default=50304)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--batch", type=int, default=8, help="micro-batch = global batch (one GPU)")
    ap.add_argument("--steps", type=int, default=int(os.environ.get("STEPS", 8)))
    ap.add_argument("--warmup", type=int, default=2, help="first steps left out of the median (as run_gpu_bench.sh)")
    ap.add_argument("--lr", type=float, default=1e-4)
    ap.add_argument("--precision", choices=["bf16", "fp32"], default="bf16")
    ap.add_argument("--compile", default=os.environ.get("PEER_COMPILE", "1"), choices=["0", "1", "blocks"])
    ap.add_argument("--device", default="cuda", help="cuda (the benchmark) or cpu (a check of the script only)")
    ap.add_argument("--tiny", action="store_true",
                    help="2 layers, hidden 64, 4 heads, seq 64, batch 4, vocab 256 (a CPU check)")
    ap.add_argument("--peak-tflops", type=float, default=0, help="dense peak for MFU (default: the catalog's)")
    ap.add_argument("--data", default=os.path.join(ROOT, "data", "tiny_corpus.txt"))
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--row", metavar="LOG", help="print run_gpu_bench.sh's row from a run's log (no run)")
    ap.add_argument("--side", metavar="JSONL", help="with --row: append the measured result here")
    ap.add_argument("--table", metavar="JSONL", help="print the side-by-side table of these results (no run)")
    if "--tiny" in sys.argv[1:]:  # smaller defaults; arguments given still count
        ap.set_defaults(layers=2, hidden=64, heads=4, seq=64, batch=4, vocab=256)
    a = ap.parse_args()
    if a.row:
        print_row(a.row, a.side or os.devnull, a.name)
        return 0
    if a.table:
        print_table(a.table)
        return 0
    if a.tiny:
        a.name += "-tiny"

    try:
        import torch
        import torch.nn as nn
        import torch.nn.functional as F
    except ImportError as e:
        say("no PyTorch (%s): nothing measured" % e)
        print("peer-result: " + json.dumps({"name": a.name, "skipped": "no torch"}), flush=True)
        return 0
    if a.device == "cuda" and not torch.cuda.is_available():
        say("no CUDA device (torch %s): nothing measured" % torch.__version__)
        print("peer-result: " + json.dumps({"name": a.name, "skipped": "no CUDA device", "torch": torch.__version__}),
              flush=True)
        return 0
    dev = torch.device(a.device)
    C, L, H, V, T, B = a.hidden, a.layers, a.heads, a.vocab, a.seq, a.batch
    assert C % H == 0, "hidden must be a multiple of heads"

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1 = nn.LayerNorm(C, eps=1e-5)
            self.qkv = nn.Linear(C, 3 * C)
            self.proj = nn.Linear(C, C)
            self.ln2 = nn.LayerNorm(C, eps=1e-5)
            self.fc1 = nn.Linear(C, 4 * C)
            self.fc2 = nn.Linear(4 * C, C)

        def forward(self, x):
            b, t, _ = x.shape
            q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
            q, k, v = (z.view(b, t, H, C // H).transpose(1, 2) for z in (q, k, v))
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.proj(y.transpose(1, 2).reshape(b, t, C))
            return x + self.fc2(F.gelu(self.fc1(self.ln2(x)), approximate="tanh"))

    class Head(nn.Module):  # final LayerNorm, the tied LM head and the mean cross-entropy
        def __init__(self, wte):
            super().__init__()
            self.lnf = nn.LayerNorm(C, eps=1e-5)
            self.wte = wte  # shared with the embedding, not a second parameter

        def forward(self, x, targets):
            logits = F.linear(self.lnf(x), self.wte.weight)
            return F.cross_entropy(logits.float().view(-1, V), targets.reshape(-1))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte = nn.Embedding(V, C)
            self.wpe = nn.Embedding(T, C)
            self.blocks = nn.ModuleList(Block() for _ in range(L))
            self.head = Head(self.wte)

        def forward(self, idx, targets):
            x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device))
            for blk in self.blocks:
                x = blk(x)
            return self.head(x, targets)

    torch.manual_seed(a.seed)
    with torch.device(dev):
        model = GPT()
    resid_sd = 0.02 / math.sqrt(2 * L)
    decay, no_decay = [], []
    with torch.no_grad():
        for name, p in model.named_parameters():  # (the tied wte once)
            if p.dim() == 2:
                p.normal_(0.0, resid_sd if name.endswith(("proj.weight", "fc2.weight")) else 0.02)
                decay.append(p)
            else:
                (p.fill_(1.0) if ".ln" in name and name.endswith(".weight") else p.zero_())  # norm weights; biases
                no_decay.append(p)
    n_params = sum(p.numel() for p in model.parameters())
    fpt_project, fpt_llmc, n_llmc = flops_per_token(L, C, V, T)
    assert n_params == n_llmc, (n_params, n_llmc)
    fused = dev.type == "cuda"
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=a.lr, betas=(0.9, 0.95), eps=1e-8, fused=fused)
    warm = max(1, a.steps // 10)

    def lr_at(step):  # exec/runtime/runtime_state.cpp learning_rate, min_lr_ratio 0.1
        if step < warm:
            return a.lr * (step + 1) / warm
        if a.steps <= warm:
            return a.lr
        r = (step - warm) / max(1, a.steps - warm)
        return a.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * r)))

    if a.compile == "1":
        fwd = torch.compile(model)
    else:
        if a.compile == "blocks":
            for blk in model.blocks:
                blk.compile()
            model.head.compile()
        fwd = model

    with open(a.data, "rb") as f:
        tokens = torch.frombuffer(bytearray(f.read()), dtype=torch.uint8).long()  # byte tokens (exec/io/data.cpp)
    n_tok = tokens.numel()
    ar = torch.arange(T + 1)

    def batch(step):
        offs = torch.tensor([sequence_offset(n_tok, step, i, T, a.seed) for i in range(B)])
        seqs = tokens[offs[:, None] + ar]
        return seqs[:, :-1].contiguous().to(dev), seqs[:, 1:].contiguous().to(dev)

    amp = torch.autocast(device_type=dev.type, dtype=torch.bfloat16, enabled=a.precision == "bf16")
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
        dev_name = torch.cuda.get_device_name()
    else:
        dev_name = "cpu"
    say("%s: %d layers, hidden %d, %d heads, seq %d, batch %d, vocab %d, %s, %.1fM parameters, compile=%s, "
        "torch %s on %s" % (a.name, L, C, H, T, B, V, a.precision, n_params / 1e6, a.compile, torch.__version__,
                            dev_name))
    times, losses = [], []
    compile_error = None
    for step in range(a.steps):
        x, y = batch(step)
        sync()
        t0 = time.perf_counter()
        try:
            with amp:
                loss = fwd(x, y)
            loss.backward()
        except Exception as e:  # torch.compile's failure (no C compiler for Triton, ...): the step again, eager
            if step > 0 or a.compile == "0":
                raise
            compile_error = ("%s: %s" % (type(e).__name__, e)).splitlines()[0][:200]
            say("torch.compile failed (%s): eager from here" % compile_error)
            torch._dynamo.reset()
            for m in [*model.blocks, model.head]:
                m._compiled_call_impl = None  # (undoes nn.Module.compile)
            fwd = model
            opt.zero_grad(set_to_none=True)
            sync()
            t0 = time.perf_counter()
            with amp:
                loss = fwd(x, y)
            loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0, foreach=True)
        for g in opt.param_groups:
            g["lr"] = lr_at(step)
        opt.step()
        opt.zero_grad(set_to_none=True)
        lv = loss.item()  # (a synchronisation, as trainplan reads its loss every step)
        sync()
        times.append(time.perf_counter() - t0)
        losses.append(lv)
        say("step %d/%d: %.1f ms, loss %.4f, grad norm %.3f" % (step + 1, a.steps, times[-1] * 1e3, lv, float(norm)))
    if not all(math.isfinite(v) for v in losses):
        say("a non-finite loss: no numbers")
        print("peer-result: " + json.dumps({"name": a.name, "skipped": "non-finite loss", "losses": losses}),
              flush=True)
        return 1
    timed = times[a.warmup:] or times
    med = statistics.median(timed)
    tps = B * T / med
    peak = a.peak_tflops * 1e12 if a.peak_tflops > 0 else (catalog_peak(dev_name, a.precision) if fused else None)
    r = {
        "name": a.name, "program": "pytorch", "torch": torch.__version__, "device": dev_name,
        "layers": L, "hidden": C, "heads": H, "vocab": V, "seq_len": T, "batch": B, "precision": a.precision,
        "compile": a.compile if compile_error is None else "0", "compile_error": compile_error,
        "fused_adamw": fused, "params": n_params, "steps": a.steps, "warmup": a.warmup,
        "step_time_s": times, "median_step_s": med, "first_step_s": times[0],
        # what the first step took beyond a steady one: compilation (PEER_COMPILE != 0) and first-use costs
        "first_step_extra_s": times[0] - med,
        "tokens_per_s": tps,
        "flops_per_token_project": fpt_project, "flops_per_token_llmc": fpt_llmc,
        "tflops_project": fpt_project * tps / 1e12, "tflops_llmc": fpt_llmc * tps / 1e12,
        "peak_tflops": peak / 1e12 if peak else None,
        "mfu_project": fpt_project * tps / peak if peak else None,
        "mfu_llmc": fpt_llmc * tps / peak if peak else None,
        "peak_memory_bytes": torch.cuda.max_memory_allocated() if dev.type == "cuda" else None,
        "losses": losses,
    }
    print("peer-result: " + json.dumps(r), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
