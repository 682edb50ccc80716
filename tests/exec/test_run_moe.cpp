// test_run_moe: `trainplan run` of mixture-of-experts models (exec/model/moe.hpp) on the bundled tiny MoE scenario
// (scenarios/exec/tiny-moe.json: 4 experts, top-2, capacity factor 1, so copies are dropped). The single-rank
// float64 run (ep 1) is the oracle: every expert-parallel plan (ep inside dp, with pipeline stages, ZeRO 1 / 2 / 3
// and full recompute, and with tensor-parallel experts) reproduces its losses and gradient norms to 1e-9 relative,
// as does the emu backend. A wrong
// all-to-all block order, an expert computing with another's weights, a capacity counted over the ep group instead
// of the rank, or expert gradients reduced twice or not at all would each change them. Optimizer offload and
// granular offload (ZeRO 0-3) of whole layers or of the experts alone (M6-10T's form), Pseudo-to-Real delinking
// and context parallelism run with MoE, and so does chunked offload (PatrickStar) with its experts in chunks.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <string>

#include "exec/oracle_run.hpp"
#include "models/json_check.hpp"
#include "models/scenario.hpp"
#include "sim/simulate.hpp"

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
      // expert-data-parallel groups of 2 ranks: the experts' reduce-scatter / all-gather over them
      {"dp4_ep2_zero1", {{"dp", 4}, {"ep", 2}, {"zero", 1}, {"microbatch", 1}}},
      {"dp4_ep2_zero3", {{"dp", 4}, {"ep", 2}, {"zero", 3}, {"microbatch", 1}}},
      {"dp2_ep2_full_recompute", {{"dp", 2}, {"ep", 2}, {"recompute", "full"}}},
      {"tp2", {{"tp", 2}}},
      {"dp2_ep2_tp2", {{"dp", 2}, {"ep", 2}, {"tp", 2}}},
      // optimizer offload (ZeRO-Offload): the experts' master copy and moments on the host too
      {"optimizer_offload", {{"offload", {{"kind", "optimizer"}}}}},
      {"dp2_ep2_optimizer_offload", {{"dp", 2}, {"ep", 2}, {"offload", {{"kind", "optimizer"}}}}},
      {"dp4_ep2_zero1_optimizer_offload", {{"dp", 4}, {"ep", 2}, {"zero", 1}, {"microbatch", 1}, {"offload", {{"kind", "optimizer"}}}}},
      // granular offload (M6-10T) of whole MoE layers: dense part and the rank's experts on the host, each segment
      // reduced and (ZeRO 1-2) gathered on the host over its own group
      {"granular", {{"offload", {{"kind", "granular"}, {"fraction", 0.5}}}}},
      {"dp2_ep2_granular", {{"dp", 2}, {"ep", 2}, {"offload", {{"kind", "granular"}, {"fraction", 0.5}}}}},
      {"dp2_ep2_pp2_granular", {{"dp", 2}, {"ep", 2}, {"pp", 2}, {"offload", {{"kind", "granular"}, {"fraction", 0.5}}}}},
      {"dp2_ep2_zero1_granular", {{"dp", 2}, {"ep", 2}, {"zero", 1}, {"offload", {{"kind", "granular"}, {"fraction", 0.5}}}}},
      {"dp4_ep2_zero2_granular", {{"dp", 4}, {"ep", 2}, {"zero", 2}, {"microbatch", 1},
                                  {"offload", {{"kind", "granular"}, {"fraction", 0.5}}}}},
      // M6-10T's form: only the experts of the chosen MoE layers on the host, the rest of the layer on the device.
      {"granular_experts", {{"offload", {{"kind", "granular"}, {"fraction", 1.0}, {"target", "experts"}}}}},
      {"dp2_ep2_granular_experts", {{"dp", 2}, {"ep", 2}, {"offload", {{"kind", "granular"}, {"fraction", 1.0}, {"target", "experts"}}}}},
      {"dp2_ep2_pp2_granular_experts", {{"dp", 2}, {"ep", 2}, {"pp", 2}, {"offload", {{"kind", "granular"}, {"fraction", 0.5}, {"target", "experts"}}}}},
      {"dp2_ep2_zero1_granular_experts", {{"dp", 2}, {"ep", 2}, {"zero", 1}, {"offload", {{"kind", "granular"}, {"fraction", 1.0}, {"target", "experts"}}}}},
      {"dp4_ep2_zero2_granular_experts", {{"dp", 4}, {"ep", 2}, {"zero", 2}, {"microbatch", 1},
                                          {"offload", {{"kind", "granular"}, {"fraction", 1.0}, {"target", "experts"}}}}},
      // ZeRO-3: the host holds the rank's slices (dense over dp, experts over the expert-dp group), gathered per
      // segment on the device at each run; experts only: the dense slice from the device, the experts' loaded
      {"dp2_ep2_zero3_granular", {{"dp", 2}, {"ep", 2}, {"zero", 3}, {"offload", {{"kind", "granular"}, {"fraction", 0.5}}}}},
      {"dp2_zero3_granular_experts", {{"dp", 2}, {"zero", 3}, {"offload", {{"kind", "granular"}, {"fraction", 1.0}, {"target", "experts"}}}}},
      {"dp4_ep2_zero3_granular_experts", {{"dp", 4}, {"ep", 2}, {"zero", 3}, {"microbatch", 1},
                                          {"offload", {{"kind", "granular"}, {"fraction", 1.0}, {"target", "experts"}}}}},
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
    // Optimizer offload without ZeRO: each step every parameter the rank holds (its experts only) goes down as a
    // gradient and comes back updated, 8 bytes an element in float64.
    if (c.plan.contains("offload") && c.plan["offload"]["kind"] == "optimizer" && !c.plan.contains("zero")) {
      ASSERT_TRUE(got.contains("offload")) << c.name;
      const double want_bytes = 8 * got["param_elements"][0].get<double>();
      for (const char* k : {"d2h_bytes", "h2d_bytes"})
        for (const json& b : got["offload"][k]) EXPECT_EQ(b.get<double>(), want_bytes) << c.name << " " << k;
    }
    // Experts only, one rank: the host holds the 2 MoE layers' 4 experts (2 h f + f + h = 16576 elements each;
    // parameters, gradients, two moments); each of a layer's 8 runs per step loads them, its 4 backward runs send
    // their gradients down. The dense parts never move.
    if (std::string(c.name) == "granular_experts") {
      const double expert_bytes = 8.0 * 4 * 16576;  // float64, one layer
      ASSERT_TRUE(got.contains("offload")) << c.name;
      EXPECT_EQ(got["offload"]["host_state_bytes"].get<double>(), 2 * 4 * expert_bytes);
      for (const json& b : got["offload"]["h2d_bytes"]) EXPECT_EQ(b.get<double>(), 2 * 8 * expert_bytes);
      for (const json& b : got["offload"]["d2h_bytes"]) EXPECT_EQ(b.get<double>(), 2 * 4 * expert_bytes);
    }
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

