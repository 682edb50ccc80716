// export/torchtitan: the plan as a TorchTitan TOML job config (TorchTitan v0.2.2 torchtitan/config/job_config.py;
// data/export/torchtitan.keys). TorchTitan's data parallelism is FSDP2: ZeRO-3 = data_parallel_shard_degree with
// resharding after forward, ZeRO-2 = the same without resharding ("never"), ZeRO-0 = plain replication (DDP);
// ZeRO-1 has no equivalent. Its tensor parallelism always shards the norms' activations (= sequence
// parallelism), its attention is SDPA / flex (flash), its fp8 is torchao's float8 converter (fp8 weights
// all-gathered in bf16, as simulated), context parallelism passes K / V around the ring ("alltoall" rotation), and
// its models are its built-in llama3 flavors (8B, 70B, 405B) when the shape is one, else a flavor named after the
// model (a comment gives the shape to register). Selective recompute under flash recomputes nothing in trainplan,
// so it exports as mode "none"; "selective_op" is TorchTitan's own op-level policy (selective_ac_option "op"). Chunks other than fewer layers on the first / last stage are given as
// parallelism.module_fqns_per_model_part. The output is a Slurm batch script that writes the TOML and starts
// torchrun on every node under srun (c10d rendezvous on the job's first node). Refused: GELU models, MoE (TorchTitan's MoE is
// dropless), ZeRO-1, ZeRO-0 beside tp / pp / cp, tp without sequence parallelism, unfused attention, fp16,
// mixed precision under tp / pp without FSDP, every offload, and the techniques no target has.
#include <algorithm>

#include "export/export.hpp"

