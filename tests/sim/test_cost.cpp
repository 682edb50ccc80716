// Closed-form checks of the cost model: FLOP counter against Megatron's formula, parameter count,
// activation memory against Korthikanti et al. 2022, collective volumes, ZeRO bytes per parameter.
#include <gtest/gtest.h>

#include "sim/nccl_model.hpp"
#include "sim/program.hpp"
#include "sim/simulate.hpp"
#include "sim_test_util.hpp"

using namespace tp;
using namespace tp::testutil;

static CostModel cost_of(const Scenario& sc) { return build_program(sc, false).cm; }

TEST(Cost, FlopCounterMatchesMegatronFormula) {
  // GPT-3 175B (l = 96, h = 12288, s = 2048, V = 51200), full recompute, per iteration of B sequences.
  for (int tp : {1, 8}) {
    Scenario sc = make_scenario(gpt_model(96, 12288, 96), "selene", 64, plan_json(1, tp, 8, 1, "1f1b", "full"));
    CostModel cm = cost_of(sc);
    double per_mb = 96 * (cm.layer_fwd.flops + cm.layer_bwd.flops) + cm.embed_fwd.flops + cm.embed_bwd.flops +
                    cm.head_fwd.flops + cm.head_bwd.flops;
    double ours = per_mb * tp * 64;  // all TP ranks, all micro-batches (microbatch 1)
    double megatron = megatron_flops_per_iteration(sc.model, 64, 2048, true);
    EXPECT_NEAR(ours / megatron, 1.0, 0.01) << "tp " << tp;
    // Model FLOPs (no recompute) against the 72-formula.
    EXPECT_NEAR(cm.model_flops_per_step / megatron_flops_per_iteration(sc.model, 64, 2048, false), 1.0, 0.01);
  }
}

TEST(Cost, ParameterCountMatchesClosedForm) {
  Transformer m;
  m.layers = 96; m.hidden = 12288; m.heads = 96; m.kv_heads = 96; m.ffn_hidden = 4 * 12288; m.vocab = 51200;
  m.seq_len = 2048;
  double l = 96, h = 12288, V = 51200, s = 2048;
  double closed = 12 * l * h * h * (1 + 13 / (12 * h) + (V + s) / (12 * l * h));
  EXPECT_NEAR(total_params(m) / closed, 1.0, 1e-6);  // ours adds only the final LayerNorm (2h)
  // Llama-3 8B: 8.03e9 parameters (SwiGLU, GQA, untied).
  Transformer l3;
  l3.layers = 32; l3.hidden = 4096; l3.heads = 32; l3.kv_heads = 8; l3.ffn_hidden = 14336; l3.vocab = 128256;
  l3.seq_len = 8192; l3.activation = Activation::swiglu; l3.tied_embeddings = false;
  EXPECT_NEAR(total_params(l3) / 8.03e9, 1.0, 0.005);
}

TEST(Cost, ActivationMemoryMatchesKorthikanti) {
  const double s = 2048, b = 1, h = 12288, a = 96, t = 8;
  const double sbh = s * b * h;
  struct Case { const char* rc; bool sp; double expected; };
  Case cases[] = {
      {"none", false, sbh * (10 + 24 / t + 5 * a * s / (h * t))},
      {"none", true, sbh * (34 + 5 * a * s / h) / t},
      {"selective", true, 34 * sbh / t},
      {"selective", false, sbh * (10 + 24 / t)},
      {"full", true, 2 * sbh / t},
      {"full", false, 2 * sbh},
  };
  for (const Case& c : cases) {
    Scenario sc = make_scenario(gpt_model(96, 12288, 96), "selene", 64, plan_json(1, 8, 8, 1, "1f1b", c.rc, c.sp));
    EXPECT_NEAR(cost_of(sc).layer_stored_bytes / c.expected, 1.0, 1e-12) << c.rc << " sp " << c.sp;
  }
}

TEST(Cost, ZeroOneBytesPerParameter) {
  // Megatron accounting: fp16 weights 2, fp32 main grads 4, fp32 master + Adam moments 12 (sharded by ZeRO-1).
  for (int zero : {0, 1}) {
    Scenario sc = make_scenario(gpt_model(8, 1024, 16, 1024, 512), ideal_cluster(), 64, plan_json(8, 1, 1, 1, "1f1b", "none", false, zero));
    Program pg = build_program(sc, false);
    const RankStatic& st = pg.statics[0];
    EXPECT_DOUBLE_EQ(st.weights_bytes / st.params, 2.0);
    EXPECT_DOUBLE_EQ(st.gradients_bytes / st.params, 4.0);
    EXPECT_DOUBLE_EQ(st.optimizer_bytes / st.params, zero ? 12.0 / 8 : 12.0);
  }
}

