// Closed-form checks of the Optimus 2D (SUMMA) cost model (sim/op_cost_2d.cpp) and of the rooted chain
// collectives it uses (broadcast, reduce). The cost model is built directly with an analytic TpComm: a
// member of a g-member group sends 2(g-1)/g*S for an all-reduce and (g-1)/g*S for the other kinds (the
// volumes of collective_member_bytes), at a fixed bandwidth plus a latency, so every number is a closed form.
// Byte accounting (seeds §3.5): a SUMMA broadcast or reduce of a b-byte block counts (q-1)/q*b per member
// (the root's send counted once, the root rotating over the q steps), so the q broadcasts of a linear's
// activation and weight blocks move (q-1)/q^2 * (n*h_in + h_in*h_out) elements per device.
#include <gtest/gtest.h>

#include <set>

#include "sim/op_cost.hpp"
#include "sim/topology.hpp"
#include "sim_test_util.hpp"

using namespace tp;
using namespace tp::testutil;

namespace {

struct Groups { int tp = 1, row = 1, col = 1, ep = 1; };

int group_size(const Groups& g, CommGroup c) {
  switch (c) {
    case CommGroup::tp: return g.tp;
    case CommGroup::tp_row: return g.row;
    case CommGroup::tp_col: return g.col;
    case CommGroup::ep: return g.ep;
    case CommGroup::cp: return 1;
  }
  return 1;
}

double member_fraction(Coll c, int g) {
  if (g <= 1) return 0;
  if (c == Coll::all_reduce) return 2.0 * (g - 1) / g;
  if (c == Coll::p2p) return 1.0;
  return (double)(g - 1) / g;
}

// Analytic collectives: bytes = the member's payload, all intra-node; time = bytes / 1e11 + 1 us.
TpComm analytic_comm(Groups gs, std::set<int>* used = nullptr) {
  TpComm tpc;
  tpc.bytes = [gs, used](Coll c, double S, CommGroup grp) {
    if (used) used->insert((int)grp);
    TierBytes tb;
    tb.intra = member_fraction(c, group_size(gs, grp)) * S;
    return tb;
  };
  tpc.time_s = [gs](Coll c, double S, CommGroup grp) {
    int g = group_size(gs, grp);
    return g > 1 ? member_fraction(c, g) * S / 1e11 + 1e-6 : 0.0;
  };
  return tpc;
}

// GPT layer: h = 1024, a = 16, ffn 4h, V = 1024, s = 512; micro-batch 4 (divisible by q = 1, 2, 4).
Scenario gpt_scenario(int tp, const char* recompute = "none", bool swiglu = false) {
  json model = gpt_model(4, 1024, 16, 1024, 512);
  if (swiglu) {
    model["activation"] = "swiglu";
    model["kv_heads"] = 4;
    model["ffn_hidden"] = 2816;
    model["tied_embeddings"] = false;
  }
  return make_scenario(model, ideal_cluster(), 8, plan_json(2, tp, 1, 1, "1f1b", recompute, false, 0, 4));
}

CostModel cost_1d(const Scenario& sc) {
  Groups g;
  g.tp = sc.plan.tp;
  return build_cost_model(sc, analytic_comm(g));
}

CostModel cost_2d(Scenario sc, int q, std::set<int>* used = nullptr) {
  sc.plan.tp = q * q;
  sc.plan.tp_mode = TpMode::d2;
  Groups g;
  g.tp = q * q;
  g.row = q;
  g.col = q;
  return build_cost_model(sc, analytic_comm(g, used));
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Sum of op buffer bytes over the layer linears' SUMMA collectives whose name ends with one of `suffixes`.
double summa_buffer_bytes(const PassCost& pc, std::initializer_list<const char*> suffixes) {
  double sum = 0;
  for (const Op& op : pc.ops) {
    bool linear = false;
    for (const char* l : {"qkv.", "proj.", "fc1.", "fc2."}) linear |= op.name.rfind(l, 0) == 0;
    if (!linear) continue;
    for (const char* sfx : suffixes)
      if (ends_with(op.name, sfx)) sum += op.bytes;
  }
  return sum;
}

}  // namespace

TEST(Cost2d, SummaVolumesMatchOptimusClosedForm) {
  const double h = 1024, n = 4 * 512.0, e = 2;
  for (int q : {2, 4}) {
    const double qq = q;
    const double fwd_formula = e * (qq - 1) / (qq * qq) * (7 * n * h + 12 * h * h);  // bytes per device per layer
    for (const char* rc : {"none", "full"}) {
      CostModel cm = cost_2d(gpt_scenario(1, rc), q);
      // Per-member payload of a broadcast / reduce = (q-1)/q of its buffer.
      double fwd = summa_buffer_bytes(cm.layer_fwd, {".bcast_a", ".bcast_b"}) * (qq - 1) / qq;
      EXPECT_NEAR(fwd / fwd_formula, 1.0, 1e-12) << "q " << q;
      double bwd = summa_buffer_bytes(cm.layer_bwd, {".bcast_a", ".bcast_b", ".dgrad.reduce", ".wgrad.reduce"}) *
                   (qq - 1) / qq;
      double times = std::string(rc) == "full" ? 3 : 2;  // backward = 2x forward, + 1x forward recompute
      EXPECT_NEAR(bwd / (times * fwd_formula), 1.0, 1e-12) << "q " << q << " " << rc;
    }
    // The pass's tp_bytes: the SUMMA formula plus the small terms (norm statistics all-reduces of [n/q] fp32,
    // norm parameter and bias broadcasts of h/q slices from row 0).
    CostModel cm = cost_2d(gpt_scenario(1), q);
    double f = (qq - 1) / qq;
    double norms = 2 * (f * e * 2 * h / qq + 2 * 2 * f * 4 * n / qq);
    double biases = f * e * (3 * h + h + 4 * h + h) / qq;
    EXPECT_NEAR(cm.layer_fwd.tp_bytes.intra / (fwd_formula + norms + biases), 1.0, 1e-12);
    EXPECT_EQ(cm.layer_fwd.tp_bytes.inter, 0);
    double bwd_norms = 2 * (f * e * 2 * h / qq + 2 * 2 * f * 4 * n / qq);
    EXPECT_NEAR(cm.layer_bwd.tp_bytes.intra / (2 * fwd_formula + bwd_norms + biases), 1.0, 1e-12);
  }
}

TEST(Cost2d, SummaCollectivesRunOnGridRowsAndColumns) {
  const int q = 4;
  std::set<int> used;
  CostModel cm = cost_2d(gpt_scenario(1), q, &used);
  EXPECT_EQ(used, (std::set<int>{(int)CommGroup::tp_row, (int)CommGroup::tp_col}));
  const double h = 1024, n = 2048, e = 2;
  auto bcast_time = [&](double S) { return 3.0 / 4 * S / 1e11 + 1e-6; };
  for (const Op& op : cm.layer_fwd.ops) {
    // q sequential broadcasts of one block each, not overlapped.
    if (op.name == "qkv.bcast_a") {
      EXPECT_DOUBLE_EQ(op.time_s, q * bcast_time(e * (n / q) * (h / q)));
    }
    if (op.name == "fc2.bcast_b") {
      EXPECT_DOUBLE_EQ(op.time_s, q * bcast_time(e * (4 * h / q) * (h / q)));
    }
    if (op.cls == OpClass::tp_comm) {
      EXPECT_EQ(op.hidden_s, 0);
    }
  }
  EXPECT_GT(cm.layer_fwd.tp_comm_s, 0);
  EXPECT_EQ(cm.layer_fwd.ep_comm_s, 0);
}

TEST(Cost2d, StoredActivationsAreTheUnshardedLayerOverQSquared) {
  for (const char* rc : {"none", "selective", "full"}) {
    CostModel one = cost_1d(gpt_scenario(1, rc));
    for (int q : {2, 4}) {
      CostModel two = cost_2d(gpt_scenario(1, rc), q);
      EXPECT_DOUBLE_EQ(two.layer_stored_bytes, one.layer_stored_bytes / (q * q)) << rc << " q " << q;
      EXPECT_DOUBLE_EQ(two.layer_transient_bytes, one.layer_transient_bytes / (q * q)) << rc << " q " << q;
      EXPECT_DOUBLE_EQ(two.embed_stored_bytes, one.embed_stored_bytes / (q * q));
      EXPECT_DOUBLE_EQ(two.head_stored_bytes, one.head_stored_bytes / (q * q));
    }
  }
  // Korthikanti's unsharded GPT layer, s*b*h*(34 + 5as/h), over q^2 (seeds §5.5).
  const double s = 512, b = 4, h = 1024, a = 16;
  EXPECT_DOUBLE_EQ(cost_2d(gpt_scenario(1), 2).layer_stored_bytes, s * b * h * (34 + 5 * a * s / h) / 4);
}

TEST(Cost2d, ParametersPerGpu) {
  const double h = 1024, V = 1024, s = 512;
  for (int q : {1, 2, 4}) {
    const double qq = q;
    CostModel cm = cost_2d(gpt_scenario(1), q);
    // Weights 12h^2 / q^2; biases (3h + h + 4h + h) and two LayerNorms (4h) as h/q slices on row 0.
    EXPECT_DOUBLE_EQ(cm.layer_params, 12 * h * h / (qq * qq) + 13 * h / qq);
    EXPECT_DOUBLE_EQ(cm.embed_params, V * h / (qq * qq) + s * h / qq);
    EXPECT_DOUBLE_EQ(cm.head_params, 2 * h / qq);  // tied embeddings, pp = 1: final LayerNorm only
  }
  // Untied SwiGLU model: GQA qkv, gate+up fc1, RMSNorms (h each), no biases; the LM head V*h/q^2.
  Scenario sw = gpt_scenario(1, "none", true);
  const double kvd = 4 * 64.0, f = 2816;
  CostModel cm = cost_2d(sw, 2);
  EXPECT_DOUBLE_EQ(cm.layer_params, (h * (h + 2 * kvd) + h * h + 2 * h * f + f * h) / 4 + 2 * h / 2);
  EXPECT_DOUBLE_EQ(cm.head_params, h / 2 + V * h / 4);
}

TEST(Cost2d, FlopsAreTheTpOneFlopsOverQSquared) {
  for (const char* rc : {"none", "selective", "full"}) {
    for (bool swiglu : {false, true}) {
      CostModel one = cost_1d(gpt_scenario(1, rc, swiglu));
      for (int q : {2, 4}) {
        CostModel two = cost_2d(gpt_scenario(1, rc, swiglu), q);
        double qq = q * q;
        EXPECT_NEAR(two.layer_fwd.flops * qq / one.layer_fwd.flops, 1.0, 1e-12);
        EXPECT_NEAR(two.layer_bwd.flops * qq / one.layer_bwd.flops, 1.0, 1e-12);
        EXPECT_NEAR(two.head_fwd.flops * qq / one.head_fwd.flops, 1.0, 1e-12);
        EXPECT_NEAR(two.head_bwd.flops * qq / one.head_bwd.flops, 1.0, 1e-12);
        EXPECT_NEAR(two.model_flops_per_step / one.model_flops_per_step, 1.0, 1e-12);
      }
    }
  }
}

TEST(Cost2d, QEqualOneEqualsTpOne) {
  auto same_pass = [](const PassCost& x, const PassCost& y, const char* what) {
    EXPECT_NEAR(x.time_s, y.time_s, 1e-12 * y.time_s) << what;
    EXPECT_NEAR(x.compute_s, y.compute_s, 1e-12 * y.compute_s) << what;
    EXPECT_NEAR(x.recompute_s, y.recompute_s, 1e-12 * y.recompute_s) << what;
    EXPECT_EQ(x.tp_comm_s, 0) << what;
    EXPECT_EQ(y.tp_comm_s, 0) << what;
    EXPECT_NEAR(x.flops, y.flops, 1e-12 * y.flops) << what;
    EXPECT_EQ(x.tp_bytes.intra + x.tp_bytes.inter, 0) << what;
  };
  for (const char* rc : {"none", "selective", "full"}) {
    for (bool swiglu : {false, true}) {
      Scenario sc = gpt_scenario(1, rc, swiglu);
      CostModel one = cost_1d(sc);
      CostModel two = cost_2d(sc, 1);
      same_pass(two.layer_fwd, one.layer_fwd, "layer_fwd");
      same_pass(two.layer_bwd, one.layer_bwd, "layer_bwd");
      same_pass(two.embed_fwd, one.embed_fwd, "embed_fwd");
      same_pass(two.embed_bwd, one.embed_bwd, "embed_bwd");
      same_pass(two.head_fwd, one.head_fwd, "head_fwd");
      same_pass(two.head_bwd, one.head_bwd, "head_bwd");
      EXPECT_DOUBLE_EQ(two.layer_stored_bytes, one.layer_stored_bytes);
      EXPECT_DOUBLE_EQ(two.layer_transient_bytes, one.layer_transient_bytes);
      EXPECT_DOUBLE_EQ(two.embed_stored_bytes, one.embed_stored_bytes);
      EXPECT_DOUBLE_EQ(two.head_stored_bytes, one.head_stored_bytes);
      EXPECT_DOUBLE_EQ(two.layer_params, one.layer_params);
      EXPECT_DOUBLE_EQ(two.embed_params, one.embed_params);
      EXPECT_DOUBLE_EQ(two.head_params, one.head_params);
      EXPECT_DOUBLE_EQ(two.model_flops_per_step, one.model_flops_per_step);
    }
  }
}

TEST(Cost2d, SmallerSummaGemmsAreLessEfficient) {
  // On a GPU whose efficiency grows with GEMM size, the q sequential GEMMs of 1/q^3 the FLOPs each run slower
  // per FLOP than one 1D GEMM of the same total FLOPs (q^2 = tp = 4 ranks both ways: 1D tp=4 column-parallel).
  json cl = ideal_cluster();
  cl["gpu"]["matrix_efficiency"] = json::array({json::array({1e6, 0.2}), json::array({1e12, 0.9})});
  Scenario sc = make_scenario(gpt_model(4, 1024, 16, 1024, 512), cl, 8, plan_json(2, 4, 1, 1, "1f1b", "none", false, 0, 4));
  CostModel one = cost_1d(sc);
  CostModel two = cost_2d(sc, 2);
  auto op = [](const PassCost& pc, const std::string& name) {
    for (const Op& o : pc.ops)
      if (o.name == name) return o;
    return Op{};
  };
  Op a = op(one.layer_fwd, "fc1"), b = op(two.layer_fwd, "fc1");
  EXPECT_DOUBLE_EQ(a.flops, b.flops);
  EXPECT_GT(b.time_s, a.time_s);
}

TEST(CollectiveRooted, BroadcastAndReduceArePipelinedChains) {
  Scenario sc = make_scenario(gpt_model(2, 256, 4, 256, 128), finite_nvswitch_cluster(), 8, plan_json(8, 1, 1, 1, "1f1b"));
  const Cluster& cl = sc.cluster;
  Topology topo = build_topology(cl, 32);
  const double S = 1e8;
  std::vector<int> node0 = {0, 1, 2, 3};
  auto bc = collective_phases(Coll::broadcast, node0, S, topo, cl);
  ASSERT_EQ(bc.size(), 1u);
  ASSERT_EQ(bc[0].flows.size(), 3u);
  EXPECT_EQ(bc[0].steps, 3);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(bc[0].flows[i].src, node0[i]);
    EXPECT_EQ(bc[0].flows[i].dst, node0[i + 1]);
    EXPECT_DOUBLE_EQ(bc[0].flows[i].payload, S);
  }
  EXPECT_DOUBLE_EQ(bc[0].latency_s, 3 * topo.latency_s(0, 1));
  auto rd = collective_phases(Coll::reduce, node0, S, topo, cl);
  ASSERT_EQ(rd.size(), 1u);
  ASSERT_EQ(rd[0].flows.size(), 3u);
  for (int i = 0; i < 3; ++i) {  // the chain ends at the root, member 0
    EXPECT_EQ(rd[0].flows[i].src, node0[i + 1]);
    EXPECT_EQ(rd[0].flows[i].dst, node0[i]);
  }
  EXPECT_EQ(std::string(coll_name(Coll::broadcast)), "broadcast");
  EXPECT_EQ(std::string(coll_name(Coll::reduce)), "reduce");
  EXPECT_TRUE(collective_phases(Coll::broadcast, {5}, S, topo, cl).empty());

