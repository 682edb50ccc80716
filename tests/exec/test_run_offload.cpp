// test_run_offload: `trainplan run` with plan.offload "optimizer" (ZeRO-Offload; exec/host_optimizer.hpp) trains
// exactly like the same plan without offload (the single-rank float64 oracle to 1e-9) for ZeRO 0-3, tp, pp and
// dp, on the cpu and emu backends, through a checkpoint resume; and the offload really happens: every step moves
// each rank's own parameter range down (gradients) and up (parameters) once — the closed form below — and the
// moments live on the host (host_state_bytes = 4 copies of the own ranges).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "exec/oracle_run.hpp"

using namespace oracle;

namespace {

const json kOffload = {{"kind", "optimizer"}};

// Parameters of tiny-gpt (scenarios/exec/tiny-gpt.json): 4 layers, hidden 64, vocab 256, seq 32, tied, GELU.
long long tiny_params() {
  const long long C = 64, V = 256, T = 32, L = 4;
  const long long layer = 2 * C + (C * 3 * C + 3 * C) + (C * C + C) + 2 * C + (C * 4 * C + 4 * C) + (4 * C * C + C);
  return V * C + T * C + L * layer + 2 * C;
}

}  // namespace

TEST(RunOffload, OptimizerOffloadMatchesTheOracleAndMovesTheOwnRanges) {
  const int steps = 3;
  json ref = run(scenario("off_ref", json::object()), steps, true);
  ASSERT_FALSE(ref.is_null());
  json one = run(scenario("off_one", {{"offload", kOffload}}), steps, true);
  ASSERT_FALSE(one.is_null());
  expect_close(one, ref, "losses", 1e-9, "one rank");
  expect_close(one, ref, "grad_norm", 1e-9, "one rank");
  ASSERT_TRUE(one.contains("offload")) << one.dump();
  EXPECT_EQ(one["offload"]["kind"], "optimizer");
  const double bytes = 8.0 * (double)tiny_params();  // fp64, every parameter owned by the one rank
  ASSERT_EQ(one["offload"]["d2h_bytes"].size(), (size_t)steps);
  for (int s = 0; s < steps; ++s) {
    EXPECT_EQ(one["offload"]["d2h_bytes"][s].get<double>(), bytes) << s;
    EXPECT_EQ(one["offload"]["h2d_bytes"][s].get<double>(), bytes) << s;
  }
  EXPECT_EQ(one["offload"]["host_state_bytes"].get<double>(), 4 * bytes);
  json emu = run(scenario("off_emu", {{"offload", kOffload}}), steps, true, nullptr, "--backend emu");
  ASSERT_FALSE(emu.is_null());
  expect_close(emu, ref, "losses", 1e-9, "emu");
  if (!have_mpi()) return;
  struct Case { const char* name; json plan; };
  std::vector<Case> cases = {
      {"dp2_zero0", {{"dp", 2}, {"offload", kOffload}}},
      {"dp2_zero1", {{"dp", 2}, {"zero", 1}, {"offload", kOffload}}},
      {"dp2_zero2_tp2", {{"dp", 2}, {"zero", 2}, {"tp", 2}, {"offload", kOffload}}},
      {"dp2_zero3_layered", {{"dp", 2}, {"zero", 3}, {"grad_accumulation", "layered"}, {"offload", kOffload}}},
      {"pp2_dp2_zero1", {{"pp", 2}, {"dp", 2}, {"zero", 1}, {"offload", kOffload}}},
  };
  for (const Case& c : cases) {
    json got = run(scenario(c.name, c.plan), steps, true);
    ASSERT_FALSE(got.is_null()) << c.name;
    expect_close(got, ref, "losses", 1e-9, c.name);
    expect_close(got, ref, "grad_norm", 1e-9, c.name);
  }
}

TEST(RunOffload, OptimizerOffloadResumesBitIdentically) {
  const std::string f = scenario("off_ckpt", {{"offload", kOffload}});
  const std::string dir = tmpdir() + "/off_ckpt_dir";
  fs::remove_all(dir);
  json full = run(f, 4, true, nullptr, "--checkpoint-dir " + dir + " --checkpoint-every 2");
  ASSERT_FALSE(full.is_null());
  fs::remove_all(dir + "/step_00000004");  // resume from step 2: the host moments and master copy must come back
  json rest = run(f, 4, true, nullptr, "--checkpoint-dir " + dir + " --resume");
  ASSERT_FALSE(rest.is_null());
  EXPECT_EQ(rest["first_step"], 2);
  ASSERT_EQ(rest["losses"].size(), 2u);
  EXPECT_EQ(rest["losses"][0], full["losses"][2]);
  EXPECT_EQ(rest["losses"][1], full["losses"][3]);
}
