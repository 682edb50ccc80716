// test_backend_ops: every op of every compiled-in backend (exec/backends/backend.hpp) in float32 against a float64
// reference — the start of a ggml-style test-backend-ops, looping over available_backends() so that emu and
// cuda slot in when they exist. Inputs live in the backend's memory (its alloc and copies); the reference is
// the CPU backend's float64 op on the same (float-rounded) inputs, whose formulas test_ops.cpp checks by finite
// differences, and the sharded ops are checked by composing their shards (as the ranks' collectives would)
// against the unsharded float64 op. Also: the table has no empty entry, scopes nest, names resolve.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "exec/backends/backend.hpp"
#include "exec/kernels/k_fp8.hpp"
#include "exec/backends/cuda/cuda_loader.hpp"

using namespace tp::exec;

namespace {

using Vec = std::vector<double>;
const OpTable<double>& ref() { return cpu_backend().f64; }

// Uniform values in [lo, hi), rounded to float so the reference sees exactly the backend's inputs.
Vec rnd(long n, uint32_t seed, double lo = -1, double hi = 1) {
  std::mt19937 g(seed);
  std::uniform_real_distribution<double> u(lo, hi);
  Vec v(n);
  for (double& x : v) x = (double)(float)u(g);
  return v;
}
std::vector<int32_t> ids(long n, int32_t below, uint32_t seed) {
  std::mt19937 g(seed);
  std::vector<int32_t> v(n);
  for (int32_t& x : v) x = (int32_t)(g() % (uint32_t)below);
  return v;
}

// Backend memory of one case: uploads host values, reads results back, frees everything at the end.
struct Dev {
  const Backend& be;
  std::vector<void*> blocks;
  explicit Dev(const Backend& b) : be(b) {}
  ~Dev() {
    for (void* p : blocks) be.free(p);
  }
  Dev(const Dev&) = delete;
  Dev& operator=(const Dev&) = delete;
  void* raw(size_t bytes) {
    void* p = be.alloc(std::max<size_t>(bytes, 64));
    blocks.push_back(p);
    return p;
  }
  float* up(const Vec& v) {
    std::vector<float> h(v.begin(), v.end());
    float* d = (float*)raw(sizeof(float) * h.size());
    be.copy(d, h.data(), sizeof(float) * h.size(), CopyKind::host_to_device, Stream{});
    return d;
  }
  int32_t* up(const std::vector<int32_t>& v) {
    int32_t* d = (int32_t*)raw(sizeof(int32_t) * v.size());
    be.copy(d, v.data(), sizeof(int32_t) * v.size(), CopyKind::host_to_device, Stream{});
    return d;
  }
  Vec down(const float* d, size_t n) {
    std::vector<float> h(n);
    be.copy(h.data(), d, sizeof(float) * n, CopyKind::device_to_host, Stream{});
    be.sync();
    return Vec(h.begin(), h.end());
  }
};

// Largest |got - want| / (1 + |want|).
double err(const Vec& got, const Vec& want) {
  EXPECT_EQ(got.size(), want.size());
  double e = 0;
  for (size_t i = 0; i < std::min(got.size(), want.size()); ++i)
    e = std::max(e, std::abs(got[i] - want[i]) / (1 + std::abs(want[i])));
  return e;
}

struct Case {
  const char* name;
  double tol;
  std::function<double(const Backend&)> run;  // returns the largest error of its outputs
};

std::vector<Case> elementwise_cases() {
  std::vector<Case> cs;
  cs.push_back({"matmul", 1e-5, [](const Backend& be) {
    double e = 0;
    const long M = 5, N = 7, K = 9;
    for (int ta = 0; ta < 2; ++ta)
      for (int tb = 0; tb < 2; ++tb)
        for (double beta : {0.0, 0.5}) {
          Dev d(be);
          Vec A = rnd(M * K, 1), B = rnd(K * N, 2), C = rnd(M * N, 3);
          float* c = d.up(C);
          be.f32.matmul(c, d.up(A), d.up(B), M, N, K, ta, tb, 1.5f, (float)beta);
          ref().matmul(C.data(), A.data(), B.data(), M, N, K, ta, tb, 1.5, beta);
          e = std::max(e, err(d.down(c, M * N), C));
        }
    return e;
  }});
  cs.push_back({"linear_fwd (bias, gelu)", 1e-5, [](const Backend& be) {
    double e = 0;
    for (auto [M, N, K] : {std::tuple{5L, 7L, 9L}, std::tuple{6L, 16L, 33L}})
      for (int bias = 0; bias < 2; ++bias)
        for (int gelu = 0; gelu < 2; ++gelu) {
          Dev d(be);
          Vec x = rnd(M * K, 21), w = rnd(K * N, 22), b = rnd(N, 23), y(M * N), pre(M * N);
          float *yd = d.up(y), *pd = d.up(pre);
          be.f32.linear_fwd(yd, gelu ? pd : nullptr, d.up(x), nullptr, d.up(w), nullptr, bias ? d.up(b) : nullptr, M, N, K);
          ref().linear_fwd(y.data(), gelu ? pre.data() : nullptr, x.data(), nullptr, w.data(), nullptr, bias ? b.data() : nullptr, M, N, K);
          e = std::max(e, err(d.down(yd, M * N), y));
          if (gelu) e = std::max(e, err(d.down(pd, M * N), pre));
        }
    return e;
  }});
  cs.push_back({"add_bias, bias_bwd", 1e-6, [](const Backend& be) {
    Dev d(be);
    const long N = 6, C = 11;
    Vec x = rnd(N * C, 4), b = rnd(C, 5), y(N * C), db = rnd(C, 6);
    float *yd = d.up(y), *dbd = d.up(db);
    be.f32.add_bias(yd, d.up(x), d.up(b), N, C, nullptr);
    be.f32.bias_bwd(dbd, d.up(x), N, C, nullptr);
    ref().add_bias(y.data(), x.data(), b.data(), N, C, nullptr);
    ref().bias_bwd(db.data(), x.data(), N, C, nullptr);
    return std::max(err(d.down(yd, N * C), y), err(d.down(dbd, C), db));
  }});
  cs.push_back({"add, accumulate, scale, fill, copy", 1e-6, [](const Backend& be) {
    Dev d(be);
    const long n = 37;
    Vec a = rnd(n, 7), b = rnd(n, 8), y(n), acc = rnd(n, 9), s(n), f(n), c(n);
    float *yd = d.up(y), *accd = d.up(acc), *sd = d.up(s), *fd = d.up(f), *cd = d.up(c);
    be.f32.add(yd, d.up(a), d.up(b), n);
    be.f32.accumulate(accd, d.up(a), n);
    be.f32.scale(sd, d.up(b), -0.25f, n);
    be.f32.fill(fd, 2.5f, n);
    be.f32.copy(cd, d.up(a), n);
    ref().add(y.data(), a.data(), b.data(), n);
    ref().accumulate(acc.data(), a.data(), n);
    ref().scale(s.data(), b.data(), -0.25, n);
    std::fill(f.begin(), f.end(), 2.5);
    double e = std::max({err(d.down(yd, n), y), err(d.down(accd, n), acc), err(d.down(sd, n), s),
                         err(d.down(fd, n), f), err(d.down(cd, n), a)});
    be.f32.fill(fd, 1.0f, 0);  // n = 0 touches nothing
    return std::max(e, err(d.down(fd, n), f));
  }});
  cs.push_back({"copy_rows", 0, [](const Backend& be) {
    Dev d(be);
    const long rows = 5, Q = 10, cols = 4, off = 3, out_stride = 6;
    Vec src = rnd(rows * Q, 10), dst = rnd(rows * out_stride, 11);
    float* dd = d.up(dst);
    be.f32.copy_rows(dd, out_stride, d.up(src) + off, Q, rows, cols);
    for (long r = 0; r < rows; ++r)
      for (long c = 0; c < cols; ++c) dst[r * out_stride + c] = src[r * Q + off + c];
    return err(d.down(dd, rows * out_stride), dst);
  }});
  cs.push_back({"layernorm_fwd, layernorm_bwd", 1e-5, [](const Backend& be) {
    double e = 0;
    const long N = 4, C = 13;
    for (bool with_b : {true, false}) {
      Dev d(be);
      Vec x = rnd(N * C, 12), w = rnd(C, 13, 0.5, 1.5), b = rnd(C, 14), dy = rnd(N * C, 15);
      Vec y(N * C), mean(N), rstd(N), dx = rnd(N * C, 16), dw = rnd(C, 17), db = rnd(C, 18);
      float *yd = d.up(y), *md = d.up(mean), *rd = d.up(rstd), *dxd = d.up(dx), *dwd = d.up(dw), *dbd = d.up(db);
      float *xd = d.up(x), *wd = d.up(w);
      be.f32.layernorm_fwd(yd, md, rd, xd, wd, with_b ? d.up(b) : nullptr, N, C, 1e-5f);
      be.f32.layernorm_bwd(dxd, dwd, with_b ? dbd : nullptr, d.up(dy), xd, wd, md, rd, N, C);
      ref().layernorm_fwd(y.data(), mean.data(), rstd.data(), x.data(), w.data(), with_b ? b.data() : nullptr, N, C,
                          1e-5);
      ref().layernorm_bwd(dx.data(), dw.data(), with_b ? db.data() : nullptr, dy.data(), x.data(), w.data(),
                          mean.data(), rstd.data(), N, C);
      e = std::max({e, err(d.down(yd, N * C), y), err(d.down(md, N), mean), err(d.down(rd, N), rstd),
                    err(d.down(dxd, N * C), dx), err(d.down(dwd, C), dw), err(d.down(dbd, C), db)});
    }
    return e;
  }});
  cs.push_back({"gelu_fwd, gelu_bwd, gelu_bwd_set", 1e-5, [](const Backend& be) {
    Dev d(be);
    const long n = 41;
    Vec x = rnd(n, 19, -4, 4), dy = rnd(n, 20), y(n), dx = rnd(n, 21), dxs(n);
    float *yd = d.up(y), *dxd = d.up(dx), *dxsd = d.up(dxs), *xd = d.up(x), *dyd = d.up(dy);
    be.f32.gelu_fwd(yd, xd, n);
    be.f32.gelu_bwd(dxd, xd, dyd, n);
    be.f32.gelu_bwd_set(dxsd, xd, dyd, n);
    ref().gelu_fwd(y.data(), x.data(), n);
    ref().gelu_bwd(dx.data(), x.data(), dy.data(), n);
    ref().gelu_bwd_set(dxs.data(), x.data(), dy.data(), n);
    double e = std::max({err(d.down(yd, n), y), err(d.down(dxd, n), dx), err(d.down(dxsd, n), dxs)});
    be.f32.gelu_bwd_set(xd, xd, dyd, n);  // in place over the saved input
    return std::max(e, err(d.down(xd, n), dxs));
  }});
  cs.push_back({"swiglu_fwd, swiglu_bwd, swiglu_bwd_set", 1e-5, [](const Backend& be) {
    Dev d(be);
    const long N = 3, F = 7;
    Vec gu = rnd(N * 2 * F, 22, -3, 3), dy = rnd(N * F, 23), y(N * F), dg = rnd(N * 2 * F, 24), dgs(N * 2 * F);
    float *yd = d.up(y), *dgd = d.up(dg), *dgsd = d.up(dgs), *gud = d.up(gu), *dyd = d.up(dy);
    be.f32.swiglu_fwd(yd, gud, N, F);
    be.f32.swiglu_bwd(dgd, gud, dyd, N, F);
    be.f32.swiglu_bwd_set(dgsd, gud, dyd, N, F);
    ref().swiglu_fwd(y.data(), gu.data(), N, F);
    ref().swiglu_bwd(dg.data(), gu.data(), dy.data(), N, F);
    ref().swiglu_bwd_set(dgs.data(), gu.data(), dy.data(), N, F);
    double e = std::max({err(d.down(yd, N * F), y), err(d.down(dgd, N * 2 * F), dg), err(d.down(dgsd, N * 2 * F), dgs)});
    be.f32.swiglu_bwd_set(gud, gud, dyd, N, F);  // in place over the saved input
    return std::max(e, err(d.down(gud, N * 2 * F), dgs));
  }});
  cs.push_back({"attention_fwd, attention_bwd", 1e-5, [](const Backend& be) {
    Dev d(be);
    const long B = 2, T = 5, H = 4, Hkv = 2, D = 3, nq = B * T * H * D, nk = B * T * Hkv * D, na = B * H * T * T;
    Vec q = rnd(nq, 25), k = rnd(nk, 26), v = rnd(nk, 27), dout = rnd(nq, 28), out(nq), att(na);
    Vec dq = rnd(nq, 29), dk = rnd(nk, 30), dv = rnd(nk, 31);
    float *outd = d.up(out), *attd = d.up(att), *qd = d.up(q), *kd = d.up(k), *vd = d.up(v);
    float *dqd = d.up(dq), *dkd = d.up(dk), *dvd = d.up(dv);
    be.f32.attention_fwd(outd, attd, qd, kd, vd, B, T, H, Hkv, D);
    be.f32.attention_bwd(dqd, dkd, dvd, d.up(dout), attd, qd, kd, vd, B, T, H, Hkv, D);
    ref().attention_fwd(out.data(), att.data(), q.data(), k.data(), v.data(), B, T, H, Hkv, D);
    ref().attention_bwd(dq.data(), dk.data(), dv.data(), dout.data(), att.data(), q.data(), k.data(), v.data(), B, T,
                        H, Hkv, D);
    return std::max({err(d.down(outd, nq), out), err(d.down(attd, na), att), err(d.down(dqd, nq), dq),
                     err(d.down(dkd, nk), dk), err(d.down(dvd, nk), dv)});
  }});
  cs.push_back({"attention_fwd_kv, attention_bwd_kv (Tq < Tk)", 1e-5, [](const Backend& be) {
    Dev d(be);
    const long B = 2, Tq = 3, Tk = 7, H = 4, Hkv = 2, D = 3, nq = B * Tq * H * D, nk = B * Tk * Hkv * D,
               na = B * H * Tq * Tk;
    Vec q = rnd(nq, 36), k = rnd(nk, 37), v = rnd(nk, 38), dout = rnd(nq, 39), out(nq), att(na);
    Vec dq = rnd(nq, 40), dk = rnd(nk, 41), dv = rnd(nk, 42);
    float *outd = d.up(out), *attd = d.up(att), *qd = d.up(q), *kd = d.up(k), *vd = d.up(v);
    float *dqd = d.up(dq), *dkd = d.up(dk), *dvd = d.up(dv);
    be.f32.attention_fwd_kv(outd, attd, qd, kd, vd, B, Tq, Tk, H, Hkv, D);
    be.f32.attention_bwd_kv(dqd, dkd, dvd, d.up(dout), attd, qd, kd, vd, B, Tq, Tk, H, Hkv, D);
    ref().attention_fwd_kv(out.data(), att.data(), q.data(), k.data(), v.data(), B, Tq, Tk, H, Hkv, D);
    ref().attention_bwd_kv(dq.data(), dk.data(), dv.data(), dout.data(), att.data(), q.data(), k.data(), v.data(), B,
                           Tq, Tk, H, Hkv, D);
    // The last query row of every (b, h) sees every key; the first sees Tk - Tq + 1 of them (bottom-right mask).
    double mask = 0;
    for (long r = 0; r < B * H; ++r) mask = std::max(mask, std::abs((double)att[(r * Tq) * Tk + Tk - Tq + 1]));
    return std::max({err(d.down(outd, nq), out), err(d.down(attd, na), att), err(d.down(dqd, nq), dq),
                     err(d.down(dkd, nk), dk), err(d.down(dvd, nk), dv), mask});
  }});
  // Flash attention: the fused kernels (emu, cuda) against the CPU's float64 flash, over shapes that take every
  // lane width (D = 3, 40, 100: one, two, four lanes per row), several query and key tiles (T = 70, 130), grouped
  // kv heads and a rectangular mask; the saved statistics too. The float64 flash forward is the unfused one.
  cs.push_back({"flash_attention_fwd, flash_attention_bwd", 1e-5, [](const Backend& be) {
    double e = 0;
    for (auto [B, Tq, Tk, H, Hkv, D] : {std::tuple{2L, 7L, 7L, 4L, 2L, 3L}, std::tuple{1L, 70L, 70L, 2L, 1L, 40L},
                                        std::tuple{2L, 5L, 13L, 2L, 2L, 100L}, std::tuple{1L, 130L, 130L, 1L, 1L, 16L}}) {
      Dev d(be);
      const long nq = B * Tq * H * D, nk = B * Tk * Hkv * D, ns = B * H * Tq * 2;
      Vec q = rnd(nq, 51), k = rnd(nk, 52), v = rnd(nk, 53), dout = rnd(nq, 54), out(nq), st(ns);
      Vec dq = rnd(nq, 55), dk = rnd(nk, 56), dv = rnd(nk, 57);
      float *outd = d.up(out), *std_ = d.up(st), *qd = d.up(q), *kd = d.up(k), *vd = d.up(v);
      float *dqd = d.up(dq), *dkd = d.up(dk), *dvd = d.up(dv);
      be.f32.flash_attention_fwd(outd, std_, qd, kd, vd, B, Tq, Tk, H, Hkv, D, H * D, Hkv * D);
      be.f32.flash_attention_bwd(dqd, dkd, dvd, d.up(dout), outd, std_, qd, kd, vd, B, Tq, Tk, H, Hkv, D, H * D, Hkv * D);
      ref().flash_attention_fwd(out.data(), st.data(), q.data(), k.data(), v.data(), B, Tq, Tk, H, Hkv, D, H * D, Hkv * D);
      ref().flash_attention_bwd(dq.data(), dk.data(), dv.data(), dout.data(), out.data(), st.data(), q.data(), k.data(),
                                v.data(), B, Tq, Tk, H, Hkv, D, H * D, Hkv * D);
      e = std::max({e, err(d.down(outd, nq), out), err(d.down(std_, ns), st), err(d.down(dqd, nq), dq),
                    err(d.down(dkd, nk), dk), err(d.down(dvd, nk), dv)});
    }
    return e;
  }});
  cs.push_back({"adamw, sum_squares", 1e-5, [](const Backend& be) {
    Dev d(be);
    const long n = 29;
    Vec p = rnd(n, 32), g = rnd(n, 33), m = rnd(n, 34), v = rnd(n, 35, 0, 1);
    float *pd = d.up(p), *md = d.up(m), *vd = d.up(v), *gd = d.up(g);
    be.f32.adamw(pd, gd, md, vd, n, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, 3, 0.5f);
    ref().adamw(p.data(), g.data(), m.data(), v.data(), n, 1e-2, 0.9, 0.95, 1e-8, 0.1, 3, 0.5);
    const double ss = be.f32.sum_squares(gd, n), ss_ref = ref().sum_squares(g.data(), n);
    return std::max({err(d.down(pd, n), p), err(d.down(md, n), m), err(d.down(vd, n), v), err({ss}, {ss_ref})});
  }});
  // fp8 casts with a scale that is not a power of two (the delayed-scaling recipe's 448 / amax): a value whose
  // float product lands on the other side of a rounding tie than the double one would differ by a quantum, so
  // the inputs are far from ties here (checked) and the results must agree to float rounding.
  cs.push_back({"fp8_quantize (E4M3, E5M2)", 1e-6, [](const Backend& be) {
    Dev d(be);
    const long n = 3001;
    Vec x = rnd(n, 36, -3, 3);
    double worst = 0;
    for (int format : {0, 1}) {
      const double scale = 448.0 / 2.9;
      Vec y(n);
      float* xd = d.up(x);
      float* yd = d.up(y);
      float* ad = d.up(Vec{0.0});
      float* sd = d.up(Vec{scale});  // (the scale in the backend's memory, as float)
      double amax_ref = 0;
      const double sf = double(float(scale));
      be.f32.fp8_quantize(yd, xd, n, sd, format, ad);
      ref().fp8_quantize(y.data(), x.data(), n, &sf, format, &amax_ref);
      const double amax = d.down(ad, 1)[0];
      Vec got = d.down(yd, n), near_tie(n);
      for (long i = 0; i < n; ++i) {  // skip elements within float rounding of a tie (none expected)
        const double t = x[i] * double(float(scale));
        const double q = tp::kernels::fp8_round(t, format), up = tp::kernels::fp8_round(t * (1 + 1e-6), format),
                     dn = tp::kernels::fp8_round(t * (1 - 1e-6), format);
        if (up != q || dn != q) got[i] = y[i];
      }
      worst = std::max({worst, err(got, y), err({amax}, {amax_ref})});
    }
    return worst;
  }});
  return cs;
}

// Columns [c0, c0 + w) of a row-major [rows, cols] matrix, and the inverse (into a full matrix).
Vec cols_of(const Vec& m, long rows, long cols, long c0, long w) {
  Vec out(rows * w);
  for (long r = 0; r < rows; ++r)
    for (long c = 0; c < w; ++c) out[r * w + c] = m[r * cols + c0 + c];
  return out;
}
void put_cols(Vec& m, const Vec& part, long rows, long cols, long c0, long w) {
  for (long r = 0; r < rows; ++r)
    for (long c = 0; c < w; ++c) m[r * cols + c0 + c] = part[r * w + c];
}
Vec sum_of(const Vec& a, const Vec& b) {  // what an all-reduce over two ranks gives
  Vec s(a.size());
  for (size_t i = 0; i < a.size(); ++i) s[i] = (double)(float)(a[i] + b[i]);
  return s;
}

// Cross-entropy over a vocabulary split in two shards, composed as the ranks' collectives would, against the
// unsharded float64 op; both loss forms, probabilities in place (raw) and in a separate buffer (shifted).
double ce_sharded(const Backend& be, CeForm form) {
  Dev d(be);
  const long N = 4, V = 12, Vl = 6;
  Vec logits = rnd(N * V, 40, -3, 3), probs(N * V), dl(N * V, 0.0);
  std::vector<int32_t> tg = ids(N, (int32_t)V, 41);
  const double scale = 0.125;
  const double loss_ref = ref().cross_entropy_fwd(probs.data(), logits.data(), tg.data(), N, V);
  ref().cross_entropy_bwd(dl.data(), probs.data(), tg.data(), N, V, scale);
  int32_t* tgd = d.up(tg);
  float* lg[2];
  Vec mxs[2], sums[2], tgts[2];
  for (int s = 0; s < 2; ++s) {
    lg[s] = d.up(cols_of(logits, N, V, s * Vl, Vl));
    float* mx = d.up(Vec(N));
    be.f32.row_max(mx, lg[s], N, Vl);
    mxs[s] = d.down(mx, N);
  }
  Vec parts = mxs[0];
  parts.insert(parts.end(), mxs[1].begin(), mxs[1].end());
  float* mx = d.up(mxs[1]);
  be.f32.max_combine(mx, d.up(parts), N, 2);
  float* pr[2];
  for (int s = 0; s < 2; ++s) {
    pr[s] = form == CeForm::raw_target_divide ? lg[s] : d.up(Vec(N * Vl));
    float *sd = d.up(Vec(N)), *td = d.up(Vec(N));
    be.f32.ce_shard_exp(pr[s], sd, td, lg[s], mx, tgd, N, Vl, s * Vl, form);
    sums[s] = d.down(sd, N);
    tgts[s] = d.down(td, N);
  }
  float *sum = d.up(sum_of(sums[0], sums[1])), *tgt = d.up(sum_of(tgts[0], tgts[1]));
  double e = 0;
  Vec got_p(N * V), got_dl(N * V);
  for (int s = 0; s < 2; ++s) {
    const double loss = be.f32.ce_shard_finish(pr[s], sum, tgt, mx, N, Vl, form);
    e = std::max(e, err({loss}, {loss_ref}));
    put_cols(got_p, d.down(pr[s], N * Vl), N, V, s * Vl, Vl);
    float* g = d.up(Vec(N * Vl));
    be.f32.scale(g, pr[s], (float)scale, N * Vl);
    be.f32.ce_shard_target_grad(g, tgd, N, Vl, s * Vl, (float)scale);
    put_cols(got_dl, d.down(g, N * Vl), N, V, s * Vl, Vl);
  }
  return std::max({e, err(got_p, probs), err(got_dl, dl)});
}

// LayerNorm over columns split in two shards (2D tensor parallelism) against the unsharded float64 op.
double ln_sharded(const Backend& be, bool with_b) {
  Dev d(be);
  const long N = 3, C = 10, Cl = 5;
  Vec x = rnd(N * C, 42), w = rnd(C, 43, 0.5, 1.5), b = rnd(C, 44), dy = rnd(N * C, 45);
  Vec y(N * C), mean(N), rstd(N), dx = rnd(N * C, 46), dw = rnd(C, 47), db = rnd(C, 48);
  const Vec dx0 = dx, dw0 = dw, db0 = db;
  ref().layernorm_fwd(y.data(), mean.data(), rstd.data(), x.data(), w.data(), with_b ? b.data() : nullptr, N, C, 1e-5);
  ref().layernorm_bwd(dx.data(), dw.data(), with_b ? db.data() : nullptr, dy.data(), x.data(), w.data(), mean.data(),
                      rstd.data(), N, C);
  float *xs[2], *ws[2], *dys[2], *ms[2], *rs[2];
  Vec part[2];
  for (int s = 0; s < 2; ++s) {
    xs[s] = d.up(cols_of(x, N, C, s * Cl, Cl));
    ws[s] = d.up(cols_of(w, 1, C, s * Cl, Cl));
    dys[s] = d.up(cols_of(dy, N, C, s * Cl, Cl));
    float* sd = d.up(Vec(N));
    be.f32.ln_shard_sum(sd, xs[s], N, Cl);
    part[s] = d.down(sd, N);
  }
  float* S = d.up(sum_of(part[0], part[1]));
  for (int s = 0; s < 2; ++s) {
    ms[s] = d.up(Vec(N));
    float* q = d.up(Vec(N));
    be.f32.ln_shard_sqdev(q, ms[s], S, xs[s], N, Cl, C);
    part[s] = d.down(q, N);
  }
  float* Q = d.up(sum_of(part[0], part[1]));
  Vec got_y(N * C), got_dx(N * C), got_dw(C), got_db(C);
  double e = 0;
  for (int s = 0; s < 2; ++s) {
    float* ys = d.up(Vec(N * Cl));
    rs[s] = d.up(Vec(N));
    be.f32.ln_shard_apply(ys, rs[s], xs[s], ms[s], Q, ws[s], with_b ? d.up(cols_of(b, 1, C, s * Cl, Cl)) : nullptr, N,
                          Cl, C, 1e-5f);
    put_cols(got_y, d.down(ys, N * Cl), N, C, s * Cl, Cl);
    e = std::max({e, err(d.down(ms[s], N), mean), err(d.down(rs[s], N), rstd)});
    float* sd = d.up(Vec(2 * N));
    be.f32.ln_shard_bwd_sums(sd, dys[s], xs[s], ws[s], ms[s], rs[s], N, Cl);
    part[s] = d.down(sd, 2 * N);
  }
  float* G = d.up(sum_of(part[0], part[1]));
  for (int s = 0; s < 2; ++s) {
    float *dxs = d.up(cols_of(dx0, N, C, s * Cl, Cl)), *dws = d.up(cols_of(dw0, 1, C, s * Cl, Cl));
    float* dbs = d.up(cols_of(db0, 1, C, s * Cl, Cl));
    be.f32.ln_shard_bwd_apply(dxs, dws, with_b ? dbs : nullptr, dys[s], xs[s], ws[s], ms[s], rs[s], G, N, Cl, C);
    put_cols(got_dx, d.down(dxs, N * Cl), N, C, s * Cl, Cl);
    put_cols(got_dw, d.down(dws, Cl), 1, C, s * Cl, Cl);
    put_cols(got_db, d.down(dbs, Cl), 1, C, s * Cl, Cl);
  }
  return std::max({e, err(got_y, y), err(got_dx, dx), err(got_dw, dw), err(got_db, db)});
}

std::vector<Case> shard_cases() {
  std::vector<Case> cs;
  cs.push_back({"cross_entropy_fwd, cross_entropy_bwd", 1e-5, [](const Backend& be) {
    Dev d(be);
    const long N = 5, V = 9;
    Vec logits = rnd(N * V, 36, -3, 3), probs(N * V), dl = rnd(N * V, 37);
    std::vector<int32_t> tg = ids(N, (int32_t)V, 38);
    float *pd = d.up(probs), *dld = d.up(dl);
    int32_t* tgd = d.up(tg);
    const double loss = be.f32.cross_entropy_fwd(pd, d.up(logits), tgd, N, V);
    be.f32.cross_entropy_bwd(dld, pd, tgd, N, V, 0.25f);
    const double loss_ref = ref().cross_entropy_fwd(probs.data(), logits.data(), tg.data(), N, V);
    ref().cross_entropy_bwd(dl.data(), probs.data(), tg.data(), N, V, 0.25);
    return std::max({err({loss}, {loss_ref}), err(d.down(pd, N * V), probs), err(d.down(dld, N * V), dl)});
  }});
  cs.push_back({"row_max, max_combine, ce_shard_exp, ce_shard_finish, ce_shard_target_grad", 1e-5,
                [](const Backend& be) {
                  return std::max(ce_sharded(be, CeForm::raw_target_divide),
                                  ce_sharded(be, CeForm::shifted_target_reciprocal));
                }});
  cs.push_back({"ln_shard_sum, ln_shard_sqdev, ln_shard_apply, ln_shard_bwd_sums, ln_shard_bwd_apply", 1e-5,
                [](const Backend& be) { return std::max(ln_sharded(be, true), ln_sharded(be, false)); }});
  cs.push_back({"embedding_fwd, embedding_bwd", 1e-6, [](const Backend& be) {
    double e = 0;
    const long B = 2, T = 3, C = 4, V = 7, maxT = 5;
    for (bool pos : {true, false}) {
      Dev d(be);
      Vec wte = rnd(V * C, 50), wpe = rnd(maxT * C, 51), dout = rnd(B * T * C, 52), out(B * T * C);
      Vec dwte = rnd(V * C, 53), dwpe = rnd(maxT * C, 54);
      std::vector<int32_t> tok = ids(B * T, (int32_t)V, 55);
      tok[1] = tok[4];  // a repeated token: its gradient rows add up
      float *od = d.up(out), *dwted = d.up(dwte), *dwped = d.up(dwpe);
      int32_t* tokd = d.up(tok);
      be.f32.embedding_fwd(od, tokd, d.up(wte), pos ? d.up(wpe) : nullptr, B, T, C);
      be.f32.embedding_bwd(dwted, pos ? dwped : nullptr, d.up(dout), tokd, B, T, C);
      ref().embedding_fwd(out.data(), tok.data(), wte.data(), pos ? wpe.data() : nullptr, B, T, C);
      ref().embedding_bwd(dwte.data(), pos ? dwpe.data() : nullptr, dout.data(), tok.data(), B, T, C);
      e = std::max({e, err(d.down(od, B * T * C), out), err(d.down(dwted, V * C), dwte),
                    err(d.down(dwped, maxT * C), dwpe)});
    }
    return e;
  }});
  cs.push_back({"embedding_shard_fwd, embedding_shard_bwd", 1e-6, [](const Backend& be) {
    Dev d(be);
    const long N = 7, C = 3, V = 8, Vl = 4;
    Vec wte = rnd(V * C, 56), dout = rnd(N * C, 57), out(N * C), dwte = rnd(V * C, 58);
    std::vector<int32_t> tok = ids(N, (int32_t)V, 59);
    tok[2] = tok[5];
    ref().embedding_fwd(out.data(), tok.data(), wte.data(), nullptr, 1, N, C);
    const Vec dwte0 = dwte;
    ref().embedding_bwd(dwte.data(), nullptr, dout.data(), tok.data(), 1, N, C);
    float* od = d.up(Vec(N * C, 9.0));
    float* doutd = d.up(dout);
    int32_t* tokd = d.up(tok);
    Vec got_dw;
    for (int s = 0; s < 2; ++s) {  // each shard writes its rows of out; its wte rows' gradients
      Vec wte_s(wte.begin() + s * Vl * C, wte.begin() + (s + 1) * Vl * C);
      be.f32.embedding_shard_fwd(od, tokd, d.up(wte_s), N, C, s * Vl, Vl);
      float* dw = d.up(Vec(dwte0.begin() + s * Vl * C, dwte0.begin() + (s + 1) * Vl * C));
      be.f32.embedding_shard_bwd(dw, doutd, tokd, N, C, s * Vl, Vl);
      Vec got = d.down(dw, Vl * C);
      got_dw.insert(got_dw.end(), got.begin(), got.end());
    }
    return std::max(err(d.down(od, N * C), out), err(got_dw, dwte));
  }});
  cs.push_back({"add_positions, positions_bwd", 1e-6, [](const Backend& be) {
    Dev d(be);
    const long rows = 5, C = 3, Tn = 3, row0 = 2;
    Vec x = rnd(rows * C, 60), wpe = rnd(Tn * C, 61), dwpe = rnd(Tn * C, 62), dx = rnd(rows * C, 63);
    float *xd = d.up(x), *dwped = d.up(dwpe);
    be.f32.add_positions(xd, d.up(wpe), rows, C, Tn, row0);
    be.f32.positions_bwd(dwped, d.up(dx), rows, C, Tn, row0);
    for (long i = 0; i < rows; ++i)
      for (long c = 0; c < C; ++c) {
        x[i * C + c] += wpe[((row0 + i) % Tn) * C + c];
        dwpe[((row0 + i) % Tn) * C + c] += dx[i * C + c];
      }
    return std::max(err(d.down(xd, rows * C), x), err(d.down(dwped, Tn * C), dwpe));
  }});
  return cs;
}

// The mixture-of-experts ops in one chain (route, dispatch, combine and their backwards): the router's slots must
// be identical, the values within float32.
std::vector<Case> moe_cases() {
  std::vector<Case> cs;
  cs.push_back({"moe_route_dispatch_combine", 1e-5, [](const Backend& be) {
    const long N = 7, E = 3, k = 2, C = 4, cap = 4, rows = E * cap;  // 14 copies, 12 slots: some dropped
    Dev d(be);
    Vec lg = rnd(N * E, 51, -2, 2), x = rnd(N * C, 52), dy = rnd(N * C, 53);
    Vec probs(N * E), gate(N * k), buf(rows * C), y(N * C), dbuf(rows * C, 0.0), dgate(N * k, 0.0), dx(N * C, 0.0),
        dlg(N * E, 0.0);
    std::vector<int32_t> slot(N * k), got_slot(N * k);
    ref().moe_route(probs.data(), slot.data(), gate.data(), lg.data(), N, E, k, cap, 1);
    ref().moe_dispatch(buf.data(), x.data(), slot.data(), N, k, C, rows);
    ref().moe_combine(y.data(), buf.data(), slot.data(), gate.data(), N, k, C);
    ref().moe_combine_bwd(dbuf.data(), dgate.data(), dy.data(), buf.data(), slot.data(), gate.data(), N, k, C);
    ref().moe_dispatch_bwd(dx.data(), dbuf.data(), slot.data(), N, k, C);
    ref().moe_route_bwd(dlg.data(), probs.data(), slot.data(), dgate.data(), N, E, k, cap, 1, 0.1);
    float *pd = d.up(Vec(N * E, 0.0)), *gd = d.up(Vec(N * k, 0.0)), *bd = d.up(Vec(rows * C, 0.0)),
          *yd = d.up(Vec(N * C, 0.0)), *dbd = d.up(Vec(rows * C, 0.0)), *dgd = d.up(Vec(N * k, 0.0)),
          *dxd = d.up(Vec(N * C, 0.0)), *dld = d.up(Vec(N * E, 0.0)), *xd = d.up(x);
    int32_t* sd = d.up(std::vector<int32_t>(N * k, 0));
    be.f32.moe_route(pd, sd, gd, d.up(lg), N, E, k, cap, 1);
    be.f32.moe_dispatch(bd, xd, sd, N, k, C, rows);
    be.f32.moe_combine(yd, bd, sd, gd, N, k, C);
    be.f32.moe_combine_bwd(dbd, dgd, d.up(dy), bd, sd, gd, N, k, C);
    be.f32.moe_dispatch_bwd(dxd, dbd, sd, N, k, C);
    be.f32.moe_route_bwd(dld, pd, sd, dgd, N, E, k, cap, 1, 0.1f);
    be.copy(got_slot.data(), sd, sizeof(int32_t) * N * k, CopyKind::device_to_host, Stream{});
    be.sync();
    EXPECT_EQ(got_slot, slot) << be.name;
    int dropped = 0;
    for (int32_t v : slot) dropped += v < 0;
    EXPECT_GT(dropped, 0);
    double e = 0;
    for (auto [dv, hv, n] : {std::tuple{pd, &probs, N * E}, {gd, &gate, N * k}, {yd, &y, N * C}, {dgd, &dgate, N * k},
                             {dxd, &dx, N * C}, {dld, &dlg, N * E}})
      e = std::max(e, err(d.down(dv, n), *hv));
    return e;
  }});
  return cs;
}

std::vector<Case> all_cases() {
  std::vector<Case> cs = elementwise_cases(), sh = shard_cases(), mo = moe_cases();
  cs.insert(cs.end(), sh.begin(), sh.end());
  cs.insert(cs.end(), mo.begin(), mo.end());
  return cs;
}

// Every function pointer of a table, in declaration order (the table is a struct of function pointers only).
template <class T>
std::vector<uintptr_t> entries(const OpTable<T>& t) {
  static_assert(sizeof(OpTable<T>) % sizeof(uintptr_t) == 0);
  std::vector<uintptr_t> e(sizeof(OpTable<T>) / sizeof(uintptr_t));
  std::memcpy(e.data(), &t, sizeof(OpTable<T>));
  return e;
}

}  // namespace

