// framework: reading framework profiles, what a framework can run, research labels. See framework.hpp.
#include "framework.hpp"

#include "cluster.hpp"

#include <cmath>

#include "catalog.hpp"
#include "fp8_recipe.hpp"

namespace tp {

namespace {

const std::vector<std::string> kSchedules = {"gpipe", "1f1b", "interleaved"};  // production schedules
const std::vector<std::string> kOffloads = {"none", "optimizer"};               // production offload kinds
const std::vector<std::string> kPrecisions = {"fp32", "fp16", "bf16", "fp8"};

std::string one_of(const std::vector<std::string>& names) {
  std::string s = "one of";
  for (size_t i = 0; i < names.size(); ++i) s += (i ? ", \"" : " \"") + names[i] + "\"";
  return s;
}

// A non-empty array of names out of `names`, as indices.
std::vector<int> read_names(Reader& r, const std::string& key, const std::vector<std::string>& names) {
  std::vector<int> out;
  const json* v = r.get(key);
  if (!v) { r.issues->add(r.at(key), "missing; expected a non-empty array of " + one_of(names)); return out; }
  if (!v->is_array() || v->empty()) { r.issues->add_got(r.at(key), "a non-empty array of " + one_of(names), *v); return out; }
  for (size_t i = 0; i < v->size(); ++i) {
    const json& e = (*v)[i];
    bool found = false;
    for (size_t k = 0; e.is_string() && k < names.size(); ++k)
      if (e.get<std::string>() == names[k]) { out.push_back((int)k); found = true; }
    if (!found) r.issues->add_got(r.at(key) + "[" + std::to_string(i) + "]", one_of(names), e);
  }
  return out;
}

FrameworkCan read_can(const json& v, const std::string& path, Issues& is) {
  FrameworkCan c;
  Reader r(v, path, is);
  if (!r.ok()) return c;
  c.research = r.opt_bool("research", false);
  for (int i : read_names(r, "schedules", kSchedules)) c.schedules.push_back((Schedule)i);
  for (int i : read_names(r, "offload", kOffloads)) c.offload.push_back((OffloadKind)i);
  for (int i : read_names(r, "recompute", recompute_names())) c.recompute.push_back((Recompute)i);
  for (int i : read_names(r, "precisions", kPrecisions)) c.precisions.push_back((Precision)i);
  if (r.has("fp8_recipes"))
    for (int i : read_names(r, "fp8_recipes", kFp8Recipes)) c.fp8_recipes.push_back(kFp8Recipes[i]);
  if (const json* z = r.get("zero")) {
    if (!z->is_array() || z->empty()) is.add_got(r.at("zero"), "a non-empty array of ZeRO stages 0..3", *z);
    else
      for (size_t i = 0; i < z->size(); ++i) {
        const json& e = (*z)[i];
        if (e.is_number_integer() && e.get<long long>() >= 0 && e.get<long long>() <= 3) c.zero.push_back(e.get<int>());
        else is.add_got(r.at("zero") + "[" + std::to_string(i) + "]", "a ZeRO stage 0..3", e);
      }
  } else {
    is.add(r.at("zero"), "missing; expected a non-empty array of ZeRO stages 0..3");
  }
  c.max_zero_with_pp = (int)r.opt_int("max_zero_with_pp", 3, lim::fw_max_zero_with_pp);
  c.max_tp = (int)r.opt_int("max_tp", 0, lim::fw_max_tp);
  c.sequence_parallel = r.opt_bool("sequence_parallel", true);
  c.context_parallel = r.opt_bool("context_parallel", true);
  c.expert_parallel = r.opt_bool("expert_parallel", true);
  c.uneven_stages = r.opt_bool("uneven_stages", true);
  c.tp_comm_overlap = r.opt_bool("tp_comm_overlap", true);
  c.overlap_param_gather = r.opt_bool("overlap_param_gather", true);
  c.cuda_graphs = r.opt_bool("cuda_graphs", false);
  c.recompute_layers = r.opt_bool("recompute_layers", true);
  r.finish({"research", "schedules", "zero", "max_zero_with_pp", "offload", "recompute", "precisions", "fp8_recipes",
            "max_tp", "sequence_parallel", "context_parallel", "expert_parallel", "uneven_stages", "tp_comm_overlap",
            "overlap_param_gather", "recompute_layers", "cuda_graphs"});
  return c;
}

FrameworkComm read_comm(const json& v, const std::string& path, Issues& is) {
  FrameworkComm c;
  Reader r(v, path, is);
  if (!r.ok()) return c;
  if (const json* b = r.get("bucket")) {
    if (b->is_string() && b->get<std::string>() == "layer") {
      c.bucket_per_layer = true;
    } else {
      Reader br(*b, r.at("bucket"), is);
      if (br.ok()) {
        c.bucket_min_params = br.req_num("min_params", lim::fw_bucket);
        c.bucket_params_per_data_rank = br.opt_num("params_per_data_rank", 0, lim::fw_bucket_per_rank);
        br.finish({"min_params", "params_per_data_rank"});
      }
    }
  }
  c.pp_reduce_after_flush = r.opt_bool("pp_reduce_after_flush", false);
  c.zero3_live_params = r.opt_num("zero3_live_params", 0, lim::fw_live_params);
  r.finish({"bucket", "pp_reduce_after_flush", "zero3_live_params"});
  return c;
}

std::vector<PublishedBest> read_best(const json& v, const std::string& path, Issues& is) {
  std::vector<PublishedBest> out;
  if (!v.is_array()) { is.add_got(path, "an array of {gpu, precision, model_tflops_per_gpu, source}", v); return out; }
  for (size_t i = 0; i < v.size(); ++i) {
    Reader r(v[i], path + "[" + std::to_string(i) + "]", is);
    if (!r.ok()) continue;
    PublishedBest b;
    b.gpu = r.req_str("gpu");
    int pc = r.req_enum("precision", {"16-bit", "fp8"});
    b.precision = pc == 1 ? "fp8" : "16-bit";
    b.model_tflops_per_gpu = r.req_num("model_tflops_per_gpu", lim::fw_best_tflops);
    b.source = r.req_str("source");
    r.finish({"gpu", "precision", "model_tflops_per_gpu", "source"});
    out.push_back(b);
  }
  return out;
}

// Whether capability list `v` accepts x (an empty list accepts everything).
template <class T>
bool in(const std::vector<T>& v, const T& x) {
  for (const T& y : v) if (y == x) return true;
  return v.empty();
}

}  // namespace

Framework read_framework(const json& v, const std::string& name, const std::string& path, Issues& is) {
  Framework f;
  f.name = name;
  Reader r(v, path, is);
  if (!r.ok()) return f;
  r.opt_str("about", "");
  r.get("sources");  // citations, kept in the catalog for readers
  f.version = r.opt_str("version", "");
  if (const json* c = r.get("can_run")) f.can = read_can(*c, r.at("can_run"), is);
  else is.add(r.at("can_run"), "missing; expected {schedules, zero, offload, recompute, precisions, ...}");
  if (const json* c = r.get("communication")) f.comm = read_comm(*c, r.at("communication"), is);
  f.kernel_profile = r.opt_str("kernel_profile", "");
  if (const json* b = r.get("best_published")) f.best_published = read_best(*b, r.at("best_published"), is);
  if (const json* ft = r.get("fitted")) {
    Reader fr(*ft, r.at("fitted"), is);
    if (fr.ok()) {
      f.fit.compute_efficiency_scale = fr.opt_num("compute_efficiency_scale", 1, lim::fit_scale);
      f.fit.network_efficiency_scale = fr.opt_num("network_efficiency_scale", 1, lim::fit_scale);
      f.fit.step_overhead_s = fr.opt_num("step_overhead_s", 0, lim::fit_overhead);
      f.fit.attention_efficiency_scale = fr.opt_num("attention_efficiency_scale", 1, lim::fit_scale);
      f.fit.source = fr.opt_str("source", "");
      fr.get("uncertainty");  // the fit's standard errors, kept for readers
      fr.finish({"compute_efficiency_scale", "network_efficiency_scale", "step_overhead_s", "attention_efficiency_scale",
                 "source", "uncertainty"});
    }
  }
  r.finish({"about", "sources", "version", "can_run", "communication", "kernel_profile", "best_published", "fitted"});
  return f;
}

Framework resolve_framework(const json* v, const std::string& path, Issues& is) {
  if (!v) {
    const json* e = catalog_find("frameworks", kDefaultFramework);
    if (!e) { is.add(path, std::string("the catalog has no framework \"") + kDefaultFramework + "\""); return Framework{}; }
    return read_framework(*e, kDefaultFramework, std::string("catalog frameworks.") + kDefaultFramework, is);
  }
  if (v->is_string()) {
    const std::string name = v->get<std::string>();
    const json* e = catalog_find("frameworks", name);
    if (!e) {
      add_unknown_catalog_name(is, path, "frameworks", "framework", " or an inline framework object", *v);
      return Framework{};
    }
    for (const std::string& n : catalog_names("frameworks"))  // the catalog's spelling
      if (catalog_find("frameworks", n) == e) return read_framework(*e, n, "catalog frameworks." + n, is);
  }
  if (!v->is_object()) {
    is.add_got(path, "a framework catalog name (" + catalog_names_text("frameworks") + ") or an inline framework object", *v);
    return Framework{};
  }
  return read_framework(*v, "inline", path, is);
}

json framework_to_json(const Framework& f) {
  json can = json::object();
  auto names = [](auto v, auto fn) { json a = json::array(); for (auto x : v) a.push_back(fn(x)); return a; };
  can["research"] = f.can.research;
  can["schedules"] = names(f.can.schedules, schedule_name);
  can["zero"] = f.can.zero;
  can["max_zero_with_pp"] = f.can.max_zero_with_pp;
  can["offload"] = names(f.can.offload, offload_kind_name);
  can["recompute"] = names(f.can.recompute, recompute_name);
  can["precisions"] = names(f.can.precisions, precision_name);
  if (!f.can.fp8_recipes.empty()) can["fp8_recipes"] = f.can.fp8_recipes;
  can["max_tp"] = f.can.max_tp;
  can["sequence_parallel"] = f.can.sequence_parallel;
  can["context_parallel"] = f.can.context_parallel;
  can["expert_parallel"] = f.can.expert_parallel;
  can["uneven_stages"] = f.can.uneven_stages;
  can["tp_comm_overlap"] = f.can.tp_comm_overlap;
  can["overlap_param_gather"] = f.can.overlap_param_gather;
  can["recompute_layers"] = f.can.recompute_layers;
  can["cuda_graphs"] = f.can.cuda_graphs;
  json comm = {{"pp_reduce_after_flush", f.comm.pp_reduce_after_flush}, {"zero3_live_params", f.comm.zero3_live_params}};
  if (f.comm.bucket_per_layer) comm["bucket"] = "layer";
  else comm["bucket"] = {{"min_params", f.comm.bucket_min_params}, {"params_per_data_rank", f.comm.bucket_params_per_data_rank}};
  json j = {{"version", f.version}, {"can_run", can}, {"communication", comm}};
  if (!f.kernel_profile.empty()) j["kernel_profile"] = f.kernel_profile;
  if (f.fit.any() || !f.fit.source.empty())
    j["fitted"] = {{"compute_efficiency_scale", f.fit.compute_efficiency_scale},
                   {"network_efficiency_scale", f.fit.network_efficiency_scale},
                   {"step_overhead_s", f.fit.step_overhead_s},
                   {"attention_efficiency_scale", f.fit.attention_efficiency_scale}, {"source", f.fit.source}};
  if (!f.best_published.empty()) {
    json b = json::array();
    for (const PublishedBest& p : f.best_published)
      b.push_back({{"gpu", p.gpu}, {"precision", p.precision}, {"model_tflops_per_gpu", p.model_tflops_per_gpu}, {"source", p.source}});
    j["best_published"] = b;
  }
  return j;
}

std::string framework_default_fp8_recipe(const Framework& f) {
  return f.can.fp8_recipes.empty() ? std::string(kDefaultFp8Recipe) : f.can.fp8_recipes.front();
}

static void scale_curve(Curve& c, double s) {
  if (s == 1) return;
  if (c.points.empty()) c.points.push_back({1.0, 1.0});
  for (auto& pt : c.points) pt.second = std::min(1.0, pt.second * s);
}

void apply_framework_fit(Cluster& cl, const FrameworkFit& fit) {
  Gpu& g = cl.gpu;
  // The attention curve (the matrix curve where the GPU has none of its own) takes both scales at once.
  if (fit.attention_efficiency_scale != 1 && g.attention_efficiency.points.empty()) g.attention_efficiency = g.matrix_efficiency;
  if (!g.attention_efficiency.points.empty())
    scale_curve(g.attention_efficiency, fit.compute_efficiency_scale * fit.attention_efficiency_scale);
  for (Curve* c : {&g.matrix_efficiency, &g.memory_efficiency, &g.fp8_matrix_efficiency})
    if (!c->points.empty()) scale_curve(*c, fit.compute_efficiency_scale);
  scale_curve(cl.intra.efficiency, fit.network_efficiency_scale);
  scale_curve(cl.inter.efficiency, fit.network_efficiency_scale);
  cl.nccl.bandwidth_scale = fit.network_efficiency_scale;
}

std::vector<Framework> catalog_frameworks() {
  std::vector<Framework> out;
  Issues is;
  for (const std::string& n : catalog_names("frameworks"))
    out.push_back(read_framework(*catalog_find("frameworks", n), n, "catalog frameworks." + n, is));
  if (!is.empty()) throw InputError(is.messages);
  return out;
}

std::vector<std::string> research_techniques(const Plan& p, const Delink& d) {
  std::vector<std::string> out;
  if (p.grad_accumulation == GradAccumulation::layered) out.push_back("layered gradient accumulation (Lamy-Poirier)");
  if (p.schedule == Schedule::modular) out.push_back("modular pipeline (Lamy-Poirier)");
  if (p.offload.kind == OffloadKind::granular) out.push_back("granular CPU offload (M6-10T)");
  if (p.offload.kind == OffloadKind::chunked) out.push_back("chunk-based memory management (PatrickStar)");
  if (p.tp_mode == TpMode::d2) out.push_back("2D tensor parallelism (Optimus)");
  if (d.on()) out.push_back("Pseudo-to-Real delinking (M6-10T)");
  return out;
}

std::vector<Refusal> framework_refusals(const Framework& f, const Plan& p, Precision pr) {
  std::vector<Refusal> out;
  const FrameworkCan& c = f.can;
  if (c.research) return out;
  const std::string fw = f.name;
  auto list = [](auto v, auto fn) {
    std::string s;
    for (size_t i = 0; i < v.size(); ++i) s += (i ? ", \"" : "\"") + std::string(fn(v[i])) + "\"";
    return s;
  };
  const bool research_schedule = p.schedule == Schedule::modular;
  if (p.pp > 1 && !research_schedule && !in(c.schedules, p.schedule))
    out.push_back({"schedule", fw + " cannot run schedule \"" + schedule_name(p.schedule) + "\"; it runs " +
                                   list(c.schedules, schedule_name) + " (nearest: schedule \"" +
                                   schedule_name(in(c.schedules, Schedule::one_f_one_b) ? Schedule::one_f_one_b : c.schedules.front()) + "\")"});
  if (!in(c.zero, p.zero)) {
    int near = c.zero.front();
    for (int z : c.zero) if (std::abs(z - p.zero) < std::abs(near - p.zero) || (std::abs(z - p.zero) == std::abs(near - p.zero) && z > near)) near = z;
    out.push_back({"zero", fw + " cannot run ZeRO stage " + std::to_string(p.zero) + " (nearest: zero " + std::to_string(near) + ")"});
  } else if (p.pp > 1 && p.zero > c.max_zero_with_pp) {
    out.push_back({"zero", fw + " runs at most ZeRO stage " + std::to_string(c.max_zero_with_pp) +
                               " with pipeline parallelism (nearest: zero " + std::to_string(c.max_zero_with_pp) + ", or pp 1)"});
  }
  const bool research_offload = p.offload.kind == OffloadKind::granular || p.offload.kind == OffloadKind::chunked;
  if (!research_offload && !in(c.offload, p.offload.kind))
    out.push_back({"offload", fw + " cannot run offload \"" + offload_kind_name(p.offload.kind) + "\"; it runs " +
                                  list(c.offload, offload_kind_name)});
  if (!in(c.recompute, p.recompute))
    out.push_back({"recompute", fw + " cannot run recompute \"" + recompute_name(p.recompute) + "\"; it runs " +
                                    list(c.recompute, recompute_name) + " (nearest: recompute \"" +
                                    recompute_name(in(c.recompute, Recompute::full) ? Recompute::full : c.recompute.back()) + "\")"});
  if (!in(c.precisions, pr))
    out.push_back({"$.training.precision", fw + " cannot train in " + precision_name(pr) + "; it trains in " +
                                               list(c.precisions, precision_name)});
  if (c.max_tp > 0 && p.tp > c.max_tp)
    out.push_back({"tp", fw + " runs tensor parallelism up to " + std::to_string(c.max_tp) + " (nearest: tp " +
                             std::to_string(c.max_tp) + " with dp x " + std::to_string(p.tp / c.max_tp) + ")"});
  if (p.sequence_parallel && !c.sequence_parallel)
    out.push_back({"sequence_parallel", fw + " has no sequence parallelism (nearest: sequence_parallel false)"});
  if (p.cp > 1 && !c.context_parallel)
    out.push_back({"cp", fw + " has no context parallelism (nearest: cp 1 with dp x " + std::to_string(p.cp) + ")"});
  if (p.ep > 1 && !c.expert_parallel) out.push_back({"ep", fw + " has no expert parallelism (nearest: ep 1)"});
  if (!p.stage_layers.empty() && !c.uneven_stages && p.tp_mode == TpMode::d1)
    out.push_back({"stage_layers", fw + " splits the layers evenly over the pipeline stages (nearest: no stage_layers)"});
  if (p.tp_comm_overlap && !c.tp_comm_overlap)
    out.push_back({"tp_comm_overlap", fw + " cannot overlap tensor-parallel communication with GEMMs (nearest: tp_comm_overlap false)"});
  if (p.recompute_layers >= 0 && !c.recompute_layers)
    out.push_back({"recompute_layers", fw + " recomputes every layer or none (nearest: no recompute_layers, recompute \"" +
                                           std::string(recompute_name(p.recompute)) + "\" on every layer)"});
  if (p.cuda_graphs && !c.cuda_graphs)
    out.push_back({"cuda_graphs", fw + " does not capture its training step as a CUDA graph (nearest: cuda_graphs false)"});
  if (p.overlap_param_gather && !c.overlap_param_gather)
    out.push_back({"overlap_param_gather", fw + " has no overlapped parameter gather (nearest: overlap_param_gather false)"});
  return out;
}

std::string plan_labels(const std::string& framework, const std::string& scenario_framework, bool research, bool beyond) {
  std::string s;
  if (!framework.empty() && framework != scenario_framework) s += " (" + framework + ")";
  if (research) s += " [research]";
  if (beyond) s += " [beyond published]";
  return s;
}

double framework_bucket_params(const Framework& f, int data_ranks) {
  if (f.comm.bucket_per_layer) return 0;
  return std::max(f.comm.bucket_min_params, f.comm.bucket_params_per_data_rank * data_ranks);
}

double grad_bucket_hold_params(const Framework& f, int data_ranks, double bucket_total_params) {
  const double bucket = framework_bucket_params(f, data_ranks);
  return bucket > 0 ? std::min(bucket_total_params, bucket) : bucket_total_params;
}

bool framework_overlaps_grad_reduce(const Framework& f, const Plan& p) {
  return p.overlap_grad_reduce && !(f.comm.pp_reduce_after_flush && p.pp > 1);
}

const PublishedBest* published_best(const Framework& f, const std::string& gpu, Precision pr) {
  const std::string cls = pr == Precision::fp8 ? "fp8" : "16-bit";
  if (pr == Precision::fp32) return nullptr;
  for (const PublishedBest& b : f.best_published)
    if (b.gpu == gpu && b.precision == cls) return &b;
  return nullptr;
}

}  // namespace tp
