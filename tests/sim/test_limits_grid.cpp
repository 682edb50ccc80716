// The numeric grid of issue 44 (item 2): every cluster and GPU speed, size, latency, efficiency and price key at
// the ends of its range and at tiny positive values, on three plans (dp 1; dp 2; pp 2). Each case is either
// refused as bad input (InputError: exit 2) or simulates to finite numbers: no exception, no null (NaN or
// infinity) in the --json, no "inf" or "nan" in the summary. Before, fp32 at 1e-300 (in range) printed "inf days"
// and "-nan %", and with dp 2 or pp 2 ended in "simulation deadlock" (exit 1).
#include <gtest/gtest.h>

#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "models/catalog.hpp"
#include "models/scenario.hpp"
#include "sim/output.hpp"
#include "sim/simulate.hpp"

using namespace tp;

namespace {

json base_scenario(int dp, int pp) {
  json cluster = *catalog_find("clusters", "selene");
  cluster["gpu"] = *catalog_find("gpus", "A100-SXM4-80GB");
  cluster["nodes"] = 2;
  cluster["inter_node"]["nodes_per_leaf"] = 2;
  return {{"name", "limits-grid"},
          {"model", "gpt3-125m"},
          {"cluster", cluster},
          {"training", {{"global_batch", 8}, {"seq_len", 2048}, {"tokens", 1e9}, {"precision", "bf16"}}},
          {"plan", {{"dp", dp}, {"tp", 1}, {"pp", pp}, {"microbatch", 1}, {"schedule", "1f1b"}, {"zero", 1}}}};
}

// The JSON pointers of the grid's keys.
const std::vector<std::string> kKeys = {
    "/cluster/gpu/matrix_flops_per_s/fp32", "/cluster/gpu/matrix_flops_per_s/bf16",
    "/cluster/gpu/vector_flops_per_s/fp32", "/cluster/gpu/vector_flops_per_s/bf16",
    "/cluster/gpu/hbm_bytes", "/cluster/gpu/hbm_bandwidth_bytes_per_s", "/cluster/gpu/kernel_overhead_s",
    "/cluster/gpu/power_w", "/cluster/gpu/sm_count", "/cluster/gpu/attention_tile_rows",
    "/cluster/gpu/matrix_efficiency/0/1", "/cluster/gpu/memory_efficiency/0/1",
    "/cluster/gpu/attention_efficiency/0/1", "/cluster/intra_node/bandwidth_bytes_per_s",
    "/cluster/intra_node/latency_s", "/cluster/intra_node/efficiency/0/1",
    "/cluster/inter_node/nic_bandwidth_bits_per_s", "/cluster/inter_node/latency_s",
    "/cluster/inter_node/oversubscription", "/cluster/inter_node/efficiency/0/1",
    "/cluster/host/pcie_bandwidth_bytes_per_s", "/cluster/host/memory_bandwidth_bytes_per_s",
    "/cluster/price_per_gpu_hour_usd", "/cluster/power_per_gpu_w", "/cluster/nccl_buffer_bytes_per_communicator",
    "/training/tokens"};

// Each key's documented range ends plus tiny and huge values (refused or finite, never inf / nan).
const std::vector<double> kValues = {0, 4.9e-324, 1e-300, 1e-12, 1e-6, 1, 1e6, 1e15, 1e21, 1e22, 1e30};

// A null (NaN or infinity) anywhere in the JSON result, as its path.
std::string first_null(const json& v, const std::string& path = "$") {
  if (v.is_null()) return path;
  if (v.is_number_float() && !std::isfinite(v.get<double>())) return path;
  if (v.is_object())
    for (auto it = v.begin(); it != v.end(); ++it)
      if (std::string p = first_null(it.value(), path + "." + it.key()); !p.empty()) return p;
  if (v.is_array())
    for (size_t i = 0; i < v.size(); ++i)
      if (std::string p = first_null(v[i], path + "[" + std::to_string(i) + "]"); !p.empty()) return p;
  return "";
}

}  // namespace

TEST(LimitsGrid, EveryClusterKeyRefusedOrFinite) {
  const std::regex bad(R"((^|[^A-Za-z])-?(inf|nan)([^A-Za-z]|$))", std::regex::icase);
  int simulated = 0, refused = 0;
  for (auto [dp, pp] : std::vector<std::pair<int, int>>{{1, 1}, {2, 1}, {1, 2}})
    for (const std::string& key : kKeys)
      for (double x : kValues) {
        json j = base_scenario(dp, pp);
        j[json::json_pointer(key)] = x;
        const std::string where = key + " = " + json(x).dump() + ", dp " + std::to_string(dp) + ", pp " + std::to_string(pp);
        Scenario sc;
        try {
          sc = scenario_from_json(j, ".", "grid");
        } catch (const InputError&) {
          ++refused;
          continue;
        }
        try {
          Result r = simulate(sc);
          ++simulated;
          const json out = result_to_json(r);
          EXPECT_EQ(first_null(out), "") << where;
          std::ostringstream os;
          print_summary(os, r);
          EXPECT_FALSE(std::regex_search(os.str(), bad)) << where << "\n" << os.str();
        } catch (const std::exception& e) {
          ADD_FAILURE() << where << ": " << e.what();
        }
      }
  EXPECT_GT(simulated, 0);
  EXPECT_GT(refused, 0);
}
