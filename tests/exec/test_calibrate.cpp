// `trainplan calibrate --backend cpu --quick` writes a profile that is an inline cluster object: a scenario that
// uses it as its cluster parses and simulates; the curves follow read_curve's rules; bad usage exits 2. Also the
// profiler's classes and its classed communicator.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "exec/ops.hpp"
#include "exec/prof.hpp"
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
