// Techniques against closed forms (seeds §2.2-2.4, §5.4-5.7, §6): pipeline bubbles of contiguous 1F1B,
// modular + layered (MPP + LGA) and modular + standard (Megatron interleaved, v = L/p); ZeRO-3 gathers per
// step (2m vs 2) and per-GPU network bytes for ZeRO 0/1/3 with standard and layered accumulation; model-state
// memory by ZeRO stage; offload PCIe bytes (granular, optimizer) and offload stalls; chunked offload
// (PatrickStar) fitting / moving / not fitting; M6-10T real vs pseudo vs granular expert offload; Pseudo-to-Real
// phase totals; MoE all-to-all bytes; Optimus 2D vs Megatron 1D activation and parameter memory.
// Every scenario runs on the ideal cluster of sim_test_util.hpp (infinite links, flat efficiencies, no kernel
// overhead), except where a real cluster is needed (M6-10T on V100s, MoE exposure on Selene).
#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "sim/program.hpp"
#include "sim/simulate.hpp"
#include "sim_test_util.hpp"

using namespace tp;
using namespace tp::testutil;

namespace {

// Ideal cluster whose host has a memory bandwidth (offload needs one to cost the host CPU's Adam).
json ideal_host_cluster(int nodes = 1, int gpus_per_node = 8, double host_bw = 1e20) {
  json c = ideal_cluster(nodes, gpus_per_node);
  c["host"]["memory_bandwidth_bytes_per_s"] = host_bw;
  return c;
}

// Scenario with extra training keys (grad_precision, tokens).
Scenario scenario(json model, json cluster, long long batch, json plan, json training_extra = json::object()) {
  json training = {{"global_batch", batch}, {"precision", "fp16"}, {"framework", "research"}};  // every plan kind
  for (auto it = training_extra.begin(); it != training_extra.end(); ++it) training[it.key()] = it.value();
  json j = {{"name", "technique"}, {"model", model}, {"cluster", cluster}, {"training", training}, {"plan", plan}};
  return scenario_from_json(j, ".", "technique");
}

double rel(double got, double want) { return std::fabs(got / want - 1); }

// Bytes each simulated rank sends per step, averaged over simulated ranks (what Result reports).
double net_bytes(const Result& r) { return r.intra_bytes_per_gpu + r.inter_bytes_per_gpu; }

int count_tasks(const Result& r, TaskKind k) {
  int n = 0;
  for (const TaskInfo& ti : r.prog.info) n += ti.kind == k;
  return n;
}

// ---- 1. bubbles --------------------------------------------------------------------------------------------

struct Bubble { double from_step, from_breakdown; };

// Bubble relative to the ideal step (m micro-batches through L/p layers per stage, no waiting): measured as
// (step - ideal) / ideal, and as breakdown.bubble / (compute + recompute) of the rank that sets the step time.
// L = 96 layers, tiny vocabulary (8) so the embedding and head are negligible; p = 8, m = 8.
Bubble bubble(json plan, int p = 8, int m = 8, int L = 96) {
  Scenario sc = make_scenario(gpt_model(L, 1024, 16, 8, 512), ideal_cluster(), m, plan);
  Result r = simulate(sc);
  const CostModel& cm = r.prog.cm;
  double ideal = (cm.layer_fwd.time_s + cm.layer_bwd.time_s) * L / p * m;
  return {(r.step_time_s - ideal) / ideal, r.breakdown.bubble / (r.breakdown.compute + r.breakdown.recompute)};
}

TEST(TechniqueBubble, ContiguousModularLayeredAndInterleavedMatchSeeds64) {
  // Contiguous 1F1B: (p - 1) / m = 7 / 8.
  Bubble c = bubble(plan_json(1, 1, 8, 1, "1f1b"));
  EXPECT_NEAR(c.from_step, 7.0 / 8, 0.02);
  EXPECT_NEAR(c.from_breakdown, 7.0 / 8, 0.02);
  // Modular (one layer per chunk, layer l on stage l mod p) + layered accumulation: p (p - 1) / (L m) = 56 / 768.
  json ml = plan_json(1, 1, 8, 12, "modular");
  ml["grad_accumulation"] = "layered";
  Bubble a = bubble(ml);
  EXPECT_NEAR(a.from_step, 56.0 / 768, 0.003);
  EXPECT_NEAR(a.from_breakdown, 56.0 / 768, 0.003);
  // Modular without virtual_stages: resolved to L / p, same result.
  json ml0 = ml;
  ml0.erase("virtual_stages");
  EXPECT_NEAR(bubble(ml0).from_step, a.from_step, 1e-12);
  // Modular + standard accumulation = Megatron's interleaved order with v = L / p: the same small bubble.
  Bubble s = bubble(plan_json(1, 1, 8, 12, "modular"));
  EXPECT_NEAR(s.from_step, 56.0 / 768, 0.003);
  EXPECT_NEAR(s.from_breakdown, 56.0 / 768, 0.003);
  // LGA on contiguous stages (gpipe): stage k can start only when stage k - 1 has run all m micro-batches
  // through its first L/p - 1 layers and micro-batch 0 through its last, so the stages barely overlap:
  // bubble = (p - 1) ((L/p - 1) m + 1) / ((L/p) m) = 7 * 89 / 96 (the reason LGA needs the modular layout).
  json gl = plan_json(1, 1, 8, 1, "gpipe");
  gl["grad_accumulation"] = "layered";
  EXPECT_NEAR(bubble(gl).from_step, 7.0 * 89 / 96, 0.02);
}

// ---- 2. ZeRO gathers and network volume ------------------------------------------------------------------

// dp = 8 on one node of the ideal cluster, pp = 1, m = 4, 4 layers; tied embeddings but no pipeline, so
// no embedding all-reduce. Ring collectives on one node send exactly (d - 1) / d of the payload (x2 for
// all-reduce).
constexpr int kDp = 8, kM = 4, kL = 4;
Result zero_run(int zero, bool layered, const char* grad_precision = "fp32") {
  json plan = plan_json(kDp, 1, 1, 1, "1f1b", "none", false, zero);
  if (layered) plan["grad_accumulation"] = "layered";
  return simulate(scenario(gpt_model(kL, 1024, 16, 1024, 512), ideal_host_cluster(1, 8), kDp * kM, plan,
                           {{"grad_precision", grad_precision}}));
}

TEST(TechniqueZero, Zero3GathersPerLayerStandardVsLayered) {
  for (bool layered : {false, true}) {
    Result r = zero_run(3, layered);
    std::map<int, int> per_layer;
    for (const TaskInfo& ti : r.prog.info)
      if (ti.kind == TaskKind::zero_gather) {
        EXPECT_EQ(ti.layer_hi, ti.layer_lo + 1);
        per_layer[ti.layer_lo]++;
      }
    ASSERT_EQ((int)per_layer.size(), kL) << (layered ? "layered" : "standard");
    for (auto [l, n] : per_layer) EXPECT_EQ(n, layered ? 2 : 2 * kM) << "layer " << l << (layered ? " layered" : " standard");
  }
}

TEST(TechniqueZero, NetworkBytesPerStepMatchSeeds56) {
  const double d = kDp, f = (d - 1) / d, e = 2, g = 4;  // fp16 weights, fp32 gradients
  auto N = [](const Result& r) { return r.prog.statics[0].params; };
  for (bool layered : {false, true}) {
    SCOPED_TRACE(layered ? "layered" : "standard");
    Result z0 = zero_run(0, layered);
    EXPECT_LT(rel(net_bytes(z0), 2 * f * N(z0) * g), 1e-6);  // all-reduce of fp32 gradients
    EXPECT_EQ(z0.inter_bytes_per_gpu, 0);                     // one node
    Result z1 = zero_run(1, layered);
    EXPECT_LT(rel(net_bytes(z1), f * N(z1) * (g + e)), 1e-6);  // RS of gradients + AG of updated weights
    // ZeRO-2 (not in seeds 5.6): gradients are reduce-scattered after every backward run, i.e. once per
    // micro-batch under standard accumulation (as DeepSpeed stage 2 does) and once per step under LGA.
    Result z2 = zero_run(2, layered);
    EXPECT_LT(rel(net_bytes(z2), f * N(z2) * ((layered ? 1 : kM) * g + e)), 1e-6);
    Result z3 = zero_run(3, layered);
    double m = layered ? 1 : kM;  // LGA: one gather per pass and one reduce-scatter per layer per step
    EXPECT_LT(rel(net_bytes(z3), m * (2 * e + g) * f * N(z3)), 1e-6);
    EXPECT_EQ(count_tasks(z3, TaskKind::dp_gather), 0);  // ZeRO-3 needs no post-optimizer gather
  }
}

// ---- 3. model-state memory by ZeRO stage ------------------------------------------------------------------

TEST(TechniqueZero, ModelStateBytesPerParamMatchSeeds54) {
  const double d = kDp;
  const double per_param[4] = {16, 4 + 12 / d, 2 + 14 / d, 16 / d};
  for (int zero = 0; zero <= 3; ++zero) {
    Result r = zero_run(zero, false, "fp16");
    const RankStatic& st = r.prog.statics[0];
    double states = st.weights_bytes + st.gradients_bytes + st.optimizer_bytes;
    EXPECT_LT(rel(states, st.params * per_param[zero]), 1e-9) << "zero " << zero;
    // The peak's model-state categories agree for stages 0 and 1 (ZeRO-2 adds its unreduced gradient bucket,
    // ZeRO-3 its gathered layers, on top of the static shards).
    if (zero < 2) {
      EXPECT_LT(rel(r.memory.weights + r.memory.gradients + r.memory.optimizer, states), 1e-9) << zero;
    }
  }
}

// ---- 4. offload PCIe bytes --------------------------------------------------------------------------------

Result granular_run(bool layered, double host_bw = 1e20) {
  json plan = plan_json(1, 1, 1, 1, "1f1b");
  plan["offload"] = {{"kind", "granular"}, {"fraction", 1}};
  if (layered) plan["grad_accumulation"] = "layered";
  return simulate(scenario(gpt_model(kL, 1024, 16, 1024, 512), ideal_host_cluster(1, 8, host_bw), kM, plan));
}

TEST(TechniqueOffload, GranularPcieBytesStandardVsLayered) {
  const double e = 2;
  for (bool layered : {false, true}) {
    Result r = granular_run(layered);
    double P_layers = kL * r.prog.cm.layer_params;
    double want = (layered ? 1 : kM) * 3 * e * P_layers;  // a load before each fwd and bwd run, a store after bwd
    EXPECT_LT(rel(r.prog.statics[0].pcie_bytes, want), 1e-9) << (layered ? "layered" : "standard");
    EXPECT_LT(rel(r.pcie_bytes_per_gpu, want), 1e-9);
    EXPECT_EQ(count_tasks(r, TaskKind::h2d), (layered ? 2 : 2 * kM) * kL);
    EXPECT_EQ(count_tasks(r, TaskKind::d2h), (layered ? 1 : kM) * kL);
    EXPECT_GT(count_tasks(r, TaskKind::host_adam), 0);
    // The offloaded layers' weights and optimizer state are off the GPU: what stays is embedding + head.
    const RankStatic& st = r.prog.statics[0];
    double gpu_params = st.params - P_layers;
    EXPECT_LT(rel(st.weights_bytes, gpu_params * e), 1e-9);
    EXPECT_GT(st.host_bytes, 0);
  }
}

Result optimizer_offload_run(double host_bw) {
  json plan = plan_json(kDp, 1, 1, 1, "1f1b", "none", false, 1);
  plan["offload"] = {{"kind", "optimizer"}};
  return simulate(scenario(gpt_model(kL, 1024, 16, 1024, 512), ideal_host_cluster(1, 8, host_bw), kDp * kM, plan));
}

TEST(TechniqueOffload, OptimizerOffloadPcieBytesAndStall) {
  const double e = 2, d = kDp;
  Result r = optimizer_offload_run(1e20);
  const RankStatic& st = r.prog.statics[0];
  // Gradient shard to the host (e N / d), updated weights back (e N / d).
  EXPECT_LT(rel(st.pcie_bytes, 2 * e * st.params / d), 1e-9);
  EXPECT_EQ(st.optimizer_bytes, 0);
  EXPECT_EQ(r.memory.optimizer, 0);
  EXPECT_EQ(count_tasks(r, TaskKind::optimizer), 0);
  EXPECT_EQ(count_tasks(r, TaskKind::host_adam), 1);
  EXPECT_LT(rel(st.host_bytes, st.params / d * 16), 1e-9);  // fp32 master + m + v + fp32 gradient shard
  EXPECT_LT(r.breakdown.offload_stall, 1e-6 * r.step_time_s);
  // A slow host: CPU Adam over N/d params at 36 B/param / (1e9 B/s / 8 GPUs) is exposed as an offload stall.
  Result slow = optimizer_offload_run(1e9);
  double adam_s = st.params / d * (28 + e) / (1e9 / 8);
  EXPECT_GT(slow.breakdown.offload_stall, 0.9 * adam_s);
  EXPECT_NEAR(slow.breakdown.total(), slow.step_time_s, 1e-9 * slow.step_time_s);
  EXPECT_GT(slow.step_time_s, r.step_time_s + 0.9 * adam_s);
}

TEST(TechniqueOffload, GranularSlowPcieStallsCompute) {
  // PCIe at 1 GB/s: each layer load takes longer than a layer's compute -> offload stall in the breakdown.
  json c = ideal_host_cluster(1, 8);
  c["host"]["pcie_bandwidth_bytes_per_s"] = 1e9;
  json plan = plan_json(1, 1, 1, 1, "1f1b");
  plan["offload"] = {{"kind", "granular"}, {"fraction", 1}};
  Result r = simulate(scenario(gpt_model(kL, 1024, 16, 1024, 512), c, kM, plan));
  EXPECT_GT(r.breakdown.offload_stall, 0.5 * r.step_time_s);
  EXPECT_NEAR(r.breakdown.total(), r.step_time_s, 1e-9 * r.step_time_s);
}

// ---- 5. chunked offload (PatrickStar) ---------------------------------------------------------------------

Result chunked_run(int layers, int hidden, double hbm, long long chunk = 16LL << 20, int prefetch = 0,
                   double pcie_bw = 1e20) {
  json c = ideal_host_cluster(1, 8);
  c["gpu"]["hbm_bytes"] = hbm;
  c["host"]["pcie_bandwidth_bytes_per_s"] = pcie_bw;
  json plan = plan_json(1, 1, 1, 1, "1f1b", "full");
  plan["offload"] = {{"kind", "chunked"}, {"chunk_elements", chunk}, {"prefetch_runs", prefetch}};
  return simulate(scenario(gpt_model(layers, hidden, 16, 1024, 512), c, 2, plan));
}

TEST(TechniqueChunked, FitsMovesOrDoesNotFit) {
  // 8 layers of h = 1024 (~102M params in 16 Mi-element chunks, 14 B/param = 1.4 GB of model data), 2 micro-batches.
  // 80 GB: every chunk, optimizer state included, stays on the GPU: no PCIe traffic at all.
  Result big = chunked_run(8, 1024, 8e10);
  EXPECT_TRUE(big.fits) << big.offload_note;
  EXPECT_EQ(big.pcie_bytes_per_gpu, 0);
  EXPECT_EQ(count_tasks(big, TaskKind::h2d) + count_tasks(big, TaskKind::d2h), 0);
  EXPECT_EQ(count_tasks(big, TaskKind::host_adam), 0);
  // 1 GB: the fp16 parameter chunks (~0.27 GB) fit, part of the optimizer state does not (hybrid Adam): the only
  // moves are the CPU-Adam chunks' gradients to the host and their updated weights back, once per step.
  Result hybrid = chunked_run(8, 1024, 1e9);
  EXPECT_TRUE(hybrid.fits) << hybrid.offload_note;
  EXPECT_EQ(count_tasks(hybrid, TaskKind::h2d), 1);
  EXPECT_EQ(count_tasks(hybrid, TaskKind::d2h), 1);
  EXPECT_GT(hybrid.memory.optimizer, 0);
  EXPECT_GT(count_tasks(hybrid, TaskKind::host_adam), 0);
  // 0.2 GB: not even the parameter chunks fit next to the activations, but each layer's (the COMPUTE chunks) do:
  // chunks move over PCIe at the access moments of every micro-batch, and the step still fits.
  Result moving = chunked_run(8, 1024, 0.2e9);
  EXPECT_TRUE(moving.fits) << moving.offload_note;
  EXPECT_GT(count_tasks(moving, TaskKind::h2d), 2 * 8);
  EXPECT_GT(moving.pcie_bytes_per_gpu, 2 * 2 * moving.prog.statics[0].params);  // > one load per pass
  EXPECT_LT(moving.memory.weights, hybrid.memory.weights);
  EXPECT_LE(moving.peak_bytes_per_gpu, moving.capacity_bytes);
  // One layer of h = 8192 (805M params, 1.6 GB fp16) alone exceeds a 1 GB GPU: does not fit, with a note.
  Result none = chunked_run(2, 8192, 1e9, 1LL << 30);
  EXPECT_FALSE(none.fits);
  EXPECT_FALSE(none.offload_note.empty());
}

TEST(TechniqueChunked, PrefetchHidesLoadsBehindTheRunWithinTheBudget) {
  // The moving case above over a 10 GB/s PCIe link: synchronous moves stall every run; with prefetch_runs 1 the
  // next run's chunks load during the current run (an H2D task before the next run, after this run's own moves),
  // so the step is faster and the stall smaller, the device stays within its capacity, and roughly the same bytes
  // move (the evictions a prefetch makes ahead can pick other victims).
  Result sync = chunked_run(8, 1024, 0.2e9, 16LL << 20, 0, 1e10);
  Result ahead = chunked_run(8, 1024, 0.2e9, 16LL << 20, 1, 1e10);
  ASSERT_TRUE(sync.fits && ahead.fits) << ahead.offload_note;
  EXPECT_GT(sync.breakdown.offload_stall, 0);
  EXPECT_LT(ahead.step_time_s, sync.step_time_s);
  EXPECT_LT(ahead.breakdown.offload_stall, 0.8 * sync.breakdown.offload_stall);
  EXPECT_LE(ahead.peak_bytes_per_gpu, ahead.capacity_bytes);
  EXPECT_NEAR(ahead.pcie_bytes_per_gpu / sync.pcie_bytes_per_gpu, 1.0, 0.25);
  EXPECT_GT(count_tasks(ahead, TaskKind::h2d), count_tasks(sync, TaskKind::h2d) / 2);
  // A budget with no room beyond each run's own chunks: nothing to prefetch, the same step.
  Result big0 = chunked_run(8, 1024, 8e10, 16LL << 20, 0, 1e10), big1 = chunked_run(8, 1024, 8e10, 16LL << 20, 1, 1e10);
  EXPECT_EQ(big1.step_time_s, big0.step_time_s);
}

// ---- 6. M6-10T --------------------------------------------------------------------------------------------

// 512 V100-32GB, dp 512, ep 512 (20 experts of every layer per GPU), microbatch 8, one micro-batch.
Scenario m6(json offload = nullptr) {
  json plan = plan_json(512, 1, 1, 1, "1f1b", "full", false, 0, 8);
  plan["ep"] = 512;
  if (!offload.is_null()) plan["offload"] = offload;
  return make_scenario("m6-10t", "v100-m6", 512 * 8, plan);
}

TEST(TechniqueM6, RealDoesNotFitPseudoDoesGranularExpertOffloadFitsGpu) {
  Scenario sc = m6();
  Result real = simulate(sc);
  double expert_params = real.prog.cm.moe_expert_params * sc.model.layers;
  EXPECT_LT(rel(expert_params, 19.6e9), 0.01);  // 20 experts x 48 layers x 20.45M
  EXPECT_FALSE(real.fits);
  EXPECT_GT(real.peak_bytes_per_gpu, 32e9);

  Scenario ps = sc;
  ps.plan.shared_layers = 1;  // the pseudo phase: one weight set shared by all 48 layers
  Result pseudo = simulate(ps);
  // One layer's weights: 20 local experts (0.409e9, seeds' 0.41e9) + attention + router (h x 10240) + the
  // embedding and head (vocab 21128): 0.446e9.
  const CostModel& pcm = pseudo.prog.cm;
  EXPECT_LT(rel(pcm.moe_expert_params, 0.409e9), 0.01);
  EXPECT_LT(rel(pseudo.prog.statics[0].params, pcm.moe_params + pcm.embed_params + pcm.head_params), 1e-9);
  EXPECT_LT(rel(pseudo.prog.statics[0].params, 0.41e9), 0.1);
  EXPECT_TRUE(pseudo.fits);
  EXPECT_LT(pseudo.peak_bytes_per_gpu, 32e9);

  Result off = simulate(m6({{"kind", "granular"}, {"fraction", 1}, {"target", "experts"}}));
  EXPECT_LT(off.peak_bytes_per_gpu, 32e9);
  EXPECT_GT(off.pcie_bytes_per_gpu, 0);
  // The host side of the real phase: expert weights, gradients and Adam state of 19.6e9 params per GPU, x 8 GPUs.
  RecordProperty("m6_offload_host_bytes_per_node", std::to_string(off.host_bytes_per_node));
  std::printf("M6-10T real phase, granular expert offload: GPU peak %.2f GB, host %.0f GB per node (node has %.0f GB), "
              "PCIe %.1f GB per GPU per step, step %.2f s, fits %d host_fits %d\n",
              off.peak_bytes_per_gpu / 1e9, off.host_bytes_per_node / 1e9, sc.cluster.host.memory_bytes / 1e9,
              off.pcie_bytes_per_gpu / 1e9, off.step_time_s, off.fits, off.host_fits);
}

// ---- 7. Pseudo-to-Real ------------------------------------------------------------------------------------

TEST(TechniqueDelink, PhasesSumAndPseudoIsSmaller) {
  const int L = 8;
  json plan = plan_json(4, 1, 1, 1, "1f1b", "none", false, 0, 1);
  plan["delink"] = {{"unique_layers", 1}, {"tokens", 1e9}};
  Scenario sc = scenario(gpt_model(L, 1024, 16, 64, 512), ideal_host_cluster(1, 8), 16, plan, {{"tokens", 4e9}});
  Result r = simulate(sc);
  ASSERT_TRUE(r.delink);
  ASSERT_TRUE(r.delink->pseudo);
  const Result& ps = *r.delink->pseudo;
  EXPECT_GT(r.delink->delink_s, 0);
  EXPECT_DOUBLE_EQ(r.delink->time_s, ps.run.time_s + r.delink->delink_s + r.run.time_s);
  EXPECT_DOUBLE_EQ(r.delink->tokens, ps.run.tokens + r.run.tokens);
  EXPECT_LT(ps.peak_bytes_per_gpu, r.peak_bytes_per_gpu);
  // Data-parallel gradient bytes: the pseudo phase reduces one layer's weights (+ embedding, head).
  auto dp_bytes = [](const Result& x) {
    double b = 0;
    for (const TaskInfo& ti : x.prog.info)
      if (ti.kind == TaskKind::dp_reduce) b += ti.sent.intra + ti.sent.inter;
    return b;
  };
  const CostModel& cm = r.prog.cm;
  double ends = cm.embed_params + cm.head_params;
  double want = (cm.layer_params + ends) / (L * cm.layer_params + ends);
  EXPECT_LT(rel(dp_bytes(ps) / dp_bytes(r), want), 1e-9);
  EXPECT_NEAR(dp_bytes(ps) / dp_bytes(r), 1.0 / L, 0.1 / L);
  EXPECT_LT(rel(ps.prog.statics[0].params, cm.layer_params + ends), 1e-9);
}

// ---- 8. MoE all-to-all --------------------------------------------------------------------------------------

TEST(TechniqueMoe, AllToAllBytesGrowWithEpAndAreExposed) {
  json model = gpt_model(4, 1024, 16, 1024, 512);
  model["moe"] = {{"experts", 8}, {"top_k", 2}, {"capacity_factor", 1.25}};
  const int m = 2;
  double prev = -1;
  for (int ep : {1, 2, 4, 8}) {
    json plan = plan_json(8, 1, 1, 1, "1f1b");
    plan["ep"] = ep;
    Result r = simulate(make_scenario(model, "selene", 8 * m, plan));
    double a2a = 0;
    for (const TaskInfo& ti : r.prog.info) {
      TaskCost tc = task_cost(r.prog.cm, ti);
      a2a += tc.tp_bytes.intra + tc.tp_bytes.inter;  // tp = 1: only the expert-parallel all-to-alls
    }
    // 4 all-to-alls per MoE layer per micro-batch, each (ep - 1) / ep of e * tokens * h * k * cf.
    double want = m * 4 * 4 * (ep - 1.0) / ep * 2 * 512 * 1024 * 2 * 1.25;
    if (ep == 1) EXPECT_EQ(a2a, 0);
    else EXPECT_LT(rel(a2a, want), 1e-9) << "ep " << ep;
    EXPECT_GT(a2a, prev) << "ep " << ep;
    prev = a2a;
    if (ep > 1) EXPECT_GT(r.breakdown.ep_comm_exposed, 0) << "ep " << ep;
    else EXPECT_EQ(r.breakdown.ep_comm_exposed, 0);
  }
}

// ---- 9. Optimus 2D vs Megatron 1D --------------------------------------------------------------------------

TEST(Technique2d, ActivationsDividedByQSquaredParamsMatch1d) {
  json model = gpt_model(4, 2048, 32, 1024, 512);
  json p1 = plan_json(1, 4, 1, 1, "1f1b", "none", false, 0, 2);
  json p2 = p1;
  p2["tp_mode"] = "2d";
  Result r1 = simulate(make_scenario(model, ideal_cluster(1, 4), 2, p1));
  Result r2 = simulate(make_scenario(model, ideal_cluster(1, 4), 2, p2));
  const double s = 512, b = 2, h = 2048, a = 32, t = 4;
  double k1 = s * b * h * (10 + 24 / t + 5 * a * s / (h * t));  // Korthikanti 1D: the "10" part is replicated
  double k2 = s * b * h * (34 + 5 * a * s / h) / t;              // Optimus: everything / q^2
  EXPECT_LT(rel(r1.prog.cm.layer_stored_bytes, k1), 0.01);
  EXPECT_LT(rel(r2.prog.cm.layer_stored_bytes, k2), 0.01);
  EXPECT_LT(r2.prog.cm.layer_stored_bytes, r1.prog.cm.layer_stored_bytes);
  EXPECT_LT(r2.memory.activations, r1.memory.activations);
  // Parameters per GPU: both 12 h^2 / 4 up to biases and norms.
  EXPECT_LT(rel(r2.prog.cm.layer_params, r1.prog.cm.layer_params), 0.01);
  EXPECT_LT(rel(r1.prog.cm.layer_params, 12 * h * h / t), 0.01);
  // 2D moves data in every linear (SUMMA broadcasts): TP bytes per GPU are not zero.
  EXPECT_GT(r2.intra_bytes_per_gpu, 0);
}

}  // namespace
