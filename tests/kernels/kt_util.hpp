// kt_util: helpers of the kernel tests — device-like buffers of a storage type made from float64 values (so the
// float64 reference sees exactly the rounded inputs the kernel sees), per-dtype tolerances, the element-wise
// check, and the shape / block-size sets (smaller under TP_KERNEL_TESTS_QUICK=1, which the sanitizer builds set).
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "exec/kernels/emulator/emu.hpp"
#include "exec/kernels/kernels.hpp"

namespace kt {
using tp::kernels::bf16;
using Vec = std::vector<double>;

inline double to_d(float x) { return x; }
inline double to_d(double x) { return x; }
inline double to_d(bf16 x) { return tp::kernels::to_float(x); }
template <class T>
T from_d(double x) {
  if constexpr (std::is_same_v<T, bf16>) return tp::kernels::to_bf16(float(x));
  else return T(x);
}

// A buffer of T plus its values as double.
template <class T>
struct Buf {
  std::vector<T> v;
  explicit Buf(const Vec& d) {
    v.reserve(d.size());
    for (double x : d) v.push_back(from_d<T>(x));
  }
  T* data() { return v.data(); }
  Vec dbl() const {
    Vec r;
    r.reserve(v.size());
    for (const T& x : v) r.push_back(to_d(x));
    return r;
  }
};

inline Vec randv(size_t n, std::mt19937_64& rng, double lo = -1, double hi = 1) {
  std::uniform_real_distribution<double> d(lo, hi);
  Vec v(n);
  for (auto& x : v) x = d(rng);
  return v;
}
// Values rounded as storage T holds them.
template <class T>
Vec rounded(const Vec& v) {
  return Buf<T>(v).dbl();
}

// |got - ref| <= atol + rtol |ref| per element, with tolerances for the storage type.
struct Tol {
  double rtol, atol;
};
template <class T>
Tol tol() {
  if constexpr (std::is_same_v<T, double>) return {1e-11, 1e-12};
  else if constexpr (std::is_same_v<T, float>) return {3e-5, 3e-6};
  else return {1.6e-2, 2e-3};
}
template <class T>
::testing::AssertionResult near(const Vec& got, const Vec& ref, double scale = 1) {
  const Tol t = tol<T>();
  if (got.size() != ref.size()) return ::testing::AssertionFailure() << "size " << got.size() << " vs " << ref.size();
  for (size_t i = 0; i < got.size(); ++i) {
    const double err = std::fabs(got[i] - ref[i]);
    if (!(err <= t.atol * scale + t.rtol * std::fabs(ref[i])))
      return ::testing::AssertionFailure() << "element " << i << " of " << got.size() << ": got " << got[i]
                                           << ", want " << ref[i] << " (err " << err << ")";
  }
  return ::testing::AssertionSuccess();
}

inline bool quick() {
  const char* q = std::getenv("TP_KERNEL_TESTS_QUICK");
  return q && q[0] == '1';
}
// Row shapes (rows, cols): one row, odd sizes, rows longer than the largest block.
struct Shape {
  long rows, cols;
};
// Launchers: block sizes 32 .. 1024 with small grids (grid-stride loops then cover several rows per block).
using Launcher = tp::kernels::emu::Launcher;
struct ShapeRun {
  Shape s;
  std::vector<Launcher> Ls;
};
// Every block size meets short and long rows; 1024-thread blocks only few rows (an emulated 1024-thread block
// costs about a thousand thread wake-ups per sync).
inline std::vector<ShapeRun> shape_runs() {
  if (quick()) return {{{1, 1}, {{64, 2}}}, {{3, 37}, {{128, 2}}}, {{2, 1300}, {{256, 1}}}};
  return {{{1, 1}, {{32, 1}, {1024, 1}}},   {{1, 5}, {{64, 3}, {128, 2}}},     {{3, 37}, {{32, 1}, {256, 2}}},
          {{7, 64}, {{64, 3}, {128, 2}}},   {{4, 257}, {{32, 1}, {256, 2}}},   {{2, 1300}, {{1024, 1}, {128, 2}}},
          {{33, 96}, {{32, 1}, {64, 3}}},   {{1, 2500}, {{256, 2}, {128, 1}}}};
}
inline std::string where(Shape s, const tp::kernels::emu::Launcher& L) {
  return "shape " + std::to_string(s.rows) + " x " + std::to_string(s.cols) + ", block " + std::to_string(L.block) +
         ", grid <= " + std::to_string(L.max_grid);
}

// Sets the emulator's schedule for a scope.
struct ScheduleScope {
  tp::kernels::emu::Schedule old;
  explicit ScheduleScope(tp::kernels::emu::Schedule s) : old(tp::kernels::emu::schedule()) {
    tp::kernels::emu::set_schedule(s);
  }
  ~ScheduleScope() { tp::kernels::emu::set_schedule(old); }
};

// Every shape with every launcher; the schedules (free, warps forward, warps backward) take turns, so each
// kernel also runs under the orders that expose a missing sync.
struct Config {
  Shape s;
  tp::kernels::emu::Launcher L;
  tp::kernels::emu::Schedule sched;
  std::string str() const { return where(s, L) + ", schedule " + std::to_string(int(sched)); }
};
// Every shape with its launchers; the schedules (free, warps forward, warps backward) take turns, so each
// kernel also runs under the orders that expose a missing sync.
inline std::vector<Config> configs() {
  std::vector<Config> r;
  size_t k = 0;
  for (const ShapeRun& sr : shape_runs())
    for (const Launcher& L : sr.Ls) r.push_back({sr.s, L, tp::kernels::emu::Schedule(k++ % 3)});
  return r;
}

}  // namespace kt