TEST(BackendOps, EveryOpOfEveryBackendMatchesTheFloat64Reference) {
  const std::vector<Case> cases = all_cases();
  for (const Backend* be : available_backends()) {
    for (const Case& c : cases) {
      const double e = c.run(*be);
      EXPECT_LE(e, c.tol) << "backend " << be->name << ", op " << c.name;
    }
  }
}

// The runtime fuses the global-norm clip into AdamW (exec/runtime/runtime_update.cpp): adamw with gscale s must be, bit for
// bit, ops::scale(g, s) followed by adamw with gscale 1, on every backend (so fusing changed no result).
TEST(BackendOps, AdamwGradientScaleIsTheClipsScale) {
  for (const Backend* be : available_backends()) {
    SCOPED_TRACE(be->name);
    Dev d(*be);
    const long n = 1031;
    const Vec p = rnd(n, 61), g = rnd(n, 62, -3, 3), m = rnd(n, 63), v = rnd(n, 64, 0, 1);
    float *p1 = d.up(p), *g1 = d.up(g), *m1 = d.up(m), *v1 = d.up(v);
    float *p2 = d.up(p), *g2 = d.up(g), *m2 = d.up(m), *v2 = d.up(v);
    const float s = 0.3719f;
    be->f32.scale(g1, g1, s, n);
    be->f32.adamw(p1, g1, m1, v1, n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 5, 1.f);
    be->f32.adamw(p2, g2, m2, v2, n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 5, s);
    EXPECT_EQ(d.down(p1, n), d.down(p2, n));
    EXPECT_EQ(d.down(m1, n), d.down(m2, n));
    EXPECT_EQ(d.down(v1, n), d.down(v2, n));
    EXPECT_EQ(d.down(g2, n), Vec(g.begin(), g.end()));  // g itself is not written
  }
}