// Pseudo-to-Real with MoE (M6-10T's form: every layer an MoE layer, the pseudo model shares one weight set among
// consecutive layers, experts included). At the delink the loss is unchanged (every position keeps its weights,
// its experts and their optimizer state); the delinked run then diverges from the one that stays shared. Each
// expert-parallel plan reproduces the single-rank float64 run through the delink: copying only the dense part,
// or the experts' ZeRO slices or moments of the wrong segment, would change the steps after it.
TEST(RunMoe, DelinkedMoePlansMatchSingleRankFloat64) {
  const json moe = {{"every", 1}}, delink = {{"unique_layers", 2}, {"tokens", 768}};
  auto scen = [&](const std::string& name, json plan) {
    plan["delink"] = delink;
    return moe_scenario(name, plan, moe);
  };
  json at2 = run(scen("delink_ref", json::object()), 4, true, nullptr, "--delink-step 2");
  json never = run(scen("delink_ref", json::object()), 4, true, nullptr, "--delink-step 100");
  ASSERT_FALSE(at2.is_null());
  ASSERT_FALSE(never.is_null());
  EXPECT_EQ(at2["delink_step"], 2);
  for (int s = 0; s < 3; ++s)  // steps 0-1 pseudo; step 2 on the delinked model: the same loss
    EXPECT_NEAR(at2["losses"][s].get<double>(), never["losses"][s].get<double>(), 1e-12 * never["losses"][s].get<double>());
  EXPECT_NE(at2["losses"][3], never["losses"][3]);  // then they diverge
  if (!have_mpi()) return;
  struct Case { const char* name; json plan; };
  std::vector<Case> cases = {
      {"delink_dp2_ep2", {{"dp", 2}, {"ep", 2}}},
      {"delink_dp2_ep2_zero1", {{"dp", 2}, {"ep", 2}, {"zero", 1}}},
      {"delink_dp2_ep2_zero3", {{"dp", 2}, {"ep", 2}, {"zero", 3}}},
      {"delink_dp2_ep2_optimizer_offload", {{"dp", 2}, {"ep", 2}, {"zero", 1}, {"offload", {{"kind", "optimizer"}}}}},
      {"delink_dp2_ep2_granular", {{"dp", 2}, {"ep", 2}, {"zero", 2}, {"offload", {{"kind", "granular"}, {"fraction", 0.5}}}}},
      // experts of layers 1 and 3 on the host: slot 1's experts go from the host to layer 2's on the device
      {"delink_dp2_ep2_granular_experts", {{"dp", 2}, {"ep", 2}, {"zero", 1}, {"offload", {{"kind", "granular"}, {"fraction", 0.5}, {"target", "experts"}}}}},
      {"delink_dp2_ep2_zero3_granular_experts", {{"dp", 2}, {"ep", 2}, {"zero", 3}, {"offload", {{"kind", "granular"}, {"fraction", 0.5}, {"target", "experts"}}}}},
  };
  for (const Case& c : cases) {
    json got = run(scen(c.name, c.plan), 4, true, nullptr, "--delink-step 2");
    ASSERT_FALSE(got.is_null()) << c.name;
    expect_close(got, at2, "losses", 1e-9, c.name);
    expect_close(got, at2, "grad_norm", 1e-9, c.name);
  }
}

