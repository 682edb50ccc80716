// The proof that the kernel tests notice a missing __syncthreads: LayerNorm and softmax (block reductions)
// against float64 on blocks of several warps. Built twice: as is (must pass) and with
// TP_KERNELS_TEST_DROP_SYNC, which deletes the sync between the warps' partial sums and warp 0 reading them
// (exec/kernels/kcommon.hpp) and must fail: deterministically under the ordered schedule (Ordered), and by a
// ThreadSanitizer race report under the free one (Free, run in the thread-sanitizer build).
#include <cmath>

#include "tests/kernels/kt_util.hpp"

namespace {
namespace K = tp::kernels;
namespace emu = tp::kernels::emu;

void check_layernorm(emu::Schedule s, int reps) {
  kt::ScheduleScope sc(s);
  std::mt19937_64 rng(21);
  const long N = 3, C = 300;
  const kt::Vec x = kt::rounded<float>(kt::randv(N * C, rng)), w(C, 1.0);
  for (int rep = 0; rep < reps; ++rep) {
    kt::Buf<float> bx(x), bw(w), by(kt::Vec(N * C, 0.0));
    std::vector<float> m(N), r(N);
    K::layernorm_fwd(emu::Launcher{128, 2}, by.data(), m.data(), r.data(), bx.data(), bw.data(), (const float*)nullptr,
                     N, C, 1e-5f);
    for (long i = 0; i < N; ++i) {
      double mean = 0;
      for (long c = 0; c < C; ++c) mean += x[i * C + c] / C;
      ASSERT_NEAR(m[i], mean, 1e-5) << "row " << i << " rep " << rep;
    }
  }
}

TEST(KernelSync, Ordered) {
  check_layernorm(emu::Schedule::warps_forward, 1);
  check_layernorm(emu::Schedule::warps_backward, 1);
}
TEST(KernelSync, Free) { check_layernorm(emu::Schedule::free, 20); }

}  // namespace
