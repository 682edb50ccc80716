// scenario: top-level scenario parsing and cross-field validation. See scenario.hpp.
#include "scenario.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <set>

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
    case Recompute::selective_op: return "selective_op";
  }
  return "?";
}

const std::vector<std::string>& recompute_names() {
  static const std::vector<std::string> names = {"none", "selective", "full", "selective_op"};
  return names;
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

const char* lr_decay_name(LrDecay d) { return d == LrDecay::linear ? "linear" : d == LrDecay::constant ? "constant" : "cosine"; }
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

// training.optimizer = {lr, min_lr, decay, warmup_steps, weight_decay, grad_clip, beta1, beta2, eps}.
static OptimizerSettings read_optimizer(const json& v, const std::string& path, Issues& issues) {
  OptimizerSettings o;
  Reader r(v, path, issues);
  if (!r.ok()) return o;
  o.lr = r.opt_num("lr", o.lr, lim::lr);
  o.min_lr = r.opt_num("min_lr", o.min_lr_value(), lim::min_lr);
  o.decay = (LrDecay)r.opt_enum("decay", {"cosine", "linear", "constant"}, 0);
  o.warmup_steps = r.opt_int("warmup_steps", -1, lim::warmup_steps);
  o.weight_decay = r.opt_num("weight_decay", o.weight_decay, lim::weight_decay);
  o.grad_clip = r.opt_num("grad_clip", o.grad_clip, lim::grad_clip);
  o.beta1 = r.opt_num("beta1", o.beta1, lim::adam_beta);
  o.beta2 = r.opt_num("beta2", o.beta2, lim::adam_beta);
  o.eps = r.opt_num("eps", o.eps, lim::adam_eps);
  r.finish({"lr", "min_lr", "decay", "warmup_steps", "weight_decay", "grad_clip", "beta1", "beta2", "eps"});
  if (o.min_lr > o.lr) issues.add(r.at("min_lr"), "must not exceed lr (" + std::to_string(o.lr) + ")");
  return o;
}

static json optimizer_to_json(const OptimizerSettings& o) {
  json j = {{"lr", o.lr}, {"min_lr", o.min_lr_value()}, {"decay", lr_decay_name(o.decay)},
            {"weight_decay", o.weight_decay}, {"grad_clip", o.grad_clip}, {"beta1", o.beta1}, {"beta2", o.beta2},
            {"eps", o.eps}};
  if (o.warmup_steps >= 0) j["warmup_steps"] = o.warmup_steps;
  return j;
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
  if (r.has("fp8_recipe")) {
    t.fp8_recipe = kFp8Recipes[r.opt_enum("fp8_recipe", kFp8Recipes, 0)];
    t.fp8_recipe_given = true;
  }
  r.get("framework");  // read by scenario_from_json (resolve_framework)
  if (const json* o = r.get("optimizer")) {
    t.optimizer = read_optimizer(*o, r.at("optimizer"), issues);
    t.optimizer_given = true;
  }
  t.checkpoint_every = r.opt_int("checkpoint_every", t.checkpoint_every, lim::checkpoint_every);
  t.log_every = r.opt_int("log_every", t.log_every, lim::log_every);
  r.finish({"global_batch", "seq_len", "tokens", "target_loss", "precision", "grad_precision", "kernel_profile",
            "fp8_recipe", "framework", "optimizer", "checkpoint_every", "log_every"});
  return t;
}

static std::string s(long long x) { return std::to_string(x); }

static Offload read_offload(const json& v, const std::string& path, Issues& is) {
  Offload o;
  Reader r(v, path, is);
  if (!r.ok()) return o;
  size_t before = is.count();
  int kind = r.req_enum("kind", {"optimizer", "granular", "chunked"});
  if (is.count() != before) return o;  // without a valid kind its other keys cannot be checked
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
    o.prefetch_runs = (int)r.opt_int("prefetch_runs", 0, lim::prefetch_runs);
    r.finish({"kind", "chunk_elements", "gpu_memory_fraction", "warmup_chunk_fraction", "hybrid_adam_margin",
              "prefetch_runs"});
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
  p.recompute = (Recompute)r.opt_enum("recompute", recompute_names(), 0);
  if (r.has("recompute_layers")) p.recompute_layers = (int)r.opt_int("recompute_layers", -1, lim::recompute_layers);
  p.zero = (int)r.opt_int("zero", 0, lim::zero);
  p.overlap_grad_reduce = r.opt_bool("overlap_grad_reduce", true);
  p.cuda_graphs = r.opt_bool("cuda_graphs", false);
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
                                   "recompute", "recompute_layers", "zero", "overlap_grad_reduce", "cuda_graphs", "tp_comm_overlap", "overlap_param_gather", "tp_mode", "grad_accumulation",
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

// training.kernel_profile (or the framework's kernel_profile when that is not given): puts the named profile of
// the scenario's GPU in force, or names the ones there are; then the framework's fit scales the curves.
static void apply_training_kernels(Scenario& sc, Issues& is) {
  Gpu& g = sc.cluster.gpu;
  const bool own = !sc.training.kernel_profile.empty();
  const std::string& name = own ? sc.training.kernel_profile : sc.framework.kernel_profile;
  if (name.empty()) {
    apply_framework_fit(sc.cluster, sc.framework.fit);
    return;
  }
  if (const KernelProfile* k = find_kernel_profile(g, name)) {
    apply_kernel_profile(g, *k);
    apply_framework_fit(sc.cluster, sc.framework.fit);
    return;
  }
  std::string have;
  for (const KernelProfile& k : g.kernel_profiles) have += (have.empty() ? "\"" : ", \"") + k.name + "\"";
  is.add(own ? "$.training.kernel_profile" : "$.training.framework",
         "unknown kernel profile \"" + name + "\" for the GPU " + g.name + (own ? "" : " (the framework's kernel_profile)") + "; " +
             (have.empty() ? std::string("its profile has no kernel_profiles") : "it has " + have));
}

// The catalog's production frameworks that can run plan `p` ("none in the catalog" when none can).
static std::string frameworks_that_can(const Scenario& sc, const Plan& p) {
  std::string out;
  for (const Framework& f : catalog_frameworks())
    if (!f.can.research && framework_refusals(f, p, sc.training.precision).empty()) out += (out.empty() ? "" : ", ") + f.name;
  return out.empty() ? "none in the catalog but \"research\"" : out;
}

// training.fp8_recipe: the framework's default when not given; under fp8, one the framework runs (when
// `check_framework_runs`: the scenario's own framework, not a framework the planner tries) and the GPU has a cost for.
static void resolve_fp8_recipe(Scenario& sc, Issues& is, bool check_framework_runs) {
  Training& t = sc.training;
  if (!t.fp8_recipe_given) t.fp8_recipe = framework_default_fp8_recipe(sc.framework);
  if (t.precision != Precision::fp8) return;
  const std::vector<std::string>& can = sc.framework.can.fp8_recipes;
  if (check_framework_runs && !can.empty() && std::find(can.begin(), can.end(), t.fp8_recipe) == can.end()) {
    std::string names;
    for (const std::string& n : can) names += (names.empty() ? "\"" : ", \"") + n + "\"";
    is.add("$.training.fp8_recipe", "the framework " + sc.framework.name + " runs the fp8 recipes " + names + ", not \"" +
                                        t.fp8_recipe + "\"; choose one of them or a training.framework that runs it");
  }
  const Gpu& g = sc.cluster.gpu;
  if (!find_fp8_recipe(g.fp8_recipes, t.fp8_recipe))
    is.add("$.training.fp8_recipe", "the GPU " + g.name + " has no cost for the fp8 recipe \"" + t.fp8_recipe +
                                        "\" in its profile (fp8_recipes: " + fp8_recipe_names(g.fp8_recipes) + ")");
}

// The framework's refusals of the plan (and of the delink pseudo plan), as input problems.
static void check_framework(const Scenario& sc, Issues& is) {
  auto add = [&](const Plan& p, const std::string& at) {
    for (const Refusal& r : framework_refusals(sc.framework, p, sc.training.precision))
      is.add(r.key[0] == '$' ? r.key : at + "." + r.key,
             r.text + "; or choose a training.framework that can (" + frameworks_that_can(sc, p) + ")");
  };
  add(sc.plan, "$.plan");
  if (sc.delink.on() && sc.delink.plan) add(*sc.delink.plan, "$.plan.delink.plan");
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
  const json* tj = v.contains("training") ? &v.at("training") : nullptr;
  if (tj && tj->is_object() && tj->contains("framework")) {
    sc.framework = resolve_framework(&tj->at("framework"), "$.training.framework", is);
    sc.framework_given = true;
  } else {
    sc.framework = resolve_framework(nullptr, "$.training.framework", is);
  }
  sc.gpu_as_given = std::make_shared<const Gpu>(sc.cluster.gpu);
  sc.net_curves_as_given = std::make_shared<const std::pair<Curve, Curve>>(sc.cluster.intra.efficiency, sc.cluster.inter.efficiency);
  if (is.empty()) apply_training_kernels(sc, is);
  if (is.empty()) resolve_fp8_recipe(sc, is, true);
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
    if (is.empty()) check_framework(sc, is);
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

void set_framework(Scenario& sc, const Framework& f) {
  if (sc.gpu_as_given) sc.cluster.gpu = *sc.gpu_as_given;
  if (sc.net_curves_as_given) {
    sc.cluster.intra.efficiency = sc.net_curves_as_given->first;
    sc.cluster.inter.efficiency = sc.net_curves_as_given->second;
  }
  sc.cluster.nccl.bandwidth_scale = 1;
  sc.framework = f;
  Issues is;
  apply_training_kernels(sc, is);
  if (is.empty()) resolve_fp8_recipe(sc, is, false);
  if (!is.empty()) throw InputError(is.messages);
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
  if (p.recompute_layers >= 0) j["recompute_layers"] = p.recompute_layers;
  if (p.tp_comm_overlap) j["tp_comm_overlap"] = true;
  if (p.cuda_graphs) j["cuda_graphs"] = true;
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
                    {"warmup_chunk_fraction", o.warmup_chunk_fraction}, {"hybrid_adam_margin", o.hybrid_adam_margin},
                    {"prefetch_runs", o.prefetch_runs}};
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
  if (s.training.fp8_recipe_given) out["training"]["fp8_recipe"] = s.training.fp8_recipe;
  out["training"]["framework"] = s.framework.name == "inline" ? framework_to_json(s.framework) : json(s.framework.name);
  if (s.training.optimizer_given) out["training"]["optimizer"] = optimizer_to_json(s.training.optimizer);
  if (s.training.checkpoint_every != Training{}.checkpoint_every) out["training"]["checkpoint_every"] = s.training.checkpoint_every;
  if (s.training.log_every != Training{}.log_every) out["training"]["log_every"] = s.training.log_every;
  if (s.search) {
    out.erase("plan");
    out["search"] = search_to_json(*s.search);
  }
  return out;
}

}  // namespace tp
