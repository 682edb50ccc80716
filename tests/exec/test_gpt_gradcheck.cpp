// test_gpt_gradcheck: the single-rank model's backward (Gpt<double>: embedding, every block, head and loss) is
// the gradient of its forward, checked against central finite differences in float64 for every parameter
// tensor of several architectures: GPT-2 style (GELU, all biases, learned positions), SwiGLU without biases,
// and SwiGLU with the Qwen2 / Llama bias flags, grouped-query attention and a head_dim other than hidden /
// heads. The parallel plans are checked against this single-rank model by the oracle tests
// (test_run_oracle.cpp); this test is what makes the single-rank model itself trustworthy.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "exec/model/gpt.hpp"

using namespace tp::exec;

namespace {

struct Arch {
  const char* name;
  bool gelu, qkv_bias, proj_bias, mlp_bias;
  long long C, H, Hkv, D, F;
};

GptShape shape_of(const Arch& a) {
  GptShape s;
  s.layers = 2;
  s.C = a.C;
  s.H = a.H;
  s.Hkv = a.Hkv;
  s.D = a.D;
  s.F = a.F;
  s.V = 11;
  s.maxT = 5;
  s.gelu = a.gelu;
  s.qkv_bias = a.qkv_bias;
  s.proj_bias = a.proj_bias;
  s.mlp_bias = a.mlp_bias;
  return s;
}

constexpr long kB = 2, kT = 5;

// Forward (and, with grads, backward) of the whole model on fixed tokens: returns the mean loss.
double loss_and_grads(Gpt<double>& m, const std::vector<int32_t>& tok, const std::vector<int32_t>& tgt, bool bwd) {
  const long N = kB * kT, C = (long)m.lay.s.C;
  const int L = (int)m.lay.s.layers;
  std::vector<Buf<double>> xs(L + 1);
  for (auto& x : xs) x.resize(N * C);
  std::vector<LayerActs<double>> acts(L);
  HeadActs<double> ha;
  m.embed_fwd(xs[0].data(), tok.data(), kB, kT);
  for (int l = 0; l < L; ++l) m.layer_fwd(l, xs[l].data(), xs[l + 1].data(), acts[l], kB, kT);
  const double loss = m.head_fwd(xs[L].data(), tgt.data(), ha, kB, kT) / (double)N;
  if (!bwd) return loss;
  Buf<double> dx(N * C);
  m.head_bwd(dx.data(), tgt.data(), ha, kB, kT, 1.0 / (double)N);
  for (int l = L - 1; l >= 0; --l) m.layer_bwd(l, dx.data(), dx.data(), acts[l], kB, kT);
  m.embed_bwd(dx.data(), tok.data(), kB, kT);
  return loss;
}

void check_arch(const Arch& a) {
  GptShape s = shape_of(a);
  GptLayout lay = gpt_layout(s);
  std::vector<double> params = init_full_params<double>(s, 7);
  // Perturb everything (biases and norm weights start at 0 and 1, where a wrong term can hide).
  uint64_t z = 12345;
  for (double& v : params) {
    z = z * 6364136223846793005ull + 1442695040888963407ull;
    v += 0.3 * ((double)(z >> 11) / 9007199254740992.0 - 0.5);
  }
  std::vector<double> grads(lay.total, 0.0);
  Gpt<double> m;
  m.lay = lay;
  m.params = params.data();
  m.grads = grads.data();
  std::vector<int32_t> tok(kB * kT), tgt(kB * kT);
  for (long i = 0; i < kB * kT; ++i) {
    tok[i] = (int32_t)((i * 7 + 3) % s.V);
    tgt[i] = (int32_t)((i * 5 + 1) % s.V);
  }
  loss_and_grads(m, tok, tgt, true);
  const double h = 1e-6;
  int checked = 0;
  for (const ParamView& v : lay.views) {
    for (long long k : {0LL, v.count / 2, v.count - 1}) {
      double& w = params[v.offset + k];
      const double w0 = w;
      w = w0 + h;
      const double lp = loss_and_grads(m, tok, tgt, false);
      w = w0 - h;
      const double lm = loss_and_grads(m, tok, tgt, false);
      w = w0;
      const double fd = (lp - lm) / (2 * h), an = grads[v.offset + k];
      EXPECT_NEAR(an, fd, 1e-7 + 1e-5 * std::abs(fd)) << a.name << " " << v.name << "[" << k << "]";
      ++checked;
    }
  }
  EXPECT_GT(checked, 20) << a.name;
}

}  // namespace

TEST(GptGradCheck, Gpt2StyleGelu) { check_arch({"gelu", true, false, false, false, 8, 4, 4, 2, 16}); }

TEST(GptGradCheck, SwigluNoBias) { check_arch({"swiglu", false, false, false, false, 8, 4, 2, 2, 12}); }

// Qwen2-style q, k, v biases, GQA, and head_dim 3 with 4 heads over hidden 8 (query width 12 != hidden).
TEST(GptGradCheck, SwigluQkvBiasGqaHeadDim) { check_arch({"qwen2", false, true, false, false, 8, 4, 2, 3, 12}); }

// Every SwiGLU bias (Llama attention_bias + mlp_bias) with a head_dim wider than hidden / heads.
TEST(GptGradCheck, SwigluAllBiasesWideHeads) { check_arch({"llama_bias", false, true, true, true, 8, 2, 1, 6, 12}); }

// The layout has exactly the biases the flags name.
TEST(GptGradCheck, LayoutHasTheFlaggedBiases) {
  GptLayout q = gpt_layout(shape_of({"q", false, true, false, false, 8, 4, 2, 3, 12}));
  EXPECT_GE(q.params.layers[0].qkv_b, 0);
  EXPECT_EQ(q.params.layers[0].proj_b, -1);
  EXPECT_EQ(q.params.layers[0].fc1_b, -1);
  EXPECT_EQ(q.params.layers[0].fc2_b, -1);
  EXPECT_EQ(q.views[q.params.layers[0].qkv_w].cols, (4 + 2 * 2) * 3);  // [C, (H + 2 Hkv) D]
  EXPECT_EQ(q.views[q.params.layers[0].proj_w].rows, 4 * 3);           // [H D, C]
  GptLayout m = gpt_layout(shape_of({"m", false, false, false, true, 8, 4, 2, 2, 12}));
  EXPECT_EQ(m.params.layers[1].qkv_b, -1);
  EXPECT_GE(m.params.layers[1].fc1_b, 0);
  EXPECT_EQ(m.views[m.params.layers[1].fc1_b].count, 2 * 12);  // gate and up halves
  EXPECT_GE(m.params.layers[1].fc2_b, 0);
}
