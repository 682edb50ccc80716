// scenario: top-level scenario parsing and cross-field validation. See scenario.hpp.
#include "scenario.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <set>
#include <sstream>

#include "catalog.hpp"

namespace tp {

const char* schedule_name(Schedule s) {
  switch (s) {
    case Schedule::gpipe: return "gpipe";
    case Schedule::one_f_one_b: return "1f1b";
    case Schedule::interleaved: return "interleaved";
    case Schedule::modular: return "modular";
  }
  return "?";
}

const char* recompute_name(Recompute r) {
  switch (r) {
    case Recompute::none: return "none";
    case Recompute::selective: return "selective";
    case Recompute::full: return "full";
  }
  return "?";
}

const char* tp_mode_name(TpMode m) { return m == TpMode::d2 ? "2d" : "1d"; }
const char* grad_accumulation_name(GradAccumulation g) { return g == GradAccumulation::layered ? "layered" : "standard"; }
const char* offload_kind_name(OffloadKind k) {
  switch (k) {
    case OffloadKind::none: return "none";
    case OffloadKind::optimizer: return "optimizer";
    case OffloadKind::granular: return "granular";
    case OffloadKind::chunked: return "chunked";
  }
  return "?";
}

const char* attention_name(Attention a) { return a == Attention::unfused ? "unfused" : "flash"; }

int Plan::tp_q() const {
  if (tp_mode != TpMode::d2) return 1;
  int q = 1;
  while ((q + 1) * (q + 1) <= tp) ++q;
  return q;
}

Scenario pseudo_phase(const Scenario& sc) {
  Scenario ps = sc;
  if (sc.delink.plan) ps.plan = *sc.delink.plan;
  else ps.plan.offload = Offload{};  // the shared-weight model is small: no offload unless its plan says so
  ps.plan.shared_layers = sc.delink.unique_layers;
  if (sc.delink.global_batch > 0) ps.training.global_batch = sc.delink.global_batch;
  ps.training.tokens = sc.delink.tokens;
  ps.plan.num_microbatches = ps.training.global_batch / ((long long)ps.plan.dp * ps.plan.microbatch);
  ps.delink = Delink{};
  ps.name = sc.name + ".pseudo";
  return ps;
}

static Training read_training(const json& v, const Transformer& m, Issues& issues, bool batch_optional) {
  Training t;
  Reader r(v, "$.training", issues);
  if (!r.ok()) return t;
  t.global_batch = batch_optional ? r.opt_int("global_batch", 0, lim::global_batch) : r.req_int("global_batch", lim::global_batch);
  t.seq_len = r.opt_int("seq_len", m.seq_len > 0 ? m.seq_len : 2048, lim::seq_len);
  t.tokens = r.opt_num("tokens", 0, lim::tokens);
  t.target_loss = r.opt_num("target_loss", 0, lim::target_loss);
  if (t.tokens > 0 && t.target_loss > 0)
    issues.add(r.at("target_loss"), "give either tokens (the run's length) or target_loss (where it stops), not both");
  t.precision = (Precision)r.opt_enum("precision", {"fp32", "fp16", "bf16", "fp8"}, 1);
  t.grad_precision = (Precision)r.opt_enum("grad_precision", {"fp32", "fp16", "bf16"}, 0);
  t.kernel_profile = r.opt_str("kernel_profile", "");
  r.finish({"global_batch", "seq_len", "tokens", "target_loss", "precision", "grad_precision", "kernel_profile"});
  return t;
}

static std::string s(long long x) { return std::to_string(x); }
static std::string num_text(double x) {
  std::ostringstream o;
  o << x;
  return o.str();
}

static Offload read_offload(const json& v, const std::string& path, Issues& is) {
  Offload o;
  Reader r(v, path, is);
  if (!r.ok()) return o;
  size_t before = is.messages.size();
  int kind = r.req_enum("kind", {"optimizer", "granular", "chunked"});
  if (is.messages.size() != before) return o;  // without a valid kind its other keys cannot be checked
  o.kind = (OffloadKind)(kind + 1);
  if (o.kind == OffloadKind::granular) {
    const json* layers = r.get("layers");
    if (layers && r.has("fraction")) {
      is.add(path, "expected exactly one of \"layers\" (layer indices) and \"fraction\" (share of the layers), got both");
    } else if (!layers && !r.has("fraction")) {
      is.add(path, "offload \"granular\" needs \"layers\" (layer indices) or \"fraction\" (share of the layers, in (0, 1])");
    }
    if (layers && (!layers->is_array() || layers->empty())) {
      is.add_got(r.at("layers"), "a non-empty array of layer indices", *layers);
    } else if (layers) {
      std::set<int> seen;
      for (size_t i = 0; i < layers->size(); ++i) {
        const json& e = (*layers)[i];
        std::string at = r.at("layers") + "[" + std::to_string(i) + "]";
        double d = e.is_number() ? e.get<double>() : -1;
        if (!e.is_number() || !within(lim::offload_layer, d)) {
          is.add_got(at, "a layer index (" + limit_text(lim::offload_layer) + ")", e);
        } else if (!seen.insert((int)d).second) {
          is.add(at, "expected distinct layer indices, got " + s((long long)d) + " twice");
        }
      }
      o.layers.assign(seen.begin(), seen.end());  // sorted, unique
    }
    o.fraction = r.opt_num("fraction", 0, lim::offload_fraction);
    o.experts_only = r.opt_enum("target", {"layers", "experts"}, 0) == 1;
    o.prefetch_layers = (int)r.opt_int("prefetch_layers", 1, lim::prefetch_layers);
    r.finish({"kind", "layers", "fraction", "target", "prefetch_layers"});
  } else if (o.kind == OffloadKind::chunked) {
    o.chunk_elements = r.opt_int("chunk_elements", 64LL << 20, lim::chunk_elements);
    o.gpu_memory_fraction = r.opt_num("gpu_memory_fraction", 0.8, lim::gpu_memory_fraction);
    o.warmup_chunk_fraction = r.opt_num("warmup_chunk_fraction", 0.1, lim::warmup_fraction);
    o.hybrid_adam_margin = r.opt_num("hybrid_adam_margin", 0.8, lim::adam_margin);
    r.finish({"kind", "chunk_elements", "gpu_memory_fraction", "warmup_chunk_fraction", "hybrid_adam_margin"});
  } else {
    r.finish({"kind"});
  }
  return o;
}

static Plan read_plan(const json& v, const std::string& path, Issues& issues, Delink* delink);

static Delink read_delink(const json& v, const std::string& path, Issues& is) {
  Delink d;
  Reader r(v, path, is);
  if (!r.ok()) return d;
  d.unique_layers = (int)r.req_int("unique_layers", lim::unique_layers);
  d.tokens = r.req_num("tokens", lim::tokens);
  d.global_batch = r.opt_int("global_batch", 0, lim::global_batch);
  if (const json* p = r.get("plan")) d.plan = std::make_shared<Plan>(read_plan(*p, r.at("plan"), is, nullptr));
  r.finish({"unique_layers", "tokens", "global_batch", "plan"});
  return d;
}

// Reads a plan object at `path`; plan.delink goes to `delink` (null: a pseudo phase's plan, where it is not allowed).
// A modular schedule without virtual_stages gets virtual_stages 0, resolved to layers / pp by validate_plan.
static Plan read_plan(const json& v, const std::string& path, Issues& issues, Delink* delink) {
  Plan p;
  Reader r(v, path, issues);
  if (!r.ok()) return p;
  p.dp = (int)r.req_int("dp", lim::dp);
  p.tp = (int)r.req_int("tp", lim::tp);
  p.pp = (int)r.req_int("pp", lim::pp);
  p.virtual_stages = (int)r.opt_int("virtual_stages", 1, lim::virtual_stages);
  p.microbatch = r.opt_int("microbatch", 1, lim::microbatch);
  p.schedule = (Schedule)r.opt_enum("schedule", {"gpipe", "1f1b", "interleaved", "modular"},
                                    p.virtual_stages > 1 ? (int)Schedule::interleaved : (int)Schedule::one_f_one_b);
  if (p.schedule == Schedule::modular && !r.has("virtual_stages")) p.virtual_stages = 0;
  p.sequence_parallel = r.opt_bool("sequence_parallel", false);
  p.recompute = (Recompute)r.opt_enum("recompute", {"none", "selective", "full"}, 0);
  p.zero = (int)r.opt_int("zero", 0, lim::zero);
  p.overlap_grad_reduce = r.opt_bool("overlap_grad_reduce", true);
  p.tp_comm_overlap = r.opt_bool("tp_comm_overlap", false);
  p.overlap_param_gather = r.opt_bool("overlap_param_gather", false);
  p.tp_mode = (TpMode)r.opt_enum("tp_mode", {"1d", "2d"}, 0);
  p.tp_grid_node_blocks = r.opt_enum("tp_grid", {"rows", "node_blocks"}, 0) == 1;
  p.grad_accumulation = (GradAccumulation)r.opt_enum("grad_accumulation", {"standard", "layered"}, 0);
  if (const json* o = r.get("offload")) p.offload = read_offload(*o, r.at("offload"), issues);
  p.ep = (int)r.opt_int("ep", 1, lim::ep);
  p.cp = (int)r.opt_int("cp", 1, lim::cp);
  p.attention = (Attention)r.opt_enum("attention", {"flash", "unfused"}, (int)Attention::flash);
  if (const json* sl = r.get("stage_layers")) {
    if (!sl->is_array() || sl->empty()) {
      issues.add_got(r.at("stage_layers"), "a non-empty array of layer counts, one per pipeline stage", *sl);
    } else {
      for (size_t i = 0; i < sl->size(); ++i) {
        const json& e = (*sl)[i];
        double d = e.is_number() ? e.get<double>() : -1;
        if (!e.is_number() || !within(lim::stage_layers, d))
          issues.add_got(r.at("stage_layers") + "[" + std::to_string(i) + "]",
                         "a layer count (" + limit_text(lim::stage_layers) + ")", e);
        else p.stage_layers.push_back((int)d);
      }
      if (p.stage_layers.size() != sl->size()) p.stage_layers.clear();
    }
  }
  p.first_stage_layers = (int)r.opt_int("first_stage_layers", 0, lim::first_stage_layers);
  p.last_stage_layers = (int)r.opt_int("last_stage_layers", 0, lim::last_stage_layers);
  p.account_for_embedding = r.opt_bool("account_for_embedding_in_pipeline_split", false);
  p.account_for_loss = r.opt_bool("account_for_loss_in_pipeline_split", false);
  std::vector<std::string> keys = {"dp", "tp", "pp", "virtual_stages", "microbatch", "schedule", "sequence_parallel",
                                   "recompute", "zero", "overlap_grad_reduce", "tp_comm_overlap", "overlap_param_gather", "tp_mode", "grad_accumulation",
                                   "offload", "ep", "tp_grid", "cp", "attention", "stage_layers",
                                   "first_stage_layers", "last_stage_layers",
                                   "account_for_embedding_in_pipeline_split", "account_for_loss_in_pipeline_split"};
  if (const json* d = r.get("delink")) {
    if (delink) *delink = read_delink(*d, r.at("delink"), issues);
    else issues.add(r.at("delink"), "not allowed in a pseudo phase's plan (a pseudo phase cannot be delinked again)");
  }
  if (delink) keys.push_back("delink");
  r.finish(keys);
  return p;
}

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
  if (p.overlap_param_gather && p.zero != 1 && p.zero != 2)
    is.add(at("overlap_param_gather"), "overlaps the all-gather of the updated parameters of ZeRO-1/2 (Megatron-LM's "
                                       "distributed optimizer, --overlap-param-gather) with the next forward: it needs zero 1 "
                                       "or 2, got " + s(p.zero));
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

std::string precision_problem(const Gpu& g, Precision pr) {
  if (g.matrix_efficiency.points.empty()) return "";  // a profile without curves is rejected elsewhere
  if (pr == Precision::fp8 && g.matrix_flops_per_s[(int)Precision::fp8] <= 0)
    return std::string("fp8 needs a GPU with fp8 tensor cores; ") + g.name + " has none";
  if (pr == Precision::fp8 && g.matrix_flops_per_s[(int)Precision::bf16] <= 0)
    return std::string("fp8 training keeps attention and the other GEMMs in bf16; ") + g.name +
           " has no bf16 support (peak 0 in its profile)";
  if (g.matrix_flops_per_s[(int)pr] <= 0)
    return std::string("the GPU ") + g.name + " has no " + precision_name(pr) + " support (peak 0 in its profile)";
  return "";
}

// plan.delink against the model, and its pseudo phase's plan with its batch.
static void validate_delink(Scenario& sc, Issues& is, const std::string& cluster_path) {
  const Delink& d = sc.delink;
  long long L = sc.model.layers;
  if (L > 0 && (L % d.unique_layers != 0 || d.unique_layers >= L))
    is.add("$.plan.delink.unique_layers", "must divide the model's layers (" + s(L) + ") and be smaller, got " + s(d.unique_layers));
  // A weight group serves consecutive positions; with MoE layers alternating with dense ones it would serve both.
  if (sc.model.moe.experts > 0 && sc.model.moe.every > 1)
    is.add("$.plan.delink", "Pseudo-to-Real shares one weight set among consecutive layers, so with a mixture-of-experts "
           "model every layer must be an MoE layer (model.moe.every 1), got model.moe.every " + s(sc.model.moe.every));
  // Without its own plan and batch the pseudo phase repeats the real plan's checks (less offload): nothing new.
  if (!d.plan && d.global_batch == 0) return;
  Training t = sc.training;
  if (d.global_batch > 0) t.global_batch = d.global_batch;
  std::string batch_path = d.global_batch > 0 ? "$.plan.delink.global_batch" : "$.training.global_batch";
  if (d.plan) {
    validate_plan(sc.model, sc.cluster, t, *d.plan, is, "$.plan.delink.plan", batch_path, cluster_path);
  } else if (is.empty()) {  // the real plan is fine: only its batch can fail
    Plan p = pseudo_phase(sc).plan;
    validate_plan(sc.model, sc.cluster, t, p, is, "$.plan", batch_path, cluster_path);
  }
}

// training.kernel_profile: puts the named profile of the scenario's GPU in force, or names the ones there are.
static void apply_training_kernels(Scenario& sc, Issues& is) {
  Gpu& g = sc.cluster.gpu;
  const std::string& name = sc.training.kernel_profile;
  if (const KernelProfile* k = find_kernel_profile(g, name)) {
    apply_kernel_profile(g, *k);
    return;
  }
  std::string have;
  for (const KernelProfile& k : g.kernel_profiles) have += (have.empty() ? "\"" : ", \"") + k.name + "\"";
  is.add("$.training.kernel_profile", "unknown kernel profile \"" + name + "\" for the GPU " + g.name + "; " +
                                          (have.empty() ? std::string("its profile has no kernel_profiles") : "it has " + have));
}

Scenario scenario_from_json(const json& v, const std::string& base_dir, const std::string& where, bool allow_search) {
  Issues is;
  Scenario sc;
  Reader r(v, "$", is);
  if (!r.ok()) throw InputError({where + ": $: the scenario must be a JSON object, got " + json_brief(v)});
  sc.name = r.opt_str("name", "");
  r.opt_str("about", "");
  if (const json* m = r.get("model")) sc.model = read_transformer(*m, "$.model", base_dir, is);
  else is.add("$.model", "missing; expected a catalog name, an inline model object, or {\"hf_config\": path}");
  std::string cluster_path = "$.cluster";
  if (const json* c = r.get("cluster")) {
    if (c->is_string()) {
      const json* e = catalog_find("clusters", c->get<std::string>());
      if (!e) {
        add_unknown_catalog_name(is, "$.cluster", "clusters", "cluster", " or an inline cluster object", *c);
      } else {
        cluster_path = "catalog clusters." + c->get<std::string>();
        sc.cluster = read_cluster(*e, cluster_path, is);
        sc.cluster.name = c->get<std::string>();
      }
    } else {
      sc.cluster = read_cluster(*c, "$.cluster", is);
      if (sc.cluster.name.empty()) sc.cluster.name = "inline";
    }
  } else {
    is.add("$.cluster", "missing; expected a catalog name or an inline cluster object");
  }
  const bool searching = r.has("search") && !r.has("plan");
  if (const json* t = r.get("training")) sc.training = read_training(*t, sc.model, is, searching);
  else is.add("$.training", "missing; expected {global_batch, seq_len, tokens, precision}");
  if (!sc.training.kernel_profile.empty() && is.empty()) apply_training_kernels(sc, is);
  if (const json* sv = r.get("search")) {
    if (r.has("plan")) is.add("$.search", "a scenario has either a plan (simulate, run) or a search block (plan), not both");
    else if (!allow_search)
      is.add("$.plan", "missing: this scenario has a search block instead; run `trainplan plan` on it to choose a plan");
    else sc.search = std::make_shared<Search>(read_search(*sv, "$.search", is));
  }
  if (const json* p = r.get("plan")) sc.plan = read_plan(*p, "$.plan", is, &sc.delink);
  else if (!searching)
    is.add("$.plan", allow_search ? "missing; expected a plan {dp, tp, pp, microbatch, schedule, ...} or a search block"
                                  : "missing; expected {dp, tp, pp, microbatch, schedule, ...}");
  r.finish({"name", "about", "model", "cluster", "training", "plan", "search"});
  if (sc.search && is.empty()) {
    const Search& se = *sc.search;
    int cap = sc.cluster.total_gpus();
    if (se.max_gpus > cap) is.add("$.search.max_gpus", "must be <= the cluster's GPUs (" + s(cap) + "), got " + s(se.max_gpus));
    for (size_t i = 0; i < se.gpu_counts.size(); ++i)
      if (se.gpu_counts[i] > cap)
        is.add("$.search.gpu_counts[" + s((long long)i) + "]", "must be <= the cluster's GPUs (" + s(cap) + "), got " + s(se.gpu_counts[i]));
    for (size_t i = 0; i < se.fix.precision.size(); ++i) {
      std::string why = precision_problem(sc.cluster.gpu, se.fix.precision[i]);
      if (!why.empty()) is.add("$.search.fix.precision" + (se.fix.precision.size() > 1 ? "[" + s((long long)i) + "]" : ""), why);
    }
    if (se.compare.on && !(sc.cluster.inter.nic_bandwidth_bytes_per_s > 0))
      is.add("$.search.compare", "needs the cluster's inter-node network (inter_node.nic_bandwidth_bits_per_s)");
  }
  if (is.empty() && !sc.search) {
    validate_plan(sc.model, sc.cluster, sc.training, sc.plan, is, "$.plan", "$.training.global_batch", cluster_path);
    if (sc.delink.on()) validate_delink(sc, is, cluster_path);
  }
  if (!is.empty()) {
    for (auto& m : is.messages) m = where + ": " + m;
    throw InputError(is.messages);
  }
  if (sc.name.empty()) sc.name = sc.model.name + "-" + sc.cluster.name;
  const Transformer& m = sc.model;
  if (m.sliding_window > 0 && m.sliding_window < sc.training.seq_len)
    is.warn(m.source + ": sliding_window (" + s(m.sliding_window) + ") is not modelled: attention is costed over the full " +
            s(sc.training.seq_len) + "-token sequence");
  sc.warnings = is.warnings;
  return sc;
}

Scenario scenario_from_text(const std::string& text, const std::string& where) {
  Issues is;
  json j = parse_json_text(text, where, is);
  if (!is.empty()) throw InputError(is.messages);
  return scenario_from_json(j, ".", where);
}

Scenario load_scenario(const std::string& file, bool allow_search) {
  Issues is;
  json j = parse_json_file(file, file, is);
  if (!is.empty()) throw InputError(is.messages);
  std::filesystem::path base = std::filesystem::path(file).parent_path();
  return scenario_from_json(j, base.empty() ? std::string(".") : base.string(), file, allow_search);
}

static json plan_to_json(const Plan& p) {
  json j = {{"dp", p.dp}, {"tp", p.tp}, {"pp", p.pp}, {"virtual_stages", p.virtual_stages},
            {"microbatch", p.microbatch}, {"schedule", schedule_name(p.schedule)},
            {"sequence_parallel", p.sequence_parallel}, {"recompute", recompute_name(p.recompute)},
            {"zero", p.zero}, {"overlap_grad_reduce", p.overlap_grad_reduce},
            {"tp_mode", tp_mode_name(p.tp_mode)}, {"grad_accumulation", grad_accumulation_name(p.grad_accumulation)},
            {"ep", p.ep}, {"attention", attention_name(p.attention)}, {"num_microbatches", p.num_microbatches}};
  if (p.cp > 1) j["cp"] = p.cp;
  if (p.tp_comm_overlap) j["tp_comm_overlap"] = true;
  if (p.overlap_param_gather) j["overlap_param_gather"] = true;
  if (p.tp_mode == TpMode::d2) j["tp_grid"] = p.tp_grid_node_blocks ? "node_blocks" : "rows";
  if (!p.stage_layers.empty()) j["stage_layers"] = p.stage_layers;
  if (p.account_for_embedding) j["account_for_embedding_in_pipeline_split"] = true;
  if (p.account_for_loss) j["account_for_loss_in_pipeline_split"] = true;
  const Offload& o = p.offload;
  if (o.kind == OffloadKind::granular)
    j["offload"] = {{"kind", "granular"}, {"layers", o.layers}, {"target", o.experts_only ? "experts" : "layers"},
                    {"prefetch_layers", o.prefetch_layers}};
  else if (o.kind == OffloadKind::chunked)
    j["offload"] = {{"kind", "chunked"}, {"chunk_elements", o.chunk_elements}, {"gpu_memory_fraction", o.gpu_memory_fraction},
                    {"warmup_chunk_fraction", o.warmup_chunk_fraction}, {"hybrid_adam_margin", o.hybrid_adam_margin}};
  else if (o.on())
    j["offload"] = {{"kind", offload_kind_name(o.kind)}};
  return j;
}

json scenario_to_json(const Scenario& s) {
  json plan = plan_to_json(s.plan);
  if (s.delink.on()) {
    json d = {{"unique_layers", s.delink.unique_layers}, {"tokens", s.delink.tokens}};
    if (s.delink.global_batch > 0) d["global_batch"] = s.delink.global_batch;
    if (s.delink.plan) d["plan"] = plan_to_json(*s.delink.plan);
    plan["delink"] = d;
  }
  json out = {{"name", s.name},
          {"model", transformer_to_json(s.model)},
          {"cluster", cluster_to_json(s.cluster)},
          {"training",
           {{"global_batch", s.training.global_batch},
            {"seq_len", s.training.seq_len},
            {"tokens", s.training.tokens},
            {"precision", precision_name(s.training.precision)},
            {"grad_precision", precision_name(s.training.grad_precision)}}},
          {"plan", plan}};
  if (s.training.target_loss > 0) out["training"]["target_loss"] = s.training.target_loss;
  if (!s.training.kernel_profile.empty()) out["training"]["kernel_profile"] = s.training.kernel_profile;
  if (s.search) {
    out.erase("plan");
    out["search"] = search_to_json(*s.search);
  }
  return out;
}

}  // namespace tp