TEST(BackendOps, TablesHaveEveryEntry) {
  for (const Backend* be : available_backends()) {
    for (uintptr_t p : entries(be->f32)) EXPECT_NE(p, 0u) << be->name << " f32";
    for (uintptr_t p : entries(be->f64)) EXPECT_NE(p, 0u) << be->name << " f64";
    for (const void* f : {(const void*)be->alloc, (const void*)be->free, (const void*)be->alloc_pinned,
                          (const void*)be->free_pinned, (const void*)be->copy, (const void*)be->stream_create,
                          (const void*)be->stream_destroy, (const void*)be->stream_sync, (const void*)be->event_create,
                          (const void*)be->event_destroy, (const void*)be->event_record, (const void*)be->stream_wait,
                          (const void*)be->sync})
      EXPECT_NE(f, nullptr) << be->name;
  }
}

TEST(BackendOps, MemoryStreamsAndEvents) {
  for (const Backend* be : available_backends()) {
    const std::vector<double> host = {1.5, -2, 3.25, 0, 7};
    const size_t bytes = sizeof(double) * host.size();
    void* a = be->alloc(bytes);
    void* b = be->alloc(bytes);
    void* pinned = be->alloc_pinned(bytes);
    ASSERT_NE(a, nullptr);
    ASSERT_NE(pinned, nullptr);
    EXPECT_EQ((uintptr_t)a % alignof(std::max_align_t), 0u) << be->name;
    Stream s = be->stream_create();
    Event ev = be->event_create();
    be->copy(pinned, host.data(), bytes, CopyKind::host_to_host, s);
    be->copy(a, pinned, bytes, CopyKind::host_to_device, s);
    be->copy(b, a, bytes, CopyKind::device_to_device, s);
    be->event_record(ev, s);
    be->stream_wait(Stream{}, ev);
    std::vector<double> back(host.size());
    be->copy(back.data(), b, bytes, CopyKind::device_to_host, Stream{});
    be->stream_sync(Stream{});
    be->stream_sync(s);
    EXPECT_EQ(back, host) << be->name;
    be->event_destroy(ev);
    be->stream_destroy(s);
    be->free_pinned(pinned);
    be->free(b);
    be->free(a);
  }
}

