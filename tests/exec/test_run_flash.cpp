// test_run_flash: `trainplan run` with plan.attention "flash" (exec/backends/ops.hpp flash_attention_fwd / bwd): the
// attention keeps each query row's two softmax statistics instead of the [T, T] probabilities and recomputes them
// in the backward. The flash run trains the model the unfused run trains (to float64's rounding: the two differ
// only in the backward's row term), every plan reproduces the single-rank flash run to 1e-9 (context parallelism
// and 2D tensor parallelism included), the fused kernels on emu and emu-device match the CPU's at float64, with
// bf16 operands too, and the device memory drops by the probabilities the unfused run keeps.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <string>
#include <vector>

#include "exec/oracle_run.hpp"

using tp::json;
using namespace oracle;

namespace {

// tiny-gpt with `plan` over its plan and attention "flash" (unless the plan says otherwise).
std::string flash_scenario(const std::string& name, json plan, const std::string& precision = "fp32") {
  if (!plan.contains("attention")) plan["attention"] = "flash";
  return precision_scenario("flash", name, plan, "tiny-gpt", precision);
}

}  // namespace

TEST(RunFlash, TrainsTheUnfusedModelOnEveryPlan) {
  const int steps = 4;
  json ref = run(flash_scenario("ref", json::object()), steps, true);
  json unfused = run(flash_scenario("unfused", {{"attention", "unfused"}}), steps, true);
  ASSERT_FALSE(ref.is_null()) << log_text(tmpdir() + "/flash_ref.json");
  ASSERT_FALSE(unfused.is_null());
  expect_close(ref, unfused, "losses", 1e-12, "flash vs unfused");
  expect_close(ref, unfused, "grad_norm", 1e-12, "flash vs unfused");
  // The fused kernels (emu: host memory; emu-device: device memory the host cannot read) at float64.
  expect_emu_backends_match(ref, steps, [](const std::string& n) { return flash_scenario(n, json::object()); });
  json f32 = run(flash_scenario("ref", json::object()), steps, false);
  ASSERT_FALSE(f32.is_null());
  expect_close(f32, ref, "losses", 1e-4, "float32");
  if (!have_mpi()) return;
  const std::vector<PlanCase> cases = {
      {"dp2", {{"dp", 2}}},
      {"tp2_sp", {{"tp", 2}, {"sequence_parallel", true}}},
      {"pp2_interleaved_selective", {{"pp", 2}, {"schedule", "interleaved"}, {"virtual_stages", 2},
                                     {"recompute", "selective"}}},
      {"cp2_dp2_zero1", {{"cp", 2}, {"dp", 2}, {"zero", 1}}},
      {"cp2_tp2_sp", {{"cp", 2}, {"tp", 2}, {"sequence_parallel", true}}},
      {"dp2_tp2_pp2_sp_zero3_full", {{"dp", 2}, {"tp", 2}, {"pp", 2}, {"sequence_parallel", true}, {"zero", 3},
                                     {"recompute", "full"}}},
      {"pp2_granular", {{"pp", 2}, {"offload", {{"kind", "granular"}, {"fraction", 0.5}}}}},
      {"tp2d_q2", {{"tp", 4}, {"tp_mode", "2d"}}},
  };
  expect_plans_match(cases, ref, steps, [](const std::string& n, const json& p) { return flash_scenario(n, p); });
}

// bf16 operands: the fused kernels round where attention's GEMMs do, so emu and emu-device reproduce the CPU's
// flash (head by head through the GEMMs) at float64, and the run differs from the fp32 one. In float32 (head dim
// 16 here) emu runs the tensor-core kernels (k_flash_mma.hpp, the emulator's warp-matrix products): within 2e-3 of
// the cpu's float32 bf16 run (a P or dS a few ulp away may round to the neighbouring bf16 value).
TEST(RunFlash, Bf16OperandsOnTheFusedKernels) {
  const int steps = 3;
  json ref = run(flash_scenario("bf16_ref", json::object(), "bf16"), steps, true);
  json f32 = run(flash_scenario("bf16_ref_fp32", json::object()), steps, true);
  ASSERT_FALSE(ref.is_null());
  ASSERT_FALSE(f32.is_null());
  EXPECT_GT(std::abs(ref["losses"][0].get<double>() - f32["losses"][0].get<double>()), 1e-6);
  expect_emu_backends_match(ref, steps, [](const std::string& n) { return flash_scenario("bf16_" + n, json::object(), "bf16"); });
  const std::string f = flash_scenario("bf16_f32", json::object(), "bf16");
  json cpu32 = run(f, steps, false);
  json emu32 = run(f, steps, false, nullptr, "--backend emu");
  ASSERT_FALSE(cpu32.is_null());
  ASSERT_FALSE(emu32.is_null()) << log_text(f);
  expect_close(emu32, cpu32, "losses", 2e-3, "emu tensor-core kernels vs cpu, float32");
  expect_close(cpu32, ref, "losses", 1e-3, "float32 vs float64");
}

// Device memory (emu-device counts every allocation): with T = 128 the unfused run keeps each layer's [mb, H, T, T]
// probabilities until its backward, flash keeps [mb, H, T, 2].
TEST(RunFlash, KeepsNoProbabilities) {
  auto make = [](const std::string& name, const char* attention) {
    json plan = {{"attention", attention}, {"microbatch", 2}};
    std::string f = flash_scenario(name, plan);
    std::ifstream in(f);
    json j = json::parse(in);
    j["training"]["seq_len"] = j["model"]["seq_len"] = 128;
    std::ofstream(f) << j.dump(2);
    return f;
  };
  json fl = run(make("mem_flash", "flash"), 2, true, nullptr, "--backend emu-device");
  json un = run(make("mem_unfused", "unfused"), 2, true, nullptr, "--backend emu-device");
  ASSERT_FALSE(fl.is_null()) << log_text(tmpdir() + "/flash_mem_flash.json");
  ASSERT_FALSE(un.is_null());
  expect_close(fl, un, "losses", 1e-12, "flash vs unfused at T = 128");
  const double layers = 4, mb = 2, H = 4, T = 128, probs = layers * mb * H * T * T * 8;  // bytes (float64)
  const double saved = un["peak_memory_bytes"][0].get<double>() - fl["peak_memory_bytes"][0].get<double>();
  EXPECT_GT(saved, 0.75 * probs) << "unfused " << un["peak_memory_bytes"][0] << ", flash " << fl["peak_memory_bytes"][0];
  EXPECT_LT(saved, 1.25 * probs);
}
