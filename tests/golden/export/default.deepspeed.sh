#!/bin/bash
# trainplan export --to deepspeed: scenario "gpt3-175b-selene-1536" (scenarios/default.json)
# DeepSpeed ZeRO-1 with Megatron-DeepSpeed for dp 16 x tp 8 x pp 12 = 1536 GPUs (192 node(s) of 8).
# Submit from the Megatron-DeepSpeed folder: sbatch THIS_FILE (one task per GPU under srun).
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
cat > ds_config.json <<'EOF'
{
  "communication_data_type": "fp32",
  "data_types": {
    "grad_accum_dtype": "fp32"
  },
  "fp16": {
    "enabled": true,
    "initial_scale_power": 16
  },
  "gradient_accumulation_steps": 96,
  "gradient_clipping": 1.0,
  "steps_per_print": 10,
  "train_batch_size": 1536,
  "train_micro_batch_size_per_gpu": 1,
  "zero_optimization": {
    "contiguous_gradients": true,
    "overlap_comm": true,
    "stage": 1
  }
}
EOF

srun --kill-on-bad-exit=1 bash -c 'export RANK=$SLURM_PROCID LOCAL_RANK=$SLURM_LOCALID WORLD_SIZE=$SLURM_NTASKS; exec python pretrain_gpt.py "$@"' pretrain_gpt.py \
  --tensor-model-parallel-size 8 \
  --pipeline-model-parallel-size 12 \
  --num-layers 96 \
  --hidden-size 12288 \
  --ffn-hidden-size 49152 \
  --num-attention-heads 96 \
  --seq-length 2048 \
  --max-position-embeddings 2048 \
  --layernorm-epsilon 1e-05 \
  --sequence-parallel \
  --micro-batch-size 1 \
  --global-batch-size 1536 \
  --fp16 \
  --recompute-granularity selective \
  --zero-stage 1 \
  --data-path "$DATA_PATH" \
  --tokenizer-type HFTokenizer \
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
  --eval-iters 10 \
  --deepspeed \
  --deepspeed_config ds_config.json
