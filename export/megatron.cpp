// export/megatron: the plan as Megatron-LM pretrain_gpt.py arguments (Megatron-LM core_v0.15.3,
// megatron/training/arguments.py; data/export/megatron-lm.flags). Mapping: ZeRO-1 = --use-distributed-optimizer,
// ZeRO-2 / ZeRO-3 = Megatron FSDP (--use-megatron-fsdp, sharding optim_grads / optim_grads_params, with the
// distributed optimizer), optimizer offload = --optimizer-cpu-offload (with the distributed optimizer, as
// Megatron requires); uneven stages =
// --decoder-first/last-pipeline-num-layers, other splits = --pipeline-model-parallel-layout; GPipe, modular
// pipelines, layered accumulation, Optimus 2D and the chunked / granular offloads have no Megatron-LM equivalent
// and are refused. The output is a Slurm batch script: one task per GPU under srun, each exec'ing pretrain_gpt.py
// with RANK / LOCAL_RANK / WORLD_SIZE from Slurm and MASTER_ADDR = the job's first node; the model fields
// (rotary base and scaling, norm epsilon, ...) and the run's optimizer, schedule, checkpoint and log intervals
// come from the scenario (docs/export.md has the defaults).
#include <algorithm>

#include "export/export.hpp"

namespace tp::exporting {

namespace {

void model_args(const Scenario& sc, Options& o, Refusals& r) {
  const Transformer& m = sc.model;
  o.push_back({"--num-layers", num(m.layers)});
  o.push_back({"--hidden-size", num(m.hidden)});
  o.push_back({"--ffn-hidden-size", num(m.ffn_hidden)});
  o.push_back({"--num-attention-heads", num(m.heads)});
  if (m.kv_heads != m.heads) {
    o.push_back({"--group-query-attention", ""});
    o.push_back({"--num-query-groups", num(m.kv_heads)});
  }
  if (m.attn_head_dim > 0) o.push_back({"--kv-channels", num(m.attn_head_dim)});
  o.push_back({"--seq-length", num(sc.training.seq_len)});
  o.push_back({"--max-position-embeddings", num(std::max(sc.training.seq_len, m.seq_len))});
  o.push_back({"--norm-epsilon", num(m.norm_epsilon())});
  if (m.activation == Activation::swiglu) {
    o.push_back({"--swiglu", ""});
    o.push_back({"--normalization", "RMSNorm"});
    o.push_back({"--position-embedding-type", "rope"});
    o.push_back({"--rotary-base", num(m.rotary_base())});
    if (m.rope_scaling_factor > 0) {
      // Megatron-Core's Llama 3.1 scaling takes the factor; the frequency factors and original length are fixed.
      r.need(m.rope_low_freq_factor == 1 && m.rope_high_freq_factor == 4 && m.rope_original_max_position == 8192,
             "$.model.rope_scaling", "rope scaling with frequency factors other than 1 / 4 or an original length "
             "other than 8192", "Llama 3.1's low_freq_factor 1, high_freq_factor 4, original_max_position 8192");
      o.push_back({"--use-rope-scaling", ""});
      o.push_back({"--rope-scaling-factor", num(m.rope_scaling_factor)});
    }
    // Megatron's linear biases are all or none (--disable-bias-linear), plus optional q/k/v biases.
    r.need(m.proj_bias == m.mlp_bias, "$.model.mlp_bias",
           "biases on only some of the attention-output and MLP layers", "proj_bias = mlp_bias");
    if (!m.proj_bias && !m.mlp_bias) o.push_back({"--disable-bias-linear", ""});
    if (m.qkv_bias && !m.proj_bias) o.push_back({"--add-qkv-bias", ""});
  }
  if (!m.tied_embeddings) o.push_back({"--untie-embeddings-and-output-weights", ""});
  if (!m.dropout) {
    o.push_back({"--attention-dropout", "0.0"});
    o.push_back({"--hidden-dropout", "0.0"});
  }
  if (m.moe.experts > 0) {
    o.push_back({"--num-experts", num(m.moe.experts)});
    o.push_back({"--moe-router-topk", num((long long)m.moe.top_k)});
    o.push_back({"--moe-ffn-hidden-size", num(m.expert_ffn())});
    if (m.moe.every > 1) {
      std::string pattern(1, '\'');  // quoted for the shell (appended: g++ 12 -Wrestrict false positive on "'" + s)
      pattern += moe_layer_pattern(m);
      pattern += '\'';
      o.push_back({"--moe-layer-freq", pattern});
    }
    if (m.moe.shared_ffn_hidden > 0) o.push_back({"--moe-shared-expert-intermediate-size", num(m.moe.shared_ffn_hidden)});
    o.push_back({"--moe-expert-capacity-factor", num(m.moe.capacity_factor)});
    o.push_back({"--moe-token-drop-policy", "probs"});
    // Megatron-Core takes a capacity factor only with the all-to-all dispatcher and aux_loss / none balancing.
    o.push_back({"--moe-token-dispatcher-type", "alltoall"});
    o.push_back({"--moe-router-load-balancing-type", "aux_loss"});
    o.push_back({"--moe-aux-loss-coeff", num(m.moe.aux_loss_coeff)});
  }
}

void plan_args(const Scenario& sc, Options& o, Refusals& r) {
  const Plan& p = sc.plan;
  o.push_back({"--tensor-model-parallel-size", num((long long)p.tp)});
  o.push_back({"--pipeline-model-parallel-size", num((long long)p.pp)});
  if (p.cp > 1) o.push_back({"--context-parallel-size", num((long long)p.cp)});
  if (p.ep > 1) o.push_back({"--expert-model-parallel-size", num((long long)p.ep)});
  if (p.sequence_parallel) o.push_back({"--sequence-parallel", ""});
  r.need(!(p.pp > 1 && p.schedule == Schedule::gpipe), "$.plan.schedule", "the GPipe schedule",
         "\"schedule\": \"1f1b\"");
  if (p.schedule == Schedule::interleaved && p.virtual_stages > 1 && first_last_layers(p, sc.model.layers).ok)
    o.push_back({"--num-virtual-stages-per-pipeline-rank", num((long long)p.virtual_stages)});
  const FirstLast fl = first_last_layers(p, sc.model.layers);
  if (!fl.ok) {  // any other split: the explicit layout (which also sets the virtual stages)
    o.push_back({"--pipeline-model-parallel-layout", pipeline_layout(p, sc.model.layers)});
  }
  if (fl.ok && fl.first > 0) o.push_back({"--decoder-first-pipeline-num-layers", num((long long)fl.first)});
  if (fl.ok && fl.last > 0) o.push_back({"--decoder-last-pipeline-num-layers", num((long long)fl.last)});
  if (p.account_for_embedding) o.push_back({"--account-for-embedding-in-pipeline-split", ""});
  if (p.account_for_loss) o.push_back({"--account-for-loss-in-pipeline-split", ""});
  o.push_back({"--micro-batch-size", num(p.microbatch)});
  o.push_back({"--global-batch-size", num(sc.training.global_batch)});
  if (p.recompute == Recompute::full && recompute_block_layers(sc) >= 0) {
    if (recompute_block_layers(sc) > 0) {  // plan.recompute_layers: the first K of each chunk's layers
      o.push_back({"--recompute-granularity", "full"});
      o.push_back({"--recompute-method", "block"});
      o.push_back({"--recompute-num-layers", num(recompute_block_layers(sc))});
    }
  } else if (p.recompute == Recompute::full) {
    o.push_back({"--recompute-granularity", "full"});
    o.push_back({"--recompute-method", "uniform"});
    o.push_back({"--recompute-num-layers", "1"});
  } else if (p.recompute == Recompute::selective && !recomputes_nothing(p)) {
    // trainplan's selective = Korthikanti's core attention; named, since recompute_modules' default may change.
    o.push_back({"--recompute-granularity", "selective"});
    o.push_back({"--recompute-modules", "core_attn"});
  }
  // Megatron FSDP runs with the distributed optimizer too (docs/source/api-guide/custom_fsdp.md and the fsdp_dtensor
  // functional tests; the precision-aware optimizer of --optimizer-cpu-offload asserts it).
  if (p.zero >= 1) o.push_back({"--use-distributed-optimizer", ""});
  if (p.zero >= 2) {
    o.push_back({"--use-megatron-fsdp", ""});
    o.push_back({"--data-parallel-sharding-strategy", p.zero == 2 ? "optim_grads" : "optim_grads_params"});
    o.push_back({"--ckpt-format", "fsdp_dtensor"});  // the only format Megatron FSDP saves
  }
  if (p.offload.kind == OffloadKind::optimizer) {
    r.need(p.zero >= 1, "$.plan.zero", "optimizer offload without a sharded optimizer",
           "\"zero\": 1 (Megatron offloads the distributed optimizer's state)");
    o.push_back({"--optimizer-cpu-offload", ""});
    o.push_back({"--optimizer-offload-fraction", "1.0"});
    o.push_back({"--use-precision-aware-optimizer", ""});
  }
  // Megatron-LM asserts --overlap-param-gather only with --overlap-grad-reduce and a sharded optimizer.
  if (p.overlap_grad_reduce && (p.data_ranks() > 1 || p.overlap_param_gather))
    o.push_back({"--overlap-grad-reduce", ""});
  if (p.overlap_param_gather) {
    r.need(p.zero >= 1, "$.plan.overlap_param_gather", "parameter-gather overlap without a sharded optimizer",
           "\"zero\": 1");
    r.need(p.overlap_grad_reduce, "$.plan.overlap_param_gather",
           "parameter-gather overlap without overlapped gradient reduction", "\"overlap_grad_reduce\": true");
    o.push_back({"--overlap-param-gather", ""});
  }
  if (p.tp_comm_overlap) o.push_back({"--tp-comm-overlap", ""});
  if (p.cuda_graphs) {  // (Megatron-Core's own capture of the layers; it asserts against full recompute)
    r.need(p.recompute != Recompute::full, "$.plan.cuda_graphs", "CUDA graphs with full recompute (Megatron-LM refuses "
           "the pair)", "\"recompute\": \"selective\"");
    o.push_back({"--cuda-graph-impl", "local"});
  }
  o.push_back({"--attention-backend", p.attention == Attention::flash ? "flash" : "unfused"});
}

void precision_args(const Scenario& sc, Options& o, Refusals& r) {
  switch (sc.training.precision) {
    case Precision::bf16: o.push_back({"--bf16", ""}); break;
    case Precision::fp16:
      o.push_back({"--fp16", ""});
      // Megatron sets fp32 main gradients itself only for bf16; the plan's fp32 gradients need the flag under fp16.
      if (sc.training.grad_precision == Precision::fp32) o.push_back({"--accumulate-allreduce-grads-in-fp32", ""});
      break;
    case Precision::fp8:  // Transformer Engine: e4m3 forward, e5m2 gradients, the scenario's scaling recipe
      o.push_back({"--bf16", ""});
      o.push_back({"--fp8-format", "hybrid"});
      r.need(sc.training.fp8_recipe != "rowwise", "$.training.fp8_recipe", "per-row fp8 scaling (Megatron-LM's --fp8-recipe: "
             "delayed, tensorwise, blockwise, mxfp8)", "\"fp8_recipe\": \"tensorwise\"");
      o.push_back({"--fp8-recipe", sc.training.fp8_recipe});
      break;
    case Precision::fp32: break;
  }
  if (sc.training.grad_precision == Precision::bf16) o.push_back({"--grad-reduce-in-bf16", ""});
}


}  // namespace

std::string export_megatron(const Scenario& sc, const std::string& file) {
  Refusals r{"Megatron-LM", file, {}};
  refuse_common(sc, r);
  Options o;
  model_args(sc, o, r);
  plan_args(sc, o, r);
  precision_args(sc, o, r);
  megatron_run_args(sc, "HuggingFaceTokenizer", o);
  r.throw_if_any();
  const Plan& p = sc.plan;
  const Launch l = launch_of(sc);
  std::string about = "# trainplan export --to megatron: scenario \"" + sc.name + "\" (" + file + ")\n";
  about += "# Megatron-LM (core_v0.15.3 arguments) pretrain_gpt.py for dp " + num((long long)p.dp) + " x cp " +
           num((long long)p.cp) + " x tp " + num((long long)p.tp) + " x pp " + num((long long)p.pp) + " = " +
           num((long long)p.gpus()) + " GPUs (" + num((long long)l.nodes) + " node(s) of " + num((long long)l.gpus_per_node) +
           "); gradient accumulation " + num(accumulation_steps(sc)) + " micro-batches per step.\n";
  if (recomputes_nothing(p))
    about += "# plan.recompute \"selective\" under flash attention recomputes nothing in trainplan: no recompute flags.\n";
  about += "# Submit from the Megatron-LM folder: sbatch THIS_FILE (one task per GPU; srun starts pretrain_gpt.py).\n";
  std::string s = sbatch_header(sc, about, l.gpus_per_node, "your data prefix (Megatron's .bin / .idx, without the suffix)");
  s += "export CUDA_DEVICE_MAX_CONNECTIONS=" + std::string(p.zero >= 2 ? "8" : "1") + "\n\n";
  return s + shell_lines("srun --kill-on-bad-exit=1 bash -c 'export RANK=$SLURM_PROCID LOCAL_RANK=$SLURM_LOCALID "
                         "WORLD_SIZE=$SLURM_NTASKS; exec python pretrain_gpt.py \"$@\"' pretrain_gpt.py",
                         o);
}

}  // namespace tp::exporting
