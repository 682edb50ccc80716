// The fp8 cast kernel (exec/kernels/k_fp8.hpp) on the emulator, for float, double and bf16 storage, over every
// kt::configs() shape / launcher / schedule: y = fp8(x * s) / s in E4M3 and E5M2 (in place too) and the amax of x
// from the two-pass block max. Power-of-two scales keep every step exact in each storage type, so the results must
// equal the float64 reference bit for bit (saturation included: scale 1024 puts E4M3 values past 448).
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
      std::vector<double> out(1, -1), scratch(cf.L.max_grid);
      K::fp8_quantize(cf.L, out.data(), scratch.data(), by.data(), bx.data(), n, K::acc_t<T>(s), format);
      EXPECT_EQ(by.dbl(), want) << "format " << format << ", scale " << s;
      EXPECT_EQ(out[0], amax_ref);
      if (format != K::kFp8E4M3) continue;
      K::fp8_quantize(cf.L, out.data(), scratch.data(), bx.data(), bx.data(), n, K::acc_t<T>(s), format);  // in place
      EXPECT_EQ(bx.dbl(), want);
    }
  }
}

}  // namespace
