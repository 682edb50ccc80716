// test_gpt_layout: the typed parameter table of the GPT layouts (ModelParams): every role resolves to the view
// of its name, each view's shape (rows x cols) covers its elements, roles the model lacks are -1, and the 1D
// and 2D layouts agree on the roles.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "exec/model/gpt.hpp"
#include "exec/model/gpt2d.hpp"

using namespace tp::exec;

namespace {

GptShape shape(bool gelu, int tp = 1, int rank = 0) {
  GptShape s;
  s.layers = 3;
  s.C = 8;
  s.H = 4;
  s.Hkv = 2;
  s.D = 2;
  s.F = 16;
  s.V = 12;
  s.maxT = 5;
  s.gelu = gelu;
  s.tp = tp;
  s.tp_rank = rank;
  return s;
}

template <class Lay>
void expect_roles_match_names(const Lay& L, bool gelu) {
  const ModelParams& m = L.params;
  auto is = [&](int view, const std::string& name) {
    if (view < 0) return false;
    const ParamView& v = L.views[view];
    EXPECT_EQ(v.rows * v.cols, v.count) << name;
    return v.name == name;
  };
  EXPECT_TRUE(is(m.wte, "wte"));
  EXPECT_TRUE(is(m.lnf_w, "lnf_w"));
  EXPECT_EQ(m.wpe >= 0, gelu);
  EXPECT_EQ(m.lnf_b >= 0, gelu);
  ASSERT_EQ((long long)m.layers.size(), L.s.layers);
  for (int l = 0; l < (int)m.layers.size(); ++l) {
    char pre[16];
    std::snprintf(pre, sizeof pre, "L%02d.", l);
    const std::string P = pre;
    const LayerParams& W = m.layers[l];
    EXPECT_TRUE(is(W.ln1_w, P + "ln1_w"));
    EXPECT_TRUE(is(W.qkv_w, P + "qkv_w"));
    EXPECT_TRUE(is(W.proj_w, P + "proj_w"));
    EXPECT_TRUE(is(W.ln2_w, P + "ln2_w"));
    EXPECT_TRUE(is(W.fc1_w, P + "fc1_w"));
    EXPECT_TRUE(is(W.fc2_w, P + "fc2_w"));
    for (int b : {W.ln1_b, W.qkv_b, W.proj_b, W.ln2_b, W.fc1_b, W.fc2_b}) {
      EXPECT_EQ(b >= 0, gelu) << P;
      if (b >= 0) {
        EXPECT_EQ(L.views[b].rows, 1) << P;
      }
    }
  }
}

}  // namespace

TEST(GptLayout, TypedParametersResolveTheNamedViews) {
  for (bool gelu : {true, false}) {
    expect_roles_match_names(gpt_layout(shape(gelu)), gelu);
    expect_roles_match_names(gpt_layout(shape(gelu, 2, 1)), gelu);
    expect_roles_match_names(gpt2d_layout(shape(gelu), 2, 3), gelu);
  }
}

TEST(GptLayout, ShapesOfOneTensorParallelRank) {
  const GptShape s = shape(false, 2, 1);
  const GptLayout L = gpt_layout(s);
  const LayerParams& W = L.params.layers[1];
  EXPECT_EQ(L.views[W.qkv_w].rows, s.C);
  EXPECT_EQ(L.views[W.qkv_w].cols, s.qkv_cols());
  EXPECT_EQ(L.views[W.proj_w].rows, s.h_loc() * s.D);
  EXPECT_EQ(L.views[W.fc1_w].cols, 2 * s.f_loc());  // SwiGLU: gate | up
  EXPECT_EQ(L.views[W.fc2_w].rows, s.f_loc());
  EXPECT_EQ(L.views[L.params.wte].rows, s.v_loc());
  const Gpt2dLayout L2 = gpt2d_layout(shape(true), 2, 1);
  EXPECT_EQ(L2.views[L2.params.wte].rows, L2.v_blk());
  EXPECT_EQ(L2.views[L2.params.wte].cols, L2.c_loc());
  EXPECT_EQ(L2.views[L2.params.layers[0].qkv_w].cols, L2.qkv_cols());
}

// 2D with a vocabulary the grid side does not divide: vocab 7 over q 2 is blocks of 4 and 3 rows, each stored
// as 4 rows (the second with one zero padding row): rank (r, c)'s wte row i is full row v_begin(r) + i, hidden
// columns [c C/2, ..).
TEST(GptLayout, TwoDimensionalVocabularyBlocksThatQDoesNotDivide) {
  GptShape s = shape(true);
  s.V = 7;
  const GptLayout full = gpt_layout(s);
  std::vector<double> w(full.total);
  for (size_t i = 0; i < w.size(); ++i) w[i] = 1.0 + (double)i;
  const ParamView& fw = full.view("wte");
  for (int k = 0; k < 4; ++k) {
    const Gpt2dLayout L = gpt2d_layout(s, 2, k);
    EXPECT_EQ(L.v_blk(), 4);
    EXPECT_EQ(L.v_begin(1), 4);
    EXPECT_EQ(L.v_len(0), 4);
    EXPECT_EQ(L.v_len(1), 3);
    const std::vector<double> mine = shard_params_2d<double>(full, w, L);
    const ParamView& v = L.views[L.params.wte];
    ASSERT_EQ(v.rows, 4);
    const long long Cl = L.c_loc();
    for (long long i = 0; i < v.rows; ++i)
      for (long long j = 0; j < Cl; ++j) {
        const double want = i < L.v_len(L.row) ? w[fw.offset + (L.v_begin(L.row) + i) * s.C + L.col * Cl + j] : 0.0;
        EXPECT_EQ(mine[v.offset + i * Cl + j], want) << "rank " << k << " row " << i << " col " << j;
      }
  }
  s.V = 1;  // fewer rows than the grid side
  EXPECT_THROW(gpt2d_layout(s, 2, 0), std::invalid_argument);
}
