// export/nemo: the plan as NeMo 2 recipe overrides for `nemo llm pretrain --factory RECIPE` (NeMo 2.5,
// nemo-run's dotted overrides of the recipe's config tree; data/export/nemo.keys). The recipe is the closest
// NeMo model family (llama3_8b for dense SwiGLU, qwen2_7b when q/k/v carry biases, mixtral_8x7b for MoE,
// gpt3_175b for GPT-style GELU models); every shape field is overridden, so only its defaults for what
// trainplan does not model (data, tokenizer, optimizer schedule) remain. NeMo runs Megatron-Core, so the
// plan mapping is Megatron-LM's (export/megatron.cpp) under NeMo's names.
#include <algorithm>

#include "export/export.hpp"

namespace tp::exporting {

namespace {

std::string b(bool v) { return v ? "True" : "False"; }

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
  return m.qkv_bias ? "qwen2_7b" : "llama3_8b";
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
  o.push_back({s + "virtual_pipeline_model_parallel_size",
               p.schedule == Schedule::interleaved && p.virtual_stages > 1 ? num((long long)p.virtual_stages) : "None"});
  o.push_back({s + "context_parallel_size", num((long long)p.cp)});
  o.push_back({s + "sequence_parallel", b(p.sequence_parallel)});
  o.push_back({s + "expert_model_parallel_size", num((long long)p.ep)});
  const FirstLast fl = first_last_layers(p, sc.model.layers);
  r.need(fl.ok, "$.plan.stage_layers", "stages other than first / last around an even middle",
         "first_stage_layers / last_stage_layers with the middle stages even");
  if (fl.first > 0) o.push_back({s + "num_layers_in_first_pipeline_stage", num((long long)fl.first)});
  if (fl.last > 0) o.push_back({s + "num_layers_in_last_pipeline_stage", num((long long)fl.last)});
  if (p.account_for_embedding) o.push_back({s + "account_for_embedding_in_pipeline_split", "True"});
  if (p.account_for_loss) o.push_back({s + "account_for_loss_in_pipeline_split", "True"});
  o.push_back({"data.micro_batch_size", num(p.microbatch)});
  o.push_back({"data.global_batch_size", num(sc.training.global_batch)});
  o.push_back({"data.seq_length", num(sc.training.seq_len)});
  if (p.recompute == Recompute::full) {
    o.push_back({c + "recompute_granularity", "full"});
    o.push_back({c + "recompute_method", "uniform"});
    o.push_back({c + "recompute_num_layers", "1"});
  } else {
    o.push_back({c + "recompute_granularity", p.recompute == Recompute::selective ? "selective" : "None"});
  }
  // ZeRO >= 1: Megatron-Core's distributed optimizer (with Megatron FSDP for ZeRO-2/3, as Megatron-LM runs it).
  o.push_back({s + "ddp.use_distributed_optimizer", b(p.zero >= 1)});
  o.push_back({"optim.config.use_distributed_optimizer", b(p.zero >= 1)});
  if (p.zero >= 2) {
    o.push_back({s + "fsdp", "megatron"});
    o.push_back({s + "ddp.data_parallel_sharding_strategy", p.zero == 2 ? "optim_grads" : "optim_grads_params"});
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
  o.push_back({c + "attention_backend", p.attention == Attention::flash ? "flash" : "unfused"});
  o.push_back({s + "ddp.grad_reduce_in_fp32", b(sc.training.grad_precision == Precision::fp32)});
}

const char* plugin_of(Precision p, Refusals& r) {
  switch (p) {
    case Precision::bf16: return "bf16_mixed";
    case Precision::fp16: return "fp16_mixed";
    case Precision::fp8: return "bf16_with_fp8_mixed";
    case Precision::fp32: r.need(false, "$.training.precision", "fp32 training (NeMo's recipes are mixed precision)",
                                 "\"precision\": \"bf16\"");
  }
  return "";
}

}  // namespace

std::string export_nemo(const Scenario& sc, const std::string& file) {
  Refusals r{"NeMo", file, {}};
  refuse_common(sc, r);
  Options o;
  model_overrides(sc, o, r);
  plan_overrides(sc, o, r);
  o.push_back({"trainer.plugins", plugin_of(sc.training.precision, r)});
  if (long long steps = train_steps(sc); steps > 0) o.push_back({"trainer.max_steps", num(steps)});
  r.throw_if_any();
  Options kv;
  for (const auto& [k, v] : o) kv.push_back({k + "=" + v, ""});
  const Plan& p = sc.plan;
  std::string s = "#!/bin/sh\n# trainplan export --to nemo: scenario \"" + sc.name + "\" (" + file + ")\n";
  s += "# NeMo 2 (nemo-run CLI) pretraining for dp " + num((long long)p.dp) + " x cp " + num((long long)p.cp) +
       " x tp " + num((long long)p.tp) + " x pp " + num((long long)p.pp) + " = " + num((long long)p.gpus()) +
       " GPUs; gradient accumulation " + num(accumulation_steps(sc)) + " micro-batches per step. The recipe's data\n"
       "# module, tokenizer (vocabulary " + num(sc.model.vocab) + " tokens) and optimizer schedule stay; override them too.\n";
  return s + shell_lines(std::string("nemo llm pretrain --yes --factory ") + recipe_of(sc.model), kv);
}

}  // namespace tp::exporting
