// fp8 scaling recipes (training.fp8_recipe, models/fp8_recipe.hpp): the recipe's GEMM scale and cast bytes from
// the GPU profile reach the linear layers' ops; the default follows the framework; a recipe the framework does not
// run, one the GPU has no cost for, an unknown name and a bad GPU entry are refused naming the JSON path; `run`
// refuses every recipe but delayed (the executor emulates Transformer Engine's delayed scaling only); `export`
// writes the recipe in each target's own key, or refuses one the target has not.
#include <gtest/gtest.h>

#include "exec/runtime/train.hpp"
#include "export/export.hpp"
#include "sim/op_cost.hpp"
#include "sim/simulate.hpp"
#include "sim_test_util.hpp"

using namespace tp;
using namespace tp::testutil;

namespace {

// The ideal cluster's GPU with an fp8 peak 4x its bf16 one (flat curves) and three recipes.
json recipe_cluster() {
  json c = ideal_cluster();
  c["gpu"]["matrix_flops_per_s"]["fp8"] = 4e14;
  c["gpu"]["fp8_recipes"] = {{"delayed", {{"gemm_efficiency_scale", 1.0}, {"cast_bytes_per_element", 3.0}}},
                             {"tensorwise", {{"gemm_efficiency_scale", 1.0}, {"cast_bytes_per_element", 5.0}}},
                             {"rowwise", {{"gemm_efficiency_scale", 0.5}, {"cast_bytes_per_element", 8.0}}}};
  return c;
}

Scenario with_recipe(const char* recipe) {
  json model = gpt_model(2, 1024, 16, 1024, 512);
  Scenario base = make_scenario(model, recipe_cluster(), 8, plan_json(1, 2, 1, 1, "1f1b", "none", false, 0, 1, "unfused"), "fp8");
  json j = scenario_to_json(base);
  j["plan"].erase("num_microbatches");
  j["training"].erase("tokens");
  if (recipe) j["training"]["fp8_recipe"] = recipe;
  return scenario_from_json(j, ".", "test");
}

std::string load_error(const json& j) {
  try {
    scenario_from_json(j, ".", "test");
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

json h100_fp8(const char* framework, const char* recipe) {
  json j = {{"model", "gpt3-1.3b"}, {"cluster", "dgx-h100"},
            {"training", {{"global_batch", 8}, {"seq_len", 2048}, {"precision", "fp8"}}},
            {"plan", {{"dp", 8}, {"tp", 1}, {"pp", 1}}}};
  if (framework) j["training"]["framework"] = framework;
  if (recipe) j["training"]["fp8_recipe"] = recipe;
  return j;
}

}  // namespace

TEST(Fp8Recipe, GemmScaleAndCastBytesComeFromTheGpuProfile) {
  const double n = 512, h = 1024, t = 2;
  CostModel d = build_cost_model(with_recipe(nullptr), free_comm());  // megatron-core's default: delayed
  CostModel tw = build_cost_model(with_recipe("tensorwise"), free_comm());
  CostModel rw = build_cost_model(with_recipe("rowwise"), free_comm());
  for (const char* name : {"qkv", "proj", "fc1", "fc2"}) {
    SCOPED_TRACE(name);
    const Op* a = find_op(d.layer_fwd, name);
    ASSERT_TRUE(a);
    EXPECT_DOUBLE_EQ(a->time_s, a->flops / 4e14);
    EXPECT_DOUBLE_EQ(find_op(tw.layer_fwd, name)->time_s, a->time_s);       // per-tensor GEMMs either way
    EXPECT_DOUBLE_EQ(find_op(rw.layer_fwd, name)->time_s, 2 * a->time_s);   // half the fp8 curve
    const std::string dg = std::string(name) + ".dgrad";
    EXPECT_DOUBLE_EQ(find_op(rw.layer_bwd, dg)->time_s, 2 * find_op(d.layer_bwd, dg)->time_s);
  }
  const double qkv_elems = n * h + h * 3 * h / t;
  EXPECT_DOUBLE_EQ(find_op(d.layer_fwd, "qkv.fp8_cast")->bytes, 3 * qkv_elems);
  EXPECT_DOUBLE_EQ(find_op(tw.layer_fwd, "qkv.fp8_cast")->bytes, 5 * qkv_elems);
  EXPECT_DOUBLE_EQ(find_op(rw.layer_fwd, "qkv.fp8_cast")->bytes, 8 * qkv_elems);
  EXPECT_DOUBLE_EQ(find_op(rw.layer_bwd, "fc2.fp8_cast.bwd")->bytes, 8 * n * h);
  // Attention and the LM head are bf16 under every recipe.
  EXPECT_DOUBLE_EQ(find_op(rw.layer_fwd, "attn.qk")->time_s, find_op(d.layer_fwd, "attn.qk")->time_s);
  EXPECT_DOUBLE_EQ(find_op(rw.head_fwd, "lm_head")->time_s, find_op(d.head_fwd, "lm_head")->time_s);
}

TEST(Fp8Recipe, StepTimeOrdersTheCatalogRecipesOnAnH100) {
  auto step = [](const char* fw, const char* recipe) {
    return simulate(scenario_from_json(h100_fp8(fw, recipe), ".", "test")).step_time_s;
  };
  const double tensorwise = step("torchtitan", "tensorwise"), rowwise = step("torchtitan", "rowwise");
  EXPECT_LT(tensorwise, rowwise);                                 // row-scaled GEMMs at a fraction of the curve
  EXPECT_DOUBLE_EQ(step("torchtitan", nullptr), tensorwise);      // torchtitan's default recipe
  EXPECT_LT(step(nullptr, "delayed"), step(nullptr, "tensorwise"));  // the amax pass
  EXPECT_DOUBLE_EQ(step(nullptr, nullptr), step(nullptr, "delayed"));  // megatron-core's default
  // Outside fp8 the recipe changes nothing.
  json bf = h100_fp8("torchtitan", "rowwise");
  bf["training"]["precision"] = "bf16";
  json bt = bf;
  bt["training"]["fp8_recipe"] = "tensorwise";
  EXPECT_DOUBLE_EQ(simulate(scenario_from_json(bf, ".", "test")).step_time_s, simulate(scenario_from_json(bt, ".", "test")).step_time_s);
}

TEST(Fp8Recipe, RefusalsNameThePathAndWhatWouldRun) {
  std::string e = load_error(h100_fp8(nullptr, "rowwise"));  // Megatron-Core has no rowwise recipe
  EXPECT_NE(e.find("$.training.fp8_recipe: the framework megatron-core runs the fp8 recipes \"delayed\", \"tensorwise\""),
            std::string::npos) << e;
  e = load_error(h100_fp8(nullptr, "mxfp8"));  // Megatron-Core runs it, the H100 has no cost (no MX tensor cores)
  EXPECT_NE(e.find("$.training.fp8_recipe: the GPU H100-SXM-80GB has no cost for the fp8 recipe \"mxfp8\""), std::string::npos) << e;
  e = load_error(h100_fp8(nullptr, "int8"));
  EXPECT_NE(e.find("$.training.fp8_recipe"), std::string::npos) << e;
  EXPECT_NE(e.find("\"blockwise\""), std::string::npos) << e;  // the list of names
  json bad = h100_fp8(nullptr, nullptr);
  bad["cluster"] = recipe_cluster();
  bad["cluster"]["gpu"]["fp8_recipes"]["rowwise"]["gemm_efficiency_scale"] = 0;
  e = load_error(bad);
  EXPECT_NE(e.find("gpu.fp8_recipes.rowwise.gemm_efficiency_scale"), std::string::npos) << e;
  bad["cluster"]["gpu"]["fp8_recipes"] = {{"perrow", {{"gemm_efficiency_scale", 1}, {"cast_bytes_per_element", 3}}}};
  e = load_error(bad);
  EXPECT_NE(e.find("gpu.fp8_recipes.perrow: unknown fp8 recipe"), std::string::npos) << e;
}

TEST(Fp8Recipe, RunEmulatesDelayedScalingOnly) {
  EXPECT_NO_THROW(exec::check_runnable(scenario_from_json(h100_fp8(nullptr, nullptr), ".", "test")));
  try {
    exec::check_runnable(scenario_from_json(h100_fp8("torchtitan", nullptr), ".", "test"));
    ADD_FAILURE() << "run accepted torchtitan's tensorwise recipe";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("$.training.fp8_recipe \"tensorwise\" (the framework's default)"), std::string::npos)
        << e.what();
  }
}

TEST(Fp8Recipe, GivenRecipeRoundTripsAndTheDefaultFollowsTheFramework) {
  Scenario sc = scenario_from_json(h100_fp8("torchtitan", "rowwise"), ".", "test");
  json j = scenario_to_json(sc);
  EXPECT_EQ(j["training"]["fp8_recipe"], "rowwise");
  Scenario dflt = scenario_from_json(h100_fp8("fsdp", nullptr), ".", "test");
  EXPECT_EQ(dflt.training.fp8_recipe, "delayed");  // llm-foundry's te.Linear
  EXPECT_FALSE(scenario_to_json(dflt)["training"].contains("fp8_recipe"));
  set_framework(dflt, scenario_from_json(h100_fp8("torchtitan", nullptr), ".", "test").framework);
  EXPECT_EQ(dflt.training.fp8_recipe, "tensorwise");
}

TEST(Fp8Recipe, ExportWritesTheRecipeInEachTargetsKey) {
  using namespace tp::exporting;
  auto has = [](const std::string& text, const std::string& what) { return text.find(what) != std::string::npos; };
  Scenario tw = scenario_from_json(h100_fp8(nullptr, "tensorwise"), ".", "test");
  EXPECT_TRUE(has(export_plan(tw, Target::megatron, "s.json"), "--fp8-recipe tensorwise"));
  EXPECT_TRUE(has(export_plan(tw, Target::nemo, "s.json"), "trainer.plugins.fp8_recipe=tensorwise"));
  EXPECT_FALSE(has(export_plan(tw, Target::nemo, "s.json"), "fp8_amax_history_len"));  // delayed scaling's only
  Scenario rw = scenario_from_json(h100_fp8("torchtitan", "rowwise"), ".", "test");
  json llama = h100_fp8("torchtitan", "rowwise");
  llama["model"] = "llama3-8b";
  Scenario rl = scenario_from_json(llama, ".", "test");
  EXPECT_TRUE(has(export_plan(rl, Target::torchtitan, "s.json"), "recipe_name = \"rowwise\""));
  try {
    export_plan(rw, Target::megatron, "s.json");
    ADD_FAILURE() << "Megatron-LM export of a rowwise recipe";
  } catch (const InputError& e) {
    EXPECT_TRUE(has(e.what(), "$.training.fp8_recipe")) << e.what();
  }
  // A recipe the scenario did not name becomes TorchTitan's own default; one it named and torchao lacks is refused.
  llama["training"]["framework"] = "megatron-core";
  llama["training"].erase("fp8_recipe");
  EXPECT_FALSE(has(export_plan(scenario_from_json(llama, ".", "test"), Target::torchtitan, "s.json"), "recipe_name"));
  llama["training"]["fp8_recipe"] = "delayed";
  try {
    export_plan(scenario_from_json(llama, ".", "test"), Target::torchtitan, "s.json");
    ADD_FAILURE() << "TorchTitan export of delayed scaling";
  } catch (const InputError& e) {
    EXPECT_TRUE(has(e.what(), "$.training.fp8_recipe")) << e.what();
  }
}
