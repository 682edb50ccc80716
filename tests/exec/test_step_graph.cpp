// test_step_graph: a training step captured once and replayed as a graph (--cuda-graphs, exec/runtime/step_graph.hpp),
// checked without a GPU on the emu-device backend, whose capture records ops instead of running them and refuses
// what CUDA's stream capture refuses (exec/backends/emu/emu_graph.hpp):
// - the graph pool's rules (exec/backends/graph_pool.hpp), which the cuda and emu-device allocators share;
// - the emu-device capture: recorded work runs only at a launch, replays read the buffers' current contents, and a
//   read-back, a host copy or a synchronisation inside the capture throws; memory freed inside it is not reused by
//   eager allocations while the graph lives;
// - runs: every plan that allows a capture gives, captured at its second step and replayed after, the eager run's
//   losses and gradient norms bit for bit (fp64, bf16 storage, full and selective recompute, flash, micro-batches, fp8
//   with its scales changing every step); a capture
//   that an op refuses falls back to the eager step (same results); --cuda-graphs on refuses plans that cannot be
//   captured, by name.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "exec/backends/backend.hpp"
#include "exec/backends/graph_pool.hpp"
#include "exec/backends/ops.hpp"
#include "exec/emu_device_util.hpp"
#include "exec/oracle_run.hpp"
#include "exec/selftest/selftest.hpp"

using namespace tp::exec;
using tp::json;
namespace ops = tp::ops;

using testdev::dev;
using testdev::down;
using testdev::up;

TEST(GraphPool, KeepsTheGraphsBlocksUntilNoGraphIsLeft) {
  GraphPool p;
  int a = 0, b = 0, c = 0;
  size_t got = 0;
  EXPECT_FALSE(p.keep(&a, 8));  // eager, not the pool's: freed as usual
  EXPECT_EQ(p.take(8, 8, &got), nullptr);
  p.begin_capture();
  EXPECT_TRUE(p.busy());
  p.adopt(&b);                         // rule 1: allocated while capturing
  EXPECT_TRUE(p.keep(&a, 8));          // rule 2: a block of before the capture, freed inside it
  EXPECT_EQ(p.take(8, 9, &got), &a);   // rule 3: reused inside the capture
  EXPECT_EQ(got, 8u);
  EXPECT_TRUE(p.keep(&a, 8));
  EXPECT_EQ(p.take(16, 17, &got), nullptr);  // (no block of that size)
  p.end_capture(true);
  EXPECT_EQ(p.take(8, 8, &got), nullptr);  // rule 3: never to eager allocations
  EXPECT_TRUE(p.keep(&b, 16));             // rule 4: the pool's block freed after the capture stays
  EXPECT_FALSE(p.keep(&c, 8));             // an ordinary block
  EXPECT_TRUE(p.release().empty());        // a graph lives
  EXPECT_TRUE(p.owns(&a) && p.owns(&b));
  p.graph_destroyed();
  EXPECT_EQ(p.release().size(), 2u);  // rule 5
  EXPECT_FALSE(p.owns(&a));
  EXPECT_FALSE(p.keep(&b, 16));
  // An abandoned capture made no graph: its blocks come back at once.
  p.begin_capture();
  p.adopt(&c);
  EXPECT_TRUE(p.keep(&c, 8));
  p.end_capture(false);
  EXPECT_FALSE(p.busy());
  EXPECT_EQ(p.release().size(), 1u);
}

TEST(StepGraphEmuDevice, RecordsOpsRunsThemAtEachLaunchAndRefusesReadBacks) {
  BackendScope scope(dev());
  char why[512] = "";
  float* x = up({1, 2, 3, 4});
  float* y = up({0, 0, 0, 0});
  ASSERT_TRUE(dev().capture_begin(why, sizeof why)) << why;
  ops::scale(y, x, 2.f, 4);
  ops::add(y, y, x, 4);  // y = 3 x
  dev().copy(x, y, sizeof(float) * 4, CopyKind::device_to_device, Stream{});  // x = y
  std::vector<float> h(4);
  EXPECT_THROW(ops::sum_squares(x, 4), std::runtime_error);  // a read-back
  EXPECT_THROW(dev().copy(h.data(), y, 16, CopyKind::device_to_host, Stream{}), std::runtime_error);
  EXPECT_THROW(dev().copy(y, h.data(), 16, CopyKind::host_to_device, Stream{}), std::runtime_error);
  EXPECT_THROW(dev().sync(), std::runtime_error);
  EXPECT_THROW(dev().stream_sync(Stream{}), std::runtime_error);
  // Memory freed inside the capture stays the graph's.
  float* tmp = static_cast<float*>(dev().alloc(sizeof(float) * 61));
  ops::fill(tmp, 1.f, 61);
  dev().free(tmp);
  void* g = dev().capture_end(true, why, sizeof why);
  ASSERT_NE(g, nullptr) << why;
  EXPECT_EQ(down(y, 4), (std::vector<float>{0, 0, 0, 0}));  // recorded, not run
  EXPECT_EQ(down(x, 4), (std::vector<float>{1, 2, 3, 4}));
  float* eager = static_cast<float*>(dev().alloc(sizeof(float) * 61));
  EXPECT_NE(eager, tmp);  // not the graph's block while it lives
  dev().graph_launch(g);
  EXPECT_EQ(down(y, 4), (std::vector<float>{3, 6, 9, 12}));
  EXPECT_EQ(down(x, 4), (std::vector<float>{3, 6, 9, 12}));
  dev().graph_launch(g);  // a replay reads the buffers as they are now
  EXPECT_EQ(down(x, 4), (std::vector<float>{9, 18, 27, 36}));
  dev().graph_destroy(g);
  float* again = static_cast<float*>(dev().alloc(sizeof(float) * 61));
  EXPECT_EQ(again, tmp);  // released with the graph (emu-device reuses a freed handle of the same size)
  for (float* p : {x, y, eager, again}) dev().free(p);
  // An abandoned capture runs nothing.
  float* z = up({5, 5});
  ASSERT_TRUE(dev().capture_begin(why, sizeof why));
  ops::fill(z, 0.f, 2);
  EXPECT_EQ(dev().capture_end(false, why, sizeof why), nullptr);
  EXPECT_EQ(down(z, 2), (std::vector<float>{5, 5}));
  dev().free(z);
}

