// Helpers shared by the simulator tests: scenarios built in code, including an "ideal" cluster whose
// links are effectively infinite and whose GPU has flat efficiency curves and no kernel overhead, so that
// closed forms (bubble fractions, FLOP counts) can be checked exactly.
#pragma once
#include <string>

#include "models/scenario.hpp"
#include "sim/op_cost.hpp"

namespace tp::testutil {

inline json ideal_cluster(int nodes = 64, int gpus_per_node = 8) {
  json flat = json::array({json::array({1.0, 1.0})});
  json gpu = {{"name", "ideal"},
              {"matrix_flops_per_s", {{"fp32", 1e14}, {"fp16", 1e14}, {"bf16", 1e14}}},
              {"vector_flops_per_s", {{"fp32", 1e13}, {"fp16", 1e13}, {"bf16", 1e13}}},
              {"hbm_bytes", 8e10},
              {"hbm_bandwidth_bytes_per_s", 1e18},
              {"matrix_efficiency", flat},
              {"memory_efficiency", flat},
              {"kernel_overhead_s", 0}};
  return {{"gpu", gpu},
          {"nodes", nodes},
          {"gpus_per_node", gpus_per_node},
          {"intra_node", {{"kind", "nvswitch"}, {"bandwidth_bytes_per_s", 1e20}, {"latency_s", 0}, {"efficiency", flat}}},
          {"inter_node", {{"nics_per_node", gpus_per_node}, {"nic_bandwidth_bits_per_s", 8e20}, {"topology", "fat_tree"},
                          {"oversubscription", 1}, {"nodes_per_leaf", 4}, {"latency_s", 0}, {"efficiency", flat}}},
          {"host", {{"memory_bytes", 1e12}, {"pcie_bandwidth_bytes_per_s", 1e20}, {"cpu_cores", 64}}},
          {"price_per_gpu_hour_usd", 2.0},
          {"power_per_gpu_w", 500},
          // ideal: no NCCL latencies either; the collectives take the flows' (link) times
          {"nccl", {{"step_collectives", false}}}};
}

// The ideal cluster with finite NVSwitch ports (1e11 B/s) and hop latency (1 us), for collective phase tests.
inline json finite_nvswitch_cluster(int nodes = 4, int gpus_per_node = 8) {
  json c = ideal_cluster(nodes, gpus_per_node);
  c["intra_node"]["bandwidth_bytes_per_s"] = 1e11;
  c["intra_node"]["latency_s"] = 1e-6;
  return c;
}

// The ideal cluster (8 nodes x 8 GPUs) with finite NVSwitch (2e11 B/s) and NIC (4 x 200 Gb/s) links and hop
// latencies, so that collectives take time and contend; HBM at 2 TB/s.
inline json finite_links_cluster() {
  json c = ideal_cluster(8, 8);
  c["intra_node"]["bandwidth_bytes_per_s"] = 2e11;
  c["intra_node"]["latency_s"] = 3e-6;
  c["inter_node"]["nic_bandwidth_bits_per_s"] = 2e11;
  c["inter_node"]["latency_s"] = 5e-6;
  c["inter_node"]["nics_per_node"] = 4;
  c["gpu"]["hbm_bandwidth_bytes_per_s"] = 2e12;
  return c;
}

inline json gpt_model(int layers, int hidden, int heads, int vocab = 51200, int seq = 2048) {
  return {{"name", "test-gpt"}, {"layers", layers}, {"hidden", hidden}, {"heads", heads}, {"vocab", vocab},
          {"seq_len", seq}, {"activation", "gelu"}, {"tied_embeddings", true}};
}

// Plans for the simulator tests state attention "unfused" (the 2021 cost model their closed forms check) unless
// told otherwise.
inline json plan_json(int dp, int tp, int pp, int v, const char* schedule, const char* recompute = "none", bool sp = false,
                      int zero = 0, int microbatch = 1, const char* attention = "unfused") {
  return {{"dp", dp}, {"tp", tp}, {"pp", pp}, {"virtual_stages", v}, {"microbatch", microbatch}, {"schedule", schedule},
          {"sequence_parallel", sp}, {"recompute", recompute}, {"zero", zero}, {"attention", attention}};
}

// Framework "research": the simulator's tests cover every plan kind, GPipe and the seed papers' techniques included.
// The op named `name` in a pass's cost, or null.
inline const Op* find_op(const PassCost& pc, const std::string& name) {
  for (const Op& op : pc.ops)
    if (op.name == name) return &op;
  return nullptr;
}

inline Scenario make_scenario(json model, json cluster, long long batch, json plan, const char* precision = "fp16") {
  json j = {{"name", "test"},
            {"model", model},
            {"cluster", cluster},
            {"training", {{"global_batch", batch}, {"precision", precision}, {"framework", "research"}}},
            {"plan", plan}};
  return scenario_from_json(j, ".", "test");
}

// Collectives that cost nothing: build_cost_model's compute ops alone.
inline TpComm free_comm() {
  TpComm tpc;
  tpc.time_s = [](Coll, double, CommGroup) { return 0.0; };
  tpc.bytes = [](Coll, double, CommGroup) { return TierBytes{}; };
  return tpc;
}

}  // namespace tp::testutil
