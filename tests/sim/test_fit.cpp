// trainplan fit's engine (sim/fit) and log reader (sim/train_logs): runs the simulator generated with known
// parameters are fitted back to those parameters; fewer runs than parameters are refused; Megatron-LM, DeepSpeed
// and TorchTitan iteration lines give the median step time after the warm-up.
#include <gtest/gtest.h>

#include <cmath>

#include "models/scenario.hpp"
#include "sim/fit.hpp"
#include "sim/train_logs.hpp"

namespace tp {
namespace {

Scenario example(const char* name) {
  std::string path = TP_SOURCE_DIR;  // appended in place: GCC 12 warns (-Warray-bounds) on a chain of + here
  path += "/scenarios/examples/";
  path += name;
  return load_scenario(path);
}

// Runs whose measured step times are the simulator's own under a known fit: compute-bound (one GPU, GPT-2),
// data-parallel over nodes (GPT-3 175B with ZeRO-3 on Selene), tensor- and pipeline-parallel H100 runs.
std::vector<FitRun> generated_runs(const FrameworkFit& truth,
                                   std::vector<const char*> names = {"gpt2-124m-h200-single.json", "zero3-layered.json",
                                                                     "llama3-70b-dgx-h100.json", "llama3-8b-dgx-h100-fp8.json",
                                                                     "lga-mpp-gpt3-175b.json", "optimus-2d-frontera.json"}) {
  std::vector<FitRun> runs;
  for (const char* n : names) {
    FitRun r;
    r.name = n;
    r.scenario = example(n);
    Framework f = r.scenario.framework;
    f.fit = truth;
    r.measured_s = predicted_step_s(r, f);
    runs.push_back(std::move(r));
  }
  return runs;
}

TEST(Fit, RecoversTheParametersTheRunsWereGeneratedWith) {
  FrameworkFit truth;
  truth.compute_efficiency_scale = 0.8;
  truth.network_efficiency_scale = 0.6;
  truth.step_overhead_s = 0.05;
  const std::vector<FitRun> runs = generated_runs(truth);
  const FitResult r = fit_framework(runs, runs.front().scenario.framework, kFitDefaultParams, 2);
  EXPECT_NEAR(r.fit.compute_efficiency_scale, 0.8, 0.02);
  EXPECT_NEAR(r.fit.network_efficiency_scale, 0.6, 0.03);
  EXPECT_NEAR(r.fit.step_overhead_s, 0.05, 0.01);
  EXPECT_LT(r.mean_abs_after, 0.005);
  EXPECT_GT(r.mean_abs_before, 0.05);  // the unfitted profile was off
  EXPECT_LT(r.mean_abs_loo, 0.02);     // each run predicted from the others
  ASSERT_EQ(r.std_error.size(), 3u);
}

// The attention scale slows only the fused attention kernels: a 128K-token context-parallel run and short-
// sequence runs under a known compute and attention scale are fitted back to both.
TEST(Fit, AttentionScaleIsToldFromComputeByTheSequenceLength) {
  FrameworkFit truth;
  truth.compute_efficiency_scale = 0.9;
  truth.attention_efficiency_scale = 0.6;
  const std::vector<FitRun> runs =
      generated_runs(truth, {"llama3-70b-128k-cp16.json", "llama3-8b-dgx-h100-fp8.json", "gpt2-124m-h200-single.json"});
  for (const FitRun& r : runs) {  // the scale slows every run's attention
    Framework only_compute = r.scenario.framework;
    only_compute.fit = truth;
    only_compute.fit.attention_efficiency_scale = 1;
    EXPECT_LT(predicted_step_s(r, only_compute), r.measured_s) << r.name;
  }
  const FitResult r = fit_framework(runs, runs.front().scenario.framework,
                                    {"compute_efficiency_scale", "attention_efficiency_scale"}, 2);
  EXPECT_NEAR(r.fit.compute_efficiency_scale, 0.9, 0.02);
  EXPECT_NEAR(r.fit.attention_efficiency_scale, 0.6, 0.03);
  EXPECT_DOUBLE_EQ(fit_param_value(r.fit, "attention_efficiency_scale"), r.fit.attention_efficiency_scale);
  EXPECT_LT(r.mean_abs_after, 0.005);
}

TEST(Fit, OneParameterAloneAndTooFewRuns) {
  FrameworkFit truth;
  truth.step_overhead_s = 0.2;
  std::vector<FitRun> runs = generated_runs(truth);
  runs.resize(2);
  const FitResult r = fit_framework(runs, runs.front().scenario.framework, {"step_overhead_s"}, 1);
  EXPECT_NEAR(r.fit.step_overhead_s, 0.2, 0.005);
  EXPECT_DOUBLE_EQ(r.fit.compute_efficiency_scale, 1.0);  // not fitted: the base's
  runs.resize(1);
  EXPECT_THROW(fit_framework(runs, runs.front().scenario.framework, kFitParams, 1), InputError);
  EXPECT_THROW(fit_framework(runs, runs.front().scenario.framework, {"speed"}, 1), InputError);
}

TEST(TrainLogs, MedianStepAfterTheWarmUpForEachFramework) {
  const std::string megatron =
      " iteration        1/     100 | consumed samples:          512 | elapsed time per iteration (ms): 9000.0 | lr: 1.0E-05\n"
      " iteration        2/     100 | consumed samples:         1024 | elapsed time per iteration (ms): 2100.0 |\n"
      " iteration        3/     100 | consumed samples:         1536 | elapsed time per iteration (ms): 1500.0 |\n"
      " iteration        4/     100 | consumed samples:         2048 | elapsed time per iteration (ms): 1600.0 |\n"
      " iteration        5/     100 | consumed samples:         2560 | elapsed time per iteration (ms): 5000.0 |\n";
  const LogStepTimes m = read_log_step_times(megatron, "m.log", 512, 512 * 2048, 64);
  EXPECT_EQ(m.format, "megatron");
  EXPECT_EQ(m.skipped, 2);
  EXPECT_DOUBLE_EQ(m.median_s, 1.6);
  const std::string ds =
      "[2024-01-01 00:00:00] [INFO] epoch=0/micro_step=10/global_step=10, RunningAvgSamplesPerSec=10.0, CurrSamplesPerSec=8.0, MemAllocated=1GB\n"
      "epoch=0/micro_step=20/global_step=20, RunningAvgSamplesPerSec=12.0, CurrSamplesPerSec=16.0\n"
      "epoch=0/micro_step=30/global_step=30, RunningAvgSamplesPerSec=12.0, CurrSamplesPerSec=32.0\n";
  const LogStepTimes d = read_log_step_times(ds, "d.log", 64, 64 * 1024, 16, 1);
  EXPECT_EQ(d.format, "deepspeed");
  EXPECT_DOUBLE_EQ(d.median_s, 0.5 * (64 / 16.0 + 64 / 32.0));
  const std::string titan =
      "[rank0]:[titan] 2025-01-01 00:00:00,000 - root - INFO - step:  1  loss: 12.25  memory: 40.1GiB(42.2%)  tps: 1,000  tflops: 10.0  mfu: 1.0%\n"
      "[rank0]:[titan] 2025-01-01 00:00:10,000 - root - INFO - step: 10  loss:  9.00  memory: 60.1GiB(63.2%)  tps: 6,400  tflops: 330.0  mfu: 33.4%\n";
  const LogStepTimes t = read_log_step_times(titan, "t.log", 8, 8 * 8192, 8, 1);
  EXPECT_EQ(t.format, "torchtitan");
  EXPECT_DOUBLE_EQ(t.median_s, 8.0 * 8192 / (6400 * 8));
  EXPECT_THROW(read_log_step_times("nothing here\n", "x.log", 8, 8, 8), InputError);
}

}  // namespace
}  // namespace tp