// The emu backend runs the router, dispatch and combine ops (exec/kernels/k_moe_ops.hpp on the emu runner).
TEST(RunMoe, EmuBackendMatchesCpuFloat64) {
  json ref = run(moe_scenario("emu_ref", json::object()), 2, true);
  ASSERT_FALSE(ref.is_null());
  json got = run(moe_scenario("emu", json::object()), 2, true, nullptr, "--backend emu");
  ASSERT_FALSE(got.is_null());
  expect_close(got, ref, "losses", 1e-9, "emu");
  expect_close(got, ref, "grad_norm", 1e-9, "emu");
}

// Sequence parallelism (exec/model/moe.hpp): each tp rank routes its own rows — with micro-batch 2 and tp 2 one
// sequence — so the oracle is the single-rank run with micro-batch 1 (the same routing groups: capacity and
// load-balancing loss per sequence). Routing the gathered micro-batch instead, a wrong block order of the tp
// gather / reduce-scatter, or an unreduced router gradient would each miss it; emu runs the same collectives.
TEST(RunMoe, SequenceParallelPlansMatchSingleRankFloat64) {
  if (!have_mpi()) GTEST_SKIP() << "built without MPI";
  const int steps = 3;
  json ref = run(moe_scenario("sp_ref_mb1", {{"microbatch", 1}}), steps, true);
  ASSERT_FALSE(ref.is_null());
  struct Case { const char* name; json plan; const char* extra; };
  std::vector<Case> cases = {
      {"tp2_sp", {{"tp", 2}, {"sequence_parallel", true}}, ""},
      {"tp2_sp_dp2_ep2_zero2", {{"tp", 2}, {"sequence_parallel", true}, {"dp", 2}, {"ep", 2}, {"zero", 2}}, ""},
      {"tp2_sp_dp2_ep2_emu", {{"tp", 2}, {"sequence_parallel", true}, {"dp", 2}, {"ep", 2}}, "--backend emu"},
      // the experts' replicated bias gradients reduced per run before going down, the dense part's at the step's end
      {"tp2_sp_granular_experts", {{"tp", 2}, {"sequence_parallel", true}, {"offload", {{"kind", "granular"}, {"fraction", 1.0}, {"target", "experts"}}}}, ""},
  };
  for (const Case& c : cases) {
    json got = run(moe_scenario(c.name, c.plan), steps, true, nullptr, c.extra);
    ASSERT_FALSE(got.is_null()) << c.name;
    expect_close(got, ref, "losses", 1e-9, c.name);
    expect_close(got, ref, "grad_norm", 1e-9, c.name);
  }
}

