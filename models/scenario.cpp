// scenario: top-level scenario parsing and cross-field validation. See scenario.hpp.
#include "scenario.hpp"

#include <filesystem>

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

int Plan::tp_q() const {
  if (tp_mode != TpMode::d2) return 1;
  int q = 1;
  while ((q + 1) * (q + 1) <= tp) ++q;
  return q;
}

Scenario pseudo_phase(const Scenario& sc) {
  Scenario ps = sc;
  if (sc.delink.plan) ps.plan = *sc.delink.plan;
  ps.plan.shared_layers = sc.delink.unique_layers;
  if (sc.delink.global_batch > 0) ps.training.global_batch = sc.delink.global_batch;
  ps.training.tokens = sc.delink.tokens;
  ps.plan.num_microbatches = ps.training.global_batch / ((long long)ps.plan.dp * ps.plan.microbatch);
  ps.delink = Delink{};
  ps.name = sc.name + ".pseudo";
  return ps;
}

static const char* kLater = "arrives with the seeds' techniques (2D tensor parallelism, layered accumulation, "
                            "modular pipelines, ZeRO-2/3, offload, MoE, delinking)";

static Training read_training(const json& v, const Transformer& m, Issues& issues) {
  Training t;
  Reader r(v, "$.training", issues);
  if (!r.ok()) return t;
  t.global_batch = r.req_int("global_batch", 1, 1LL << 40);
  t.seq_len = r.opt_int("seq_len", m.seq_len > 0 ? m.seq_len : 2048, 1, 100000000);
  size_t before = issues.messages.size();
  t.tokens = r.opt_num("tokens", 0, 0);
  if (r.has("tokens") && t.tokens <= 0 && issues.messages.size() == before)  // not twice for one bad value
    issues.add(r.at("tokens"), "expected a number of tokens > 0");
  if (r.has("precision") && r.obj->at("precision") == "fp8") {
    r.get("precision");
    issues.add(r.at("precision"), "\"fp8\" is not supported yet; expected one of \"fp32\", \"fp16\", \"bf16\"");
  } else {
    t.precision = (Precision)r.opt_enum("precision", {"fp32", "fp16", "bf16"}, 1);
  }
  t.grad_precision = (Precision)r.opt_enum("grad_precision", {"fp32", "fp16", "bf16"}, 0);
  r.finish({"global_batch", "seq_len", "tokens", "precision", "grad_precision"});
  return t;
}

static Plan read_plan(const json& v, Issues& issues) {
  Plan p;
  Reader r(v, "$.plan", issues);
  if (!r.ok()) return p;
  p.dp = (int)r.req_int("dp", 1, 1 << 24);
  p.tp = (int)r.req_int("tp", 1, 1 << 16);
  p.pp = (int)r.req_int("pp", 1, 1 << 16);
  p.virtual_stages = (int)r.opt_int("virtual_stages", 1, 1, 1 << 16);
  p.microbatch = r.opt_int("microbatch", 1, 1, 1LL << 30);
  if (const json* s = r.get("schedule")) {
    if (s->is_string() && s->get<std::string>() == "modular") {
      issues.add(r.at("schedule"), std::string("\"modular\" is not supported yet (") + kLater + ")");
    } else {
      r.seen.erase("schedule");
      p.schedule = (Schedule)r.opt_enum("schedule", {"gpipe", "1f1b", "interleaved"}, 1);
    }
  } else {
    p.schedule = p.virtual_stages > 1 ? Schedule::interleaved : Schedule::one_f_one_b;
  }
  p.sequence_parallel = r.opt_bool("sequence_parallel", false);
  p.recompute = (Recompute)r.opt_enum("recompute", {"none", "selective", "full"}, 0);
  if (const json* z = r.get("zero")) {
    if (z->is_number_integer() && (z->get<long long>() == 2 || z->get<long long>() == 3)) {
      issues.add(r.at("zero"), "ZeRO stage " + std::to_string(z->get<long long>()) + " is not supported yet (" + kLater +
                                   "); expected 0 or 1");
    } else {
      r.seen.erase("zero");
      p.zero = (int)r.opt_int("zero", 0, 0, 1);
    }
  }
  p.overlap_grad_reduce = r.opt_bool("overlap_grad_reduce", true);
  r.not_yet({"tp_mode", "grad_accumulation", "offload", "delink", "ep"}, kLater);
  r.finish({"dp", "tp", "pp", "virtual_stages", "microbatch", "schedule", "sequence_parallel", "recompute", "zero",
            "overlap_grad_reduce"});
  return p;
}

