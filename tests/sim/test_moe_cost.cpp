// Closed-form checks of the MoE layer cost (sim/op_cost.cpp: moe_fwd / moe_bwd / moe_* of CostModel) and of
// the all-to-all collective: the dispatch + combine all-to-all volume per member, expert FLOPs against the
// dense MLP, parameters per GPU by hand, stored activations, useful model FLOPs (top_k copies, no capacity
// padding). The cost model is built with an analytic TpComm (member sends (g-1)/g*S, 2(g-1)/g*S for an
// all-reduce), as in test_cost_2d.cpp.
#include <gtest/gtest.h>

#include <stdexcept>

#include "sim/op_cost.hpp"
#include "sim/topology.hpp"
#include "sim_test_util.hpp"

using namespace tp;
using namespace tp::testutil;

namespace {

double member_fraction(Coll c, int g) {
  if (g <= 1) return 0;
  if (c == Coll::all_reduce) return 2.0 * (g - 1) / g;
  if (c == Coll::p2p) return 1.0;
  return (double)(g - 1) / g;
}

TpComm analytic_comm(int tp, int ep) {
  auto size = [tp, ep](CommGroup g) { return g == CommGroup::ep ? ep : g == CommGroup::tp ? tp : 1; };
  TpComm tpc;
  tpc.bytes = [size](Coll c, double S, CommGroup g) {
    TierBytes tb;
    tb.inter = member_fraction(c, size(g)) * S;
    return tb;
  };
  tpc.time_s = [size](Coll c, double S, CommGroup g) {
    return size(g) > 1 ? member_fraction(c, size(g)) * S / 1e10 + 1e-5 : 0.0;
  };
  return tpc;
}

// GPT: 4 layers, h = 1024, a = 16, ffn 4h, V = 1024, s = 512, micro-batch 2; every 2nd layer has E = 8
// experts, top-2, capacity factor 1.25.
Scenario moe_scenario(int tp, int ep, const char* recompute = "none", bool sp = false) {
  Scenario sc = make_scenario(gpt_model(4, 1024, 16, 1024, 512), ideal_cluster(), 16,
                              plan_json(4, tp, 1, 1, "1f1b", recompute, sp, 0, 2));
  sc.model.moe.experts = 8;
  sc.model.moe.top_k = 2;
  sc.model.moe.capacity_factor = 1.25;
  sc.model.moe.every = 2;
  sc.plan.ep = ep;
  return sc;
}

CostModel cost(const Scenario& sc) { return build_cost_model(sc, analytic_comm(sc.plan.tp, sc.plan.ep)); }

double flops_of(const PassCost& pc, std::initializer_list<const char*> names) {
  double sum = 0;
  for (const Op& op : pc.ops)
    for (const char* n : names)
      if (op.name == n) sum += op.flops;
  return sum;
}

double total(const TierBytes& tb) { return tb.intra + tb.inter; }

}  // namespace

TEST(MoeCost, AllToAllBytesPerMemberClosedForm) {
  const double e = 2, n = 2 * 512.0, h = 1024, k = 2, cf = 1.25;
  for (int ep : {1, 2, 4}) {
    CostModel cm = cost(moe_scenario(1, ep));
    // Dispatch + combine: 2 x (ep-1)/ep x e*n*h*k*cf per member per layer per micro-batch (tp = 1).
    double fwd = 2.0 * (ep - 1) / ep * e * n * h * k * cf;
    EXPECT_NEAR(total(cm.moe_fwd.tp_bytes), fwd, 1e-9 * fwd + 1e-9) << "ep " << ep;
    EXPECT_NEAR(total(cm.moe_bwd.tp_bytes), fwd, 1e-9 * fwd + 1e-9) << "ep " << ep;
    const Op* d = find_op(cm.moe_fwd, "moe.dispatch");
    ASSERT_NE(d, nullptr);
    EXPECT_EQ(d->cls, OpClass::ep_comm);
    EXPECT_DOUBLE_EQ(d->bytes, e * n * h * k * cf);
    if (ep == 1) {
      EXPECT_EQ(d->time_s, 0);
      EXPECT_EQ(cm.moe_fwd.ep_comm_s, 0);
    } else {
      double one = (ep - 1.0) / ep * e * n * h * k * cf / 1e10 + 1e-5;
      EXPECT_DOUBLE_EQ(cm.moe_fwd.ep_comm_s, 2 * one);  // dispatch + combine, not in compute_s
      EXPECT_DOUBLE_EQ(cm.moe_bwd.ep_comm_s, 2 * one);
    }
  }
  // Full recompute re-runs the two forward all-to-alls in the backward.
  CostModel rc = cost(moe_scenario(1, 4, "full"));
  EXPECT_NEAR(total(rc.moe_bwd.tp_bytes) / total(rc.moe_fwd.tp_bytes), 2.0, 1e-12);
  // With tp = 2 every TP rank dispatches its half of the tokens.
  CostModel t2 = cost(moe_scenario(2, 4, "none", true));
  EXPECT_DOUBLE_EQ(find_op(t2.moe_fwd, "moe.dispatch")->bytes, e * (n / 2) * h * k * cf);
}

