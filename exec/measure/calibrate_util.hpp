// calibrate_util: what the CPU calibrate (calibrate.cpp) and the device calibrate (calibrate_device.cpp,
// calibrate_collectives.cpp) share — timing of op calls, curve assembly, labels, device buffers (DevBuf), and THE element-wise mix of one GPT layer with the bytes the
// simulator's cost model charges for it (one definition, so both profiles hold the same quantity).
// Invariants: per_call returns the median seconds per call of batches lasting >= ~50 us; `sync` is called before a
// batch starts and after its last call (a device backend's ops are asynchronous: be.sync; on the CPU a no-op), so
// a batch's time is the device's. make_curve returns sizes strictly increasing, efficiencies in [1e-4, 1].
#pragma once
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include <stdexcept>

#include "exec/backends/backend.hpp"
#include "exec/backends/ops.hpp"
#include "models/json_check.hpp"

namespace tp::exec::calib {

using Clock = std::chrono::steady_clock;
inline double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// Median seconds per call of f(): calls are batched so that one timed batch lasts >= ~50 us, and batches repeat
// for at least min_s (and at least 3 batches). sync() ends every timed batch (and precedes the first).
template <class F, class S>
double per_call(F&& f, double min_s, S&& sync) {
  f();  // warm: caches, pages, a library's plan for the shape
  sync();
  auto t0 = Clock::now();
  f();
  sync();
  double one = std::max(1e-9, since(t0));
  long k = std::max(1L, (long)(50e-6 / one));
  std::vector<double> ts;
  auto start = Clock::now();
  while (ts.size() < 3 || (since(start) < min_s && ts.size() < 100000)) {
    auto a = Clock::now();
    for (long i = 0; i < k; ++i) f();
    sync();
    ts.push_back(since(a) / (double)k);
  }
  return median(ts);
}
template <class F>
double per_call(F&& f, double min_s) {
  return per_call(f, min_s, [] {});
}

inline std::vector<float> random_floats(size_t n, uint32_t seed) {
  std::mt19937 g(seed);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::vector<float> v(n);
  for (auto& x : v) x = u(g);
  return v;
}

// Sorted (x, eff) points -> a valid curve: merge equal x (mean), clamp eff to [1e-4, 1].
inline json make_curve(std::vector<std::pair<double, double>> pts) {
  std::sort(pts.begin(), pts.end());
  json c = json::array();
  for (size_t i = 0; i < pts.size();) {
    size_t j = i;
    double sum = 0;
    while (j < pts.size() && pts[j].first == pts[i].first) sum += pts[j++].second;
    double e = std::clamp(sum / (double)(j - i), 1e-4, 1.0);
    if (pts[i].first > 0 && std::isfinite(pts[i].first)) c.push_back({pts[i].first, e});
    i = j;
  }
  return c;
}

inline std::string host_name() {
  char b[256] = {0};
  if (gethostname(b, sizeof b - 1) != 0) return "host";
  std::string s = b;
  for (char& ch : s)
    if (!std::isalnum((unsigned char)ch) && ch != '-') ch = '-';
  return s.empty() ? "host" : s;
}

inline std::string fmt(const char* f, double x) {
  char b[64];
  std::snprintf(b, sizeof b, f, x);
  return b;
}

// Device memory of the backend, freed with the object; throws when the device is out of memory.
struct DevBuf {
  const Backend* be = nullptr;
  void* p = nullptr;
  DevBuf(const Backend& b, size_t bytes, const std::string& what) : be(&b), p(b.alloc(std::max<size_t>(bytes, 64))) {
    if (!p) throw std::runtime_error("calibrate: out of device memory for " + what + " (" + fmt("%.3g", (double)bytes) + " bytes)");
  }
  ~DevBuf() { be->free(p); }
  DevBuf(const DevBuf&) = delete;
  DevBuf& operator=(const DevBuf&) = delete;
  float* f() const { return static_cast<float*>(p); }
  uint16_t* h() const { return static_cast<uint16_t*>(p); }
};

// n floats of uniform(-1, 1) noise written to device memory at p.
inline void fill_random(const Backend& be, float* p, long n, uint32_t seed) {
  const long chunk = 1L << 20;
  std::vector<float> r = random_floats((size_t)std::min(n, chunk), seed);
  for (long i = 0; i < n; i += chunk) be.copy(p + i, r.data(), sizeof(float) * (size_t)std::min(chunk, n - i), CopyKind::host_to_device, {});
  be.sync();
}

// The buffers of one GPT (GELU) layer's element-wise ops at n tokens, hidden h, ffn f (host or device memory).
struct MixPtrs {
  float *x, *y, *dx, *big, *big2, *dbig, *qkv;  // [n, h] x3, [n, f] x3, [n, 3h]
  float *mean, *rstd;                            // [n]
  const float *w, *b;                            // [max(3h, f)]: LayerNorm / bias parameters
  float *gw, *gb;                                // [max(3h, f)]: their gradients
};
// Elements of each buffer of MixPtrs (x, y, dx: nh; big, big2, dbig: nf; qkv: 3nh; mean, rstd: n).
inline long mix_param_elements(long h, long f) { return std::max(3 * h, f); }

// The layer's element-wise ops, forward and backward, as exec/model/gpt.cpp runs them (10 op kinds).
inline void layer_elementwise(const MixPtrs& m, long n, long h, long f) {
  // forward: ln1, qkv bias, proj bias + residual, ln2, fc1 bias, gelu, fc2 bias + residual
  ops::layernorm_fwd(m.y, m.mean, m.rstd, m.x, m.w, m.b, n, h, 1e-5f);
  ops::add_bias(m.qkv, m.qkv, m.b, n, 3 * h);
  ops::add_bias(m.y, m.y, m.b, n, h);
  ops::add(m.y, m.y, m.x, n * h);
  ops::layernorm_fwd(m.dx, m.mean, m.rstd, m.y, m.w, m.b, n, h, 1e-5f);
  ops::add_bias(m.big, m.big, m.b, n, f);
  ops::gelu_fwd(m.big2, m.big, n * f);
  ops::add_bias(m.y, m.y, m.b, n, h);
  ops::add(m.y, m.y, m.x, n * h);
  // backward: fc2 bias grad, gelu bwd, fc1 bias grad, ln2 bwd, proj bias grad, qkv bias grad, ln1 bwd, residual
  ops::bias_bwd(m.gb, m.y, n, h);
  ops::gelu_bwd_set(m.dbig, m.big, m.big2, n * f);
  ops::bias_bwd(m.gb, m.dbig, n, f);
  ops::layernorm_bwd(m.dx, m.gw, m.gb, m.y, m.x, m.w, m.mean, m.rstd, n, h);
  ops::bias_bwd(m.gb, m.dx, n, h);
  ops::bias_bwd(m.gb, m.qkv, n, 3 * h);
  ops::layernorm_bwd(m.dx, m.gw, m.gb, m.y, m.x, m.w, m.mean, m.rstd, n, h);
  ops::accumulate(m.dx, m.y, n * h);
}
constexpr double kMixOps = 10;  // op kinds of layer_elementwise: the curve's x is its bytes per op
// The bytes sim/op_cost.cpp charges for those ops at e bytes per element: forward LayerNorm 8nh x2, residual
// 13nh x2, activation 8nf; backward residual 13nh x2, activation 12nf, LayerNorm 16nh x2 (e = 4).
inline double layer_elementwise_sim_bytes(long n, long h, long f) {
  const double nh = (double)n * h, nf = (double)n * f;
  return 2 * 8 * nh + 2 * 13 * nh + 8 * nf + 2 * 13 * nh + 12 * nf + 2 * 16 * nh;
}

// The optimizer step as the runtime runs it (gradient-norm sum of squares, then AdamW) over n fp32 parameters;
// the simulator charges 24 B per parameter (sim/program_build.cpp, fp32). Returns the sum (keep it).
inline double optimizer_step(float* p, const float* g, float* m, float* v, long n) {
  double s = ops::sum_squares<float>(g, n);
  ops::adamw<float>(p, g, m, v, n, 1e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 10, 0.5f);
  return s;
}
constexpr double kOptimizerBytesPerParam = 24;

}  // namespace tp::exec::calib
