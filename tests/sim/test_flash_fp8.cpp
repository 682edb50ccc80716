// Closed-form checks of flash attention (plan.attention) and fp8 training (training.precision "fp8"):
// flash FLOPs against the unfused score GEMMs, stored bytes without the s x s terms (Korthikanti's 5as/h term),
// selective recompute with nothing to recompute, fp8 GEMMs at the fp8 peak with their casts, fp8 stored inputs
// and weight copies, the fp8 refusals (A100, `trainplan run`), and the attention key's JSON round trip.
#include <gtest/gtest.h>

#include "exec/runtime/train.hpp"
#include "sim/op_cost.hpp"
#include "sim/program.hpp"
#include "sim_test_util.hpp"

using namespace tp;
using namespace tp::testutil;

namespace {

CostModel cost(const Scenario& sc) { return build_cost_model(sc, free_comm()); }

// GPT-3 175B shape at tp 8 (Korthikanti's configuration), 2 layers to keep it small.
Scenario gpt175(const char* recompute, bool sp, const char* attention, const char* precision = "fp16") {
  return make_scenario(gpt_model(2, 12288, 96), ideal_cluster(), 8,
                       plan_json(1, 8, 1, 1, "1f1b", recompute, sp, 0, 1, attention), precision);
}

// The ideal cluster's GPU with an fp8 peak 4x its bf16 one (flat curves: times are FLOPs / peak).
json fp8_cluster() {
  json c = ideal_cluster();
  c["gpu"]["matrix_flops_per_s"]["fp8"] = 4e14;
  return c;
}

}  // namespace

TEST(Flash, CausalFlopsAreHalfTheUnfusedScoreGemms) {
  CostModel un = cost(gpt175("none", false, "unfused")), fl = cost(gpt175("none", false, "flash"));
  const Op* qk = find_op(un.layer_fwd, "attn.qk");
  const Op* av = find_op(un.layer_fwd, "attn.av");
  const Op* f = find_op(fl.layer_fwd, "attn.flash");
  const Op* fb = find_op(fl.layer_bwd, "attn.flash.bwd");
  ASSERT_TRUE(qk && av && f && fb);
  EXPECT_DOUBLE_EQ(f->flops, 0.5 * (qk->flops + av->flops));
  EXPECT_DOUBLE_EQ(fb->flops, 2.5 * f->flops);  // score recompute + dV, dP, dQ, dK: 5 GEMMs of the forward's 2
  EXPECT_EQ(f->cls, OpClass::attention);
  // No s x s op is left: no softmax, dropout or score GEMMs.
  for (const PassCost* pc : {&fl.layer_fwd, &fl.layer_bwd})
    for (const Op& op : pc->ops) EXPECT_TRUE(op.name.rfind("attn.", 0) != 0 || op.name.rfind("attn.flash", 0) == 0) << op.name;
  // Model FLOPs keep the unfused convention (full s x s scores), so MFU does not depend on the kernel.
  EXPECT_NEAR(fl.model_flops_per_step / un.model_flops_per_step, 1.0, 1e-12);
  EXPECT_LT(fl.layer_fwd.flops, un.layer_fwd.flops);
}

TEST(Flash, StoredBytesDropTheScoreTermsAndKeepTheStatistics) {
  const double s = 2048, b = 1, h = 12288, a = 96, t = 8, sbh = s * b * h;
  const double stats = 4 * b * (a / t) * s;  // fp32 logsumexp per query and local head
  struct Case { bool sp; double unfused, flash; };
  Case cases[] = {
      {false, sbh * (10 + 24 / t + 5 * a * s / (h * t)), sbh * (10 + 24 / t) + stats},
      {true, sbh * (34 + 5 * a * s / h) / t, 34 * sbh / t + stats},
  };
  for (const Case& c : cases) {
    EXPECT_NEAR(cost(gpt175("none", c.sp, "unfused")).layer_stored_bytes / c.unfused, 1.0, 1e-12) << c.sp;
    EXPECT_NEAR(cost(gpt175("none", c.sp, "flash")).layer_stored_bytes / c.flash, 1.0, 1e-12) << c.sp;
  }
  // Full recompute keeps only the layer input; the rebuilt layer is the flash one.
  CostModel full = cost(gpt175("full", true, "flash"));
  EXPECT_DOUBLE_EQ(full.layer_stored_bytes, 2 * sbh / t);
  EXPECT_NEAR(full.layer_transient_bytes / (34 * sbh / t + stats), 1.0, 1e-12);
}

TEST(Flash, SelectiveRecomputeRecomputesNothing) {
  for (bool sp : {false, true}) {
    CostModel sel = cost(gpt175("selective", sp, "flash")), none = cost(gpt175("none", sp, "flash"));
    for (const Op& op : sel.layer_bwd.ops) EXPECT_FALSE(op.recompute) << op.name;
    EXPECT_EQ(sel.layer_bwd.recompute_s, 0.0);
    EXPECT_EQ(sel.layer_transient_bytes, 0.0);
    EXPECT_DOUBLE_EQ(sel.layer_stored_bytes, none.layer_stored_bytes);
    EXPECT_DOUBLE_EQ(sel.layer_bwd.time_s, none.layer_bwd.time_s);
    // Unfused selective still recomputes the core.
    CostModel un = cost(gpt175("selective", sp, "unfused"));
    EXPECT_GT(un.layer_bwd.recompute_s, 0.0);
  }
}