TEST(MoeCost, ExpertFlopsAreTopKTimesCapacityTimesDenseMlp) {
  for (int tp : {1, 2}) {
    for (int ep : {1, 4}) {
      CostModel cm = cost(moe_scenario(tp, ep, "none", tp > 1));
      double dense = flops_of(cm.layer_fwd, {"fc1", "fc2"});
      double experts = flops_of(cm.moe_fwd, {"moe.fc1", "moe.fc2"});
      EXPECT_NEAR(experts / dense, 2 * 1.25, 1e-12) << "tp " << tp << " ep " << ep;
      double dense_bwd = flops_of(cm.layer_bwd, {"fc1.dgrad", "fc1.wgrad", "fc2.dgrad", "fc2.wgrad"});
      double experts_bwd = flops_of(cm.moe_bwd, {"moe.fc1.dgrad", "moe.fc1.wgrad", "moe.fc2.dgrad", "moe.fc2.wgrad"});
      EXPECT_NEAR(experts_bwd / dense_bwd, 2 * 1.25, 1e-12);
      // The attention half is the dense layer's.
      EXPECT_DOUBLE_EQ(flops_of(cm.moe_fwd, {"qkv", "proj", "attn.qk", "attn.av"}),
                       flops_of(cm.layer_fwd, {"qkv", "proj", "attn.qk", "attn.av"}));
      // Router [n/t, h] x [h, E].
      EXPECT_DOUBLE_EQ(flops_of(cm.moe_fwd, {"moe.router"}), 2.0 * (1024.0 / tp) * 1024 * 8);
    }
  }
}

TEST(MoeCost, ParametersPerGpuByHand) {
  // h = 1024, E = 8, GPT (biases, LayerNorms), tp = 1, ep = 2:
  //  attention + norms: qkv 3h^2 + 3h, proj h^2 + h, two LayerNorms 4h       = 4h^2 + 8h = 4202496
  //  router h*E                                                               = 8192
  //  local experts E/ep = 4, each fc1 4h^2 + 4h, fc2 4h^2 + h = 8h^2 + 5h     = 4 * 8393728 = 33574912
  CostModel cm = cost(moe_scenario(1, 2));
  EXPECT_DOUBLE_EQ(cm.moe_expert_params, 33574912.0);
  EXPECT_DOUBLE_EQ(cm.moe_params, 4202496.0 + 8192.0 + 33574912.0);
  EXPECT_EQ(cm.moe_every, 2);
  // tp = 2: weights and column biases / 2; the proj and fc2 biases and the norms replicated.
  const double h = 1024;
  CostModel t2 = cost(moe_scenario(2, 4));
  double experts = 2 * ((8 * h * h + 4 * h) / 2 + h);
  EXPECT_DOUBLE_EQ(t2.moe_expert_params, experts);
  EXPECT_DOUBLE_EQ(t2.moe_params, (4 * h * h + 3 * h) / 2 + 5 * h + 8 * h + experts);
  // A dense model has no MoE layers.
  Scenario dense = moe_scenario(1, 1);
  dense.model.moe = Moe{};
  EXPECT_EQ(cost(dense).moe_every, 0);
}

