// The proof that the kernel tests notice a missing __syncthreads: softmax (block reductions; LayerNorm runs a warp
// per row, without block syncs) against float64 on blocks of several warps. Built twice: as is (must pass) and with
// TP_KERNELS_TEST_DROP_SYNC, which deletes the sync between the warps' partial sums and warp 0 reading them
// (exec/kernels/kcommon.hpp) and must fail: deterministically under the ordered schedule (Ordered), and by a
// ThreadSanitizer race report under the free one (Free, run in the thread-sanitizer build).
#include <algorithm>
#include <cmath>

#include "tests/kernels/kt_util.hpp"

namespace {
namespace K = tp::kernels;
namespace emu = tp::kernels::emu;

void check_softmax(emu::Schedule s, int reps) {
  kt::ScheduleScope sc(s);
  std::mt19937_64 rng(21);
  const long N = 3, C = 300;
  const kt::Vec x = kt::rounded<float>(kt::randv(N * C, rng, -3, 3));
  for (int rep = 0; rep < reps; ++rep) {
    kt::Buf<float> bx(x), by(kt::Vec(N * C, 0.0));
    K::softmax_fwd(emu::Launcher{128, 2}, by.data(), bx.data(), N, C, 1.0f, false);
    const kt::Vec y = by.dbl();
    for (long i = 0; i < N; ++i) {
      double mx = x[i * C], sum = 0;
      for (long c = 0; c < C; ++c) mx = std::max(mx, x[i * C + c]);
      for (long c = 0; c < C; ++c) sum += std::exp(x[i * C + c] - mx);
      for (long c = 0; c < C; ++c)
        ASSERT_NEAR(y[i * C + c], std::exp(x[i * C + c] - mx) / sum, 1e-6) << "row " << i << " col " << c << " rep " << rep;
    }
  }
}

TEST(KernelSync, Ordered) {
  check_softmax(emu::Schedule::warps_forward, 1);
  check_softmax(emu::Schedule::warps_backward, 1);
}
TEST(KernelSync, Free) { check_softmax(emu::Schedule::free, 20); }

}  // namespace
