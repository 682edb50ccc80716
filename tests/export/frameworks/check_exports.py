#!/usr/bin/env python3
"""check_exports: the `export-frameworks` label's checker. Each exported Slurm script in a folder (NAME.TARGET.sbatch,
written by scripts/export_frameworks.sh with `trainplan export`) is handed to the framework's own parser or config
class, as installed in this interpreter:

  megatron    Megatron-LM's megatron/training/arguments.py parse_args + validate_args, then
              core_transformer_config_from_args (Megatron-Core's TransformerConfig checks: layouts, recompute
              modules, MoE options), from the checkout in $MEGATRON_LM_DIR with its world size from the #SBATCH lines
  deepspeed   DeepSpeed's DeepSpeedConfig on the script's ds_config.json, its data-parallel size from the job
  torchtitan  TorchTitan's ConfigManager.parse_args on the script's TOML (every key must be a JobConfig field)
  nemo        the script's launcher: the recipe's pretrain_recipe(), its data module, NeMo-Run's parse_cli_args over
              the overrides, up to run.run (NeMo installed)

Then the parsed result is compared with the plan the script's header states (parallel degrees, batches). A target
whose framework is not importable is reported as "not run: <why>" and does not fail the check; a parse error or a
mismatch does. Invariant: nothing here imitates a framework — every check calls the framework's own code.
Usage: check_exports.py DIR  (prints one line per script and the framework versions; exit 1 on any failure)
"""
import importlib
import os
import re
import shlex
import sys
import tempfile
import traceback

# No GPU here: Megatron-Core builds a CUDA allocator extension when imported (megatron/core/inference/
# unified_memory.py) and only catches RuntimeError / OSError; without an architecture list torch raises IndexError
# first. An architecture and no CUDA toolkit make the build fail the way it expects (a warning, no allocator).
os.environ.setdefault("TORCH_CUDA_ARCH_LIST", "9.0")
os.environ.setdefault("CUDA_HOME", "/nonexistent-cuda")

PLACEHOLDERS = {"DATA_PATH": "/data/corpus_text_document", "TOKENIZER": "gpt2", "CKPT_DIR": "/tmp/ckpt",
                "MASTER_ADDR": "node001", "MASTER_PORT": "6000", "SLURM_JOB_ID": "1"}


def sbatch(text, opt):
    m = re.search(r"^#SBATCH --%s=(\d+)$" % opt, text, re.M)
    return int(m.group(1)) if m else 0


def header_plan(text):
    """dp, cp, tp, pp from the script's header line 'for dp D x cp C x tp T x pp P' (cp absent for DeepSpeed)."""
    m = re.search(r"dp (\d+)(?: x cp (\d+))? x tp (\d+) x pp (\d+)", text)
    return {"dp": int(m.group(1)), "cp": int(m.group(2) or 1), "tp": int(m.group(3)), "pp": int(m.group(4))}


def command_tokens(text, marker):
    """The srun command containing `marker`, continuation lines joined, placeholders expanded, split as bash would."""
    lines = text.split("\n")
    start = next(i for i, l in enumerate(lines) if l.startswith("srun") and marker in l)
    cmd = []
    for l in lines[start:]:
        if l.endswith("\\"):
            cmd.append(l[:-1])
        else:
            cmd.append(l)
            break
    joined = " ".join(cmd)
    for k, v in PLACEHOLDERS.items():
        joined = joined.replace('"$%s"' % k, v).replace("$%s" % k, v)
    return shlex.split(joined)


def heredoc(text, opener):
    a = text.index(opener) + len(opener)
    body = text[a:text.index("\nEOF\n", a)]
    for k, v in PLACEHOLDERS.items():
        body = body.replace("${%s}" % k, v)
    return body


class NeedsTransformerEngine(Exception):
    """Megatron-Core's TransformerConfig refused for want of Transformer Engine (a GPU-only package): its checks up
    to that point ran (layouts, recompute modules), the rest did not."""


