// test_selftest: `trainplan selftest` (exec/selftest/selftest.hpp), what a user runs first on a GPU: its op checks pass on
// every compiled-in backend, its two-step training comparison matches the CPU backend on emu and emu-device, and
// it reports a wrong op as failed and an op that throws "not supported" as unsupported.
#include <gtest/gtest.h>

#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

#include "exec/backends/backend.hpp"
#include "exec/selftest/selftest.hpp"

using namespace tp::exec;

// The op checks of `trainplan selftest` (exec/selftest/selftest.hpp), quick shapes, on every compiled-in backend: all
// pass and none is unsupported (emu registers itself in available_backends and is checked here too).
TEST(Selftest, OpChecksPassOnEveryBackend) {
  for (const Backend* b : available_backends()) {
    const SelftestResult r = run_selftest(*b, /*quick=*/true);
    EXPECT_GT(r.passed, 100) << b->name;
    EXPECT_EQ(r.failed, 0) << b->name;
    EXPECT_EQ(r.unsupported, 0) << b->name;
    for (const OpCheck& c : r.checks)
      EXPECT_EQ(c.status, CheckStatus::pass) << b->name << " " << c.op << " " << c.shape << " " << c.variant << ": "
                                             << c.err << " > " << c.tol << " " << c.message;
  }
}

// The selftest's training comparisons: two steps of the tiny GPT on emu-device (the emu backend's kernels with device
// memory the host cannot read, and staging) give the cpu backend's losses in fp32 and bf16, unfused and flash; a
// backend the run cannot find fails with the reason instead of throwing. emu-device captures steps: it trains with
// CUDA graphs on, and its bf16 flash run with them is its eager run exactly.
TEST(Selftest, TrainingMatchesTheCpuBackend) {
  for (const Backend* b : {&emu_device_backend()}) {
    const std::vector<TrainCheck> cs = run_selftest_training(*b, 2);
    ASSERT_EQ(cs.size(), 5u);
    for (const TrainCheck& c : cs) {
      const std::string what = std::string(b->name) + " " + c.precision + " " + c.attention;
      EXPECT_EQ(c.status, CheckStatus::pass) << what << ": " << c.err << " " << c.message;
      ASSERT_EQ(c.got_losses.size(), 2u) << what;
      ASSERT_EQ(c.want_losses.size(), 2u) << what;
      EXPECT_LT(c.err, c.tol) << what;
      EXPECT_NE(c.attention.find("cuda graphs"), std::string::npos) << what;
      const bool self = c.attention.find("against eager") != std::string::npos;
      if (self) {
        EXPECT_EQ(c.err, 0.0) << what;
      }
      EXPECT_EQ(c.tol, c.precision == "bf16" && !self ? kSelftestTrainTolBf16 : kSelftestTrainTol) << what;
      EXPECT_GT(c.want_losses[0], 1.0);  // a real loss (log 256 = 5.5 at the start)
    }
    EXPECT_NE(cs[0].want_losses, cs[2].want_losses) << "bf16 trains differently from fp32";
  }
  Backend unknown = cpu_backend();
  unknown.name = "no-such-backend";
  const std::vector<TrainCheck> bad = run_selftest_training(unknown, 2);
  ASSERT_EQ(bad.size(), 4u);
  EXPECT_EQ(bad[0].status, CheckStatus::fail);
  EXPECT_NE(bad[0].message.find("no-such-backend"), std::string::npos) << bad[0].message;
}

// The selftest catches a wrong op (gelu_fwd as the identity) and lists an op that throws "not supported" as
// unsupported, not failed; every other check still passes.
TEST(Selftest, FlagsAWrongOpAndAnUnsupportedOne) {
  Backend broken = cpu_backend();
  broken.name = "broken";
  broken.f32.gelu_fwd = [](float* y, const float* x, long n) { std::copy(x, x + n, y); };
  broken.f32.max_combine = [](float*, const float*, long, long) {
    throw std::runtime_error("op max_combine is not supported on broken");
  };
  const SelftestResult r = run_selftest(broken, /*quick=*/true);
  EXPECT_GT(r.failed, 0);
  EXPECT_GT(r.unsupported, 0);
  for (const OpCheck& c : r.checks) {
    const CheckStatus want = c.op == "gelu_fwd" ? CheckStatus::fail
                             : c.op == "max_combine" ? CheckStatus::unsupported : CheckStatus::pass;
    EXPECT_EQ(c.status, want) << c.op << " " << c.shape << " " << c.err;
  }
}

// Every op of exec/backends/ops.def has a check in the selftest (quick and full), and a missing one would be a
// failed "coverage" check of run_selftest.
TEST(Selftest, ChecksEveryOpOfTheOpList) {
  EXPECT_EQ(unchecked_ops(true), std::vector<std::string>{});
  EXPECT_EQ(unchecked_ops(false), std::vector<std::string>{});
}
