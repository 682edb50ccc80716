#!/bin/bash
# trainplan export --to megatron: scenario "gpt3-175b-selene-1536" (scenarios/default.json)
# Megatron-LM (core_v0.15.3 arguments) pretrain_gpt.py for dp 16 x cp 1 x tp 8 x pp 12 = 1536 GPUs (192 node(s) of 8); gradient accumulation 96 micro-batches per step.
# Submit from the Megatron-LM folder: sbatch THIS_FILE (one task per GPU; srun starts pretrain_gpt.py).
#SBATCH --job-name=gpt3-175b-selene-1536
#SBATCH --nodes=192
#SBATCH --ntasks-per-node=8
#SBATCH --gpus-per-node=8
#SBATCH --exclusive
set -euo pipefail

# The only placeholders: your data and tokenizer. Set them in the environment (sbatch --export) or here.
DATA_PATH=${DATA_PATH:?"set DATA_PATH to your data prefix (Megatron's .bin / .idx, without the suffix)"}
TOKENIZER=${TOKENIZER:?"set TOKENIZER to your tokenizer (a Hugging Face name or folder; the model has a vocabulary of 50257 tokens)"}
CKPT_DIR=${CKPT_DIR:-checkpoints/gpt3-175b-selene-1536}
export DATA_PATH TOKENIZER CKPT_DIR
# Rendezvous: the job's first node.
MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
MASTER_PORT=${MASTER_PORT:-6000}
export MASTER_ADDR MASTER_PORT
export CUDA_DEVICE_MAX_CONNECTIONS=1

srun --kill-on-bad-exit=1 bash -c 'export RANK=$SLURM_PROCID LOCAL_RANK=$SLURM_LOCALID WORLD_SIZE=$SLURM_NTASKS; exec python pretrain_gpt.py "$@"' pretrain_gpt.py \
  --num-layers 96 \
  --hidden-size 12288 \
  --ffn-hidden-size 49152 \
  --num-attention-heads 96 \
  --seq-length 2048 \
  --max-position-embeddings 2048 \
  --norm-epsilon 1e-05 \
  --tensor-model-parallel-size 8 \
  --pipeline-model-parallel-size 12 \
  --sequence-parallel \
  --micro-batch-size 1 \
  --global-batch-size 1536 \
  --recompute-granularity selective \
  --recompute-modules core_attn \
  --use-distributed-optimizer \
  --overlap-grad-reduce \
  --attention-backend unfused \
  --fp16 \
  --accumulate-allreduce-grads-in-fp32 \
  --data-path "$DATA_PATH" \
  --tokenizer-type HuggingFaceTokenizer \
  --tokenizer-model "$TOKENIZER" \
  --train-iters 95368 \
  --optimizer adam \
  --lr 0.0003 \
  --min-lr 3e-05 \
  --lr-decay-style cosine \
  --lr-decay-iters 95368 \
  --lr-warmup-iters 953 \
  --weight-decay 0.1 \
  --clip-grad 1 \
  --adam-beta1 0.9 \
  --adam-beta2 0.95 \
  --adam-eps 1e-08 \
  --save "$CKPT_DIR" \
  --load "$CKPT_DIR" \
  --save-interval 1000 \
  --log-interval 10 \
  --eval-interval 1000 \
  --eval-iters 10
