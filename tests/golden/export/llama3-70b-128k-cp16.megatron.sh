#!/bin/bash
# trainplan export --to megatron: scenario "llama3.1-70b-128k-cp16-dgx-h100-512" (scenarios/examples/llama3-70b-128k-cp16.json)
# Megatron-LM (core_v0.15.3 arguments) pretrain_gpt.py for dp 1 x cp 16 x tp 8 x pp 4 = 512 GPUs (64 node(s) of 8); gradient accumulation 32 micro-batches per step.
# plan.recompute "selective" under flash attention recomputes nothing in trainplan: no recompute flags.
# Submit from the Megatron-LM folder: sbatch THIS_FILE (one task per GPU; srun starts pretrain_gpt.py).
#SBATCH --job-name=llama3.1-70b-128k-cp16-dgx-h100-512
#SBATCH --nodes=64
#SBATCH --ntasks-per-node=8
#SBATCH --gpus-per-node=8
#SBATCH --exclusive
set -euo pipefail

# The only placeholders: your data and tokenizer. Set them in the environment (sbatch --export) or here.
DATA_PATH=${DATA_PATH:?"set DATA_PATH to your data prefix (Megatron's .bin / .idx, without the suffix)"}
TOKENIZER=${TOKENIZER:?"set TOKENIZER to your tokenizer (a Hugging Face name or folder; the model has a vocabulary of 128256 tokens)"}
CKPT_DIR=${CKPT_DIR:-checkpoints/llama3.1-70b-128k-cp16-dgx-h100-512}
export DATA_PATH TOKENIZER CKPT_DIR
# Rendezvous: the job's first node.
MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
MASTER_PORT=${MASTER_PORT:-6000}
export MASTER_ADDR MASTER_PORT
export CUDA_DEVICE_MAX_CONNECTIONS=1

srun --kill-on-bad-exit=1 bash -c 'export RANK=$SLURM_PROCID LOCAL_RANK=$SLURM_LOCALID WORLD_SIZE=$SLURM_NTASKS; exec python pretrain_gpt.py "$@"' pretrain_gpt.py \
  --num-layers 80 \
  --hidden-size 8192 \
  --ffn-hidden-size 28672 \
  --num-attention-heads 64 \
  --group-query-attention \
  --num-query-groups 8 \
  --seq-length 131072 \
  --max-position-embeddings 131072 \
  --norm-epsilon 1e-05 \
  --swiglu \
  --normalization RMSNorm \
  --position-embedding-type rope \
  --rotary-base 500000 \
  --disable-bias-linear \
  --untie-embeddings-and-output-weights \
  --attention-dropout 0.0 \
  --hidden-dropout 0.0 \
  --tensor-model-parallel-size 8 \
  --pipeline-model-parallel-size 4 \
  --context-parallel-size 16 \
  --sequence-parallel \
  --micro-batch-size 1 \
  --global-batch-size 32 \
  --use-distributed-optimizer \
  --overlap-grad-reduce \
  --attention-backend flash \
  --bf16 \
  --data-path "$DATA_PATH" \
  --tokenizer-type HuggingFaceTokenizer \
  --tokenizer-model "$TOKENIZER" \
  --train-iters 23842 \
  --optimizer adam \
  --lr 0.0003 \
  --min-lr 3e-05 \
  --lr-decay-style cosine \
  --lr-decay-iters 23842 \
  --lr-warmup-iters 238 \
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
