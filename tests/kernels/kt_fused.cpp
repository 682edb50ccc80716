// The fused bf16 steps (exec/kernels/k_fused.hpp) on the emulator, float and double, over every kt::configs()
// shape / launcher / schedule and two shapes whose column sums run in row chunks: each must give the unfused
// kernels' bits exactly. gelu_fwd16 is gelu_fwd then pack_bf16 of y and x (on and off the vector boundary);
// bias_bwd16 is bias_bwd then pack_bf16; gelu_bwd_bias16 is x unpacked (copy from bf16), gelu_bwd_set, bias_bwd and
// pack_bf16 (without a bias too, and in place over x's packed copy). And LayerNorm's backward kernels reading x as
// bf16 (layernorm_bwd16) against the same kernels on x unpacked.
#include <tuple>

#include "tests/kernels/kt_util.hpp"

namespace {
namespace K = tp::kernels;
using kt::Buf;
using kt::Vec;

template <class T>
class KernelFused : public ::testing::Test {};
using Types = ::testing::Types<float, double>;
TYPED_TEST_SUITE(KernelFused, Types);

// The configs' shapes with blocks up to 256 threads (ColumnSums' tests take the larger ones; an emulated
// 1024-thread block is slow), then two in row chunks (column_chunks > 1; the quick set, which the sanitizer builds
// run, keeps the configs only: KernelRows.ColumnSumsInRowChunks runs the chunked sums there).
std::vector<std::tuple<long, long, kt::Launcher, int>> fused_runs() {
  std::vector<std::tuple<long, long, kt::Launcher, int>> v;
  for (const kt::Config& cf : kt::configs())
    if (cf.L.block <= 256) v.push_back({cf.s.rows, cf.s.cols, cf.L, int(cf.sched)});
  if (kt::quick()) return v;
  v.push_back({130L, 45L, kt::Launcher{64, 3}, 0});  // (5 chunks)
  v.push_back({700L, 300L, kt::Launcher{128, 7}, 2});
  return v;
}

TYPED_TEST(KernelFused, GeluWrittenPackedIsGeluThenPack) {
  using T = TypeParam;
  std::mt19937_64 rng(20);
  for (const auto& [N, C, L, sched] : fused_runs()) {
    SCOPED_TRACE(kt::where({N, C}, L) + " schedule " + std::to_string(sched));
    kt::ScheduleScope sc{K::emu::Schedule(sched)};
    const long n = N * C;
    const Vec x = kt::rounded<T>(kt::randv(n + 1, rng, -4, 4));
    for (long off : {0L, 1L}) {  // (1: views off the vector boundary, one element at a time)
      Buf<T> bx(x), y(Vec(n + 1, 7.0));
      Buf<K::bf16> y_ref(Vec(n + 1, 7.0)), x_ref(Vec(n + 1, 7.0)), y16(Vec(n + 1, 7.0)), x16(Vec(n + 1, 7.0));
      K::gelu_fwd(L, y.data() + off, bx.data() + off, n);
      K::pack_bf16(L, y_ref.data() + off, y.data() + off, n);
      K::pack_bf16(L, x_ref.data() + off, bx.data() + off, n);
      K::gelu_fwd16(L, y16.data() + off, x16.data() + off, bx.data() + off, n);
      EXPECT_EQ(y16.dbl(), y_ref.dbl()) << "offset " << off;
      EXPECT_EQ(x16.dbl(), x_ref.dbl()) << "offset " << off;
    }
  }
}

TYPED_TEST(KernelFused, BiasGradWithThePackedCopyIsBiasBwdThenPack) {
  using T = TypeParam;
  std::mt19937_64 rng(21);
  for (const auto& [N, C, L, sched] : fused_runs()) {
    SCOPED_TRACE(kt::where({N, C}, L) + " schedule " + std::to_string(sched));
    kt::ScheduleScope sc{K::emu::Schedule(sched)};
    const Vec dy = kt::rounded<T>(kt::randv(N * C, rng)), db0 = kt::rounded<T>(kt::randv(C, rng));
    std::vector<K::acc_t<T>> scr(size_t(K::column_sums_scratch(N, C)) + 1, -1);
    Buf<T> bdy(dy), db_ref(db0), db(db0);
    Buf<K::bf16> p_ref(Vec(N * C, 7.0)), p(Vec(N * C, 7.0));
    K::bias_bwd(L, db_ref.data(), bdy.data(), N, C, scr.data());
    K::pack_bf16(L, p_ref.data(), bdy.data(), N * C);
    K::bias_bwd16(L, db.data(), p.data(), bdy.data(), N, C, scr.data());
    EXPECT_EQ(db.dbl(), db_ref.dbl());
    EXPECT_EQ(p.dbl(), p_ref.dbl());
  }
}

TYPED_TEST(KernelFused, GeluBwdWithItsBiasGradIsTheUnfusedSteps) {
  using T = TypeParam;
  std::mt19937_64 rng(22);
  for (const auto& [N, F, L, sched] : fused_runs()) {
    SCOPED_TRACE(kt::where({N, F}, L) + " schedule " + std::to_string(sched));
    kt::ScheduleScope sc{K::emu::Schedule(sched)};
    const long n = N * F;
    const Vec x = kt::rounded<K::bf16>(kt::randv(n, rng, -4, 4)), dy = kt::rounded<T>(kt::randv(n, rng)),
              db0 = kt::rounded<T>(kt::randv(F, rng));
    std::vector<K::acc_t<T>> scr(size_t(K::column_sums_scratch(N, F)) + 1, -1);
    // unfused: x unpacked, dx = gelu'(x) dy in T, its column sums, its bf16 copy
    Buf<K::bf16> x16(x), d16_ref(Vec(n, 7.0));
    Buf<T> xs(Vec(n, 7.0)), dx(Vec(n, 7.0)), bdy(dy), db_ref(db0);
    K::copy(L, xs.data(), x16.data(), n);
    K::gelu_bwd_set(L, dx.data(), xs.data(), bdy.data(), n);
    K::bias_bwd(L, db_ref.data(), dx.data(), N, F, scr.data());
    K::pack_bf16(L, d16_ref.data(), dx.data(), n);
    // fused, with the bias; then without it, over x's packed copy
    Buf<K::bf16> d16(Vec(n, 7.0)), over_x(x);
    Buf<T> db(db0);
    K::gelu_bwd_bias16(L, d16.data(), db.data(), x16.data(), bdy.data(), N, F, scr.data());
    EXPECT_EQ(db.dbl(), db_ref.dbl());
    EXPECT_EQ(d16.dbl(), d16_ref.dbl());
    K::gelu_bwd_bias16(L, over_x.data(), (T*)nullptr, over_x.data(), bdy.data(), N, F, scr.data());
    EXPECT_EQ(over_x.dbl(), d16_ref.dbl());
  }
}

TYPED_TEST(KernelFused, LayerNormBackwardFromPackedXIsTheUnpackedOnes) {
  using T = TypeParam;
  using A = K::acc_t<T>;
  std::mt19937_64 rng(23);
  for (const auto& [N, C, L, sched] : fused_runs()) {
    SCOPED_TRACE(kt::where({N, C}, L) + " schedule " + std::to_string(sched));
    kt::ScheduleScope sc{K::emu::Schedule(sched)};
    const Vec x = kt::rounded<K::bf16>(kt::randv(N * C, rng, -2, 3)), dy = kt::rounded<T>(kt::randv(N * C, rng)),
              w = kt::rounded<T>(kt::randv(C, rng)), d0 = kt::rounded<T>(kt::randv(N * C, rng)),
              c0 = kt::rounded<T>(kt::randv(C, rng));
    std::vector<A> mean(N), rstd(N);
    for (long n = 0; n < N; ++n) mean[n] = A(0.1 * double(n % 7)), rstd[n] = A(1 + 0.01 * double(n % 5));
    std::vector<K::acc_t<T>> scr(size_t(K::column_sums_scratch(N, C)) + 1, -1);
    Buf<T> xs(x), bdy(dy), bw(w), dx_ref(d0), dw_ref(c0), db_ref(c0), dx(d0), dw(c0), db(c0);
    Buf<K::bf16> x16(x);
    K::layernorm_bwd_dx(L, dx_ref.data(), bdy.data(), xs.data(), bw.data(), mean.data(), rstd.data(), N, C);
    K::layernorm_bwd_wb(L, dw_ref.data(), db_ref.data(), bdy.data(), xs.data(), mean.data(), rstd.data(), N, C,
                        scr.data());
    K::layernorm_bwd_dx(L, dx.data(), bdy.data(), x16.data(), bw.data(), mean.data(), rstd.data(), N, C);
    K::layernorm_bwd_wb(L, dw.data(), db.data(), bdy.data(), x16.data(), mean.data(), rstd.data(), N, C, scr.data());
    EXPECT_EQ(dx.dbl(), dx_ref.dbl());
    EXPECT_EQ(dw.dbl(), dw_ref.dbl());
    EXPECT_EQ(db.dbl(), db_ref.dbl());
  }
}

}  // namespace