namespace tp::exporting {

namespace {

std::string q(const std::string& s) { return "\"" + s + "\""; }

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
  // fp8: torchao's recipes; a recipe the scenario did not name becomes TorchTitan's default (tensorwise).
  r.need(sc.training.precision != Precision::fp8 || !sc.training.fp8_recipe_given || sc.training.fp8_recipe == "tensorwise" ||
             sc.training.fp8_recipe == "rowwise",
         "$.training.fp8_recipe", "fp8 scaling \"" + sc.training.fp8_recipe + "\" (torchao's float8 recipes: tensorwise, rowwise)",
         "\"fp8_recipe\": \"tensorwise\"");
  r.need(p.offload.kind != OffloadKind::optimizer, "$.plan.offload.kind",
         "ZeRO-Offload (FSDP2's CPU offload moves parameters and gradients too)", "no offload");
  r.need(!(p.schedule == Schedule::gpipe && p.virtual_stages > 1), "$.plan.virtual_stages",
         "virtual stages under the GPipe schedule", "\"schedule\": \"interleaved\" (Interleaved1F1B)");
  // ZeRO-0 is TorchTitan's DDP, which runs only as the sole parallelism; with cp it always shards weights with
  // FSDP over dp x cp (models/llama3/infra/parallelize.py, v0.2.2).
  r.need(p.zero != 0 || (p.cp == 1 && (p.dp == 1 || p.gpus() == p.dp)), "$.plan.zero",
         "replicated weights (ZeRO-0) beside tp, pp or cp (TorchTitan's DDP is 1-D; its cp shards with FSDP)",
         "\"zero\": 3 (FSDP2) or 2");
  // TorchTitan's mixed precision comes from fully_shard (dp shard > 1 or cp > 1) or, for plain DDP / one device,
  // torch.autocast; with tp or pp and neither, it trains in fp32 (distributed/utils.py maybe_enable_amp).
  const bool fsdp = (p.zero >= 2 && p.dp > 1) || p.cp > 1;
  r.need(sc.training.precision == Precision::fp32 || fsdp || (p.tp == 1 && p.pp == 1), "$.training.precision",
         "mixed precision with tp or pp but no FSDP (TorchTitan then trains in fp32)",
         "\"zero\": 3 (FSDP2) over dp > 1, or \"precision\": \"fp32\"");
  r.need(!p.tp_comm_overlap || p.tp > 1, "$.plan.tp_comm_overlap", "tp communication overlap without tp", "without it");
  r.need(!p.cuda_graphs, "$.plan.cuda_graphs", "CUDA graphs of the training step", "\"cuda_graphs\": false");
}

// TorchTitan v0.2.2's built-in llama3 flavors (models/llama3/__init__.py): dim, layers, heads, kv heads, the FFN
// width its multiple_of / ffn_dim_multiplier give, vocabulary 128256 and rotary base 500000.
const char* builtin_flavor(const Transformer& m) {
  struct F { const char* name; long long dim, layers, heads, kv, ffn; };
  static const F flavors[] = {{"8B", 4096, 32, 32, 8, 14336}, {"70B", 8192, 80, 64, 8, 28672},
                              {"405B", 16384, 126, 128, 8, 53248}};
  for (const F& f : flavors)
    if (m.hidden == f.dim && m.layers == f.layers && m.heads == f.heads && m.kv_heads == f.kv && m.ffn_hidden == f.ffn &&
        m.vocab == 128256 && m.rotary_base() == 500000 && m.norm_epsilon() == 1e-5 && m.attn_head_dim == 0 &&
        !m.tied_embeddings)
      return f.name;
  return nullptr;
}

// [["tok_embeddings", "layers.0", ...], ..., [..., "norm", "output"]]: the modules of every model chunk.
std::string fqns_per_part(const std::vector<int>& ch) {
  std::string s = "[";
  long long layer = 0;
  for (size_t g = 0; g < ch.size(); ++g) {
    std::string part;
    auto add = [&](const std::string& n) { part += (part.empty() ? "\"" : ", \"") + n + "\""; };
    if (g == 0) add("tok_embeddings");
    for (int i = 0; i < ch[g]; ++i) add("layers." + num(layer++));
    if (g + 1 == ch.size()) { add("norm"); add("output"); }
    s += (g ? ", [" : "[") + part + "]";
  }
  return s + "]";
}

const char* schedule_of(const Plan& p) {
  if (p.schedule == Schedule::gpipe) return "GPipe";
  if (p.schedule == Schedule::interleaved && p.virtual_stages > 1) return "Interleaved1F1B";
  return "1F1B";
}


// [model], [training], [optimizer], [lr_scheduler], [checkpoint], [metrics]: what the job runs beyond the plan.
std::string run_sections(const Scenario& sc, const char* flavor) {
  const RunSettings rs = run_settings(sc);
  const Plan& p = sc.plan;
  std::string s = "[model]\nname = \"llama3\"\nflavor = " + q(flavor ? flavor : sc.model.name) + "\n";
  s += "hf_assets_path = \"${TOKENIZER}\"\n";
  if (sc.training.precision == Precision::fp8) s += "converters = [\"quantize.linear.float8\"]\n";
  s += "\n[training]\n";
  // Without pp the local batch is one micro-batch (global / (local x dp) accumulation steps); with pp it is the
  // rank's whole batch, split into pipeline micro-batches.
  s += "local_batch_size = " + num(p.pp > 1 ? sc.training.global_batch / p.dp : p.microbatch) + "\n";
  s += "global_batch_size = " + num(sc.training.global_batch) + "\n";
  s += "seq_len = " + num(sc.training.seq_len) + "\n";
  s += "steps = " + num(rs.steps) + "\n";
  s += "max_norm = " + num(rs.opt.grad_clip) + "\n";
  s += "mixed_precision_param = " + q(sc.training.precision == Precision::fp32 ? "float32" : "bfloat16") + "\n";
  s += "dataset = \"c4\"\ndataset_path = \"${DATA_PATH}\"\n";
  s += "\n[optimizer]\nname = \"AdamW\"\nlr = " + num(rs.opt.lr) + "\neps = " + num(rs.opt.eps) + "\nbeta1 = " +
       num(rs.opt.beta1) + "\nbeta2 = " + num(rs.opt.beta2) + "\nweight_decay = " + num(rs.opt.weight_decay) + "\n";
  s += "\n[lr_scheduler]\nwarmup_steps = " + num(rs.warmup) + "\n";
  if (rs.opt.decay == LrDecay::constant) s += "decay_ratio = 0.0\n";  // all steps after warm-up stable
  else s += "decay_type = " + q(lr_decay_name(rs.opt.decay)) + "\n";
  s += "min_lr_factor = " + num(rs.opt.lr > 0 ? rs.min_lr / rs.opt.lr : 0.0) + "\n";
  s += "\n[checkpoint]\nenable = true\ninterval = " + num(rs.save_every) + "\n";
  s += "\n[metrics]\nlog_freq = " + num(rs.log_every) + "\n";
  return s;
}

std::string parallel_section(const Scenario& sc, const std::vector<int>& ch, bool first_last_form) {
  const Plan& p = sc.plan;
  const long long dp = p.dp;
  const size_t n = ch.size();
  const long long k = n > 2 ? ch[1] : std::max(ch.front(), ch.back());
  std::string s = "\n[parallelism]\n";
  s += "data_parallel_replicate_degree = " + num(p.zero == 0 ? dp : 1LL) + "\n";
  s += "data_parallel_shard_degree = " + num(p.zero == 0 ? 1LL : dp) + "\n";
  if (p.zero >= 2) s += "fsdp_reshard_after_forward = " + q(p.zero == 3 ? "always" : "never") + "\n";
  s += "tensor_parallel_degree = " + num((long long)p.tp) + "\n";
  if (p.tp_comm_overlap) s += "enable_async_tensor_parallel = true\n";
  s += "context_parallel_degree = " + num((long long)p.cp) + "\n";
  if (p.cp > 1) s += "context_parallel_rotate_method = \"alltoall\"\n";  // K / V passed around the ring
  s += "pipeline_parallel_degree = " + num((long long)p.pp) + "\n";
  if (p.pp > 1) {
    s += "pipeline_parallel_schedule = " + q(schedule_of(p)) + "\n";
    s += "pipeline_parallel_microbatch_size = " + num(p.microbatch) + "\n";
    if (!first_last_form) {
      s += "module_fqns_per_model_part = " + fqns_per_part(ch) + "\n";
    } else {
      if (n > (size_t)p.pp) s += "pipeline_parallel_layers_per_stage = " + num(k) + "\n";
      s += "pipeline_parallel_first_stage_less_layers = " + num(n > 1 ? k - ch.front() : 0LL) + "\n";
      s += "pipeline_parallel_last_stage_less_layers = " + num(n > 1 ? k - ch.back() : 0LL) + "\n";
    }
  }
  return s;
}

}  // namespace

