// validate_devset: see validate_devset.hpp.
#include "validate_devset.hpp"

#include "models/catalog.hpp"
#include "models/scenario.hpp"
#include "op_cost.hpp"
#include "simulate.hpp"

namespace tp {

namespace {

std::string row_id(const json& row) { return row.value("id", std::string("(row without id)")); }

// The row's cluster: the catalog entry, or the set's own description (its "clusters" object: the catalog cluster
// named by base_catalog_cluster with the set's GPU, GPUs per node, links and host in place), grown to enough
// nodes for the row's GPUs.
json row_cluster(const json& row, const std::string& cluster_override, const json* set) {
  const std::string name = cluster_override.empty() ? row.at("cluster").get<std::string>() : cluster_override;
  const long long gpus = row.at("gpus").get<long long>();
  const std::string what = "dev-set row " + row_id(row);
  if (cluster_override.empty() && set && set->contains("clusters") && set->at("clusters").contains(name) &&
      set->at("clusters").at(name).is_object()) {
    const json& d = set->at("clusters").at(name);
    json patch = json::object();
    for (const char* k : {"gpu", "gpus_per_node", "intra_node", "inter_node", "host"})
      if (d.contains(k)) patch[k] = d[k];
    json c = catalog_cluster_patched(d.at("base_catalog_cluster").get<std::string>(), patch, gpus, what + ": cluster " + name);
    c["name"] = name;
    return c;
  }
  const json* e = catalog_find("clusters", name);
  if (!e) throw InputError({what + ": unknown catalog cluster \"" + name + "\""});
  const long long per_node = e->at("gpus_per_node").get<long long>();
  if (e->at("nodes").get<long long>() * per_node >= gpus) return e->contains("name") ? *e : json(name);
  json c = catalog_cluster_patched(name, json::object(), gpus, what);
  c["name"] = name;
  return c;
}

}  // namespace

json devset_row_scenario(const json& row, const std::string& cluster_override, const json* set) {
  json plan = row.at("plan");
  if (plan.value("cp", 1) == 1) plan.erase("cp");
  json training = row.at("training");
  if (row.contains("framework")) training["framework"] = row["framework"];  // the framework the run used
  return {{"name", row_id(row)},
          {"model", row.at("model")},
          {"cluster", row_cluster(row, cluster_override, set)},
          {"training", training},
          {"plan", plan}};
}

double devset_published_step_s(const json& row, std::string* how) {
  const json& m = row.at("measured");
  const json& t = row.at("training");
  double gpus = row.at("gpus").get<double>();
  double tokens = t.at("global_batch").get<double>() * t.at("seq_len").get<double>();
  if (m.contains("tokens_per_s_per_gpu")) {
    if (how) *how = "global batch x seq / (published tokens/s per GPU x GPUs)";
    return tokens / (m.at("tokens_per_s_per_gpu").get<double>() * gpus);
  }
  if (m.contains("model_tflops_per_gpu")) {
    Scenario sc = scenario_from_json(devset_row_scenario(row), ".", "dev-set row " + row_id(row));
    if (how) *how = "Megatron-LM's model FLOPs per iteration / (published model TFLOP/s per GPU x GPUs)";
    double flops = megatron_flops_per_iteration(sc.model, t.at("global_batch").get<long long>(),
                                                t.at("seq_len").get<long long>(), false);
    return flops / (m.at("model_tflops_per_gpu").get<double>() * 1e12 * gpus);
  }
  if (row.contains("derived") && row["derived"].contains("step_time_s")) {  // from samples/s or the like
    if (how) *how = row["derived"].value("formula", std::string("the set's derived step time"));
    return row["derived"].at("step_time_s").get<double>();
  }
  throw InputError({"dev-set row " + row_id(row) + ": measured has neither tokens_per_s_per_gpu nor model_tflops_per_gpu, "
                    "and derived no step_time_s"});
}

PublishedReport validate_devset(const json& set, const std::string& cluster_override) {
  PublishedReport rep;
  for (const json& row : set.at("rows")) {
    std::string how;
    Scenario sc;
    double published_s = 0;
    try {  // a row trainplan cannot express yet is listed as skipped, with the reason, never silently dropped
      published_s = devset_published_step_s(row, &how);
      sc = scenario_from_json(devset_row_scenario(row, cluster_override, &set), ".", "dev-set row " + row_id(row));
    } catch (const InputError& e) {
      rep.skipped.push_back(e.messages.empty() ? row_id(row) : e.messages.front());
      continue;
    }
    Result r = simulate(sc);
    rep.time_rows.push_back({row.value("source", std::string()), row_id(row), "iteration time (s)", how, published_s,
                             r.step_time_s, sc.framework.name});
  }
  published_stats(rep.time_rows, rep.time_mean_abs, rep.time_max_abs);
  return rep;
}

}  // namespace tp
