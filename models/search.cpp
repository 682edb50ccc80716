// search: parsing of the scenario's "search" block. See search.hpp.
#include "search.hpp"

#include <cmath>

#include "catalog.hpp"

namespace tp {

const char* objective_name(Objective o) {
  switch (o) {
    case Objective::time_to_train: return "time_to_train";
    case Objective::cost: return "cost";
    case Objective::throughput_per_gpu: return "throughput_per_gpu";
  }
  return "?";
}

namespace {

// A fixed key: one value or a non-empty array of values, each read by `one` (which reports its own problems).
template <class T, class F>
void read_fix_list(Reader& r, const std::string& key, std::vector<T>& out, F one) {
  const json* v = r.get(key);
  if (!v) return;
  std::string at = r.at(key);
  if (v->is_array()) {
    if (v->empty()) { r.issues->add(at, "expected a value or a non-empty array of values"); return; }
    for (size_t i = 0; i < v->size(); ++i) {
      T x;
      if (one((*v)[i], at + "[" + std::to_string(i) + "]", x)) out.push_back(x);
    }
  } else {
    T x;
    if (one(*v, at, x)) out.push_back(x);
  }
}

auto int_in(const Limit& l, Issues& is) {
  return [&l, &is](const json& v, const std::string& at, auto& out) {
    double d = v.is_number() ? v.get<double>() : NAN;
    if (!v.is_number() || !within(l, d)) {
      is.add_got(at, limit_text(l), v);
      return false;
    }
    out = (std::remove_reference_t<decltype(out)>)d;
    return true;
  };
}

template <class E>
auto enum_of(const std::vector<std::string>& names, Issues& is) {
  return [names, &is](const json& v, const std::string& at, E& out) {
    for (size_t i = 0; v.is_string() && i < names.size(); ++i)
      if (v.get<std::string>() == names[i]) { out = (E)i; return true; }
    std::string want = "one of";
    for (size_t i = 0; i < names.size(); ++i) want += (i ? ", \"" : " \"") + names[i] + "\"";
    is.add_got(at, want, v);
    return false;
  };
}

Fix read_fix(const json& v, const std::string& path, Issues& is) {
  Fix f;
  Reader r(v, path, is);
  if (!r.ok()) return f;
  read_fix_list(r, "dp", f.dp, int_in(lim::dp, is));
  read_fix_list(r, "tp", f.tp, int_in(lim::tp, is));
  read_fix_list(r, "pp", f.pp, int_in(lim::pp, is));
  read_fix_list(r, "virtual_stages", f.virtual_stages, int_in(lim::virtual_stages, is));
  read_fix_list(r, "zero", f.zero, int_in(lim::zero, is));
  read_fix_list(r, "ep", f.ep, int_in(lim::ep, is));
  read_fix_list(r, "cp", f.cp, int_in(lim::cp, is));
  read_fix_list(r, "microbatch", f.microbatch, int_in(lim::microbatch, is));
  read_fix_list(r, "global_batch", f.global_batch, int_in(lim::global_batch, is));
  read_fix_list(r, "schedule", f.schedule, enum_of<Schedule>({"gpipe", "1f1b", "interleaved", "modular"}, is));
  read_fix_list(r, "recompute", f.recompute, enum_of<Recompute>(recompute_names(), is));
  read_fix_list(r, "tp_mode", f.tp_mode, enum_of<TpMode>({"1d", "2d"}, is));
  read_fix_list(r, "grad_accumulation", f.grad_accumulation, enum_of<GradAccumulation>({"standard", "layered"}, is));
  read_fix_list(r, "offload", f.offload, enum_of<OffloadKind>({"none", "optimizer", "granular", "chunked"}, is));
  read_fix_list(r, "sequence_parallel", f.sequence_parallel, [&is](const json& x, const std::string& at, bool& out) {
    if (!x.is_boolean()) { is.add_got(at, "true or false", x); return false; }
    out = x.get<bool>();
    return true;
  });
  read_fix_list(r, "attention", f.attention, enum_of<Attention>({"flash", "unfused"}, is));
  read_fix_list(r, "precision", f.precision, enum_of<Precision>({"fp32", "fp16", "bf16", "fp8"}, is));
  read_fix_list(r, "stage_split", f.stage_split, enum_of<StageSplitKind>({"even", "uneven"}, is));
  read_fix_list(r, "framework", f.framework, [&is](const json& x, const std::string& at, std::string& out) {
    if (x.is_string() && x.get<std::string>() == "any") { out = "any"; return true; }
    const json* e = x.is_string() ? catalog_find("frameworks", x.get<std::string>()) : nullptr;
    if (!e) {
      add_unknown_catalog_name(is, at, "frameworks", "framework", " or \"any\"", x);
      return false;
    }
    for (const std::string& n : catalog_names("frameworks"))
      if (catalog_find("frameworks", n) == e) out = n;
    return true;
  });
  r.finish({"dp", "tp", "pp", "virtual_stages", "zero", "ep", "cp", "microbatch", "global_batch", "schedule", "recompute",
            "tp_mode", "grad_accumulation", "offload", "sequence_parallel", "attention", "precision",
            "stage_split", "framework"});
  return f;
}

}  // namespace

Attention search_attention(const Fix& f) {
  for (Attention a : f.attention)
    if (a == Attention::flash) return a;
  return f.attention.empty() ? Attention::flash : Attention::unfused;
}

Search read_search(const json& v, const std::string& path, Issues& is) {
  Search s;
  Reader r(v, path, is);
  if (!r.ok()) return s;
  s.max_gpus = (int)r.opt_int("max_gpus", 0, lim::max_gpus);
  s.min_gpus = (int)r.opt_int("min_gpus", 1, lim::max_gpus);
  s.min_gpus_given = r.has("min_gpus");
  if (s.max_gpus > 0 && s.min_gpus > s.max_gpus)
    is.add(r.at("min_gpus"), "must be <= max_gpus (" + std::to_string(s.max_gpus) + "), got " + std::to_string(s.min_gpus));
  if (const json* g = r.get("gpu_counts")) {
    if (!g->is_array() || g->empty()) is.add_got(r.at("gpu_counts"), "a non-empty array of GPU counts", *g);
    else
      for (size_t i = 0; i < g->size(); ++i) {
        int x = 0;
        if (int_in(lim::max_gpus, is)((*g)[i], r.at("gpu_counts") + "[" + std::to_string(i) + "]", x)) s.gpu_counts.push_back(x);
      }
  }
  s.objective = (Objective)r.opt_enum("objective", {"time_to_train", "cost", "throughput_per_gpu"}, 0);
  s.top_k = (int)r.opt_int("top_k", 5, lim::search_top_k);
  s.confirm = (int)r.opt_int("confirm", 0, lim::confirm);
  if (s.confirm > 0 && s.confirm < s.top_k)
    is.add(r.at("confirm"), "must be >= top_k (" + std::to_string(s.top_k) + "): every reported plan is simulated, got " +
                                std::to_string(s.confirm));
  s.confirm_budget_s = r.opt_num("confirm_budget_s", 300, lim::confirm_budget);
  s.memory_headroom = r.opt_num("memory_headroom", kDefaultMemoryHeadroom, lim::headroom);
  s.max_batch_over_critical = r.opt_num("max_batch_over_critical", 1.0, lim::batch_over_critical);
  if (const json* f = r.get("fix")) s.fix = read_fix(*f, r.at("fix"), is);
  if (const json* c = r.get("compare")) {
    Reader rc(*c, r.at("compare"), is);
    if (rc.ok()) {
      s.compare.on = true;
      s.compare.ethernet_nic_bits_per_s = rc.opt_num("ethernet_nic_bits_per_s", 100e9, lim::eth_bits);
      s.compare.ethernet_nics_per_node = (int)rc.opt_int("ethernet_nics_per_node", 1, lim::eth_nics);
      rc.finish({"ethernet_nic_bits_per_s", "ethernet_nics_per_node"});
    }
  }
  r.finish({"max_gpus", "min_gpus", "gpu_counts", "objective", "top_k", "confirm", "confirm_budget_s", "memory_headroom",
            "max_batch_over_critical", "fix", "compare"});
  return s;
}

json search_to_json(const Search& s) {
  json j = {{"max_gpus", s.max_gpus}, {"min_gpus", s.min_gpus}, {"objective", objective_name(s.objective)},
            {"top_k", s.top_k}, {"confirm", s.confirm}, {"memory_headroom", s.memory_headroom},
            {"max_batch_over_critical", s.max_batch_over_critical}};
  if (!s.gpu_counts.empty()) j["gpu_counts"] = s.gpu_counts;
  if (!s.fix.framework.empty()) j["fix"] = {{"framework", s.fix.framework}};
  if (s.confirm_budget_s != 300) j["confirm_budget_s"] = s.confirm_budget_s;
  if (s.compare.on)
    j["compare"] = {{"ethernet_nic_bits_per_s", s.compare.ethernet_nic_bits_per_s},
                    {"ethernet_nics_per_node", s.compare.ethernet_nics_per_node}};
  return j;
}

}  // namespace tp