namespace tp {
namespace {

// Measured breakdown classes tell the compute scale from the network scale: two runs with their compute and
// exposed data-parallel times recover both, and their peak memory is predicted beside them.
TEST(Fit, BreakdownClassesDetermineComputeAndNetworkFromTwoRuns) {
  FrameworkFit truth;
  truth.compute_efficiency_scale = 0.7;
  truth.network_efficiency_scale = 0.5;
  std::vector<FitRun> runs;
  for (const char* n : {"zero3-layered.json", "lga-mpp-gpt3-175b.json"}) {
    FitRun r;
    r.name = n;
    r.scenario = example(n);
    r.measured_classes = {{"compute", 0}, {"dp_comm_exposed", 0}};
    Framework f = r.scenario.framework;
    f.fit = truth;
    const FitPrediction p = predict_run(r, f);
    r.measured_s = p.step_s;
    r.measured_classes = {{"compute", p.classes_s[0]}, {"dp_comm_exposed", p.classes_s[1]}};
    r.measured_peak_bytes = p.peak_bytes;
    runs.push_back(std::move(r));
  }
  ASSERT_GT(runs[0].measured_classes[1].second, 0.0);  // the ZeRO-3 run exposes data-parallel time
  const FitResult r = fit_framework(runs, runs.front().scenario.framework, {"compute_efficiency_scale", "network_efficiency_scale"}, 2);
  EXPECT_NEAR(r.fit.compute_efficiency_scale, 0.7, 0.02);
  EXPECT_NEAR(r.fit.network_efficiency_scale, 0.5, 0.03);
  ASSERT_EQ(r.peak_bytes_after.size(), 2u);
  EXPECT_NEAR(r.peak_bytes_after[0], runs[0].measured_peak_bytes, 1.0);  // no parameter moves memory
  FitRun bad = runs[0];
  bad.measured_classes = {{"speed", 1.0}};
  EXPECT_THROW(predict_run(bad, bad.scenario.framework), InputError);
}

}  // namespace
}  // namespace tp
