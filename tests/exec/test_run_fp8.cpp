// test_run_fp8: `trainplan run` with `training.precision: "fp8"` (exec/model/fp8.hpp): the linear layers' GEMM operands
// cast to E4M3 / E5M2 with delayed scaling, emulated in the working precision. The casts are element-wise with one
// scale per (weight group, linear, operand) slot, the amax is a max over every rank of the step, and scales change
// between steps only, so every plan reproduces the single-rank fp8 float64 run to 1e-9 — as for fp32. A scale from
// a rank's own shard instead of the world's step, scales updated within a step, an expert's slot by its local
// index, or scales lost at a checkpoint or a delink each fail here (each tried). What the layout comparison cannot
// see — the same cast missing in every layout — is covered only by the fp8 run differing from the fp32 one and by
// the cast's own tests (Ops.Fp8RoundingOfKnownValues, the selftest's fp8_quantize cases). The tiny scenarios run
// on the catalog's dgx-h100 (fp8 needs a GPU with fp8 tensor cores).
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <limits>
#include <string>

#include "exec/comm/comm.hpp"
#include "exec/model/fp8.hpp"
#include "exec/oracle_run.hpp"
#include "models/json_check.hpp"

using tp::json;
using namespace oracle;

namespace {

// The bundled scenario `base` (scenarios/exec/) in fp8 on dgx-h100 with `plan` merged over its plan.
std::string fp8_scenario(const std::string& name, const json& plan, const std::string& base = "tiny-gpt",
                         const std::string& precision = "fp8") {
  return precision_scenario("fp8", name, plan, base, precision, "dgx-h100");
}

}  // namespace

// The recipe: scale = fp8 max / amax of the last step (E4M3 448 for inputs and weights, E5M2 57344 for
// gradients), unchanged after a step without a positive finite amax; the amax is cleared; a delink copies each
// layer's slots from its weight group's.
TEST(Fp8State, DelayedScalingFromTheLastStepsAmax) {
  tp::exec::Fp8State f;
  f.init(2, 1);  // 2 groups, the 6 dense linears and one expert's two
  EXPECT_EQ(f.linears, 8);
  ASSERT_EQ(f.scale.size(), 2u * 8 * 3);
  const int x = f.slot(1, tp::exec::kFp8Fc2, tp::exec::Fp8Operand::x);
  const int dy = f.slot(1, tp::exec::kFp8Expert + 1, tp::exec::Fp8Operand::dy);
  const int w0 = f.slot(0, tp::exec::kFp8Qkv, tp::exec::Fp8Operand::w);
  EXPECT_EQ(x, (8 + 3) * 3 + 0);
  EXPECT_EQ(dy, (8 + 7) * 3 + 2);
  std::vector<double> data = {0.5, -3.5, 2.0};
  tp::exec::Buf<double> out;
  f.cast(out, data.data(), 3, x);
  f.cast(out, data.data(), 2, dy);
  f.cast(out, data.data(), 3, w0, false);  // not recorded
  EXPECT_EQ(f.amax[(size_t)x], 0.0);  // the casts' amax stay on the backend until end_step reads them (no read-back)
  auto comm = tp::exec::make_local_comm();
  f.amax[(size_t)f.slot(0, 0, tp::exec::Fp8Operand::x)] = std::numeric_limits<double>::infinity();
  f.end_step(*comm);
  EXPECT_EQ(f.scale[(size_t)x], 448.0 / 3.5);
  EXPECT_EQ(f.scale[(size_t)dy], 57344.0 / 3.5);
  EXPECT_EQ(f.scale[(size_t)w0], 1.0);                                           // no amax: unchanged
  EXPECT_EQ(f.scale[(size_t)f.slot(0, 0, tp::exec::Fp8Operand::x)], 1.0);         // not finite: unchanged
  for (double a : f.amax) EXPECT_EQ(a, 0.0);
  f.delink({1, 1});  // both layers from group 1
  EXPECT_EQ(f.scale[(size_t)f.slot(0, tp::exec::kFp8Fc2, tp::exec::Fp8Operand::x)], 448.0 / 3.5);
  EXPECT_EQ(f.scale[(size_t)f.slot(0, tp::exec::kFp8Expert + 1, tp::exec::Fp8Operand::dy)], 57344.0 / 3.5);
}

