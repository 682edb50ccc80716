// Context parallelism (plan.cp): closed forms of the per-rank work and the K / V ring, gradients reduced over
// dp x cp, the rank layout (cp between tp and dp, inside a node first), symmetric against full-cluster mode,
// and the validation rules.
#include <gtest/gtest.h>

#include <cmath>

#include "sim/program.hpp"
#include "sim/simulate.hpp"
#include "sim/step_formulas.hpp"
#include "sim_test_util.hpp"

using namespace tp;
using namespace tp::testutil;

namespace {

json finite_cluster() { return finite_links_cluster(); }

json cp_plan(int dp, int cp, int tp, int pp, int zero = 1, const char* recompute = "none") {
  json p = plan_json(dp, tp, pp, 1, "1f1b", recompute, tp > 1, zero);
  p["cp"] = cp;
  p["attention"] = "flash";
  return p;
}

double gemm_flops(const PassCost& pc, const std::string& name) {
  const Op* op = find_op(pc, name);
  return op ? op->flops : -1;
}

}  // namespace

TEST(ContextParallel, RankLayoutPutsCpBetweenTpAndDp) {
  Plan p;
  p.tp = 2; p.cp = 4; p.dp = 3; p.pp = 2;
  EXPECT_EQ(p.gpus(), 48);
  EXPECT_EQ(p.data_ranks(), 12);
  // global = tp + tp * (cp_rank + cp * (dp_rank + dp * stage)); RankCoord.dp is the data rank.
  EXPECT_EQ(rank_global(p, 1, 2 + 4 * 1, 1), 1 + 2 * (2 + 4 * (1 + 3 * 1)));
  RankCoord rc = rank_coord(p, 37);
  EXPECT_EQ(rank_global(p, rc.tp, rc.dp, rc.stage), 37);
  EXPECT_EQ(rc.tp, 37 % 2);
  EXPECT_EQ(rc.dp, (37 / 2) % 12);
  EXPECT_EQ(rc.stage, 37 / 24);
}

TEST(ContextParallel, PerRankWorkIsTheSequenceShareAndTheRingMovesKV) {
  json model = gpt_model(4, 1024, 16, 32000, 8192);
  Scenario one = make_scenario(model, finite_cluster(), 8, cp_plan(8, 1, 1, 1), "bf16");
  Scenario two = make_scenario(model, finite_cluster(), 8, cp_plan(4, 2, 1, 1), "bf16");
  Program p1 = build_program(one, false), p2 = build_program(two, false);
  const double s = 8192, h = 1024, e = 2, kvd = 1024;
  // Linear layers: FLOPs over n = b * s / cp tokens.
  EXPECT_NEAR(gemm_flops(p2.cm.layer_fwd, "qkv"), 2 * (s / 2) * h * (h + 2 * kvd), 1);
  EXPECT_NEAR(gemm_flops(p2.cm.layer_fwd, "qkv") * 2, gemm_flops(p1.cm.layer_fwd, "qkv"), 1);
  EXPECT_NEAR(gemm_flops(p2.cm.layer_fwd, "fc1") * 2, gemm_flops(p1.cm.layer_fwd, "fc1"), 1);
  // The forward ring: an all-gather of the micro-batch's K and V over the 2 cp ranks (one node): each rank
  // sends (cp - 1) / cp of S = e * b * s * 2 kvd; the backward twice that (K, V again and their gradients).
  const Op* kv = find_op(p2.cm.layer_fwd, "cp.kv");
  ASSERT_NE(kv, nullptr);
  EXPECT_NEAR(kv->bytes, e * s * 2 * kvd, 1);
  const Op* kvb = find_op(p2.cm.layer_bwd, "cp.kv.bwd");
  ASSERT_NE(kvb, nullptr);
  EXPECT_NEAR(kvb->bytes, 2 * e * s * 2 * kvd, 1);
  EXPECT_EQ(find_op(p1.cm.layer_fwd, "cp.kv"), nullptr);
  // Overlapped with the attention compute: only the excess is on the compute stream.
  EXPECT_NEAR(kv->time_s + kv->hidden_s, kv->time_s + kv->hidden_s, 0);
  EXPECT_GT(kv->hidden_s, 0);
  // Activations stored per layer: the full-recompute checkpoint is one [n, h] tensor, halved by cp 2.
  Scenario one_full = make_scenario(model, finite_cluster(), 8, cp_plan(8, 1, 1, 1, 1, "full"), "bf16");
  Scenario two_full = make_scenario(model, finite_cluster(), 8, cp_plan(4, 2, 1, 1, 1, "full"), "bf16");
  EXPECT_NEAR(build_program(two_full, false).cm.layer_stored_bytes, e * (s / 2) * h, 1);
  EXPECT_NEAR(build_program(one_full, false).cm.layer_stored_bytes, e * s * h, 1);
  // Pipeline sends carry [b, s / cp, h] / tp.
  EXPECT_NEAR(pipeline_send_bytes(two, 1, 1), e * (s / 2) * h, 1);
}