// Llama-3 70B on DGX H100 at seq 8192 (tp 8, SP, bf16, no recompute): flash removes the softmax output
// (2 b (a/t) s^2 bytes: no dropout in Llama) and adds the fp32 statistics, nothing else.
TEST(Flash, Llama70bAt8192DropsTheSoftmaxTerm) {
  json plan = {{"dp", 1}, {"tp", 8}, {"pp", 1}, {"microbatch", 1}, {"sequence_parallel", true}, {"recompute", "none"}};
  auto scenario = [&](const char* attention) {
    json p = plan;
    p["attention"] = attention;
    json j = {{"model", "llama3-70b"}, {"cluster", "dgx-h100"},
              {"training", {{"global_batch", 8}, {"seq_len", 8192}, {"precision", "bf16"}}}, {"plan", p}};
    return scenario_from_json(j, ".", "test");
  };
  const double b = 1, s = 8192, a_t = 64.0 / 8;
  CostModel un = cost(scenario("unfused")), fl = cost(scenario("flash"));
  EXPECT_DOUBLE_EQ(un.layer_stored_bytes - fl.layer_stored_bytes, 2 * b * a_t * s * s - 4 * b * a_t * s);
  // About 1 GiB per layer per GPU: more than the rest of the layer's activations at this length.
  EXPECT_GT(un.layer_stored_bytes - fl.layer_stored_bytes, fl.layer_stored_bytes);
  EXPECT_LT(fl.layer_fwd.time_s + fl.layer_bwd.time_s, un.layer_fwd.time_s + un.layer_bwd.time_s);
  // Default: a plan without "attention" is flash.
  json j = {{"model", "llama3-70b"}, {"cluster", "dgx-h100"},
            {"training", {{"global_batch", 8}, {"seq_len", 8192}, {"precision", "bf16"}}}, {"plan", plan}};
  EXPECT_EQ(scenario_from_json(j, ".", "test").plan.attention, Attention::flash);
}

TEST(Flash, OptimusGridOfOneEqualsTheOneDimensionalLayer) {
  for (const char* prec : {"bf16", "fp8"}) {
    json model = gpt_model(2, 1024, 16, 1024, 512);
    Scenario d1 = make_scenario(model, fp8_cluster(), 8, plan_json(2, 1, 1, 1, "1f1b", "none", false, 0, 4, "flash"), prec);
    Scenario d2 = d1;
    d2.plan.tp_mode = TpMode::d2;
    CostModel c1 = cost(d1), c2 = cost(d2);
    EXPECT_DOUBLE_EQ(c2.layer_fwd.flops, c1.layer_fwd.flops) << prec;
    EXPECT_NEAR(c2.layer_fwd.time_s / c1.layer_fwd.time_s, 1.0, 1e-12) << prec;
    EXPECT_NEAR(c2.layer_bwd.time_s / c1.layer_bwd.time_s, 1.0, 1e-12) << prec;
    EXPECT_NEAR(c2.layer_stored_bytes / c1.layer_stored_bytes, 1.0, 1e-12) << prec;
    EXPECT_DOUBLE_EQ(c2.layer_fp8_weight_bytes, c1.layer_fp8_weight_bytes) << prec;
  }
}

TEST(Flash, PlanKeyRoundTrips) {
  Scenario sc = gpt175("none", false, "flash");
  json j = scenario_to_json(sc);
  EXPECT_EQ(j["plan"]["attention"], "flash");
  j["plan"].erase("num_microbatches");  // derived
  j["training"].erase("tokens");         // 0 = not given
  j["plan"]["attention"] = "unfused";
  EXPECT_EQ(scenario_from_json(j, ".", "test").plan.attention, Attention::unfused);
}

