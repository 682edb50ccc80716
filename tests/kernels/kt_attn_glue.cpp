// The glue between a library's fused attention and exec/backends/ops.hpp's flash contract (exec/kernels/k_attn_glue.hpp) on
// the emulator: stats pairs from and to the log-sum-exp, the strided bf16 -> fp32 row unpacking (vector and
// element paths, columns outside untouched); the contract that makes the two attentions interchangeable — the flash
// backward given the pairs (lse, 1) of its own forward's (m, c) computes the same gradients; and the CUDA backend's
// choice of attention (exec/kernels/cuda/fused_attention.hpp) against a stand-in library that refuses some shapes.
#include <cmath>
#include <cstdio>

#include "exec/kernels/cuda/fused_attention.hpp"
#include "exec/kernels/k_attn_glue.hpp"
#include "tests/kernels/kt_util.hpp"

namespace {
namespace K = tp::kernels;
using kt::Buf;
using kt::Vec;

TEST(KernelAttnGlue, StatsPairsAndLogSumExp) {
  std::mt19937_64 rng(31);
  for (long n : {1L, 7L, 1000L}) {
    const Vec lse = kt::rounded<float>(kt::randv(size_t(n), rng, -5, 5));
    Buf<float> l(lse), st(Vec(size_t(2 * n), 9.0)), back(Vec(size_t(n), 9.0));
    const K::emu::Launcher L{64, 3};
    K::stats_from_lse(L, st.data(), l.data(), n);
    for (long i = 0; i < n; ++i) {
      EXPECT_EQ(st.v[size_t(2 * i)], float(lse[size_t(i)]));
      EXPECT_EQ(st.v[size_t(2 * i + 1)], 1.f);
    }
    K::lse_from_stats(L, back.data(), st.data(), n);
    EXPECT_EQ(back.dbl(), lse);
    // (m, c) pairs: m - log c.
    Vec pairs(size_t(2 * n));
    for (long i = 0; i < n; ++i) pairs[size_t(2 * i)] = lse[size_t(i)], pairs[size_t(2 * i + 1)] = 0.01 + 0.5 * double(i % 9);
    Buf<float> p(kt::rounded<float>(pairs));
    K::lse_from_stats(L, back.data(), p.data(), n);
    for (long i = 0; i < n; ++i)
      EXPECT_NEAR(back.v[size_t(i)], double(p.v[size_t(2 * i)]) - std::log(double(p.v[size_t(2 * i + 1)])), 1e-5);
  }
}

TEST(KernelAttnGlue, UnpackRowsWritesOnlyItsColumns) {
  std::mt19937_64 rng(32);
  struct Case {
    long rows, cols, ldx, ldy, xoff, yoff;
  };
  // Vector paths (cols, strides, bases multiples of 4) and element paths (odd cols, stride or base).
  for (const Case c : {Case{3, 8, 12, 16, 0, 0}, Case{5, 12, 20, 12, 4, 8}, Case{2, 7, 9, 11, 0, 0},
                       Case{4, 8, 12, 16, 1, 0}, Case{1, 1, 1, 1, 0, 3}, Case{33, 64, 192, 192, 64, 64}})
    for (const K::emu::Launcher L : {K::emu::Launcher{32, 1}, K::emu::Launcher{128, 3}}) {
      SCOPED_TRACE("rows " + std::to_string(c.rows) + " cols " + std::to_string(c.cols) + " ldx " +
                   std::to_string(c.ldx) + " ldy " + std::to_string(c.ldy) + " block " + std::to_string(L.block));
      const Vec x = kt::rounded<kt::bf16>(kt::randv(size_t(c.rows * c.ldx + c.xoff), rng, -3, 3));
      Buf<kt::bf16> xb(x);
      Buf<float> y(Vec(size_t(c.rows * c.ldy + c.yoff), 7.0));
      K::unpack_rows(L, y.data() + c.yoff, c.ldy, xb.data() + c.xoff, c.ldx, c.rows, c.cols);
      for (long i = 0; i < long(y.v.size()); ++i) {
        const long j = i - c.yoff, r = j / c.ldy, col = j % c.ldy;
        const bool in = j >= 0 && r < c.rows && col < c.cols;
        EXPECT_EQ(y.v[size_t(i)], in ? float(x[size_t(c.xoff + r * c.ldx + col)]) : 7.f) << "element " << i;
      }
    }
}

// The flash backward reads only m - log c of each stats pair: given (lse, 1) in place of its own forward's
// (max, 1 / sum) it gives the same gradients (to fp32 rounding), so either attention's backward can follow the
// other's forward. Both kernel paths: bf16 tensor cores (D 64) and the scalar kernels (D 40, fp32).
TEST(KernelAttnGlue, FlashBackwardTakesLogSumExpPairs) {
  std::mt19937_64 rng(33);
  struct D6 {
    long B, Tq, Tk, H, Hkv, D;
    bool b16;
  };
  const long H = kt::quick() ? 2 : 4;  // (the sanitizer builds: fewer heads)
  for (const D6 d : {D6{1, 37, 37, H, 2, 64, true}, D6{2, 9, 21, 2, 1, 40, false}}) {
    SCOPED_TRACE("D " + std::to_string(d.D) + (d.b16 ? " bf16" : " fp32"));
    const long nq = d.B * d.Tq * d.H * d.D, nk = d.B * d.Tk * d.Hkv * d.D, rows = d.B * d.H * d.Tq;
    const Vec q = kt::rounded<kt::bf16>(kt::randv(size_t(nq), rng)), k = kt::rounded<kt::bf16>(kt::randv(size_t(nk), rng)),
              v = kt::rounded<kt::bf16>(kt::randv(size_t(nk), rng)), dout = kt::rounded<float>(kt::randv(size_t(nq), rng));
    Buf<float> qb(q), kb(k), vb(v), ob{Vec(size_t(nq))}, sb{Vec(size_t(2 * rows))}, dob(dout);
    const K::emu::Launcher L{64, 2};
    K::flash_attention_fwd(L, ob.data(), sb.data(), qb.data(), kb.data(), vb.data(), d.B, d.Tq, d.Tk, d.H, d.Hkv, d.D,
                           d.H * d.D, d.Hkv * d.D, d.b16);
    Buf<float> lse{Vec(size_t(rows))}, pairs{Vec(size_t(2 * rows))};
    K::lse_from_stats(L, lse.data(), sb.data(), rows);
    K::stats_from_lse(L, pairs.data(), lse.data(), rows);
    Vec grads[2];
    for (int i = 0; i < 2; ++i) {
      Buf<float> dq{Vec(size_t(nq))}, dk{Vec(size_t(nk))}, dv{Vec(size_t(nk))};
      std::vector<float> terms(size_t(K::flash_bwd_scratch(d.B, d.H, d.Tq, d.D)));
      K::flash_attention_bwd(L, dq.data(), dk.data(), dv.data(), dob.data(), ob.data(), i ? pairs.data() : sb.data(),
                             qb.data(), kb.data(), vb.data(), d.B, d.Tq, d.Tk, d.H, d.Hkv, d.D, d.H * d.D, d.Hkv * d.D,
                             d.b16, terms.data());
      for (Buf<float>* b : {&dq, &dk, &dv})
        for (float x : b->v) grads[i].push_back(x);
    }
    double scale = 0;
    for (double x : grads[0]) scale = std::max(scale, std::fabs(x));
    ASSERT_GT(scale, 0);
    for (size_t i = 0; i < grads[0].size(); ++i) EXPECT_NEAR(grads[1][i], grads[0][i], 2e-5 * scale) << "element " << i;
  }
}

// ---- the choice of attention, against a stand-in library ----
int g_prepares = 0;
int stand_in_prepare(const tp_sdpa_shape* s, void*, size_t* ws, char* why, size_t n) {
  ++g_prepares;
  if (s->D % 8) return std::snprintf(why, n, "head dim %ld is not a multiple of 8", s->D), TP_SDPA_REFUSED;
  if (s->Tq > 4096) return std::snprintf(why, n, "graph build failed"), TP_SDPA_ERROR;
  *ws = size_t(s->B * 1000);
  return TP_SDPA_OK;
}
int stand_in_fwd(const tp_sdpa_shape*, void*, float*, const void*, const void*, const void*, void*, char*, size_t) { return 0; }
int stand_in_bwd(const tp_sdpa_shape*, void*, void*, void*, const void*, const void*, const float*, const void*,
                 const void*, const void*, void*, char*, size_t) {
  return 0;
}
tp::cuda::SdpaLibrary stand_in() {
  tp::cuda::SdpaLibrary lib;
  lib.prepare = stand_in_prepare, lib.fwd = stand_in_fwd, lib.bwd = stand_in_bwd, lib.name = "stand-in 1.0";
  return lib;
}
tp_sdpa_shape shape(long D, long Tq = 64) { return {2, Tq, Tq, 4, 4, D, 12 * D, 12 * D, 1.f / std::sqrt(float(D))}; }

TEST(FusedAttentionChoice, LibraryWhereItAcceptsTheShapeOwnKernelsElsewhere) {
  using tp::cuda::AttentionMode;
  g_prepares = 0;
  tp::cuda::AttentionChoice c(stand_in(), AttentionMode::library);
  EXPECT_EQ(c.workspace_or_own(shape(64), nullptr), 2000);
  EXPECT_EQ(c.workspace_or_own(shape(64), nullptr), 2000);  // (prepared once)
  EXPECT_EQ(g_prepares, 1);
  EXPECT_EQ(c.workspace_or_own(shape(100), nullptr), -1);  // refused
  EXPECT_EQ(c.workspace_or_own(shape(100), nullptr), -1);
  EXPECT_EQ(c.workspace_or_own(shape(64, 8192), nullptr), -1);  // failed to prepare: the own kernels too
  EXPECT_EQ(g_prepares, 3);
  ASSERT_EQ(c.notes().size(), 2u);
  EXPECT_NE(c.notes()[0].find("refused"), std::string::npos);
  EXPECT_NE(c.notes()[0].find("head dim 100 is not a multiple of 8"), std::string::npos);
  EXPECT_NE(c.notes()[1].find("failed"), std::string::npos);
  EXPECT_NE(c.describe().find("stand-in 1.0 fused attention"), std::string::npos);
  // Off: nothing is asked, the own kernels run every shape.
  EXPECT_EQ(c.set_mode(AttentionMode::own), AttentionMode::library);
  EXPECT_EQ(c.workspace_or_own(shape(64), nullptr), -1);
  EXPECT_EQ(c.workspace_or_own(shape(32), nullptr), -1);
  EXPECT_EQ(g_prepares, 3);
  EXPECT_NE(c.describe().find("own flash kernels"), std::string::npos);
  c.set_mode(AttentionMode::library);
  EXPECT_EQ(c.workspace_or_own(shape(64), nullptr), 2000);
}

TEST(FusedAttentionChoice, NoLibraryMeansTheOwnKernelsAndSaysWhy) {
  tp::cuda::SdpaLibrary none;
  none.missing = "cuDNN attention not loaded: libcudnn.so.9: cannot open shared object file";
  g_prepares = 0;
  tp::cuda::AttentionChoice c(none, tp::cuda::AttentionMode::library);
  EXPECT_EQ(c.workspace_or_own(shape(64), nullptr), -1);
  EXPECT_EQ(g_prepares, 0);
  EXPECT_EQ(c.describe(), "own flash kernels (cuDNN attention not loaded: libcudnn.so.9: cannot open shared object file)");
}

}  // namespace
