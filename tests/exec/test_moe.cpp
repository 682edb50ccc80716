// test_moe: the mixture-of-experts pieces of the executor (exec/model/moe.hpp, ops::moe_*): the router's top-k,
// capacity and dropping order and its load-balancing loss against hand-computed cases, dispatch / combine, and
// central finite differences in float64 of a whole MoE model (router, gates, experts, aux loss) for top-1 and
// top-2 routing with dropped copies.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "exec/model/gpt.hpp"
#include "exec/model/moe.hpp"
#include "exec/backends/ops.hpp"

using namespace tp::exec;

TEST(MoeRouter, CapacityRoundsUp) {
  EXPECT_EQ(moe_capacity(4, 2, 1, 1.0), 2);
  EXPECT_EQ(moe_capacity(3, 2, 2, 0.5), 2);    // 1.5 -> 2
  EXPECT_EQ(moe_capacity(64, 4, 2, 1.0), 32);  // exact: no rounding up
  EXPECT_EQ(moe_capacity(10, 3, 2, 0.75), 5);
}

// Top-1 over 2 experts, capacity 2: the third token choosing expert 0 is dropped; Switch aux loss by hand.
TEST(MoeRouter, Top1DropsBeyondCapacityAndAuxLoss) {
  const long N = 4, E = 2, k = 1, cap = moe_capacity(N, E, k, 1.0);
  std::vector<double> logits = {1, 0, 2, 0, 0.5, 0, 0, 1}, probs(N * E), gate(N * k);
  std::vector<int32_t> slot(N * k);
  double aux = tp::ops::moe_route(probs.data(), slot.data(), gate.data(), logits.data(), N, E, k, cap, 0);
  EXPECT_EQ(slot, (std::vector<int32_t>{0, 1, -1, 2}));  // e0 pos 0, e0 pos 1, dropped (e0 full), e1 pos 0
  auto p0 = [](double d) { return std::exp(d) / (std::exp(d) + 1.0); };  // softmax of [d, 0]
  const double P0 = (p0(1) + p0(2) + p0(0.5) + p0(-1)) / 4, P1 = 1 - P0;
  EXPECT_NEAR(aux, 2 * (0.75 * P0 + 0.25 * P1), 1e-15);  // E sum f_e P_e, f counted before dropping
  EXPECT_NEAR(gate[0], p0(1), 1e-15);                      // k = 1: the raw probability
  EXPECT_NEAR(gate[3], 1 - p0(-1), 1e-15);
  EXPECT_NEAR(probs[2 * 2 + 0], p0(0.5), 1e-15);
}

// Top-2: all first choices take their slots before any second choice (GShard priority); gates renormalised.
TEST(MoeRouter, Top2FirstChoicesFirstAndRenormalised) {
  const long N = 3, E = 2, k = 2, cap = moe_capacity(N, E, k, 0.5);
  ASSERT_EQ(cap, 2);
  std::vector<double> logits = {2, 1, 3, 0, 0, 1}, probs(N * E), gate(N * k);
  std::vector<int32_t> slot(N * k);
  tp::ops::moe_route(probs.data(), slot.data(), gate.data(), logits.data(), N, E, k, cap, 1);
  // tok0: e0 (pos 0), then e1 (pos 1); tok1: e0 (pos 1), e1 full; tok2: e1 (pos 0), e0 full.
  EXPECT_EQ(slot, (std::vector<int32_t>{0, 3, 1, -2, 2, -1}));
  for (long i = 0; i < N; ++i) EXPECT_NEAR(gate[i * 2] + gate[i * 2 + 1], 1.0, 1e-15);
  // Balanced choices (each expert chosen 3 of 6 times): aux = E * sum (1/2) P_e = 1 whatever the probabilities.
  EXPECT_NEAR(tp::ops::moe_route(probs.data(), slot.data(), gate.data(), logits.data(), N, E, k, cap, 1), 1.0, 1e-15);
}