static std::string s(long long x) { return std::to_string(x); }

void validate_plan(const Transformer& m, const Cluster& c, const Training& t, Plan& p, Issues& is) {
  if (m.heads > 0 && m.heads % p.tp != 0) is.add("$.plan.tp", "must divide the model's heads (" + s(m.heads) + "), got " + s(p.tp));
  else if (m.kv_heads > 0 && m.kv_heads % p.tp != 0)
    is.add("$.plan.tp", "must divide the model's kv_heads (" + s(m.kv_heads) + "), got " + s(p.tp));
  if (m.ffn_hidden > 0 && m.ffn_hidden % p.tp != 0)
    is.add("$.plan.tp", "must divide the model's ffn_hidden (" + s(m.ffn_hidden) + "), got " + s(p.tp));
  if (m.layers > 0 && m.layers % p.pp != 0)
    is.add("$.plan.pp", "must divide the model's layers (" + s(m.layers) + "), got " + s(p.pp));
  else if (m.layers > 0 && m.layers % ((long long)p.pp * p.virtual_stages) != 0)
    is.add("$.plan.virtual_stages", "pp x virtual_stages (" + s((long long)p.pp * p.virtual_stages) +
                                        ") must divide the model's layers (" + s(m.layers) + ")");
  if (p.schedule == Schedule::interleaved && p.virtual_stages < 2)
    is.add("$.plan.schedule", "\"interleaved\" needs virtual_stages >= 2, got " + s(p.virtual_stages));
  if (p.schedule == Schedule::interleaved && p.pp < 2) is.add("$.plan.schedule", "\"interleaved\" needs pp >= 2");
  if (p.schedule != Schedule::interleaved && p.virtual_stages > 1)
    is.add("$.plan.virtual_stages", "virtual_stages > 1 needs schedule \"interleaved\", got \"" +
                                        std::string(schedule_name(p.schedule)) + "\"");
  long long gpus = (long long)p.dp * p.tp * p.pp;
  if (c.nodes > 0 && gpus > (long long)c.total_gpus())
    is.add("$.plan", "dp x tp x pp = " + s(gpus) + " GPUs exceeds the cluster's " + s(c.total_gpus()));
  if (p.sequence_parallel && t.seq_len % p.tp != 0)
    is.add("$.plan.sequence_parallel", "needs tp (" + s(p.tp) + ") to divide seq_len (" + s(t.seq_len) + ")");
  long long per = (long long)p.dp * p.microbatch;
  if (t.global_batch > 0 && t.global_batch % per != 0) {
    is.add("$.training.global_batch", "must be divisible by dp x microbatch = " + s(per) + " to form micro-batches, got " +
                                          s(t.global_batch));
  } else if (t.global_batch > 0) {
    p.num_microbatches = t.global_batch / per;
    // A simulation holds a few tasks per micro-batch and pipeline chunk: keep it within memory and time.
    const long long kMaxItems = 5000000;
    if (p.num_microbatches * p.virtual_stages * (long long)p.pp > kMaxItems)
      is.add("$.training.global_batch", "gives " + s(p.num_microbatches) + " micro-batches per replica; micro-batches x " +
                                            "virtual_stages x pp must stay <= " + s(kMaxItems) +
                                            " to simulate (raise plan.microbatch)");
    if (p.schedule == Schedule::interleaved && p.pp > 1 && p.num_microbatches % p.pp != 0)
      is.add("$.plan.microbatch", "the interleaved schedule needs the number of micro-batches (" + s(p.num_microbatches) +
                                      ") to be a multiple of pp (" + s(p.pp) + ")");
  }
  if (c.gpu.matrix_flops_per_s[(int)t.precision] <= 0 && !c.gpu.matrix_efficiency.points.empty())
    is.add("$.training.precision", std::string("the GPU ") + c.gpu.name + " has no " + precision_name(t.precision) +
                                       " support (peak 0 in its profile)");
}

