// The kernels (double storage, on the emulator) against the CPU backend's own ops (exec/backends/ops.hpp, double):
// the same contracts, to rounding, on one odd shape. Guards against the kernels' tests and the kernels sharing
// a misreading of ops.hpp (accumulate vs overwrite, eps, the loss sum, null bias / wpe). Whole project only
// (links tp_exec).
#include <algorithm>
#include <limits>
#include <numeric>

#include "exec/backends/ops.hpp"
#include "tests/kernels/kt_util.hpp"

namespace {
namespace K = tp::kernels;
namespace ops = tp::ops;
using kt::Vec;

const K::emu::Launcher kL{64, 3};
constexpr long N = 5, C = 77;

::testing::AssertionResult same(const Vec& a, const Vec& b) { return kt::near<double>(a, b, 10); }

TEST(KernelsVsCpu, ElementwiseAndGelu) {
  std::mt19937_64 rng(31);
  const Vec x = kt::randv(N * C, rng, -3, 3), y = kt::randv(N * C, rng), b = kt::randv(C, rng);
  Vec k1(N * C), c1(N * C), k2 = y, c2 = y;
  K::add_bias(kL, k1.data(), x.data(), b.data(), N, C);
  ops::add_bias(c1.data(), x.data(), b.data(), N, C);
  EXPECT_TRUE(same(k1, c1));
  K::gelu_fwd(kL, k1.data(), x.data(), N * C);
  ops::gelu_fwd(c1.data(), x.data(), N * C);
  EXPECT_TRUE(same(k1, c1));
  K::gelu_bwd(kL, k2.data(), x.data(), y.data(), N * C);
  ops::gelu_bwd(c2.data(), x.data(), y.data(), N * C);
  EXPECT_TRUE(same(k2, c2));
  Vec kb = b, cb = b;
  Vec scr(size_t(K::column_sums_scratch(N, C)) + 1);
  K::bias_bwd(kL, kb.data(), y.data(), N, C, scr.data());
  ops::bias_bwd(cb.data(), y.data(), N, C);
  EXPECT_TRUE(same(kb, cb));
  std::vector<double> out(1), scratch(kL.max_grid);
  K::sum_squares(kL, out.data(), scratch.data(), x.data(), N * C);
  EXPECT_NEAR(out[0], ops::sum_squares(x.data(), N * C), 1e-10);
}

TEST(KernelsVsCpu, SwigluAndAdamW) {
  std::mt19937_64 rng(32);
  const Vec gu = kt::randv(N * 2 * C, rng, -3, 3), dy = kt::randv(N * C, rng);
  Vec ky(N * C), cy(N * C), kd = kt::randv(N * 2 * C, rng), cd = kd;
  K::swiglu_fwd(kL, ky.data(), gu.data(), N, C);
  ops::swiglu_fwd(cy.data(), gu.data(), N, C);
  EXPECT_TRUE(same(ky, cy));
  K::swiglu_bwd(kL, kd.data(), gu.data(), dy.data(), N, C);
  ops::swiglu_bwd(cd.data(), gu.data(), dy.data(), N, C);
  EXPECT_TRUE(same(kd, cd));
  Vec kp = kt::randv(N * C, rng), cp = kp, km(N * C, 0.1), cm = km, kv(N * C, 0.2), cv = kv;
  K::adamw(kL, kp.data(), dy.data(), km.data(), kv.data(), (double*)nullptr, N * C, 1e-3, 0.9, 0.95, 1e-8, 0.1, 7, 0.6);
  ops::adamw(cp.data(), dy.data(), cm.data(), cv.data(), N * C, 1e-3, 0.9, 0.95, 1e-8, 0.1, 7, 0.6);
  EXPECT_TRUE(same(kp, cp));
  EXPECT_TRUE(same(km, cm));
  EXPECT_TRUE(same(kv, cv));
}

TEST(KernelsVsCpu, LayerNorm) {
  std::mt19937_64 rng(33);
  const Vec x = kt::randv(N * C, rng, -2, 3), w = kt::randv(C, rng), b = kt::randv(C, rng), dy = kt::randv(N * C, rng);
  for (const double* bias : {b.data(), (const double*)nullptr}) {
    Vec ky(N * C), cy(N * C), km(N), cm(N), ks(N), cs(N);
    K::layernorm_fwd(kL, ky.data(), km.data(), ks.data(), x.data(), w.data(), bias, N, C, 1e-5);
    ops::layernorm_fwd(cy.data(), cm.data(), cs.data(), x.data(), w.data(), bias, N, C, 1e-5);
    EXPECT_TRUE(same(ky, cy));
    EXPECT_TRUE(same(km, cm));
    EXPECT_TRUE(same(ks, cs));
    Vec kdx = kt::randv(N * C, rng), cdx = kdx, kdw = kt::randv(C, rng), cdw = kdw, kdb = kt::randv(C, rng), cdb = kdb;
    K::layernorm_bwd_dx(kL, kdx.data(), dy.data(), x.data(), w.data(), km.data(), ks.data(), N, C);
    Vec scr(size_t(K::column_sums_scratch(N, C)) + 1);
    K::layernorm_bwd_wb(kL, kdw.data(), bias ? kdb.data() : nullptr, dy.data(), x.data(), km.data(), ks.data(), N, C,
                        scr.data());
    ops::layernorm_bwd(cdx.data(), cdw.data(), bias ? cdb.data() : nullptr, dy.data(), x.data(), w.data(), cm.data(),
                       cs.data(), N, C);
    EXPECT_TRUE(same(kdx, cdx));
    EXPECT_TRUE(same(kdw, cdw));
    EXPECT_TRUE(same(kdb, cdb));
  }
}

TEST(KernelsVsCpu, CrossEntropyAndEmbedding) {
  std::mt19937_64 rng(34);
  const long V = 61, B = 2, Tn = 3;
  const Vec lg = kt::randv(N * V, rng, -4, 4);
  std::vector<int32_t> tg(N);
  for (auto& t : tg) t = int32_t(rng() % V);
  Vec kp(N * V), cp(N * V), kloss(N);
  K::cross_entropy_fwd(kL, kp.data(), kloss.data(), lg.data(), tg.data(), N, V);
  const double closs = ops::cross_entropy_fwd(cp.data(), lg.data(), tg.data(), N, V);
  EXPECT_TRUE(same(kp, cp));
  EXPECT_NEAR(std::accumulate(kloss.begin(), kloss.end(), 0.0), closs, 1e-10);
  Vec kd = kt::randv(N * V, rng), cd = kd;
  K::cross_entropy_bwd<false>(kL, kd.data(), kp.data(), tg.data(), N, V, 0, 0.25);
  ops::cross_entropy_bwd(cd.data(), cp.data(), tg.data(), N, V, 0.25);
  EXPECT_TRUE(same(kd, cd));
  std::vector<int32_t> tok(B * Tn);
  for (auto& t : tok) t = int32_t(rng() % 7);
  tok[1] = tok[4];
  const Vec wte = kt::randv(7 * C, rng), wpe = kt::randv(Tn * C, rng), dout = kt::randv(B * Tn * C, rng);
  for (const double* pe : {wpe.data(), (const double*)nullptr}) {
    Vec ko(B * Tn * C), co(B * Tn * C);
    K::embedding_fwd(kL, ko.data(), tok.data(), wte.data(), pe, B, Tn, C, 0, 7);
    ops::embedding_fwd(co.data(), tok.data(), wte.data(), pe, B, Tn, C);
    EXPECT_TRUE(same(ko, co));
    Vec kwte = kt::randv(7 * C, rng), cwte = kwte, kwpe = kt::randv(Tn * C, rng), cwpe = kwpe;
    std::vector<int32_t> scratch(K::embedding_bwd_scratch(B * Tn));
    K::embedding_bwd(kL, kwte.data(), pe ? kwpe.data() : nullptr, dout.data(), tok.data(), B, Tn, C, 0, 7, scratch.data());
    ops::embedding_bwd(cwte.data(), pe ? cwpe.data() : nullptr, dout.data(), tok.data(), B, Tn, C);
    EXPECT_TRUE(same(kwte, cwte));
    EXPECT_TRUE(same(kwpe, cwpe));
  }
}

// A wide row (V >= 64 x the launcher's block: one 1,024-thread block per row) through the online maximum and sum,
// with the maximum late in some rows and one logit -inf: the CPU's probabilities and loss.
TEST(KernelsVsCpu, CrossEntropyOverWideRows) {
  std::mt19937_64 rng(37);
  const long V = 5000, Nr = 3;
  Vec lg = kt::randv(Nr * V, rng, -4, 4);
  lg[1 * V + V - 1] = 9;  // the maximum in the last column
  lg[2 * V + 17] = -std::numeric_limits<double>::infinity();
  const std::vector<int32_t> tg = {0, int32_t(V - 1), 4321};
  Vec kp(Nr * V), cp(Nr * V), kloss(Nr);
  K::cross_entropy_fwd(kL, kp.data(), kloss.data(), lg.data(), tg.data(), Nr, V);
  const double closs = ops::cross_entropy_fwd(cp.data(), lg.data(), tg.data(), Nr, V);
  EXPECT_TRUE(same(kp, cp));
  EXPECT_NEAR(std::accumulate(kloss.begin(), kloss.end(), 0.0), closs, 1e-10);
}

// The embedding backward's row grouping over several blocks and shared tiles (1,400 rows, 9 token ids: chains of
// about 150 rows, the last id absent, the first row's id repeated at the end), float: the CPU's sums bit for bit, in
// row order, for the whole vocabulary and for a shard.
TEST(KernelsVsCpu, EmbeddingBackwardOverManyRowsIsTheCpuOrder) {
  std::mt19937_64 rng(36);
  const long B = 2, Tn = 700, N = B * Tn, V = 10, Cc = 5;
  std::vector<int32_t> tok(N);
  for (auto& t : tok) t = int32_t(rng() % (V - 1));
  tok[N - 1] = tok[0];
  const std::vector<float> dout = [&] { std::vector<float> d(N * Cc); for (float& x : d) x = float(kt::randv(1, rng)[0]); return d; }();
  for (auto [v0, Vl] : {std::pair<long, long>{0, V}, {3, 4}}) {
    std::vector<float> want(Vl * Cc, 0.5f), got = want;
    if (v0 == 0) ops::embedding_bwd(want.data(), (float*)nullptr, dout.data(), tok.data(), B, Tn, Cc);
    else ops::embedding_shard_bwd(want.data(), dout.data(), tok.data(), N, Cc, v0, Vl);
    std::vector<int32_t> scratch(K::embedding_bwd_scratch(N));
    for (unsigned block : {32u, 256u}) {
      std::vector<float> g = got;
      K::embedding_bwd(tp::kernels::emu::Launcher{block, 3}, g.data(), (float*)nullptr, dout.data(), tok.data(), 1, N, Cc, v0,
                       Vl, scratch.data());
      EXPECT_EQ(g, want) << "shard " << v0 << ", block " << block;
    }
  }
}

// The whole mixture-of-experts chain, with drops and renormalisation: the router's probabilities, gates and slots
// are the CPU's bit for bit (same order of operations); the rest to rounding.
TEST(KernelsVsCpu, MixtureOfExperts) {
  std::mt19937_64 rng(35);
  const long Nt = 23, E = 5, k = 2, cap = 7, rows = E * cap;  // 46 copies, 35 slots
  for (int renorm : {0, 1}) {
    const Vec lg = kt::randv(Nt * E, rng, -2, 2), x = kt::randv(Nt * C, rng), dy = kt::randv(Nt * C, rng);
    Vec kp(Nt * E), cp(Nt * E), kg(Nt * k), cg(Nt * k);
    std::vector<int32_t> ks(Nt * k), cs(Nt * k), choice(Nt * k);
    std::vector<double> stats(2 * E + 1), base(E);
    K::moe_route(kL, kp.data(), ks.data(), kg.data(), choice.data(), stats.data(), lg.data(), Nt, E, k, cap, renorm);
    const double caux = ops::moe_route(cp.data(), cs.data(), cg.data(), lg.data(), Nt, E, k, cap, renorm);
    EXPECT_EQ(kp, cp);
    EXPECT_EQ(kg, cg);
    EXPECT_EQ(ks, cs);
    EXPECT_NEAR(stats[2 * E], caux, 1e-14 * caux);  // the CPU ops are built with -march=native (FMA contractions)
    EXPECT_LT(std::count_if(cs.begin(), cs.end(), [](int32_t v) { return v >= 0; }), Nt * k);  // some dropped
    Vec kd(rows * C), cd(rows * C), ky(Nt * C), cy(Nt * C);
    K::moe_dispatch(kL, kd.data(), x.data(), ks.data(), Nt, k, C, rows);
    ops::moe_dispatch(cd.data(), x.data(), cs.data(), Nt, k, C, rows);
    EXPECT_EQ(kd, cd);
    K::moe_combine(kL, ky.data(), kd.data(), ks.data(), kg.data(), Nt, k, C);
    ops::moe_combine(cy.data(), cd.data(), cs.data(), cg.data(), Nt, k, C);
    EXPECT_TRUE(same(ky, cy));
    Vec kde = kt::randv(rows * C, rng), cde = kde, kdg = kt::randv(Nt * k, rng), cdg = kdg;
    K::moe_combine_bwd(kL, kde.data(), kdg.data(), dy.data(), kd.data(), ks.data(), kg.data(), Nt, k, C);
    ops::moe_combine_bwd(cde.data(), cdg.data(), dy.data(), cd.data(), cs.data(), cg.data(), Nt, k, C);
    EXPECT_TRUE(same(kde, cde));
    EXPECT_TRUE(same(kdg, cdg));
    Vec kdx = kt::randv(Nt * C, rng), cdx = kdx, kdl = kt::randv(Nt * E, rng), cdl = kdl;
    K::moe_dispatch_bwd(kL, kdx.data(), kde.data(), ks.data(), Nt, k, C);
    ops::moe_dispatch_bwd(cdx.data(), cde.data(), cs.data(), Nt, k, C);
    EXPECT_TRUE(same(kdx, cdx));
    K::moe_route_bwd(kL, kdl.data(), base.data(), kp.data(), ks.data(), kdg.data(), Nt, E, k, cap, renorm, 0.01);
    ops::moe_route_bwd(cdl.data(), cp.data(), cs.data(), cdg.data(), Nt, E, k, cap, renorm, 0.01);
    EXPECT_TRUE(same(kdl, cdl));
  }
}

}  // namespace
