#!/bin/sh
# trainplan export --to nemo: scenario "gpt3-175b-selene-1536" (scenarios/default.json)
# NeMo 2 (nemo-run CLI) pretraining for dp 16 x cp 1 x tp 8 x pp 12 = 1536 GPUs; gradient accumulation 96 micro-batches per step. The recipe's data
# module, tokenizer (vocabulary 50257 tokens) and optimizer schedule stay; override them too.
nemo llm pretrain --yes --factory gpt3_175b \
  model.config.num_layers=96 \
  model.config.hidden_size=12288 \
  model.config.ffn_hidden_size=49152 \
  model.config.num_attention_heads=96 \
  model.config.num_query_groups=96 \
  model.config.seq_length=2048 \
  model.config.share_embeddings_and_output_weights=True \
  model.config.gated_linear_unit=False \
  model.config.normalization=LayerNorm \
  model.config.position_embedding_type=learned_absolute \
  model.config.add_bias_linear=True \
  model.config.add_qkv_bias=False \
  trainer.num_nodes=192 \
  trainer.devices=8 \
  trainer.strategy.tensor_model_parallel_size=8 \
  trainer.strategy.pipeline_model_parallel_size=12 \
  trainer.strategy.virtual_pipeline_model_parallel_size=None \
  trainer.strategy.context_parallel_size=1 \
  trainer.strategy.sequence_parallel=True \
  trainer.strategy.expert_model_parallel_size=1 \
  data.micro_batch_size=1 \
  data.global_batch_size=1536 \
  data.seq_length=2048 \
  model.config.recompute_granularity=selective \
  trainer.strategy.ddp.use_distributed_optimizer=True \
  optim.config.use_distributed_optimizer=True \
  trainer.strategy.ddp.overlap_grad_reduce=True \
  trainer.strategy.ddp.overlap_param_gather=False \
  model.config.tp_comm_overlap=False \
  model.config.attention_backend=unfused \
  trainer.strategy.ddp.grad_reduce_in_fp32=True \
  trainer.plugins=fp16_mixed \
  trainer.max_steps=95368
