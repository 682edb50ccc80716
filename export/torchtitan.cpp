// export/torchtitan: the plan as a TorchTitan TOML job config (TorchTitan v0.2.2 torchtitan/config/job_config.py;
// data/export/torchtitan.keys). TorchTitan's data parallelism is FSDP2: ZeRO-3 = data_parallel_shard_degree with
// resharding after forward, ZeRO-2 = the same without resharding ("never"), ZeRO-0 = plain replication (DDP);
// ZeRO-1 has no equivalent. Its tensor parallelism always shards the norms' activations (= sequence
// parallelism), its attention is SDPA / flex (flash), its fp8 is torchao's float8 converter, and its models are
// registered flavors (a comment gives the shape to register). Refused: GELU models, MoE (TorchTitan's MoE is
// dropless), ZeRO-1, tp without sequence parallelism, unfused attention, fp16, every offload, and the
// techniques no target has.
#include <algorithm>

#include "export/export.hpp"

namespace tp::exporting {

namespace {

std::string q(const std::string& s) { return "\"" + s + "\""; }
std::string b(bool v) { return v ? "true" : "false"; }

void refuse_torchtitan(const Scenario& sc, Refusals& r) {
  const Plan& p = sc.plan;
  const Transformer& m = sc.model;
  r.need(m.activation == Activation::swiglu, "$.model.activation",
         "a GPT-style GELU model (TorchTitan's models are SwiGLU / RMSNorm / RoPE)", "a \"swiglu\" model");
  r.need(m.moe.experts == 0, "$.model.moe", "capacity-limited MoE routing (TorchTitan's MoE is dropless)",
         "export to megatron or nemo");
  r.need(!m.qkv_bias && !m.proj_bias && !m.mlp_bias, "$.model.qkv_bias", "linear-layer biases", "no biases");
  r.need(p.zero != 1, "$.plan.zero", "ZeRO-1 (FSDP2 shards gradients with the optimizer state)",
         "\"zero\": 2 (fsdp_reshard_after_forward \"never\") or 3");
  r.need(p.tp == 1 || p.sequence_parallel, "$.plan.sequence_parallel",
         "tensor parallelism without sequence parallelism (TorchTitan's TP shards the norms)", "\"sequence_parallel\": true");
  r.need(p.attention == Attention::flash, "$.plan.attention", "unfused attention", "\"attention\": \"flash\"");
  r.need(sc.training.precision != Precision::fp16, "$.training.precision", "fp16 training", "\"precision\": \"bf16\"");
  r.need(p.offload.kind != OffloadKind::optimizer, "$.plan.offload.kind",
         "ZeRO-Offload (FSDP2's CPU offload moves parameters and gradients too)", "no offload");
  r.need(!p.tp_comm_overlap || p.tp > 1, "$.plan.tp_comm_overlap", "tp communication overlap without tp", "without it");
}

const char* schedule_of(const Plan& p) {
  if (p.schedule == Schedule::gpipe) return p.virtual_stages > 1 ? "InterleavedGPipe" : "GPipe";
  if (p.schedule == Schedule::interleaved && p.virtual_stages > 1) return "Interleaved1F1B";
  return "1F1B";
}

}  // namespace

std::string export_torchtitan(const Scenario& sc, const std::string& file) {
  Refusals r{"TorchTitan", file, {}};
  refuse_common(sc, r);
  refuse_torchtitan(sc, r);
  const Plan& p = sc.plan;
  const Transformer& m = sc.model;
  const FirstLast fl = first_last_layers(p, m.layers);
  r.need(fl.ok, "$.plan.stage_layers", "stages other than first / last around an even middle",
         "first_stage_layers / last_stage_layers with the middle stages even");
  r.throw_if_any();
  const long long dp = p.dp, gb = sc.training.global_batch;
  // TorchTitan splits layers + first_less + last_less evenly over the stages; the first (last) stage then holds
  // first_less (last_less) layers fewer than a middle one.
  const std::vector<int>& sl = p.stage_layers;
  const long long mid = sl.empty() ? m.layers / p.pp : sl.size() > 2 ? sl[1] : std::max(sl[0], sl[1]);
  const long long first_less = sl.empty() ? 0 : mid - sl.front(), last_less = sl.empty() ? 0 : mid - sl.back();
  std::string s = "# trainplan export --to torchtitan: scenario \"" + sc.name + "\" (" + file + ")\n";
  s += "# TorchTitan (v0.2.2 job config) for dp " + num(dp) + " x cp " + num((long long)p.cp) + " x tp " +
       num((long long)p.tp) + " x pp " + num((long long)p.pp) + " = " + num((long long)p.gpus()) +
       " GPUs: NGPU=" + num((long long)std::min(sc.cluster.gpus_per_node, p.gpus())) +
       " CONFIG_FILE=this.toml ./run_train.sh on each node.\n";
  s += "# Register the model as flavor \"" + m.name + "\" of llama3 (TransformerModelArgs): dim=" + num(m.hidden) +
       ", n_layers=" + num(m.layers) + ", n_heads=" + num(m.heads) + ", n_kv_heads=" + num(m.kv_heads) +
       ", vocab_size=" + num(m.vocab) + ", FFN hidden " + num(m.ffn_hidden) + " (via multiple_of / ffn_dim_multiplier)" +
       (m.attn_head_dim > 0 ? ", head_dim=" + num(m.attn_head_dim) : std::string()) + ".\n\n";
  s += "[job]\ndescription = " + q("trainplan plan for " + sc.name) + "\n\n";
  s += "[model]\nname = \"llama3\"\nflavor = " + q(m.name) + "\n";
  if (sc.training.precision == Precision::fp8) s += "converters = [\"quantize.linear.float8\"]\n";
  s += "\n[training]\n";
  // Without pp the local batch is one micro-batch (global / (local x dp) accumulation steps); with pp it is the
  // rank's whole batch, split into pipeline micro-batches.
  s += "local_batch_size = " + num(p.pp > 1 ? gb / dp : p.microbatch) + "\n";
  s += "global_batch_size = " + num(gb) + "\n";
  s += "seq_len = " + num(sc.training.seq_len) + "\n";
  if (long long steps = train_steps(sc); steps > 0) s += "steps = " + num(steps) + "\n";
  s += "mixed_precision_param = " + q(sc.training.precision == Precision::fp32 ? "float32" : "bfloat16") + "\n";
  s += "\n[parallelism]\n";
  s += "data_parallel_replicate_degree = " + num(p.zero == 0 ? dp : 1LL) + "\n";
  s += "data_parallel_shard_degree = " + num(p.zero == 0 ? 1LL : dp) + "\n";
  if (p.zero >= 2) s += "fsdp_reshard_after_forward = " + q(p.zero == 3 ? "always" : "never") + "\n";
  s += "tensor_parallel_degree = " + num((long long)p.tp) + "\n";
  if (p.tp_comm_overlap) s += "enable_async_tensor_parallel = true\n";
  s += "context_parallel_degree = " + num((long long)p.cp) + "\n";
  s += "pipeline_parallel_degree = " + num((long long)p.pp) + "\n";
  if (p.pp > 1) {
    s += "pipeline_parallel_schedule = " + q(schedule_of(p)) + "\n";
    s += "pipeline_parallel_microbatch_size = " + num(p.microbatch) + "\n";
    if (p.virtual_stages > 1) s += "pipeline_parallel_layers_per_stage = " + num(mid / p.virtual_stages) + "\n";
    s += "pipeline_parallel_first_stage_less_layers = " + num(first_less) + "\n";
    s += "pipeline_parallel_last_stage_less_layers = " + num(last_less) + "\n";
  }
  s += "\n[activation_checkpoint]\nmode = " +
       q(p.recompute == Recompute::full ? "full" : p.recompute == Recompute::selective ? "selective" : "none") + "\n";
  if (p.recompute == Recompute::selective) s += "selective_ac_option = \"op\"\n";
  if (sc.training.precision == Precision::fp8)
    s += "\n[quantize.linear.float8]\nenable_fsdp_float8_all_gather = " + b(p.zero >= 2) +
         "\nprecompute_float8_dynamic_scale_for_fsdp = " + b(p.zero >= 2) + "\nfilter_fqns = [\"output\"]\n";
  if (p.tp_comm_overlap) s += "\n[compile]\nenable = true\ncomponents = [\"model\"]\n";  // async TP needs compile
  return s;
}

}  // namespace tp::exporting
