// The bridge kernels (exec/kernels/k_bridge.hpp) that read a weight's bf16 copy, on the emulator, over every
// kt::configs() shape / launcher / schedule: EmbeddingShardFwd with a bf16 table (ops::embedding_shard_fwd16) writes
// the rows of the shard's tokens with the table's bf16 values, exact in float and double, and leaves the other rows.
#include "exec/kernels/k_bridge.hpp"
#include "tests/kernels/kt_util.hpp"

namespace {
namespace K = tp::kernels;
using kt::Buf;
using kt::Vec;

template <class T>
class KernelBridge : public ::testing::Test {};
using Types = ::testing::Types<float, double>;
TYPED_TEST_SUITE(KernelBridge, Types);

TYPED_TEST(KernelBridge, EmbeddingShardFromBf16Table) {
  using T = TypeParam;
  std::mt19937_64 rng(5);
  for (const kt::Config& cf : kt::configs()) {
    SCOPED_TRACE(cf.str());
    kt::ScheduleScope sc(cf.sched);
    const long N = cf.s.rows, C = cf.s.cols, Vl = 7, v0 = 3;
    const Vec table = kt::randv(Vl * C, rng);
    Buf<K::bf16> t16(table);
    const Vec out0 = kt::randv(N * C, rng);
    Buf<T> out(out0);
    std::vector<int32_t> tok(N);
    for (long n = 0; n < N; ++n) tok[n] = int32_t((n * 5) % (Vl + 6));  // some below v0, some past the shard
    cf.L(K::EmbeddingShardFwd<T, K::bf16>{out.data(), tok.data(), t16.data(), N, C, v0, Vl}, K::flat_dim(cf.L, N * C));
    const Vec t = t16.dbl(), got = out.dbl();
    for (long n = 0; n < N; ++n)
      for (long c = 0; c < C; ++c) {
        const long r = tok[n] - v0;
        const double want = r >= 0 && r < Vl ? t[r * C + c] : out0[n * C + c];
        ASSERT_EQ(got[n * C + c], kt::rounded<T>({want})[0]) << n << " " << c;
      }
  }
}

}  // namespace
