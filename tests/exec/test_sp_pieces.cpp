// test_sp_pieces: sequence parallelism's collectives in pieces (exec/model/sp_pieces.hpp, plan.tp_comm_overlap) on
// one rank of a pretend tp group whose non-blocking collectives run only when waited for, as late as NCCL may
// (emu-device's stand-in does the same between real ranks): a block handed on before its piece's wait, a staging
// buffer reused too early, a row missed or given twice, or a piece in the wrong place each fails here. The whole
// forms are the oracle.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <set>
#include <stdexcept>
#include <utility>
#include <vector>

#include "exec/comm/comm.hpp"
#include "exec/model/sp_pieces.hpp"

using namespace tp::exec;

namespace {

// Rank `me` of a group of t whose ranks hold shards that differ by 1000 per rank (rank q's value = this rank's +
// 1000 (q - me)), and whose partial products are (q + 1) times this rank's: an all-gather and a reduce-scatter are
// thus known from this rank's data alone. Non-blocking calls are queued and run at their wait, reading their input
// then; blocking calls run at once (and count).
struct PretendGroup final : Comm {
  int t, me;
  long blocking = 0, started = 0, waited = 0;
  struct Pending { bool gather; const double* in; double* out; long n; };
  std::vector<Pending> queue;
  PretendGroup(int t_, int me_) : t(t_), me(me_) {}
  int rank() const override { return me; }
  int size() const override { return t; }
  std::unique_ptr<Comm> split(int, int) override { throw std::logic_error("split"); }
  void run(const Pending& p) {
    if (p.gather)
      for (int q = 0; q < t; ++q)
        for (long i = 0; i < p.n; ++i) p.out[q * p.n + i] = p.in[i] + 1000.0 * (q - me);
    else
      for (long i = 0; i < p.n; ++i) p.out[i] = p.in[me * p.n + i] * (t * (t + 1) / 2.0);
  }
  void all_gather(const void* in, void* out, long n, Dtype) override {
    ++blocking;
    run({true, static_cast<const double*>(in), static_cast<double*>(out), n});
  }
  void reduce_scatter_sum(const void* in, void* out, long n, Dtype) override {
    ++blocking;
    run({false, static_cast<const double*>(in), static_cast<double*>(out), n});
  }
  CommRequest iall_gather(const void* in, void* out, long n, Dtype) override {
    queue.push_back({true, static_cast<const double*>(in), static_cast<double*>(out), n});
    return {started++};
  }
  CommRequest ireduce_scatter_sum(const void* in, void* out, long n, Dtype) override {
    queue.push_back({false, static_cast<const double*>(in), static_cast<double*>(out), n});
    return {started++};
  }
  void wait(CommRequest r) override {  // (in issue order, as a stream runs them)
    if (r.id != waited) throw std::logic_error("waited out of order");
    run(queue[(size_t)waited++]);
  }
  void all_reduce_sum(void*, long, Dtype) override { throw std::logic_error("all_reduce"); }
  void broadcast(void*, long, Dtype, int) override { throw std::logic_error("broadcast"); }
  void reduce_sum(const void*, void*, long, Dtype, int) override { throw std::logic_error("reduce"); }
  void all_to_all(const void*, void*, long, Dtype) override { throw std::logic_error("all_to_all"); }
  void send(const void*, long, Dtype, int, int) override {}
  void recv(void*, long, Dtype, int, int) override {}
  void isend(const void*, long, Dtype, int, int) override {}
  void wait_sends() override {}
  int reap_sends() override { return 0; }
  void barrier() override {}
  [[noreturn]] void abort(int, const std::string& m) override { throw std::runtime_error(m); }
};

Buf<double> filled(long n, double base) {
  Buf<double> b((size_t)n);
  for (long i = 0; i < n; ++i) b.data()[i] = base + i;
  return b;
}

}  // namespace

