// test_run_relayout: Pseudo-to-Real whose pseudo phase trains on its own plan (plan.delink.plan with another
// layout, exec/runtime/runtime_relayout.cpp). The pseudo phase runs on its plan's ranks, hands the delinked state over in
// the single-rank layout, and the real plan trains on from the delink step. The oracle is the single-rank float64
// run with the same delink step: every pair of layouts (dp, tp, pp, ZeRO, 2D, cp, SP, interleaving, MoE with ep,
// each offload kind; a pseudo phase on fewer or on more ranks than the real one) reproduces its losses and
// gradient norms to 1e-9 relative. A moment not handed over, a shard put at another tp rank's place or a copy
// written twice would change the steps after the delink (the handover also checks that every element is written
// exactly once). The handover also runs on the emu-device backend (device memory the host cannot read).
// Checkpoints of either phase resume bit for bit.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "exec/oracle_run.hpp"
#include "models/json_check.hpp"

using tp::json;
namespace fs = std::filesystem;
using namespace oracle;

namespace {

const json kDelink = {{"unique_layers", 2}, {"tokens", 768}};

// The tiny GPT (or the tiny MoE with every layer an MoE layer) with the real plan `real` and the pseudo phase's
// plan `pseudo` (merged into the bundled scenario's plan).
std::string relayout_scenario(const std::string& name, const json& real, const json& pseudo, bool moe = false) {
  const std::string base = std::string(TP_SOURCE_DIR) + (moe ? "/scenarios/exec/tiny-moe.json" : "/scenarios/exec/tiny-gpt.json");
  json j = json::parse(std::ifstream(base));
  if (moe) j["model"]["moe"]["every"] = 1;  // (a weight group serves consecutive layers: all MoE)
  json pp = j["plan"];
  for (auto it = real.begin(); it != real.end(); ++it) j["plan"][it.key()] = it.value();
  for (auto it = pseudo.begin(); it != pseudo.end(); ++it) pp[it.key()] = it.value();
  json d = kDelink;
  if (!pseudo.is_null()) d["plan"] = pp;
  j["plan"]["delink"] = d;
  const std::string f = tmpdir() + "/relayout_" + name + ".json";
  std::ofstream(f) << j.dump(2);
  return f;
}

}  // namespace

