// The row-wise and reducing kernels (exec/kernels/k_rows.hpp, k_reduce.hpp) on the emulator against float64
// references, float / double / bf16, over every kt::configs() shape / launcher / schedule: LayerNorm forward
// (with and without bias) and backward (dx, dw, db accumulating), softmax forward / backward (plain and
// causal, in place), cross-entropy fused and in vocabulary shards, bias gradient, sum of squares, embedding
// forward / backward with a vocabulary offset and repeated tokens. This file is also built with
// TP_KERNELS_TEST_DROP_SYNC (one sync removed from the block reduction), where it must fail.
#include <algorithm>
#include <cmath>
#include <tuple>

#include "tests/kernels/kt_util.hpp"

namespace {
namespace K = tp::kernels;
using kt::Buf;
using kt::Vec;

template <class T>
class KernelRows : public ::testing::Test {};
using Types = ::testing::Types<float, double, K::bf16>;
TYPED_TEST_SUITE(KernelRows, Types);

template <class A>
Vec dbl(const std::vector<A>& v) {
  return Vec(v.begin(), v.end());
}

TYPED_TEST(KernelRows, LayerNorm) {
  using T = TypeParam;
  using A = K::acc_t<T>;
  std::mt19937_64 rng(11);
  for (const kt::Config& cf : kt::configs()) {
    SCOPED_TRACE(cf.str());
    kt::ScheduleScope sc(cf.sched);
    const long N = cf.s.rows, C = cf.s.cols;
    const Vec x = kt::rounded<T>(kt::randv(N * C, rng, -2, 3)), w = kt::rounded<T>(kt::randv(C, rng)),
              b = kt::rounded<T>(kt::randv(C, rng)), dy = kt::rounded<T>(kt::randv(N * C, rng));
    const Vec dx0 = kt::rounded<T>(kt::randv(N * C, rng)), dw0 = kt::rounded<T>(kt::randv(C, rng)),
              db0 = kt::rounded<T>(kt::randv(C, rng));
    const double eps = 1e-5;
    Vec y(N * C), yb(N * C), mean(N), rstd(N), dx(dx0), dw(dw0), db(db0);
    for (long r = 0; r < N; ++r) {
      double m = 0, v = 0;
      for (long c = 0; c < C; ++c) m += x[r * C + c];
      m /= C;
      for (long c = 0; c < C; ++c) v += (x[r * C + c] - m) * (x[r * C + c] - m);
      const double s = 1 / std::sqrt(v / C + eps);
      double gm = 0, gxm = 0;
      for (long c = 0; c < C; ++c) {
        const double xh = (x[r * C + c] - m) * s, g = w[c] * dy[r * C + c];
        y[r * C + c] = xh * w[c];
        yb[r * C + c] = xh * w[c] + b[c];
        gm += g / C;
        gxm += g * xh / C;
        dw[c] += xh * dy[r * C + c];
        db[c] += dy[r * C + c];
      }
      for (long c = 0; c < C; ++c) {
        const double xh = (x[r * C + c] - m) * s;
        dx[r * C + c] += s * (w[c] * dy[r * C + c] - gm - xh * gxm);
      }
      mean[r] = m;
      rstd[r] = s;
    }
    Buf<T> bx(x), bw(w), bb(b), by(Vec(N * C, 0.0)), bdy(dy), bdx(dx0), bdw(dw0), bdb(db0);
    std::vector<A> km(N, -1), ks(N, -1);
    K::layernorm_fwd(cf.L, by.data(), km.data(), ks.data(), bx.data(), bw.data(), (const T*)nullptr, N, C, A(eps));
    EXPECT_TRUE(kt::near<T>(by.dbl(), y, 4));
    K::layernorm_fwd(cf.L, by.data(), km.data(), ks.data(), bx.data(), bw.data(), bb.data(), N, C, A(eps));
    EXPECT_TRUE(kt::near<T>(by.dbl(), yb, 4));
    EXPECT_TRUE(kt::near<float>(dbl(km), mean));
    EXPECT_TRUE(kt::near<float>(dbl(ks), rstd, 10));
    K::layernorm_bwd_dx(cf.L, bdx.data(), bdy.data(), bx.data(), bw.data(), km.data(), ks.data(), N, C);
    EXPECT_TRUE(kt::near<T>(bdx.dbl(), dx, 10));
    std::vector<A> scr(size_t(K::column_sums_scratch(N, C)) + 1, A(-1));
    K::layernorm_bwd_wb(cf.L, bdw.data(), bdb.data(), bdy.data(), bx.data(), km.data(), ks.data(), N, C, scr.data());
    EXPECT_TRUE(kt::near<T>(bdw.dbl(), dw, 4 * std::sqrt(double(N))));
    EXPECT_TRUE(kt::near<T>(bdb.dbl(), db, 2 * std::sqrt(double(N))));
  }
}

TYPED_TEST(KernelRows, Softmax) {
  using T = TypeParam;
  using A = K::acc_t<T>;
  std::mt19937_64 rng(12);
  for (const kt::Config& cf : kt::configs()) {
    SCOPED_TRACE(cf.str());
    kt::ScheduleScope sc(cf.sched);
    const long R = cf.s.rows, L = cf.s.cols;
    const Vec x = kt::rounded<T>(kt::randv(R * L, rng, -4, 4)), dy = kt::rounded<T>(kt::randv(R * L, rng));
    const Vec d0 = kt::rounded<T>(kt::randv(R * L, rng));
    const double scale = 0.7;
    // 0: full rows; 1: causal square blocks (Q = L); 2: causal rectangular blocks of Q < L query rows.
    for (int mode : {0, 1, 2}) {
      const bool causal = mode > 0;
      const long Q = mode == 2 ? (L + 1) / 2 : L;
      SCOPED_TRACE(mode == 0 ? "full" : mode == 1 ? "causal" : "causal rectangular");
      Vec y(R * L, 0.0), dacc(d0), dset(R * L);
      for (long r = 0; r < R; ++r) {
        const long n = causal ? r % Q + (L - Q) + 1 : L;
        double mx = -1e300, s = 0, dot = 0;
        for (long j = 0; j < n; ++j) mx = std::max(mx, scale * x[r * L + j]);
        for (long j = 0; j < n; ++j) s += std::exp(scale * x[r * L + j] - mx);
        for (long j = 0; j < n; ++j) y[r * L + j] = std::exp(scale * x[r * L + j] - mx) / s;
        const Vec yr = kt::rounded<T>(Vec(y.begin() + r * L, y.begin() + (r + 1) * L));  // the kernel's stored y
        for (long j = 0; j < L; ++j) dot += yr[j] * dy[r * L + j];
        for (long j = 0; j < L; ++j) {
          dset[r * L + j] = scale * yr[j] * (dy[r * L + j] - dot);
          dacc[r * L + j] += dset[r * L + j];
        }
      }
      Buf<T> by(x);
      if (mode == 2) K::softmax_fwd_rect(cf.L, by.data(), by.data(), R, L, Q, A(scale));  // in place
      else K::softmax_fwd(cf.L, by.data(), by.data(), R, L, A(scale), causal);
      EXPECT_TRUE(kt::near<T>(by.dbl(), y, 2));
      Buf<T> bdy(dy), bd(d0);
      K::softmax_bwd<false>(cf.L, bd.data(), by.data(), bdy.data(), R, L, A(scale));
      EXPECT_TRUE(kt::near<T>(bd.dbl(), dacc, 4));
      K::softmax_bwd<true>(cf.L, bdy.data(), by.data(), bdy.data(), R, L, A(scale));  // dx == dy
      EXPECT_TRUE(kt::near<T>(bdy.dbl(), dset, 4));
      // The bf16 copies made in the same pass (the CUDA backend's bf16 GEMM operands P and dS) are the casts of
      // the stored outputs, element for element, and the outputs themselves are unchanged.
      auto same16 = [](const std::vector<K::bf16>& h, const Vec& v) {
        for (size_t i = 0; i < v.size(); ++i)
          if (h[i].bits != K::to_bf16(float(v[i])).bits) return false;
        return true;
      };
      std::vector<K::bf16> y16(R * L), d16(R * L), p16(R * L);
      Buf<T> by2(x);
      if (mode == 2) K::softmax_fwd_rect(cf.L, by2.data(), by2.data(), R, L, Q, A(scale), y16.data());
      else K::softmax_fwd(cf.L, by2.data(), by2.data(), R, L, A(scale), causal, y16.data());
      EXPECT_EQ(by2.dbl(), by.dbl());
      EXPECT_TRUE(same16(y16, by2.dbl()));
      Buf<T> bdy2(dy);
      K::softmax_bwd<true>(cf.L, bdy2.data(), by.data(), bdy2.data(), R, L, A(scale), d16.data(), p16.data());
      EXPECT_EQ(bdy2.dbl(), bdy.dbl());
      EXPECT_TRUE(same16(d16, bdy2.dbl()));
      EXPECT_TRUE(same16(p16, by.dbl()));
    }
  }
}

// Fused cross-entropy over the whole vocabulary, then the same rows in `shards` vocabulary shards.
TYPED_TEST(KernelRows, CrossEntropy) {
  using T = TypeParam;
  using A = K::acc_t<T>;
  std::mt19937_64 rng(13);
  for (const kt::Config& cf : kt::configs()) {
    SCOPED_TRACE(cf.str());
    kt::ScheduleScope sc(cf.sched);
    const long N = cf.s.rows, V = cf.s.cols;
    const Vec lg = kt::rounded<T>(kt::randv(N * V, rng, -5, 5));
    std::vector<int32_t> tg(N);
    for (auto& t : tg) t = int32_t(rng() % V);
    Vec p(N * V), loss(N), dset(N * V);
    const double scale = 1.0 / N;
    for (long r = 0; r < N; ++r) {
      double mx = -1e300, s = 0;
      for (long j = 0; j < V; ++j) mx = std::max(mx, lg[r * V + j]);
      for (long j = 0; j < V; ++j) s += std::exp(lg[r * V + j] - mx);
      for (long j = 0; j < V; ++j) p[r * V + j] = std::exp(lg[r * V + j] - mx) / s;
      loss[r] = std::log(s) - (lg[r * V + tg[r]] - mx);
    }
    const Vec pr = kt::rounded<T>(p);
    for (long i = 0; i < N * V; ++i) dset[i] = scale * (pr[i] - (i % V == tg[i / V] ? 1 : 0));
    Buf<T> bl(lg);
    std::vector<A> kl(N, -1);
    K::cross_entropy_fwd(cf.L, bl.data(), kl.data(), bl.data(), tg.data(), N, V);  // probs over the logits
    EXPECT_TRUE(kt::near<T>(bl.dbl(), p, 2));
    EXPECT_TRUE(kt::near<float>(dbl(kl), loss, 10));
    const Vec d0 = kt::rounded<T>(kt::randv(N * V, rng));
    Vec dacc(d0);
    for (long i = 0; i < N * V; ++i) dacc[i] += dset[i];
    Buf<T> bd(d0);
    K::cross_entropy_bwd<false>(cf.L, bd.data(), bl.data(), tg.data(), N, V, 0, A(scale));
    EXPECT_TRUE(kt::near<T>(bd.dbl(), dacc, 2));
    K::cross_entropy_bwd<true>(cf.L, bl.data(), bl.data(), tg.data(), N, V, 0, A(scale));  // over the probs
    EXPECT_TRUE(kt::near<T>(bl.dbl(), dset));
    // Shards [v0, v0 + Vl): max over shards, then exp-sums and target logits summed over shards.
    const long shards = V >= 3 ? 3 : 1;
    std::vector<A> gmx(N, -1e30f), sums(N, 0), tls(N, 0);
    std::vector<Buf<T>> parts;
    for (long k = 0; k < shards; ++k) {
      const long v0 = V * k / shards, v1 = V * (k + 1) / shards;
      Vec part;
      for (long r = 0; r < N; ++r) part.insert(part.end(), lg.begin() + r * V + v0, lg.begin() + r * V + v1);
      parts.emplace_back(part);
      std::vector<A> mx(N);
      K::ce_shard_max(cf.L, mx.data(), parts.back().data(), N, v1 - v0);
      for (long r = 0; r < N; ++r) gmx[r] = std::max(gmx[r], mx[r]);
    }
    for (long k = 0; k < shards; ++k) {
      const long v0 = V * k / shards, v1 = V * (k + 1) / shards;
      std::vector<A> s(N, -1), t(N, -1);
      K::ce_shard_expsum(cf.L, s.data(), t.data(), parts[k].data(), gmx.data(), tg.data(), N, v1 - v0, v0);
      for (long r = 0; r < N; ++r) sums[r] += s[r], tls[r] += t[r];
    }
    Vec sloss(N), sp;
    for (long r = 0; r < N; ++r) sloss[r] = std::log(double(sums[r])) + gmx[r] - tls[r];
    EXPECT_TRUE(kt::near<float>(sloss, loss, 10));
    for (long k = 0; k < shards; ++k) {
      const long v0 = V * k / shards, v1 = V * (k + 1) / shards, Vl = v1 - v0;
      K::ce_shard_normalize(cf.L, parts[k].data(), parts[k].data(), gmx.data(), sums.data(), N, Vl);
      K::cross_entropy_bwd<true>(cf.L, parts[k].data(), parts[k].data(), tg.data(), N, Vl, v0, A(scale));
      const Vec got = parts[k].dbl();
      for (long r = 0; r < N; ++r)
        for (long j = 0; j < Vl; ++j) {
          const long i = r * V + v0 + j;
          ASSERT_NEAR(got[r * Vl + j], dset[i], kt::tol<T>().atol * 4 + kt::tol<T>().rtol * std::fabs(dset[i]))
              << "shard " << k << " row " << r << " col " << j;
        }
    }
  }
}

TYPED_TEST(KernelRows, BiasGradAndSumSquares) {
  using T = TypeParam;
  std::mt19937_64 rng(14);
  for (const kt::Config& cf : kt::configs()) {
    SCOPED_TRACE(cf.str());
    kt::ScheduleScope sc(cf.sched);
    const long N = cf.s.rows, C = cf.s.cols;
    const Vec dy = kt::rounded<T>(kt::randv(N * C, rng)), db0 = kt::rounded<T>(kt::randv(C, rng));
    Vec db(db0);
    double ss = 0;
    for (long i = 0; i < N * C; ++i) db[i % C] += dy[i], ss += dy[i] * dy[i];
    Buf<T> bdy(dy), bdb(db0);
    std::vector<K::acc_t<T>> scr(size_t(K::column_sums_scratch(N, C)) + 1, -1);
    K::bias_bwd(cf.L, bdb.data(), bdy.data(), N, C, scr.data());
    EXPECT_TRUE(kt::near<T>(bdb.dbl(), db, 2 * std::sqrt(double(N))));
    std::vector<double> out(1, -1), scratch(cf.L.max_grid, -1);
    K::sum_squares(cf.L, out.data(), scratch.data(), bdy.data(), N * C);
    EXPECT_NEAR(out[0], ss, 1e-12 * ss + 1e-300);
  }
}

// Column sums over many rows run in row chunks and a second pass (k_reduce.hpp column_chunks): the bias and
// LayerNorm weight / bias gradients of 1000 rows (32 chunks) and of 3000 rows of a wide input (chunks limited by
// the grid), against the double reference, with grids smaller than the work units.
TYPED_TEST(KernelRows, ColumnSumsInRowChunks) {
  using T = TypeParam;
  using A = K::acc_t<T>;
  std::mt19937_64 rng(15);
  std::vector<std::tuple<long, long, kt::Launcher>> shapes = {{1000L, 45L, kt::Launcher{64, 3}}};
  if (!kt::quick()) shapes.push_back({3000L, 700L, kt::Launcher{128, 7}});  // (2.1M elements: slow under the sanitizers)
  for (const auto& [N, C, L] : shapes) {
    SCOPED_TRACE(kt::where({N, C}, L));
    ASSERT_GT(K::column_chunks(N, C), 1);
    ASSERT_LE(K::column_chunks(N, C) * ((C + 31) / 32), K::kColumnBlocks);
    const Vec dy = kt::rounded<T>(kt::randv(N * C, rng)), x = kt::rounded<T>(kt::randv(N * C, rng)),
              dw0 = kt::rounded<T>(kt::randv(C, rng)), db0 = kt::rounded<T>(kt::randv(C, rng));
    std::vector<A> mean(N), rstd(N);
    for (long n = 0; n < N; ++n) mean[n] = A(0.1 * double(n % 7)), rstd[n] = A(1 + 0.01 * double(n % 5));
    Vec dw(dw0), db(db0);
    for (long n = 0; n < N; ++n)
      for (long c = 0; c < C; ++c) {
        db[c] += dy[n * C + c];
        dw[c] += (x[n * C + c] - double(mean[n])) * double(rstd[n]) * dy[n * C + c];
      }
    std::vector<A> scr(size_t(K::column_sums_scratch(N, C)), A(-1));
    Buf<T> bdy(dy), bx(x), bdw(dw0), bdb(db0), bb(db0);
    K::bias_bwd(L, bb.data(), bdy.data(), N, C, scr.data());
    EXPECT_TRUE(kt::near<T>(bb.dbl(), db, 2 * std::sqrt(double(N))));
    K::layernorm_bwd_wb(L, bdw.data(), bdb.data(), bdy.data(), bx.data(), mean.data(), rstd.data(), N, C, scr.data());
    EXPECT_TRUE(kt::near<T>(bdw.dbl(), dw, 4 * std::sqrt(double(N))));
    EXPECT_TRUE(kt::near<T>(bdb.dbl(), db, 2 * std::sqrt(double(N))));
  }
}

// Tokens in [0, V) with repeats; the shard [v0, v0 + Vl) sees only its tokens (others: zero rows, no grads).
TYPED_TEST(KernelRows, Embedding) {
  using T = TypeParam;
  std::mt19937_64 rng(15);
  for (const kt::Config& cf : kt::configs()) {
    SCOPED_TRACE(cf.str());
    kt::ScheduleScope sc(cf.sched);
    const long B = 2, Tn = std::max(1L, cf.s.rows), C = cf.s.cols, V = 11, N = B * Tn;
    std::vector<int32_t> tok(N);
    for (auto& t : tok) t = int32_t(rng() % V);
    tok[0] = tok[N - 1];  // a repeated token
    for (auto [v0, Vl] : {std::pair<long, long>{0, V}, {4, 5}}) {
      SCOPED_TRACE("shard " + std::to_string(v0));
      const Vec wte = kt::rounded<T>(kt::randv(Vl * C, rng)), wpe = kt::rounded<T>(kt::randv(Tn * C, rng));
      const Vec dout = kt::rounded<T>(kt::randv(N * C, rng)), dwte0 = kt::rounded<T>(kt::randv(Vl * C, rng)),
                dwpe0 = kt::rounded<T>(kt::randv(Tn * C, rng));
      Vec out(N * C), dwte(dwte0), dwpe(dwpe0);
      for (long i = 0; i < N; ++i) {
        const long t = tok[i] - v0;
        const bool in = t >= 0 && t < Vl;
        for (long c = 0; c < C; ++c) {
          out[i * C + c] = (in ? wte[t * C + c] : 0.0) + wpe[(i % Tn) * C + c];
          if (in) dwte[t * C + c] += dout[i * C + c];
          dwpe[(i % Tn) * C + c] += dout[i * C + c];
        }
      }
      Buf<T> bo(Vec(N * C, 0.0)), bwte(wte), bwpe(wpe), bdout(dout), bdwte(dwte0), bdwpe(dwpe0);
      K::embedding_fwd(cf.L, bo.data(), tok.data(), bwte.data(), bwpe.data(), B, Tn, C, v0, Vl);
      EXPECT_TRUE(kt::near<T>(bo.dbl(), out, 2));
      std::vector<int32_t> scratch(K::embedding_bwd_scratch(N));
      K::embedding_bwd(cf.L, bdwte.data(), bdwpe.data(), bdout.data(), tok.data(), B, Tn, C, v0, Vl, scratch.data());
      // bf16 gradients round after every added row, like a bf16 GPU kernel: the error grows with the repeats.
      EXPECT_TRUE(kt::near<T>(bdwte.dbl(), dwte, 4 * std::sqrt(double(N))));
      EXPECT_TRUE(kt::near<T>(bdwpe.dbl(), dwpe, 4));
    }
  }
}

}  // namespace