TEST(MoeRouter, DispatchCombineRoundTrip) {
  const long N = 3, k = 2, C = 2, rows = 6;
  std::vector<int32_t> slot = {0, 3, 1, -2, 2, -1};
  std::vector<double> x = {1, 2, 3, 4, 5, 6}, gate = {0.25, 0.75, 0.5, 0.5, 1, 0}, buf(rows * C), y(N * C);
  tp::ops::moe_dispatch(buf.data(), x.data(), slot.data(), N, k, C, rows);
  EXPECT_EQ(buf, (std::vector<double>{1, 2, 3, 4, 5, 6, 1, 2, 0, 0, 0, 0}));
  tp::ops::moe_combine(y.data(), buf.data(), slot.data(), gate.data(), N, k, C);
  EXPECT_EQ(y, (std::vector<double>{1, 2, 1.5, 2, 5, 6}));  // kept gates' sum times the token
  std::vector<double> dx(N * C, 0.0);
  tp::ops::moe_dispatch_bwd(dx.data(), buf.data(), slot.data(), N, k, C);
  EXPECT_EQ(dx, (std::vector<double>{2, 4, 3, 4, 5, 6}));  // token 0 has two kept copies
}

namespace {

constexpr long kB = 2, kT = 5;

// Mean cross-entropy + aux weight x the layers' load-balancing losses (the objective moe_mlp_bwd differentiates).
double objective(Gpt<double>& m, const std::vector<int32_t>& tok, const std::vector<int32_t>& tgt, bool bwd) {
  const long N = kB * kT, C = (long)m.lay.s.C;
  const int L = (int)m.lay.s.layers;
  std::vector<Buf<double>> xs(L + 1);
  for (auto& x : xs) x.resize(N * C);
  std::vector<LayerActs<double>> acts(L);
  HeadActs<double> ha;
  m.moe_aux_sum = 0;
  m.embed_fwd(xs[0].data(), tok.data(), kB, kT);
  for (int l = 0; l < L; ++l) m.layer_fwd(l, xs[l].data(), xs[l + 1].data(), acts[l], kB, kT);
  const double loss = m.head_fwd(xs[L].data(), tgt.data(), ha, kB, kT) / (double)N + m.moe_aux_weight * m.moe_aux_sum;
  if (!bwd) return loss;
  Buf<double> dx(N * C);
  m.head_bwd(dx.data(), tgt.data(), ha, kB, kT, 1.0 / (double)N);
  for (int l = L - 1; l >= 0; --l) m.layer_bwd(l, dx.data(), dx.data(), acts[l], kB, kT);
  m.embed_bwd(dx.data(), tok.data(), kB, kT);
  return loss;
}

void gradcheck(bool gelu, bool mlp_bias, long long top_k, double cf, long long every, long long Fs = 0) {
  GptShape s;
  s.layers = 2; s.C = 8; s.H = 2; s.Hkv = 2; s.D = 4; s.F = 12; s.V = 11; s.maxT = kT;
  s.gelu = gelu; s.mlp_bias = mlp_bias;
  s.experts = 3; s.top_k = top_k; s.Fe = 6; s.moe_every = every; s.capacity_factor = cf; s.Fs = Fs;
  GptLayout lay = gpt_layout(s);
  std::vector<double> params = init_full_params<double>(s, 11);
  uint64_t z = 777;
  for (double& v : params) {  // large perturbations: a router far from uniform, so copies are dropped
    z = z * 6364136223846793005ull + 1442695040888963407ull;
    v += 0.6 * ((double)(z >> 11) / 9007199254740992.0 - 0.5);
  }
  std::vector<double> grads(lay.total, 0.0);
  Gpt<double> m;
  m.lay = lay;
  m.params = params.data();
  m.grads = grads.data();
  m.moe_aux_weight = 0.1;
  std::vector<int32_t> tok(kB * kT), tgt(kB * kT);
  for (long i = 0; i < kB * kT; ++i) { tok[i] = (int32_t)((i * 7 + 3) % s.V); tgt[i] = (int32_t)((i * 5 + 1) % s.V); }
  objective(m, tok, tgt, true);
  const double h = 1e-6;
  int checked = 0, moe_views = 0;
  for (const ParamView& v : lay.views) {
    const bool moe = v.name.find("router") != std::string::npos || v.name.find("ex_") != std::string::npos ||
                     v.name.find("sh_") != std::string::npos;
    moe_views += moe;
    std::vector<long long> at = {0, v.count / 2, v.count - 1};
    if (moe) for (long long i = 1; i < v.count; i += std::max(1LL, v.count / 7)) at.push_back(i);
    for (long long k : at) {
      double& w = params[v.offset + k];
      const double w0 = w;
      w = w0 + h;
      const double lp = objective(m, tok, tgt, false);
      w = w0 - h;
      const double lm = objective(m, tok, tgt, false);
      w = w0;
      const double fd = (lp - lm) / (2 * h), an = grads[v.offset + k];
      EXPECT_NEAR(an, fd, 1e-7 + 1e-5 * std::abs(fd)) << v.name << "[" << k << "]";
      ++checked;
    }
  }
  EXPECT_GE(moe_views, (mlp_bias || gelu ? 5 : 3) + (Fs > 0 ? (mlp_bias || gelu ? 4 : 2) : 0));
  EXPECT_GT(checked, 40);
}

}  // namespace