TEST(RunRelayout, PseudoPhaseOnItsOwnPlanMatchesSingleRankFloat64) {
  json ref = run(relayout_scenario("ref", json::object(), nullptr), 6, true, nullptr, "--delink-step 3");
  ASSERT_FALSE(ref.is_null());
  // One rank, micro-batch 1 in the pseudo phase: its own RankRun, the handover, then the real plan's.
  json one = run(relayout_scenario("mb1", json::object(), {{"microbatch", 1}}), 6, true, nullptr, "--delink-step 3");
  ASSERT_FALSE(one.is_null());
  EXPECT_EQ(one["delink_step"], 3);
  expect_close(one, ref, "losses", 1e-9, "pseudo mb1");
  expect_close(one, ref, "grad_norm", 1e-9, "pseudo mb1");
  if (!have_mpi()) return;
  struct Case { const char* name; json real, pseudo; };
  const json gran1 = {{"kind", "granular"}, {"fraction", 1.0}}, gran_half = {{"kind", "granular"}, {"fraction", 0.5}};
  const std::vector<Case> cases = {
      {"dp2_tp2_z3_from_tp2", {{"dp", 2}, {"tp", 2}, {"zero", 3}}, {{"tp", 2}}},  // pseudo on 2 of 4 ranks
      {"pp2_dp2_z1_from_pp2_dp2_z3", {{"pp", 2}, {"dp", 2}, {"zero", 1}}, {{"pp", 2}, {"dp", 2}, {"zero", 3}, {"microbatch", 1}}},
      {"tp4_2d_from_dp2_z2", {{"tp", 4}, {"tp_mode", "2d"}}, {{"dp", 2}, {"zero", 2}}},
      {"cp2_dp2_from_tp2_sp_pp2", {{"cp", 2}, {"dp", 2}}, {{"tp", 2}, {"sequence_parallel", true}, {"pp", 2}}},
      {"dp2_z3_granular_from_optimizer", {{"dp", 2}, {"zero", 3}, {"offload", gran1}}, {{"offload", {{"kind", "optimizer"}}}}},
      {"pp2_chunked_from_dp2_z1_granular", {{"pp", 2}, {"offload", {{"kind", "chunked"}, {"chunk_elements", 2048}}}},
       {{"dp", 2}, {"zero", 1}, {"offload", gran_half}}},
      // the pseudo phase on more ranks (4) than the real plan (2): the job has 4, the real phase runs on 2
      {"dp2_z2_optimizer_from_pp2_dp2_interleaved", {{"dp", 2}, {"zero", 2}, {"offload", {{"kind", "optimizer"}}}},
       {{"pp", 2}, {"dp", 2}, {"schedule", "interleaved"}, {"virtual_stages", 2}}},
  };
  for (const Case& c : cases) {
    json got = run(relayout_scenario(c.name, c.real, c.pseudo), 6, true, nullptr, "--delink-step 3 --device-budget 600000");
    ASSERT_FALSE(got.is_null()) << c.name;
    EXPECT_EQ(got["delink_step"], 3) << c.name;
    expect_close(got, ref, "losses", 1e-9, c.name);
    expect_close(got, ref, "grad_norm", 1e-9, c.name);
  }
  // The bundled example (dp 2 x tp 2 ZeRO-1 from tp 2; its delink step from its tokens: 768 / (8 x 32) = 3).
  const std::string copy = tmpdir() + "/relayout_bundled_example.json";  // (run writes its output beside the file)
  fs::copy_file(std::string(TP_SOURCE_DIR) + "/scenarios/exec/tiny-gpt-pseudo-to-real.json", copy,
                fs::copy_options::overwrite_existing);
  json example = run(copy, 6, true);
  ASSERT_FALSE(example.is_null());
  EXPECT_EQ(example["delink_step"], 3);
  expect_close(example, ref, "losses", 1e-9, "scenarios/exec/tiny-gpt-pseudo-to-real.json");
  // MoE: experts sharded over ep 2 in one phase, tp-split in the other, or on the host.
  json moe_ref = run(relayout_scenario("moe_ref", json::object(), nullptr, true), 5, true, nullptr, "--delink-step 2");
  ASSERT_FALSE(moe_ref.is_null());
  const std::vector<Case> moe_cases = {
      {"moe_dp2_ep2_z1_from_tp2", {{"dp", 2}, {"ep", 2}, {"zero", 1}}, {{"tp", 2}}},
      {"moe_tp2_from_dp2_ep2_z3_granular_experts", {{"tp", 2}},
       {{"dp", 2}, {"ep", 2}, {"zero", 3}, {"offload", {{"kind", "granular"}, {"fraction", 0.5}, {"target", "experts"}}}}},
  };
  for (const Case& c : moe_cases) {
    json got = run(relayout_scenario(c.name, c.real, c.pseudo, true), 5, true, nullptr, "--delink-step 2");
    ASSERT_FALSE(got.is_null()) << c.name;
    expect_close(got, moe_ref, "losses", 1e-9, c.name);
    expect_close(got, moe_ref, "grad_norm", 1e-9, c.name);
  }
}

// The handover in windows smaller than any view (--handover-window 97, which divides no layout's size): the
// same results as in one window, with the pseudo phase on fewer ranks, on more ranks, and over a 2D layout
// (whose padding rows are no element).
TEST(RunRelayout, SmallHandoverWindowsMatchSingleRank) {
  json ref = run(relayout_scenario("win_ref", json::object(), nullptr), 6, true, nullptr, "--delink-step 3");
  ASSERT_FALSE(ref.is_null());
  struct Case { const char* name; json real, pseudo; };
  std::vector<Case> cases = {{"win_mb1", json::object(), {{"microbatch", 1}}}};
  if (have_mpi()) {
    cases.push_back({"win_dp2_tp2_z3_from_tp2", {{"dp", 2}, {"tp", 2}, {"zero", 3}}, {{"tp", 2}}});
    cases.push_back({"win_tp4_2d_from_dp2_z2", {{"tp", 4}, {"tp_mode", "2d"}}, {{"dp", 2}, {"zero", 2}}});
    cases.push_back({"win_dp2_from_pp2_dp2_z1", {{"dp", 2}}, {{"pp", 2}, {"dp", 2}, {"zero", 1}}});
  }
  for (const Case& c : cases) {
    json got = run(relayout_scenario(c.name, c.real, c.pseudo), 6, true, nullptr, "--delink-step 3 --handover-window 97");
    ASSERT_FALSE(got.is_null()) << c.name;
    expect_close(got, ref, "losses", 1e-9, c.name);
    expect_close(got, ref, "grad_norm", 1e-9, c.name);
  }
}

