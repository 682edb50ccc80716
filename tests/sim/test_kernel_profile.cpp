// Kernel profiles (GPU "kernel_profiles", scenario training.kernel_profile): a framework's kernels replace only
// the curves they give; an unknown or malformed profile names its JSON path; the catalog's H100 llm-foundry
// profile slows attention-bound steps more than GEMM-bound ones.
#include <gtest/gtest.h>

#include "sim/simulate.hpp"
#include "sim_test_util.hpp"

using namespace tp;
using namespace tp::testutil;

namespace {

// The ideal cluster's GPU with its own fused-attention curve (0.4) and one profile whose attention runs at 0.1.
json profiled_cluster() {
  json c = ideal_cluster(1, 8);
  c["gpu"]["attention_efficiency"] = json::array({json::array({1.0, 0.4})});
  c["gpu"]["kernel_profiles"] = {{"slow-attention", {{"about", "test"}, {"attention_efficiency", json::array({json::array({1.0, 0.1})})}}}};
  return c;
}

Scenario with_profile(json cluster, const char* profile) {
  json j = {{"name", "kp"}, {"model", gpt_model(2, 1024, 16, 32000, 4096)}, {"cluster", cluster},
            {"training", {{"global_batch", 8}, {"precision", "bf16"}}},
            {"plan", plan_json(8, 1, 1, 1, "1f1b", "none", false, 0, 1, "flash")}};
  if (profile) j["training"]["kernel_profile"] = profile;
  return scenario_from_json(j, ".", "test");
}

}  // namespace

TEST(KernelProfile, ReplacesOnlyTheCurvesItGives) {
  Scenario base = with_profile(profiled_cluster(), nullptr), slow = with_profile(profiled_cluster(), "slow-attention");
  CostModel cb = build_cost_model(base, free_comm()), cs = build_cost_model(slow, free_comm());
  const Op *fb = find_op(cb.layer_fwd, "attn.flash"), *fs = find_op(cs.layer_fwd, "attn.flash");
  ASSERT_TRUE(fb && fs);
  // Compute-bound on the ideal GPU (HBM 1e18 B/s): time = FLOPs / (peak x efficiency), 4x at a quarter.
  EXPECT_NEAR(fs->time_s / fb->time_s, 4.0, 1e-9);
  const Op *qb = find_op(cb.layer_fwd, "qkv"), *qs = find_op(cs.layer_fwd, "qkv");
  ASSERT_TRUE(qb && qs);
  EXPECT_DOUBLE_EQ(qs->time_s, qb->time_s);  // the profile names no matrix curve: GEMMs keep the GPU's
  EXPECT_GT(simulate(slow).step_time_s, simulate(base).step_time_s);
  // The scenario echoed in --json output names the profile in force.
  EXPECT_EQ(scenario_to_json(slow)["training"]["kernel_profile"], "slow-attention");
  EXPECT_FALSE(scenario_to_json(base)["training"].contains("kernel_profile"));
}

TEST(KernelProfile, UnknownOrMalformedNamesThePath) {
  try {
    with_profile(profiled_cluster(), "triton");
    ADD_FAILURE() << "an unknown profile was accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("$.training.kernel_profile: unknown kernel profile \"triton\" for the GPU ideal; "
                                         "it has \"slow-attention\""), std::string::npos) << e.what();
  }
  try {
    with_profile(ideal_cluster(1, 8), "slow-attention");
    ADD_FAILURE() << "a profile on a GPU without profiles was accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("has no kernel_profiles"), std::string::npos) << e.what();
  }
  json c = profiled_cluster();
  c["gpu"]["kernel_profiles"]["bad"] = {{"about", "no curve"}, {"attention_efficency", 1}};
  try {
    with_profile(c, "slow-attention");
    ADD_FAILURE() << "a malformed profile was accepted";
  } catch (const InputError& e) {
    std::string w = e.what();
    EXPECT_NE(w.find("$.cluster.gpu.kernel_profiles.bad: a kernel profile needs at least one of"), std::string::npos) << w;
    EXPECT_NE(w.find("attention_efficency"), std::string::npos) << w;  // the misspelt key, named
  }
}

TEST(KernelProfile, CatalogLlmFoundryProfileSlowsAttentionBoundSteps) {
  // MPT-3B-like shape on one DGX H100 node, flash attention, at 2k and 32k tokens: the profile's Triton attention
  // adds more to the long-sequence step, where attention is most of the FLOPs.
  auto step = [](long long seq, const char* profile) {
    json j = {{"name", "mpt"}, {"model", gpt_model(8, 2560, 32, 50368, (int)seq)}, {"cluster", "dgx-h100"},
              {"training", {{"global_batch", 8}, {"seq_len", seq}, {"precision", "bf16"}}},
              {"plan", {{"dp", 8}, {"tp", 1}, {"pp", 1}, {"microbatch", 1}, {"zero", 3}, {"attention", "flash"}}}};
    if (profile) j["training"]["kernel_profile"] = profile;
    return simulate(scenario_from_json(j, ".", "test")).step_time_s;
  };
  double short_ratio = step(2048, "llm-foundry") / step(2048, nullptr);
  double long_ratio = step(32768, "llm-foundry") / step(32768, nullptr);
  EXPECT_GT(short_ratio, 1.0);
  EXPECT_GT(long_ratio, short_ratio);
}