// Unfused attention with cp: the executor's all-gather form (exec/model/cp_attention.hpp). Each of a rank's two chunks
// of Lc = s / (2 cp) queries attends its causal prefix of keys: (2 cp + 1) Lc^2 scores per head, K and V gathered
// before the scores (exposed), model FLOPs still the s x s convention.
TEST(ContextParallel, UnfusedAllGatherFormCostsTheCausalPrefixes) {
  json model = gpt_model(4, 1024, 16, 32000, 8192);
  json plan = cp_plan(2, 4, 1, 1);
  plan["attention"] = "unfused";
  json plan1 = cp_plan(8, 1, 1, 1);
  plan1["attention"] = "unfused";
  Scenario sc = make_scenario(model, finite_cluster(), 8, plan, "bf16");
  Scenario one = make_scenario(model, finite_cluster(), 8, plan1, "bf16");
  Program pg = build_program(sc, false), p1 = build_program(one, false);
  const double s = 8192, cp = 4, Lc = s / (2 * cp), heads = 16, dh = 64, e = 2;
  const double scores = heads * Lc * Lc * (2 * cp + 1);  // micro-batch 1
  EXPECT_NEAR(gemm_flops(pg.cm.layer_fwd, "attn.qk"), 2 * scores * dh, 1);
  EXPECT_NEAR(gemm_flops(pg.cm.layer_fwd, "attn.av"), 2 * scores * dh, 1);
  const Op* sm = find_op(pg.cm.layer_fwd, "attn.softmax");
  ASSERT_NE(sm, nullptr);
  EXPECT_NEAR(sm->bytes, 2 * e * scores, 1);
  // The gather is on the compute stream before the scores: nothing hidden.
  const Op* kv = find_op(pg.cm.layer_fwd, "cp.kv");
  ASSERT_NE(kv, nullptr);
  EXPECT_EQ(kv->hidden_s, 0);
  EXPECT_GT(kv->time_s, 0);
  EXPECT_LT(kv - &pg.cm.layer_fwd.ops.front(), find_op(pg.cm.layer_fwd, "attn.qk") - &pg.cm.layer_fwd.ops.front());
  EXPECT_EQ(find_op(pg.cm.layer_bwd, "cp.kv.bwd")->hidden_s, 0);
  // The reorders of exec/model/cp_attention.cpp: gathered K, V into global order (forward and backward), dK, dV
  // zeroed and copied into the reduce-scatter's blocks, the reduced share accumulated.
  const double kv_bytes = e * s * 2 * 64 * 16;  // the micro-batch's K and V (kv heads x head dim = 1024)
  EXPECT_NEAR(find_op(pg.cm.layer_fwd, "cp.kv.reorder")->bytes, 2 * kv_bytes, 1);
  EXPECT_NEAR(find_op(pg.cm.layer_bwd, "cp.kv.reorder.bwd")->bytes, (5 + 3 / cp) * kv_bytes, 1);
  // Model FLOPs per step do not depend on cp (or on the attention form).
  Result r = simulate(sc), r1 = simulate(one);
  EXPECT_NEAR(r.model_tflops_per_gpu * r.step_time_s, r1.model_tflops_per_gpu * r1.step_time_s,
              1e-6 * r1.model_tflops_per_gpu * r1.step_time_s);
}

