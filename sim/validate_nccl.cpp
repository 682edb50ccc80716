// validate_nccl: nccl-tests rows against the NCCL model. See validate_nccl.hpp.
#include "validate_nccl.hpp"

#include <cmath>
#include <cstdio>

#include "models/catalog.hpp"
#include "models/cluster.hpp"
#include "nccl_model.hpp"

namespace tp {

namespace {

constexpr double kMinCountedBytes = 1048576, kMaxCountedBytes = 8589934592.0;

Coll op_of(const std::string& s, const std::string& path) {
  if (s == "all_reduce") return Coll::all_reduce;
  if (s == "all_gather") return Coll::all_gather;
  if (s == "reduce_scatter") return Coll::reduce_scatter;
  if (s == "all_to_all") return Coll::all_to_all;
  if (s == "send_recv") return Coll::p2p;
  throw InputError({path + ": all_reduce, all_gather, reduce_scatter, all_to_all or send_recv, got \"" + s + "\""});
}

int index_of(const std::string& s, const std::vector<std::string>& names, const std::string& path) {
  for (size_t i = 0; i < names.size(); ++i)
    if (names[i] == s) return (int)i;
  throw InputError({path + ": unknown name \"" + s + "\""});
}

// The row's cluster: the catalog base with the row's NICs and in-network reduction, grown to the row's nodes.
Cluster row_cluster(const json& spec, int nodes, int gpus_per_node, const std::string& path) {
  json patch = json::object();
  for (const char* k : {"nics_per_node", "nic_bandwidth_bits_per_s"})
    if (spec.contains(k)) patch["inter_node"][k] = spec[k];
  if (spec.value("collnet", false)) patch["nccl"] = {{"collnet", true}};
  const json c = catalog_cluster_patched(spec.at("base").get<std::string>(), patch, (long long)nodes * gpus_per_node, path + ".base");
  Issues is;
  Cluster cl = read_cluster(c, path, is);
  if (!is.empty()) throw InputError(is.messages);
  return cl;
}

}  // namespace

NcclTestsReport validate_nccl_tests(const json& set, const std::string& file) {
  NcclTestsReport rep;
  const json& rows = set.at("rows");
  for (size_t i = 0; i < rows.size(); ++i) {
    const json& r = rows[i];
    const std::string path = file + ": rows[" + std::to_string(i) + "]";
    const std::string id = r.at("id").get<std::string>();
    const int nodes = r.at("nodes").get<int>(), gpn = r.at("gpus_per_node").get<int>();
    const Coll op = op_of(r.at("op").get<std::string>(), path + ".op");
    const Cluster cl = row_cluster(r.at("cluster"), nodes, gpn, path + ".cluster");
    int algo = -1, proto = -1;
    if (r.contains("force")) {
      const json& f = r["force"];
      if (f.contains("algo"))
        algo = index_of(f["algo"].get<std::string>(), {"tree", "ring", "collnetdirect", "collnetchain", "nvls", "nvlstree"}, path + ".force.algo");
      if (f.contains("proto")) proto = index_of(f["proto"].get<std::string>(), {"ll", "ll128", "simple"}, path + ".force.proto");
    }
    const int ranks = nodes * gpn;
    const NcclComm comm = nccl_comm(cl, nccl_tuning_for(cl), ranks, gpn);
    const double bus = nccl_bus_factor(op, ranks);
    for (const json& p : r.at("points")) {
      NcclTestsPoint pt;
      pt.row = id;
      pt.bytes = p.at("bytes").get<double>();
      pt.published_GBps = p.at("busbw_GBps").get<double>();
      if (!(pt.published_GBps > 0)) continue;
      const NcclCall c = nccl_call(comm, op, pt.bytes, algo, proto);
      pt.predicted_GBps = pt.bytes / c.time_s / 1e9 * bus;
      pt.algo = c.algo;
      pt.proto = c.proto;
      pt.ranks = ranks;
      pt.nodes = nodes;
      pt.channels = c.channels;
      pt.latency_us = c.latency_s * 1e6;
      pt.fill_us = c.fill_s * 1e6;
      pt.counted = pt.bytes >= kMinCountedBytes && pt.bytes <= kMaxCountedBytes;
      rep.points.push_back(pt);
    }
  }
  int within = 0;
  for (const auto& p : rep.points) {
    if (!p.counted) continue;
    const double e = std::fabs(p.error());
    rep.mean_abs += e;
    rep.max_abs = std::max(rep.max_abs, e);
    within += e <= 0.10;
    ++rep.counted;
  }
  if (rep.counted > 0) {
    rep.mean_abs /= rep.counted;
    rep.share_within_10pct = (double)within / rep.counted;
  }
  return rep;
}

void print_nccl_tests(std::ostream& os, const NcclTestsReport& r) {
  char line[256];
  os << "nccl-tests bus bandwidth (GB/s), published vs the NCCL model\n";
  std::snprintf(line, sizeof line, "  %-30s %13s %10s %10s %8s  %s\n", "row", "bytes", "published", "predicted", "error", "algorithm/protocol");
  os << line;
  for (const auto& p : r.points) {
    std::snprintf(line, sizeof line, "  %-30s %13.0f %10.2f %10.2f %+7.1f%%  %s/%s%s\n", p.row.c_str(), p.bytes, p.published_GBps,
                  p.predicted_GBps, 100 * p.error(), p.algo.c_str(), p.proto.c_str(), p.counted ? "" : "  (outside 1 MiB..8 GiB)");
    os << line;
  }
  std::snprintf(line, sizeof line, "  mean |error| %.1f%%, max |error| %.1f%%, %.0f%% of %d points within 10%% (1 MiB..8 GiB)\n",
                100 * r.mean_abs, 100 * r.max_abs, 100 * r.share_within_10pct, r.counted);
  os << line;
}

json nccl_tests_to_json(const NcclTestsReport& r) {
  json pts = json::array();
  for (const auto& p : r.points)
    pts.push_back({{"row", p.row}, {"bytes", p.bytes}, {"published_busbw_GBps", p.published_GBps},
                   {"predicted_busbw_GBps", p.predicted_GBps}, {"error", p.error()}, {"algorithm", p.algo},
                   {"protocol", p.proto}, {"ranks", p.ranks}, {"nodes", p.nodes},
                   {"channels", p.channels}, {"latency_us", p.latency_us}, {"fill_us", p.fill_us}, {"counted", p.counted}});
  return {{"points", pts}, {"mean_abs_error", r.mean_abs}, {"max_abs_error", r.max_abs}, {"counted_points", r.counted},
          {"share_within_10pct", r.share_within_10pct}};
}

}  // namespace tp