TEST(BackendOps, ScopesNestPerThreadAndNamesResolve) {
  EXPECT_STREQ(current_backend().name, "cpu");
  Backend other = cpu_backend();  // a second backend value in the same process
  other.name = "cpu-copy";
  {
    BackendScope outer(other);
    EXPECT_EQ(&current_backend(), &other);
    {
      BackendScope inner(cpu_backend());
      EXPECT_EQ(&current_backend(), &cpu_backend());
    }
    EXPECT_EQ(&current_backend(), &other);
  }
  EXPECT_EQ(&current_backend(), &cpu_backend());
  std::string why;
  EXPECT_EQ(find_backend("cpu", why), &cpu_backend());
  EXPECT_EQ(find_backend("emu", why), &emu_backend());
  // cuda: dlopened when built in (exec/backends/cuda/cuda_loader.hpp): a device, or null naming cudaGetDeviceCount's error.
  why.clear();
  const Backend* cuda = find_backend("cuda", why);
  if (!cuda_built_in()) EXPECT_EQ(why, "backend cuda is not built in this version");
  else if (!cuda) EXPECT_EQ(why.rfind("no CUDA device: cudaGetDeviceCount", 0), 0u) << why;
  else EXPECT_STREQ(cuda->name, "cuda");
  EXPECT_EQ(find_backend("tpu", why), nullptr);
  EXPECT_NE(why.find("unknown backend"), std::string::npos);
  ASSERT_FALSE(available_backends().empty());
  EXPECT_STREQ(available_backends().front()->name, "cpu");
}