// Context parallelism (exec/model/moe.hpp): each cp rank routes its own rows, two chunks of every sequence, so with
// token dropping or the load-balancing loss its routing groups have no single-rank equivalent. Without either
// (capacity factor 2 = experts / top_k: no copy is dropped; aux_loss_coeff 0) the MoE MLP is token-local and
// every cp plan reproduces the single-rank float64 run; a token sent to the wrong rank's experts, a wrong chunk
// order or an expert gradient reduced over the wrong group would miss it. With the loss on (coefficient 0.01)
// the first step's loss is still exact and the gradient norms stay within 2.5e-3 (other routing groups: 1.1e-3
// measured; without the loss's 1/cp weight per cp rank, 5.3e-3).
TEST(RunMoe, ContextParallelPlansMatchSingleRankFloat64) {
  if (!have_mpi()) GTEST_SKIP() << "built without MPI";
  const json local = {{"capacity_factor", 2.0}, {"aux_loss_coeff", 0.0}}, aux = {{"capacity_factor", 2.0}};
  const int steps = 3;
  json ref = run(moe_scenario("cp_ref", json::object(), local), steps, true);
  ASSERT_FALSE(ref.is_null());
  struct Case { const char* name; json plan; };
  std::vector<Case> cases = {
      {"cp2", {{"cp", 2}}},
      {"cp2_dp2_ep2", {{"cp", 2}, {"dp", 2}, {"ep", 2}}},
      {"cp2_dp2_ep2_zero3", {{"cp", 2}, {"dp", 2}, {"ep", 2}, {"zero", 3}}},
      {"cp2_tp2_sp", {{"cp", 2}, {"tp", 2}, {"sequence_parallel", true}}},
  };
  for (const Case& c : cases) {
    json got = run(moe_scenario(c.name, c.plan, local), steps, true);
    ASSERT_FALSE(got.is_null()) << c.name;
    expect_close(got, ref, "losses", 1e-9, c.name);
    expect_close(got, ref, "grad_norm", 1e-9, c.name);
  }
  json aref = run(moe_scenario("cp_aux_ref", json::object(), aux), steps, true);
  json acp = run(moe_scenario("cp_aux", {{"cp", 2}}, aux), steps, true);
  ASSERT_FALSE(aref.is_null());
  ASSERT_FALSE(acp.is_null());
  EXPECT_NEAR(acp["losses"][0].get<double>(), aref["losses"][0].get<double>(), 1e-12 * aref["losses"][0].get<double>());
  expect_close(acp, aref, "losses", 2.5e-3, "cp2 with the load-balancing loss");
  expect_close(acp, aref, "grad_norm", 2.5e-3, "cp2 with the load-balancing loss");
}

// Experts are sharded over ep (exec/model/moe.hpp): each rank stores only its E / ep experts, so its parameters and
// Adam moments are what the simulator counts per GPU (sim/step_formulas.hpp zero_shard: dense over dp, experts
// over the expert-dp group), and they drop with ep. fp32 runs: 4 bytes a weight, 8 bytes of moments a parameter.
TEST(RunMoe, ExpertsShardedOverEpStoreWhatTheSimulatorCounts) {
  if (!have_mpi()) GTEST_SKIP() << "built without MPI";
  struct Case { const char* name; json plan; json moe = json::object(); };
  std::vector<Case> cases = {
      {"mem_dp2", {{"dp", 2}}},
      {"mem_dp2_ep2", {{"dp", 2}, {"ep", 2}}},
      {"mem_dp4_ep4", {{"dp", 4}, {"ep", 4}, {"microbatch", 1}}},
      {"mem_dp4_ep2_zero1", {{"dp", 4}, {"ep", 2}, {"zero", 1}, {"microbatch", 1}}},
      {"mem_dp2_ep2_tp2_zero2", {{"dp", 2}, {"ep", 2}, {"tp", 2}, {"zero", 2}}},
      {"mem_shared_dp2_ep2_tp2_sp", {{"dp", 2}, {"ep", 2}, {"tp", 2}, {"sequence_parallel", true}},
       {{"shared_ffn_hidden", 64}}},
  };
  std::map<std::string, double> rank0_params;
  for (const Case& c : cases) {
    std::string f = moe_scenario(c.name, c.plan, c.moe);
    json got = run(f, 1, false);
    ASSERT_FALSE(got.is_null()) << c.name;
    tp::SimOptions so;
    so.full_cluster = true;
    tp::Result sim = tp::simulate(tp::load_scenario(f), so);
    ASSERT_EQ(got["param_elements"].size(), sim.ranks.size()) << c.name;
    for (const tp::RankResult& rr : sim.ranks) {
      const double params = got["param_elements"][rr.global_rank], moments = got["moment_elements"][rr.global_rank];
      EXPECT_NEAR(params * 4, rr.peak.weights, 1e-9 * rr.peak.weights) << c.name << " rank " << rr.global_rank;
      // ZeRO slices are padded to a multiple of the group: a few elements per unit
      EXPECT_NEAR(moments * 8, rr.peak.optimizer, 1e-3 * rr.peak.optimizer) << c.name << " rank " << rr.global_rank;
    }
    rank0_params[c.name] = got["param_elements"][0];
  }
  // 2 MoE layers of 4 experts, 128 x 64 x 2 weights + 128 + 64 biases each: ep 2 holds 2 experts less per layer
  const double expert = 2.0 * 128 * 64 + 128 + 64;
  EXPECT_DOUBLE_EQ(rank0_params["mem_dp2"] - rank0_params["mem_dp2_ep2"], 2 * 2 * expert);
  EXPECT_DOUBLE_EQ(rank0_params["mem_dp2"] - rank0_params["mem_dp4_ep4"], 2 * 3 * expert);
}

