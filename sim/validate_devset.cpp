// validate_devset: see validate_devset.hpp.
#include "validate_devset.hpp"

#include "models/catalog.hpp"
#include "models/scenario.hpp"
#include "op_cost.hpp"
#include "simulate.hpp"

namespace tp {

namespace {

std::string row_id(const json& row) { return row.value("id", std::string("(row without id)")); }

// The row's cluster: the catalog entry, grown to enough nodes for the row's GPUs when it is smaller.
json row_cluster(const json& row, const std::string& cluster_override) {
  std::string name = cluster_override.empty() ? row.at("cluster").get<std::string>() : cluster_override;
  const json* c = catalog_find("clusters", name);
  if (!c) throw InputError({"dev-set row " + row_id(row) + ": unknown catalog cluster \"" + name + "\""});
  long long gpus = row.at("gpus").get<long long>();
  long long per_node = c->at("gpus_per_node").get<long long>();
  long long nodes = c->at("nodes").get<long long>();
  if (nodes * per_node >= gpus) return name;
  json grown = *c;
  grown["name"] = name;
  grown["nodes"] = (gpus + per_node - 1) / per_node;
  return grown;
}

}  // namespace

json devset_row_scenario(const json& row, const std::string& cluster_override) {
  json plan = row.at("plan");
  if (plan.value("cp", 1) == 1) plan.erase("cp");
  return {{"name", row_id(row)},
          {"model", row.at("model")},
          {"cluster", row_cluster(row, cluster_override)},
          {"training", row.at("training")},
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
  throw InputError({"dev-set row " + row_id(row) + ": measured has neither tokens_per_s_per_gpu nor model_tflops_per_gpu"});
}

PublishedReport validate_devset(const json& set, const std::string& cluster_override) {
  PublishedReport rep;
  for (const json& row : set.at("rows")) {
    std::string how;
    Scenario sc;
    double published_s = 0;
    try {  // a row trainplan cannot express yet is listed as skipped, with the reason, never silently dropped
      published_s = devset_published_step_s(row, &how);
      sc = scenario_from_json(devset_row_scenario(row, cluster_override), ".", "dev-set row " + row_id(row));
    } catch (const InputError& e) {
      rep.skipped.push_back(e.messages.empty() ? row_id(row) : e.messages.front());
      continue;
    }
    Result r = simulate(sc);
    rep.time_rows.push_back({row.value("source", std::string()), row_id(row), "iteration time (s)", how, published_s,
                             r.step_time_s});
  }
  published_stats(rep.time_rows, rep.time_mean_abs, rep.time_max_abs);
  return rep;
}

}  // namespace tp
