// Tests of the CPU op backend (exec/backends/ops.hpp, exec/backends/cpu/): every backward against central finite differences of
// a random scalar loss L = sum(out ⊙ R) in double (ggml test-backend-ops style), float forwards against
// double ones, and known values (naive matmul, causal mask, uniform cross-entropy, one AdamW step, beta == 0
// ignoring NaN). Gradient buffers start from random values, so the checks also prove backwards accumulate.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <random>
#include <vector>

#include "exec/kernels/k_fp8.hpp"
#include "exec/backends/ops.hpp"

namespace {
using Vec = std::vector<double>;
using tp::ops::matmul;

Vec randv(size_t n, std::mt19937_64& rng, double lo = -1, double hi = 1) {
  std::uniform_real_distribution<double> d(lo, hi);
  Vec v(n);
  for (auto& x : v) x = d(rng);
  return v;
}
template <class T>
std::vector<T> cast(const Vec& v) {
  return std::vector<T>(v.begin(), v.end());
}
double dot(const Vec& a, const Vec& b) {
  long double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += (long double)a[i] * b[i];
  return double(s);
}
// ||a - b|| / max(||a||, ||b||): norm-wise relative error (0 when both are 0).
template <class A, class B>
double rel_err(const A& a, const B& b) {
  double d = 0, na = 0, nb = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    d += (double(a[i]) - double(b[i])) * (double(a[i]) - double(b[i]));
    na += double(a[i]) * double(a[i]);
    nb += double(b[i]) * double(b[i]);
  }
  const double n = std::sqrt(std::max(na, nb));
  return n == 0 ? 0 : std::sqrt(d) / n;
}

constexpr double kH = 1e-6, kGradTol = 1e-6, kF32Tol = 1e-5;

// Central differences of loss() with respect to every element of x (x is perturbed in place and restored).
Vec numeric_grad(Vec& x, const std::function<double()>& loss) {
  Vec g(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const double o = x[i];
    x[i] = o + kH;
    const double lp = loss();
    x[i] = o - kH;
    const double lm = loss();
    x[i] = o;
    g[i] = (lp - lm) / (2 * kH);
  }
  return g;
}

// A gradient buffer that starts at random values; grad() is what the backward added.
struct Acc {
  Vec start, buf;
  Acc(size_t n, std::mt19937_64& rng) : start(randv(n, rng)), buf(start) {}
  double* data() { return buf.data(); }
  Vec grad() const {
    Vec g(buf.size());
    for (size_t i = 0; i < g.size(); ++i) g[i] = buf[i] - start[i];
    return g;
  }
};

#define EXPECT_GRAD(x, acc, loss) EXPECT_LT(rel_err((acc).grad(), numeric_grad(x, loss)), kGradTol) << #x

// ---------------------------------------------------------------------------------------------------- matmul

// Reference: C = alpha op(A) op(B) + beta C (beta == 0: C not read).
Vec naive_matmul(const Vec& C0, const Vec& A, const Vec& B, long M, long N, long K, bool ta, bool tb, double alpha,
                 double beta) {
  Vec C(M * N);
  for (long i = 0; i < M; ++i)
    for (long j = 0; j < N; ++j) {
      double s = 0;
      for (long k = 0; k < K; ++k) s += (ta ? A[k * M + i] : A[i * K + k]) * (tb ? B[j * K + k] : B[k * N + j]);
      C[i * N + j] = alpha * s + (beta == 0 ? 0 : beta * C0[i * N + j]);
    }
  return C;
}

TEST(Ops, MatmulMatchesNaiveLoop) {
  std::mt19937_64 rng(1);
  const long shapes[][3] = {{1, 1, 1}, {3, 5, 2}, {7, 9, 11}, {64, 70, 130}, {130, 3, 257}};
  for (auto& s : shapes)
    for (int ta = 0; ta < 2; ++ta)
      for (int tb = 0; tb < 2; ++tb)
        for (double beta : {0.0, 1.0, 0.5}) {
          const long M = s[0], N = s[1], K = s[2];
          Vec A = randv(M * K, rng), B = randv(K * N, rng), C0 = randv(M * N, rng);
          Vec want = naive_matmul(C0, A, B, M, N, K, ta, tb, 1.5, beta);
          Vec C = C0;
          matmul(C.data(), A.data(), B.data(), M, N, K, ta, tb, 1.5, beta);
          EXPECT_LT(rel_err(C, want), 1e-13) << M << "x" << N << "x" << K << " ta=" << ta << " tb=" << tb;
          auto Cf = cast<float>(C0);
          auto Af = cast<float>(A), Bf = cast<float>(B);
          matmul<float>(Cf.data(), Af.data(), Bf.data(), M, N, K, ta, tb, 1.5f, float(beta));
          EXPECT_LT(rel_err(Cf, want), kF32Tol) << M << "x" << N << "x" << K << " ta=" << ta << " tb=" << tb;
        }
}

