#!/bin/sh
# trainplan export --to megatron: scenario "gpt3-175b-selene-1536" (scenarios/default.json)
# Megatron-LM (core_v0.15.3 arguments) pretrain_gpt.py for dp 16 x cp 1 x tp 8 x pp 12 = 1536 GPUs (192 node(s) of 8); gradient accumulation 96 micro-batches per step.
# Add your data and tokenizer (--data-path, --tokenizer-type, ...; vocabulary 50257 tokens), optimizer and checkpoint arguments. Run on every node with its NODE_RANK and MASTER_ADDR.
export CUDA_DEVICE_MAX_CONNECTIONS=1
torchrun --nnodes 192 --nproc-per-node 8 --node-rank ${NODE_RANK:-0} --master-addr ${MASTER_ADDR:-localhost} --master-port 6000 pretrain_gpt.py \
  --num-layers 96 \
  --hidden-size 12288 \
  --ffn-hidden-size 49152 \
  --num-attention-heads 96 \
  --seq-length 2048 \
  --max-position-embeddings 2048 \
  --tensor-model-parallel-size 8 \
  --pipeline-model-parallel-size 12 \
  --sequence-parallel \
  --micro-batch-size 1 \
  --global-batch-size 1536 \
  --recompute-granularity selective \
  --use-distributed-optimizer \
  --overlap-grad-reduce \
  --attention-backend unfused \
  --fp16 \
  --train-iters 95368
