#!/bin/sh
# trainplan export --to deepspeed: scenario "gpt3-175b-selene-1536" (scenarios/default.json)
# DeepSpeed ZeRO-1 with Megatron-DeepSpeed for dp 16 x tp 8 x pp 12 = 1536 GPUs (192 node(s) of 8). Add your data and tokenizer (--data-path,
# --tokenizer-type, ...; vocabulary 50257 tokens) and a hostfile for several nodes.
cat > ds_config.json <<'EOF'
{
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
deepspeed --num_nodes 192 --num_gpus 8 pretrain_gpt.py \
  --tensor-model-parallel-size 8 \
  --pipeline-model-parallel-size 12 \
  --num-layers 96 \
  --hidden-size 12288 \
  --ffn-hidden-size 49152 \
  --num-attention-heads 96 \
  --seq-length 2048 \
  --max-position-embeddings 2048 \
  --sequence-parallel \
  --micro-batch-size 1 \
  --global-batch-size 1536 \
  --fp16 \
  --recompute-granularity selective \
  --zero-stage 1 \
  --train-iters 95368 \
  --deepspeed \
  --deepspeed_config ds_config.json
