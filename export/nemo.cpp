// export/nemo: the plan as NeMo 2 recipe overrides (NeMo 2.5, nemo-run's dotted overrides of the recipe's config
// tree, parsed by nemo-run's own CLI parser as `nemo llm pretrain --factory RECIPE` does; data/export/nemo.keys), in
// a Slurm batch script that writes a short launcher and starts it as one task per GPU (Lightning's SLURM environment
// takes the ranks; the recipe runs in each task, no NeMo-Run executor). The launcher sets the data module in Python:
// nemo-run 0.11's parser cannot parse PreTrainingDataModule.paths (its annotation has a bare List). The recipe is
// the closest NeMo model family (llama3_8b for dense SwiGLU, q/k/v biases included — qwen2_7b keeps a string
// ddp that its ddp.* overrides cannot reach —, llama31_8b with Llama 3.1 rope scaling, mixtral_8x7b for MoE,
// gpt3_175b for GPT-style GELU models); every shape field, the rotary base and norm epsilon are overridden, and
// so are the optimizer, schedule, checkpoint and log intervals. NeMo runs Megatron-Core, so the plan mapping is
// Megatron-LM's (export/megatron.cpp) under NeMo's names; precision is the MegatronMixedPrecision plugin by its
// full dotted factory path, fp8 set on it field by field (Megatron's defaults: no fp8 parameter gathers).
#include <algorithm>

#include "export/export.hpp"