template <class T>
void beta_zero_ignores_nan() {
  std::mt19937_64 rng(2);
  for (long n : {3L, 40L}) {  // 3: Eigen's coefficient-wise path; 40: its blocked GEMM path
    auto A = cast<T>(randv(n * n, rng)), B = cast<T>(randv(n * n, rng));
    std::vector<T> C(n * n, std::numeric_limits<T>::quiet_NaN());
    matmul<T>(C.data(), A.data(), B.data(), n, n, n, false, false, T(1), T(0));
    for (T c : C) ASSERT_TRUE(std::isfinite(c));
    std::vector<T> E(n * n, std::numeric_limits<T>::quiet_NaN());
    matmul<T>(E.data(), A.data(), B.data(), n, n, 0, false, false, T(1), T(0));  // K = 0: zeros
    for (T c : E) ASSERT_EQ(c, T(0));
  }
}
TEST(Ops, MatmulBetaZeroIgnoresNaN) {
  beta_zero_ignores_nan<float>();
  beta_zero_ignores_nan<double>();
}

// The backward of C = alpha op(A) op(B) + beta C0 written with matmul itself (how the model calls it).
TEST(OpsGrad, MatmulAllTransposes) {
  std::mt19937_64 rng(3);
  for (long s : {0L, 1L}) {
    const long M = s ? 7 : 3, N = s ? 9 : 4, K = s ? 11 : 2;  // small: coefficient path; large: GEMM path
    for (int ta = 0; ta < 2; ++ta)
      for (int tb = 0; tb < 2; ++tb) {
        const double alpha = 0.7, beta = 0.3;
        Vec A = randv(M * K, rng), B = randv(K * N, rng), C0 = randv(M * N, rng), R = randv(M * N, rng);
        auto loss = [&] {
          Vec C = C0;
          matmul(C.data(), A.data(), B.data(), M, N, K, ta, tb, alpha, beta);
          return dot(C, R);
        };
        Acc dA(A.size(), rng), dB(B.size(), rng);
        const double* dC = R.data();
        if (!ta) matmul(dA.data(), dC, B.data(), M, K, N, false, !tb, alpha, 1.0);  // dA = dC op(B)ᵀ
        else matmul(dA.data(), B.data(), dC, K, M, N, tb, true, alpha, 1.0);        // dA = op(B) dCᵀ
        if (!tb) matmul(dB.data(), A.data(), dC, K, N, M, !ta, false, alpha, 1.0);  // dB = op(A)ᵀ dC
        else matmul(dB.data(), dC, A.data(), N, K, M, true, ta, alpha, 1.0);        // dB = dCᵀ op(A)
        EXPECT_GRAD(A, dA, loss) << " ta=" << ta << " tb=" << tb << " M=" << M;
        EXPECT_GRAD(B, dB, loss) << " ta=" << ta << " tb=" << tb << " M=" << M;
      }
  }
}

// ------------------------------------------------------------------------------------------ row-wise ops

TEST(OpsGrad, BiasAdd) {
  std::mt19937_64 rng(4);
  const long N = 4, C = 5;
  Vec x = randv(N * C, rng), b = randv(C, rng), R = randv(N * C, rng);
  auto loss = [&] {
    Vec y(N * C);
    tp::ops::add_bias(y.data(), x.data(), b.data(), N, C);
    return dot(y, R);
  };
  Acc dx(x.size(), rng), db(b.size(), rng);
  tp::ops::accumulate(dx.data(), R.data(), N * C);
  tp::ops::bias_bwd(db.data(), R.data(), N, C);
  EXPECT_GRAD(x, dx, loss);
  EXPECT_GRAD(b, db, loss);
}