TEST(Fp8, LinearGemmsRunAtTheFp8PeakWithCasts) {
  json model = gpt_model(2, 1024, 16, 1024, 512);
  Scenario sc = make_scenario(model, fp8_cluster(), 8, plan_json(1, 2, 1, 1, "1f1b", "none", false, 0, 1, "unfused"), "fp8");
  CostModel cm = cost(sc);
  const double n = 512, h = 1024, t = 2;
  for (const char* name : {"qkv", "proj", "fc1", "fc2"}) {
    const Op* op = find_op(cm.layer_fwd, name);
    ASSERT_TRUE(op) << name;
    EXPECT_DOUBLE_EQ(op->time_s, op->flops / 4e14) << name;  // fp8 peak, flat curves, free HBM
    const Op* dg = find_op(cm.layer_bwd, std::string(name) + ".dgrad");
    ASSERT_TRUE(dg) << name;
    EXPECT_DOUBLE_EQ(dg->time_s, dg->flops / 4e14) << name;
    EXPECT_TRUE(find_op(cm.layer_fwd, std::string(name) + ".fp8_cast")) << name;
    EXPECT_TRUE(find_op(cm.layer_bwd, std::string(name) + ".fp8_cast.bwd")) << name;
  }
  // Attention and the LM head stay bf16.
  const Op* qk = find_op(cm.layer_fwd, "attn.qk");
  EXPECT_DOUBLE_EQ(qk->time_s, qk->flops / 1e14);
  const Op* head = find_op(cm.head_fwd, "lm_head");
  EXPECT_DOUBLE_EQ(head->time_s, head->flops / 1e14);
  // The qkv cast reads the bf16 input [n, h] and weight [h, 3h/t] and writes fp8: 3 bytes per element.
  EXPECT_DOUBLE_EQ(find_op(cm.layer_fwd, "qkv.fp8_cast")->bytes, 3 * (n * h + h * 3 * h / t));
  EXPECT_DOUBLE_EQ(find_op(cm.layer_bwd, "fc2.fp8_cast.bwd")->bytes, 3 * n * h);  // output gradient [n, h]
  // fp8 weight copies: one byte per linear weight on this rank; none in bf16 training.
  EXPECT_DOUBLE_EQ(cm.layer_fp8_weight_bytes, (3 * h * h + h * h + 8 * h * h) / t);
  sc.training.precision = Precision::bf16;
  EXPECT_EQ(cost(sc).layer_fp8_weight_bytes, 0.0);
}

TEST(Fp8, StoredLinearInputsAreFp8Casts) {
  // Korthikanti's selective-recompute layer, sbh (10 + 24 / t) in 16-bit, with the QKV, proj, fc1 and fc2
  // inputs saved as 1-byte fp8 casts: replicated 2 + 1 + 1 + 2 + 1 + 1 = 8, sharded 6 + 1 + 8 + 4 = 19.
  const double s = 2048, h = 12288, t = 8, sbh = s * h;
  Scenario sc = make_scenario(gpt_model(2, 12288, 96), fp8_cluster(), 8,
                              plan_json(1, 8, 1, 1, "1f1b", "selective", false, 0, 1, "unfused"), "fp8");
  EXPECT_NEAR(cost(sc).layer_stored_bytes / (sbh * (8 + 19 / t)), 1.0, 1e-12);
}

TEST(Fp8, RefusedWithoutFp8TensorCoresButRunEmulatesIt) {
  json j = {{"model", "gpt3-1.3b"}, {"cluster", "selene"},
            {"training", {{"global_batch", 8}, {"seq_len", 2048}, {"precision", "fp8"}}},
            {"plan", {{"dp", 8}, {"tp", 1}, {"pp", 1}}}};
  try {
    scenario_from_json(j, ".", "test");
    ADD_FAILURE() << "fp8 on an A100 was accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("fp8 needs a GPU with fp8 tensor cores; A100-SXM4-80GB has none"), std::string::npos)
        << e.what();
  }
  j["cluster"] = "dgx-h100";
  Scenario sc = scenario_from_json(j, ".", "test");
  EXPECT_EQ(sc.training.precision, Precision::fp8);
  EXPECT_NO_THROW(exec::check_runnable(sc));  // run emulates fp8 (exec/model/fp8.hpp)
  sc.training.precision = Precision::bf16;
  for (Attention a : {Attention::flash, Attention::unfused}) {  // attention is a cost-model choice: run takes both
    sc.plan.attention = a;
    EXPECT_NO_THROW(exec::check_runnable(sc));
  }
}

// fp8 training keeps Transformer Engine's fp8 copy (1 byte) of every GPU-resident linear weight next to the
// bf16 weight: the static weights grow by layers x layer_fp8_weight_bytes (ZeRO-3: only the gathered layers).
TEST(Fp8Memory, WeightCopiesAreCountedInStaticMemory) {
  auto scenario = [](const char* precision, int zero) {
    json j = {{"name", "fp8-mem"}, {"model", "llama3-8b"}, {"cluster", "dgx-h100"},
              {"training", {{"global_batch", 8}, {"seq_len", 2048}, {"precision", precision}}},
              {"plan", {{"dp", 8}, {"tp", 1}, {"pp", 1}, {"microbatch", 1}, {"zero", zero}}}};
    return scenario_from_json(j, ".", "test");
  };
  Scenario bf = scenario("bf16", 1), f8 = scenario("fp8", 1);
  Program pb = build_program(bf, false), p8 = build_program(f8, false);
  ASSERT_GT(p8.cm.layer_fp8_weight_bytes, 0);
  EXPECT_EQ(pb.cm.layer_fp8_weight_bytes, 0);
  const double L = (double)f8.model.layers;
  EXPECT_NEAR(p8.statics[0].weights_bytes - pb.statics[0].weights_bytes, L * p8.cm.layer_fp8_weight_bytes,
              1e-9 * pb.statics[0].weights_bytes);
  // ZeRO-3: the sharded static weights carry no copy.
  Program z8 = build_program(scenario("fp8", 3), false), zb = build_program(scenario("bf16", 3), false);
  EXPECT_NEAR(z8.statics[0].weights_bytes, zb.statics[0].weights_bytes, 1e-9 * zb.statics[0].weights_bytes);
}
