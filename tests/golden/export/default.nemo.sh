#!/bin/bash
# trainplan export --to nemo: scenario "gpt3-175b-selene-1536" (scenarios/default.json)
# NeMo 2 (nemo-run CLI) pretraining for dp 16 x cp 1 x tp 8 x pp 12 = 1536 GPUs (192 node(s) of 8); gradient accumulation 96 micro-batches per step.
# sbatch THIS_FILE inside the NeMo container: one task per GPU, no NeMo-Run executor (the recipe runs in
# each task; Lightning reads the ranks from Slurm). The overrides are those of `nemo llm pretrain --factory`.
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
cat > trainplan_nemo_pretrain.py <<'EOF'
import importlib, os, sys
import nemo_run as run
from nemo_run.cli.cli_parser import parse_cli_args
from nemo.collections.common.tokenizers.huggingface.auto_tokenizer import AutoTokenizer
from nemo.collections.llm.gpt.data.pre_training import PreTrainingDataModule

recipe_name, overrides = sys.argv[1], sys.argv[2:]
recipe = importlib.import_module("nemo.collections.llm.recipes." + recipe_name).pretrain_recipe(
    dir=os.environ["CKPT_DIR"], name=os.environ.get("SLURM_JOB_NAME", "trainplan"),
    num_nodes=int(os.environ["SLURM_JOB_NUM_NODES"]), num_gpus_per_node=int(os.environ["SLURM_NTASKS_PER_NODE"]))
recipe.data = run.Config(PreTrainingDataModule, paths=[os.environ["DATA_PATH"]],
                         tokenizer=run.Config(AutoTokenizer, pretrained_model_name=os.environ["TOKENIZER"]))
recipe = parse_cli_args(recipe, overrides)
run.run(recipe, direct=True)
EOF

srun --kill-on-bad-exit=1 python trainplan_nemo_pretrain.py gpt3_175b \
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
  model.config.layernorm_epsilon=1e-05 \
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
  model.config.recompute_modules="['core_attn']" \
  trainer.strategy.ddp.use_distributed_optimizer=True \
  optim.config.use_distributed_optimizer=True \
  trainer.strategy.ddp.overlap_grad_reduce=True \
  trainer.strategy.ddp.overlap_param_gather=False \
  model.config.tp_comm_overlap=False \
  model.config.attention_backend='megatron.core.transformer.enums.AttnBackend(3)' \
  trainer.plugins=nemo.collections.llm.recipes.precision.mixed_precision.fp16_mixed \
  trainer.plugins.grad_reduce_in_fp32=True \
  trainer.max_steps=95368 \
  trainer.log_every_n_steps=10 \
  trainer.val_check_interval=1000 \
  optim.config.lr=0.0003 \
  optim.config.weight_decay=0.1 \
  optim.config.clip_grad=1 \
  optim.config.adam_beta1=0.9 \
  optim.config.adam_beta2=0.95 \
  optim.config.adam_eps=1e-08 \
  optim.lr_scheduler.max_steps=95368 \
  optim.lr_scheduler.warmup_steps=953 \
  optim.lr_scheduler.constant_steps=0 \
  optim.lr_scheduler.min_lr=3e-05 \
  log.log_dir="$CKPT_DIR" \
  log.ckpt.every_n_train_steps=1000 \
  log.ckpt.train_time_interval=None