def check_megatron(text):
    import torch
    import megatron.training.arguments as margs
    from megatron.training.arguments import parse_args, validate_args, core_transformer_config_from_args
    # validate_args asks the GPU for its architecture; there is none here: it answers the exports' H100 / H200 (sm_90).
    torch.cuda.get_device_capability = lambda *a, **k: (9, 0)
    margs.get_device_arch_version = lambda: 9
    toks = command_tokens(text, "pretrain_gpt.py")
    argv = toks[toks.index("pretrain_gpt.py") + 1:]  # after bash -c '...' $0
    world = sbatch(text, "nodes") * sbatch(text, "gpus-per-node")
    os.environ.update(WORLD_SIZE=str(world), RANK="0", LOCAL_RANK="0")
    os.environ.pop("CUDA_DEVICE_MAX_CONNECTIONS", None)
    for k, v in re.findall(r"^export (CUDA_DEVICE_MAX_CONNECTIONS)=(\S+)$", text, re.M):  # the script's environment
        os.environ[k] = v
    sys.argv = ["pretrain_gpt.py"] + argv
    args = parse_args()
    validate_args(args, {})
    p = header_plan(text)
    got = {"dp": args.data_parallel_size, "tp": args.tensor_model_parallel_size,
           "pp": args.pipeline_model_parallel_size, "cp": args.context_parallel_size}
    assert got == p, "parallel sizes %s, plan %s" % (got, p)
    try:
        core_transformer_config_from_args(args)
    except (ValueError, AssertionError) as e:
        if re.search(r"\bTE\b|Transformer Engine|transformer_engine", str(e)):
            raise NeedsTransformerEngine(str(e).split("\n")[0][:120])
        raise


class DataParallelMpu:
    """DeepSpeed's documented mpu interface (the object Megatron passes to deepspeed.initialize), giving
    DeepSpeedConfig the job's data-parallel size without a process group."""

    def __init__(self, dp, tp, pp):
        self.dp, self.tp, self.pp = dp, tp, pp

    def get_data_parallel_world_size(self):
        return self.dp

    def get_model_parallel_world_size(self):
        return self.tp

    def get_tensor_model_parallel_world_size(self):
        return self.tp

    def get_pipeline_model_parallel_world_size(self):
        return self.pp

    def get_sequence_parallel_world_size(self):
        return 1

    def get_data_parallel_rank(self):
        return 0


def init_single_process_group():
    """DeepSpeedConfig asks deepspeed.comm for the rank before it asks the mpu for the data-parallel size; a
    one-process gloo group on this machine answers the first (the mpu gives the job's size)."""
    import deepspeed
    import deepspeed.comm as dist
    if not dist.is_initialized():
        os.environ.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1", MASTER_PORT="29517")
        deepspeed.init_distributed(dist_backend="gloo", verbose=False)


def check_deepspeed(text):
    import json
    from deepspeed.runtime.config import DeepSpeedConfig
    init_single_process_group()
    cfg = json.loads(heredoc(text, "cat > ds_config.json <<'EOF'\n"))
    p = header_plan(text)
    c = DeepSpeedConfig(cfg, mpu=DataParallelMpu(p["dp"], p["tp"], p["pp"]))
    assert c.train_batch_size == cfg["train_batch_size"], c.train_batch_size
    assert c.zero_optimization_stage == cfg["zero_optimization"]["stage"]


def check_torchtitan(text):
    from torchtitan.config import ConfigManager
    with tempfile.NamedTemporaryFile("w", suffix=".toml", delete=False) as f:
        f.write(heredoc(text, "cat > torchtitan-job.toml <<EOF\n"))
    cfg = ConfigManager().parse_args(["--job.config_file", f.name])
    os.unlink(f.name)
    p = header_plan(text)
    par = cfg.parallelism
    got = {"dp": max(par.data_parallel_shard_degree, 1) * par.data_parallel_replicate_degree, "cp": par.context_parallel_degree,
           "tp": par.tensor_parallel_degree, "pp": par.pipeline_parallel_degree}
    assert got == p, "parallel degrees %s, plan %s" % (got, p)
    if "flavor = \"" in text:
        flavor = re.search(r'flavor = "([^"]+)"', text).group(1)
        if "built-in llama3 flavor" in text:
            from torchtitan.models.llama3 import llama3_args
            assert flavor in llama3_args, flavor