namespace tp::exporting {

namespace {

std::string b(bool v) { return v ? "True" : "False"; }

// Megatron-Core's AttnBackend enum built by nemo-run's factory form "dotted.Class(value)" (flash = 1, unfused = 3,
// megatron/core/transformer/enums.py): nemo-run parses neither "flash" nor "AttnBackend.flash" into the enum.
constexpr const char* kAttnBackend = "megatron.core.transformer.enums.AttnBackend";

// Megatron-Core's moe_layer_freq as a list (1 = MoE layer), quoted for the shell: trainplan's MoE layers are
// those with (l + 1) % every == 0, where the integer form would put them at l % every == 0.
std::string moe_layer_list(const Transformer& m) {
  std::string s = "'[";
  for (long long l = 0; l < m.layers; ++l) s += std::string(l ? "," : "") + (m.is_moe_layer(l) ? "1" : "0");
  return s + "]'";
}

const char* recipe_of(const Transformer& m) {
  if (m.activation == Activation::gelu) return "gpt3_175b";
  if (m.moe.experts > 0) return "mixtral_8x7b";
  return m.rope_scaling_factor > 0 ? "llama31_8b" : "llama3_8b";
}

void model_overrides(const Scenario& sc, Options& o, Refusals& r) {
  const Transformer& m = sc.model;
  const std::string c = "model.config.";
  o.push_back({c + "num_layers", num(m.layers)});
  o.push_back({c + "hidden_size", num(m.hidden)});
  o.push_back({c + "ffn_hidden_size", num(m.ffn_hidden)});
  o.push_back({c + "num_attention_heads", num(m.heads)});
  o.push_back({c + "num_query_groups", num(m.kv_heads)});
  if (m.attn_head_dim > 0) o.push_back({c + "kv_channels", num(m.attn_head_dim)});
  o.push_back({c + "seq_length", num(sc.training.seq_len)});
  o.push_back({c + "share_embeddings_and_output_weights", b(m.tied_embeddings)});
  const bool glu = m.activation == Activation::swiglu;
  o.push_back({c + "gated_linear_unit", b(glu)});
  o.push_back({c + "normalization", glu ? "RMSNorm" : "LayerNorm"});
  o.push_back({c + "position_embedding_type", glu ? "rope" : "learned_absolute"});
  o.push_back({c + "layernorm_epsilon", num(m.norm_epsilon())});
  if (glu) o.push_back({c + "rotary_base", num(m.rotary_base())});
  if (m.rope_scaling_factor > 0) {  // Llama31Config (recipe llama31_8b)
    o.push_back({c + "scale_factor", num(m.rope_scaling_factor)});
    o.push_back({c + "low_freq_factor", num(m.rope_low_freq_factor)});
    o.push_back({c + "high_freq_factor", num(m.rope_high_freq_factor)});
    o.push_back({c + "old_context_len", num(m.rope_original_max_position)});
    r.need(m.moe.experts == 0, "$.model.rope_scaling", "rope scaling on a MoE model (NeMo's Mixtral config has none)",
           "no rope_scaling");
  }
  r.need(!glu || m.proj_bias == m.mlp_bias, "$.model.mlp_bias",
         "biases on only some of the attention-output and MLP layers", "proj_bias = mlp_bias");
  o.push_back({c + "add_bias_linear", b(!glu || m.proj_bias)});
  o.push_back({c + "add_qkv_bias", b(glu && m.qkv_bias && !m.proj_bias)});
  if (!m.dropout) {
    o.push_back({c + "attention_dropout", "0.0"});
    o.push_back({c + "hidden_dropout", "0.0"});
  }
  if (m.moe.experts > 0) {
    o.push_back({c + "num_moe_experts", num(m.moe.experts)});
    o.push_back({c + "moe_router_topk", num((long long)m.moe.top_k)});
    o.push_back({c + "moe_ffn_hidden_size", num(m.expert_ffn())});
    if (m.moe.every > 1) o.push_back({c + "moe_layer_freq", moe_layer_list(m)});
    if (m.moe.shared_ffn_hidden > 0) o.push_back({c + "moe_shared_expert_intermediate_size", num(m.moe.shared_ffn_hidden)});
    o.push_back({c + "moe_expert_capacity_factor", num(m.moe.capacity_factor)});
    o.push_back({c + "moe_token_drop_policy", "probs"});
    // Megatron-Core takes a capacity factor only with the all-to-all dispatcher and aux_loss / none balancing.
    o.push_back({c + "moe_token_dispatcher_type", "alltoall"});
    o.push_back({c + "moe_router_load_balancing_type", "aux_loss"});
    o.push_back({c + "moe_aux_loss_coeff", num(m.moe.aux_loss_coeff)});
  }
}

void plan_overrides(const Scenario& sc, Options& o, Refusals& r) {
  const Plan& p = sc.plan;
  const std::string s = "trainer.strategy.", c = "model.config.";
  const int gpn = std::min(sc.cluster.gpus_per_node, p.gpus());
  o.push_back({"trainer.num_nodes", num((long long)((p.gpus() + gpn - 1) / gpn))});
  o.push_back({"trainer.devices", num((long long)gpn)});
  o.push_back({s + "tensor_model_parallel_size", num((long long)p.tp)});
  o.push_back({s + "pipeline_model_parallel_size", num((long long)p.pp)});
  r.need(!(p.pp > 1 && p.schedule == Schedule::gpipe), "$.plan.schedule", "the GPipe schedule", "\"schedule\": \"1f1b\"");
  const bool vpp = p.schedule == Schedule::interleaved && p.virtual_stages > 1;
  o.push_back({s + "virtual_pipeline_model_parallel_size", vpp ? num((long long)p.virtual_stages) : "None"});
  o.push_back({s + "context_parallel_size", num((long long)p.cp)});
  o.push_back({s + "sequence_parallel", b(p.sequence_parallel)});
  o.push_back({s + "expert_model_parallel_size", num((long long)p.ep)});
  const FirstLast fl = first_last_layers(p, sc.model.layers);
  if (!fl.ok) o.push_back({s + "pipeline_model_parallel_layout", pipeline_layout(p, sc.model.layers)});
  if (fl.ok && fl.first > 0) o.push_back({s + "num_layers_in_first_pipeline_stage", num((long long)fl.first)});
  if (fl.ok && fl.last > 0) o.push_back({s + "num_layers_in_last_pipeline_stage", num((long long)fl.last)});
  if (p.account_for_embedding) o.push_back({s + "account_for_embedding_in_pipeline_split", "True"});
  if (p.account_for_loss) o.push_back({s + "account_for_loss_in_pipeline_split", "True"});
  o.push_back({"data.micro_batch_size", num(p.microbatch)});
  o.push_back({"data.global_batch_size", num(sc.training.global_batch)});
  o.push_back({"data.seq_length", num(sc.training.seq_len)});
  if (p.recompute == Recompute::full && recompute_block_layers(sc) > 0) {  // the first K of each chunk's layers
    o.push_back({c + "recompute_granularity", "full"});
    o.push_back({c + "recompute_method", "block"});
    o.push_back({c + "recompute_num_layers", num(recompute_block_layers(sc))});
  } else if (p.recompute == Recompute::full && recompute_block_layers(sc) < 0) {
    o.push_back({c + "recompute_granularity", "full"});
    o.push_back({c + "recompute_method", "uniform"});
    o.push_back({c + "recompute_num_layers", "1"});
  } else if (p.recompute == Recompute::selective && !recomputes_nothing(p)) {
    o.push_back({c + "recompute_granularity", "selective"});
    o.push_back({c + "recompute_modules", "\"['core_attn']\""});
  } else {
    o.push_back({c + "recompute_granularity", "None"});  // selective under flash recomputes nothing (docs/export.md)
  }
  // ZeRO >= 1: Megatron-Core's distributed optimizer (with Megatron FSDP for ZeRO-2/3, as Megatron-LM runs it).
  o.push_back({s + "ddp.use_distributed_optimizer", b(p.zero >= 1)});
  o.push_back({"optim.config.use_distributed_optimizer", b(p.zero >= 1)});
  if (p.zero >= 2) {
    o.push_back({s + "fsdp", "megatron"});
    o.push_back({s + "ddp.data_parallel_sharding_strategy", p.zero == 2 ? "optim_grads" : "optim_grads_params"});
    o.push_back({s + "save_ckpt_format", "fsdp_dtensor"});  // MegatronStrategy refuses Megatron FSDP with another
  }
  if (p.offload.kind == OffloadKind::optimizer) {
    r.need(p.zero >= 1, "$.plan.zero", "optimizer offload without a sharded optimizer", "\"zero\": 1");
    o.push_back({"optim.config.optimizer_cpu_offload", "True"});
    o.push_back({"optim.config.optimizer_offload_fraction", "1.0"});
    o.push_back({"optim.config.use_precision_aware_optimizer", "True"});
  }
  o.push_back({s + "ddp.overlap_grad_reduce", b(p.overlap_grad_reduce && (p.data_ranks() > 1 || p.overlap_param_gather))});
  r.need(!p.overlap_param_gather || p.zero >= 1, "$.plan.overlap_param_gather",
         "parameter-gather overlap without a sharded optimizer", "\"zero\": 1");
  r.need(!p.overlap_param_gather || p.overlap_grad_reduce, "$.plan.overlap_param_gather",
         "parameter-gather overlap without overlapped gradient reduction", "\"overlap_grad_reduce\": true");
  o.push_back({s + "ddp.overlap_param_gather", b(p.overlap_param_gather)});
  o.push_back({c + "tp_comm_overlap", b(p.tp_comm_overlap)});
  if (p.cuda_graphs) {  // (as Megatron-LM's --cuda-graph-impl local, which refuses full recompute)
    r.need(p.recompute != Recompute::full, "$.plan.cuda_graphs", "CUDA graphs with full recompute (Megatron-Core "
           "refuses the pair)", "\"recompute\": \"selective\"");
    o.push_back({c + "cuda_graph_impl", "'local'"});
  }
  o.push_back({c + "attention_backend", std::string("'") + kAttnBackend + (p.attention == Attention::flash ? "(1)'" : "(3)'")});
}

// MegatronMixedPrecision by its full factory path (the short names are not registered for trainer.plugins), then
// its fields: gradients reduced in the plan's precision (the plugin overwrites ddp.grad_reduce_in_fp32), and fp8
// as Megatron-LM runs it (hybrid, the scenario's recipe; delayed scaling: amax history 1; no fp8 parameter gathers).
void precision_overrides(const Scenario& sc, Options& o, Refusals& r) {
  const std::string f = "nemo.collections.llm.recipes.precision.mixed_precision.";
  switch (sc.training.precision) {
    case Precision::bf16: o.push_back({"trainer.plugins", f + "bf16_mixed"}); break;
    case Precision::fp16: o.push_back({"trainer.plugins", f + "fp16_mixed"}); break;
    case Precision::fp8:
      o.push_back({"trainer.plugins", f + "bf16_mixed"});
      o.push_back({"trainer.plugins.fp8", "hybrid"});
      r.need(sc.training.fp8_recipe != "rowwise", "$.training.fp8_recipe", "per-row fp8 scaling (NeMo's fp8_recipe: "
             "delayed, tensorwise, blockwise, mxfp8)", "\"fp8_recipe\": \"tensorwise\"");
      o.push_back({"trainer.plugins.fp8_recipe", sc.training.fp8_recipe});
      if (sc.training.fp8_recipe == "delayed") {  // delayed scaling's amax history, as Megatron-LM's defaults
        o.push_back({"trainer.plugins.fp8_margin", "0"});
        o.push_back({"trainer.plugins.fp8_amax_history_len", "1"});
        o.push_back({"trainer.plugins.fp8_amax_compute_algo", "most_recent"});
      }
      o.push_back({"trainer.plugins.fp8_param_gather", "False"});
      break;
    case Precision::fp32:
      r.need(false, "$.training.precision", "fp32 training (NeMo's recipes are mixed precision)", "\"precision\": \"bf16\"");
      return;
  }
  o.push_back({"trainer.plugins.grad_reduce_in_fp32", b(sc.training.grad_precision == Precision::fp32)});
}

// The launcher (python, written by the script): the recipe with the job's nodes and GPUs, its MockDataModule
// replaced by Megatron indexed data ($DATA_PATH) with a Hugging Face tokenizer ($TOKENIZER), the plan's overrides
// through nemo-run's CLI parser, then the recipe run in this task.
constexpr const char* kLauncher = R"(import importlib, os, sys
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
)";

// Data, optimizer (Megatron's distributed Adam with NeMo's cosine annealing), checkpoints and logging.
void run_overrides(const Scenario& sc, Options& o, Refusals& r) {
  const RunSettings rs = run_settings(sc);
  r.need(rs.opt.decay == LrDecay::cosine, "$.training.optimizer.decay",
         "a learning-rate decay other than cosine (the recipes' CosineAnnealingScheduler)", "\"decay\": \"cosine\"");
  o.push_back({"trainer.max_steps", num(rs.steps)});
  o.push_back({"trainer.log_every_n_steps", num(rs.log_every)});
  o.push_back({"trainer.val_check_interval", num(rs.save_every)});
  o.push_back({"optim.config.lr", num(rs.opt.lr)});
  o.push_back({"optim.config.weight_decay", num(rs.opt.weight_decay)});
  o.push_back({"optim.config.clip_grad", num(rs.opt.grad_clip)});
  o.push_back({"optim.config.adam_beta1", num(rs.opt.beta1)});
  o.push_back({"optim.config.adam_beta2", num(rs.opt.beta2)});
  o.push_back({"optim.config.adam_eps", num(rs.opt.eps)});
  o.push_back({"optim.lr_scheduler.max_steps", num(rs.steps)});
  o.push_back({"optim.lr_scheduler.warmup_steps", num(rs.warmup)});
  o.push_back({"optim.lr_scheduler.constant_steps", "0"});
  o.push_back({"optim.lr_scheduler.min_lr", num(rs.min_lr)});
  o.push_back({"log.log_dir", "\"$CKPT_DIR\""});
  o.push_back({"log.ckpt.every_n_train_steps", num(rs.save_every)});
  o.push_back({"log.ckpt.train_time_interval", "None"});
}

}  // namespace

