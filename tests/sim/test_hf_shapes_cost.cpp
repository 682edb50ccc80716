// Cost-model checks of the Hugging Face architecture fields (sim/op_cost.cpp, op_cost_2d.cpp): an explicit
// head_dim sets the q width of the qkv / proj GEMMs and the attention batched GEMMs; an explicit head_dim equal
// to hidden / heads changes nothing; the per-GPU parameters at tp = 1 equal the closed forms of total_params
// (biases on SwiGLU models, expert and shared-expert sizes); shared experts add their dense-MLP FLOPs to every
// MoE layer; Optimus 2D at q = 1 equals 1D at tp = 1 for these shapes.
#include <gtest/gtest.h>

#include "sim/op_cost.hpp"
#include "sim/program.hpp"
#include "sim_test_util.hpp"

using namespace tp;
using namespace tp::testutil;

namespace {

// SwiGLU, h = 512, a = 8, head_dim 96 (q width 768 != h), GQA 2 KV heads, every bias; s = 256, micro-batch 2.
json shaped_model() {
  return {{"name", "shaped"}, {"layers", 4}, {"hidden", 512}, {"heads", 8}, {"kv_heads", 2}, {"head_dim", 96},
          {"ffn_hidden", 1024}, {"vocab", 1000}, {"seq_len", 256}, {"activation", "swiglu"}, {"tied_embeddings", false},
          {"qkv_bias", true}, {"proj_bias", true}, {"mlp_bias", true}};
}

Scenario scenario_of(json model, int tp, bool sp = false, const char* tp_mode = "1d") {
  json plan = plan_json(1, tp, 1, 1, "1f1b", "none", sp, 0, 2);
  plan["tp_mode"] = tp_mode;
  return make_scenario(model, ideal_cluster(), 8, plan, "bf16");
}

CostModel cost_of(const Scenario& sc) { return build_program(sc, false).cm; }

const Op& op_named(const PassCost& pc, const std::string& name) {
  for (const Op& op : pc.ops)
    if (op.name == name) return op;
  ADD_FAILURE() << "no op " << name;
  return pc.ops.front();
}

double flops_with_prefix(const PassCost& pc, const std::string& prefix) {
  double sum = 0;
  for (const Op& op : pc.ops)
    if (op.name.rfind(prefix, 0) == 0) sum += op.flops;
  return sum;
}

}  // namespace

TEST(HfShapesCost, HeadDimSetsTheQWidthOfEveryAttentionGemm) {
  const double n = 2 * 256, h = 512, qw = 8 * 96, kvd = 2 * 96, t = 2, s = 256, dh = 96;
  CostModel cm = cost_of(scenario_of(shaped_model(), 2));
  EXPECT_DOUBLE_EQ(op_named(cm.layer_fwd, "qkv").flops, 2 * n * h * (qw + 2 * kvd) / t);
  EXPECT_DOUBLE_EQ(op_named(cm.layer_fwd, "proj").flops, 2 * n * (qw / t) * h);
  EXPECT_DOUBLE_EQ(op_named(cm.layer_fwd, "attn.qk").flops, 2 * (2 * 8 / t) * s * dh * s);
  EXPECT_DOUBLE_EQ(op_named(cm.layer_bwd, "proj.wgrad").flops, 2 * (qw / t) * n * h);
  EXPECT_DOUBLE_EQ(op_named(cm.layer_bwd, "qkv.dgrad").flops, 2 * n * ((qw + 2 * kvd) / t) * h);
}

