// catalog_cmd: `trainplan catalog [gpus|clusters|models|frameworks] [--json FILE|-]` — the bundled catalog as tables: peaks
// per precision and HBM for GPUs; nodes, GPUs per node, fabrics and price for clusters; shape and parameters
// (total and active) for models. Every entry is read with the same readers as a scenario, so the table shows
// what a simulation would use.
#include "catalog_cmd.hpp"

#include <cstdio>
#include <sstream>

#include "models/catalog.hpp"
#include "models/cluster.hpp"
#include "models/framework.hpp"
#include "models/transformer.hpp"
#include "sim/op_cost.hpp"

namespace tp {

namespace {

std::string num(const char* f, double x) {
  char b[64];
  std::snprintf(b, sizeof b, f, x);
  return b;
}

std::string tflops(double flops_per_s) { return flops_per_s > 0 ? num("%.1f", flops_per_s / 1e12) : "-"; }

std::string params_text(double n) {
  if (n >= 1e12) return num("%.2fT", n / 1e12);
  if (n >= 1e9) return num("%.2fB", n / 1e9);
  return num("%.1fM", n / 1e6);
}

// Rows of strings with a header; columns padded to their widest cell.
void print_table(std::ostream& os, const std::vector<std::string>& head, const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> w(head.size());
  for (size_t c = 0; c < head.size(); ++c) w[c] = head[c].size();
  for (auto& r : rows)
    for (size_t c = 0; c < r.size(); ++c) w[c] = std::max(w[c], r[c].size());
  auto line = [&](const std::vector<std::string>& r) {
    std::string s = " ";
    for (size_t c = 0; c < r.size(); ++c) s += " " + r[c] + std::string(w[c] - r[c].size() + 1, ' ');
    while (!s.empty() && s.back() == ' ') s.pop_back();
    os << s << "\n";
  };
  line(head);
  for (auto& r : rows) line(r);
}

json gpus(std::ostream* os) {
  json out = json::array();
  std::vector<std::vector<std::string>> rows;
  for (const std::string& n : catalog_names("gpus")) {
    Issues is;
    Gpu g = read_gpu(*catalog_find("gpus", n), "catalog gpus." + n, is);
    const double* m = g.matrix_flops_per_s;
    out.push_back({{"name", n}, {"fp32_flops_per_s", m[0]}, {"fp16_flops_per_s", m[1]}, {"bf16_flops_per_s", m[2]},
                   {"fp8_flops_per_s", m[3]}, {"hbm_bytes", g.hbm_bytes}, {"hbm_bandwidth_bytes_per_s", g.hbm_bandwidth_bytes_per_s}});
    rows.push_back({n, tflops(m[0]), tflops(m[1]), tflops(m[2]), tflops(m[3]), num("%.1f", g.hbm_bytes / (1024.0 * 1024 * 1024)),
                    num("%.2f", g.hbm_bandwidth_bytes_per_s / 1e12)});
  }
  if (os) {
    *os << "gpus (dense tensor-core peaks):\n";
    print_table(*os, {"name", "fp32 TF/s", "fp16 TF/s", "bf16 TF/s", "fp8 TF/s", "HBM GiB", "HBM TB/s"}, rows);
  }
  return out;
}

json clusters(std::ostream* os) {
  json out = json::array();
  std::vector<std::vector<std::string>> rows;
  for (const std::string& n : catalog_names("clusters")) {
    const json& e = *catalog_find("clusters", n);
    Issues is;
    Cluster c = read_cluster(e, "catalog clusters." + n, is);
    std::string intra = e.value("/intra_node/kind"_json_pointer, std::string("-"));
    std::string topo = e.value("/inter_node/topology"_json_pointer, std::string("-"));
    double nic_gbps = c.inter.nic_bandwidth_bytes_per_s * 8 / 1e9;
    std::string inter = c.inter.nic_bandwidth_bytes_per_s > 0 ? std::to_string(c.inter.nics_per_node) + " x " + num("%.0f Gb/s ", nic_gbps) + topo : "-";
    out.push_back({{"name", n}, {"gpu", c.gpu.name}, {"nodes", c.nodes}, {"gpus_per_node", c.gpus_per_node},
                   {"gpus", c.total_gpus()}, {"intra_node", intra}, {"intra_bandwidth_bytes_per_s", c.intra.bandwidth_bytes_per_s},
                   {"nics_per_node", c.inter.nics_per_node}, {"nic_bandwidth_bits_per_s", nic_gbps * 1e9}, {"topology", topo},
                   {"price_per_gpu_hour_usd", c.price_per_gpu_hour_usd}});
    rows.push_back({n, c.gpu.name, std::to_string(c.nodes), std::to_string(c.gpus_per_node), std::to_string(c.total_gpus()),
                    intra + num(" %.0f GB/s", c.intra.bandwidth_bytes_per_s / 1e9), inter,
                    c.price_per_gpu_hour_usd > 0 ? num("$%.2f", c.price_per_gpu_hour_usd) : "-"});
  }
  if (os) {
    *os << "clusters:\n";
    print_table(*os, {"name", "gpu", "nodes", "gpus/node", "gpus", "intra-node (per GPU)", "inter-node (per node)", "$/GPU-h"}, rows);
  }
  return out;
}

json models(std::ostream* os) {
  json out = json::array();
  std::vector<std::vector<std::string>> rows;
  for (const std::string& n : catalog_names("models")) {
    Issues is;
    Transformer m = read_transformer(json(n), "catalog models." + n, ".", is);
    double total = total_params(m), active = active_params(m);
    out.push_back({{"name", n}, {"layers", m.layers}, {"hidden", m.hidden}, {"heads", m.heads}, {"kv_heads", m.kv_heads},
                   {"ffn_hidden", m.ffn_hidden}, {"vocab", m.vocab}, {"experts", m.moe.experts},
                   {"params_total", total}, {"params_active", active}});
    rows.push_back({n, std::to_string(m.layers), std::to_string(m.hidden),
                    std::to_string(m.heads) + (m.kv_heads != m.heads ? " (" + std::to_string(m.kv_heads) + " kv)" : ""),
                    std::to_string(m.ffn_hidden), std::to_string(m.vocab), m.moe.experts > 0 ? std::to_string(m.moe.experts) : "-",
                    params_text(total), params_text(active)});
  }
  if (os) {
    *os << "models:\n";
    print_table(*os, {"name", "layers", "hidden", "heads", "ffn", "vocab", "experts", "params", "active"}, rows);
  }
  return out;
}

json frameworks(std::ostream* os) {
  json out = json::array();
  std::vector<std::vector<std::string>> rows;
  auto join = [](auto v, auto fn) {
    std::string s;
    for (auto x : v) {
      if (!s.empty()) s += ',';
      s += fn(x);
    }
    return s.empty() ? std::string("any") : s;
  };
  for (const Framework& f : catalog_frameworks()) {
    json j = framework_to_json(f);
    j["name"] = f.name;
    out.push_back(j);
    const FrameworkCan& c = f.can;
    std::string par = std::string(c.max_tp > 0 ? "tp<=" + std::to_string(c.max_tp) : "tp") + (c.sequence_parallel ? " sp" : "") +
                      (c.context_parallel ? " cp" : "") + (c.expert_parallel ? " ep" : "");
    std::string bucket = f.comm.bucket_per_layer ? "per layer" : params_text(framework_bucket_params(f, 1));
    rows.push_back({f.name, join(c.schedules, schedule_name),
                    join(c.zero, [](int z) { return std::to_string(z); }) + (c.max_zero_with_pp < 3 ? " (<=" + std::to_string(c.max_zero_with_pp) + " with pp)" : ""),
                    join(c.offload, offload_kind_name), par, join(c.precisions, precision_name), bucket,
                    f.comm.pp_reduce_after_flush ? "after flush" : "in backward", c.research ? "yes" : "labelled"});
  }
  if (os) {
    *os << "frameworks (training.framework):\n";
    print_table(*os, {"name", "schedules", "ZeRO", "offload", "parallelism", "precisions", "grad bucket", "pp grads",
                      "research"}, rows);
  }
  return out;
}

}  // namespace

json catalog_tables(const std::vector<std::string>& kinds, std::ostream* os) {
  json out = json::object();
  for (size_t i = 0; i < kinds.size(); ++i) {
    if (os && i > 0) *os << "\n";
    if (kinds[i] == "gpus") out["gpus"] = gpus(os);
    else if (kinds[i] == "clusters") out["clusters"] = clusters(os);
    else if (kinds[i] == "frameworks") out["frameworks"] = frameworks(os);
    else out["models"] = models(os);
  }
  return out;
}

}  // namespace tp