TEST(OpsGrad, LayerNorm) {
  std::mt19937_64 rng(5);
  const long N = 3, C = 8;
  Vec x = randv(N * C, rng, -2, 2), w = randv(C, rng, 0.5, 1.5), b = randv(C, rng), R = randv(N * C, rng);
  Vec mean(N), rstd(N);
  auto loss = [&] {
    Vec y(N * C);
    tp::ops::layernorm_fwd(y.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C, 1e-5);
    return dot(y, R);
  };
  loss();
  Acc dx(x.size(), rng), dw(w.size(), rng), db(b.size(), rng);
  tp::ops::layernorm_bwd(dx.data(), dw.data(), db.data(), R.data(), x.data(), w.data(), mean.data(), rstd.data(),
                         N, C);
  EXPECT_GRAD(x, dx, loss);
  EXPECT_GRAD(w, dw, loss);
  EXPECT_GRAD(b, db, loss);
  Acc dx2(x.size(), rng);  // db == null is skipped and leaves dx unchanged
  tp::ops::layernorm_bwd(dx2.data(), dw.data(), (double*)nullptr, R.data(), x.data(), w.data(), mean.data(),
                         rstd.data(), N, C);
  EXPECT_LT(rel_err(dx2.grad(), dx.grad()), 1e-15);
}

TEST(OpsGrad, Gelu) {
  std::mt19937_64 rng(6);
  const long n = 40;
  Vec x = randv(n, rng, -4, 4), R = randv(n, rng);
  auto loss = [&] {
    Vec y(n);
    tp::ops::gelu_fwd(y.data(), x.data(), n);
    return dot(y, R);
  };
  Acc dx(n, rng);
  tp::ops::gelu_bwd(dx.data(), x.data(), R.data(), n);
  EXPECT_GRAD(x, dx, loss);
}

TEST(OpsGrad, SwiGLU) {
  std::mt19937_64 rng(7);
  const long N = 3, F = 5;
  Vec gu = randv(N * 2 * F, rng, -4, 4), R = randv(N * F, rng);
  auto loss = [&] {
    Vec y(N * F);
    tp::ops::swiglu_fwd(y.data(), gu.data(), N, F);
    return dot(y, R);
  };
  Acc dgu(gu.size(), rng);
  tp::ops::swiglu_bwd(dgu.data(), gu.data(), R.data(), N, F);
  EXPECT_GRAD(gu, dgu, loss);
}

TEST(OpsGrad, CrossEntropy) {
  std::mt19937_64 rng(8);
  const long N = 4, V = 7;
  Vec logits = randv(N * V, rng, -3, 3), probs(N * V);
  std::vector<int32_t> tgt = {3, 0, 6, 3};
  const double r = 0.37;  // L = r * sum of -log p[target]
  auto loss = [&] { return r * tp::ops::cross_entropy_fwd(probs.data(), logits.data(), tgt.data(), N, V); };
  loss();
  Acc dl(logits.size(), rng);
  tp::ops::cross_entropy_bwd(dl.data(), probs.data(), tgt.data(), N, V, r);
  EXPECT_GRAD(logits, dl, loss);
}

TEST(OpsGrad, EmbeddingRepeatedTokens) {
  std::mt19937_64 rng(9);
  const long V = 5, B = 2, T = 4, C = 3, maxT = 6;
  std::vector<int32_t> tok = {1, 3, 1, 1, 4, 3, 0, 1};
  Vec wte = randv(V * C, rng), wpe = randv(maxT * C, rng), R = randv(B * T * C, rng);
  auto loss = [&] {
    Vec out(B * T * C);
    tp::ops::embedding_fwd(out.data(), tok.data(), wte.data(), wpe.data(), B, T, C);
    return dot(out, R);
  };
  Acc dwte(wte.size(), rng), dwpe(wpe.size(), rng);
  tp::ops::embedding_bwd(dwte.data(), dwpe.data(), R.data(), tok.data(), B, T, C);
  EXPECT_GRAD(wte, dwte, loss);
  EXPECT_GRAD(wpe, dwpe, loss);
  // Without positions: out = wte rows only, and a null dwpe is skipped.
  Vec out(B * T * C);
  tp::ops::embedding_fwd(out.data(), tok.data(), wte.data(), (const double*)nullptr, B, T, C);
  for (long i = 0; i < B * T; ++i)
    for (long c = 0; c < C; ++c) EXPECT_EQ(out[i * C + c], wte[tok[i] * C + c]);
  Acc dwte2(wte.size(), rng);
  tp::ops::embedding_bwd(dwte2.data(), (double*)nullptr, R.data(), tok.data(), B, T, C);
  EXPECT_LT(rel_err(dwte2.grad(), dwte.grad()), 1e-15);
}