TEST(RunFp8, PlansMatchSingleRankFloat64) {
  const int steps = 4;
  json ref = run(fp8_scenario("ref", json::object()), steps, true);
  json f32 = run(fp8_scenario("ref_fp32", json::object(), "tiny-gpt", "fp32"), steps, true);
  ASSERT_FALSE(ref.is_null());
  ASSERT_FALSE(f32.is_null());
  // The casts change the run from the first step (scale 1: the inputs and weights on the E4M3 grid).
  for (int s = 0; s < steps; ++s) EXPECT_GT(std::abs(ref["losses"][s].get<double>() - f32["losses"][s].get<double>()), 1e-5) << s;
  // The bundled fp8 scenario is this one (its first loss: before any update, whatever the step count).
  const std::string bundled_file = tmpdir() + "/fp8_bundled.json";  // (run writes its log beside the scenario)
  fs::copy_file(std::string(TP_SOURCE_DIR) + "/scenarios/exec/tiny-gpt-fp8.json", bundled_file,
                fs::copy_options::overwrite_existing);
  json bundled = run(bundled_file, 1, true);
  ASSERT_FALSE(bundled.is_null());
  EXPECT_EQ(bundled["losses"][0], ref["losses"][0]);
  const std::string note = log_text(tmpdir() + "/fp8_ref.json");
  EXPECT_NE(note.find("note: $.training.precision \"fp8\": run emulates"), std::string::npos) << note;
  // The emu backends: the cast kernel; emu-device, with tensor memory the host cannot touch (the casts' scratch
  // buffers are reused at other sizes, so they must be reallocated, never copied on the host).
  expect_emu_backends_match(ref, steps, [](const std::string& n) { return fp8_scenario(n, json::object()); });
  json f32run = run(fp8_scenario("ref", json::object()), steps, false);
  ASSERT_FALSE(f32run.is_null());
  expect_close(f32run, ref, "losses", 2e-3, "float32");
  if (!have_mpi()) return;
  const std::vector<PlanCase> cases = {
      {"dp2", {{"dp", 2}}},
      {"tp2_sp", {{"tp", 2}, {"sequence_parallel", true}}},
      // (tp_comm_overlap: the inputs and output gradients cast block by block as their pieces arrive, one amax)
      {"tp2_sp_overlap", {{"tp", 2}, {"sequence_parallel", true}, {"tp_comm_overlap", true}}},
      {"pp2_1f1b", {{"pp", 2}}},
      {"pp2_interleaved", {{"pp", 2}, {"schedule", "interleaved"}, {"virtual_stages", 2}}},
      {"cp2_dp2_zero1", {{"cp", 2}, {"dp", 2}, {"zero", 1}}},
      {"dp2_tp2_pp2_sp_zero3_full", {{"dp", 2}, {"tp", 2}, {"pp", 2}, {"sequence_parallel", true}, {"zero", 3},
                                     {"recompute", "full"}}},
      {"dp2_optimizer_offload", {{"dp", 2}, {"zero", 1}, {"offload", {{"kind", "optimizer"}}}}},
      {"pp2_granular", {{"pp", 2}, {"offload", {{"kind", "granular"}, {"fraction", 0.5}}}}},
      // Optimus 2D: the SUMMA operand blocks cast before their broadcasts
      {"tp2d_q2", {{"tp", 4}, {"tp_mode", "2d"}}},
      {"tp2d_q2_dp2_zero3_layered", {{"tp", 4}, {"tp_mode", "2d"}, {"dp", 2}, {"zero", 3}, {"grad_accumulation", "layered"}}},
  };
  expect_plans_match(cases, ref, steps, [](const std::string& n, const json& p) { return fp8_scenario(n, p); });
}

