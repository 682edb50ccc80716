// The accepted range of every numeric scenario key (models/limits.hpp) is documented: docs/limits.md has one row
// per entry with the same range text the error messages use, and every range reaches its bounds exactly (a value
// on the bound loads, one just past it is refused with the JSON path and the range).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>

#include "models/catalog.hpp"
#include "models/limits.hpp"
#include "models/scenario.hpp"

using namespace tp;

namespace {

std::string doc_row(const Limit& l) { return std::string("| `") + l.key + "` | " + limit_text(l) + " | " + l.why + " |"; }

// One error message for `text`, or "" when it loads.
std::string load_error(const json& j) {
  try {
    scenario_from_json(j, ".", "t");
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

json small() {
  return {{"model", {{"layers", 2}, {"hidden", 64}, {"heads", 4}, {"vocab", 256}, {"seq_len", 64}}},
          {"cluster", "selene"},
          {"training", {{"global_batch", 8}, {"seq_len", 64}}},
          {"plan", {{"dp", 1}, {"tp", 1}, {"pp", 1}}}};
}

}  // namespace

TEST(Limits, DocsListEveryRange) {
  std::ifstream f(std::filesystem::path(TP_SOURCE_DIR) / "docs" / "limits.md");
  ASSERT_TRUE(f.good()) << "docs/limits.md missing";
  std::stringstream ss;
  ss << f.rdbuf();
  const std::string doc = ss.str();
  std::string missing;
  for (const Limit* l : kAllLimits)
    if (doc.find(doc_row(*l)) == std::string::npos) missing += doc_row(*l) + "\n";
  EXPECT_TRUE(missing.empty()) << "docs/limits.md lacks (or states differently) these rows:\n" << missing;
}

TEST(Limits, RangeTextAndBounds) {
  EXPECT_EQ(limit_text(lim::layers), "an integer in [1, 10000]");
  EXPECT_EQ(limit_text(lim::tokens), "a number in (0, 1e+16]");
  EXPECT_EQ(limit_text(lim::hbm_bytes), "a number in [1, 1e+15]");
  EXPECT_TRUE(within(lim::layers, 10000));
  EXPECT_FALSE(within(lim::layers, 10001));
  EXPECT_FALSE(within(lim::layers, 2.5));
  EXPECT_FALSE(within(lim::tokens, 0));
  EXPECT_TRUE(within(lim::tokens, 1e16));
  EXPECT_FALSE(within(lim::hbm_bw, std::numeric_limits<double>::infinity()));
}

// A value on each bound of a few keys loads; one past it is refused naming the path and the range.
TEST(Limits, ScenarioKeysAreBoundedOnBothSides) {
  struct Case { std::vector<std::string> path; const Limit& l; };
  const std::vector<Case> cases = {
      {{"model", "layers"}, lim::layers},       {{"model", "vocab"}, lim::vocab},
      {{"training", "global_batch"}, lim::global_batch}, {{"plan", "virtual_stages"}, lim::virtual_stages}};
  for (const Case& c : cases) {
    json j = small();
    j[c.path[0]][c.path[1]] = c.l.hi + 1;
    std::string err = load_error(j);
    std::string where = "$." + c.path[0] + "." + c.path[1];
    EXPECT_NE(err.find(where + ": expected " + limit_text(c.l)), std::string::npos) << err;
  }
  json j = small();
  j["model"]["vocab"] = lim::vocab.hi;  // on the bound: in range (other checks may still apply)
  EXPECT_EQ(load_error(j).find("$.model.vocab"), std::string::npos);
  j = small();
  j["cluster"] = "selene";
  j["training"]["tokens"] = 1e16;
  EXPECT_EQ(load_error(j), "");
  j["training"]["tokens"] = 1.0001e16;
  EXPECT_NE(load_error(j).find("$.training.tokens: expected a number in (0, 1e+16]"), std::string::npos);
}

// The NCCL, interference and fitted-profile keys take their ranges from the one table too: one past the bound is
// refused naming the JSON path and the range.
TEST(Limits, NcclInterferenceAndFitKeysAreBounded) {
  struct Case { const char* pointer; double value; const char* where; const Limit& l; };
  const Case cases[] = {
      {"/cluster/gpu/compute_capability", 21, "$.cluster.gpu.compute_capability", lim::compute_capability},
      {"/cluster/gpu/compute_slowdown_under_comm", 1.5, "$.cluster.gpu.compute_slowdown_under_comm", lim::comm_slowdown},
      {"/cluster/nccl/tuning/pipeline_fill/net_hop_us", 2e6, "$.cluster.nccl.tuning.pipeline_fill.net_hop_us", lim::nccl_tuning},
      {"/cluster/nccl/tuning/net_overhead_us", -1, "$.cluster.nccl.tuning.net_overhead_us", lim::nccl_tuning},
      {"/cluster/nccl/tuning/ring_max_channels", 65, "$.cluster.nccl.tuning.ring_max_channels", lim::nccl_channels},
      {"/training/framework/fitted/network_efficiency_scale", 3, "$.training.framework.fitted.network_efficiency_scale", lim::fit_scale},
      {"/training/framework/fitted/step_overhead_s", 4000, "$.training.framework.fitted.step_overhead_s", lim::fit_overhead}};
  for (const Case& c : cases) {
    SCOPED_TRACE(c.where);
    json j = small();
    j["cluster"] = *catalog_find("clusters", "dgx-h100");
    if (j["cluster"]["gpu"].is_string()) j["cluster"]["gpu"] = *catalog_find("gpus", j["cluster"]["gpu"].get<std::string>());
    j["training"]["framework"] = *catalog_find("frameworks", "megatron-core");
    j[json::json_pointer(c.pointer)] = c.value;
    const std::string err = load_error(j);
    EXPECT_NE(err.find(std::string(c.where) + ": expected " + limit_text(c.l)), std::string::npos) << err;
  }
}
