// `trainplan calibrate --backend cpu --quick` writes a profile that is an inline cluster object: a scenario that
// uses it as its cluster parses and simulates; the curves follow read_curve's rules; bad usage exits 2. Also the
// profiler's classes and its classed communicator; the float attention's lane reductions (accuracy, no dependence
// on buffer addresses).
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "exec/backends/ops.hpp"
#include "exec/comm/comm_classed.hpp"
#include "exec/prof/prof.hpp"
#include "models/scenario.hpp"
#include "sim/simulate.hpp"

using tp::json;
namespace fs = std::filesystem;

namespace {

std::string tmp(const std::string& name) {
  fs::path p = fs::temp_directory_path() / ("trainplan-cal-" + std::to_string(::getpid()));
  fs::create_directories(p);
  return (p / name).string();
}

int sh(const std::string& cmd) {
  int rc = std::system(cmd.c_str());
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : 128;
}

}  // namespace

// The quick profile is shared with test_validate.cpp through this path (each test makes it if missing).
std::string quick_profile() {
  static std::string f = [] {
    std::string out = tmp("quick-profile.json");
    int ec = sh(std::string(TP_BINARY) + " calibrate --backend cpu --quick --quiet --out " + out + " > " + out + ".log 2>&1");
    return ec == 0 ? out : std::string();
  }();
  return f;
}

TEST(Calibrate, QuickProfileLoadsIntoAScenarioAndSimulates) {
  std::string f = quick_profile();
  ASSERT_FALSE(f.empty()) << "calibrate --quick failed";
  std::ifstream in(f);
  json prof = json::parse(in);
  EXPECT_GT(prof["gpu"]["matrix_flops_per_s"]["fp32"].get<double>(), 1e8);
  EXPECT_EQ(prof["gpu"]["matrix_flops_per_s"]["fp16"].get<double>(), 0.0);
  for (const char* c : {"matrix_efficiency", "memory_efficiency"}) {
    const json& cv = prof["gpu"][c];
    ASSERT_GE(cv.size(), 2u) << c;
    for (size_t i = 0; i < cv.size(); ++i) {
      EXPECT_GT(cv[i][1].get<double>(), 0) << c;
      EXPECT_LE(cv[i][1].get<double>(), 1) << c;
      if (i) {
        EXPECT_GT(cv[i][0].get<double>(), cv[i - 1][0].get<double>()) << c;
      }
    }
  }
  std::ifstream sin(std::string(TP_SOURCE_DIR) + "/scenarios/exec/tiny-gpt.json");
  json sc = json::parse(sin);
  sc["cluster"] = prof;
  tp::Scenario s = tp::scenario_from_json(sc, TP_SOURCE_DIR, "tiny-gpt + quick profile");  // throws on any issue
  tp::Result r = tp::simulate(s);
  EXPECT_GT(r.step_time_s, 0);
  EXPECT_GT(r.peak_bytes_per_gpu, 0);
  EXPECT_TRUE(r.fits);
}

TEST(Calibrate, BadUsageExits2) {
  EXPECT_EQ(sh(std::string(TP_BINARY) + " calibrate --backend cuda --out " + tmp("x.json") + " > /dev/null 2>&1"), 2);
  EXPECT_EQ(sh(std::string(TP_BINARY) + " calibrate --backend cpu > /dev/null 2>&1"), 2);
  EXPECT_FALSE(fs::exists(tmp("x.json")));
}

