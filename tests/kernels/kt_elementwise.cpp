// The element-wise kernels (exec/kernels/k_elementwise.hpp) on the emulator against float64 references, for
// float, double and bf16 storage, over every kt::configs() shape / launcher / schedule: fill, copy with
// conversion, add (and in place), accumulate, scale (in place), bias add (in place), GELU and SwiGLU forward,
// backward accumulating into non-zero gradients and overwriting in place, and AdamW (fp32 master weights with
// a bf16 copy).
#include <cmath>

#include "tests/kernels/kt_util.hpp"

namespace {
namespace K = tp::kernels;
using kt::Buf;
using kt::Vec;

template <class T>
class KernelElementwise : public ::testing::Test {};
using Types = ::testing::Types<float, double, K::bf16>;
TYPED_TEST_SUITE(KernelElementwise, Types);

double gelu(double x) {
  const double s = std::sqrt(2.0 / M_PI), u = s * (x + 0.044715 * x * x * x);
  return 0.5 * x * (1 + std::tanh(u));
}
double gelu_d(double x) {
  const double s = std::sqrt(2.0 / M_PI), th = std::tanh(s * (x + 0.044715 * x * x * x));
  return 0.5 * (1 + th) + 0.5 * x * (1 - th * th) * s * (1 + 3 * 0.044715 * x * x);
}
double sigm(double x) { return 1 / (1 + std::exp(-x)); }

TYPED_TEST(KernelElementwise, FillCopyAddAccumulateScale) {
  using T = TypeParam;
  std::mt19937_64 rng(1);
  for (const kt::Config& cf : kt::configs()) {
    SCOPED_TRACE(cf.str());
    kt::ScheduleScope sc(cf.sched);
    const long n = cf.s.rows * cf.s.cols;
    const Vec a = kt::rounded<T>(kt::randv(n, rng)), b = kt::rounded<T>(kt::randv(n, rng));
    Buf<T> y(Vec(n, 7.0)), ba(a), bb(b);
    K::fill(cf.L, y.data(), K::acc_t<T>(0.5), n);
    EXPECT_TRUE(kt::near<T>(y.dbl(), Vec(n, 0.5)));
    // copy float -> T (rounds for bf16) and T -> float
    std::vector<float> fa(a.begin(), a.end()), fb(n, -1);
    K::copy(cf.L, y.data(), fa.data(), n);
    EXPECT_TRUE(kt::near<T>(y.dbl(), kt::rounded<T>(kt::rounded<float>(a))));
    K::copy(cf.L, fb.data(), ba.data(), n);
    EXPECT_TRUE(kt::near<float>(Vec(fb.begin(), fb.end()), kt::rounded<float>(a)));
    Vec sum(n), acc(n), sc2(n);
    for (long i = 0; i < n; ++i) sum[i] = a[i] + b[i], sc2[i] = -1.5 * a[i];
    K::add(cf.L, y.data(), ba.data(), bb.data(), n);
    EXPECT_TRUE(kt::near<T>(y.dbl(), sum));
    Buf<T> inplace(a);
    K::add(cf.L, inplace.data(), inplace.data(), bb.data(), n);  // y == a
    EXPECT_TRUE(kt::near<T>(inplace.dbl(), sum));
    const Vec y0 = y.dbl();
    for (long i = 0; i < n; ++i) acc[i] = y0[i] + b[i];
    K::accumulate(cf.L, y.data(), bb.data(), n);
    EXPECT_TRUE(kt::near<T>(y.dbl(), acc, 2));
    Buf<T> s(a);
    K::scale(cf.L, s.data(), s.data(), K::acc_t<T>(-1.5), n);  // in place
    EXPECT_TRUE(kt::near<T>(s.dbl(), sc2));
  }
}

TYPED_TEST(KernelElementwise, AddBias) {
  using T = TypeParam;
  std::mt19937_64 rng(2);
  for (const kt::Config& cf : kt::configs()) {
    SCOPED_TRACE(cf.str());
    kt::ScheduleScope sc(cf.sched);
    const long N = cf.s.rows, C = cf.s.cols;
    const Vec x = kt::rounded<T>(kt::randv(N * C, rng)), b = kt::rounded<T>(kt::randv(C, rng));
    Vec ref(N * C);
    for (long i = 0; i < N * C; ++i) ref[i] = x[i] + b[i % C];
    Buf<T> y(Vec(N * C, 0.0)), bx(x), bb(b);
    K::add_bias(cf.L, y.data(), bx.data(), bb.data(), N, C);
    EXPECT_TRUE(kt::near<T>(y.dbl(), ref));
    K::add_bias(cf.L, bx.data(), bx.data(), bb.data(), N, C);  // in place
    EXPECT_TRUE(kt::near<T>(bx.dbl(), ref));
    // with a residual, in place over it: exactly add_bias, then add (the bits)
    const Vec r = kt::rounded<T>(kt::randv(N * C, rng));
    Buf<T> x2(x), two(Vec(N * C, 0.0)), br(r), fused(r);
    K::add_bias(cf.L, two.data(), x2.data(), bb.data(), N, C);
    K::add(cf.L, two.data(), two.data(), br.data(), N * C);
    K::add_bias(cf.L, fused.data(), x2.data(), bb.data(), N, C, fused.data());
    EXPECT_EQ(fused.dbl(), two.dbl());
  }
}

TYPED_TEST(KernelElementwise, Gelu) {
  using T = TypeParam;
  std::mt19937_64 rng(3);
  for (const kt::Config& cf : kt::configs()) {
    SCOPED_TRACE(cf.str());
    kt::ScheduleScope sc(cf.sched);
    const long n = cf.s.rows * cf.s.cols;
    const Vec x = kt::rounded<T>(kt::randv(n, rng, -4, 4)), dy = kt::rounded<T>(kt::randv(n, rng));
    const Vec dx0 = kt::rounded<T>(kt::randv(n, rng));
    Vec fwd(n), acc(n), set(n);
    for (long i = 0; i < n; ++i) {
      fwd[i] = gelu(x[i]);
      set[i] = gelu_d(x[i]) * dy[i];
      acc[i] = dx0[i] + set[i];
    }
    Buf<T> y(Vec(n, 0.0)), bx(x), bdy(dy), dx(dx0);
    K::gelu_fwd(cf.L, y.data(), bx.data(), n);
    EXPECT_TRUE(kt::near<T>(y.dbl(), fwd));
    K::gelu_bwd(cf.L, dx.data(), bx.data(), bdy.data(), n);
    EXPECT_TRUE(kt::near<T>(dx.dbl(), acc, 4));
    Buf<T> over_dy(dy), over_x(x);
    K::gelu_bwd_set(cf.L, over_dy.data(), bx.data(), over_dy.data(), n);  // dx == dy
    EXPECT_TRUE(kt::near<T>(over_dy.dbl(), set, 2));
    K::gelu_bwd_set(cf.L, over_x.data(), over_x.data(), bdy.data(), n);  // dx == x
    EXPECT_TRUE(kt::near<T>(over_x.dbl(), set, 2));
  }
}

TYPED_TEST(KernelElementwise, Swiglu) {
  using T = TypeParam;
  std::mt19937_64 rng(4);
  for (const kt::Config& cf : kt::configs()) {
    SCOPED_TRACE(cf.str());
    kt::ScheduleScope sc(cf.sched);
    const long N = cf.s.rows, F = cf.s.cols;
    const Vec gu = kt::rounded<T>(kt::randv(N * 2 * F, rng, -3, 3)), dy = kt::rounded<T>(kt::randv(N * F, rng));
    const Vec d0 = kt::rounded<T>(kt::randv(N * 2 * F, rng));
    Vec fwd(N * F), set(N * 2 * F), acc(N * 2 * F);
    for (long r = 0; r < N; ++r)
      for (long f = 0; f < F; ++f) {
        const long ig = r * 2 * F + f, iu = ig + F;
        const double g = gu[ig], u = gu[iu], s = sigm(g), d = dy[r * F + f];
        fwd[r * F + f] = g * s * u;
        set[ig] = d * u * s * (1 + g * (1 - s));
        set[iu] = d * g * s;
      }
    for (long i = 0; i < N * 2 * F; ++i) acc[i] = d0[i] + set[i];
    Buf<T> y(Vec(N * F, 0.0)), bgu(gu), bdy(dy), d(d0);
    K::swiglu_fwd(cf.L, y.data(), bgu.data(), N, F);
    EXPECT_TRUE(kt::near<T>(y.dbl(), fwd, 3));
    K::swiglu_bwd(cf.L, d.data(), bgu.data(), bdy.data(), N, F);
    EXPECT_TRUE(kt::near<T>(d.dbl(), acc, 4));
    K::swiglu_bwd_set(cf.L, bgu.data(), bgu.data(), bdy.data(), N, F);  // over the saved input
    EXPECT_TRUE(kt::near<T>(bgu.dbl(), set, 4));
  }
}

// AdamW with parameters, moments in P = float (or double) and gradients in T, over three steps.
TYPED_TEST(KernelElementwise, AdamW) {
  using T = TypeParam;
  using P = std::conditional_t<std::is_same_v<T, double>, double, float>;
  std::mt19937_64 rng(5);
  const double lr = 1e-2, b1 = 0.9, b2 = 0.95, eps = 1e-8, wd = 0.1;
  for (const kt::Config& cf : kt::configs()) {
    SCOPED_TRACE(cf.str());
    kt::ScheduleScope sc(cf.sched);
    const long n = cf.s.rows * cf.s.cols;
    Vec p = kt::rounded<P>(kt::randv(n, rng)), m(n, 0.0), v(n, 0.0);
    Buf<P> bp(p), bm(m), bv(v);
    Buf<T> copy(Vec(n, 0.0));
    for (long t = 1; t <= 3; ++t) {
      const Vec g = kt::rounded<T>(kt::randv(n, rng));
      Buf<T> bg(g);
      const double gs = t == 2 ? 0.5 : 1.0;  // step 2: the gradient scaled (the clip)
      for (long i = 0; i < n; ++i) {
        m[i] = b1 * m[i] + (1 - b1) * gs * g[i];
        v[i] = b2 * v[i] + (1 - b2) * gs * g[i] * gs * g[i];
        const double mh = m[i] / (1 - std::pow(b1, t)), vh = v[i] / (1 - std::pow(b2, t));
        p[i] -= lr * (mh / (std::sqrt(vh) + eps) + wd * p[i]);
      }
      K::adamw(cf.L, bp.data(), bg.data(), bm.data(), bv.data(), std::is_same_v<T, P> ? nullptr : copy.data(), n, lr,
               b1, b2, eps, wd, t, gs);
    }
    EXPECT_TRUE(kt::near<P>(bp.dbl(), p, 4));
    EXPECT_TRUE(kt::near<P>(bm.dbl(), m));
    EXPECT_TRUE(kt::near<P>(bv.dbl(), v));
    if (!std::is_same_v<T, P>) {
      EXPECT_TRUE(kt::near<T>(copy.dbl(), p));
    }
  }
}

}  // namespace