// ------------------------------------------------------------------------------------------------ attention

void attention_grad_check(long B, long T, long H, long Hkv, long D, uint64_t seed) {
  std::mt19937_64 rng(seed);
  Vec q = randv(B * T * H * D, rng, -2, 2), k = randv(B * T * Hkv * D, rng, -2, 2),
      v = randv(B * T * Hkv * D, rng), R = randv(B * T * H * D, rng), att(B * H * T * T);
  auto loss = [&] {
    Vec out(q.size());
    tp::ops::attention_fwd(out.data(), att.data(), q.data(), k.data(), v.data(), B, T, H, Hkv, D);
    return dot(out, R);
  };
  loss();
  Acc dq(q.size(), rng), dk(k.size(), rng), dv(v.size(), rng);
  tp::ops::attention_bwd(dq.data(), dk.data(), dv.data(), R.data(), att.data(), q.data(), k.data(), v.data(), B, T,
                         H, Hkv, D);
  EXPECT_GRAD(q, dq, loss) << " H=" << H << " Hkv=" << Hkv;
  EXPECT_GRAD(k, dk, loss) << " H=" << H << " Hkv=" << Hkv;
  EXPECT_GRAD(v, dv, loss) << " H=" << H << " Hkv=" << Hkv;
}
TEST(OpsGrad, AttentionMultiHead) { attention_grad_check(2, 5, 2, 2, 3, 10); }
TEST(OpsGrad, AttentionGroupedQuery) {
  attention_grad_check(2, 5, 4, 2, 3, 11);
  attention_grad_check(1, 6, 4, 1, 4, 12);  // multi-query
}

// The CPU's flash attention is the unfused one: the forward to rounding (one function computes every head's P), the
// statistics are each row's max and 1 / sum, and the backward differs only by its row term rowsum(dout ⊙ out)
// (rowsum(P ⊙ dP) in exact arithmetic): float64 rounding. Square and rectangular (Tq < Tk), grouped kv heads.
TEST(Ops, FlashAttentionIsTheUnfusedAttention) {
  std::mt19937_64 rng(14);
  for (auto [Tq, Tk] : {std::pair{6L, 6L}, std::pair{3L, 8L}}) {
    const long B = 2, H = 4, Hkv = 2, D = 5, nq = B * Tq * H * D, nk = B * Tk * Hkv * D;
    Vec q = randv(nq, rng, -2, 2), k = randv(nk, rng, -2, 2), v = randv(nk, rng), dout = randv(nq, rng);
    Vec out(nq), att(B * H * Tq * Tk), fout(nq), st(B * H * Tq * 2);
    tp::ops::attention_fwd_kv(out.data(), att.data(), q.data(), k.data(), v.data(), B, Tq, Tk, H, Hkv, D);
    tp::ops::flash_attention_fwd(fout.data(), st.data(), q.data(), k.data(), v.data(), B, Tq, Tk, H, Hkv, D, H * D, Hkv * D);
    EXPECT_LT(rel_err(fout, out), 1e-15);
    for (long bh = 0; bh < B * H; ++bh)
      for (long t = 0; t < Tq; ++t) {  // P = exp(s - max) / sum, so P's largest entry is 1 / sum
        double pmax = 0;
        for (long j = 0; j < Tk; ++j) pmax = std::max(pmax, att[(bh * Tq + t) * Tk + j]);
        EXPECT_NEAR(st[(bh * Tq + t) * 2 + 1], pmax, 1e-15);
      }
    Vec dq(nq, 0.5), dk(nk, 0.25), dv(nk, -0.5), fdq(dq), fdk(dk), fdv(dv);
    tp::ops::attention_bwd_kv(dq.data(), dk.data(), dv.data(), dout.data(), att.data(), q.data(), k.data(), v.data(),
                              B, Tq, Tk, H, Hkv, D);
    tp::ops::flash_attention_bwd(fdq.data(), fdk.data(), fdv.data(), dout.data(), fout.data(), st.data(), q.data(),
                                 k.data(), v.data(), B, Tq, Tk, H, Hkv, D, H * D, Hkv * D);
    EXPECT_LT(rel_err(fdq, dq), 1e-13);
    EXPECT_LT(rel_err(fdk, dk), 1e-13);
    EXPECT_LT(rel_err(fdv, dv), 1e-15);  // (dV = Pᵀ dout: no row term)
  }
}