// Checkpoints of expert-sharded ranks: a resumed run reproduces the uninterrupted one bit for bit (ZeRO-1 and
// ZeRO-3 slices of the experts over their expert-dp group), and a checkpoint of another expert layout (ep 2
// where the run has ep 1) is refused with exit 2.
TEST(RunMoe, ExpertShardedCheckpointsResumeBitIdentical) {
  if (!have_mpi()) GTEST_SKIP() << "built without MPI";
  for (int zero : {1, 3}) {
    std::string name = "ckpt_ep2_z" + std::to_string(zero);
    std::string f = moe_scenario(name, {{"dp", 4}, {"ep", 2}, {"zero", zero}, {"microbatch", 1}});
    std::string dir = tmpdir() + "/" + name;
    fs::remove_all(dir);
    json whole = run(f, 4, false);
    json first = run(f, 4, false, nullptr, "--checkpoint-dir " + dir + " --checkpoint-every 2");
    ASSERT_FALSE(whole.is_null());
    ASSERT_FALSE(first.is_null());
    EXPECT_EQ(first["losses"], whole["losses"]);
    fs::remove_all(dir + "/step_00000004");  // resume from step 2
    json resumed = run(f, 4, false, nullptr, "--checkpoint-dir " + dir + " --resume");
    ASSERT_FALSE(resumed.is_null());
    EXPECT_EQ(resumed["first_step"], 2);
    ASSERT_EQ(resumed["losses"].size(), 2u);
    for (int st = 2; st < 4; ++st) EXPECT_EQ(resumed["losses"][st - 2], whole["losses"][st]) << name << " step " << st;
    EXPECT_EQ(resumed["grad_norm"].back(), whole["grad_norm"].back()) << name;
    int code = 0;
    std::string other = moe_scenario(name + "_ep1", {{"dp", 4}, {"zero", zero}, {"microbatch", 1}});
    EXPECT_TRUE(run(other, 4, false, &code, "--checkpoint-dir " + dir + " --resume").is_null());
    EXPECT_EQ(code, 2) << "a checkpoint of another expert layout must be refused";
  }
}