TEST(Prof, ClassesAndClassedComm) {
  namespace prof = tp::exec::prof;
  prof::reset();
  prof::set_enabled(true);
  std::vector<float> a(64 * 64, 1.f), c(64 * 64);
  tp::ops::matmul<float>(c.data(), a.data(), a.data(), 64, 64, 64, false, false, 1.f, 0.f);
  tp::ops::add<float>(c.data(), c.data(), a.data(), 64);
  auto comm = prof::classed(tp::exec::make_local_comm(), prof::Cls::tp_comm);
  comm->all_reduce_sum(c.data(), 16, tp::exec::Dtype::f32);
  prof::set_enabled(false);
  tp::ops::add<float>(c.data(), c.data(), a.data(), 64);  // not counted
  prof::Snapshot s = prof::snapshot();
  EXPECT_EQ(s.calls[(int)prof::Cls::gemm], 1);
  EXPECT_EQ(s.calls[(int)prof::Cls::elementwise], 1);
  EXPECT_EQ(s.calls[(int)prof::Cls::tp_comm], 1);
  EXPECT_EQ(s.calls[(int)prof::Cls::dp_comm], 0);
  EXPECT_GT(s.seconds[(int)prof::Cls::gemm], 0);
  EXPECT_EQ(prof::comm_class(), prof::Cls::dp_comm);
  {
    prof::CommClass cc(prof::Cls::pp_comm);
    EXPECT_EQ(prof::comm_class(), prof::Cls::pp_comm);
  }
  EXPECT_EQ(prof::comm_class(), prof::Cls::dp_comm);
  prof::reset();
}

// The float attention's softmax and backward row reductions run in 16 lanes (exec/backends/cpu/ops_gemm.cpp): with rows
// longer than 16 (T = 53: full lane blocks and a tail), float agrees with double, and the result does not depend
// on the buffers' addresses (a shifted copy of every buffer gives bit-identical outputs).
TEST(AttentionLanes, FloatMatchesDoubleAndIgnoresAlignment) {
  const long B = 1, T = 53, H = 2, D = 8, n = B * T * H * D;
  std::vector<double> qd(n), kd(n), vd(n), gd(n);
  uint32_t st = 7;
  auto rnd = [&] { st = st * 1664525u + 1013904223u; return (double)(st >> 8) / (1 << 24) * 2 - 1; };
  for (auto* v : {&qd, &kd, &vd, &gd})
    for (double& x : *v) x = rnd();
  auto run_f = [&](long shift, std::vector<float>& out, std::vector<float>& dq) {
    std::vector<float> buf(8 * (n + shift) + T * T * H * B + shift, 0.f);
    float *q = buf.data() + shift, *k = q + n, *v = k + n, *g = v + n, *o = g + n, *dqp = o + n, *dk = dqp + n,
          *dv = dk + n, *att = dv + n;
    for (long i = 0; i < n; ++i) { q[i] = (float)qd[i]; k[i] = (float)kd[i]; v[i] = (float)vd[i]; g[i] = (float)gd[i]; }
    tp::ops::attention_fwd(o, att, q, k, v, B, T, H, H, D);
    tp::ops::attention_bwd(dqp, dk, dv, g, att, q, k, v, B, T, H, H, D);
    out.assign(o, o + n);
    dq.assign(dqp, dqp + n);
  };
  std::vector<double> od(n), attd(B * H * T * T), dqd(n, 0), dkd(n, 0), dvd(n, 0);
  tp::ops::attention_fwd(od.data(), attd.data(), qd.data(), kd.data(), vd.data(), B, T, H, H, D);
  tp::ops::attention_bwd(dqd.data(), dkd.data(), dvd.data(), gd.data(), attd.data(), qd.data(), kd.data(), vd.data(), B, T, H, H, D);
  std::vector<float> o0, dq0, o1, dq1;
  run_f(0, o0, dq0);
  run_f(3, o1, dq1);  // 12 bytes off: a different vector / scalar split if anything depended on the address
  for (long i = 0; i < n; ++i) {
    EXPECT_NEAR(o0[i], od[i], 1e-5) << i;
    EXPECT_NEAR(dq0[i], dqd[i], 1e-5) << i;
    EXPECT_EQ(o0[i], o1[i]) << i;
    EXPECT_EQ(dq0[i], dq1[i]) << i;
  }
}
