// Tests of the block emulator itself (exec/kernels/emulator/emu.hpp): launch checks, thread / block indices, shuffles,
// block reductions, shared memory (0xff-filled per block), errors from kernel bodies and from shuffles with a
// returned lane, launches from several host threads, and that a missing sync is caught deterministically by
// the ordered schedules (the kernel variant without its sync gives wrong results, the one with it never does).
// Also the tensor-core instructions (EmuCtx::mma16816, ldsm4, ldsm4_t) and the flash kernels' fragment helpers over
// them (frag_a, frag_bt, frag_b, acc_to_a, frag_emit; k_flash_mma.hpp): loaded from shared memory as the kernels
// load them, the products are the plain matrix products (X Yᵀ, X Z, and round(X Z) Z through an accumulator turned
// A operand), on both engines and every schedule; and the rules the GPU enforces (an ldmatrix row outside shared
// memory or off 16 bytes, an mma that a returned lane misses: the launch fails).
#include <chrono>
#include <cmath>
#include <thread>

#include "tests/kernels/kt_util.hpp"

namespace {
namespace K = tp::kernels;
namespace emu = tp::kernels::emu;
using emu::Schedule;

using kt::ScheduleScope;

struct Nop {
  static constexpr const char* kName = "nop";
  template <class Ctx>
  void operator()(Ctx&) const {}
};

TEST(KernelEmu, RejectsBadLaunches) {
  auto expect_error = [](K::Dim d, const char* what) {
    try {
      emu::launch(Nop{}, d);
      ADD_FAILURE() << "no error for " << what;
    } catch (const emu::LaunchError& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("kernel nop"), std::string::npos) << e.what();
    }
  };
  expect_error({1, 33, 0}, "multiple of 32");
  expect_error({1, 16, 0}, "[32, 1024]");
  expect_error({1, 2048, 0}, "[32, 1024]");
  expect_error({0, 64, 0}, "grid is empty");
  expect_error({1, 64, 48 * 1024 + 4}, "48 KiB");
  EXPECT_NO_THROW(emu::launch(Nop{}, {2, 1024, 48 * 1024}));
}

struct Indices {
  static constexpr const char* kName = "indices";
  long* out;
  template <class Ctx>
  void operator()(Ctx& c) const {
    out[c.bid() * c.bdim() + c.tid()] = long(c.tid()) + 1000L * c.bid() + 1000000L * c.gdim();
  }
};

TEST(KernelEmu, EveryThreadOfEveryBlockRunsOnce) {
  for (unsigned block : {32u, 96u, 1024u}) {
    const unsigned grid = 3;
    std::vector<long> out(grid * block, -1);
    emu::launch(Indices{out.data()}, {grid, block, 0});
    for (unsigned b = 0; b < grid; ++b)
      for (unsigned t = 0; t < block; ++t) ASSERT_EQ(out[b * block + t], long(t) + 1000L * b + 3000000L);
  }
}

// out[tid] = warp sum of lane ids, block sum and max of tid, and what shared memory held before any write.
struct Reductions {
  static constexpr const char* kName = "reductions";
  double* out;
  template <class Ctx>
  void operator()(Ctx& c) const {
    float* fresh = c.template shared<float>() + 64;
    const float before = fresh[c.tid() % 32];
    const float ws = K::warp_sum(c, float(c.tid() % 32));
    const double bs = K::block_sum(c, double(c.tid()), c.template shared<double>());
    const double bm = K::block_max(c, double(c.tid()), c.template shared<double>());
    out[4 * c.tid() + 0] = ws;
    out[4 * c.tid() + 1] = bs;
    out[4 * c.tid() + 2] = bm;
    out[4 * c.tid() + 3] = before;
  }
};

