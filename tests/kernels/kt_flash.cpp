// The fused attention kernels (exec/kernels/k_flash.hpp) on the emulator against a naive float64 causal attention
// (softmax of the scaled scores, the mask bottom-right) and its gradients, float / double / bf16 storage, under each
// schedule: one, two, four and eight lanes per row (D = 5, 64, 100, 256), several query and key tiles, grouped
// kv heads, a rectangular mask (Tq < Tk), small grids (the work-item loop runs several items per block), and
// gradients that accumulate into what dq, dk, dv held. Also: the saved statistics are the rows' max and 1 / sum.
#include <algorithm>
#include <cmath>
#include <tuple>

#include "tests/kernels/kt_util.hpp"

namespace {
namespace K = tp::kernels;
using kt::Buf;
using kt::Vec;

template <class T>
class KernelFlash : public ::testing::Test {};
using Types = ::testing::Types<float, double, K::bf16>;
TYPED_TEST_SUITE(KernelFlash, Types);

struct Dims {
  long B, Tq, Tk, H, Hkv, D;
};

// The float64 reference: out, stats (max, 1 / sum) and dq, dk, dv += gradients (dS = P (dP - rowsum(dP P))).
// With b16, the operands of every product rounded to bf16 as the kernels' bf16 path rounds them (q, k, v, dout,
// the normalised P, dS) and the row term rowsum(dout out) from `out16` (the out the kernel is given).
struct Ref {
  Vec out, st, dq, dk, dv;
};
double r16(double x) { return tp::kernels::bf16_round(x); }
Ref reference(const Dims& d, const Vec& q, const Vec& k, const Vec& v, const Vec& dout, const Vec& dq0,
              const Vec& dk0, const Vec& dv0, bool b16 = false, const Vec* out16 = nullptr) {
  auto R = [b16](double x) { return b16 ? r16(x) : x; };
  Ref r{Vec(q.size()), Vec(size_t(d.B * d.H * d.Tq * 2)), dq0, dk0, dv0};
  const long G = d.H / d.Hkv, off = d.Tk - d.Tq;
  const double sc = 1 / std::sqrt(double(d.D));
  auto qi = [&](long b, long t, long h) { return ((b * d.Tq + t) * d.H + h) * d.D; };
  auto ki = [&](long b, long t, long h) { return ((b * d.Tk + t) * d.Hkv + h) * d.D; };
  for (long b = 0; b < d.B; ++b)
    for (long h = 0; h < d.H; ++h) {
      const long kh = h / G;
      for (long t = 0; t < d.Tq; ++t) {
        const long n = t + off + 1;
        Vec p(n), dp(n);
        double mx = -INFINITY, sum = 0;
        for (long j = 0; j < n; ++j) {
          double s = 0;
          for (long e = 0; e < d.D; ++e) s += R(q[qi(b, t, h) + e]) * R(k[ki(b, j, kh) + e]);
          p[j] = s * sc;
          mx = std::max(mx, p[j]);
        }
        for (long j = 0; j < n; ++j) sum += (p[j] = std::exp(p[j] - mx));
        for (long j = 0; j < n; ++j) p[j] /= sum;
        r.st[((b * d.H + h) * d.Tq + t) * 2] = mx, r.st[((b * d.H + h) * d.Tq + t) * 2 + 1] = 1 / sum;
        double dot = 0;
        for (long j = 0; j < n; ++j) {
          for (long e = 0; e < d.D; ++e) r.out[qi(b, t, h) + e] += R(p[j]) * R(v[ki(b, j, kh) + e]);
          for (long e = 0; e < d.D; ++e) dp[j] += R(dout[qi(b, t, h) + e]) * R(v[ki(b, j, kh) + e]);
          dot += dp[j] * p[j];
        }
        if (out16) {
          dot = 0;
          for (long e = 0; e < d.D; ++e) dot += dout[qi(b, t, h) + e] * (*out16)[qi(b, t, h) + e];
        }
        for (long j = 0; j < n; ++j) {
          const double ds = R(p[j] * (dp[j] - dot));
          for (long e = 0; e < d.D; ++e) {
            r.dq[qi(b, t, h) + e] += sc * ds * R(k[ki(b, j, kh) + e]);
            r.dk[ki(b, j, kh) + e] += sc * ds * R(q[qi(b, t, h) + e]);
            r.dv[ki(b, j, kh) + e] += R(p[j]) * R(dout[qi(b, t, h) + e]);
          }
        }
      }
    }
  return r;
}

TYPED_TEST(KernelFlash, MatchesNaiveAttention) {
  using T = TypeParam;
  std::mt19937_64 rng(21);
  const bool quick = kt::quick();
  std::vector<Dims> dims = {{2, 7, 7, 4, 2, 5}, {1, 70, 70, 2, 1, 64}, {2, 5, 13, 2, 2, 100}, {1, 9, 9, 1, 1, 256}};
  if (!quick) dims.push_back({1, 131, 131, 2, 2, 33});
  size_t n = 0;
  for (const Dims& d : dims)
    for (unsigned grid : {1u, 3u}) {
      if (quick && grid == 1 && &d != &dims[0]) continue;  // the sanitizer builds: one grid of one block is enough
      const auto sched = K::emu::Schedule(n++ % 3);
      SCOPED_TRACE("B " + std::to_string(d.B) + " Tq " + std::to_string(d.Tq) + " Tk " + std::to_string(d.Tk) +
                   " H " + std::to_string(d.H) + "/" + std::to_string(d.Hkv) + " D " + std::to_string(d.D) +
                   " grid " + std::to_string(grid) + " schedule " + std::to_string(int(sched)));
      kt::ScheduleScope sc(sched);
      const long nq = d.B * d.Tq * d.H * d.D, nk = d.B * d.Tk * d.Hkv * d.D;
      const Vec q = kt::rounded<T>(kt::randv(nq, rng)), k = kt::rounded<T>(kt::randv(nk, rng)),
                v = kt::rounded<T>(kt::randv(nk, rng)), dout = kt::rounded<T>(kt::randv(nq, rng));
      const Vec dq0 = kt::rounded<T>(kt::randv(nq, rng)), dk0 = kt::rounded<T>(kt::randv(nk, rng)),
                dv0 = kt::rounded<T>(kt::randv(nk, rng));
      const Ref r = reference(d, q, k, v, dout, dq0, dk0, dv0);
      Buf<T> qb(q), kb(k), vb(v), ob{Vec(nq)}, sb{Vec(r.st.size())}, dob(dout), dqb(dq0), dkb(dk0), dvb(dv0);
      const K::emu::Launcher L{128, grid};
      K::flash_attention_fwd(L, ob.data(), sb.data(), qb.data(), kb.data(), vb.data(), d.B, d.Tq, d.Tk, d.H, d.Hkv,
                             d.D, d.H * d.D, d.Hkv * d.D, false);
      EXPECT_TRUE(kt::near<T>(ob.dbl(), r.out));
      EXPECT_TRUE(kt::near<T>(sb.dbl(), r.st));
      // The backward from the reference's own out (as stored), so only the kernels' backward is measured.
      Buf<T> oref(r.out);
      std::vector<float> terms(size_t(K::flash_bwd_scratch(d.B, d.H, d.Tq, d.D)));
      K::flash_attention_bwd(L, dqb.data(), dkb.data(), dvb.data(), dob.data(), oref.data(), sb.data(), qb.data(),
                             kb.data(), vb.data(), d.B, d.Tq, d.Tk, d.H, d.Hkv, d.D, d.H * d.D, d.Hkv * d.D, false,
                             terms.data());
      EXPECT_TRUE(kt::near<T>(dqb.dbl(), r.dq, 4));
      EXPECT_TRUE(kt::near<T>(dkb.dbl(), r.dk, 4));
      EXPECT_TRUE(kt::near<T>(dvb.dbl(), r.dv, 4));
    }
}

// bf16 operands in fp32 storage with D = 16, 32, 48, 64 run the tensor-core kernels (k_flash_mma.hpp; the emulator's
// warp-matrix products); the scalar kernels take D = 40. Both against the float64 attention with the operands
// rounded as they round them: within bf16's precision (a P or dS a few float ulp from the reference's may round to
// the neighbouring bf16 value), and with the mask, the tails (T not a multiple of 16, 32 or 64), grouped heads and
// Tq < Tk right. Accumulating: dq, dk, dv start from random values.
TEST(KernelFlashBf16, TensorCoreKernelsMatchTheRoundedReference) {
  std::mt19937_64 rng(8);
  std::vector<Dims> dims = {{1, 16, 16, 1, 1, 16}, {2, 37, 37, 4, 2, 32}, {1, 70, 90, 2, 1, 64},
                            {1, 5, 21, 2, 2, 48}, {1, 33, 33, 2, 1, 40}};
  if (kt::quick()) dims = {{1, 37, 37, 2, 1, 32}, {1, 5, 21, 2, 2, 48}};  // (the sanitizer builds: grouped heads, tails)
  size_t n = 0;
  for (const Dims& d : dims)
    for (unsigned grid : {1u, 2u}) {
      const auto sched = K::emu::Schedule(n++ % 3);
      SCOPED_TRACE("Tq " + std::to_string(d.Tq) + " Tk " + std::to_string(d.Tk) + " H " + std::to_string(d.H) + "/" +
                   std::to_string(d.Hkv) + " D " + std::to_string(d.D) + " grid " + std::to_string(grid) +
                   (K::flash_mma_fits(d.D) ? " (tensor cores)" : " (scalar)"));
      kt::ScheduleScope sc(sched);
      const long nq = d.B * d.Tq * d.H * d.D, nk = d.B * d.Tk * d.Hkv * d.D;
      const Vec q = kt::rounded<float>(kt::randv(nq, rng)), k = kt::rounded<float>(kt::randv(nk, rng)),
                v = kt::rounded<float>(kt::randv(nk, rng)), dout = kt::rounded<float>(kt::randv(nq, rng));
      const Vec dq0 = kt::rounded<float>(kt::randv(nq, rng)), dk0 = kt::rounded<float>(kt::randv(nk, rng)),
                dv0 = kt::rounded<float>(kt::randv(nk, rng));
      const Ref fwd = reference(d, q, k, v, dout, dq0, dk0, dv0, true);
      Buf<float> qb(q), kb(k), vb(v), ob{Vec(nq)}, sb{Vec(fwd.st.size())}, dob(dout), dqb(dq0), dkb(dk0), dvb(dv0);
      const K::emu::Launcher L{64, grid};
      K::flash_attention_fwd(L, ob.data(), sb.data(), qb.data(), kb.data(), vb.data(), d.B, d.Tq, d.Tk, d.H, d.Hkv,
                             d.D, d.H * d.D, d.Hkv * d.D, true);
      const Vec out = ob.dbl();
      const Ref r = reference(d, q, k, v, dout, dq0, dk0, dv0, true, &out);
      auto close = [](const Vec& got, const Vec& want, double tol) {
        double e = 0;
        for (size_t i = 0; i < got.size(); ++i) e = std::max(e, std::fabs(got[i] - want[i]) / (1 + std::fabs(want[i])));
        return e <= tol ? ::testing::AssertionSuccess() : ::testing::AssertionFailure() << "error " << e;
      };
      EXPECT_TRUE(close(out, r.out, 5e-3));
      EXPECT_TRUE(close(sb.dbl(), r.st, 1e-5));  // (max and 1 / sum: fp32 sums of the same rounded products)
      std::vector<float> terms(size_t(K::flash_bwd_scratch(d.B, d.H, d.Tq, d.D)));
      K::flash_attention_bwd(L, dqb.data(), dkb.data(), dvb.data(), dob.data(), ob.data(), sb.data(), qb.data(),
                             kb.data(), vb.data(), d.B, d.Tq, d.Tk, d.H, d.Hkv, d.D, d.H * d.D, d.Hkv * d.D, true,
                             terms.data());
      EXPECT_TRUE(close(dqb.dbl(), r.dq, 5e-3));
      EXPECT_TRUE(close(dkb.dbl(), r.dk, 5e-3));
      EXPECT_TRUE(close(dvb.dbl(), r.dv, 5e-3));
    }
}

// The model's layout: q, k, v read in place from the fused QKV output [B T, (H + 2 Hkv) D] (row strides ldq = ldkv
// = (H + 2 Hkv) D) and dq, dk, dv written into its gradient's columns. The same values in the same order as with
// contiguous q, k, v: bit-identical, on both kernel paths (scalar: D = 40; tensor cores: D = 64 with bf16).
TEST(KernelFlash, PackedQkvIsTheContiguousResult) {
  std::mt19937_64 rng(9);
  std::vector<std::pair<long, bool>> cases = {{40, false}, {64, true}, {40, true}};
  if (kt::quick()) cases.pop_back();  // (the sanitizer builds: the scalar and the tensor-core kernels, once each)
  for (auto [D, b16] : cases) {
    SCOPED_TRACE("D " + std::to_string(D) + (b16 ? " bf16" : ""));
    const bool small = kt::quick();  // (the sanitizer builds: one sequence, two heads sharing one k/v head)
    const long B = small ? 1 : 2, T = small ? 17 : 37, H = small ? 2 : 4, Hkv = small ? 1 : 2, W = (H + 2 * Hkv) * D, N = B * T;
    const Vec qkv = kt::randv(N * W, rng), dout = kt::randv(N * H * D, rng);
    Vec q(N * H * D), k(N * Hkv * D), v(N * Hkv * D);
    for (long r = 0; r < N; ++r) {
      for (long e = 0; e < H * D; ++e) q[r * H * D + e] = qkv[r * W + e];
      for (long e = 0; e < Hkv * D; ++e) k[r * Hkv * D + e] = qkv[r * W + H * D + e], v[r * Hkv * D + e] = qkv[r * W + (H + Hkv) * D + e];
    }
    const K::emu::Launcher L{128, 3};
    Buf<float> qb(q), kb(k), vb(v), o1{Vec(N * H * D)}, s1{Vec(B * H * T * 2)}, dob(dout);
    Buf<float> dq{Vec(q.size())}, dk{Vec(k.size())}, dv{Vec(v.size())};
    std::vector<float> terms(size_t(K::flash_bwd_scratch(B, H, T, D)));
    K::flash_attention_fwd(L, o1.data(), s1.data(), qb.data(), kb.data(), vb.data(), B, T, T, H, Hkv, D, H * D, Hkv * D, b16);
    K::flash_attention_bwd(L, dq.data(), dk.data(), dv.data(), dob.data(), o1.data(), s1.data(), qb.data(), kb.data(),
                           vb.data(), B, T, T, H, Hkv, D, H * D, Hkv * D, b16, terms.data());
    Buf<float> pk(qkv), o2{Vec(N * H * D)}, s2{Vec(B * H * T * 2)}, dpk{Vec(N * W)};
    float* P = pk.data();
    float* dP = dpk.data();
    K::flash_attention_fwd(L, o2.data(), s2.data(), P, P + H * D, P + (H + Hkv) * D, B, T, T, H, Hkv, D, W, W, b16);
    K::flash_attention_bwd(L, dP, dP + H * D, dP + (H + Hkv) * D, dob.data(), o2.data(), s2.data(), P, P + H * D,
                           P + (H + Hkv) * D, B, T, T, H, Hkv, D, W, W, b16, terms.data());
    EXPECT_EQ(o1.dbl(), o2.dbl());
    EXPECT_EQ(s1.dbl(), s2.dbl());
    const Vec g = dpk.dbl(), gq = dq.dbl(), gk = dk.dbl(), gv = dv.dbl();
    for (long r = 0; r < N; ++r) {
      for (long e = 0; e < H * D; ++e) ASSERT_EQ(g[r * W + e], gq[r * H * D + e]) << r << " " << e;
      for (long e = 0; e < Hkv * D; ++e) {
        ASSERT_EQ(g[r * W + H * D + e], gk[r * Hkv * D + e]) << r << " " << e;
        ASSERT_EQ(g[r * W + (H + Hkv) * D + e], gv[r * Hkv * D + e]) << r << " " << e;
      }
    }
  }
}

// With bf16 operands the kernels round q, k, v, dout, P and dS where attention's GEMMs would: the result moves
// from the unrounded one by bf16's precision, and stays within it of the float64 reference.
TEST(KernelFlashBf16, OperandsRoundedMovesTheResult) {
  std::mt19937_64 rng(5);
  const Dims d{1, 40, 40, 2, 1, 48};
  const long nq = d.B * d.Tq * d.H * d.D, nk = d.B * d.Tk * d.Hkv * d.D;
  const Vec q = kt::randv(nq, rng), k = kt::randv(nk, rng), v = kt::randv(nk, rng);
  const Ref r = reference(d, q, k, v, Vec(nq), Vec(nq), Vec(nk), Vec(nk));
  Buf<float> qb(q), kb(k), vb(v), o32{Vec(nq)}, o16{Vec(nq)}, sb{Vec(r.st.size())};
  const K::emu::Launcher L{128, 2};
  K::flash_attention_fwd(L, o32.data(), sb.data(), qb.data(), kb.data(), vb.data(), d.B, d.Tq, d.Tk, d.H, d.Hkv, d.D, d.H * d.D, d.Hkv * d.D,
                         false);
  K::flash_attention_fwd(L, o16.data(), sb.data(), qb.data(), kb.data(), vb.data(), d.B, d.Tq, d.Tk, d.H, d.Hkv, d.D, d.H * d.D, d.Hkv * d.D,
                         true);
  double moved = 0, err = 0;
  const Vec a = o32.dbl(), b = o16.dbl();
  for (long i = 0; i < nq; ++i) {
    moved = std::max(moved, std::fabs(a[i] - b[i]));
    err = std::max(err, std::fabs(b[i] - r.out[i]));
  }
  EXPECT_GT(moved, 1e-5);
  EXPECT_LT(err, 2e-2);
}

}  // namespace