// The emu backend checks every pointer an op gets against its registry of allocations: a host pointer, a
// freed buffer or an extent past the end of a buffer throws, naming the op and the argument, before any
// kernel runs; a copy checks its device side.
TEST(BackendOps, EmuRejectsMemoryItDidNotAllocate) {
  const Backend& be = emu_backend();
  auto message = [](const std::function<void()>& f) {
    try {
      f();
    } catch (const std::exception& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  float* d = static_cast<float*>(be.alloc(sizeof(float) * 8));
  std::vector<float> host(8, 1.f);
  be.f32.fill(d, 2.f, 8);  // its own memory: fine
  std::string m = message([&] { be.f32.add(d, d, host.data(), 8); });
  EXPECT_NE(m.find("emu backend: add: argument b"), std::string::npos) << m;
  m = message([&] { be.f32.scale(d, d, 2.f, 9); });  // one element past the end
  EXPECT_NE(m.find("scale: argument y"), std::string::npos) << m;
  m = message([&] { be.copy(host.data(), d, sizeof(float) * 8, CopyKind::host_to_device, Stream{}); });
  EXPECT_NE(m.find("copy: argument dst"), std::string::npos) << m;
  be.copy(host.data(), d, sizeof(float) * 8, CopyKind::device_to_host, Stream{});
  EXPECT_EQ(host[7], 2.f);
  be.free(d);
  m = message([&] { be.f32.fill(d, 0.f, 1); });  // freed
  EXPECT_NE(m.find("fill: argument y"), std::string::npos) << m;
}