  // Isolated time: one S transfer on the NVSwitch (each link carries one flow) plus g-1 hop latencies.
  double bw = cl.intra.bandwidth_bytes_per_s;
  EXPECT_NEAR(collective_time_isolated_s(Coll::broadcast, node0, S, topo, cl) / (S / bw + 3 * topo.latency_s(0, 1)),
              1.0, 1e-9);

  // Per-member volume: (g-1)/g*S, split by the ring edges' tiers.
  for (Coll c : {Coll::broadcast, Coll::reduce}) {
    TierBytes in = collective_member_bytes(c, node0, S, topo);
    EXPECT_DOUBLE_EQ(in.intra, 3.0 / 4 * S);
    EXPECT_EQ(in.inter, 0);
    TierBytes across = collective_member_bytes(c, {0, 8, 16, 24}, S, topo);
    EXPECT_EQ(across.intra, 0);
    EXPECT_DOUBLE_EQ(across.inter, 3.0 / 4 * S);
    TierBytes mixed = collective_member_bytes(c, {0, 1, 8, 9}, S, topo);  // edges 0-1, 8-9 intra; 1-8, 9-0 inter
    EXPECT_DOUBLE_EQ(mixed.intra, 3.0 / 8 * S);
    EXPECT_DOUBLE_EQ(mixed.inter, 3.0 / 8 * S);
  }
}
