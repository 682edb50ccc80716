// selftest_harness: how one selftest check is described (selftest_cases.cpp) and run (selftest.cpp).
// A Spec holds the initial contents of every buffer of one op call (inputs, and outputs whose old values
// matter for accumulating ops), which of them are compared afterwards, and one generic body called twice:
// with the CPU float64 table on host copies (the reference) and with the backend's fp32 table on backend memory.
// Invariant: a body uses only the table and the pointers it is given (p: float buffers, ip: int32 buffers,
// written only where the op outputs integers), so the same code runs on host and device memory.
#pragma once
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <utility>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "exec/backends/backend.hpp"

namespace tp::exec::selftest {

using Vec = std::vector<double>;
using Ints = std::vector<int32_t>;

struct Spec {
  std::string op, shape, variant;
  std::vector<Vec> bufs;
  std::vector<Ints> ints;
  std::vector<int> outs;  // indices into bufs compared after the call
  double red = 1;         // reduction length: the tolerance grows with its square root
  bool scalar = false;    // the returned value is compared too
  std::function<double(const OpTable<double>&, double* const*, int32_t* const*)> f64;
  std::function<double(const OpTable<float>&, float* const*, int32_t* const*)> f32;
  std::vector<int> iouts;  // indices into ints compared exactly after the call (the router's slots)
  bool bf16 = false;       // both calls with bf16 GEMM operands (Bf16GemmScope on the CPU and on the backend)
  double tol = 0;          // when > 0, the tolerance instead of kSelftestTolF32 * sqrt(red)
  std::vector<int> lse_pairs;  // outputs of (m, c) stats pairs: with an attention library, compared as m - log c
};

// s with bf16 GEMM operands ("bf16 operands" appended to its variant) and, when tol > 0, that tolerance.
inline Spec bf16_operands(Spec s, double tol = 0) {
  s.bf16 = true;
  s.tol = tol;
  s.variant += s.variant.empty() ? "bf16 operands" : ", bf16 operands";
  return s;
}

// The body's signature; TT is the element type inside it (double for the reference, float for the backend).
#define TP_SELFTEST_BODY [=](const auto& t, auto* const* p, int32_t* const* ip) -> double
#define TT std::remove_cvref_t<decltype(*p[0])>

template <class Body>
void add(std::vector<Spec>& v, Spec s, Body body) {
  s.f64 = body;
  s.f32 = body;
  v.push_back(std::move(s));
}

// Uniform values in [lo, hi), rounded to float so the reference sees exactly the backend's inputs.
inline Vec rnd(long n, uint32_t seed, double lo = -1, double hi = 1) {
  std::mt19937 g(seed);
  std::uniform_real_distribution<double> u(lo, hi);
  Vec v(size_t(n > 0 ? n : 0));
  for (double& x : v) x = double(float(u(g)));
  return v;
}
inline Ints ids(long n, int32_t below, uint32_t seed) {
  std::mt19937 g(seed);
  Ints v(size_t(n > 0 ? n : 0));
  for (int32_t& x : v) x = int32_t(g() % uint32_t(below));
  return v;
}

// A shape's text: "M 5, N 7, K 9".
inline std::string sh(std::initializer_list<std::pair<const char*, long>> d) {
  std::string s;
  for (const auto& [n, v] : d) s += (s.empty() ? "" : ", ") + std::string(n) + " " + std::to_string(v);
  return s;
}

// The GEMM-shaped ops' checks (selftest_gemm_cases.cpp), appended to cs.
void gemm_cases(std::vector<Spec>& cs, bool quick);
std::vector<Spec> all_specs(bool quick);

}  // namespace tp::exec::selftest