// On the emu-device backend (tensor memory the host cannot read; a host read dies with SIGSEGV): the handover
// reads the pseudo phase's weights and moments (device, pinned host for chunks, host for granular offload) and
// writes the real phase's through the backend's copies only, its sums through the staged communicator.
TEST(RunRelayout, HandoverOnADeviceBackendMatchesSingleRank) {
  if (!have_mpi()) GTEST_SKIP() << "built without MPI";
  json ref = run(relayout_scenario("dev_ref", json::object(), nullptr), 6, true, nullptr, "--delink-step 3");
  ASSERT_FALSE(ref.is_null());
  struct Case { const char* name; json real, pseudo; };
  const std::vector<Case> cases = {
      {"dev_tp4_2d_from_pp2_dp2_z3", {{"tp", 4}, {"tp_mode", "2d"}}, {{"pp", 2}, {"dp", 2}, {"zero", 3}, {"microbatch", 1}}},
      {"dev_pp2_chunked_from_dp2_z1_granular", {{"pp", 2}, {"offload", {{"kind", "chunked"}, {"chunk_elements", 2048}}}},
       {{"dp", 2}, {"zero", 1}, {"offload", {{"kind", "granular"}, {"fraction", 0.5}}}}},
      {"dev_dp2_z2_optimizer_from_tp2", {{"dp", 2}, {"zero", 2}, {"offload", {{"kind", "optimizer"}}}}, {{"tp", 2}}},
  };
  for (const Case& c : cases) {
    json got = run(relayout_scenario(c.name, c.real, c.pseudo), 6, true, nullptr,
                   "--delink-step 3 --device-budget 600000 --backend emu-device");
    ASSERT_FALSE(got.is_null()) << c.name;
    expect_close(got, ref, "losses", 1e-9, c.name);
    expect_close(got, ref, "grad_norm", 1e-9, c.name);
  }
}

// Checkpoints every 2 steps with the delink at 3: step 2's is the pseudo phase's (its one rank), steps 4 and 6
// are the real phase's (dp 2, ZeRO-3 slices). Resuming from either reproduces the whole run bit for bit.
TEST(RunRelayout, CheckpointsOfEitherPhaseResumeBitForBit) {
  if (!have_mpi()) GTEST_SKIP() << "built without MPI";
  const std::string f = relayout_scenario("ckpt", {{"dp", 2}, {"zero", 3}}, {{"dp", 1}});
  const std::string dir = tmpdir() + "/relayout_ckpt";
  for (int at : {2, 4}) {
    fs::remove_all(dir);
    json whole = run(f, 6, true, nullptr, "--delink-step 3 --checkpoint-dir " + dir + " --checkpoint-every 2 --keep-checkpoints 10");
    ASSERT_FALSE(whole.is_null()) << at;
    ASSERT_EQ(whole["losses"].size(), 6u);
    drop_checkpoints_after(dir, at, 6);
    json rest = run(f, 6, true, nullptr, "--delink-step 3 --checkpoint-dir " + dir + " --resume");
    ASSERT_FALSE(rest.is_null()) << at;
    EXPECT_EQ(rest["first_step"], at);
    EXPECT_EQ(rest["delink_step"], 3);
    ASSERT_EQ(rest["losses"].size(), (size_t)(6 - at));
    for (int s = at; s < 6; ++s) EXPECT_EQ(rest["losses"][s - at], whole["losses"][s]) << "resumed at " << at << ", step " << s;
  }
}

// A job launched with the real plan's ranks where the pseudo plan needs more: exit 2 naming the pseudo plan.
TEST(RunRelayout, AJobWithTooFewRanksForThePseudoPlanExitsTwo) {
  const std::string f = relayout_scenario("needs2", json::object(), {{"dp", 2}});
  const std::string cmd = std::string(TP_BINARY) + " run " + f + " --steps 1 --quiet > " + f + ".log 2>&1";
  const int rc = std::system(cmd.c_str());
  EXPECT_EQ(WEXITSTATUS(rc), 2);
  const std::string text = log_text(f);
  EXPECT_NE(text.find("$.plan.delink.plan: the pseudo phase's dp x cp x tp x pp = 2 ranks"), std::string::npos) << text;
}