// The experts' GEMMs have a slot each (by global expert index): expert-parallel plans and tensor-parallel experts
// match the single-rank run; sequence parallelism routes per tp rank, so its oracle is micro-batch 1.
TEST(RunFp8, MoePlansMatchSingleRankFloat64) {
  if (!have_mpi()) GTEST_SKIP() << "built without MPI";
  const int steps = 3;
  json ref = run(fp8_scenario("moe_ref", json::object(), "tiny-moe"), steps, true);
  json ref1 = run(fp8_scenario("moe_ref_mb1", {{"microbatch", 1}}, "tiny-moe"), steps, true);
  ASSERT_FALSE(ref.is_null());
  ASSERT_FALSE(ref1.is_null());
  struct Case { const char* name; json plan; const json* want; };
  const std::vector<Case> cases = {
      {"moe_dp2_ep2", {{"dp", 2}, {"ep", 2}}, &ref},
      {"moe_tp2", {{"tp", 2}}, &ref},
      {"moe_dp2_ep2_pp2_zero3", {{"dp", 2}, {"ep", 2}, {"pp", 2}, {"zero", 3}}, &ref},
      {"moe_dp2_ep2_granular_experts",
       {{"dp", 2}, {"ep", 2}, {"offload", {{"kind", "granular"}, {"fraction", 1.0}, {"target", "experts"}}}}, &ref},
      {"moe_tp2_sp_dp2_ep2", {{"tp", 2}, {"sequence_parallel", true}, {"dp", 2}, {"ep", 2}}, &ref1},
  };
  for (const Case& c : cases) {
    json got = run(fp8_scenario(c.name, c.plan, "tiny-moe"), steps, true);
    ASSERT_FALSE(got.is_null()) << c.name << "\n" << log_text(tmpdir() + "/fp8_" + c.name + ".json");
    expect_close(got, *c.want, "losses", 1e-9, c.name);
    expect_close(got, *c.want, "grad_norm", 1e-9, c.name);
  }
}

// Pseudo-to-Real: the weight groups' scales become each layer's at the delink (on the same layout, and handed to
// the real plan's ranks with another layout), and a resume from a checkpoint of either phase is bit-identical
// (the checkpoints hold the scales: a resumed run with scales 1 would change every later loss).
TEST(RunFp8, DelinkAndResumeKeepTheScales) {
  const int steps = 6;
  const json delink = {{"unique_layers", 2}, {"tokens", 768}};
  const std::string f = fp8_scenario("delink", {{"delink", delink}});
  json whole = run(f, steps, true);
  ASSERT_FALSE(whole.is_null()) << log_text(f);
  EXPECT_EQ(whole["delink_step"], 3);
  // At the delink the network function is unchanged, its fp8 casts included: step 3 on the delinked model has the
  // loss of the run that never delinks (each layer cast with its weight group's scales).
  json never = run(fp8_scenario("delink_never", {{"delink", delink}}), steps, true, nullptr, "--delink-step 100");
  ASSERT_FALSE(never.is_null());
  for (int s = 0; s < 4; ++s)
    EXPECT_NEAR(whole["losses"][s].get<double>(), never["losses"][s].get<double>(), 1e-12 * never["losses"][s].get<double>()) << s;
  for (int at : {2, 4}) {
    const std::string dir = tmpdir() + "/fp8_delink_ckpt" + std::to_string(at);
    fs::remove_all(dir);
    json first = run(f, steps, true, nullptr, "--checkpoint-dir " + dir + " --keep-checkpoints 10 --checkpoint-every 2");
    ASSERT_FALSE(first.is_null()) << log_text(f);
    EXPECT_EQ(first["losses"], whole["losses"]);
    drop_checkpoints_after(dir, at, steps);
    json rest = run(f, steps, true, nullptr, "--checkpoint-dir " + dir + " --resume");
    ASSERT_FALSE(rest.is_null()) << log_text(f);
    EXPECT_EQ(rest["first_step"], at);
    ASSERT_EQ(rest["losses"].size(), (size_t)(steps - at));
    for (int s = at; s < steps; ++s) EXPECT_EQ(rest["losses"][s - at], whole["losses"][s]) << "resumed at " << at << ", step " << s;
  }
  if (!have_mpi()) return;
  json par = run(fp8_scenario("delink_dp2_tp2_z3", {{"delink", delink}, {"dp", 2}, {"tp", 2}, {"zero", 3}}), steps, true);
  ASSERT_FALSE(par.is_null());
  expect_close(par, whole, "losses", 1e-9, "delink dp2 tp2 zero3");
  expect_close(par, whole, "grad_norm", 1e-9, "delink dp2 tp2 zero3");
  // The pseudo phase on its own plan (tp 2), the real one on dp 2 x tp 2: the scales cross the handover.
  json two = delink;
  two["plan"] = {{"attention", "unfused"}, {"dp", 1}, {"tp", 2}, {"pp", 1}, {"microbatch", 2}};
  json relayout = run(fp8_scenario("delink_relayout", {{"delink", two}, {"dp", 2}, {"tp", 2}, {"zero", 1}}), steps, true);
  ASSERT_FALSE(relayout.is_null()) << log_text(tmpdir() + "/fp8_delink_relayout.json");
  expect_close(relayout, whole, "losses", 1e-9, "delink tp2 -> dp2 tp2");
  expect_close(relayout, whole, "grad_norm", 1e-9, "delink tp2 -> dp2 tp2");
}
