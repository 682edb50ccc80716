// selftest: runs the checks of selftest_cases.cpp on one backend (selftest.hpp). Each check calls the op once
// with the CPU float64 table on host copies (the reference) and once with the backend's fp32 table on memory
// from the backend's alloc, then reads the compared outputs back with the backend's copy. A check with bf16
// operands makes both calls under Bf16GemmScope (the reference rounds the same operands in float64).
// On a backend with an attention library (Backend::set_attention_library: cuDNN on cuda), a check that names
// outputs in lse_pairs (the flash stats) runs twice: with the own kernels, as on every backend, and with the
// library, whose stats pairs are compared as the log-sum-exp m - log c they stand for (the library's are (lse, 1)),
// within the library's tolerance (kSelftestTolLibraryAttention).
#include "exec/selftest/selftest.hpp"

#include <algorithm>
#include <cmath>
#include <exception>
#include <stdexcept>
#include <string>

#include "exec/selftest/selftest_harness.hpp"

namespace tp::exec {
namespace {

using selftest::Ints;
using selftest::Spec;
using selftest::Vec;

// Backend memory of one check, freed at the end.
struct Mem {
  const Backend& be;
  std::vector<void*> blocks;
  explicit Mem(const Backend& b) : be(b) {}
  ~Mem() {
    for (void* p : blocks) be.free(p);
  }
  Mem(const Mem&) = delete;
  Mem& operator=(const Mem&) = delete;
  void* raw(size_t bytes) {
    void* p = be.alloc(std::max<size_t>(bytes, 64));
    if (!p) throw std::runtime_error("out of memory allocating " + std::to_string(bytes) + " bytes");
    blocks.push_back(p);
    return p;
  }
  template <class T, class S>
  T* up(const std::vector<S>& v) {
    std::vector<T> h(v.begin(), v.end());
    T* d = static_cast<T*>(raw(sizeof(T) * h.size()));
    if (!h.empty()) be.copy(d, h.data(), sizeof(T) * h.size(), CopyKind::host_to_device, Stream{});
    return d;
  }
  Vec down(const float* d, size_t n) {
    std::vector<float> h(n);
    if (n) be.copy(h.data(), d, sizeof(float) * n, CopyKind::device_to_host, Stream{});
    be.sync();
    return Vec(h.begin(), h.end());
  }
};

double scaled_err(double got, double want) {
  const double e = std::abs(got - want) / (1 + std::abs(want));
  return std::isnan(e) ? INFINITY : e;
}

// Each stats pair (m, c) of v as the log-sum-exp it stands for: (m - log c, 0).
void as_lse(Vec& v) {
  for (size_t i = 0; i + 1 < v.size(); i += 2) v[i] -= std::log(v[i + 1]), v[i + 1] = 0;
}

// The attention library on or off for the scope (on backends that have one).
struct AttentionScope {
  AttentionScope(const Backend& b, bool on) : be(b), prev(b.set_attention_library(on)) {}
  ~AttentionScope() { be.set_attention_library(prev); }
  const Backend& be;
  bool prev;
};

OpCheck run_one(const Backend& be, const Spec& s, bool library = false) {
  const double tol = library ? std::max(s.tol, kSelftestTolLibraryAttention)
                     : s.tol > 0 ? s.tol : kSelftestTolF32 * std::sqrt(std::max(1.0, s.red));
  OpCheck c{s.op, s.shape, s.variant, 0, tol, CheckStatus::pass, ""};
  std::vector<Vec> ref = s.bufs;
  std::vector<Ints> refi = s.ints;
  std::vector<double*> rp;
  std::vector<int32_t*> rip;
  for (Vec& v : ref) rp.push_back(v.data());
  for (Ints& v : refi) rip.push_back(v.data());
  double want = 0;
  {
    BackendScope scope(cpu_backend());
    Bf16GemmScope b16(cpu_backend(), s.bf16);
    want = s.f64(cpu_backend().f64, rp.data(), rip.data());
  }
  try {
    Mem m(be);
    std::vector<float*> dp;
    std::vector<int32_t*> dip;
    for (const Vec& v : s.bufs) dp.push_back(m.up<float>(v));
    for (const Ints& v : s.ints) dip.push_back(m.up<int32_t>(v));
    double got = 0;
    {
      BackendScope scope(be);  // (a body that reads a value back copies through the current backend)
      Bf16GemmScope b16(be, s.bf16);
      got = s.f32(be.f32, dp.data(), dip.data());
      be.sync();
    }
    if (s.scalar) c.err = scaled_err(got, want);
    for (int o : s.outs) {
      Vec d = m.down(dp[size_t(o)], s.bufs[size_t(o)].size());
      Vec w = ref[size_t(o)];
      if (library && std::find(s.lse_pairs.begin(), s.lse_pairs.end(), o) != s.lse_pairs.end()) as_lse(d), as_lse(w);
      for (size_t i = 0; i < d.size(); ++i) c.err = std::max(c.err, scaled_err(d[i], w[i]));
    }
    for (int o : s.iouts) {  // integer outputs must be identical
      const Ints& want_i = refi[size_t(o)];
      Ints got_i(want_i.size());
      if (!got_i.empty())
        be.copy(got_i.data(), dip[size_t(o)], sizeof(int32_t) * got_i.size(), CopyKind::device_to_host, Stream{});
      be.sync();
      for (size_t i = 0; i < got_i.size() && c.message.empty(); ++i)
        if (got_i[i] != want_i[i]) {
          c.err = INFINITY;
          c.message = "integer output " + std::to_string(o) + " element " + std::to_string(i) + ": got " +
                      std::to_string(got_i[i]) + ", want " + std::to_string(want_i[i]);
        }
    }
  } catch (const std::exception& e) {
    c.message = e.what();
    c.status = c.message.find("not supported") != std::string::npos ? CheckStatus::unsupported : CheckStatus::fail;
    return c;
  }
  if (!(c.err <= c.tol)) c.status = CheckStatus::fail;
  return c;
}

// The words (runs of [a-z0-9_]) of s.
std::vector<std::string> words(const std::string& s) {
  std::vector<std::string> w(1);
  for (char ch : s) {
    if ((ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') || ch == '_') w.back() += ch;
    else if (!w.back().empty()) w.emplace_back();
  }
  return w;
}

}  // namespace

// A captured graph (backends that capture: cuda, emu-device; the steady step's CUDA graph, exec/runtime/step_graph.hpp)
// against what its ops compute: y = 2x, y += x, x = y (a device copy) and the cross-entropy's loss to device memory,
// captured once. Nothing may run before the launch; two launches read the buffers as they are (x = 9 x0); a
// read-back inside the capture must be refused. The diagnosis when the selftest's training with graphs fails.
OpCheck selftest_graph_check(const Backend& be) {
  constexpr long N = 33, V = 17, n = N * V;
  OpCheck c{"graph_capture", "N 33, V 17", "scale, add, copy, cross_entropy_fwd_to; launched twice", 0, 1e-4,
            CheckStatus::pass, ""};
  try {
    BackendScope scope(be);
    Mem m(be);
    Vec x0(static_cast<size_t>(n)), lg(static_cast<size_t>(n));
    Ints tg(static_cast<size_t>(N));
    for (long i = 0; i < n; ++i) {
      x0[size_t(i)] = 0.25 * double((i * 7) % 11) - 1;
      lg[size_t(i)] = 0.1 * double((i * 5) % 13);
    }
    for (long r = 0; r < N; ++r) tg[size_t(r)] = int32_t((r * 3) % V);
    float* x = m.up<float>(x0);
    float* y = m.up<float>(Vec(size_t(n), 0.0));
    float* logits = m.up<float>(lg);
    float* probs = static_cast<float*>(m.raw(sizeof(float) * size_t(n)));
    int32_t* targets = m.up<int32_t>(tg);
    double* loss = static_cast<double*>(m.raw(sizeof(double)));
    bool refused = false;
    std::string why;
    void* g = capture_graph(be, [&] {
      ops::scale(y, x, 2.f, n);
      ops::add(y, y, x, n);
      be.copy(x, y, sizeof(float) * size_t(n), CopyKind::device_to_device, Stream{});
      ops::cross_entropy_fwd_to(probs, loss, logits, targets, N, V);
      try {
        (void)ops::sum_squares(x, n);
      } catch (const std::exception&) {
        refused = true;
      }
    }, why);
    if (!g) throw std::runtime_error("capture: " + why);
    const Vec before = m.down(x, size_t(n));
    be.graph_launch(g);
    be.graph_launch(g);
    const Vec after = m.down(x, size_t(n));
    double got_loss = 0;
    be.copy(&got_loss, loss, sizeof got_loss, CopyKind::device_to_host, Stream{});
    be.graph_destroy(g);
    double want_loss = 0;
    for (long r = 0; r < N; ++r) {
      double mx = -1e300, s = 0;
      for (long j = 0; j < V; ++j) mx = std::max(mx, lg[size_t(r * V + j)]);
      for (long j = 0; j < V; ++j) s += std::exp(lg[size_t(r * V + j)] - mx);
      want_loss += std::log(s) + mx - lg[size_t(r * V + tg[size_t(r)])];
    }
    for (long i = 0; i < n; ++i) {
      if (before[size_t(i)] != double(float(x0[size_t(i)]))) c.message = "the captured ops ran before the launch";
      c.err = std::max(c.err, scaled_err(after[size_t(i)], 9 * x0[size_t(i)]));
    }
    c.err = std::max(c.err, scaled_err(got_loss, want_loss));
    if (!refused) c.message = "a read-back inside the capture was not refused";
    if (!c.message.empty() || !(c.err <= c.tol)) c.status = CheckStatus::fail;
  } catch (const std::exception& e) {
    c.status = CheckStatus::fail;
    c.message = e.what();
  }
  return c;
}

std::vector<std::string> unchecked_ops(bool quick) {
  std::vector<std::string> named;
  for (const selftest::Spec& s : selftest::all_specs(quick))
    for (const std::string& text : {s.op, s.variant})
      for (std::string& w : words(text)) named.push_back(std::move(w));
  std::vector<std::string> missing;
  for (std::string_view op : ops::op_names())
    if (std::find(named.begin(), named.end(), op) == named.end()) missing.emplace_back(op);
  return missing;
}

SelftestResult run_selftest(const Backend& b, bool quick) {
  SelftestResult r;
  r.backend = b.name;
  auto count = [&r](OpCheck c) {
    r.checks.push_back(std::move(c));
    const CheckStatus st = r.checks.back().status;
    (st == CheckStatus::pass ? r.passed : st == CheckStatus::fail ? r.failed : r.unsupported)++;
  };
  for (const Spec& s : selftest::all_specs(quick)) {
    if (s.lse_pairs.empty() || !b.set_attention_library) {
      count(run_one(b, s));
      continue;
    }
    {
      AttentionScope own(b, false);
      OpCheck c = run_one(b, s);
      c.variant += ", own kernels";
      count(std::move(c));
    }
    AttentionScope lib(b, true);
    OpCheck c = run_one(b, s, true);
    c.variant += ", attention library";
    count(std::move(c));
  }
  if (b.capture_begin) count(selftest_graph_check(b));
  if (const std::vector<std::string> missing = unchecked_ops(quick); !missing.empty()) {
    OpCheck c{"coverage", "", "", 0, 0, CheckStatus::fail, "ops without a check:"};
    for (const std::string& op : missing) c.message += " " + op;
    count(std::move(c));
  }
  return r;
}

}  // namespace tp::exec