namespace {
// bf16 storage (S = bf16, exec/backends/ops.hpp flash_attention_fwd16 / _bwd16): q, k, v and out read as bf16 and out
// written rounded give exactly the fp32-storage kernels' result on the same (rounded) values, out rounded: the
// same bits (the backward overwriting, as the bf16 op does, against accumulating into zeros), on every path (tensor cores: D = 16, 64 with bf16 operands, the tiles by cp.async over two tiles, or
// by plain copies when the rows are off 16 bytes (shift 1); scalar: D = 40 with them, D = 64 without), in the
// model's packed-QKV layout.
TEST(KernelFlashBf16, Bf16StorageIsTheFloatResultRounded) {
  std::mt19937_64 rng(12);
  struct Case {
    long D;
    bool b16;
    long shift;  // elements the packed QKV starts past its buffer's (aligned) start
    long T;      // (77, 70: two 64-row tiles, so the pipelined loops prefetch)
  };
  std::vector<Case> cases = {Case{16, true, 0, 77}, Case{64, true, 0, 37}, Case{64, true, 1, 21}, Case{40, true, 0, 21},
                             Case{64, false, 0, 21}};
  if (kt::quick()) cases = {Case{16, true, 0, 70}, Case{16, true, 1, 21}};  // (the sanitizer builds: both stagings)
  for (const Case& cs : cases) {
    SCOPED_TRACE("D " + std::to_string(cs.D) + (cs.b16 ? " bf16 operands" : "") + " shift " + std::to_string(cs.shift) +
                 " T " + std::to_string(cs.T));
    const bool small = kt::quick();  // (the sanitizer builds: one sequence, two heads sharing one k/v head)
    const long D = cs.D, B = small ? 1 : 2, T = cs.T, H = small ? 2 : 4, Hkv = small ? 1 : 2, W = (H + 2 * Hkv) * D, N = B * T;
    const Vec qkv = kt::rounded<K::bf16>(kt::randv(N * W + cs.shift, rng)), dout = kt::randv(N * H * D, rng);
    const K::emu::Launcher L{128, 3};
    std::vector<float> terms(size_t(K::flash_bwd_scratch(B, H, T, D)));
    // fp32 storage: the reference
    Buf<float> pf(qkv), of{Vec(N * H * D)}, sf{Vec(B * H * T * 2)}, dof(dout), gf{Vec(N * W)};
    float* P = pf.data() + cs.shift;
    K::flash_attention_fwd(L, of.data(), sf.data(), P, P + H * D, P + (H + Hkv) * D, B, T, T, H, Hkv, D, W, W, cs.b16);
    Buf<float> of16(kt::rounded<K::bf16>(of.dbl()));  // out as the backward reads it: rounded
    K::flash_attention_bwd(L, gf.data(), gf.data() + H * D, gf.data() + (H + Hkv) * D, dof.data(), of16.data(),
                           sf.data(), P, P + H * D, P + (H + Hkv) * D, B, T, T, H, Hkv, D, W, W, cs.b16, terms.data());
    // bf16 storage
    Buf<K::bf16> pb(qkv), ob{Vec(N * H * D)};
    Buf<float> sb{Vec(B * H * T * 2)}, gb{Vec(size_t(N * W), 7.0)};  // (overwritten: accumulate false)
    const K::bf16* Pb = pb.data() + cs.shift;
    K::flash_attention_fwd(L, ob.data(), sb.data(), Pb, Pb + H * D, Pb + (H + Hkv) * D, B, T, T, H, Hkv, D, W, W,
                           cs.b16);
    EXPECT_EQ(ob.dbl(), of16.dbl());
    EXPECT_EQ(sb.dbl(), sf.dbl());
    K::flash_attention_bwd(L, gb.data(), gb.data() + H * D, gb.data() + (H + Hkv) * D, dof.data(), ob.data(),
                           sb.data(), Pb, Pb + H * D, Pb + (H + Hkv) * D, B, T, T, H, Hkv, D, W, W, cs.b16,
                           terms.data(), false);
    EXPECT_EQ(gb.dbl(), gf.dbl());
  }
}
}  // namespace
