// The host Adam of offloaded optimizer state (exec/runtime/offload/host_adam.hpp): split over threads it is bitwise
// the CPU backend's single-threaded adamw for every length and thread count; and the host optimizer's step
// (host_optimizer.hpp), a pipeline of blocks over two copy streams on a device backend whose memory the host cannot
// read (emu-device, whose created streams defer their copies until a GPU would have to have run them, so a missing
// stream_sync or wait shows as wrong bytes: checked by removing either sync of the pipeline, 2026-11-29), gives
// bitwise the synchronous result: gradients down, one Adam, parameters up, every byte counted once.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <vector>

#include "exec/backends/backend.hpp"
#include "exec/runtime/offload/host_adam.hpp"
#include "exec/runtime/offload/host_optimizer.hpp"

namespace {

std::vector<float> noise(size_t n, unsigned seed) {
  std::vector<float> v(n);
  unsigned x = seed * 2654435761u + 1;
  for (float& f : v) {
    x = x * 1664525u + 1013904223u;
    f = (float)((x >> 8) & 0xffff) / 65536.f - 0.5f;
  }
  return v;
}

}  // namespace

TEST(HostAdam, ThreadsGiveTheSingleThreadedResultBitwise) {
  const auto ref_adamw = tp::exec::cpu_backend().ops<float>().adamw;
  for (long n : {0L, 1L, 63L, 1000L, 70001L, 300007L}) {
    for (int threads : {1, 2, 3, 8}) {
      std::vector<float> p = noise(n, 1), g = noise(n, 2), m = noise(n, 3), v = noise(n, 4);
      for (float& x : v) x = x * x;  // second moments are >= 0
      std::vector<float> p2 = p, m2 = m, v2 = v;
      for (long t = 1; t <= 2; ++t) {
        tp::exec::host_adamw(p.data(), g.data(), m.data(), v.data(), n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, t, 0.5f, threads);
        ref_adamw(p2.data(), g.data(), m2.data(), v2.data(), n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, t, 0.5f);
      }
      EXPECT_EQ(p, p2) << n << " " << threads;
      EXPECT_EQ(m, m2) << n << " " << threads;
      EXPECT_EQ(v, v2) << n << " " << threads;
    }
  }
}

// The host bf16 pack (optimizer offload's bf16 working weights): the CPU backend's pack_bf16, whatever the threads.
TEST(HostAdam, PackBf16IsTheCpuBackendsForEveryThreadCount) {
  const auto ref = tp::exec::cpu_backend().ops<float>().pack_bf16;
  for (long n : {0L, 1L, 63L, 70001L, 300007L}) {
    const std::vector<float> x = noise(n, 6);
    std::vector<uint16_t> want((size_t)n), got((size_t)n);
    if (n > 0) ref(want.data(), x.data(), n);
    for (int threads : {1, 2, 3, 8}) {
      std::fill(got.begin(), got.end(), uint16_t(0));
      tp::exec::host_pack_bf16(got.data(), x.data(), n, threads);
      EXPECT_EQ(got, want) << n << " " << threads;
    }
  }
}

// The sum of squares over blocks: the same double for every thread count; the CPU backend's own sum up to one block;
// beyond, the blocks' own sums added in order.
TEST(HostAdam, SumOfSquaresIsTheSameForEveryThreadCount) {
  const auto ref = tp::exec::cpu_backend().ops<float>().sum_squares;
  const long B = tp::exec::kHostSumBlock;
  for (long n : {0L, 1L, 1000L, B, B + 1, 3 * B + 7}) {
    const std::vector<float> x = noise(n, 5);
    double want = 0;
    for (long b = 0; b < n; b += B) want += ref(x.data() + b, std::min(B, n - b));
    for (int threads : {1, 2, 3, 8}) EXPECT_EQ(tp::exec::host_sum_squares(x.data(), n, threads), want) << n << " " << threads;
    if (n > 0 && n <= B) {
      EXPECT_EQ(tp::exec::host_sum_squares(x.data(), n, 4), ref(x.data(), n)) << n;
    }
  }
}

TEST(HostAdam, DefaultThreadsAndTheEnvironmentOverride) {
  unsetenv("TRAINPLAN_HOST_ADAM_THREADS");
  EXPECT_EQ(tp::exec::host_adam_threads(tp::exec::cpu_backend(), 1), 1);  // every CPU rank is a busy core
  EXPECT_GE(tp::exec::host_adam_threads(tp::exec::emu_device_backend(), 1), 1);
  EXPECT_LE(tp::exec::host_adam_threads(tp::exec::emu_device_backend(), 1), tp::exec::usable_cores());
  setenv("TRAINPLAN_HOST_ADAM_THREADS", "3", 1);
  EXPECT_EQ(tp::exec::host_adam_threads(tp::exec::cpu_backend(), 4), 3);
  unsetenv("TRAINPLAN_HOST_ADAM_THREADS");
}

// Two host-optimizer steps over a range of several pipeline blocks (the last one short), on emu-device, against the
// synchronous reference computed on host copies.
TEST(HostAdam, HostOptimizerPipelineOnADeviceIsTheSynchronousStep) {
  const tp::exec::Backend& be = tp::exec::emu_device_backend();
  tp::exec::BackendScope scope(be);
  const long long state = 10000, off = 1500, n = 7003;  // own range [off, off + n) of the host layout
  std::vector<float> w = noise(n, 5), grad1 = noise(n, 6), grad2 = noise(n, 7);
  float* dp = static_cast<float*>(be.alloc(sizeof(float) * n));
  float* dg = static_cast<float*>(be.alloc(sizeof(float) * n));
  ASSERT_TRUE(dp && dg);
  be.copy(dp, w.data(), sizeof(float) * n, tp::exec::CopyKind::host_to_device, {});
  tp::exec::HostOptimizer<float> h;
  h.init(state, 2);
  h.block = 1000;
  h.pull(dp, off, n);
  std::vector<float> p = w, m(n, 0.f), v(n, 0.f);
  const auto ref_adamw = tp::exec::cpu_backend().ops<float>().adamw;
  for (long t = 1; t <= 2; ++t) {
    const std::vector<float>& g = t == 1 ? grad1 : grad2;
    be.copy(dg, g.data(), sizeof(float) * n, tp::exec::CopyKind::host_to_device, {});
    h.step(dp, dg, off, n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, t, 0.75f);
    ref_adamw(p.data(), g.data(), m.data(), v.data(), n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, t, 0.75f);
  }
  std::vector<float> back(n);
  be.copy(back.data(), dp, sizeof(float) * n, tp::exec::CopyKind::device_to_host, {});
  EXPECT_EQ(back, p);
  EXPECT_EQ(std::vector<float>(h.master.data() + off, h.master.data() + off + n), p);
  EXPECT_EQ(std::vector<float>(h.m1.data() + off, h.m1.data() + off + n), m);
  EXPECT_EQ(h.d2h_bytes, 2.0 * sizeof(float) * n);
  EXPECT_EQ(h.h2d_bytes, 2.0 * sizeof(float) * n);
  EXPECT_EQ(h.master.data()[off - 1], 0.f);  // nothing outside the range is touched
  be.free(dp);
  be.free(dg);
}
