// validate_published: see validate_published.hpp.
#include "validate_published.hpp"

#include <map>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "op_cost.hpp"
#include "simulate.hpp"

namespace tp {

namespace {

json model_json(long long heads, long long hidden, long long layers, const std::string& name) {
  return {{"name", name}, {"layers", layers}, {"hidden", hidden}, {"heads", heads}, {"vocab", 51200},
          {"seq_len", 2048}, {"activation", "gelu"}, {"tied_embeddings", true}};
}

Scenario make(const json& model, const std::string& cluster, long long batch, int dp, int tp, int pp, int v,
              const char* schedule, bool sp, const char* recompute, bool overlap_grad_reduce = true) {
  json j = {{"name", model["name"]},
            {"model", model},
            {"cluster", cluster},
            {"training", {{"global_batch", batch}, {"seq_len", 2048}, {"precision", "fp16"}}},
            // the published 2021 runs used Megatron-LM's unfused attention core
            {"plan", {{"attention", "unfused"}, {"dp", dp}, {"tp", tp}, {"pp", pp}, {"virtual_stages", v}, {"microbatch", 1},
                      {"schedule", schedule}, {"sequence_parallel", sp}, {"recompute", recompute}, {"zero", 0},
                      {"overlap_grad_reduce", overlap_grad_reduce}}}};
  return scenario_from_json(j, ".", "dev-suite row " + model["name"].get<std::string>());
}

}  // namespace

void published_stats(const std::vector<PublishedRow>& rows, double& mean, double& mx) {
  mean = mx = 0;
  for (auto& r : rows) { mean += std::fabs(r.error()); mx = std::max(mx, std::fabs(r.error())); }
  if (!rows.empty()) mean /= rows.size();
}

PublishedReport validate_published(const json& suite, const std::string& cluster) {
  PublishedReport rep;
  const double GiB = 1024.0 * 1024 * 1024;
  // Korthikanti et al. 2022, Table 5: interleaved 1F1B as published (tp, pp, virtual stages given).
  const json& t5 = suite.at("korthikanti2022_table5");
  for (const json& row : t5.at("rows")) {
    std::string name = row[0].get<std::string>();
    long long heads = row[1], hidden = row[2], layers = row[3];
    int tp = row[4], pp = row[5], v = row[6], gpus = row[7];
    long long batch = row[8];
    int dp = gpus / (tp * pp);
    json model = model_json(heads, hidden, layers, "megatron-" + name);
    struct Mode { const char* label; bool sp; const char* rc; int col; };
    for (Mode md : {Mode{"full recompute", false, "full", 10}, Mode{"SP + selective recompute", true, "selective", 11}}) {
      Result r = simulate(make(model, cluster, batch, dp, tp, pp, v, "interleaved", md.sp, md.rc));
      rep.time_rows.push_back({"Korthikanti 2022 Table 5", name + ", " + md.label, "iteration time (s)",
                               "plan as published", row[md.col].get<double>(), r.step_time_s, ""});
    }
  }
  // Korthikanti Fig. 1 memory per GPU for the same configurations (stage 1 has no embedding, as in the paper).
  const json& f1 = t5.at("memory_per_gpu_GiB");
  for (size_t i = 0; i < f1.at("rows").size(); ++i) {
    const json& mrow = f1["rows"][i];
    const json& row = t5["rows"][i];
    std::string name = row[0].get<std::string>();
    json model = model_json(row[1], row[2], row[3], "megatron-" + name);
    int tp = row[4], pp = row[5], v = row[6], gpus = row[7];
    int dp = gpus / (tp * pp);
    Result base = simulate(make(model, cluster, row[8], dp, tp, pp, v, "interleaved", false, "none"));
    Result sel = simulate(make(model, cluster, row[8], dp, tp, pp, v, "interleaved", true, "selective"));
    const RankResult& mid = base.ranks[1];
    double states = (mid.peak.weights + mid.peak.gradients + mid.peak.optimizer) / GiB;
    rep.memory_rows.push_back({"Korthikanti 2022 Fig. 1", name + ", weights+grads+optimizer", "GiB per GPU",
                               "a stage without embeddings", mrow[1].get<double>(), states, ""});
    rep.memory_rows.push_back({"Korthikanti 2022 Fig. 1", name + ", activations, no SP / no recompute", "GiB per GPU",
                               "first stage, stored activations", mrow[2].get<double>(), base.ranks[0].stored_peak_bytes / GiB, ""});
    rep.memory_rows.push_back({"Korthikanti 2022 Fig. 1", name + ", activations, SP + selective", "GiB per GPU",
                               "first stage, stored activations", mrow[3].get<double>(), sel.ranks[0].stored_peak_bytes / GiB, ""});
  }
  // Narayanan et al. 2021 Table 2, PTD-P rows: published TFLOP/s per GPU -> iteration time with the paper's
  // FLOP formula. The schedule is not given: assumed non-interleaved 1F1B (the throughput ratio between rows
  // of equal batch matches the (p-1)/m bubble) and, as in Megatron-LM of 2021, a data-parallel all-reduce after
  // the pipeline flush (no overlap with the backward pass).
  const json& t2 = suite.at("narayanan2021_table2_ptdp");
  for (const json& row : t2.at("rows")) {
    double params = row[0];
    long long heads = row[1], hidden = row[2], layers = row[3];
    int tp = row[4], pp = row[5], gpus = row[6];
    long long batch = row[7];
    double tflops = row[9];
    int dp = gpus / (tp * pp);
    char nm[64];
    std::snprintf(nm, sizeof nm, "%.1fB", params);
    json model = model_json(heads, hidden, layers, std::string("megatron-") + nm);
    Scenario sc = make(model, cluster, batch, dp, tp, pp, 1, "1f1b", false, "full", false);
    double flops = megatron_flops_per_iteration(sc.model, batch, 2048, true);
    double published_s = flops / (tflops * 1e12 * gpus);
    Result r = simulate(sc);
    char label[96];
    std::snprintf(label, sizeof label, "%s on %d GPUs", nm, gpus);
    rep.time_rows.push_back({"Narayanan 2021 Table 2 (PTD-P)", label, "iteration time (s)",
                             "1F1B not interleaved, gradient all-reduce not overlapped (2021 Megatron)", published_s,
                             r.step_time_s, ""});  // "": the dev suite's rows are Megatron-LM's
  }
  published_stats(rep.time_rows, rep.time_mean_abs, rep.time_max_abs);
  published_stats(rep.memory_rows, rep.memory_mean_abs, rep.memory_max_abs);
  return rep;
}

json framework_stats(const std::vector<PublishedRow>& rows) {
  std::map<std::string, std::vector<PublishedRow>> by;
  for (const PublishedRow& x : rows) by[x.framework.empty() ? "megatron-core" : x.framework].push_back(x);
  json out = json::object();
  for (auto& [name, v] : by) {
    double mean = 0, mx = 0;
    published_stats(v, mean, mx);
    out[name] = {{"rows", (int)v.size()}, {"mean_abs_error", mean}, {"max_abs_error", mx}};
  }
  return out;
}

void print_published(std::ostream& os, const PublishedReport& r) {
  char line[256];
  auto table = [&](const char* title, const std::vector<PublishedRow>& rows, double mean, double mx) {
    if (rows.empty()) return;
    int w = 42;  // the row column, wider for long row names
    for (const PublishedRow& x : rows) w = std::max(w, (int)x.name.size());
    os << title << "\n";
    std::snprintf(line, sizeof line, "  %-30s %-*s %12s %12s %8s\n", "source", w, "row", "published", "predicted", "error");
    os << line;
    for (const PublishedRow& x : rows) {
      std::snprintf(line, sizeof line, "  %-30s %-*s %12.3f %12.3f %+7.2f%%\n", x.table.c_str(), w, x.name.c_str(),
                    x.published, x.predicted, 100 * x.error());
      os << line;
    }
    std::snprintf(line, sizeof line, "  mean |error| %.2f%%, max |error| %.2f%% over %zu rows\n\n", 100 * mean, 100 * mx,
                  rows.size());
    os << line;
  };
  table("Iteration time (s)", r.time_rows, r.time_mean_abs, r.time_max_abs);
  const json groups = framework_stats(r.time_rows);
  if (groups.size() > 1 || (groups.size() == 1 && !groups.begin().key().empty())) {
    os << "Iteration time by framework\n";
    for (auto it = groups.begin(); it != groups.end(); ++it) {
      std::snprintf(line, sizeof line, "  %-20s mean |error| %6.2f%%, max |error| %6.2f%% over %d rows\n", it.key().c_str(),
                    100 * it.value()["mean_abs_error"].get<double>(), 100 * it.value()["max_abs_error"].get<double>(),
                    it.value()["rows"].get<int>());
      os << line;
    }
    os << "\n";
  }
  if (!r.skipped.empty()) {
    os << "Not simulated (" << r.skipped.size() << " rows, not in the statistics)\n";
    for (const std::string& s : r.skipped) os << "  " << s << "\n";
    os << "\n";
  }
  table("Memory per GPU (GiB)", r.memory_rows, r.memory_mean_abs, r.memory_max_abs);
}

json published_to_json(const PublishedReport& r) {
  auto rows = [](const std::vector<PublishedRow>& v) {
    json a = json::array();
    for (auto& x : v)
      a.push_back({{"source", x.table}, {"row", x.name}, {"quantity", x.quantity}, {"assumption", x.assumption},
                   {"framework", x.framework.empty() ? "megatron-core" : x.framework},
                   {"published", x.published}, {"predicted", x.predicted}, {"error", x.error()}});
    return a;
  };
  return {{"skipped", r.skipped},
          {"iteration_time", {{"rows", rows(r.time_rows)}, {"mean_abs_error", r.time_mean_abs}, {"max_abs_error", r.time_max_abs},
                              {"by_framework", framework_stats(r.time_rows)}}},
          {"memory", {{"rows", rows(r.memory_rows)}, {"mean_abs_error", r.memory_mean_abs}, {"max_abs_error", r.memory_max_abs}}}};
}

}  // namespace tp