TEST(MoeGradCheck, Top1GeluEveryLayer) { gradcheck(true, true, 1, 1.0, 1); }
TEST(MoeGradCheck, Top2SwigluBiasesDropping) { gradcheck(false, true, 2, 0.75, 1); }
TEST(MoeGradCheck, Top2SwigluSecondLayerOnly) { gradcheck(false, false, 2, 1.0, 2); }
// Shared experts (sh_fc*): a dense MLP beside the routed experts, its gradients through the same objective.
TEST(MoeGradCheck, SharedExpertsGelu) { gradcheck(true, true, 2, 1.0, 1, 4); }
TEST(MoeGradCheck, SharedExpertsSwiglu) { gradcheck(false, false, 1, 1.0, 2, 4); }

// Experts sharded over ep: ep rank r's layout holds experts [r E/ep, (r+1) E/ep) only (the layer's last views,
// after the router and the shared experts), and shard_params copies exactly those full experts' weights.
TEST(MoeGradCheck, ExpertsShardedOverEp) {
  GptShape s;
  s.layers = 2; s.C = 8; s.H = 2; s.Hkv = 2; s.D = 4; s.F = 12; s.V = 11; s.maxT = 5; s.gelu = true;
  s.experts = 4; s.top_k = 2; s.Fe = 6; s.moe_every = 2; s.Fs = 4;
  GptLayout full = gpt_layout(s);
  std::vector<double> fp = init_full_params<double>(s, 5);
  for (int r = 0; r < 2; ++r) {
    GptShape sr = s;
    sr.ep = 2; sr.ep_rank = r;
    GptLayout lay = gpt_layout(sr);
    std::vector<double> mine = shard_params<double>(full, fp, lay);
    const LayerParams& W = lay.params.layers[1];
    EXPECT_EQ(lay.total, full.total - (6 * 8 + 6 + 6 * 8 + 8) * 2);  // two experts less
    EXPECT_EQ(lay.expert_begin[1], lay.views[W.ex_w1].offset);      // the experts close the layer
    EXPECT_EQ(lay.expert_begin[0], lay.layer_end[0]);               // a dense layer has none
    EXPECT_LT(lay.views[W.sh_w2].offset, lay.expert_begin[1]);
    for (const char* n : {"L01.ex_w1", "L01.ex_b1", "L01.ex_w2", "L01.ex_b2"}) {
      const ParamView &v = lay.view(n), &fv = full.view(n);
      ASSERT_EQ(v.count * 2, fv.count) << n;
      for (long long i = 0; i < v.count; ++i)
        ASSERT_EQ(mine[v.offset + i], fp[fv.offset + r * v.count + i]) << n << " rank " << r << " [" << i << "]";
    }
    EXPECT_EQ(mine[lay.view("L01.router_w").offset + 3], fp[full.view("L01.router_w").offset + 3]);
  }
}

// A MoE layer's views replace the dense MLP's: router and stacked experts, biases as the flags say.
TEST(MoeGradCheck, LayoutOfAMoeLayer) {
  GptShape s;
  s.layers = 2; s.C = 8; s.H = 2; s.Hkv = 2; s.D = 4; s.F = 12; s.V = 11; s.maxT = 5; s.gelu = false;
  s.experts = 4; s.top_k = 2; s.Fe = 6; s.moe_every = 2;
  GptLayout lay = gpt_layout(s);
  EXPECT_GE(lay.params.layers[0].fc1_w, 0);  // layer 0 dense
  EXPECT_EQ(lay.params.layers[0].router_w, -1);
  EXPECT_EQ(lay.params.layers[1].fc1_w, -1);  // layer 1 MoE
  EXPECT_EQ(lay.views[lay.params.layers[1].router_w].count, 8 * 4);
  EXPECT_EQ(lay.views[lay.params.layers[1].ex_w1].count, 4 * 8 * 2 * 6);  // E x [C, gate | up]
  EXPECT_EQ(lay.views[lay.params.layers[1].ex_w2].count, 4 * 6 * 8);
  EXPECT_EQ(lay.params.layers[1].ex_b1, -1);
}
