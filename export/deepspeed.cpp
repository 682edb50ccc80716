// export/deepspeed: the plan as a DeepSpeed ds_config.json (DeepSpeed v0.19; data/export/deepspeed-config.keys)
// and the Megatron-DeepSpeed pretrain_gpt.py arguments for the model, tp and pp (deepspeedai/Megatron-DeepSpeed;
// data/export/megatron-deepspeed.flags), as one shell script that writes the config and launches. ZeRO stages
// map one to one; optimizer offload is zero_optimization.offload_optimizer. What Megatron-DeepSpeed's pipeline
// engine or ZeRO do not have (context parallelism — its --ds-sequence-parallel-size is Ulysses, another
// algorithm —, interleaved or uneven stages, fp8, tp communication overlap, overlapped parameter gathers
// outside ZeRO-3, MoE with pp, Llama 3.1 rope scaling) is refused, as are the techniques no target has. The output
// is a Slurm batch script: one task per GPU under srun, each exec'ing pretrain_gpt.py with the rendezvous
// variables (deepspeed.init_distributed reads them), with the start-up flags ZeRO needs (--cpu-optimizer for
// optimizer offload, --create-moe-param-group for MoE) and the plan's every-layer MoE and fp32 gradient
// accumulation / reduction stated (DeepSpeed's defaults differ).
#include <algorithm>

#include "export/export.hpp"

