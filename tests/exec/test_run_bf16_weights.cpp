// test_run_bf16_weights: training.precision "bf16" keeps a bf16 copy of each weight matrix (exec/gpt.hpp
// WeightCopies16), as Megatron-LM keeps bf16 parameters beside the optimizer's fp32 master copy, and the GEMMs read
// the copies (ops::matmul16, linear_fwd's w16) instead of rounding the fp32 weights in each call.
// - Same results: a copy holds exactly the rounding the GEMM would apply, so each plan's losses and gradient norms
//   equal, bit for bit, those of the same run with --no-bf16-weight-copies (each GEMM rounds the fp32 weights). The
//   plans cover where the weights are when a copy is made: resident (single rank, tp + SP, pp), gathered for a run
//   (ZeRO-3), loaded for a run (granular offload), shared by several layers (Pseudo-to-Real), experts (MoE + ep).
//   A copy that outlived its step (the weights changed by the optimizer) would change every loss after the first.
// - Memory (emu-device counts every allocation): one copy of the weight matrices, 2 bytes each, held from their first
//   use; under ZeRO-3 a layer's copy lives only while its parameters are gathered.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "exec/oracle_run.hpp"

using tp::json;
using namespace oracle;

namespace {

// tiny-gpt (4 layers, hidden 64, vocabulary 256; or `base`) in bf16 with `plan` over its plan.
std::string weights_scenario(const std::string& name, const json& plan, const std::string& base = "tiny-gpt") {
  return precision_scenario("bf16w", name, plan, base, "bf16");
}

// The run of `plan` with and without the weights' copies: the same losses and gradient norms, bit for bit.
void expect_copies_change_nothing(const std::string& name, const json& plan, const std::string& backend = "cpu",
                                  const std::string& base = "tiny-gpt") {
  const int steps = 3;
  const std::string f = weights_scenario(name, plan, base);
  const std::string be = "--backend " + backend;
  json with = run(f, steps, false, nullptr, be);
  ASSERT_FALSE(with.is_null()) << name << "\n" << log_text(f);
  json without = run(f, steps, false, nullptr, be + " --no-bf16-weight-copies");
  ASSERT_FALSE(without.is_null()) << name << "\n" << log_text(f);
  ASSERT_EQ(with["losses"].size(), (size_t)steps) << name;
  for (const char* key : {"losses", "grad_norm"})
    for (size_t i = 0; i < with[key].size(); ++i)
      EXPECT_EQ(with[key][i].get<double>(), without[key][i].get<double>()) << name << " " << key << "[" << i << "]";
}

// Elements of tiny-gpt's weight matrices: per layer QKV [64, 192], proj [64, 64], fc1 [64, 256], fc2 [256, 64]; the
// tied embedding [256, 64] (the LM head's weight).
constexpr double kLayerMatrixElems = 64.0 * 192 + 64 * 64 + 2 * 64 * 256, kWteElems = 256.0 * 64;

}  // namespace

TEST(Bf16Weights, CopiesGiveTheResultsOfRoundingInEachGemm) {
  expect_copies_change_nothing("single_flash", json::object());
  expect_copies_change_nothing("single_unfused", {{"attention", "unfused"}, {"recompute", "full"}});
  expect_copies_change_nothing("single_emu_device", {{"attention", "flash"}}, "emu-device");
  expect_copies_change_nothing("granular", {{"offload", {{"kind", "granular"}, {"fraction", 0.5}}}});
  expect_copies_change_nothing("delink", {{"delink", {{"unique_layers", 2}, {"tokens", 512}}}});  // (at step 2)
  expect_copies_change_nothing("moe", json::object(), "cpu", "tiny-moe");
  if (!have_mpi()) return;
  expect_copies_change_nothing("tp2_sp_pp2", {{"tp", 2}, {"sequence_parallel", true}, {"pp", 2}});
  expect_copies_change_nothing("dp2_zero3", {{"dp", 2}, {"zero", 3}});
  expect_copies_change_nothing("moe_dp2_ep2", {{"dp", 2}, {"ep", 2}}, "cpu", "tiny-moe");
}

// Single rank on emu-device: the peak grows by the copies of every weight matrix, 2 bytes per element.
TEST(Bf16Weights, DevicePeakHoldsOneCopyOfTheWeights) {
  const std::string f = weights_scenario("mem", json::object());
  json with = run(f, 2, false, nullptr, "--backend emu-device");
  json without = run(f, 2, false, nullptr, "--backend emu-device --no-bf16-weight-copies");
  ASSERT_FALSE(with.is_null()) << log_text(f);
  ASSERT_FALSE(without.is_null()) << log_text(f);
  const double want = 2 * (4 * kLayerMatrixElems + kWteElems);
  const double got = with["peak_memory_bytes"][0].get<double>() - without["peak_memory_bytes"][0].get<double>();
  EXPECT_GT(got, 0.95 * want) << with["peak_memory_bytes"][0] << " vs " << without["peak_memory_bytes"][0];
  EXPECT_LT(got, 1.05 * want);
}

// ZeRO-3 over two data ranks: a layer's copy is dropped with its gathered parameters at its run's end, so a rank
// holds the embedding's copy and those of the layers gathered at the moment (at most two), not all four.
TEST(Bf16Weights, Zero3HoldsTheGatheredLayersCopiesOnly) {
  if (!have_mpi()) GTEST_SKIP() << "no MPI launcher";
  const std::string f = weights_scenario("mem_zero3", {{"dp", 2}, {"zero", 3}});
  json with = run(f, 2, false, nullptr, "--backend emu-device");
  json without = run(f, 2, false, nullptr, "--backend emu-device --no-bf16-weight-copies");
  ASSERT_FALSE(with.is_null()) << log_text(f);
  ASSERT_FALSE(without.is_null()) << log_text(f);
  const double got = with["peak_memory_bytes"][0].get<double>() - without["peak_memory_bytes"][0].get<double>();
  EXPECT_GE(got, 2 * kWteElems) << with["peak_memory_bytes"][0] << " vs " << without["peak_memory_bytes"][0];
  EXPECT_LE(got, 2 * (2 * kLayerMatrixElems + kWteElems) * 1.05);
}