TEST(Cost, CollectiveVolumesPerMember) {
  Cluster c;
  c.nodes = 4; c.gpus_per_node = 8;
  c.intra.bandwidth_bytes_per_s = 1e11; c.inter.nics_per_node = 8; c.inter.nic_bandwidth_bytes_per_s = 2.5e10;
  c.host.pcie_bandwidth_bytes_per_s = 3e10;
  Topology topo = build_topology(c, 32);
  const double S = 1e9;
  std::vector<int> node0 = {0, 1, 2, 3, 4, 5, 6, 7};
  TierBytes ar = collective_member_bytes(Coll::all_reduce, node0, S, topo);
  EXPECT_DOUBLE_EQ(ar.intra, 2.0 * 7 / 8 * S);
  EXPECT_DOUBLE_EQ(ar.inter, 0);
  std::vector<int> across = {0, 8, 16, 24};  // one member per node: flat ring over the network
  EXPECT_DOUBLE_EQ(collective_member_bytes(Coll::reduce_scatter, across, S, topo).inter, 3.0 / 4 * S);
  EXPECT_DOUBLE_EQ(collective_member_bytes(Coll::all_gather, across, S, topo).inter, 3.0 / 4 * S);
  // Two members on each of 4 nodes: hierarchical, intra RS/AG on S and an inter all-reduce on S/2.
  std::vector<int> hier = {0, 1, 8, 9, 16, 17, 24, 25};
  TierBytes hb = collective_member_bytes(Coll::all_reduce, hier, S, topo);
  EXPECT_DOUBLE_EQ(hb.intra, 2.0 * 1 / 2 * S);
  EXPECT_DOUBLE_EQ(hb.inter, 2.0 * 3 / 4 * S / 2);
  auto phases = collective_phases(Coll::all_reduce, hier, S, topo, c);
  EXPECT_EQ(phases.size(), 3u);
  EXPECT_EQ(collective_phases(Coll::all_reduce, across, S, topo, c).size(), 1u);
}

TEST(Cost, TensorParallelCommTimeFromTopology) {
  // The TP all-reduce of the representative group: by default NCCL's time for 8 ranks in one node; with the
  // cluster's curves ("step_collectives": false) 2(t-1)/t S over the NVSwitch port bandwidth.
  Scenario sc = make_scenario(gpt_model(4, 4096, 32, 1024, 1024), "selene", 8, plan_json(1, 8, 1, 1, "1f1b"));
  const double S = 2.0 * 1024 * 4096;  // fp16 [b*s, h]
  auto tp_ar = [](const Program& pg) {
    double t = 0;
    for (auto& op : pg.cm.layer_fwd.ops)
      if (op.name == "tp.ar1") t = op.time_s;
    return t;
  };
  ASSERT_TRUE(sc.cluster.nccl.step_collectives);
  EXPECT_NEAR(tp_ar(build_program(sc, false)) / nccl_collective(sc.cluster, Coll::all_reduce, 8, 8, S).time_s, 1.0, 1e-9);
  sc.cluster.nccl.step_collectives = false;
  const Cluster& cl = sc.cluster;
  double expected = 2.0 * 7 / 8 * S / (cl.intra.bandwidth_bytes_per_s * cl.intra.efficiency.at(S)) + 14 * 2 * cl.intra.latency_s;
  EXPECT_NEAR(tp_ar(build_program(sc, false)) / expected, 1.0, 1e-9);
}

// model.dropout false (the executor's GPT): no dropout ops or masks, so a layer costs less and stores less.
TEST(Cost, DropoutKeyRemovesDropoutOpsAndMasks) {
  json with = gpt_model(2, 1024, 16), without = gpt_model(2, 1024, 16);
  without["dropout"] = false;
  Scenario a = make_scenario(with, ideal_cluster(), 8, plan_json(1, 1, 1, 1, "1f1b"));
  Scenario b = make_scenario(without, ideal_cluster(), 8, plan_json(1, 1, 1, 1, "1f1b"));
  TpComm tpc;
  tpc.time_s = [](Coll, double, CommGroup) { return 0.0; };
  tpc.bytes = [](Coll, double, CommGroup) { return TierBytes{}; };
  CostModel ca = build_cost_model(a, tpc), cb = build_cost_model(b, tpc);
  auto has = [](const PassCost& pc, const std::string& n) {
    for (const Op& op : pc.ops) if (op.name == n) return true;
    return false;
  };
  EXPECT_TRUE(has(ca.layer_fwd, "attn.dropout"));
  EXPECT_FALSE(has(cb.layer_fwd, "attn.dropout"));
  EXPECT_LT(cb.layer_stored_bytes, ca.layer_stored_bytes);
  EXPECT_LT(cb.layer_fwd.time_s, ca.layer_fwd.time_s);
}
