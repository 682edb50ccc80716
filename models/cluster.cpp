// cluster: reading a cluster object (inline or catalog) with exact key validation. See cluster.hpp.
#include "cluster.hpp"

#include "catalog.hpp"
#include "nccl_tuning.hpp"

namespace tp {

static Gpu read_gpu_ref(const json& v, const std::string& path, Issues& issues) {
  if (v.is_string()) {
    const json* e = catalog_find("gpus", v.get<std::string>());
    if (!e) {
      add_unknown_catalog_name(issues, path, "gpus", "GPU", " or an inline GPU object", v);
      return Gpu{};
    }
    Gpu g = read_gpu(*e, "catalog gpus." + v.get<std::string>(), issues);
    if (g.name.empty()) g.name = v.get<std::string>();
    return g;
  }
  return read_gpu(v, path, issues);
}

// "nccl": {"version", "collnet", "tuning": {constants}}; the constants are checked against the tuning tables'
// shapes and ranges here, and applied over the version's when a model is built (sim/nccl_model).
static void read_cluster_nccl(const json& v, const std::string& path, ClusterNccl& out, Issues& issues) {
  Reader r(v, path, issues);
  if (!r.ok()) return;
  out.version = r.opt_str("version", "");
  if (!out.version.empty() && !catalog_find("nccl", out.version))
    issues.add(r.at("version"), "an NCCL tuning version of the catalog (" + catalog_names_text("nccl") + "), got \"" + out.version + "\"");
  out.collnet = r.opt_bool("collnet", false);
  out.step_collectives = r.opt_bool("step_collectives", ClusterNccl{}.step_collectives);
  if (const json* t = r.get("tuning")) {
    read_nccl_tuning(*t, r.at("tuning"), NcclTuning{}, issues);
    out.overrides = *t;
  }
  r.finish({"version", "collnet", "step_collectives", "tuning"});
}

Cluster read_cluster(const json& v, const std::string& path, Issues& issues) {
  Cluster c;
  Reader r(v, path, issues);
  if (!r.ok()) return c;
  c.name = r.opt_str("name", "");
  r.opt_str("about", "");
  if (const json* g = r.get("gpu")) c.gpu = read_gpu_ref(*g, r.at("gpu"), issues);
  else issues.add(r.at("gpu"), "missing; expected a GPU catalog name or an inline GPU object");
  c.nodes = (int)r.req_int("nodes", lim::nodes);
  c.gpus_per_node = (int)r.req_int("gpus_per_node", lim::gpus_per_node);

  if (const json* in = r.get("intra_node")) {
    Reader ir(*in, r.at("intra_node"), issues);
    if (ir.ok()) {
      c.intra.kind = (Fabric)ir.req_enum("kind", {"nvswitch", "nvlink", "pcie"});
      c.intra.bandwidth_bytes_per_s = ir.req_num("bandwidth_bytes_per_s", lim::intra_bw);
      c.intra.latency_s = ir.req_num("latency_s", lim::intra_latency);
      if (const json* e = ir.get("efficiency")) c.intra.efficiency = read_curve(*e, ir.at("efficiency"), issues);
      ir.finish({"kind", "bandwidth_bytes_per_s", "latency_s", "efficiency"});
    }
  } else {
    issues.add(r.at("intra_node"), "missing; expected {kind, bandwidth_bytes_per_s, latency_s, efficiency}");
  }

  if (const json* nn = r.get("inter_node")) {
    Reader nr(*nn, r.at("inter_node"), issues);
    if (nr.ok()) {
      c.inter.nics_per_node = (int)nr.req_int("nics_per_node", lim::nics_per_node);
      c.inter.nic_bandwidth_bytes_per_s = nr.req_num("nic_bandwidth_bits_per_s", lim::nic_bits) / 8.0;
      c.inter.topology = (NetTopology)nr.opt_enum("topology", {"fat_tree", "rail_optimized"}, 0);
      c.inter.oversubscription = nr.opt_num("oversubscription", 1.0, lim::oversubscription);
      c.inter.nodes_per_leaf = (int)nr.opt_int("nodes_per_leaf", 16, lim::nodes_per_leaf);
      c.inter.latency_s = nr.req_num("latency_s", lim::inter_latency);
      if (const json* e = nr.get("efficiency")) c.inter.efficiency = read_curve(*e, nr.at("efficiency"), issues);
      nr.finish({"nics_per_node", "nic_bandwidth_bits_per_s", "topology", "oversubscription", "nodes_per_leaf",
                 "latency_s", "efficiency"});
    }
  } else {
    issues.add(r.at("inter_node"), "missing; expected {nics_per_node, nic_bandwidth_bits_per_s, topology, ...}");
  }

  if (const json* h = r.get("host")) {
    Reader hr(*h, r.at("host"), issues);
    if (hr.ok()) {
      c.host.memory_bytes = hr.req_num("memory_bytes", lim::host_memory);
      c.host.pcie_bandwidth_bytes_per_s = hr.req_num("pcie_bandwidth_bytes_per_s", lim::pcie_bw);
      c.host.cpu_cores = (int)hr.opt_int("cpu_cores", 1, lim::cpu_cores);
      c.host.memory_bandwidth_bytes_per_s = hr.opt_num("memory_bandwidth_bytes_per_s", 0, lim::host_mem_bw);
      hr.finish({"memory_bytes", "pcie_bandwidth_bytes_per_s", "cpu_cores", "memory_bandwidth_bytes_per_s"});
    }
  } else {
    issues.add(r.at("host"), "missing; expected {memory_bytes, pcie_bandwidth_bytes_per_s, cpu_cores, memory_bandwidth_bytes_per_s}");
  }
  c.price_per_gpu_hour_usd = r.opt_num("price_per_gpu_hour_usd", 0, lim::price);
  c.power_per_gpu_w = r.opt_num("power_per_gpu_w", c.gpu.power_w, lim::cluster_power);
  c.nccl_buffer_bytes_per_communicator = r.opt_num("nccl_buffer_bytes_per_communicator", 0, lim::nccl_buffer);
  if (const json* n = r.get("nccl")) read_cluster_nccl(*n, r.at("nccl"), c.nccl, issues);
  r.finish({"name", "about", "gpu", "nodes", "gpus_per_node", "intra_node", "inter_node", "host",
            "price_per_gpu_hour_usd", "power_per_gpu_w", "nccl_buffer_bytes_per_communicator", "nccl"});
  return c;
}

json cluster_to_json(const Cluster& c) {
  static const char* fabrics[] = {"nvswitch", "nvlink", "pcie"};
  static const char* topos[] = {"fat_tree", "rail_optimized"};
  json j = {{"name", c.name},
          {"gpu", gpu_to_json(c.gpu)},
          {"nodes", c.nodes},
          {"gpus_per_node", c.gpus_per_node},
          {"intra_node",
           {{"kind", fabrics[(int)c.intra.kind]},
            {"bandwidth_bytes_per_s", c.intra.bandwidth_bytes_per_s},
            {"latency_s", c.intra.latency_s},
            {"efficiency", curve_to_json(c.intra.efficiency)}}},
          {"inter_node",
           {{"nics_per_node", c.inter.nics_per_node},
            {"nic_bandwidth_bits_per_s", c.inter.nic_bandwidth_bytes_per_s * 8},
            {"topology", topos[(int)c.inter.topology]},
            {"oversubscription", c.inter.oversubscription},
            {"nodes_per_leaf", c.inter.nodes_per_leaf},
            {"latency_s", c.inter.latency_s},
            {"efficiency", curve_to_json(c.inter.efficiency)}}},
          {"host",
           {{"memory_bytes", c.host.memory_bytes},
            {"pcie_bandwidth_bytes_per_s", c.host.pcie_bandwidth_bytes_per_s},
            {"cpu_cores", c.host.cpu_cores}}},
          {"price_per_gpu_hour_usd", c.price_per_gpu_hour_usd},
          {"power_per_gpu_w", c.power_per_gpu_w}};
  if (c.host.memory_bandwidth_bytes_per_s > 0) j["host"]["memory_bandwidth_bytes_per_s"] = c.host.memory_bandwidth_bytes_per_s;
  if (c.nccl_buffer_bytes_per_communicator > 0) j["nccl_buffer_bytes_per_communicator"] = c.nccl_buffer_bytes_per_communicator;
  if (!c.nccl.version.empty() || c.nccl.collnet || !c.nccl.step_collectives || !c.nccl.overrides.empty()) {
    json n = json::object();
    if (!c.nccl.version.empty()) n["version"] = c.nccl.version;
    if (c.nccl.collnet) n["collnet"] = true;
    if (!c.nccl.step_collectives) n["step_collectives"] = false;
    if (!c.nccl.overrides.empty()) n["tuning"] = c.nccl.overrides;
    j["nccl"] = n;
  }
  return j;
}

}  // namespace tp
