// plan.recompute_layers: N of the L layers recompute as plan.recompute says, spread evenly (models/plan.hpp
// layer_recomputes); the others keep their activations. The simulator's recompute work and stored activations
// are the share of full recompute's and of none's; the formula places 1 of 4 on layer 3, 2 of 4 on layers 1 and 3.
#include <gtest/gtest.h>

#include "sim/simulate.hpp"
#include "sim_test_util.hpp"

using namespace tp;
using namespace tp::testutil;

namespace {

Result sim(const char* recompute, int recompute_layers, int pp = 1) {
  json plan = plan_json(8 / pp, 1, pp, 1, "1f1b", recompute, false, 0, 1, "flash");
  if (recompute_layers >= 0) plan["recompute_layers"] = recompute_layers;
  return simulate(make_scenario(gpt_model(8, 1024, 16, 32000, 2048), finite_links_cluster(), 64, plan, "bf16"));
}

}  // namespace

TEST(RecomputeLayers, TheFormulaSpreadsTheLayersEvenly) {
  EXPECT_FALSE(layer_recomputes(1, 4, 0));
  EXPECT_TRUE(layer_recomputes(1, 4, 3));
  std::vector<int> two;
  for (int l = 0; l < 4; ++l) if (layer_recomputes(2, 4, l)) two.push_back(l);
  EXPECT_EQ(two, (std::vector<int>{1, 3}));
  EXPECT_EQ(recomputed_layers_between(3, 8, 0, 8), 3);
  EXPECT_EQ(recomputed_layers_between(-1, 8, 2, 5), 3);  // every layer
  EXPECT_EQ(recomputed_layers_between(0, 8, 0, 8), 0);
}

TEST(RecomputeLayers, RecomputeWorkAndActivationsAreTheShare) {
  for (int pp : {1, 2}) {
    SCOPED_TRACE(pp);
    const Result none = sim("none", -1, pp), full = sim("full", -1, pp), half = sim("full", 4, pp), zero = sim("full", 0, pp);
    ASSERT_GT(full.breakdown.recompute, 0);
    EXPECT_NEAR(half.breakdown.recompute / full.breakdown.recompute, 0.5, 1e-9);
    EXPECT_EQ(zero.breakdown.recompute, 0.0);
    EXPECT_NEAR(zero.step_time_s / none.step_time_s, 1.0, 1e-12);
    EXPECT_LT(half.step_time_s, full.step_time_s);
    EXPECT_GT(half.step_time_s, none.step_time_s);
    const double a_none = none.ranks[0].stored_peak_bytes, a_full = full.ranks[0].stored_peak_bytes;
    const double a_half = half.ranks[0].stored_peak_bytes;
    EXPECT_LT(a_full, a_half);
    EXPECT_LT(a_half, a_none);
  }
}

TEST(RecomputeLayers, RefusedWithoutAPerLayerRecomputeOrBeyondTheLayers) {
  for (auto [rc, n, says] : {std::tuple{"none", 2, "needs recompute \"full\""}, std::tuple{"selective", 2, "needs recompute"},
                             std::tuple{"full", 9, "at most the model's layers (8)"}}) {
    json plan = plan_json(8, 1, 1, 1, "1f1b", rc, false, 0, 1, "flash");
    plan["recompute_layers"] = n;
    try {
      make_scenario(gpt_model(8, 1024, 16, 32000, 2048), finite_links_cluster(), 64, plan, "bf16");
      ADD_FAILURE() << rc << " " << n;
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("$.plan.recompute_layers"), std::string::npos) << e.what();
    }
  }
}