TEST(ContextParallel, GradientsAndZeroShardsSpanDpTimesCp) {
  json model = gpt_model(4, 1024, 16, 32000, 8192);
  // dp 2 x cp 4 = 8 data ranks: ZeRO-1 optimizer state is 12 bytes x params / 8, as with dp 8 and no cp.
  Result a = simulate(make_scenario(model, finite_cluster(), 8, cp_plan(2, 4, 1, 1, 1), "bf16"));
  Result b = simulate(make_scenario(model, finite_cluster(), 8, cp_plan(8, 1, 1, 1, 1), "bf16"));
  EXPECT_NEAR(a.memory.optimizer, b.memory.optimizer, 1e-9 * b.memory.optimizer);
  EXPECT_NEAR(a.memory.weights, b.memory.weights, 1e-9 * b.memory.weights);
  // Same global batch and tokens per step: each cp rank processes a quarter of the sequence of its dp
  // replica's micro-batches.
  EXPECT_NEAR(a.tokens_per_s * a.step_time_s, b.tokens_per_s * b.step_time_s, 1e-6 * b.tokens_per_s * b.step_time_s);
  EXPECT_NEAR(a.model_tflops_per_gpu * a.step_time_s, b.model_tflops_per_gpu * b.step_time_s,
              1e-6 * b.model_tflops_per_gpu * b.step_time_s);
}

TEST(ContextParallel, SymmetricAgreesWithFullCluster) {
  json model = gpt_model(8, 1024, 16, 32000, 8192);
  for (json plan : {cp_plan(2, 2, 2, 2, 1), cp_plan(4, 4, 1, 2, 3), cp_plan(1, 8, 2, 1, 2)}) {
    SCOPED_TRACE(plan.dump());
    Scenario sc = make_scenario(model, finite_cluster(), 16, plan, "bf16");
    SimOptions sym, full;
    full.full_cluster = true;
    Result x = simulate(sc, sym), y = simulate(sc, full);
    EXPECT_FALSE(x.fallback_to_full);
    EXPECT_NEAR(x.step_time_s, y.step_time_s, 1e-9 * y.step_time_s);
    EXPECT_NEAR(x.peak_bytes_per_gpu, y.peak_bytes_per_gpu, 1e-9 * y.peak_bytes_per_gpu);
  }
}

TEST(ContextParallel, ValidationNamesThePath) {
  json model = gpt_model(4, 1024, 16, 32000, 8192);
  auto error_of = [&](json plan, long long batch = 8, long long seq = 8192) {
    json m = model;
    m["seq_len"] = seq;
    try {
      make_scenario(m, finite_cluster(), batch, plan, "bf16");
    } catch (const InputError& e) {
      std::string all;
      for (const std::string& m2 : e.messages) all += m2 + "\n";
      return all;
    }
    return std::string();
  };
  json p = cp_plan(4, 3, 1, 1);
  EXPECT_NE(error_of(p, 8, 8188).find("$.plan.cp: needs 2 x cp (6) to divide seq_len"), std::string::npos)
      << error_of(p, 8, 8188);
  json big = cp_plan(64, 2, 1, 1);
  EXPECT_NE(error_of(big, 64).find("dp x cp x tp x pp = 128 GPUs exceeds"), std::string::npos) << error_of(big, 64);
}

