// Tests of exec/cp_attention (context parallelism's pieces) on one rank: the chunk layout (rank r of cp holds
// chunks r and 2 cp - 1 - r), the token selection, positions by global index, and the attention over the
// chunks' key prefixes with the causal mask of global positions — with a one-rank "cp group" (cp = 1: chunks 0
// and 1 of the same sequence) the chunked attention must equal the plain causal attention exactly, forward and
// backward (the multi-rank runs are the oracle tests in test_run_oracle.cpp).
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "exec/comm/comm.hpp"
#include "exec/model/cp_attention.hpp"
#include "exec/backends/ops.hpp"

namespace {
using tp::exec::CpCtx;
using Vec = std::vector<double>;

Vec randv(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> d(-1, 1);
  Vec v(n);
  for (double& x : v) x = d(rng);
  return v;
}
double max_diff(const Vec& a, const Vec& b) {
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::abs(a[i] - b[i]));
  return m;
}
}  // namespace

TEST(CpAttention, ChunkLayoutIsMegatronsLoadBalancedOrder) {
  // seq 16, cp 2: chunks of 4; rank 0 holds chunks 0 and 3, rank 1 chunks 1 and 2.
  CpCtx c0{nullptr, 2, 0, 16}, c1{nullptr, 2, 1, 16};
  EXPECT_EQ(c0.Lc(), 4);
  EXPECT_EQ(c0.Tl(), 8);
  std::vector<long> p0, p1;
  for (long t = 0; t < 8; ++t) { p0.push_back(c0.global_pos(t)); p1.push_back(c1.global_pos(t)); }
  EXPECT_EQ(p0, (std::vector<long>{0, 1, 2, 3, 12, 13, 14, 15}));
  EXPECT_EQ(p1, (std::vector<long>{4, 5, 6, 7, 8, 9, 10, 11}));
  // Two sequences: each rank takes its rows of each.
  std::vector<int32_t> full(32), local(16);
  for (int i = 0; i < 32; ++i) full[i] = 100 + i;
  tp::exec::cp_select_tokens(c1, full.data(), local.data(), 2);
  EXPECT_EQ(local, (std::vector<int32_t>{104, 105, 106, 107, 108, 109, 110, 111, 120, 121, 122, 123, 124, 125, 126, 127}));
  // The saved probabilities: per sequence, half 0 sees (r + 1) Lc keys, half 1 (2 cp - r) Lc.
  EXPECT_EQ(c0.att_elems(1, 1), 4 * 4 + 4 * 16);
  EXPECT_EQ(c1.att_elems(1, 1), 4 * 8 + 4 * 12);
}

TEST(CpAttention, PositionsAreGlobal) {
  const long C = 3, T = 16;
  CpCtx c{nullptr, 2, 1, T};
  Vec wpe = randv(T * C, 1), x(2 * c.Tl() * C, 0.0);
  // Rows [5, 13) of the two local sequences (a sequence-parallel shard crossing a chunk and a sequence boundary).
  tp::exec::cp_add_positions(c, x.data(), wpe.data(), 8, C, 5);
  for (long i = 0; i < 8; ++i) {
    long pos = c.global_pos((5 + i) % c.Tl());
    for (long k = 0; k < C; ++k) EXPECT_EQ(x[i * C + k], wpe[pos * C + k]) << i;
  }
  Vec dwpe(T * C, 0.0), dx = randv(8 * C, 2);
  tp::exec::cp_positions_bwd(c, dwpe.data(), dx.data(), 8, C, 5);
  for (long i = 0; i < 8; ++i) {
    long pos = c.global_pos((5 + i) % c.Tl());
    for (long k = 0; k < C; ++k) EXPECT_EQ(dwpe[pos * C + k], dx[i * C + k]) << i;
  }
}

// Both ways of saving the attention's state: the probabilities, and flash's row statistics.
TEST(CpAttention, OneRankChunkedAttentionEqualsCausalAttention) {
  auto comm = tp::exec::make_local_comm();
  const long B = 2, T = 8, H = 4, Hkv = 2, D = 3;
  const long nq = B * T * H * D, nk = B * T * Hkv * D;
  Vec q = randv(nq, 3), k = randv(nk, 4), v = randv(nk, 5), dout = randv(nq, 6);
  Vec out(nq), out_cp(nq);
  for (bool flash : {false, true}) {
    SCOPED_TRACE(flash ? "flash" : "unfused");
    CpCtx c{comm.get(), 1, 0, T};  // chunks 0 and 1 of 4 tokens: prefixes of 4 and 8 keys
    c.flash = flash;
    Vec att(B * H * T * (flash ? 2 : T)), att_cp(c.att_elems(B, H));
    if (flash) {
      EXPECT_EQ(c.att_elems(B, H), B * H * T * 2);
      tp::ops::flash_attention_fwd(out.data(), att.data(), q.data(), k.data(), v.data(), B, T, T, H, Hkv, D, H * D, Hkv * D);
    } else {
      tp::ops::attention_fwd(out.data(), att.data(), q.data(), k.data(), v.data(), B, T, H, Hkv, D);
    }
    tp::exec::cp_attention_fwd(c, out_cp.data(), att_cp.data(), q.data(), k.data(), v.data(), B, H, Hkv, D);
    EXPECT_LT(max_diff(out, out_cp), 1e-14);
    Vec dq(nq, 0.0), dk(nk, 0.0), dv(nk, 0.0), dq_cp(nq, 0.0), dk_cp(nk, 0.0), dv_cp(nk, 0.0);
    if (flash)
      tp::ops::flash_attention_bwd(dq.data(), dk.data(), dv.data(), dout.data(), out.data(), att.data(), q.data(),
                                   k.data(), v.data(), B, T, T, H, Hkv, D, H * D, Hkv * D);
    else
      tp::ops::attention_bwd(dq.data(), dk.data(), dv.data(), dout.data(), att.data(), q.data(), k.data(), v.data(), B,
                             T, H, Hkv, D);
    tp::exec::cp_attention_bwd(c, dq_cp.data(), dk_cp.data(), dv_cp.data(), dout.data(), out_cp.data(), att_cp.data(),
                               q.data(), k.data(), v.data(), B, H, Hkv, D);
    EXPECT_LT(max_diff(dq, dq_cp), 1e-13);
    EXPECT_LT(max_diff(dk, dk_cp), 1e-13);
    EXPECT_LT(max_diff(dv, dv_cp), 1e-13);
  }
  // A mask by local positions (each chunk attending only its own keys) gives another output: the test can fail.
  Vec out_local(nq), att_local(B * H * 4 * 4);
  Vec q0(B * 4 * H * D), k0(B * 4 * Hkv * D), v0(B * 4 * Hkv * D);
  for (long b = 0; b < B; ++b)  // the second chunk of each sequence alone
    for (long t = 0; t < 4; ++t) {
      for (long i = 0; i < H * D; ++i) q0[(b * 4 + t) * H * D + i] = q[(b * T + 4 + t) * H * D + i];
      for (long i = 0; i < Hkv * D; ++i) {
        k0[(b * 4 + t) * Hkv * D + i] = k[(b * T + 4 + t) * Hkv * D + i];
        v0[(b * 4 + t) * Hkv * D + i] = v[(b * T + 4 + t) * Hkv * D + i];
      }
    }
  tp::ops::attention_fwd(out_local.data(), att_local.data(), q0.data(), k0.data(), v0.data(), B, 4, H, Hkv, D);
  EXPECT_GT(std::abs(out_local[0] - out_cp[4 * H * D]), 1e-6);
}
