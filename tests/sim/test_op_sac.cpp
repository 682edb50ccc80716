// recompute "selective_op": TorchTitan's op-level selective activation checkpointing (sim/op_cost.cpp). The
// policy keeps every odd bias-free aten.mm of the block (q, v, gate, down of a Llama block; k, o, up rerun), the
// attention kernel's output and the reduce-scatters'; fp8 linears (torch._scaled_mm) and biased ones (addmm) are
// neither counted nor kept. Checked on an ideal cluster by FLOPs and stored bytes in closed form.
#include <gtest/gtest.h>

#include "models/catalog.hpp"
#include "sim/program.hpp"
#include "sim/simulate.hpp"
#include "sim_test_util.hpp"

using namespace tp;
using namespace tp::testutil;

namespace {

const double kL = 4, kH = 1024, kA = 16, kKv = 4, kF = 2816, kS = 2048, kV = 32000;

json llama_model(bool biases = false) {
  json m = {{"name", "test-llama"}, {"layers", (int)kL}, {"hidden", (int)kH}, {"heads", (int)kA}, {"kv_heads", (int)kKv},
            {"ffn_hidden", (int)kF}, {"vocab", (int)kV}, {"seq_len", (int)kS}, {"activation", "swiglu"},
            {"tied_embeddings", false}};
  if (biases) m["qkv_bias"] = true;
  return m;
}

Scenario titan_scenario(json model, const char* recompute, const char* precision = "bf16", int tp = 1, bool sp = false) {
  json plan = plan_json(8 / tp, tp, 1, 1, "1f1b", recompute, sp, 3, 1, "flash");
  json cluster = ideal_cluster(1, 8);
  cluster["gpu"]["matrix_flops_per_s"]["fp8"] = 2e14;  // fp8 tensor cores
  cluster["gpu"]["compute_capability"] = 9.0;
  json j = {{"name", "op-sac"},
            {"model", model},
            {"cluster", cluster},
            {"training", {{"global_batch", 8 / tp}, {"precision", precision}, {"framework", "torchtitan"}}},
            {"plan", plan}};
  return scenario_from_json(j, ".", "test");
}

CostModel cost(const Scenario& sc) { return build_program(sc, false).cm; }

// Forward FLOPs of the block's linears on one rank (n tokens): q, k, v, o, gate, up, down.
struct Linears { double q, k, v, o, gate, up, down; };
Linears linear_flops(double n, double t) {
  const double kvd = kKv * (kH / kA);
  return {2 * n * kH * kH / t, 2 * n * kH * kvd / t, 2 * n * kH * kvd / t, 2 * n * kH * kH / t,
          2 * n * kH * kF / t, 2 * n * kH * kF / t, 2 * n * kF * kH / t};
}

}  // namespace

TEST(OpSac, Bf16RerunsTheEvenMatmulsKAndOAndUp) {
  const double n = kS;  // micro-batch 1
  Linears f = linear_flops(n, 1);
  CostModel cm = cost(titan_scenario(llama_model(), "selective_op"));
  EXPECT_NEAR(cm.layer_bwd.recompute_flops / (f.k + f.o + f.up), 1.0, 1e-12);
  // Nothing reruns under plain selective with flash; everything under full.
  EXPECT_EQ(cost(titan_scenario(llama_model(), "selective")).layer_bwd.recompute_flops, 0.0);
  CostModel full = cost(titan_scenario(llama_model(), "full"));
  EXPECT_GT(full.layer_bwd.recompute_flops, f.q + f.k + f.v + f.o + f.gate + f.up + f.down);  // + the attention kernel
}

TEST(OpSac, Fp8AndBiasedLinearsAreNeitherCountedNorKept) {
  const double n = kS;
  Linears f = linear_flops(n, 1);
  const double all = f.q + f.k + f.v + f.o + f.gate + f.up + f.down;
  // fp8: torch._scaled_mm is not aten.mm, so every linear reruns (the attention kernel does not).
  EXPECT_NEAR(cost(titan_scenario(llama_model(), "selective_op", "fp8")).layer_bwd.recompute_flops / all, 1.0, 1e-12);
  // Q / K / V with biases run as addmm: the count starts at o (kept), gate reruns, up kept, down reruns.
  EXPECT_NEAR(cost(titan_scenario(llama_model(true), "selective_op")).layer_bwd.recompute_flops / (f.q + f.k + f.v + f.gate + f.down),
              1.0, 1e-12);
}

TEST(OpSac, StoredBytesAreWhatThePolicyKeeps) {
  const double e = 2, n = kS, kvd = kKv * (kH / kA), t = 2;
  // tp 2 with SP: the block input (sequence shard), kept Q and V (column shards), the attention output and its
  // fp32 logsumexp, the gate output, the partial sums of the two row-parallel outputs (kept by the count: o is
  // even, so only down's) and both reduce-scatter outputs.
  CostModel cm = cost(titan_scenario(llama_model(), "selective_op", "bf16", 2, true));
  const double expected = e * n * kH / t + e * n * (kH + kvd) / t + e * n * kH / t + 4 * (kA / t) * n +
                          e * n * kF / t + e * n * kH + 2 * e * n * kH / t;
  EXPECT_NEAR(cm.layer_stored_bytes / expected, 1.0, 1e-12);
  // Between full recompute and none, for the same plan.
  double none = cost(titan_scenario(llama_model(), "none", "bf16", 2, true)).layer_stored_bytes;
  double full = cost(titan_scenario(llama_model(), "full", "bf16", 2, true)).layer_stored_bytes;
  EXPECT_LT(full, cm.layer_stored_bytes);
  EXPECT_LT(cm.layer_stored_bytes, none);
}

TEST(OpSac, StepTimeLiesBetweenSelectiveAndFull) {
  auto step = [](const char* rc) { return simulate(titan_scenario(llama_model(), rc)).step_time_s; };
  EXPECT_LT(step("selective"), step("selective_op"));
  EXPECT_LT(step("selective_op"), step("full"));
}

TEST(OpSac, RefusedWhereItIsNotModelledOrNotRun) {
  // Megatron-Core cannot run it (the framework's capabilities), nor Optimus 2D (not modelled).
  json j = {{"name", "x"},
            {"model", llama_model()},
            {"cluster", ideal_cluster(1, 8)},
            {"training", {{"global_batch", 8}, {"precision", "bf16"}}},
            {"plan", plan_json(8, 1, 1, 1, "1f1b", "selective_op", false, 1, 1, "flash")}};
  try {
    simulate(scenario_from_json(j, ".", "test"));
    ADD_FAILURE() << "megatron-core ran selective_op";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("selective_op"), std::string::npos) << e.what();
  }
  j["training"]["framework"] = "research";
  j["plan"] = plan_json(2, 4, 1, 1, "1f1b", "selective_op", false, 0, 2, "flash");
  j["plan"]["tp_mode"] = "2d";
  try {
    scenario_from_json(j, ".", "test");
    ADD_FAILURE() << "2d with selective_op accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("$.plan.recompute"), std::string::npos) << e.what();
  }
}