// Shared experts (model.moe.shared_ffn_hidden): a dense MLP of every token added to the routed output, split over
// tp like the dense MLP (under SP on the gathered rows), its parameters reduced over dp with the dense part. Each
// parallel plan reproduces the single-rank run with the same shared experts (SP: with micro-batch 1, its routing
// groups). A shared MLP that were skipped, applied to the wrong rows, or whose tp columns were mis-sharded would
// change the losses (the references differ from the model without shared experts: checked).
TEST(RunMoe, SharedExpertsMatchSingleRankFloat64) {
  if (!have_mpi()) GTEST_SKIP() << "built without MPI";
  const int steps = 3;
  for (const char* act : {"gelu", "swiglu"}) {
    json moe = {{"shared_ffn_hidden", 64}}, model = {{"activation", act}};
    const std::string a = act;
    json ref = run(moe_scenario("shared_ref_" + a, json::object(), moe, model), steps, true);
    json ref1 = run(moe_scenario("shared_ref_mb1_" + a, {{"microbatch", 1}}, moe, model), steps, true);
    json plain = run(moe_scenario("noshared_ref_" + a, json::object(), json::object(), model), steps, true);
    ASSERT_FALSE(ref.is_null());
    ASSERT_FALSE(ref1.is_null());
    ASSERT_FALSE(plain.is_null());
    EXPECT_NE(ref["losses"].back(), plain["losses"].back()) << "the shared experts change the model";
    struct Case { std::string name; json plan; const json* want; };
    std::vector<Case> cases = {
        {"shared_dp2_ep2_zero1_" + a, {{"dp", 2}, {"ep", 2}, {"zero", 1}}, &ref},
        {"shared_tp2_" + a, {{"tp", 2}}, &ref},
        {"shared_tp2_sp_dp2_ep2_" + a, {{"tp", 2}, {"sequence_parallel", true}, {"dp", 2}, {"ep", 2}}, &ref1},
        // (the shared experts' MLP with its collectives in pieces)
        {"shared_tp2_sp_overlap_" + a, {{"tp", 2}, {"sequence_parallel", true}, {"tp_comm_overlap", true}}, &ref1},
    };
    for (const Case& c : cases) {
      json got = run(moe_scenario(c.name, c.plan, moe, model), steps, true);
      ASSERT_FALSE(got.is_null()) << c.name;
      expect_close(got, *c.want, "losses", 1e-9, c.name);
      expect_close(got, *c.want, "grad_norm", 1e-9, c.name);
    }
  }
}

// Chunked offload (PatrickStar, exec/runtime/offload/chunk_store.hpp) of MoE models: a MoE layer's router, shared experts and
// local experts are chunk tensors of their own, as the simulator lists them (sim/chunk_offload.cpp). Under a
// device budget of about two layers' chunks, chunks move every step and the single-rank run reproduces the
// no-offload run bit for bit (moves are exact copies); with shared experts too. Expert-parallel plans (ZeRO-3,
// the validator's rule for chunked with dp > 1) and tp 2 with SP match the single-rank oracle to 1e-9. A moved
// expert chunk that came back stale, or gradients left in a slot instead of reaching the optimizer, would not.
TEST(RunMoe, ChunkedOffloadMatchesSingleRankFloat64) {
  const int steps = 4;
  const json chunked = {{"kind", "chunked"}, {"chunk_elements", 4096}};
  for (const json& moe : {json::object(), json{{"shared_ffn_hidden", 64}}}) {
    const std::string tag = moe.empty() ? "" : "_shared";
    json ref = run(moe_scenario("chunked_ref" + tag, json::object(), moe), steps, true);
    ASSERT_FALSE(ref.is_null());
    json got = run(moe_scenario("chunked_tight" + tag, {{"offload", chunked}}, moe), steps, true, nullptr,
                   "--device-budget 1300000");
    ASSERT_FALSE(got.is_null()) << tag;
    EXPECT_EQ(got["losses"], ref["losses"]) << tag;  // bit-identical
    EXPECT_EQ(got["grad_norm"], ref["grad_norm"]) << tag;
    const json& off = got["offload"];
    EXPECT_GT(off["chunk_bytes"].get<double>(), 1.5 * 1.3e6) << tag;  // the model does not fit: it must move
    for (int s = 1; s < steps; ++s) EXPECT_GT(off["h2d_moves"][s].get<double>(), 0) << tag << " step " << s;
  }
  if (!have_mpi()) return;
  json ref = run(moe_scenario("chunked_ref", json::object()), steps, true);
  json ref1 = run(moe_scenario("chunked_ref_mb1", {{"microbatch", 1}}), steps, true);
  ASSERT_FALSE(ref1.is_null());
  struct Case { const char* name; json plan; const json* want; const char* budget; };
  std::vector<Case> cases = {
      {"chunked_dp2_ep2_zero3", {{"dp", 2}, {"ep", 2}, {"zero", 3}, {"offload", chunked}}, &ref, "1000000"},
      {"chunked_tp2_sp", {{"tp", 2}, {"sequence_parallel", true}, {"offload", chunked}}, &ref1, "700000"},
      {"chunked_pp2", {{"pp", 2}, {"offload", chunked}}, &ref, "1000000"},
  };
  for (const Case& c : cases) {
    json got = run(moe_scenario(c.name, c.plan), steps, true, nullptr, std::string("--device-budget ") + c.budget);
    ASSERT_FALSE(got.is_null()) << c.name;
    expect_close(got, *c.want, "losses", 1e-9, c.name);
    expect_close(got, *c.want, "grad_norm", 1e-9, c.name);
  }
}
