// test_run_moe: `trainplan run` of mixture-of-experts models (exec/moe.hpp) on the bundled tiny MoE scenario
// (scenarios/exec/tiny-moe.json: 4 experts, top-2, capacity factor 1, so copies are dropped). The single-rank
// float64 run (ep 1) is the oracle: every expert-parallel plan (ep inside dp, with pipeline stages, ZeRO 1 / 2 / 3
// and full recompute, and with tensor-parallel experts) reproduces its losses and gradient norms to 1e-9 relative,
// as does the emu backend. A wrong
// all-to-all block order, an expert computing with another's weights, a capacity counted over the ep group instead
// of the rank, or expert gradients reduced twice or not at all would each change them. Plans the executor does not
// run with MoE (sequence parallelism) exit 2 before any work.
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "exec/oracle_run.hpp"
#include "models/json_check.hpp"

using tp::json;
using namespace oracle;

namespace {

// The tiny MoE scenario with `plan` (and `moe`) fields merged in.
std::string moe_scenario(const std::string& name, const json& plan, const json& moe = json::object(),
                         const json& model = json::object()) {
  std::ifstream in(std::string(TP_SOURCE_DIR) + "/scenarios/exec/tiny-moe.json");
  json j = json::parse(in);
  for (auto it = model.begin(); it != model.end(); ++it) j["model"][it.key()] = it.value();
  for (auto it = plan.begin(); it != plan.end(); ++it) j["plan"][it.key()] = it.value();
  for (auto it = moe.begin(); it != moe.end(); ++it) j["model"]["moe"][it.key()] = it.value();
  std::string f = tmpdir() + "/moe_" + name + ".json";
  std::ofstream(f) << j.dump(2);
  return f;
}

}  // namespace

TEST(RunMoe, SingleRankTrainsAndIsDeterministic) {
  std::string f = moe_scenario("single", json::object());
  json a = run(f, 4, true), b = run(f, 4, true);
  ASSERT_FALSE(a.is_null());
  ASSERT_FALSE(b.is_null());
  EXPECT_EQ(a["losses"], b["losses"]);
  EXPECT_LT(a["losses"].back().get<double>(), a["losses"].front().get<double>());
  EXPECT_NEAR(a["losses"].front().get<double>(), std::log(256.0), 0.2);
}

TEST(RunMoe, ExpertParallelPlansMatchSingleRankFloat64) {
  if (!have_mpi()) GTEST_SKIP() << "built without MPI";
  const int steps = 3;
  json ref = run(moe_scenario("ref", json::object()), steps, true);
  ASSERT_FALSE(ref.is_null());
  struct Case { const char* name; json plan; };
  std::vector<Case> cases = {
      {"dp2", {{"dp", 2}}},
      {"dp2_ep2", {{"dp", 2}, {"ep", 2}}},
      {"dp4_ep2", {{"dp", 4}, {"ep", 2}, {"microbatch", 1}}},
      {"dp4_ep4", {{"dp", 4}, {"ep", 4}, {"microbatch", 1}}},
      {"dp2_ep2_pp2", {{"dp", 2}, {"ep", 2}, {"pp", 2}}},
      {"dp2_ep2_zero1", {{"dp", 2}, {"ep", 2}, {"zero", 1}}},
      {"dp2_ep2_zero2", {{"dp", 2}, {"ep", 2}, {"zero", 2}}},
      {"dp2_ep2_zero3_layered", {{"dp", 2}, {"ep", 2}, {"zero", 3}, {"grad_accumulation", "layered"}}},
      {"dp2_ep2_full_recompute", {{"dp", 2}, {"ep", 2}, {"recompute", "full"}}},
      {"tp2", {{"tp", 2}}},
      {"dp2_ep2_tp2", {{"dp", 2}, {"ep", 2}, {"tp", 2}}},
  };
  for (const Case& c : cases) {
    // dp4 with micro-batch 1 routes other micro-batches than the reference's 2-sequence ones: its own reference.
    const bool mb1 = c.plan.contains("microbatch");
    json want = ref;
    if (mb1) {
      want = run(moe_scenario("ref_mb1", {{"microbatch", 1}}), steps, true);
      ASSERT_FALSE(want.is_null());
    }
    json got = run(moe_scenario(c.name, c.plan), steps, true);
    ASSERT_FALSE(got.is_null()) << c.name;
    expect_close(got, want, "losses", 1e-9, c.name);
    expect_close(got, want, "grad_norm", 1e-9, c.name);
  }
}

// Top-1 routing (Switch: the gate is the raw probability) over 2 ep ranks with a SwiGLU model.
TEST(RunMoe, Top1SwigluExpertParallelMatches) {
  if (!have_mpi()) GTEST_SKIP() << "built without MPI";
  json moe = {{"top_k", 1}, {"capacity_factor", 1.25}}, model = {{"activation", "swiglu"}};
  json ref = run(moe_scenario("top1_ref", json::object(), moe, model), 3, true);
  ASSERT_FALSE(ref.is_null());
  json got = run(moe_scenario("top1_ep2", {{"dp", 2}, {"ep", 2}}, moe, model), 3, true);
  ASSERT_FALSE(got.is_null());
  expect_close(got, ref, "losses", 1e-9, "top1 ep2");
  expect_close(got, ref, "grad_norm", 1e-9, "top1 ep2");
}

// The emu backend runs the router, dispatch and combine ops (exec/kernels/backend_emu_moe.cpp).
TEST(RunMoe, EmuBackendMatchesCpuFloat64) {
  json ref = run(moe_scenario("emu_ref", json::object()), 2, true);
  ASSERT_FALSE(ref.is_null());
  json got = run(moe_scenario("emu", json::object()), 2, true, nullptr, "--backend emu");
  ASSERT_FALSE(got.is_null());
  expect_close(got, ref, "losses", 1e-9, "emu");
  expect_close(got, ref, "grad_norm", 1e-9, "emu");
}

TEST(RunMoe, SequenceParallelMoeIsRefused) {
  int code = 0;
  json r = run(moe_scenario("tp2_sp", {{"tp", 2}, {"sequence_parallel", true}}), 1, true, &code);
  EXPECT_TRUE(r.is_null());
  EXPECT_EQ(code, have_mpi() ? 2 : 0) << "sequence parallelism with MoE must exit 2";
}
