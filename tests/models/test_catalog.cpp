// Every catalog entry loads through the same validating readers as user input (exact keys, ranges), and the
// catalog has what the issue lists: six GPUs, the named clusters, and the model families.
#include <gtest/gtest.h>

#include <set>

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
