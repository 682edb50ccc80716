// plan_rules: validate_plan — one plan's rules against the model, the cluster and the training batch (tensor,
// pipeline, context and expert parallelism, ZeRO, schedules, recompute, offload, precision), and its pipeline
// stage split (uneven stages, Megatron-LM's accounted embedding and loss). Every problem is an Issues entry at
// its JSON path; the plan's derived fields (stage_layers, chunk_layers, virtual_stages of modular) are resolved
// here. See scenario.hpp.
#include <algorithm>
#include <cmath>
#include <sstream>

#include "scenario.hpp"

namespace tp {
namespace {
std::string s(long long x) { return std::to_string(x); }
std::string num_text(double x) {
  std::ostringstream o;
  o << x;
  return o.str();
}
}  // namespace

// Uneven pipeline stages: plan.stage_layers, or Megatron-LM's first / last-stage counts with the rest split evenly
// over the middle stages (megatron/core/transformer/transformer_config.py, __post_init__: first and last > 0, each
// divisible by the virtual pipeline size; the remaining layers divisible by the middle stage count, none left
// without middle stages; each middle stage's count divisible by the virtual pipeline size). Resolves them into
// p.stage_layers (cleared when every stage gets layers / pp). Returns whether the plan names uneven stages.
// Megatron-LM's account_for_embedding / loss_in_pipeline_split (megatron/core/transformer/transformer_config.py):
// layers + the accounted embedding and loss split into pp x v equal model chunks; the first (last) chunk gives
// one of its slots to the embedding (loss). Fills p.chunk_layers and p.stage_layers. Idempotent.
static void resolve_accounted_split(const Transformer& m, Plan& p, Issues& is, const std::string& plan_path) {
  const std::string key = plan_path + (p.account_for_embedding ? ".account_for_embedding_in_pipeline_split"
                                                                 : ".account_for_loss_in_pipeline_split");
  if (p.first_stage_layers > 0 || p.last_stage_layers > 0 || (!p.stage_layers.empty() && p.chunk_layers.empty())) {
    is.add(key, "gives the pipeline split itself: not with stage_layers or first_stage_layers / last_stage_layers");
    return;
  }
  if (p.pp < 2) { is.add(key, "balances pipeline stages: it needs pp >= 2, got " + s(p.pp)); return; }
  if (p.schedule == Schedule::modular || p.grad_accumulation == GradAccumulation::layered) {
    is.add(key, "needs a schedule gpipe, 1f1b or interleaved with standard gradient accumulation");
    return;
  }
  const int chunks = p.pp * std::max(1, p.virtual_stages);
  const long long slots = m.layers + (p.account_for_embedding ? 1 : 0) + (p.account_for_loss ? 1 : 0);
  if (m.layers <= 0) return;
  if (slots % chunks != 0) {
    is.add(key, "Megatron-LM needs the layers plus the accounted embedding / loss (" + s(slots) +
                    ") divisible by pp x virtual_stages (" + s(chunks) + ")");
    return;
  }
  const long long k = slots / chunks;
  if (k < 2 && (p.account_for_embedding || p.account_for_loss)) {
    is.add(key, "leaves the first or last model chunk without a transformer layer (" + s(k) + " slot per chunk)");
    return;
  }
  p.chunk_layers.assign(chunks, (int)k);
  if (p.account_for_embedding) p.chunk_layers.front() -= 1;
  if (p.account_for_loss) p.chunk_layers.back() -= 1;
  p.stage_layers.assign(p.pp, 0);
  for (int g = 0; g < chunks; ++g) p.stage_layers[g % p.pp] += p.chunk_layers[g];  // looping: chunk g on stage g mod pp
}

static bool resolve_stage_layers(const Transformer& m, Plan& p, Issues& is, const std::string& plan_path) {
  auto at = [&](const char* key) { return plan_path + "." + key; };
  if (p.account_for_embedding || p.account_for_loss) {
    resolve_accounted_split(m, p, is, plan_path);
    return true;
  }
  p.chunk_layers.clear();
  const bool list = !p.stage_layers.empty(), fl = p.first_stage_layers > 0 || p.last_stage_layers > 0;
  const char* fl_key = p.first_stage_layers > 0 ? "first_stage_layers" : "last_stage_layers";
  if (!list && !fl) return false;
  const char* key = list ? "stage_layers" : fl_key;
  if (list && fl) {
    is.add(at("stage_layers"), "give either stage_layers or first_stage_layers / last_stage_layers, not both");
    return true;
  }
  if (p.pp < 2) {
    is.add(at(key), "uneven pipeline stages need pp >= 2, got " + s(p.pp));
    return true;
  }
  const long long L = m.layers;
  if (list) {
    long long sum = 0;
    for (int n : p.stage_layers) sum += n;
    if ((int)p.stage_layers.size() != p.pp) {
      is.add(at("stage_layers"), "expected one layer count per pipeline stage (pp = " + s(p.pp) + "), got " +
                                     s((long long)p.stage_layers.size()));
      return true;
    }
    if (L > 0 && sum != L) {
      is.add(at("stage_layers"), "must sum to the model's layers (" + s(L) + "), got " + s(sum));
      return true;
    }
  } else {
    int given = (p.first_stage_layers > 0) + (p.last_stage_layers > 0), middle = p.pp - given;
    long long rest = L - p.first_stage_layers - p.last_stage_layers;
    if (middle == 0 && rest != 0) {
      is.add(at(fl_key), "with pp " + s(p.pp) + " there are no middle stages: first_stage_layers + last_stage_layers "
                         "must equal the model's layers (" + s(L) + "), got " + s(L - rest));
      return true;
    }
    if (middle > 0 && (rest < middle || rest % middle != 0)) {
      is.add(at(fl_key), "leaves " + s(rest) + " of the model's " + s(L) + " layers for the " + s(middle) +
                         " middle stages; Megatron-LM needs them to split evenly, at least one layer each");
      return true;
    }
    p.stage_layers.assign(p.pp, middle > 0 ? (int)(rest / middle) : 0);
    if (p.first_stage_layers > 0) p.stage_layers.front() = p.first_stage_layers;
    if (p.last_stage_layers > 0) p.stage_layers.back() = p.last_stage_layers;
    p.first_stage_layers = p.last_stage_layers = 0;  // one representation from here on (validation may rerun)
  }
  if (p.schedule == Schedule::interleaved && p.virtual_stages > 1) {
    for (int st = 0; st < p.pp; ++st)
      if (p.stage_layers[st] % p.virtual_stages != 0) {
        is.add(at(key), "with virtual_stages " + s(p.virtual_stages) + " every stage's layers must be divisible by it "
                        "(Megatron-LM splits each stage into that many equal chunks), but stage " + s(st) + " has " +
                        s(p.stage_layers[st]));
        return true;
      }
  }
  if (p.schedule == Schedule::modular)
    is.add(at("schedule"), "\"modular\" places layer l on stage l mod pp (a looping pipeline of one-layer chunks), so "
                           "its stage sizes follow from layers and pp: drop " + std::string(key) +
                           " or use gpipe, 1f1b or interleaved");
  else if (p.grad_accumulation == GradAccumulation::layered)
    is.add(at("grad_accumulation"), "\"layered\" with uneven pipeline stages is not supported: layered accumulation "
                                    "splits every stage into the same number of one-layer chunks; drop " +
                                    std::string(key) + " or use standard accumulation");
  if (std::count(p.stage_layers.begin(), p.stage_layers.end(), p.stage_layers[0]) == p.pp) p.stage_layers.clear();
  return true;
}

void validate_plan(const Transformer& m, const Cluster& c, const Training& t, Plan& p, Issues& is,
                   const std::string& plan_path, const std::string& batch_path, const std::string& cluster_path) {
  auto at = [&](const char* key) { return plan_path + "." + key; };
  // Tensor parallelism.
  if (p.tp_mode == TpMode::d2) {
    int q = p.tp_q();
    if (q * q != p.tp) {
      is.add(at("tp"), "tp_mode \"2d\" needs tp = q x q GPUs on a square grid (1, 4, 9, 16, ...), got " + s(p.tp));
    } else {
      std::string side = "tp_mode \"2d\": the grid side q = " + s(q) + " (tp = q x q) must divide the model's ";
      if (m.heads > 0 && m.heads % q != 0) is.add(at("tp"), side + "heads (" + s(m.heads) + ")");
      else if (m.kv_heads > 0 && m.kv_heads % q != 0) is.add(at("tp"), side + "kv_heads (" + s(m.kv_heads) + ")");
      else if (m.hidden > 0 && m.hidden % q != 0) is.add(at("tp"), side + "hidden (" + s(m.hidden) + ")");
      if (m.ffn_hidden > 0 && m.ffn_hidden % q != 0) is.add(at("tp"), side + "ffn_hidden (" + s(m.ffn_hidden) + ")");
      if (p.microbatch % q != 0)
        is.add(at("microbatch"), "tp_mode \"2d\" splits each micro-batch over the q = " + s(q) +
                                     " grid rows, so it must be divisible by " + s(q) + ", got " + s(p.microbatch));
    }
    if (p.sequence_parallel)
      is.add(at("sequence_parallel"), "not allowed with tp_mode \"2d\" (its activations are already partitioned over the grid)");
    if (p.recompute == Recompute::selective_op)
      is.add(at("recompute"), "\"selective_op\" (TorchTitan's op-level checkpointing) is not modelled with tp_mode \"2d\"; use "
                              "\"selective\" or \"full\"");
    if (p.tp_grid_node_blocks && q * q == p.tp) {
      int g = c.gpus_per_node, b = 1;
      while ((b + 1) * (b + 1) <= g) ++b;
      if (b * b != g || q % b != 0 || p.tp % g != 0)
        is.add(at("tp_grid"), "\"node_blocks\" makes each node's GPUs a b x b block of the q x q grid: it needs "
                              "gpus_per_node (" + s(g) + ") to be a square b x b with b dividing q (" + s(q) + ")");
    }
  } else {
    if (p.tp_grid_node_blocks) is.add(at("tp_grid"), "\"node_blocks\" places a 2D grid: it needs tp_mode \"2d\"");
    if (m.heads > 0 && m.heads % p.tp != 0) is.add(at("tp"), "must divide the model's heads (" + s(m.heads) + "), got " + s(p.tp));
    else if (m.kv_heads > 0 && m.kv_heads % p.tp != 0)
      is.add(at("tp"), "must divide the model's kv_heads (" + s(m.kv_heads) + "), got " + s(p.tp));
    if (m.ffn_hidden > 0 && m.ffn_hidden % p.tp != 0)
      is.add(at("tp"), "must divide the model's ffn_hidden (" + s(m.ffn_hidden) + "), got " + s(p.tp));
    if (m.moe.experts > 0 && m.moe.ffn_hidden > 0 && m.moe.ffn_hidden % p.tp != 0)
      is.add(at("tp"), "must divide the model's moe.ffn_hidden (" + s(m.moe.ffn_hidden) + "), got " + s(p.tp));
    if (m.moe.experts > 0 && m.moe.shared_ffn_hidden % p.tp != 0)
      is.add(at("tp"), "must divide the model's moe.shared_ffn_hidden (" + s(m.moe.shared_ffn_hidden) + "), got " + s(p.tp));
    if (p.sequence_parallel && p.cp > 1 && t.seq_len % ((long long)p.cp * p.tp) != 0)
      is.add(at("sequence_parallel"), "needs cp x tp (" + s((long long)p.cp * p.tp) + ") to divide seq_len (" +
                                          s(t.seq_len) + "): each cp rank's sequence chunk is split over tp");
    else if (p.sequence_parallel && t.seq_len % p.tp != 0)
      is.add(at("sequence_parallel"), "needs tp (" + s(p.tp) + ") to divide seq_len (" + s(t.seq_len) + ")");
  }
  if (p.tp_comm_overlap && !(p.sequence_parallel && p.tp > 1 && p.tp_mode == TpMode::d1))
    is.add(at("tp_comm_overlap"), "overlaps the sequence-parallel all-gathers and reduce-scatters with the GEMMs "
                                  "(Megatron-LM's --tp-comm-overlap): it needs tp > 1 with sequence_parallel true and tp_mode \"1d\"");
  if (p.cuda_graphs) {
    if (const std::string no = cuda_graph_blocker(m, p); !no.empty())
      is.add(at("cuda_graphs"), "captures a one-GPU step as a CUDA graph; this plan's cannot be: " + no);
  }
  if (p.overlap_param_gather && p.zero != 1 && p.zero != 2)
    is.add(at("overlap_param_gather"), "overlaps the all-gather of the updated parameters of ZeRO-1/2 (Megatron-LM's "
                                       "distributed optimizer, --overlap-param-gather) with the next forward: it needs zero 1 "
                                       "or 2, got " + s(p.zero));
  if (p.recompute_layers >= 0) {
    if (p.recompute != Recompute::full && p.recompute != Recompute::selective_op)
      is.add(at("recompute_layers"), "says how many layers recompute as plan.recompute says: it needs recompute \"full\" "
                                     "or \"selective_op\", got \"" + std::string(recompute_name(p.recompute)) + "\"");
    if (m.layers > 0 && p.recompute_layers > m.layers)
      is.add(at("recompute_layers"), "at most the model's layers (" + s(m.layers) + "), got " + s(p.recompute_layers));
    if (p.tp_mode == TpMode::d2) is.add(at("recompute_layers"), "not modelled with tp_mode \"2d\"");
  }
  // Context parallelism (Megatron-LM): 2 cp chunks per sequence for the causal load balance.
  if (p.cp > 1) {
    if (t.seq_len > 0 && t.seq_len % (2LL * p.cp) != 0)
      is.add(at("cp"), "needs 2 x cp (" + s(2LL * p.cp) + ") to divide seq_len (" + s(t.seq_len) +
                           "): each sequence is cut into 2 cp chunks for the causal load balance");
    if (p.tp_mode == TpMode::d2) is.add(at("cp"), "context parallelism with tp_mode \"2d\" is not modelled; use tp_mode \"1d\"");
  }
  // Pipeline. modular without virtual_stages: one layer per model chunk.
  if (p.virtual_stages <= 0)
    p.virtual_stages = p.schedule == Schedule::modular && m.layers > 0 && m.layers % p.pp == 0 ? (int)(m.layers / p.pp) : 1;
  const bool uneven = resolve_stage_layers(m, p, is, plan_path);
  if (!uneven && m.layers > 0 && m.layers % p.pp != 0)
    is.add(at("pp"), "must divide the model's layers (" + s(m.layers) + "), got " + s(p.pp) +
                         " (uneven stages: give plan.stage_layers or first_stage_layers / last_stage_layers)");
  else if (!uneven && m.layers > 0 && m.layers % ((long long)p.pp * p.virtual_stages) != 0)
    is.add(at("virtual_stages"), "pp x virtual_stages (" + s((long long)p.pp * p.virtual_stages) +
                                     ") must divide the model's layers (" + s(m.layers) + ")");
  if (p.schedule == Schedule::interleaved && p.virtual_stages < 2)
    is.add(at("schedule"), "\"interleaved\" needs virtual_stages >= 2, got " + s(p.virtual_stages));
  if (p.schedule == Schedule::interleaved && p.pp < 2) is.add(at("schedule"), "\"interleaved\" needs pp >= 2");
  if (p.schedule == Schedule::modular && p.pp < 2) is.add(at("schedule"), "\"modular\" needs pp >= 2, got " + s(p.pp));
  if (p.schedule != Schedule::interleaved && p.schedule != Schedule::modular && p.virtual_stages > 1)
    is.add(at("virtual_stages"), "virtual_stages > 1 needs schedule \"interleaved\" or \"modular\", got \"" +
                                     std::string(schedule_name(p.schedule)) + "\"");
  if (p.grad_accumulation == GradAccumulation::layered && p.pp > 1 && p.schedule != Schedule::gpipe &&
      p.schedule != Schedule::modular)
    is.add(at("grad_accumulation"), "\"layered\" with pp > 1 needs schedule \"gpipe\" or \"modular\", got \"" +
                                        std::string(schedule_name(p.schedule)) +
                                        "\": layered accumulation runs every micro-batch through a layer before the "
                                        "next, so it cannot interleave micro-batches as 1f1b/interleaved do; use gpipe "
                                        "(contiguous stages) or modular (looping)");
  // Expert parallelism.
  if (p.ep > 1) {
    if (m.moe.experts <= 0) is.add(at("ep"), "expert parallelism needs a mixture-of-experts model (model.moe)");
    else if (m.moe.experts % p.ep != 0)
      is.add(at("ep"), "must divide the model's experts (" + s(m.moe.experts) + "), got " + s(p.ep));
    if (p.data_ranks() % p.ep != 0)
      is.add(at("ep"), (p.cp > 1 ? "must divide dp x cp (" + s(p.data_ranks()) : "must divide dp (" + s(p.dp)) + "), got " +
                           s(p.ep) + ": expert-parallel groups lie inside the data-parallel group");
  }
  // Offload.
  Offload& o = p.offload;
  if (o.on() && !(c.host.memory_bandwidth_bytes_per_s > 0))
    is.add(cluster_path + ".host.memory_bandwidth_bytes_per_s",
           "missing; offload (" + at("offload") + " \"" + offload_kind_name(o.kind) +
               "\") needs the host's memory bandwidth in bytes/s to cost the host-side optimizer and copies");
  if (o.kind == OffloadKind::granular) {
    if (o.experts_only && m.moe.experts <= 0)
      is.add(at("offload.target"), "\"experts\" needs a mixture-of-experts model (model.moe)");
    if (o.fraction > 0 && m.layers > 0) {  // evenly spread: layer l iff floor((l + 1) f) > floor(l f)
      o.layers.clear();
      for (long long l = 0; l < m.layers; ++l)
        if (std::floor((l + 1) * o.fraction + 1e-9) > std::floor(l * o.fraction + 1e-9)) o.layers.push_back((int)l);
      if (o.layers.empty())
        is.add(at("offload.fraction"), "offloads no layer of the model's " + s(m.layers) + "; expected a fraction >= 1/" +
                                           s(m.layers) + ", got " + num_text(o.fraction));
    }
    for (int l : o.layers)
      if (m.layers > 0 && l >= m.layers)
        is.add(at("offload.layers"), "expected layer indices in [0, " + s(m.layers - 1) + "] (the model has " +
                                         s(m.layers) + " layers), got " + s(l));
  }
  if (o.kind == OffloadKind::chunked && p.dp > 1 && p.zero != 3)
    is.add(at("zero"), "offload \"chunked\" with dp > 1 needs zero 3 (PatrickStar shards chunks over data-parallel "
                       "ranks like ZeRO-3), got " + s(p.zero));
  // Cluster and batch.
  long long gpus = (long long)p.dp * p.cp * p.tp * p.pp;
  if (c.nodes > 0 && gpus > (long long)c.total_gpus())
    is.add(plan_path, std::string(p.cp > 1 ? "dp x cp x tp x pp = " : "dp x tp x pp = ") + s(gpus) +
                          " GPUs exceeds the cluster's " + s(c.total_gpus()));
  long long per = (long long)p.dp * p.microbatch;
  if (t.global_batch > 0 && t.global_batch % per != 0) {
    is.add(batch_path, "must be divisible by dp x microbatch = " + s(per) + " to form micro-batches, got " + s(t.global_batch));
  } else if (t.global_batch > 0) {
    long long nm = p.num_microbatches = t.global_batch / per;
    // A simulation holds a few tasks per micro-batch and pipeline chunk (per layer where layered accumulation,
    // ZeRO-2/3 or granular/chunked offload act layer by layer): keep it within memory and time.
    const long long kMaxItems = 5000000;
    bool per_layer = p.grad_accumulation == GradAccumulation::layered || p.zero >= 2 ||
                     o.kind == OffloadKind::granular || o.kind == OffloadKind::chunked;
    if (per_layer && nm * std::max(m.layers, 1LL) > kMaxItems)
      is.add(batch_path, "gives " + s(nm) + " micro-batches per replica; micro-batches x layers must stay <= " +
                             s(kMaxItems) + " to simulate layer by layer (layered accumulation, ZeRO-2/3, granular or "
                             "chunked offload; raise " + at("microbatch") + ")");
    else if (!per_layer && nm * p.virtual_stages * (long long)p.pp > kMaxItems)
      is.add(batch_path, "gives " + s(nm) + " micro-batches per replica; micro-batches x " +
                             "virtual_stages x pp must stay <= " + s(kMaxItems) + " to simulate (raise plan.microbatch)");
    if (p.schedule == Schedule::interleaved && p.pp > 1 && nm % p.pp != 0)
      is.add(at("microbatch"), "the interleaved schedule needs the number of micro-batches (" + s(nm) +
                                   ") to be a multiple of pp (" + s(p.pp) + ")");
    if (p.schedule == Schedule::modular && p.pp > 1) {
      if (nm < p.pp)
        is.add(at("microbatch"), "the modular schedule needs at least pp (" + s(p.pp) + ") micro-batches, got " + s(nm));
      else if (p.grad_accumulation == GradAccumulation::standard && nm % p.pp != 0)
        is.add(at("microbatch"), "the modular schedule with standard accumulation runs Megatron's interleaved order: it "
                                 "needs the number of micro-batches (" + s(nm) + ") to be a multiple of pp (" + s(p.pp) + ")");
    }
  }
  std::string why = precision_problem(c.gpu, t.precision);
  if (!why.empty()) is.add("$.training.precision", why);
}

std::string cuda_graph_blocker(const Transformer& m, const Plan& p) {
  if ((long long)p.dp * p.tp * p.pp * p.cp > 1) return "a plan of several GPUs (the executor captures one-GPU steps only)";
  if (p.offload.kind != OffloadKind::none) return "offload (host copies and the host's Adam inside the step)";
  if (m.moe.experts > 0) return "mixture of experts (the routing reads the experts' loads back)";
  if (p.zero >= 2) return "ZeRO-2/3 (gradient and parameter buffers made and freed inside the step)";
  return "";
}

std::string precision_problem(const Gpu& g, Precision pr) {
  if (g.matrix_efficiency.points.empty()) return "";  // a profile without curves is rejected elsewhere
  // An inline GPU may have no name: "the GPU of $.cluster.gpu (no name)" then, never an empty word.
  const std::string gpu = g.name.empty() ? std::string("the GPU of $.cluster.gpu (no name)") : g.name;
  if (pr == Precision::fp8 && g.matrix_flops_per_s[(int)Precision::fp8] <= 0)
    return "fp8 needs a GPU with fp8 tensor cores; " + gpu + " has none";
  if (pr == Precision::fp8 && g.matrix_flops_per_s[(int)Precision::bf16] <= 0)
    return "fp8 training keeps attention and the other GEMMs in bf16; " + gpu + " has no bf16 support (peak 0 in its profile)";
  if (g.matrix_flops_per_s[(int)pr] <= 0)
    return (g.name.empty() ? gpu : "the GPU " + gpu) + " has no " + precision_name(pr) + " support (peak 0 in its profile)";
  return "";
}

}  // namespace tp