TEST(KernelEmu, ShufflesAndBlockReductions) {
  for (Schedule s : {Schedule::free, Schedule::warps_forward, Schedule::warps_backward}) {
    ScheduleScope scope(s);
    for (unsigned block : {32u, 64u, 512u}) {
      std::vector<double> out(4 * block, -1);
      emu::launch(Reductions{out.data()}, {2, block, 512});
      for (unsigned t = 0; t < block; ++t) {
        ASSERT_EQ(out[4 * t + 0], 496.0);
        ASSERT_EQ(out[4 * t + 1], double(block) * (block - 1) / 2);
        ASSERT_EQ(out[4 * t + 2], double(block - 1));
        ASSERT_TRUE(std::isnan(out[4 * t + 3])) << "shared memory is 0xff-filled before each block";
      }
    }
  }
}

// out[tid] = shared[bdim - 1 - tid] after every thread stored its tid: needs the sync between.
template <bool kSync>
struct Reverse {
  static constexpr const char* kName = "reverse";
  float* out;
  template <class Ctx>
  void operator()(Ctx& c) const {
    float* sh = c.template shared<float>();
    sh[c.tid()] = float(c.tid());
    if (kSync) c.sync();
    out[c.tid()] = sh[c.bdim() - 1 - c.tid()];
  }
};

TEST(KernelEmu, OrderedSchedulesCatchAMissingSync) {
  const unsigned block = 128;
  auto run = [&](auto kernel_tag, Schedule s) {
    ScheduleScope scope(s);
    std::vector<float> out(block, -1);
    emu::launch(decltype(kernel_tag){out.data()}, {1, block, block * 4});
    int wrong = 0;
    for (unsigned t = 0; t < block; ++t) wrong += out[t] != float(block - 1 - t);
    return wrong;
  };
  for (Schedule s : {Schedule::free, Schedule::warps_forward, Schedule::warps_backward})
    EXPECT_EQ(run(Reverse<true>{}, s), 0);
  // Without the sync, warp 0 reads what the last warp has not written yet (forward), and the last warp reads
  // what warp 0 has not written yet (backward): wrong results, every time.
  EXPECT_EQ(run(Reverse<false>{}, Schedule::warps_forward), int(block / 2));
  EXPECT_EQ(run(Reverse<false>{}, Schedule::warps_backward), int(block / 2));
}

struct Throws {
  static constexpr const char* kName = "throws";
  template <class Ctx>
  void operator()(Ctx& c) const {
    c.sync();
    if (c.bid() == 1 && c.tid() == 40) throw std::runtime_error("boom");
    c.sync();
  }
};

TEST(KernelEmu, ErrorsInABodyReachTheLauncher) {
  try {
    emu::launch(Throws{}, {3, 64, 0});
    ADD_FAILURE() << "no error";
  } catch (const emu::LaunchError& e) {
    EXPECT_NE(std::string(e.what()).find("kernel throws: block 1 thread 40: boom"), std::string::npos) << e.what();
  }
  EXPECT_NO_THROW(emu::launch(Nop{}, {1, 64, 0}));  // the pool survives
}

// A kernel that declares a launch bound (K::kMaxThreads, compiled into __launch_bounds__ on CUDA) refuses a larger
// block on the emulator as on the GPU.
struct Bounded {
  static constexpr const char* kName = "bounded";
  static constexpr unsigned kMaxThreads = 64;
  template <class Ctx>
  void operator()(Ctx&) const {}
};

TEST(KernelEmu, ABlockAboveTheLaunchBoundIsRefused) {
  EXPECT_NO_THROW(emu::launch(Bounded{}, {1, 64, 0}));
  try {
    emu::launch(Bounded{}, {1, 128, 0});
    ADD_FAILURE() << "no error";
  } catch (const emu::LaunchError& e) {
    EXPECT_NE(std::string(e.what()).find("launch bound"), std::string::npos) << e.what();
  }
}

// Lanes 16..31 return before the others shuffle: lane i < 16 reads lane i ^ 16, which has returned.
struct ShuffleReturnedLane {
  static constexpr const char* kName = "shuffle_returned";
  template <class Ctx>
  void operator()(Ctx& c) const {
    if (c.tid() % 32 >= 16) return;
    (void)c.shfl_xor(1.0f, 16);
  }
};