// The selftest's graph check (what `selftest --backend cuda` runs first on a GPU) passes on emu-device.
TEST(StepGraphEmuDevice, SelftestsGraphCheckPasses) {
  const OpCheck c = selftest_graph_check(dev());
  EXPECT_EQ(c.status, CheckStatus::pass) << c.message << " err " << c.err;
  EXPECT_LT(c.err, 1e-6);
}

namespace {

const std::string kDev = "--backend emu-device";

// The run of f with --cuda-graphs `mode` (and extra options); fails the test when it does not finish.
json graph_run(const std::string& f, int steps, bool fp64, const std::string& mode, const std::string& extra = "") {
  int code = 0;
  json r = oracle::run(f, steps, fp64, &code, kDev + " --cuda-graphs " + mode + " " + extra);
  EXPECT_FALSE(r.is_null()) << f << ": exit " << code << "\n" << oracle::log_text(f);
  return r;
}

}  // namespace

TEST(RunStepGraph, CapturedAndReplayedStepsAreTheEagerStepsBitForBit) {
  struct Case {
    std::string name;
    json plan;
    std::string precision;
    bool fp64;
  };
  const std::vector<Case> cases = {
      {"fp64", json::object(), "fp32", true},
      {"bf16_flash_full", {{"attention", "flash"}, {"microbatch", 1}, {"recompute", "full"}}, "bf16", false},
      {"bf16_selective", {{"attention", "unfused"}, {"recompute", "selective"}}, "bf16", false},
      // fp8: the scales change after every step, and each replay reads its step's from device memory
      {"fp8", {{"attention", "flash"}}, "fp8", false},
  };
  const int steps = 3;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const std::string f = oracle::precision_scenario("graph", c.name, c.plan, "tiny-gpt", c.precision,
                                                     c.precision == "fp8" ? "dgx-h100" : "");
    const json eager = graph_run(f, steps, c.fp64, "off"), graph = graph_run(f, steps, c.fp64, "on");
    if (eager.is_null() || graph.is_null()) continue;
    EXPECT_EQ(eager["graph_steps"], json::array());
    EXPECT_EQ(graph["graph_steps"], json::array({1}));  // the second step captured, the third replayed it
    EXPECT_EQ(graph["losses"], eager["losses"]);
    EXPECT_EQ(graph["grad_norm"], eager["grad_norm"]);
  }
}

// A delinked run captures each phase's step (the pseudo phase's, then the real phase's: two runs, two graphs), and a
// resume from a checkpoint captures again after its first step: both the eager runs' results exactly.
TEST(RunStepGraph, DelinkedAndResumedRunsCaptureEachTheirOwnStep) {
  const json delink = {{"unique_layers", 2}, {"tokens", 768}};
  const std::string d = oracle::scenario("graph_delink", {{"delink", delink}, {"cuda_graphs", true}});
  const json eager = graph_run(d, 5, false, "off", "--delink-step 3"), graph = graph_run(d, 5, false, "auto", "--delink-step 3");
  ASSERT_FALSE(eager.is_null());
  ASSERT_FALSE(graph.is_null());
  EXPECT_EQ(graph["delink_step"].get<int>(), 3);
  EXPECT_EQ(graph["graph_steps"], json::array({1, 4}));  // (each phase's run: captured at its second step)
  EXPECT_EQ(graph["losses"], eager["losses"]);
  EXPECT_EQ(graph["grad_norm"], eager["grad_norm"]);
  const std::string f = oracle::scenario("graph_resume", {{"cuda_graphs", true}});
  const json e32 = graph_run(f, 3, false, "off");
  ASSERT_FALSE(e32.is_null());
  oracle::expect_resume_bit_identical(f, 3, e32, kDev + " --cuda-graphs on", "graph_ckpt");
}