namespace tp::exporting {

namespace {

json ds_config(const Scenario& sc, Refusals& r) {
  const Plan& p = sc.plan;
  json c = {{"train_batch_size", sc.training.global_batch},
            {"train_micro_batch_size_per_gpu", p.microbatch},
            {"gradient_accumulation_steps", accumulation_steps(sc)},
            {"gradient_clipping", sc.training.optimizer.grad_clip},
            {"steps_per_print", run_settings(sc).log_every}};
  if (sc.training.precision == Precision::bf16) c["bf16"] = {{"enabled", true}};
  if (sc.training.precision == Precision::fp16) c["fp16"] = {{"enabled", true}, {"initial_scale_power", 16}};
  r.need(sc.training.precision != Precision::fp8, "$.training.precision", "fp8 training", "\"precision\": \"bf16\"");
  // DeepSpeed accumulates and reduces gradients in the model dtype unless told (the plan's grad_precision).
  if (sc.training.precision == Precision::bf16 || sc.training.precision == Precision::fp16) {
    const char* g = sc.training.grad_precision == Precision::fp32 ? "fp32"
                    : sc.training.grad_precision == Precision::bf16 ? "bf16" : "fp16";
    c["data_types"] = {{"grad_accum_dtype", g}};
    c["communication_data_type"] = g;
  }
  json z = {{"stage", p.zero}, {"overlap_comm", p.overlap_grad_reduce}, {"contiguous_gradients", true}};
  if (p.offload.kind == OffloadKind::optimizer) {
    r.need(p.zero >= 1, "$.plan.zero", "optimizer offload without ZeRO (DeepSpeed offloads ZeRO's partitions)",
           "\"zero\": 1");
    z["offload_optimizer"] = {{"device", "cpu"}, {"pin_memory", true}};
  }
  c["zero_optimization"] = z;
  return c;
}


Options megatron_ds_args(const Scenario& sc, Refusals& r) {
  const Transformer& m = sc.model;
  const Plan& p = sc.plan;
  Options o = {{"--tensor-model-parallel-size", num((long long)p.tp)},
               {"--pipeline-model-parallel-size", num((long long)p.pp)}};
  if (p.pp == 1) o.push_back({"--no-pipeline-parallel", ""});
  o.push_back({"--num-layers", num(m.layers)});
  o.push_back({"--hidden-size", num(m.hidden)});
  o.push_back({"--ffn-hidden-size", num(m.ffn_hidden)});
  o.push_back({"--num-attention-heads", num(m.heads)});
  if (m.kv_heads != m.heads) o.push_back({"--num-key-value-heads", num(m.kv_heads)});
  if (m.attn_head_dim > 0) o.push_back({"--kv-channels", num(m.attn_head_dim)});
  o.push_back({"--seq-length", num(sc.training.seq_len)});
  o.push_back({"--max-position-embeddings", num(std::max(sc.training.seq_len, m.seq_len))});
  if (m.activation == Activation::swiglu) {
    o.push_back({"--swiglu", ""});
    o.push_back({"--normalization", "rmsnorm"});
    o.push_back({"--use-rotary-position-embeddings", ""});
    o.push_back({"--no-position-embedding", ""});
    o.push_back({"--rotary-position-embeddings-theta", num(m.rotary_base())});
    r.need(m.rope_scaling_factor == 0, "$.model.rope_scaling", "Llama 3.1 rope scaling (Megatron-DeepSpeed has none)",
           "no rope_scaling");
    r.need(!m.qkv_bias && !m.proj_bias && !m.mlp_bias, "$.model.qkv_bias",
           "biases on a SwiGLU model (Megatron-DeepSpeed's --disable-bias-linear is all or none)", "no biases");
    o.push_back({"--disable-bias-linear", ""});
  }
  o.push_back({"--layernorm-epsilon", num(m.norm_epsilon())});
  if (!m.tied_embeddings) o.push_back({"--untie-embeddings-and-output-weights", ""});
  if (!m.dropout) {
    o.push_back({"--attention-dropout", "0.0"});
    o.push_back({"--hidden-dropout", "0.0"});
  }
  if (m.moe.experts > 0) {
    o.push_back({"--num-experts", num(m.moe.experts)});
    o.push_back({"--expert-interval", "1"});  // Megatron-DeepSpeed's default 2 makes every second layer MoE
    // trainplan shards every expert over tp (as the dense MLP); Megatron-DeepSpeed replicates them without this.
    if (p.tp > 1) o.push_back({"--enable-expert-tensor-parallelism", ""});
    // ZeRO's optimizer asserts expert parameters in their own group (runtime/zero/stage_1_and_2.py).
    if (p.zero >= 1) o.push_back({"--create-moe-param-group", ""});
    o.push_back({"--topk", num((long long)m.moe.top_k)});
    o.push_back({"--moe-expert-parallel-size", num((long long)p.ep)});
    o.push_back({"--moe-train-capacity-factor", num(m.moe.capacity_factor)});
    o.push_back({"--moe-loss-coeff", num(m.moe.aux_loss_coeff)});  // (Megatron-DeepSpeed's default is 0.1)
    r.need(m.moe.every == 1, "$.model.moe.every", "MoE on every n-th layer", "\"every\": 1 (--expert-interval)");
    r.need(m.moe.ffn_hidden == 0 || m.moe.ffn_hidden == m.ffn_hidden, "$.model.moe.ffn_hidden",
           "experts narrower than the dense MLP", "experts of the model's ffn_hidden");
    r.need(m.moe.shared_ffn_hidden == 0, "$.model.moe.shared_ffn_hidden", "shared experts", "no shared experts");
    // examples_deepspeed/MoE/*.sh: "Currently MoE is not compatible with pipeline parallel" (GPTModelPipe).
    r.need(p.pp == 1, "$.plan.pp", "MoE with pipeline parallelism (Megatron-DeepSpeed's pipeline model has no MoE)",
           "\"pp\": 1");
  }
  if (p.sequence_parallel) o.push_back({"--sequence-parallel", ""});
  o.push_back({"--micro-batch-size", num(p.microbatch)});
  o.push_back({"--global-batch-size", num(sc.training.global_batch)});
  if (sc.training.precision == Precision::bf16) o.push_back({"--bf16", ""});
  if (sc.training.precision == Precision::fp16) o.push_back({"--fp16", ""});
  if (p.recompute == Recompute::full && recompute_block_layers(sc) != 0) {
    o.push_back({"--recompute-granularity", "full"});
    if (recompute_block_layers(sc) > 0) {  // plan.recompute_layers: the first K of each chunk's layers
      o.push_back({"--recompute-method", "block"});
      o.push_back({"--recompute-num-layers", num(recompute_block_layers(sc))});
    } else {
      o.push_back({"--recompute-method", "uniform"});
    }
    o.push_back({"--deepspeed-activation-checkpointing", ""});
  } else if (p.recompute == Recompute::selective && !recomputes_nothing(p)) {
    o.push_back({"--recompute-granularity", "selective"});  // core attention (the unfused path only)
  }
  if (p.attention == Attention::flash) o.push_back({"--use-flash-attn-v2", ""});
  o.push_back({"--zero-stage", num((long long)p.zero)});
  // DeepSpeed's ZeRO-Offload runs DeepSpeedCPUAdam; without it deepspeed.initialize raises ZeRORuntimeException.
  if (p.offload.kind == OffloadKind::optimizer) o.push_back({"--cpu-optimizer", ""});
  megatron_run_args(sc, "HFTokenizer", o);
  o.push_back({"--deepspeed", ""});
  o.push_back({"--deepspeed_config", "ds_config.json"});
  return o;
}

void refuse_deepspeed(const Scenario& sc, Refusals& r) {
  const Plan& p = sc.plan;
  r.need(p.cp == 1, "$.plan.cp", "Megatron-style context parallelism", "\"cp\": 1");
  r.need(!(p.schedule == Schedule::interleaved && p.virtual_stages > 1), "$.plan.schedule",
         "the interleaved pipeline schedule", "\"schedule\": \"1f1b\"");
  r.need(!(p.pp > 1 && p.schedule == Schedule::gpipe), "$.plan.schedule", "the GPipe schedule", "\"schedule\": \"1f1b\"");
  r.need(p.stage_layers.empty(), "$.plan.stage_layers", "uneven pipeline stages", "even stages");
  r.need(!p.tp_comm_overlap, "$.plan.tp_comm_overlap", "tensor-parallel communication overlap", "without it");
  r.need(!p.cuda_graphs, "$.plan.cuda_graphs", "CUDA graphs of the training step", "\"cuda_graphs\": false");
  r.need(!p.overlap_param_gather || p.zero == 3, "$.plan.overlap_param_gather",
         "overlapped parameter gathers outside ZeRO-3", "without it");
  r.need(!(p.pp > 1 && p.zero >= 2), "$.plan.zero", "ZeRO-2/3 with pipeline parallelism (DeepSpeed's pipeline "
         "engine takes ZeRO-1 at most)", "\"zero\": 1");
}

}  // namespace

std::string export_deepspeed(const Scenario& sc, const std::string& file) {
  Refusals r{"DeepSpeed", file, {}};
  refuse_common(sc, r);
  refuse_deepspeed(sc, r);
  const json cfg = ds_config(sc, r);
  const Options args = megatron_ds_args(sc, r);
  r.throw_if_any();
  const Plan& p = sc.plan;
  const Launch l = launch_of(sc);
  std::string about = "# trainplan export --to deepspeed: scenario \"" + sc.name + "\" (" + file + ")\n";
  about += "# DeepSpeed ZeRO-" + num((long long)p.zero) + " with Megatron-DeepSpeed for dp " + num((long long)p.dp) +
           " x tp " + num((long long)p.tp) + " x pp " + num((long long)p.pp) + " = " + num((long long)p.gpus()) + " GPUs (" +
           num((long long)l.nodes) + " node(s) of " + num((long long)l.gpus_per_node) + ").\n";
  if (recomputes_nothing(p))
    about += "# plan.recompute \"selective\" under flash attention recomputes nothing in trainplan: no recompute flags.\n";
  about += "# Submit from the Megatron-DeepSpeed folder: sbatch THIS_FILE (one task per GPU under srun).\n";
  std::string s = sbatch_header(sc, about, l.gpus_per_node, "your data prefix (Megatron's .bin / .idx, without the suffix)");
  s += "export CUDA_DEVICE_MAX_CONNECTIONS=1\n";
  s += "cat > ds_config.json <<'EOF'\n" + cfg.dump(2) + "\nEOF\n\n";
  return s + shell_lines("srun --kill-on-bad-exit=1 bash -c 'export RANK=$SLURM_PROCID LOCAL_RANK=$SLURM_LOCALID "
                         "WORLD_SIZE=$SLURM_NTASKS; exec python pretrain_gpt.py \"$@\"' pretrain_gpt.py",
                         args);
}

}  // namespace tp::exporting
