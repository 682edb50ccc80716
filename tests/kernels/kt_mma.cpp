// The emulator's tensor-core instructions (EmuCtx::mma16816, ldsm4, ldsm4_t; exec/kernels/emu.hpp) and the flash
// kernels' fragment helpers over them (frag_a, frag_bt, frag_b, acc_to_a, frag_emit; k_flash_mma.hpp): loaded
// from shared memory as the kernels load them, the products are the plain matrix products (X Yᵀ, X Z, and
// round(X Z) Z through an accumulator turned A operand), on both engines and every schedule. And the rules the
// GPU enforces: an ldmatrix row outside shared memory or off 16 bytes fails the launch, as does an mma that a
// returned lane misses.
#include <cmath>

#include "tests/kernels/kt_util.hpp"

namespace {
namespace K = tp::kernels;
namespace emu = tp::kernels::emu;

constexpr long kLd = 24;  // bf16 row stride of the shared tiles (48 bytes: 16-byte rows)

// out1 = X Yᵀ, out2 = X Z, out3 = round(X Z) Z, each [16, 16] float; X, Y, Z [16, 16] given as float (bf16 values).
struct MmaProducts {
  static constexpr const char* kName = "mma_products";
  const float* x;
  const float* y;
  const float* z;
  float* out1;
  float* out2;
  float* out3;
  template <class Ctx>
  void operator()(Ctx& c) const {
    K::bf16* X = c.template shared<K::bf16>();
    K::bf16* Y = X + 16 * kLd;
    K::bf16* Z = Y + 16 * kLd;
    for (unsigned e = c.tid(); e < 256; e += c.bdim())
      X[e / 16 * kLd + e % 16] = K::to_bf16(x[e]), Y[e / 16 * kLd + e % 16] = K::to_bf16(y[e]),
                             Z[e / 16 * kLd + e % 16] = K::to_bf16(z[e]);
    c.sync();
    const int lane = int(c.tid() % 32u);
    uint32_t a[4], b[4];
    float p1[2][4] = {}, p2[2][4] = {}, p3[2][4] = {};
    K::frag_a(c, a, X, kLd, 0);
    K::frag_bt(c, b, Y, kLd, 0, 0);
    c.mma16816(p1[0], a, b);
    c.mma16816(p1[1], a, b + 2);
    K::frag_b(c, b, Z, kLd, 0, 0);
    c.mma16816(p2[0], a, b);
    c.mma16816(p2[1], a, b + 2);
    uint32_t a2[4];
    K::acc_to_a(a2, p2[0], p2[1]);
    c.mma16816(p3[0], a2, b);
    c.mma16816(p3[1], a2, b + 2);
    for (int nt = 0; nt < 2; ++nt) {
      K::frag_emit<false>(lane, p1[nt], out1, 16, nt * 8, 16, 1.f);
      K::frag_emit<false>(lane, p2[nt], out2, 16, nt * 8, 16, 1.f);
      K::frag_emit<false>(lane, p3[nt], out3, 16, nt * 8, 16, 1.f);
    }
  }
};

TEST(KernelMma, FragmentsLoadedFromSharedMemoryMultiplyAsMatrices) {
  std::mt19937_64 rng(5);
  const kt::Vec xs = kt::rounded<K::bf16>(kt::randv(256, rng)), ys = kt::rounded<K::bf16>(kt::randv(256, rng)),
                zs = kt::rounded<K::bf16>(kt::randv(256, rng));
  const std::vector<float> x(xs.begin(), xs.end()), y(ys.begin(), ys.end()), z(zs.begin(), zs.end());
  std::vector<double> w1(256), w2(256), w3(256);
  for (int m = 0; m < 16; ++m)
    for (int n = 0; n < 16; ++n)
      for (int k = 0; k < 16; ++k) w1[m * 16 + n] += xs[m * 16 + k] * ys[n * 16 + k], w2[m * 16 + n] += xs[m * 16 + k] * zs[k * 16 + n];
  for (int m = 0; m < 16; ++m)
    for (int n = 0; n < 16; ++n)
      for (int k = 0; k < 16; ++k) w3[m * 16 + n] += K::bf16_round(w2[m * 16 + k]) * zs[k * 16 + n];
  const emu::Engine old = emu::engine();
  for (emu::Engine e : {emu::Engine::threads, emu::Engine::fibers})
    for (auto s : {emu::Schedule::free, emu::Schedule::warps_forward, emu::Schedule::warps_backward}) {
      emu::set_engine(e);
      kt::ScheduleScope scope(s);
      std::vector<float> o1(256, NAN), o2(256, NAN), o3(256, NAN);
      emu::launch(MmaProducts{x.data(), y.data(), z.data(), o1.data(), o2.data(), o3.data()},
                  {1, 32, unsigned(3 * 16 * kLd * 2)});  // (one warp: a second would write the same outputs)
      for (int i = 0; i < 256; ++i) {
        // (products of bf16 values are exact in float; 16-term float sums; round(X Z) may differ from the float64
        // sum's rounding where the float sum sits a float ulp from a bf16 tie)
        EXPECT_NEAR(o1[i], w1[i], 1e-5 * (1 + std::fabs(w1[i]))) << "X Yt " << i;
        EXPECT_NEAR(o2[i], w2[i], 1e-5 * (1 + std::fabs(w2[i]))) << "X Z " << i;
        EXPECT_NEAR(o3[i], w3[i], 1e-2 * (1 + std::fabs(w3[i]))) << "round(X Z) Z " << i;
      }
    }
  emu::set_engine(old);
}

// ldmatrix from a row pointer `shift` bf16 past the start of shared memory (or from global memory).
struct LdsmAt {
  static constexpr const char* kName = "ldsm_at";
  long shift;
  const K::bf16* global;
  template <class Ctx>
  void operator()(Ctx& c) const {
    uint32_t r[4];
    c.ldsm4(r, global ? global : c.template shared<K::bf16>() + shift + (c.tid() % 32u) * 8);
  }
};
// Lanes 16..31 return before the warp's mma.
struct MmaReturnedLane {
  static constexpr const char* kName = "mma_returned";
  template <class Ctx>
  void operator()(Ctx& c) const {
    if (c.tid() % 32 >= 16) return;
    float d[4] = {};
    const uint32_t a[4] = {}, b[2] = {};
    c.mma16816(d, a, b);
  }
};

TEST(KernelMma, TheGpusRulesFailTheLaunch) {
  EXPECT_NO_THROW(emu::launch(LdsmAt{0, nullptr}, {1, 32, 32 * 16}));
  EXPECT_THROW(emu::launch(LdsmAt{1, nullptr}, {1, 32, 32 * 16 + 16}), emu::LaunchError);  // 2 bytes off
  EXPECT_THROW(emu::launch(LdsmAt{8, nullptr}, {1, 32, 32 * 16}), emu::LaunchError);       // past the end
  std::vector<K::bf16> host(8);
  EXPECT_THROW(emu::launch(LdsmAt{0, host.data()}, {1, 32, 32 * 16}), emu::LaunchError);   // not shared memory
  EXPECT_THROW(emu::launch(MmaReturnedLane{}, {1, 32, 0}), emu::LaunchError);
}

}  // namespace