Scenario scenario_from_json(const json& v, const std::string& base_dir, const std::string& where) {
  Issues is;
  Scenario sc;
  Reader r(v, "$", is);
  if (!r.ok()) throw InputError({where + ": $: the scenario must be a JSON object, got " + json_brief(v)});
  sc.name = r.opt_str("name", "");
  r.opt_str("about", "");
  if (const json* m = r.get("model")) sc.model = read_transformer(*m, "$.model", base_dir, is);
  else is.add("$.model", "missing; expected a catalog name, an inline model object, or {\"hf_config\": path}");
  if (const json* c = r.get("cluster")) {
    if (c->is_string()) {
      const json* e = catalog_find("clusters", c->get<std::string>());
      if (!e) {
        is.add_got("$.cluster", "a cluster catalog name (" + catalog_names_text("clusters") + ") or an inline cluster object", *c);
      } else {
        sc.cluster = read_cluster(*e, "catalog clusters." + c->get<std::string>(), is);
        sc.cluster.name = c->get<std::string>();
      }
    } else {
      sc.cluster = read_cluster(*c, "$.cluster", is);
      if (sc.cluster.name.empty()) sc.cluster.name = "inline";
    }
  } else {
    is.add("$.cluster", "missing; expected a catalog name or an inline cluster object");
  }
  if (const json* t = r.get("training")) sc.training = read_training(*t, sc.model, is);
  else is.add("$.training", "missing; expected {global_batch, seq_len, tokens, precision}");
  if (const json* p = r.get("plan")) sc.plan = read_plan(*p, is);
  else is.add("$.plan", "missing; expected {dp, tp, pp, microbatch, schedule, ...}");
  r.not_yet({"search"}, "the planner (trainplan plan) arrives later");
  r.finish({"name", "about", "model", "cluster", "training", "plan"});
  if (is.empty()) validate_plan(sc.model, sc.cluster, sc.training, sc.plan, is);
  if (!is.empty()) {
    for (auto& m : is.messages) m = where + ": " + m;
    throw InputError(is.messages);
  }
  if (sc.name.empty()) sc.name = sc.model.name + "-" + sc.cluster.name;
  return sc;
}

Scenario scenario_from_text(const std::string& text, const std::string& where) {
  Issues is;
  json j = parse_json_text(text, where, is);
  if (!is.empty()) throw InputError(is.messages);
  return scenario_from_json(j, ".", where);
}

Scenario load_scenario(const std::string& file) {
  Issues is;
  json j = parse_json_file(file, file, is);
  if (!is.empty()) throw InputError(is.messages);
  std::string base = std::filesystem::path(file).parent_path().string();
  if (base.empty()) base = ".";
  return scenario_from_json(j, base, file);
}

json scenario_to_json(const Scenario& s) {
  const Plan& p = s.plan;
  return {{"name", s.name},
          {"model", transformer_to_json(s.model)},
          {"cluster", cluster_to_json(s.cluster)},
          {"training",
           {{"global_batch", s.training.global_batch},
            {"seq_len", s.training.seq_len},
            {"tokens", s.training.tokens},
            {"precision", precision_name(s.training.precision)},
            {"grad_precision", precision_name(s.training.grad_precision)}}},
          {"plan",
           {{"dp", p.dp}, {"tp", p.tp}, {"pp", p.pp}, {"virtual_stages", p.virtual_stages},
            {"microbatch", p.microbatch}, {"schedule", schedule_name(p.schedule)},
            {"sequence_parallel", p.sequence_parallel}, {"recompute", recompute_name(p.recompute)},
            {"zero", p.zero}, {"overlap_grad_reduce", p.overlap_grad_reduce},
            {"num_microbatches", p.num_microbatches}}}};
}

}  // namespace tp