TEST(KernelEmu, ShuffleWithAReturnedLaneIsAnError) {
  EXPECT_THROW(emu::launch(ShuffleReturnedLane{}, {1, 32, 0}), emu::LaunchError);
}

// Every lane shuffles, then returns at once: a lane that runs to its end before its partner has read the shuffle
// they took part in is not "a returned lane" (the flash kernels end this way). Both engines, every schedule; the
// sum proves the values arrived.
struct ShuffleThenReturn {
  static constexpr const char* kName = "shuffle_then_return";
  float* out;
  template <class Ctx>
  void operator()(Ctx& c) const {
    const float v = c.shfl_xor(float(c.tid()), 1);
    out[c.tid()] = v;
  }
};

TEST(KernelEmu, ALaneMayReturnRightAfterItsLastShuffle) {
  const emu::Engine old = emu::engine();
  for (emu::Engine e : {emu::Engine::threads, emu::Engine::fibers}) {
    emu::set_engine(e);
    for (int rep = 0; rep < 20; ++rep) {
      std::vector<float> out(64, -1);
      EXPECT_NO_THROW(emu::launch(ShuffleThenReturn{out.data()}, {2, 64, 0}));
      for (unsigned t = 0; t < 64; ++t) EXPECT_EQ(out[t], float(t ^ 1u)) << t;
    }
  }
  emu::set_engine(old);
}

// Half a warp waits at sync() while the other half waits at a shuffle with it: a hang on a GPU. The fiber
// engine sees that nothing can run and reports it (the thread engine would wait forever, so it is not tried).
struct DivergentSync {
  static constexpr const char* kName = "divergent";
  template <class Ctx>
  void operator()(Ctx& c) const {
    if (c.tid() % 32 < 16) c.sync();
    else (void)c.shfl_xor(1.0f, 16);
  }
};

TEST(KernelEmu, FibersReportADeadlock) {
  if (!emu::fibers_available()) GTEST_SKIP() << "no fiber engine under sanitizers";
  const emu::Engine old = emu::engine();
  emu::set_engine(emu::Engine::fibers);
  try {
    emu::launch(DivergentSync{}, {1, 64, 0});
    ADD_FAILURE() << "no error";
  } catch (const emu::LaunchError& e) {
    EXPECT_NE(std::string(e.what()).find("deadlock"), std::string::npos) << e.what();
  }
  EXPECT_NO_THROW(emu::launch(Nop{}, {1, 64, 0}));
  emu::set_engine(old);
}

TEST(KernelEmu, LaunchesFromSeveralHostThreads) {
  std::vector<std::vector<long>> outs(3, std::vector<long>(2 * 64, -1));
  std::vector<std::thread> th;
  for (auto& o : outs)
    th.emplace_back([&o] {
      for (int i = 0; i < 20; ++i) emu::launch(Indices{o.data()}, {2, 64, 0});
    });
  for (auto& t : th) t.join();
  for (auto& o : outs)
    for (long t = 0; t < 128; ++t) ASSERT_EQ(o[t], t % 64 + 1000 * (t / 64) + 2000000);
}