TEST(MoeCost, StoredActivations) {
  const double e = 2, n = 1024, h = 1024, f = 4096, E = 8, kc = 2 * 1.25;
  CostModel cm = cost(moe_scenario(1, 4));
  // The MLP half's sharded tensors (fc1 out, fc2 in) scale by k*cf; plus router probabilities (fp32) and two
  // token-copy buffers (dispatched fc1 input, combined expert outputs).
  double extra = (kc - 1) * e * n * (f + f) + 4 * n * E + 2 * e * n * kc * h;
  EXPECT_DOUBLE_EQ(cm.moe_stored_bytes, cm.layer_stored_bytes + extra);
  EXPECT_EQ(cm.moe_transient_bytes, 0);
  CostModel full = cost(moe_scenario(1, 4, "full"));
  EXPECT_DOUBLE_EQ(full.moe_stored_bytes, e * n * h);
  EXPECT_DOUBLE_EQ(full.moe_transient_bytes, cm.moe_stored_bytes);
  CostModel sel = cost(moe_scenario(1, 4, "selective"));
  EXPECT_DOUBLE_EQ(sel.moe_stored_bytes + sel.moe_transient_bytes, cm.moe_stored_bytes);
  EXPECT_DOUBLE_EQ(sel.moe_transient_bytes, sel.layer_transient_bytes);
}

TEST(MoeCost, ModelFlopsCountTopKCopiesWithoutPadding) {
  for (int tp : {1, 2}) {
    Scenario sc = moe_scenario(tp, 4, "full", tp > 1);
    CostModel cm = cost(sc);
    Scenario dsc = sc;
    dsc.model.moe = Moe{};
    CostModel dense = cost(dsc);
    // A MoE layer's useful forward: the dense layer with the MLP on k = 2 copies per token, plus the router.
    double mlp = flops_of(dense.layer_fwd, {"fc1", "fc2"});
    double moe_useful = dense.layer_fwd.flops + (2 - 1) * mlp + 2.0 * (1024.0 / tp) * 1024 * 8;
    double per_mb = 2 * dense.layer_fwd.flops + 2 * moe_useful + dense.head_fwd.flops;  // layers 1, 3 are MoE
    double expected = 3 * per_mb * tp * (double)sc.plan.num_microbatches * sc.plan.dp;
    EXPECT_NEAR(cm.model_flops_per_step / expected, 1.0, 1e-12) << "tp " << tp;
  }
}

TEST(MoeCost, TwoDimensionalTensorParallelismIsNotModelled) {
  Scenario sc = moe_scenario(4, 1);
  sc.plan.tp_mode = TpMode::d2;
  EXPECT_THROW(cost(sc), std::invalid_argument);
}

TEST(CollectiveAllToAll, PhasesVolumesAndTime) {
  Scenario sc = make_scenario(gpt_model(2, 256, 4, 256, 128), finite_nvswitch_cluster(), 8, plan_json(8, 1, 1, 1, "1f1b"));
  const Cluster& cl = sc.cluster;
  Topology topo = build_topology(cl, 32);
  const double S = 1e8;
  std::vector<int> node0 = {0, 1, 2, 3};
  auto ph = collective_phases(Coll::all_to_all, node0, S, topo, cl);
  ASSERT_EQ(ph.size(), 1u);
  ASSERT_EQ(ph[0].flows.size(), 12u);  // g(g-1) direct flows
  EXPECT_EQ(ph[0].steps, 1);
  for (const FlowReq& fr : ph[0].flows) {
    EXPECT_NE(fr.src, fr.dst);
    EXPECT_DOUBLE_EQ(fr.payload, S / 4);
  }
  EXPECT_EQ(std::string(coll_name(Coll::all_to_all)), "alltoall");
  TierBytes in = collective_member_bytes(Coll::all_to_all, node0, S, topo);
  EXPECT_DOUBLE_EQ(in.intra, 3.0 / 4 * S);
  EXPECT_EQ(in.inter, 0);
  TierBytes mixed = collective_member_bytes(Coll::all_to_all, {0, 1, 8, 9}, S, topo);
  EXPECT_DOUBLE_EQ(mixed.intra, S / 4);
  EXPECT_DOUBLE_EQ(mixed.inter, 2 * S / 4);
  // Each GPU's NVSwitch port carries its 3 outgoing flows of S/4: (g-1)/g*S at the port bandwidth.
  double bw = cl.intra.bandwidth_bytes_per_s;
  EXPECT_NEAR(collective_time_isolated_s(Coll::all_to_all, node0, S, topo, cl) / (0.75 * S / bw + topo.latency_s(0, 1)),
              1.0, 1e-9);
  EXPECT_TRUE(collective_phases(Coll::all_to_all, {3}, S, topo, cl).empty());
}