TEST(Ops, AttentionCausalMask) {
  std::mt19937_64 rng(13);
  const long B = 2, T = 7, H = 4, Hkv = 2, D = 8;
  Vec q = randv(B * T * H * D, rng, -3, 3), k = randv(B * T * Hkv * D, rng, -3, 3), v = randv(B * T * Hkv * D, rng);
  Vec out(q.size()), att(B * H * T * T, std::numeric_limits<double>::quiet_NaN());
  tp::ops::attention_fwd(out.data(), att.data(), q.data(), k.data(), v.data(), B, T, H, Hkv, D);
  for (long bh = 0; bh < B * H; ++bh)
    for (long t = 0; t < T; ++t) {
      double s = 0;
      for (long j = 0; j < T; ++j) {
        const double p = att[(bh * T + t) * T + j];
        if (j > t) EXPECT_EQ(p, 0.0) << "future key " << j << " of query " << t;
        else EXPECT_GT(p, 0.0);
        s += p;
      }
      EXPECT_NEAR(s, 1.0, 1e-14);
    }
  // Query 0 sees only key 0, so its output is v[0] of its kv head; query t averages v[0..t] of head h / 2.
  for (long b = 0; b < B; ++b)
    for (long h = 0; h < H; ++h)
      for (long d = 0; d < D; ++d) {
        EXPECT_NEAR(out[((b * T) * H + h) * D + d], v[((b * T) * Hkv + h / 2) * D + d], 1e-14);
        const long t = T - 1;
        double want = 0;
        for (long j = 0; j <= t; ++j) want += att[((b * H + h) * T + t) * T + j] * v[((b * T + j) * Hkv + h / 2) * D + d];
        EXPECT_NEAR(out[((b * T + t) * H + h) * D + d], want, 1e-13);
      }
}

// ------------------------------------------------------------------------------------------- known values

TEST(Ops, CrossEntropyUniformLogits) {
  const long N = 5, V = 11;
  for (double c : {0.0, 3.5, -800.0}) {  // -800: exp would underflow without the max subtraction
    Vec logits(N * V, c), probs(N * V);
    std::vector<int32_t> tgt = {0, 10, 5, 5, 2};
    const double L = tp::ops::cross_entropy_fwd(probs.data(), logits.data(), tgt.data(), N, V);
    EXPECT_NEAR(L, N * std::log(double(V)), 1e-12);
    for (double p : probs) EXPECT_NEAR(p, 1.0 / V, 1e-15);
    std::vector<float> lf(N * V, float(c)), pf(N * V);
    EXPECT_NEAR(tp::ops::cross_entropy_fwd(pf.data(), lf.data(), tgt.data(), N, V), N * std::log(double(V)), 1e-5);
  }
}

TEST(Ops, AdamWOneStepByHand) {
  // p = 1, g = 0.5, m = v = 0, lr = 0.1, b1 = 0.9, b2 = 0.999, eps = 1e-8, wd = 0.01, t = 1:
  // m = 0.05, v = 0.00025, m_hat = 0.5, v_hat = 0.25, p = 1 - 0.1 (0.5 / (0.5 + 1e-8) + 0.01).
  double p = 1, g = 0.5, m = 0, v = 0;
  tp::ops::adamw(&p, &g, &m, &v, 1, 0.1, 0.9, 0.999, 1e-8, 0.01, 1, 1.0);
  EXPECT_DOUBLE_EQ(m, 0.05);
  EXPECT_DOUBLE_EQ(v, 0.00025);
  EXPECT_NEAR(p, 1 - 0.1 * (0.5 / (0.5 + 1e-8) + 0.01), 1e-15);
  // Second step, g = -1: m = 0.045 - 0.1, v = 0.00024975 + 0.001, corrections 1 - 0.81 and 1 - 0.998001.
  const double p1 = p;
  g = -1;
  tp::ops::adamw(&p, &g, &m, &v, 1, 0.1, 0.9, 0.999, 1e-8, 0.01, 2, 1.0);
  const double m2 = 0.9 * 0.05 + 0.1 * -1, v2 = 0.999 * 0.00025 + 0.001 * 1;
  EXPECT_NEAR(m, m2, 1e-16);
  EXPECT_NEAR(v, v2, 1e-16);
  EXPECT_NEAR(p, p1 - 0.1 * ((m2 / 0.19) / (std::sqrt(v2 / (1 - 0.998001)) + 1e-8) + 0.01 * p1), 1e-14);
}

