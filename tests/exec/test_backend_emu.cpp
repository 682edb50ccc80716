// test_backend_emu: the emu backend's every op against the CPU backend's same op, in float64 and float32, on
// shapes larger than its launches (rows beyond the 8-block grid, columns beyond the 32-thread block, odd sizes,
// grouped-query attention), so every grid-stride and column loop of the kernels runs more than once.
// Each case runs once per backend on identical inputs (seeded), then every buffer of the case is compared
// (outputs and inputs alike; in-place and accumulate variants included) and the op's scalar result if any.
// Tolerances per dtype on |emu - cpu| / (1 + |cpu|): 1e-12 in double (the kernels compute in double; only the
// summation order differs), 1e-5 in float (float accumulation in a different order over rows of up to 100;
// measured: at most 3e-15 in double, 2e-6 in float).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "exec/backends/backend.hpp"

using namespace tp::exec;

namespace {

template <class T>
struct Mem {
  const Backend& be;
  std::vector<std::pair<T*, long>> bufs;
  std::vector<void*> all;
  explicit Mem(const Backend& b) : be(b) {}
  ~Mem() {
    for (void* p : all) be.free(p);
  }
  Mem(const Mem&) = delete;
  Mem& operator=(const Mem&) = delete;
  // n values uniform in [lo, hi) from `seed`, in backend memory.
  T* r(long n, uint32_t seed, double lo = -1, double hi = 1) {
    std::mt19937 g(seed);
    std::uniform_real_distribution<double> u(lo, hi);
    std::vector<T> h(n);
    for (T& x : h) x = T(u(g));
    T* d = static_cast<T*>(be.alloc(sizeof(T) * n));
    be.copy(d, h.data(), sizeof(T) * n, CopyKind::host_to_device, Stream{});
    bufs.push_back({d, n});
    all.push_back(d);
    return d;
  }
  int32_t* ids(long n, int32_t below, uint32_t seed) {
    std::mt19937 g(seed);
    std::vector<int32_t> h(n);
    for (int32_t& x : h) x = int32_t(g() % uint32_t(below));
    int32_t* d = static_cast<int32_t*>(be.alloc(sizeof(int32_t) * n));
    be.copy(d, h.data(), sizeof(int32_t) * n, CopyKind::host_to_device, Stream{});
    all.push_back(d);
    return d;
  }
  std::vector<double> contents() const {
    std::vector<double> out;
    for (auto [d, n] : bufs) {
      std::vector<T> h(n);
      be.copy(h.data(), d, sizeof(T) * n, CopyKind::device_to_host, Stream{});
      out.insert(out.end(), h.begin(), h.end());
    }
    return out;
  }
};

// Runs `f(table, mem)` (returning the op's scalar result, or 0) on the CPU and the emu backend; the largest
// relative difference over every buffer and the result.
template <class T, class F>
double diff(F f) {
  Mem<T> a(cpu_backend()), b(emu_backend());
  const double ra = f(cpu_backend().ops<T>(), a), rb = f(emu_backend().ops<T>(), b);
  const std::vector<double> x = a.contents(), y = b.contents();
  EXPECT_EQ(x.size(), y.size());
  double e = std::abs(ra - rb) / (1 + std::abs(ra));
  for (size_t i = 0; i < std::min(x.size(), y.size()); ++i) e = std::max(e, std::abs(x[i] - y[i]) / (1 + std::abs(x[i])));
  return e;
}

template <class T>
void every_op(double tol) {
  const long N = 37, C = 70, F = 45, V = 100, Vl = 50, B = 2, Tn = 9, H = 4, Hkv = 2, D = 5;
  auto check = [&](const char* name, double e) { EXPECT_LE(e, tol) << name; };
  check("matmul", diff<T>([&](auto& t, auto& m) {
    for (int ta = 0; ta < 2; ++ta)
      for (int tb = 0; tb < 2; ++tb) t.matmul(m.r(N * F, 1), m.r(N * C, 2), m.r(C * F, 3), N, F, C, ta, tb, T(1.5), T(0.5));
    return 0.0;
  }));
  check("elementwise", diff<T>([&](auto& t, auto& m) {
    T *x = m.r(N * C, 4), *y = m.r(N * C, 5);
    t.add_bias(y, x, m.r(C, 6), N, C, nullptr);
    t.add_bias(x, x, m.r(C, 7), N, C, nullptr);
    t.bias_bwd(m.r(C, 8), y, N, C, nullptr);
    t.add(m.r(N * C, 9), x, y, N * C);
    t.accumulate(y, x, N * C);
    t.scale(m.r(N * C, 10), x, T(-0.75), N * C);
    t.fill(m.r(N * C, 11), T(2.5), N * C - 3);
    t.copy(m.r(N * C, 12), x, N * C);
    t.copy_rows(m.r(N * 30, 13), 30, x + 7, C, N, 23);
    return 0.0;
  }));
  check("layernorm", diff<T>([&](auto& t, auto& m) {
    for (bool with_b : {true, false}) {
      T *x = m.r(N * C, 14), *w = m.r(C, 15, 0.5, 1.5), *mean = m.r(N, 16), *rstd = m.r(N, 17);
      t.layernorm_fwd(m.r(N * C, 18), mean, rstd, x, w, with_b ? m.r(C, 19) : nullptr, N, C, T(1e-5));
      t.layernorm_bwd(m.r(N * C, 20), m.r(C, 21), with_b ? m.r(C, 22) : nullptr, m.r(N * C, 23), x, w, mean, rstd, N, C);
    }
    return 0.0;
  }));
  check("ln_shard", diff<T>([&](auto& t, auto& m) {  // one shard of Cl = 35 columns of C = 70
    const long Cl = 35;
    T *x = m.r(N * Cl, 24), *w = m.r(Cl, 25, 0.5, 1.5), *sum = m.r(N, 26), *mean = m.r(N, 27), *rstd = m.r(N, 28);
    t.ln_shard_sum(sum, x, N, Cl);
    t.scale(sum, sum, T(2), N);  // as if all-reduced over two shards
    t.ln_shard_sqdev(sum, mean, sum, x, N, Cl, C);  // in place
    t.ln_shard_apply(m.r(N * Cl, 29), rstd, x, mean, sum, w, m.r(Cl, 30), N, Cl, C, T(1e-5));
    T *dy = m.r(N * Cl, 31), *sums = m.r(2 * N, 32);
    t.ln_shard_bwd_sums(sums, dy, x, w, mean, rstd, N, Cl);
    t.ln_shard_bwd_apply(m.r(N * Cl, 33), m.r(Cl, 34), m.r(Cl, 35), dy, x, w, mean, rstd, sums, N, Cl, C);
    t.ln_shard_bwd_apply(m.r(N * Cl, 36), m.r(Cl, 37), nullptr, dy, x, w, mean, rstd, sums, N, Cl, C);
    return 0.0;
  }));
  check("activations", diff<T>([&](auto& t, auto& m) {
    T *x = m.r(N * C, 38, -4, 4), *dy = m.r(N * C, 39), *gu = m.r(N * 2 * F, 40, -3, 3), *dyf = m.r(N * F, 41);
    t.gelu_fwd(m.r(N * C, 42), x, N * C);
    t.gelu_bwd(m.r(N * C, 43), x, dy, N * C);
    t.gelu_bwd_set(m.r(N * C, 44), x, dy, N * C);
    t.swiglu_fwd(m.r(N * F, 45), gu, N, F);
    t.swiglu_bwd(m.r(N * 2 * F, 46), gu, dyf, N, F);
    T* gu2 = m.r(N * 2 * F, 40, -3, 3);
    t.swiglu_bwd_set(gu2, gu2, dyf, N, F);  // in place over the saved input
    return 0.0;
  }));
  check("attention", diff<T>([&](auto& t, auto& m) {
    T *q = m.r(B * Tn * H * D, 47), *k = m.r(B * Tn * Hkv * D, 48), *v = m.r(B * Tn * Hkv * D, 49);
    T* att = m.r(B * H * Tn * Tn, 50);
    t.attention_fwd(m.r(B * Tn * H * D, 51), att, q, k, v, B, Tn, H, Hkv, D);
    t.attention_bwd(m.r(B * Tn * H * D, 52), m.r(B * Tn * Hkv * D, 53), m.r(B * Tn * Hkv * D, 54),
                    m.r(B * Tn * H * D, 55), att, q, k, v, B, Tn, H, Hkv, D);
    return 0.0;
  }));
  check("cross_entropy", diff<T>([&](auto& t, auto& m) {
    T *probs = m.r(N * V, 56), *logits = m.r(N * V, 57, -3, 3);
    int32_t* tg = m.ids(N, int32_t(V), 58);
    const double loss = t.cross_entropy_fwd(probs, logits, tg, N, V);
    t.cross_entropy_bwd(m.r(N * V, 59), probs, tg, N, V, T(0.125));
    return loss;
  }));
  for (CeForm form : {CeForm::raw_target_divide, CeForm::shifted_target_reciprocal})
    check("ce_shard", diff<T>([&](auto& t, auto& m) {  // the shard [50, 100) of the vocabulary
      T *lg = m.r(N * Vl, 60, -3, 3), *mx = m.r(N, 61), *parts = m.r(3 * N, 62), *se = m.r(N, 63), *tv = m.r(N, 64);
      int32_t* tg = m.ids(N, int32_t(V), 65);
      t.row_max(mx, lg, N, Vl);
      t.max_combine(mx, parts, N, 3);
      t.ce_shard_exp(lg, se, tv, lg, mx, tg, N, Vl, Vl, form);  // in place
      const double loss = t.ce_shard_finish(lg, se, tv, mx, N, Vl, form);
      t.ce_shard_target_grad(m.r(N * Vl, 66), tg, N, Vl, Vl, T(0.25));
      return loss;
    }));
  check("embedding", diff<T>([&](auto& t, auto& m) {
    int32_t* tok = m.ids(B * Tn, int32_t(V), 67);
    T *wte = m.r(V * C, 68), *wpe = m.r(Tn * C, 69), *dout = m.r(B * Tn * C, 70);
    t.embedding_fwd(m.r(B * Tn * C, 71), tok, wte, wpe, B, Tn, C);
    t.embedding_fwd(m.r(B * Tn * C, 72), tok, wte, nullptr, B, Tn, C);
    t.embedding_bwd(m.r(V * C, 73), m.r(Tn * C, 74), dout, tok, B, Tn, C);
    t.embedding_shard_fwd(m.r(B * Tn * C, 75), tok, wte + Vl * C, B * Tn, C, Vl, Vl);
    t.embedding_shard_bwd(m.r(Vl * C, 76), dout, tok, B * Tn, C, Vl, Vl);
    t.add_positions(m.r(N * C, 77), wpe, N, C, Tn, 5);
    t.positions_bwd(m.r(Tn * C, 78), m.r(N * C, 79), N, C, Tn, 5);
    return 0.0;
  }));
  check("adamw, sum_squares", diff<T>([&](auto& t, auto& m) {
    const long n = 1000;
    T *p = m.r(n, 80), *g = m.r(n, 81), *m1 = m.r(n, 82, 0, 0.1), *v = m.r(n, 83, 0, 0.1);
    t.adamw(p, g, m1, v, n, T(1e-3), T(0.9), T(0.95), T(1e-8), T(0.1), 3, T(0.8));
    return t.sum_squares(g, n) + t.sum_squares(g, 1);
  }));
  check("adamw_multi, sum_squares_multi", diff<T>([&](auto& t, auto& m) {
    const long n = 1000, a = 333;  // segments [0, a), an empty one, [a, n)
    T *p = m.r(n, 84), *g = m.r(n, 85), *m1 = m.r(n, 86, 0, 0.1), *v = m.r(n, 87, 0, 0.1);
    T* const ps[3] = {p, p + a, p + a};
    const T* const gs[3] = {g, g + a, g + a};
    T* const ms[3] = {m1, m1 + a, m1 + a};
    T* const vs[3] = {v, v + a, v + a};
    const long ns[3] = {a, 0, n - a};
    const T wd[3] = {T(0.1), T(0.2), T(0)};
    t.adamw_multi(ps, gs, ms, vs, ns, wd, 3, T(1e-3), T(0.9), T(0.95), T(1e-8), 3, T(0.8));
    return t.sum_squares_multi(gs, ns, 3);
  }));
}

}  // namespace

TEST(BackendEmu, EveryOpMatchesTheCpuBackendInFloat64) { every_op<double>(1e-12); }
TEST(BackendEmu, EveryOpMatchesTheCpuBackendInFloat32) { every_op<float>(1e-5); }