std::string export_torchtitan(const Scenario& sc, const std::string& file) {
  Refusals r{"TorchTitan", file, {}};
  refuse_common(sc, r);
  refuse_torchtitan(sc, r);
  r.throw_if_any();
  const Plan& p = sc.plan;
  const Transformer& m = sc.model;
  // TorchTitan (distributed/pipeline_parallel.py generate_llm_fqn_per_model_part) splits layers + first_less +
  // last_less evenly over its pp x v stages (our model chunks): fewer layers on the first (last) chunk around an
  // even middle. Any other split is stated module by module (module_fqns_per_model_part).
  const std::vector<int> ch = chunk_layers(p, m.layers);
  const size_t n = ch.size();
  const long long k = n > 2 ? ch[1] : std::max(ch.front(), ch.back());
  bool even_middle = ch.front() <= k && ch.back() <= k;
  for (size_t i = 1; i + 1 < n; ++i) even_middle = even_middle && ch[i] == k;
  const char* flavor = builtin_flavor(m);
  const Launch l = launch_of(sc);
  std::string about = "# trainplan export --to torchtitan: scenario \"" + sc.name + "\" (" + file + ")\n";
  about += "# TorchTitan (v0.2.2 job config) for dp " + num((long long)p.dp) + " x cp " + num((long long)p.cp) + " x tp " +
           num((long long)p.tp) + " x pp " + num((long long)p.pp) + " = " + num((long long)p.gpus()) + " GPUs (" +
           num((long long)l.nodes) + " node(s) of " + num((long long)l.gpus_per_node) + "): sbatch THIS_FILE from the\n"
           "# torchtitan folder; srun starts one torchrun per node.\n";
  if (flavor) {
    about += "# Model: TorchTitan's built-in llama3 flavor \"" + std::string(flavor) + "\" (its RoPE applies Llama 3.1's scaling).\n";
  } else {
    about += "# Register the model as flavor \"" + m.name + "\" of llama3 (TransformerModelArgs): dim=" + num(m.hidden) +
             ", n_layers=" + num(m.layers) + ", n_heads=" + num(m.heads) + ", n_kv_heads=" + num(m.kv_heads) +
             ", vocab_size=" + num(m.vocab) + ", rope_theta=" + num(m.rotary_base()) + ", norm_eps=" +
             num(m.norm_epsilon()) + ", FFN hidden " + num(m.ffn_hidden) + " (via multiple_of / ffn_dim_multiplier)" +
             (m.attn_head_dim > 0 ? ", head_dim=" + num(m.attn_head_dim) : std::string()) +
             (m.rope_scaling_factor > 0 ? ", rope_scaling_args factor " + num(m.rope_scaling_factor)
                                        : std::string(", no rope scaling")) + ".\n";
  }
  if (p.recompute == Recompute::selective)
    about += "# plan.recompute \"selective\" under flash attention recomputes nothing in trainplan: mode \"none\".\n";
  std::string s = sbatch_header(sc, about, 1, "your dataset folder (loaded as TorchTitan's \\\"c4\\\" format)");
  s += "\ncat > torchtitan-job.toml <<EOF\n";
  s += "[job]\ndescription = " + q("trainplan plan for " + sc.name) + "\ndump_folder = \"${CKPT_DIR}\"\n\n";
  s += run_sections(sc, flavor);
  s += parallel_section(sc, ch, even_middle);
  if (p.recompute == Recompute::selective_op)  // op-level SAC (sim/op_cost.cpp models its policy)
    s += "\n[activation_checkpoint]\nmode = \"selective\"\nselective_ac_option = \"op\"\n";
  else if (p.recompute == Recompute::full && p.recompute_layers > 0 && p.recompute_layers < m.layers)  // every k-th block
    s += "\n[activation_checkpoint]\nmode = \"selective\"\nselective_ac_option = \"" +
         std::to_string(m.layers / p.recompute_layers) + "\"\n";
  else if (p.recompute == Recompute::full && p.recompute_layers == 0)
    s += "\n[activation_checkpoint]\nmode = \"none\"\n";
  else
    s += "\n[activation_checkpoint]\nmode = " + q(p.recompute == Recompute::full ? "full" : "none") + "\n";
  if (sc.training.precision == Precision::fp8)  // fp8 compute only: weights all-gathered in bf16, as simulated
    s += "\n[quantize.linear.float8]\nenable_fsdp_float8_all_gather = false\n"
         "precompute_float8_dynamic_scale_for_fsdp = false\nfilter_fqns = [\"output\"]\n" +
         (sc.training.fp8_recipe == "rowwise" ? std::string("recipe_name = \"rowwise\"\n") : std::string());
  if (p.tp_comm_overlap) s += "\n[compile]\nenable = true\ncomponents = [\"model\"]\n";  // async TP needs compile
  s += "EOF\n\n";
  s += "srun --ntasks-per-node=1 --kill-on-bad-exit=1 torchrun --nnodes " + num((long long)l.nodes) +
       " --nproc-per-node " + num((long long)l.gpus_per_node) +
       " --rdzv-id \"$SLURM_JOB_ID\" --rdzv-backend c10d --rdzv-endpoint \"$MASTER_ADDR:$MASTER_PORT\" \\\n"
       "  -m torchtitan.train --job.config_file torchtitan-job.toml\n";
  return s;
}

}  // namespace tp::exporting