// The long-context check: Llama-3.1 70B at 128k tokens with cp 16 (tp 8 + SP, pp 4) fits on H100s,
// with the activation bytes of the closed form: per layer and micro-batch, n = 131072 / 16 tokens per rank,
// [n, h] tensors replicated over tp (LN1 in, QKV in, LN2 in, fc1 in; sharded by SP), Q, K, V, proj input,
// fc1 output, fc2 input sharded over tp, and flash attention's fp32 statistics (no s x s term).
TEST(ContextParallel, Llama70bAt128kWithCp16FitsWithTheExpectedActivations) {
  Scenario sc = load_scenario(std::string(TP_SOURCE_DIR) + "/scenarios/examples/llama3-70b-128k-cp16.json");
  ASSERT_EQ(sc.plan.cp, 16);
  ASSERT_EQ(sc.training.seq_len, 131072);
  Program pg = build_program(sc, false);
  const double n = 131072.0 / 16, h = 8192, t = 8, e = 2, kvd = 8 * 128, f = 28672, heads = 64;
  const double repl = 4 * e * n * h / t;                              // sequence parallel: sharded over tp too
  const double sharded = e * n * (2 * h + 2 * kvd + 2 * f + f) / t;  // Q, K, V, proj in | SwiGLU fc1 out, fc2 in
  const double stats = 4 * (heads / t) * n;                           // logsumexp per query and head, fp32
  EXPECT_NEAR(pg.cm.layer_stored_bytes, repl + sharded + stats, 1e-6 * pg.cm.layer_stored_bytes);
  EXPECT_EQ(pg.cm.layer_transient_bytes, 0);  // selective recompute under flash recomputes nothing
  Result r = simulate(sc);
  EXPECT_TRUE(r.fits);
  // 1F1B on the first of 4 stages: 4 micro-batches in flight through its 20 layers.
  EXPECT_GE(r.memory.activations, 4 * 20 * pg.cm.layer_stored_bytes);
  EXPECT_LE(r.memory.activations, 4 * 20 * pg.cm.layer_stored_bytes * 1.1);
}

// Issue 38: ZeRO-2/3 model states with cp depend on dp x cp, not the split. Llama 3 70B in fp8 on 512 H100s,
// tp 2 x pp 2, dp 32 x cp 4 against dp 128 x cp 1 (the same micro-batch count, so the same buckets and gathers):
// gradients and weights at the peak agree, and no class exceeds the model's full fp32 states. Before the fix the
// unreduced ZeRO-2 buckets piled up behind the reduce-scatters of every micro-batch (1,529.7 GiB of gradients in
// the plan; 450.6 GiB here): a backward now waits for the reduction two buckets back (kGradBucketsInFlight).
TEST(ContextParallel, ZeroShardedStatesDependOnDpTimesCpNotTheSplit) {
  for (int zero : {2, 3}) {
    SCOPED_TRACE("ZeRO-" + std::to_string(zero));
    MemoryBreakdown mem[2];
    for (int i = 0; i < 2; ++i) {
      const int cp = i == 0 ? 4 : 1, dp = 128 / cp;
      json j = {{"name", "cp-zero"}, {"model", "llama3-70b"}, {"cluster", "dgx-h100"},
                {"training", {{"global_batch", 8 * dp}, {"seq_len", 8192}, {"precision", "fp8"}}},
                {"plan", {{"dp", dp}, {"cp", cp}, {"tp", 2}, {"pp", 2}, {"microbatch", 1}, {"schedule", "1f1b"},
                          {"sequence_parallel", true}, {"recompute", "selective"}, {"zero", zero}}}};
      SimOptions so;
      so.keep_memory_timeline = false;
      Result r = simulate(scenario_from_text(j.dump()), so);
      mem[i] = r.memory;
      const double fp32_states = 16 * total_params(r.scenario.model);
      EXPECT_LT(r.memory.gradients, fp32_states);
      EXPECT_LT(r.memory.weights, fp32_states);
    }
    const double one_layer_grads = 4.0 * 70.6e9 / 80 / 2;  // fp32 gradients of one layer on one tp rank
    EXPECT_NEAR(mem[0].gradients, mem[1].gradients, 2 * one_layer_grads);
    EXPECT_NEAR(mem[0].weights, mem[1].weights, 0.01 * mem[1].weights);
    EXPECT_LT(mem[0].gradients, 8 * 1073741824.0);  // a ZeRO shard plus two buckets, not hundreds of GiB
  }
}