TEST(KernelProfile, AttentionHeadDimsPadTheTensorWork) {
  Gpu g;
  EXPECT_EQ(g.attention_kernel_head_dim(80), 80);  // no list: exact
  g.attention_head_dims = {16, 32, 64, 128};
  EXPECT_EQ(g.attention_kernel_head_dim(80), 128);
  EXPECT_EQ(g.attention_kernel_head_dim(64), 64);
  EXPECT_EQ(g.attention_kernel_head_dim(8), 16);
  EXPECT_EQ(g.attention_kernel_head_dim(192), 256);  // beyond the largest: its multiple
  // Heads of dim 80 (hidden 1280 over 16 heads) in a power-of-two kernel: the flash ops take 128 / 80 the time
  // on the compute-bound ideal GPU; the op's FLOPs stay the useful ones.
  json c = profiled_cluster();
  c["gpu"]["kernel_profiles"]["pow2"] = {{"attention_head_dims", {16, 32, 64, 128}}};
  auto flash = [&](const char* profile) {
    json j = {{"name", "hd"}, {"model", gpt_model(2, 1280, 16, 32000, 4096)}, {"cluster", c},
              {"training", {{"global_batch", 8}, {"precision", "bf16"}}},
              {"plan", plan_json(8, 1, 1, 1, "1f1b", "none", false, 0, 1, "flash")}};
    if (profile) j["training"]["kernel_profile"] = profile;
    CostModel cm = build_cost_model(scenario_from_json(j, ".", "test"), free_comm());
    return *find_op(cm.layer_fwd, "attn.flash");
  };
  Op exact = flash(nullptr), padded = flash("pow2");
  EXPECT_NEAR(padded.time_s / exact.time_s, 128.0 / 80.0, 1e-9);
  EXPECT_DOUBLE_EQ(padded.flops, exact.flops);
  c["gpu"]["kernel_profiles"]["pow2"] = {{"attention_head_dims", {64, 32}}};
  EXPECT_THROW(flash("pow2"), InputError);
}

TEST(KernelProfile, BackwardGridOfHeadsRunsInWavesOverTheSms) {
  Gpu g;
  g.sm_count = 132;
  EXPECT_DOUBLE_EQ(g.attention_backward_occupancy(60), 1.0);  // key_tiles (default): waves not modelled
  g.attention_backward_grid = AttnBwdGrid::heads;
  EXPECT_DOUBLE_EQ(g.attention_backward_occupancy(60), 60.0 / 132.0);    // one partial wave
  EXPECT_DOUBLE_EQ(g.attention_backward_occupancy(264), 1.0);            // two full waves
  EXPECT_DOUBLE_EQ(g.attention_backward_occupancy(288), 288.0 / 396.0);  // a third wave of 24
  // On the compute-bound ideal GPU with 132 SMs: 8 sequences x 16 heads = 128 programs in one wave, the backward
  // takes 132 / 128 as long; the forward (one program per query tile) and the FLOPs are unchanged.
  json c = profiled_cluster();
  c["gpu"]["sm_count"] = 132;
  c["gpu"]["kernel_profiles"]["per-head"] = {{"attention_backward_grid", "heads"}};
  auto ops = [&](const char* profile, long long microbatch) {
    json j = {{"name", "grid"}, {"model", gpt_model(2, 1024, 16, 32000, 4096)}, {"cluster", c},
              {"training", {{"global_batch", 8 * microbatch}, {"precision", "bf16"}}},
              {"plan", plan_json(8, 1, 1, 1, "1f1b", "none", false, 0, (int)microbatch, "flash")}};
    if (profile) j["training"]["kernel_profile"] = profile;
    CostModel cm = build_cost_model(scenario_from_json(j, ".", "test"), free_comm());
    return std::make_pair(*find_op(cm.layer_fwd, "attn.flash"), *find_op(cm.layer_bwd, "attn.flash.bwd"));
  };
  auto [f0, b0] = ops(nullptr, 8);
  auto [f1, b1] = ops("per-head", 8);
  EXPECT_DOUBLE_EQ(f1.time_s, f0.time_s);
  EXPECT_NEAR(b1.time_s / b0.time_s, 132.0 / 128.0, 1e-9);
  EXPECT_DOUBLE_EQ(b1.flops, b0.flops);
  // 2 sequences: 32 programs, a quarter of the SMs: the backward takes 132 / 32 as long.
  auto [f2, b2] = ops(nullptr, 2);
  auto [f3, b3] = ops("per-head", 2);
  EXPECT_NEAR(b3.time_s / b2.time_s, 132.0 / 32.0, 1e-9);
  // The key round-trips through the GPU JSON and a bad value names its path.
  Issues is;
  json gj = c["gpu"];
  gj["attention_backward_grid"] = "heads";
  Gpu rg = read_gpu(gj, "$.gpu", is);
  EXPECT_TRUE(is.empty());
  EXPECT_EQ(gpu_to_json(rg)["attention_backward_grid"], "heads");
  EXPECT_EQ(gpu_to_json(rg)["kernel_profiles"]["per-head"]["attention_backward_grid"], "heads");
  c["gpu"]["kernel_profiles"]["per-head"] = {{"attention_backward_grid", "rows"}};
  try {
    ops("per-head", 8);
    ADD_FAILURE() << "a bad attention_backward_grid was accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("$.cluster.gpu.kernel_profiles.per-head.attention_backward_grid: \"rows\": expected "
                                         "\"key_tiles\" or \"heads\""), std::string::npos) << e.what();
  }
}