def check_nemo(text):
    """The script's own launcher (the recipe, its data module, NeMo-Run's CLI parser over the overrides) up to the
    run itself, with the job's Slurm environment."""
    launcher = heredoc(text, "cat > trainplan_nemo_pretrain.py <<'EOF'\n")
    assert launcher.rstrip().endswith("run.run(recipe, direct=True)"), launcher[-200:]
    toks = command_tokens(text, "python trainplan_nemo_pretrain.py")
    argv = toks[toks.index("trainplan_nemo_pretrain.py"):]
    os.environ.update(SLURM_JOB_NUM_NODES=str(sbatch(text, "nodes")), SLURM_NTASKS_PER_NODE=str(sbatch(text, "gpus-per-node")),
                      **{k: PLACEHOLDERS[k] for k in ("DATA_PATH", "TOKENIZER", "CKPT_DIR")})
    sys.argv = argv
    scope = {"__name__": "trainplan_nemo_pretrain"}
    exec(compile(launcher.rstrip()[:-len("run.run(recipe, direct=True)")], "trainplan_nemo_pretrain.py", "exec"), scope)
    recipe = scope["recipe"]
    p = header_plan(text)
    s = recipe.trainer.strategy
    got = {"tp": s.tensor_model_parallel_size, "pp": s.pipeline_model_parallel_size, "cp": s.context_parallel_size,
           # (NeMo-Run parses trainer.devices=8 into Lightning's Union[list, str, int] as the string "8", which
           # Lightning's Trainer reads as 8 devices)
           "dp": int(recipe.trainer.num_nodes) * int(recipe.trainer.devices) // (s.tensor_model_parallel_size *
                                                                      s.pipeline_model_parallel_size * s.context_parallel_size)}
    assert got == p, "parallel sizes %s, plan %s" % (got, p)


CHECKS = {"megatron": check_megatron, "deepspeed": check_deepspeed, "torchtitan": check_torchtitan, "nemo": check_nemo}
IMPORTS = {"megatron": "megatron.training.arguments", "deepspeed": "deepspeed.runtime.config",
           "torchtitan": "torchtitan.config", "nemo": "nemo.collections.llm.recipes"}
DISTS = {"megatron": ["megatron-core", "torch"], "deepspeed": ["deepspeed", "torch"], "torchtitan": ["torchtitan", "torch"],
         "nemo": ["nemo_toolkit", "nemo_run", "megatron-core", "torch"]}


def versions(target):
    from importlib.metadata import version, PackageNotFoundError
    out = []
    for d in DISTS[target]:
        try:
            out.append("%s %s" % (d, version(d)))
        except PackageNotFoundError:
            out.append("%s -" % d)
    return ", ".join(out)


def main():
    folder = sys.argv[1]
    files = sorted(f for f in os.listdir(folder) if f.endswith(".sbatch"))
    unavailable, failed, passed, partial = {}, [], 0, []
    for target in CHECKS:
        try:
            importlib.import_module(IMPORTS[target])
        except Exception as e:  # an install that failed, or a framework that needs what this machine lacks
            unavailable[target] = "%s: %s" % (type(e).__name__, str(e).split("\n")[0][:160])
    for f in files:
        target = f.rsplit(".", 2)[-2]
        if target in unavailable:
            continue
        text = open(os.path.join(folder, f)).read()
        try:
            CHECKS[target](text)
            passed += 1
            print("ok      %s" % f)
        except NeedsTransformerEngine as e:
            passed += 1
            partial.append(f)
            print("ok      %s (parse_args + validate_args; TransformerConfig stopped for Transformer Engine: %s)" % (f, e))
        except BaseException as e:  # argparse exits with SystemExit on a bad flag
            failed.append(f)
            print("FAILED  %s: %s: %s" % (f, type(e).__name__, str(e)[:300]))
            traceback.print_exc(limit=3)
    print()
    for target in CHECKS:
        n = sum(1 for f in files if f.rsplit(".", 2)[-2] == target)
        state = "not run (%s)" % unavailable[target] if target in unavailable else "checked"
        print("%-10s %2d scripts, %s; %s" % (target, n, state, versions(target)))
    if partial:
        print("%d megatron scripts: TransformerConfig's checks ran up to its Transformer Engine requirement" % len(partial))
    print("%d passed, %d failed, %d not run" % (passed, len(failed),
                                                sum(1 for f in files if f.rsplit(".", 2)[-2] in unavailable)))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