TEST(HfShapesCost, DefaultHeadDimGivenExplicitlyChangesNothing) {
  json plain = shaped_model();
  plain.erase("head_dim");
  json explicit_default = plain;
  explicit_default["head_dim"] = 64;  // 512 / 8
  for (int tp : {1, 2}) {
    CostModel a = cost_of(scenario_of(plain, tp, tp > 1)), b = cost_of(scenario_of(explicit_default, tp, tp > 1));
    EXPECT_EQ(a.layer_fwd.flops, b.layer_fwd.flops);
    EXPECT_EQ(a.layer_bwd.time_s, b.layer_bwd.time_s);
    EXPECT_EQ(a.layer_stored_bytes, b.layer_stored_bytes);
    EXPECT_EQ(a.layer_params, b.layer_params);
  }
}

TEST(HfShapesCost, ParametersPerGpuMatchTheClosedForms) {
  Scenario sc = scenario_of(shaped_model(), 1);
  CostModel cm = cost_of(sc);
  EXPECT_DOUBLE_EQ(cm.layer_params, layer_params_full(sc.model));
  EXPECT_DOUBLE_EQ(4 * cm.layer_params + cm.embed_params + cm.head_params, total_params(sc.model));
  // With tp = 2 the sharded part halves; the replicated output / fc2 biases and norms do not.
  CostModel cm2 = cost_of(scenario_of(shaped_model(), 2));
  const double repl = 512 + 512 + 2 * 512;
  EXPECT_DOUBLE_EQ(cm2.layer_params, (layer_params_full(sc.model) - repl) / 2 + repl);
  // MoE with expert and shared-expert sizes of their own.
  json moe = shaped_model();
  moe["moe"] = {{"experts", 4}, {"top_k", 2}, {"ffn_hidden", 384}, {"shared_ffn_hidden", 768}};
  Scenario ms = scenario_of(moe, 1);
  CostModel mc = cost_of(ms);
  EXPECT_DOUBLE_EQ(mc.moe_params, moe_layer_params_full(ms.model));
  EXPECT_DOUBLE_EQ(mc.moe_expert_params, 4 * expert_params_full(ms.model));
  EXPECT_DOUBLE_EQ(expert_params_full(ms.model), 512.0 * 768 + 384 * 512 + 768 + 512);
}

TEST(HfShapesCost, SharedExpertsAddADenseMlpPerMoeLayer) {
  json moe = shaped_model();
  moe["moe"] = {{"experts", 4}, {"top_k", 2}, {"ffn_hidden", 384}};
  json shared = moe;
  shared["moe"]["shared_ffn_hidden"] = 768;
  for (bool sp : {false, true}) {
    CostModel a = cost_of(scenario_of(moe, 2, sp)), b = cost_of(scenario_of(shared, 2, sp));
    const double n = 2 * 256, h = 512, fs = 768, t = 2;
    const double fwd = 2 * n * h * (2 * fs) / t + 2 * n * (fs / t) * h;  // fc1 (gate + up) and fc2
    EXPECT_DOUBLE_EQ(flops_with_prefix(b.moe_fwd, "moe.shared."), fwd);
    EXPECT_DOUBLE_EQ(flops_with_prefix(b.moe_bwd, "moe.shared."), 2 * fwd);  // dgrad + wgrad
    EXPECT_NEAR(b.moe_fwd.flops - a.moe_fwd.flops, fwd, 1e-6 * fwd);
    EXPECT_GT(b.moe_stored_bytes, a.moe_stored_bytes);
    EXPECT_GT(b.model_flops_per_step, a.model_flops_per_step);
  }
}

TEST(HfShapesCost, Optimus2dAtQ1EqualsTp1) {
  CostModel d1 = cost_of(scenario_of(shaped_model(), 1)), d2 = cost_of(scenario_of(shaped_model(), 1, false, "2d"));
  EXPECT_DOUBLE_EQ(d2.layer_fwd.flops, d1.layer_fwd.flops);
  EXPECT_DOUBLE_EQ(d2.layer_bwd.flops, d1.layer_bwd.flops);
  EXPECT_DOUBLE_EQ(d2.layer_params, d1.layer_params);
  EXPECT_DOUBLE_EQ(d2.layer_stored_bytes, d1.layer_stored_bytes);
}
