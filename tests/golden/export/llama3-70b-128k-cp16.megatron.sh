#!/bin/sh
# trainplan export --to megatron: scenario "llama3.1-70b-128k-cp16-dgx-h100-512" (scenarios/examples/llama3-70b-128k-cp16.json)
# Megatron-LM (core_v0.15.3 arguments) pretrain_gpt.py for dp 1 x cp 16 x tp 8 x pp 4 = 512 GPUs (64 node(s) of 8); gradient accumulation 32 micro-batches per step.
# Add your data and tokenizer (--data-path, --tokenizer-type, ...; vocabulary 128256 tokens), optimizer and checkpoint arguments. Run on every node with its NODE_RANK and MASTER_ADDR.
export CUDA_DEVICE_MAX_CONNECTIONS=1
torchrun --nnodes 64 --nproc-per-node 8 --node-rank ${NODE_RANK:-0} --master-addr ${MASTER_ADDR:-localhost} --master-port 6000 pretrain_gpt.py \
  --num-layers 80 \
  --hidden-size 8192 \
  --ffn-hidden-size 28672 \
  --num-attention-heads 64 \
  --group-query-attention \
  --num-query-groups 8 \
  --seq-length 131072 \
  --max-position-embeddings 131072 \
  --swiglu \
  --normalization RMSNorm \
  --position-embedding-type rope \
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
  --recompute-granularity selective \
  --use-distributed-optimizer \
  --overlap-grad-reduce \
  --attention-backend flash \
  --bf16 \
  --train-iters 23842