TEST(Ops, ElementwiseAndSumSquares) {
  Vec a = {1, -2, 3}, b = {0.5, 0.5, -1}, y(3);
  tp::ops::add(y.data(), a.data(), b.data(), 3);
  EXPECT_EQ(y, (Vec{1.5, -1.5, 2}));
  tp::ops::add(a.data(), a.data(), b.data(), 3);  // in place
  EXPECT_EQ(a, (Vec{1.5, -1.5, 2}));
  tp::ops::accumulate(y.data(), b.data(), 3);
  EXPECT_EQ(y, (Vec{2, -1, 1}));
  tp::ops::scale(y.data(), y.data(), 3.0, 3);
  EXPECT_EQ(y, (Vec{6, -3, 3}));
  EXPECT_EQ(tp::ops::sum_squares(y.data(), 3), 54.0);
  std::vector<float> f(1000, 0.1f);
  EXPECT_NEAR(tp::ops::sum_squares(f.data(), 1000), 1000 * double(0.1f) * double(0.1f), 1e-12);
  Vec x = {1, 2, 3, 4}, bias = {10, 20};
  tp::ops::add_bias(x.data(), x.data(), bias.data(), 2, 2);  // in place
  EXPECT_EQ(x, (Vec{11, 22, 13, 24}));
}

// ------------------------------------------------------------------------------- float agrees with double

