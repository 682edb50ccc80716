// Every catalog entry loads through the same validating readers as user input (exact keys, ranges), and the
// catalog has what the issue lists: six GPUs, the named clusters, and the model families.
#include <gtest/gtest.h>

#include <cstdio>
#include <set>
#include <sys/wait.h>

#include "models/catalog.hpp"
#include "models/scenario.hpp"

using namespace tp;

TEST(Catalog, EveryEntryLoadsAndValidates) {
  for (const std::string& c : catalog_names("clusters")) {
    for (const std::string& m : catalog_names("models")) {
      json j = {{"model", m}, {"cluster", c}, {"training", {{"global_batch", 1}}}, {"plan", {{"dp", 1}, {"tp", 1}, {"pp", 1}}}};
      try {
        Scenario sc = scenario_from_json(j, ".", "catalog");
        EXPECT_GT(sc.cluster.gpu.hbm_bytes, 0);
        EXPECT_GT(sc.model.layers, 0);
      } catch (const InputError& e) {
        // A catalog entry may legitimately not support a precision (bf16 on V100): default fp16 must work.
        ADD_FAILURE() << c << " / " << m << ": " << e.what();
      }
    }
  }
}

TEST(Catalog, HasTheListedEntries) {
  auto has = [](const char* kind, std::set<std::string> want) {
    std::set<std::string> names;
    for (auto& n : catalog_names(kind)) names.insert(n);
    for (auto& w : want) EXPECT_TRUE(names.count(w)) << kind << " " << w;
  };
  has("gpus", {"V100-SXM2-32GB", "A100-SXM4-40GB", "A100-SXM4-80GB", "H100-SXM-80GB", "H200-SXM-141GB", "Quadro-RTX-5000-16GB"});
  has("clusters", {"selene", "dgx-h100", "dgx-h200", "frontera-rtx", "v100-m6", "h200-single"});
  has("models", {"gpt3-125m", "gpt3-175b", "gpt2-124m", "gpt2-1.5b", "megatron-1.7b", "megatron-1t", "megatron-22b",
                 "megatron-530b", "llama3-8b", "llama3-70b", "llama3-405b"});
}

// A misspelt catalog name gets the closest name as a suggestion; a word far from every name gets none.
TEST(Catalog, UnknownNamesSuggestTheClosest) {
  EXPECT_EQ(closest_name("selen", catalog_names("clusters")), "selene");
  EXPECT_EQ(closest_name("DGX-H10", catalog_names("clusters")), "dgx-h100");
  EXPECT_EQ(closest_name("gpt3-1.3bb", catalog_names("models")), "gpt3-1.3b");
  EXPECT_EQ(closest_name("quantum-computer", catalog_names("clusters")), "");
  json j = {{"model", "llama3-8bb"}, {"cluster", "selen"}, {"training", {{"global_batch", 1}}},
            {"plan", {{"dp", 1}, {"tp", 1}, {"pp", 1}}}};
  try {
    scenario_from_json(j, ".", "typo");
    ADD_FAILURE() << "accepted unknown names";
  } catch (const InputError& e) {
    std::string all;
    for (auto& m : e.messages) all += m + "\n";
    EXPECT_NE(all.find("$.model: expected a model catalog name"), std::string::npos) << all;
    EXPECT_NE(all.find("did you mean \"llama3-8b\"?"), std::string::npos) << all;
    EXPECT_NE(all.find("did you mean \"selene\"?"), std::string::npos) << all;
  }
}

// `trainplan catalog` prints tables (peaks per precision, HBM; nodes, fabrics, price; shapes and parameters)
// and the same as JSON with --json -.
TEST(Catalog, CommandPrintsTablesAndJson) {
  auto run = [](const std::string& args) {
    std::string out;
    FILE* p = popen((std::string(TP_BINARY) + " catalog " + args + " 2>&1").c_str(), "r");
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
    int rc = pclose(p);
    return std::make_pair(WEXITSTATUS(rc), out);
  };
  auto [rc, text] = run("");
  EXPECT_EQ(rc, 0);
  EXPECT_NE(text.find("fp8 TF/s"), std::string::npos);
  EXPECT_NE(text.find("1979.0"), std::string::npos);  // H100 fp8 dense peak
  EXPECT_NE(text.find("8 x 400 Gb/s rail_optimized"), std::string::npos);
  EXPECT_NE(text.find("70.55B"), std::string::npos);  // llama3-70b parameters
  EXPECT_NE(text.find("1.71B"), std::string::npos);   // m6-10t active parameters
  auto [rc2, js] = run("models --json -");
  EXPECT_EQ(rc2, 0);
  json j = json::parse(js);
  ASSERT_TRUE(j.contains("models"));
  EXPECT_FALSE(j.contains("gpus"));
  bool found = false;
  for (const json& m : j["models"])
    if (m["name"] == "m6-10t") { found = true; EXPECT_GT(m["params_total"].get<double>(), 1e13); EXPECT_EQ(m["experts"], 10240); }
  EXPECT_TRUE(found);
  EXPECT_EQ(run("gpu").first, 2);
}