// The all-gather in pieces: this rank's rows come first, every row of full reaches ready exactly once and only after
// it has arrived, full ends as the whole all-gather's, and the pieces (2) all went through the non-blocking calls.
TEST(SpPieces, GatherHandsOnEveryRowOnceAfterItArrives) {
  for (const auto& [t, me, Nl] : std::vector<std::tuple<int, int, long>>{{2, 0, 4}, {4, 1, 5}, {3, 2, 1}}) {
    const long C = 3, N = Nl * t;
    const Buf<double> shard = filled(Nl * C, 7.0 + me * 1000.0);
    Buf<double> whole((size_t)(N * C)), full((size_t)(N * C));
    PretendGroup oracle(t, me), g(t, me);
    gather_rows_then(&oracle, false, shard.data(), whole.data(), Nl, C, [](long, long) {});
    for (long i = 0; i < N * C; ++i) full.data()[i] = -1;
    std::vector<int> seen((size_t)N, 0);
    std::vector<std::pair<long, long>> blocks;
    gather_rows_then(&g, true, shard.data(), full.data(), Nl, C, [&](long r0, long rows) {
      blocks.push_back({r0, rows});
      for (long r = r0; r < r0 + rows; ++r) {
        ++seen[(size_t)r];
        for (long c = 0; c < C; ++c) ASSERT_EQ(full.data()[r * C + c], whole.data()[r * C + c]) << "row " << r;
      }
    });
    const SpPieces sp = sp_pieces(Nl, kSpGatherPieces);
    ASSERT_FALSE(blocks.empty());
    EXPECT_EQ(blocks[0], std::make_pair(me * Nl, Nl)) << "this rank's own rows first, without a wait";
    EXPECT_EQ(blocks.size(), 1 + size_t(sp.k) * (t - 1));
    for (long r = 0; r < N; ++r) EXPECT_EQ(seen[(size_t)r], 1) << "row " << r;
    for (long i = 0; i < N * C; ++i) EXPECT_EQ(full.data()[i], whole.data()[i]) << i;
    EXPECT_EQ(g.blocking, 0);
    EXPECT_EQ(g.started, sp.k);
    EXPECT_EQ(g.waited, sp.k);
  }
}

// The reduce-scatter in pieces: each piece's rows of every rank computed once into staging, the shard ends as the
// whole reduce-scatter's (the same sums), staging is not reused before its piece's wait, and all pieces (4, or as many
// as rows) are waited for by the return.
TEST(SpPieces, ReduceScatterInPiecesIsTheWholeOnesSums) {
  for (const auto& [t, me, Nl] : std::vector<std::tuple<int, int, long>>{{2, 1, 8}, {3, 2, 7}, {4, 0, 3}}) {
    const long C = 2, N = Nl * t;
    auto product = [&](double* out, long r0, long rows) {  // rows of a known partial product P[r][c] = 10 r + c
      for (long r = 0; r < rows; ++r)
        for (long c = 0; c < C; ++c) out[r * C + c] = 10.0 * (r0 + r) + c;
    };
    Buf<double> z((size_t)(N * C)), want((size_t)(Nl * C)), got((size_t)(Nl * C));
    product(z.data(), 0, N);
    PretendGroup oracle(t, me), g(t, me);
    reduce_scatter_rows(&oracle, z.data(), want.data(), Nl, C);
    std::vector<int> made((size_t)N, 0);
    reduce_scatter_rows_pieces(&g, got.data(), Nl, C, [&](double* out, long r0, long rows) {
      for (long r = r0; r < r0 + rows; ++r) ++made[(size_t)r];
      product(out, r0, rows);
    });
    const SpPieces sp = sp_pieces(Nl, kSpScatterPieces);
    for (long r = 0; r < N; ++r) EXPECT_EQ(made[(size_t)r], 1) << "row " << r;
    for (long i = 0; i < Nl * C; ++i) EXPECT_EQ(got.data()[i], want.data()[i]) << i;
    EXPECT_EQ(g.blocking, 0);
    EXPECT_EQ(g.started, sp.k);
    EXPECT_EQ(g.waited, sp.k);
  }
}

// Pieces are as even as the rows allow and never empty; on shards of 16 rows a piece or more their bounds fall on
// multiples of 16 (cuBLASLt's fp8 GEMMs), so a shard of a multiple of 16 rows has pieces of multiples of 16.
TEST(SpPieces, PiecesSplitTheShardEvenly) {
  for (long Nl : {64L, 100L, 512L, 4096L}) {
    const SpPieces b = sp_pieces(Nl, kSpScatterPieces);
    long total = 0;
    for (int j = 0; j < b.k; ++j) {
      EXPECT_GE(b.rows(j), 16) << Nl << " " << j;
      if (j + 1 < b.k || Nl % 16 == 0) {
        EXPECT_EQ(b.rows(j) % 16, 0) << Nl << " " << j;
      }
      total += b.rows(j);
    }
    EXPECT_EQ(total, Nl);
  }
  const SpPieces a = sp_pieces(10, 4);
  EXPECT_EQ(a.k, 4);
  long sum = 0;
  for (int j = 0; j < a.k; ++j) {
    EXPECT_GE(a.rows(j), 2);
    EXPECT_LE(a.rows(j), a.max_rows());
    sum += a.rows(j);
  }
  EXPECT_EQ(sum, 10);
  EXPECT_EQ(sp_pieces(3, 4).k, 3);
  EXPECT_EQ(sp_pieces(1, 2).k, 1);
}
