// The fp8 cast kernel (exec/kernels/k_fp8.hpp) on the emulator, for float, double and bf16 storage, over every
// kt::configs() shape / launcher / schedule: y = fp8(x * s) / s in E4M3 and E5M2 (in place too, without an amax) and
// the amax of x from the two-pass block max, max-ed into the amax slot (raised, or kept when above). Power-of-two scales keep every step exact in each storage type, so the results must
// equal the float64 reference bit for bit (saturation included: scale 1024 puts E4M3 values past 448). The scale is
// read from memory (a one-element buffer of T), as a captured graph's replays read each step's.
#include <cmath>
#include <utility>

#include "exec/kernels/k_fp8.hpp"
#include "tests/kernels/kt_util.hpp"

namespace {
namespace K = tp::kernels;
using kt::Buf;
using kt::Vec;

template <class T>
class KernelFp8 : public ::testing::Test {};
using Types = ::testing::Types<float, double, K::bf16>;
TYPED_TEST_SUITE(KernelFp8, Types);

TYPED_TEST(KernelFp8, CastAndAmax) {
  using T = TypeParam;
  std::mt19937_64 rng(11);
  for (const kt::Config& cf : kt::configs()) {
    SCOPED_TRACE(cf.str());
    kt::ScheduleScope sc(cf.sched);
    const long n = cf.s.rows * cf.s.cols;
    const Vec x = kt::rounded<T>(kt::randv(n, rng, -2, 2));
    double amax_ref = 0;
    for (double v : x) amax_ref = std::max(amax_ref, std::abs(v));
    for (auto [format, s] : {std::pair{int(K::kFp8E4M3), 1024.0}, std::pair{int(K::kFp8E5M2), 1.0}}) {
      Vec want(n);
      for (long i = 0; i < n; ++i) want[i] = K::fp8_round(x[i] * s, format) / s;
      Buf<T> bx(x), by(Vec(n, 9.0));
      // amax into a slot below max |x| (raised to it), then one above (kept); then no amax at all
      Buf<T> slot(Vec{0.25}), high(Vec{4.0}), sc_(Vec{s});
      std::vector<double> scratch(cf.L.max_grid);
      K::fp8_quantize(cf.L, slot.data(), scratch.data(), by.data(), bx.data(), n, sc_.data(), format);
      EXPECT_EQ(by.dbl(), want) << "format " << format << ", scale " << s;
      EXPECT_EQ(slot.dbl()[0], std::max(0.25, amax_ref));
      K::fp8_quantize(cf.L, high.data(), scratch.data(), by.data(), bx.data(), n, sc_.data(), format);
      EXPECT_EQ(high.dbl()[0], 4.0);
      if (format != K::kFp8E4M3) continue;
      K::fp8_quantize(cf.L, static_cast<T*>(nullptr), nullptr, bx.data(), bx.data(), n, sc_.data(), format);  // in place
      EXPECT_EQ(bx.dbl(), want);
    }
  }
}

// The fp8 bytes: known codes (OCP FP8), every finite code of each format decodes and encodes back to itself, and a
// value off the grid encodes as its fp8_round.
TEST(KernelFp8Bits, CodesOfBothFormats) {
  EXPECT_EQ(K::fp8_bits(448.0, K::kFp8E4M3), 0x7e);
  EXPECT_EQ(K::fp8_bits(-448.0, K::kFp8E4M3), 0xfe);
  EXPECT_EQ(K::fp8_bits(1.0, K::kFp8E4M3), 0x38);
  EXPECT_EQ(K::fp8_bits(std::ldexp(1.0, -9), K::kFp8E4M3), 0x01);  // the smallest subnormal
  EXPECT_EQ(K::fp8_bits(57344.0, K::kFp8E5M2), 0x7b);
  EXPECT_EQ(K::fp8_bits(1.0, K::kFp8E5M2), 0x3c);
  EXPECT_EQ(K::fp8_bits(std::ldexp(1.0, -16), K::kFp8E5M2), 0x01);
  EXPECT_EQ(K::fp8_bits(1e9, K::kFp8E4M3), 0x7e);  // saturated
  EXPECT_EQ(K::fp8_bits(0.0, K::kFp8E5M2), 0x00);
  EXPECT_EQ(K::fp8_bits(std::nan(""), K::kFp8E4M3), 0x7f);
  for (int format : {int(K::kFp8E4M3), int(K::kFp8E5M2)})
    for (int b = 0; b < 256; ++b) {
      const double v = K::fp8_value(uint8_t(b), format);
      if (!std::isfinite(v)) continue;
      if (v == 0) {
        EXPECT_EQ(K::fp8_bits(v, format) & 0x7f, 0);
        continue;
      }
      EXPECT_EQ(K::fp8_bits(v, format), b) << "format " << format << " value " << v;
      EXPECT_EQ(K::fp8_bits(float(v), format), b) << "format " << format << " (float)";
      EXPECT_EQ(K::fp8_round(v, format), v);
    }
  std::mt19937_64 rng(3);
  for (const double x : kt::randv(1000, rng, -500, 500))
    EXPECT_EQ(K::fp8_value(K::fp8_bits(x, K::kFp8E4M3), K::kFp8E4M3), K::fp8_round(x, int(K::kFp8E4M3))) << x;
}

// Fp8Pack from an fp8_quantize output with a scale that is not a power of two: the bytes are the quantized values'
// (q / s times s rounds back to q), as they are and transposed, over every config's shape.
TYPED_TEST(KernelFp8, PackOfACastIsItsGridValue) {
  using T = TypeParam;
  std::mt19937_64 rng(13);
  for (const kt::Config& cf : kt::configs()) {
    SCOPED_TRACE(cf.str());
    kt::ScheduleScope sc(cf.sched);
    const long R = cf.s.rows, C = cf.s.cols, n = R * C;
    Buf<T> sc_(Vec{448.0 / 2.9});
    const double s = sc_.dbl()[0];  // (the scale as T holds it)
    for (int format : {int(K::kFp8E4M3), int(K::kFp8E5M2)}) {
      Buf<T> x(kt::rounded<T>(kt::randv(n, rng, -3, 3))), q(Vec(n, 0.0));
      K::fp8_quantize(cf.L, static_cast<T*>(nullptr), nullptr, q.data(), x.data(), n, sc_.data(), format);
      const Vec xs = x.dbl();
      for (bool tr : {false, true}) {
        std::vector<uint8_t> y(size_t(n), 0xaa);
        K::fp8_pack(cf.L, y.data(), q.data(), R, C, C, sc_.data(), format, tr);
        for (long r = 0; r < R; ++r)
          for (long c = 0; c < C; ++c) {
            const uint8_t got = y[size_t(tr ? c * R + r : r * C + c)];
            const double want = K::fp8_round(double(K::acc_t<T>(xs[size_t(r * C + c)]) * K::acc_t<T>(s)), format);
            ASSERT_EQ(K::fp8_value(got, format), want) << r << " " << c << " transposed " << tr;
          }
      }
    }
  }
}

}  // namespace