TEST(OpsFloat, ForwardsAgreeWithDouble) {
  std::mt19937_64 rng(14);
  const long N = 6, C = 32, F = 24, V = 50;
  Vec x = randv(N * C, rng, -2, 2), w = randv(C, rng, 0.5, 1.5), b = randv(C, rng);
  auto xf = cast<float>(x), wf = cast<float>(w), bf = cast<float>(b);
  {  // bias add
    Vec y(N * C);
    std::vector<float> yf(N * C);
    tp::ops::add_bias(y.data(), x.data(), b.data(), N, C);
    tp::ops::add_bias(yf.data(), xf.data(), bf.data(), N, C);
    EXPECT_LT(rel_err(yf, y), kF32Tol) << "add_bias";
  }
  {  // layernorm
    Vec y(N * C), m(N), r(N);
    std::vector<float> yf(N * C), mf(N), rf(N);
    tp::ops::layernorm_fwd(y.data(), m.data(), r.data(), x.data(), w.data(), b.data(), N, C, 1e-5);
    tp::ops::layernorm_fwd(yf.data(), mf.data(), rf.data(), xf.data(), wf.data(), bf.data(), N, C, 1e-5f);
    EXPECT_LT(rel_err(yf, y), kF32Tol) << "layernorm y";
    EXPECT_LT(rel_err(rf, r), kF32Tol) << "layernorm rstd";
  }
  {  // gelu
    Vec y(N * C);
    std::vector<float> yf(N * C);
    tp::ops::gelu_fwd(y.data(), x.data(), N * C);
    tp::ops::gelu_fwd(yf.data(), xf.data(), N * C);
    EXPECT_LT(rel_err(yf, y), kF32Tol) << "gelu";
  }
  {  // swiglu
    Vec gu = randv(N * 2 * F, rng, -4, 4), y(N * F);
    auto guf = cast<float>(gu);
    std::vector<float> yf(N * F);
    tp::ops::swiglu_fwd(y.data(), gu.data(), N, F);
    tp::ops::swiglu_fwd(yf.data(), guf.data(), N, F);
    EXPECT_LT(rel_err(yf, y), kF32Tol) << "swiglu";
  }
  {  // cross-entropy
    Vec lg = randv(N * V, rng, -5, 5), p(N * V);
    auto lgf = cast<float>(lg);
    std::vector<float> pf(N * V);
    std::vector<int32_t> tgt = {0, 49, 7, 7, 20, 33};
    const double L = tp::ops::cross_entropy_fwd(p.data(), lg.data(), tgt.data(), N, V);
    const float Lf = tp::ops::cross_entropy_fwd(pf.data(), lgf.data(), tgt.data(), N, V);
    EXPECT_LT(std::abs(Lf - L) / L, kF32Tol) << "cross_entropy loss";
    EXPECT_LT(rel_err(pf, p), kF32Tol) << "cross_entropy probs";
  }
  {  // embedding
    const long Bn = 2, Tn = 3;
    std::vector<int32_t> tok = {4, 4, 0, 9, 1, 4};
    Vec wte = randv(10 * C, rng), wpe = randv(Tn * C, rng), out(Bn * Tn * C);
    auto wtef = cast<float>(wte), wpef = cast<float>(wpe);
    std::vector<float> outf(out.size());
    tp::ops::embedding_fwd(out.data(), tok.data(), wte.data(), wpe.data(), Bn, Tn, C);
    tp::ops::embedding_fwd(outf.data(), tok.data(), wtef.data(), wpef.data(), Bn, Tn, C);
    EXPECT_LT(rel_err(outf, out), kF32Tol) << "embedding";
  }
  {  // attention, grouped-query
    const long Bn = 2, Tn = 9, H = 4, Hkv = 2, D = 16;
    Vec q = randv(Bn * Tn * H * D, rng, -2, 2), k = randv(Bn * Tn * Hkv * D, rng, -2, 2),
        v = randv(Bn * Tn * Hkv * D, rng), out(q.size()), att(Bn * H * Tn * Tn);
    auto qf = cast<float>(q), kf = cast<float>(k), vf = cast<float>(v);
    std::vector<float> outf(out.size()), attf(att.size());
    tp::ops::attention_fwd(out.data(), att.data(), q.data(), k.data(), v.data(), Bn, Tn, H, Hkv, D);
    tp::ops::attention_fwd(outf.data(), attf.data(), qf.data(), kf.data(), vf.data(), Bn, Tn, H, Hkv, D);
    EXPECT_LT(rel_err(outf, out), kF32Tol) << "attention out";
    EXPECT_LT(rel_err(attf, att), kF32Tol) << "attention att";
  }
  {  // adamw, three steps
    const long n = 64;
    Vec p = randv(n, rng), m(n, 0), v(n, 0);
    auto pf = cast<float>(p);
    std::vector<float> mf(n, 0), vf(n, 0);
    for (long t = 1; t <= 3; ++t) {
      Vec g = randv(n, rng);
      auto gf = cast<float>(g);
      tp::ops::adamw(p.data(), g.data(), m.data(), v.data(), n, 1e-3, 0.9, 0.95, 1e-8, 0.1, t, 1.0);
      tp::ops::adamw(pf.data(), gf.data(), mf.data(), vf.data(), n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, t, 1.0f);
    }
    EXPECT_LT(rel_err(pf, p), kF32Tol) << "adamw";
  }
  {  // matmul, a GEMM-path shape, all transposes
    const long M = 33, Nn = 47, K = 29;
    for (int ta = 0; ta < 2; ++ta)
      for (int tb = 0; tb < 2; ++tb) {
        Vec A = randv(M * K, rng), B = randv(K * Nn, rng), Cd(M * Nn);
        auto Af = cast<float>(A), Bf = cast<float>(B);
        std::vector<float> Cf(M * Nn);
        matmul(Cd.data(), A.data(), B.data(), M, Nn, K, ta, tb, 1.0, 0.0);
        matmul(Cf.data(), Af.data(), Bf.data(), M, Nn, K, ta, tb, 1.0f, 0.0f);
        EXPECT_LT(rel_err(Cf, Cd), kF32Tol) << "matmul ta=" << ta << " tb=" << tb;
      }
  }
}

}  // namespace