// Not a check: prints what a launch and a sync cost here (docs/kernels.md quotes it).
TEST(KernelEmu, Throughput) {
  if (kt::quick()) GTEST_SKIP() << "timings only: printed by the full run (the quick set runs under the sanitizers)";
  const int n = 20;
  std::vector<double> out(4 * 256);
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < n; ++i) emu::launch(Nop{}, {1, 256, 0});
  auto t1 = std::chrono::steady_clock::now();
  for (int i = 0; i < n; ++i) emu::launch(Reductions{out.data()}, {1, 256, 512});
  auto t2 = std::chrono::steady_clock::now();
  const double us_launch = std::chrono::duration<double, std::micro>(t1 - t0).count() / n;
  const double us_red = std::chrono::duration<double, std::micro>(t2 - t1).count() / n;
  std::printf("emulator (%s), block 256: empty launch %.0f us; 1 warp sum + 2 block reductions %.0f us\n",
              emu::engine() == emu::Engine::fibers && emu::fibers_available() ? "fibers" : "threads", us_launch,
              us_red);
  // A training-sized LayerNorm (128 rows of 64) on small blocks, as the emu backend would launch it.
  std::vector<float> x(128 * 64, 0.5f), w(64, 1.0f), y(128 * 64), m(128), r(128);
  for (size_t i = 0; i < x.size(); ++i) x[i] = float(i % 13);
  for (unsigned block : {32u, 64u}) {
    auto t3 = std::chrono::steady_clock::now();
    K::layernorm_fwd(emu::Launcher{block, 8}, y.data(), m.data(), r.data(), x.data(), w.data(), (const float*)nullptr,
                     128, 64, 1e-5f);
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t3).count();
    std::printf("emulator: layernorm_fwd 128 x 64, block %u, grid 8: %.1f ms\n", block, ms);
  }
  const emu::Stats s = emu::stats();
  EXPECT_GE(s.launches, uint64_t(2 * n));
}

// ---- tensor-core instructions ----

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

// cp.async: each thread copies its 16 bytes of `src` into shared memory as one group, then records what its
// destination holds before the wait (seen[0]) and after it (seen[1]), as 32-bit words; with `zero` the copy is
// cp.async's zero fill; `pending` returns without the wait.
struct AsyncCopyProbe {
  static constexpr const char* kName = "cp_async_probe";
  const uint32_t* src;
  uint32_t* seen;
  bool zero, pending;
  long shift;
  template <class Ctx>
  void operator()(Ctx& c) const {
    uint32_t* dst = c.template shared<uint32_t>() + 4 * c.tid();
    dst[0] = 7u;
    c.cp_async16(reinterpret_cast<unsigned char*>(dst) + shift, src + 4 * c.tid(), zero);
    c.cp_async_commit();
    seen[2 * c.tid()] = dst[0];
    if (pending) return;
    c.template cp_async_wait<0>();
    seen[2 * c.tid() + 1] = dst[0];
  }
};

// The emulator copies at the wait (free, warps_forward: the old bytes before it) or at once (warps_backward), the two
// ends of a GPU's window; the launch rules as the GPU's: a destination off 16 bytes, copies never waited for.
TEST(KernelAsync, CopiesLandAtTheWaitOrAtOnceAndTheRulesFailTheLaunch) {
  std::vector<uint32_t> src(4 * 64), seen(2 * 64);
  for (size_t i = 0; i < src.size(); ++i) src[i] = uint32_t(100 + i);
  for (auto sched : {emu::Schedule::free, emu::Schedule::warps_forward, emu::Schedule::warps_backward})
    for (bool zero : {false, true}) {
      kt::ScheduleScope sc(sched);
      std::fill(seen.begin(), seen.end(), 0u);
      emu::launch(AsyncCopyProbe{src.data(), seen.data(), zero, false, 0}, {1, 64, 64 * 16});
      const bool at_once = sched == emu::Schedule::warps_backward;
      for (unsigned t = 0; t < 64; ++t) {
        const uint32_t copied = zero ? 0u : src[4 * t];
        EXPECT_EQ(seen[2 * t], at_once ? copied : 7u) << t;
        EXPECT_EQ(seen[2 * t + 1], copied) << t;
      }
    }
  EXPECT_THROW(emu::launch(AsyncCopyProbe{src.data(), seen.data(), false, false, 8}, {1, 32, 64 * 16}), emu::LaunchError);
  EXPECT_THROW(emu::launch(AsyncCopyProbe{src.data(), seen.data(), false, true, 0}, {1, 32, 64 * 16}), emu::LaunchError);
}

}  // namespace
