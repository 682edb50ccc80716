// plan.cuda_graphs in the simulator: the step's forward and backward kernels cost the GPU's graph_kernel_overhead_s
// instead of kernel_overhead_s (models/hardware.hpp kernel_overhead_for), nothing else changes; a profile without
// the key predicts no gain; the plans the executor cannot capture (models/scenario.hpp cuda_graph_blocker, shared
// with exec/runtime/step_graph.hpp) are refused naming the key, as are frameworks that do not capture.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "models/scenario.hpp"
#include "sim/simulate.hpp"
#include "sim_test_util.hpp"

using namespace tp;
using namespace tp::testutil;

namespace {

json one_gpu(double overhead_s, double graph_overhead_s) {
  json c = ideal_cluster(1, 1);
  c["gpu"]["kernel_overhead_s"] = overhead_s;
  if (graph_overhead_s >= 0) c["gpu"]["graph_kernel_overhead_s"] = graph_overhead_s;
  return c;
}

json scenario_json(bool graphs, double graph_overhead_s) {
  json plan = plan_json(1, 1, 1, 1, "1f1b", "none", false, 0, 1, "flash");
  plan["cuda_graphs"] = graphs;
  return {{"name", "graphs"},
          {"model", gpt_model(4, 512, 8, 8192, 512)},
          {"cluster", one_gpu(10e-6, graph_overhead_s)},
          {"training", {{"global_batch", 4}, {"precision", "bf16"}, {"framework", "research"}}},
          {"plan", plan}};
}
Scenario one_gpu_scenario(bool graphs, double graph_overhead_s) {
  return scenario_from_json(scenario_json(graphs, graph_overhead_s), ".", "graphs");
}

std::string refusal(const json& j) {
  try {
    scenario_from_json(j, ".", "graphs");
  } catch (const InputError& e) {
    std::string all;
    for (const std::string& m : e.messages) all += m + "\n";
    return all;
  }
  return "";
}

}  // namespace

TEST(CudaGraphs, KernelsOfTheStepCostTheGraphsOverheadOnly) {
  const Result plain = simulate(one_gpu_scenario(false, 2e-6)), graphed = simulate(one_gpu_scenario(true, 2e-6));
  const double saved = plain.step_time_s - graphed.step_time_s;
  ASSERT_GT(saved, 0);
  // Only the fixed cost per kernel moved (8 us each): a whole number of kernels, at least a dozen per layer and
  // micro-batch (4 layers, 4 micro-batches, forward and backward).
  const double kernels = saved / 8e-6;
  EXPECT_NEAR(kernels, std::round(kernels), 1e-6 * kernels);
  EXPECT_GE(kernels, 12.0 * 4 * 4);
  // Memory does not move.
  EXPECT_EQ(plain.peak_bytes_per_gpu, graphed.peak_bytes_per_gpu);
  // A profile without graph_kernel_overhead_s: no gain predicted.
  EXPECT_EQ(simulate(one_gpu_scenario(true, -1)).step_time_s, simulate(one_gpu_scenario(false, -1)).step_time_s);
  // Both keys are in the resolved scenario's JSON (simulate --json, plan --emit).
  const json out = scenario_to_json(one_gpu_scenario(true, 2e-6));
  EXPECT_EQ(out["plan"]["cuda_graphs"], true);
  EXPECT_EQ(out["cluster"]["gpu"]["graph_kernel_overhead_s"].get<double>(), 2e-6);
  EXPECT_FALSE(scenario_to_json(one_gpu_scenario(false, -1))["plan"].contains("cuda_graphs"));
}

TEST(CudaGraphs, PlansThatCannotBeCapturedAreRefusedByName) {
  const json j = scenario_json(true, 2e-6);
  auto with = [&](const char* key, const json& v) {
    json k = j;
    k["plan"][key] = v;
    return k;
  };
  json two = with("dp", 2);
  two["cluster"]["gpus_per_node"] = 2;
  std::string why = refusal(two);
  EXPECT_NE(why.find("$.plan.cuda_graphs"), std::string::npos) << why;
  EXPECT_NE(why.find("several GPUs"), std::string::npos) << why;
  why = refusal(with("offload", {{"kind", "optimizer"}}));
  EXPECT_NE(why.find("$.plan.cuda_graphs"), std::string::npos) << why;
  EXPECT_NE(why.find("offload"), std::string::npos) << why;
  // fp8 is captured: its scales are read from device memory (exec/model/fp8.hpp), as Transformer Engine keeps them.
  json fp8 = j;
  fp8["training"]["precision"] = "fp8";
  fp8["cluster"] = "h200-single";
  EXPECT_EQ(refusal(fp8), "");
  // A framework that does not capture its step (DeepSpeed): refused, with the frameworks that do.
  json ds = j;
  ds["training"]["framework"] = "deepspeed";
  why = refusal(ds);
  EXPECT_NE(why.find("does not capture its training step as a CUDA graph"), std::string::npos) << why;
  EXPECT_NE(why.find("megatron-core"), std::string::npos) << why;
  // Megatron-Core does (--enable-cuda-graph), on the catalog's one-GPU H200, which has no graph overhead measured.
  json mc = j;
  mc["training"]["framework"] = "megatron-core";
  mc["cluster"] = "h200-single";
  EXPECT_EQ(refusal(mc), "");
}