// The overwriting backwards (gelu_bwd_set, swiglu_bwd_set) equal the accumulating ones applied to a zeroed
// buffer, in float and double, and give the same bits when the output is one of the inputs (the model runs
// them in place over the saved activation); cross_entropy_fwd gives the same bits in place (probs == logits).
template <class T>
void overwriting_backwards_check(double tol) {
  std::mt19937_64 rng(21);
  const long n = 1300;  // more than one of gelu_bwd_set's tiles, and a partial last tile
  auto x = cast<T>(randv(n, rng, -4, 4)), dy = cast<T>(randv(n, rng));
  std::vector<T> acc(n, T(0)), set(n, T(-7));
  tp::ops::gelu_bwd(acc.data(), x.data(), dy.data(), n);
  tp::ops::gelu_bwd_set(set.data(), x.data(), dy.data(), n);
  EXPECT_LE(rel_err(set, acc), tol) << "gelu_bwd_set";
  std::vector<T> over_x = x, over_dy = dy;
  tp::ops::gelu_bwd_set(over_x.data(), over_x.data(), dy.data(), n);
  tp::ops::gelu_bwd_set(over_dy.data(), x.data(), over_dy.data(), n);
  EXPECT_EQ(over_x, set) << "gelu_bwd_set over x";
  EXPECT_EQ(over_dy, set) << "gelu_bwd_set over dy";

  const long N = 7, F = 33;
  auto gu = cast<T>(randv(N * 2 * F, rng, -4, 4)), r = cast<T>(randv(N * F, rng));
  std::vector<T> sacc(N * 2 * F, T(0)), sset(N * 2 * F, T(3));
  tp::ops::swiglu_bwd(sacc.data(), gu.data(), r.data(), N, F);
  tp::ops::swiglu_bwd_set(sset.data(), gu.data(), r.data(), N, F);
  EXPECT_LE(rel_err(sset, sacc), tol) << "swiglu_bwd_set";
  std::vector<T> over_gu = gu;
  tp::ops::swiglu_bwd_set(over_gu.data(), over_gu.data(), r.data(), N, F);
  EXPECT_EQ(over_gu, sset) << "swiglu_bwd_set over gate_up";

  const long V = 50;
  auto lg = cast<T>(randv(N * V, rng, -5, 5));
  std::vector<int32_t> tgt = {0, 49, 7, 7, 20, 33, 1};
  std::vector<T> p(N * V), inplace = lg;
  const T L = tp::ops::cross_entropy_fwd(p.data(), lg.data(), tgt.data(), N, V);
  const T Li = tp::ops::cross_entropy_fwd(inplace.data(), inplace.data(), tgt.data(), N, V);
  EXPECT_EQ(Li, L) << "cross_entropy_fwd in place: loss";
  EXPECT_EQ(inplace, p) << "cross_entropy_fwd in place: probs";
}

TEST(Ops, OverwritingBackwardsAndInPlaceCrossEntropy) {
  overwriting_backwards_check<double>(1e-15);
  overwriting_backwards_check<float>(1e-6);
}

// The fp8 formats' values, worked out by hand: E4M3 (3 mantissa bits, smallest normal 2^-6, max 448) and E5M2
// (2 bits, 2^-14, max 57344); ties go to the even mantissa, subnormals keep the smallest normal's quantum,
// everything at or beyond max saturates.
TEST(Ops, Fp8RoundingOfKnownValues) {
  using tp::kernels::fp8_round;
  struct Case { double x; int format; double want; };
  const Case cases[] = {
      {0.1, 0, 0.1015625},         // 12.8 quanta of 2^-7 -> 13
      {1.0625, 0, 1.0},            // 8.5 quanta of 1/8 -> 8 (even)
      {1.1875, 0, 1.25},           // 9.5 -> 10 (even)
      {-1.1875, 0, -1.25},
      {447.0, 0, 448.0},           // quantum 32 at 256..512: 13.97 -> 14
      {460.0, 0, 448.0},           // saturates (would round to 480)
      {1e9, 0, 448.0},
      {-1e9, 0, -448.0},
      {0.001953125, 0, 0.001953125},  // 2^-9, the smallest subnormal
      {0.0009765625, 0, 0.0},         // 2^-10: half a quantum, ties to 0
      {0.0029296875, 0, 0.00390625},  // 1.5 quanta of 2^-9 -> 2
      {0.1, 1, 0.09375},           // 6.4 quanta of 2^-6 -> 6
      {50000.0, 1, 49152.0},       // 6.1 quanta of 2^13 -> 6
      {60000.0, 1, 57344.0},       // saturates
      {1e-6, 1, 0.0},              // below half of 2^-16
      {3e-5, 1, 3.0517578125e-05}, // 1.97 quanta of 2^-16 -> 2
      {0.0, 1, 0.0},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(fp8_round(c.x, c.format), c.want) << c.x << " format " << c.format;
    EXPECT_EQ(fp8_round(float(c.x), c.format), float(c.want)) << c.x << " format " << c.format << " (float)";
  }
  EXPECT_TRUE(std::isnan(fp8_round(std::numeric_limits<double>::quiet_NaN(), 0)));
  // The op: y = fp8(x * scale) / scale, the amax of x max-ed into the slot; in place.
  std::vector<double> x = {0.1 / 64, -3.0, 460.0 / 64};
  double amax = 0.5;
  const double scale = 64.0;
  tp::ops::fp8_quantize(x.data(), x.data(), 3, &scale, 0, &amax);
  EXPECT_EQ(amax, 7.1875);
  EXPECT_EQ(x[0], 0.1015625 / 64);
  EXPECT_EQ(x[1], -3.0);
  EXPECT_EQ(x[2], 448.0 / 64);
}
