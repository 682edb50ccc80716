#!/bin/bash
# trainplan export --to torchtitan: scenario "llama3-70b-dgx-h100-256" (llama3-70b-zero3.json)
# TorchTitan (v0.2.2 job config) for dp 8 x cp 1 x tp 8 x pp 4 = 256 GPUs (32 node(s) of 8): sbatch THIS_FILE from the
# torchtitan folder; srun starts one torchrun per node.
# Model: TorchTitan's built-in llama3 flavor "70B" (its RoPE applies Llama 3.1's scaling).
# plan.recompute "selective" under flash attention recomputes nothing in trainplan: mode "none".
#SBATCH --job-name=llama3-70b-dgx-h100-256
#SBATCH --nodes=32
#SBATCH --ntasks-per-node=1
#SBATCH --gpus-per-node=8
#SBATCH --exclusive
set -euo pipefail

# The only placeholders: your data and tokenizer. Set them in the environment (sbatch --export) or here.
DATA_PATH=${DATA_PATH:?"set DATA_PATH to your dataset folder (loaded as TorchTitan's \"c4\" format)"}
TOKENIZER=${TOKENIZER:?"set TOKENIZER to your tokenizer (a Hugging Face name or folder; the model has a vocabulary of 128256 tokens)"}
CKPT_DIR=${CKPT_DIR:-checkpoints/llama3-70b-dgx-h100-256}
export DATA_PATH TOKENIZER CKPT_DIR
# Rendezvous: the job's first node.
MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
MASTER_PORT=${MASTER_PORT:-6000}
export MASTER_ADDR MASTER_PORT

cat > torchtitan-job.toml <<EOF
[job]
description = "trainplan plan for llama3-70b-dgx-h100-256"
dump_folder = "${CKPT_DIR}"

[model]
name = "llama3"
flavor = "70B"
hf_assets_path = "${TOKENIZER}"

[training]
local_batch_size = 64
global_batch_size = 512
seq_len = 8192
steps = 3576279
max_norm = 1
mixed_precision_param = "bfloat16"
dataset = "c4"
dataset_path = "${DATA_PATH}"

[optimizer]
name = "AdamW"
lr = 0.0003
eps = 1e-08
beta1 = 0.9
beta2 = 0.95
weight_decay = 0.1

[lr_scheduler]
warmup_steps = 35762
decay_type = "cosine"
min_lr_factor = 0.1

[checkpoint]
enable = true
interval = 1000

[metrics]
log_freq = 10

[parallelism]
data_parallel_replicate_degree = 1
data_parallel_shard_degree = 8
fsdp_reshard_after_forward = "always"
tensor_parallel_degree = 8
context_parallel_degree = 1
pipeline_parallel_degree = 4
pipeline_parallel_schedule = "1F1B"
pipeline_parallel_microbatch_size = 1
pipeline_parallel_first_stage_less_layers = 4
pipeline_parallel_last_stage_less_layers = 4

[activation_checkpoint]
mode = "none"
EOF

srun --ntasks-per-node=1 --kill-on-bad-exit=1 torchrun --nnodes 32 --nproc-per-node 8 --rdzv-id "$SLURM_JOB_ID" --rdzv-backend c10d --rdzv-endpoint "$MASTER_ADDR:$MASTER_PORT" \
  -m torchtitan.train --job.config_file torchtitan-job.toml