std::string export_nemo(const Scenario& sc, const std::string& file) {
  Refusals r{"NeMo", file, {}};
  refuse_common(sc, r);
  Options o;
  model_overrides(sc, o, r);
  plan_overrides(sc, o, r);
  precision_overrides(sc, o, r);
  run_overrides(sc, o, r);
  r.throw_if_any();
  Options kv;
  for (const auto& [k, v] : o) kv.push_back({k + "=" + v, ""});
  const Plan& p = sc.plan;
  const Launch l = launch_of(sc);
  std::string about = "# trainplan export --to nemo: scenario \"" + sc.name + "\" (" + file + ")\n";
  about += "# NeMo 2 (nemo-run CLI) pretraining for dp " + num((long long)p.dp) + " x cp " + num((long long)p.cp) +
           " x tp " + num((long long)p.tp) + " x pp " + num((long long)p.pp) + " = " + num((long long)p.gpus()) +
           " GPUs (" + num((long long)l.nodes) + " node(s) of " + num((long long)l.gpus_per_node) + "); gradient accumulation " +
           num(accumulation_steps(sc)) + " micro-batches per step.\n";
  if (recomputes_nothing(p))
    about += "# plan.recompute \"selective\" under flash attention recomputes nothing in trainplan: recompute off.\n";
  about += "# sbatch THIS_FILE inside the NeMo container: one task per GPU, no NeMo-Run executor (the recipe runs in\n"
           "# each task; Lightning reads the ranks from Slurm). The overrides are those of `nemo llm pretrain --factory`.\n";
  std::string s = sbatch_header(sc, about, l.gpus_per_node, "your data prefix (Megatron's .bin / .idx, without the suffix)");
  s += "cat > trainplan_nemo_pretrain.py <<'EOF'\n" + std::string(kLauncher) + "EOF\n\n";
  return s + shell_lines(std::string("srun --kill-on-bad-exit=1 python trainplan_nemo_pretrain.py ") + recipe_of(sc.model), kv);
}

}  // namespace tp::exporting