TEST(RunStepGraph, ARefusedCaptureRunsTheStepEagerly) {
  const std::string f = oracle::precision_scenario("graph", "refused", {{"cuda_graphs", true}}, "tiny-gpt", "fp32");
  const json eager = graph_run(f, 3, false, "off"), captured = graph_run(f, 3, false, "auto");
  ASSERT_FALSE(captured.is_null());
  EXPECT_EQ(captured["graph_steps"], json::array({1}));  // (auto follows plan.cuda_graphs: captured where nothing refuses)
  // Without plan.cuda_graphs, auto runs eagerly (as the simulator costs that plan).
  const std::string plain = oracle::precision_scenario("graph", "plain", json::object(), "tiny-gpt", "fp32");
  const json p = graph_run(plain, 2, false, "auto");
  ASSERT_FALSE(p.is_null());
  EXPECT_EQ(p["graph_steps"], json::array());
  // An op that cannot be captured (a stand-in for a library call): auto falls back, the same results.
  const std::string env = "TP_EMU_GRAPH_REFUSE=layernorm_fwd ";
  int code = 0;
  const std::string out = f + ".refused.json";
  const std::string cmd = env + TP_BINARY + std::string(" run ") + f + " --steps 3 --quiet --json " + out + " " + kDev +
                          " > " + f + ".refused.log 2>&1";
  code = std::system(cmd.c_str());
  ASSERT_EQ(code, 0) << oracle::log_text(f + ".refused");
  std::ifstream in(out);
  const json r = json::parse(in);
  EXPECT_EQ(r["graph_steps"], json::array());
  EXPECT_EQ(r["losses"], eager["losses"]);
  EXPECT_EQ(r["grad_norm"], eager["grad_norm"]);
  EXPECT_NE(oracle::log_text(f + ".refused").find("note: cuda graphs off: the step's capture failed"), std::string::npos);
  EXPECT_NE(oracle::log_text(f + ".refused").find("layernorm_fwd"), std::string::npos);
  // --cuda-graphs on: the failed capture is an error.
  const std::string on = env + TP_BINARY + std::string(" run ") + f + " --steps 3 --quiet " + kDev +
                         " --cuda-graphs on > " + f + ".on.log 2>&1";
  EXPECT_NE(std::system(on.c_str()), 0);
}

TEST(RunStepGraph, OnRefusesPlansThatCannotBeCaptured) {
  struct Case {
    std::string name, precision, extra, says;
    json plan;
  };
  const std::vector<Case> cases = {
      {"offload", "fp32", "", "offload", {{"offload", {{"kind", "optimizer"}}}}},
      {"trace", "fp32", "--trace TRACE", "--trace", json::object()},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const std::string f = oracle::precision_scenario("graph_no", c.name, c.plan, "tiny-gpt", c.precision,
                                                     c.precision == "fp8" ? "dgx-h100" : "");
    std::string extra = c.extra;
    if (auto at = extra.find("TRACE"); at != std::string::npos) extra.replace(at, 5, f + ".trace.json");
    int code = 0;
    const json r = oracle::run(f, 2, false, &code, kDev + " --cuda-graphs on " + extra);
    EXPECT_TRUE(r.is_null());
    EXPECT_EQ(code, 2);
    const std::string log = oracle::log_text(f);
    EXPECT_NE(log.find("--cuda-graphs on: this plan's step cannot be captured"), std::string::npos) << log;
    EXPECT_NE(log.find(c.says), std::string::npos) << log;
    // auto runs it eagerly
    const json a = oracle::run(f, 2, false, &code, kDev + " " + extra);
    ASSERT_FALSE(a.is_null()) << oracle::log_text(f);
    EXPECT_EQ(a["graph_steps"], json::array());
  }
  // A backend that cannot capture.
  const std::string f = oracle::scenario("graph_cpu", json::object());
  int code = 0;
  EXPECT_TRUE(oracle::run(f, 2, false, &code, "--backend cpu --cuda-graphs on").is_null());
  EXPECT_EQ(code, 2);
  EXPECT_NE(oracle::log_text(f).find("--cuda-graphs on needs a backend that captures steps"), std::string::npos);
  // plan.cuda_graphs on a plan whose step cannot be captured: the scenario is refused, naming the key.
  const std::string two = oracle::scenario("graph_dp2", {{"dp", 2}, {"cuda_graphs", true}});
  EXPECT_TRUE(oracle::run(two, 2, false, &code, "--backend cpu").is_null());
  EXPECT_EQ(code, 2);
  EXPECT_NE(oracle::log_text(two).find("$.plan.cuda_graphs"), std::string::npos) << oracle::log_text(two);
  EXPECT_NE(oracle::log_text(two).find("several GPUs"), std::string::npos) << oracle::log_text(two);
}
