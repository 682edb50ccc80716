// Tests for sim/chunks (PatrickStar's chunk manager for one rank): the layout (module order, no splitting,
// a huge tensor's own chunk, dummy padding, local chunks per rank), a model that fits (no steady moves,
// hybrid Adam placement), Belady eviction where LRU differs, the worst-case PCIe bytes per step, fits = false
// for a part larger than the budget, and determinism. Small closed-form cases only (E = 1000 elements).
#include <gtest/gtest.h>

#include <numeric>

#include "sim/chunks.hpp"

namespace tp {
namespace {

constexpr double kE = 1000;      // chunk_elements
constexpr double kChunk = 2000;  // fp16 bytes of one chunk

// A chain model: `per_part[p]` tensors (sizes) for part p; moments fwd 0..P-1, bwd P-1..0, ADAM.
// `overall` is the target overall GPU memory (hbm is set from it); non-model bytes `nm` at FWD/BWD moments
// and `nm_adam` at the ADAM moment.
ChunkSimInput chain(const std::vector<std::vector<double>>& per_part, double overall, double nm,
                    double nm_adam = 0, int world = 1, int rank = 0) {
  ChunkSimInput in;
  in.parts = static_cast<int>(per_part.size());
  for (int p = 0; p < in.parts; ++p)
    for (double e : per_part[p]) {
      in.tensor_elements.push_back(e);
      in.tensor_part.push_back(p);
    }
  in.chunk_elements = static_cast<long long>(kE);
  in.world = world;
  in.rank = rank;
  for (int p = 0; p < in.parts; ++p) in.moments.push_back({p});
  for (int p = in.parts - 1; p >= 0; --p) in.moments.push_back({p});
  in.moments.push_back({});
  in.moment_is_adam.assign(in.moments.size(), 0);
  in.moment_is_adam.back() = 1;
  in.nonmodel_bytes.assign(in.moments.size(), nm);
  in.nonmodel_bytes.back() = nm_adam;
  in.hbm_bytes = overall / in.gpu_memory_fraction;
  return in;
}

double sum(const std::vector<double>& v) { return std::accumulate(v.begin(), v.end(), 0.0); }

TEST(ChunkLayout, ModuleOrderNoSplit) {
  ChunkSimInput in;
  in.chunk_elements = 10;
  in.tensor_elements = {4, 4, 4, 3, 10, 2};
  in.tensor_part = {0, 0, 1, 1, 2, 2};
  in.parts = 3;
  ChunkLayout L = layout_chunks(in);
  EXPECT_EQ(L.chunk_of_tensor, (std::vector<int>{0, 0, 1, 1, 2, 3}));
  EXPECT_EQ(L.used_elements, (std::vector<double>{8, 7, 10, 2}));
  EXPECT_EQ(L.chunk_elements, (std::vector<double>{10, 10, 10, 10}));
  EXPECT_EQ(L.parts_of_chunk, (std::vector<std::vector<int>>{{0}, {1}, {2}, {2}}));
  for (char d : L.is_dummy) EXPECT_FALSE(d);
}

TEST(ChunkLayout, HugeTensorGetsItsOwnChunk) {
  ChunkSimInput in;
  in.chunk_elements = 10;
  in.tensor_elements = {3, 25, 3, 3};
  in.tensor_part = {0, 1, 1, 2};
  in.parts = 3;
  ChunkLayout L = layout_chunks(in);
  EXPECT_EQ(L.chunk_of_tensor, (std::vector<int>{0, 1, 2, 2}));
  EXPECT_EQ(L.chunk_elements, (std::vector<double>{10, 25, 10}));
  EXPECT_EQ(L.parts_of_chunk, (std::vector<std::vector<int>>{{0}, {1}, {1, 2}}));
}

TEST(ChunkLayout, DummyPaddingAndLocalChunksPerRank) {
  ChunkSimInput in;
  in.chunk_elements = 10;
  in.tensor_elements = {10, 10, 10, 10, 6};  // 5 chunks
  in.tensor_part = {0, 0, 1, 1, 2};
  in.parts = 3;
  in.world = 4;
  ChunkLayout L = layout_chunks(in);
  ASSERT_EQ(L.chunk_elements.size(), 8u);
  EXPECT_EQ(L.is_dummy, (std::vector<char>{0, 0, 0, 0, 0, 1, 1, 1}));
  for (int c = 5; c < 8; ++c) EXPECT_TRUE(L.parts_of_chunk[c].empty());
  const std::vector<int> want_local = {2, 1, 1, 1};
  const std::vector<double> want_elems = {16, 10, 10, 10};
  for (int rank = 0; rank < 4; ++rank) {
    in.rank = rank;
    ChunkSimResult r = simulate_chunks(in);  // no moments: layout accounting only
    EXPECT_EQ(r.chunks, 5);
    EXPECT_EQ(r.padded_chunks, 8);
    EXPECT_EQ(r.local_chunks, want_local[rank]) << "rank " << rank;
    EXPECT_DOUBLE_EQ(r.local_param_elements, want_elems[rank]) << "rank " << rank;
    EXPECT_DOUBLE_EQ(r.comm_buffer_bytes, 4 * 10 * 2);
  }
}

TEST(ChunkSim, ModelThatFitsHasNoSteadyMovesAndGpuAdam) {
  ChunkSimInput in = chain({{kE}, {kE}, {kE}, {kE}}, 1e9, 1e6);
  ChunkSimResult r = simulate_chunks(in);
  EXPECT_TRUE(r.fits);
  EXPECT_TRUE(r.moves.empty());
  EXPECT_EQ(sum(r.h2d_bytes) + sum(r.d2h_bytes), 0);
  EXPECT_EQ(r.local_chunks, 4);
  EXPECT_EQ(r.os_chunks_on_gpu, 4);
  EXPECT_DOUBLE_EQ(r.gpu_adam_elements, 4 * kE);
  EXPECT_DOUBLE_EQ(r.cpu_adam_elements, 0);
  EXPECT_DOUBLE_EQ(r.adam_d2h_bytes + r.adam_h2d_bytes, 0);
  EXPECT_DOUBLE_EQ(r.host_bytes, 0);
  EXPECT_DOUBLE_EQ(r.peak_gpu_chunk_bytes, 4 * kChunk);
  for (double b : r.gpu_chunk_bytes) EXPECT_DOUBLE_EQ(b, 4 * kChunk);
}

TEST(ChunkSim, HybridAdamCountFollowsMargin) {
  // margin = overall - max nonmodel - fp16 = 55500 - 10000 - 8000 = 37500; * 0.8 = 30000 = 2.5 OS chunks.
  ChunkSimInput in = chain({{kE}, {kE}, {kE}, {kE}}, 55500, 10000);
  ChunkSimResult r = simulate_chunks(in);
  EXPECT_TRUE(r.fits);
  EXPECT_EQ(r.os_chunks_on_gpu, 2);
  EXPECT_DOUBLE_EQ(r.gpu_os_bytes, 2 * kE * 12);
  EXPECT_DOUBLE_EQ(r.gpu_adam_elements, 2 * kE);
  EXPECT_DOUBLE_EQ(r.cpu_adam_elements, 2 * kE);
  ASSERT_EQ(r.adam_chunks.size(), 4u);
  EXPECT_TRUE(r.adam_chunks[0].os_on_gpu && r.adam_chunks[1].os_on_gpu);  // the first local chunks
  EXPECT_FALSE(r.adam_chunks[2].os_on_gpu || r.adam_chunks[3].os_on_gpu);
  // Steady budget 55500 - 10000 - 24000 = 21500 holds all fp16 chunks: no moves; the two CPU-Adam chunks'
  // fp16 chunks are on the GPU at ADAM, so their grads go out and their params come back.
  EXPECT_TRUE(r.moves.empty());
  EXPECT_DOUBLE_EQ(r.adam_d2h_bytes, 2 * kChunk);
  EXPECT_DOUBLE_EQ(r.adam_h2d_bytes, 2 * kChunk);
  EXPECT_DOUBLE_EQ(r.host_bytes, 2 * kE * 12);  // CPU optimizer state only
}

TEST(ChunkSim, EvictsTheChunkUsedFurthestInTheFuture) {
  // Chunks X=0, Y=1, Z=2 (one per part). Accesses: Y X Y Z X Y ADAM; the budget holds two chunks.
  // At moment 3 (Z) the GPU holds {X, Y}: LRU (and lowest-id) would evict X (last used at 1), Belady evicts
  // Y (next used at 5, X at 4). At moment 5, Z (next: 7+3) goes rather than X (next: 7+1).
  ChunkSimInput in = chain({{kE}, {kE}, {kE}}, 20000, 16000, 16000);
  in.moments = {{1}, {0}, {1}, {2}, {0}, {1}, {}};
  in.moment_is_adam = {0, 0, 0, 0, 0, 0, 1};
  in.nonmodel_bytes.assign(7, 16000);
  ChunkSimResult r = simulate_chunks(in);
  EXPECT_TRUE(r.fits);
  EXPECT_EQ(r.os_chunks_on_gpu, 0);
  for (int k = 0; k < 7; ++k) EXPECT_DOUBLE_EQ(r.budget_bytes[k], 2 * kChunk) << k;
  ASSERT_EQ(r.moves.size(), 4u);
  auto is = [](const ChunkMove& m, int moment, int chunk, bool to_gpu) {
    return m.moment == moment && m.chunk == chunk && m.to_gpu == to_gpu && m.bytes == kChunk;
  };
  EXPECT_TRUE(is(r.moves[0], 3, 1, false));  // Belady: Y out, not X
  EXPECT_TRUE(is(r.moves[1], 3, 2, true));
  EXPECT_TRUE(is(r.moves[2], 5, 2, false));
  EXPECT_TRUE(is(r.moves[3], 5, 1, true));
  EXPECT_DOUBLE_EQ(r.h2d_bytes[3], kChunk);
  EXPECT_DOUBLE_EQ(r.d2h_bytes[5], kChunk);
  EXPECT_DOUBLE_EQ(r.peak_gpu_chunk_bytes, 2 * kChunk);
  EXPECT_DOUBLE_EQ(r.host_bytes, kChunk + 3 * kE * 12);  // one fp16 chunk on the CPU + all OS
}

TEST(ChunkSim, WorstCasePcieBytesPerStep) {
  // overall 17000: the ADAM budget 17000 - 16*E = 1000 holds no chunk; FWD/BWD budgets hold one chunk.
  // Every access that does not follow an access of the same chunk loads it: P forward + (P-1) backward;
  // each load is evicted once. Seeds §4.5: params H2D twice = 2 * 2M/N, less the last part's chunk.
  const int P = 5;
  std::vector<std::vector<double>> one(P, {kE});
  ChunkSimResult r = simulate_chunks(chain(one, 17000, 15000));
  const double twoM = 2 * P * kE;  // 2 bytes * M params, N = 1
  EXPECT_TRUE(r.fits);
  EXPECT_EQ(r.os_chunks_on_gpu, 0);
  EXPECT_DOUBLE_EQ(sum(r.h2d_bytes), 2 * twoM - kChunk);
  EXPECT_DOUBLE_EQ(sum(r.d2h_bytes), 2 * twoM - kChunk);
  EXPECT_EQ(r.moves.size(), 2u * (2 * P - 1));
  EXPECT_DOUBLE_EQ(r.adam_d2h_bytes + r.adam_h2d_bytes, 0);  // nothing on the GPU at ADAM
  EXPECT_DOUBLE_EQ(r.gpu_chunk_bytes.back(), 0);
  EXPECT_DOUBLE_EQ(r.host_bytes, twoM + P * kE * 12);

  // N = 2: each part is one comm group (two chunks, one per rank). The gathered remote payload lives in
  // the all-gather buffer (comm_buffer 4000); the budget min(.) - 4000 = 2000 holds the local chunk only.
  std::vector<std::vector<double>> two(P, {kE, kE});
  for (int rank = 0; rank < 2; ++rank) {
    ChunkSimResult q = simulate_chunks(chain(two, 17000, 11000, 0, 2, rank));
    const double twoM_over_N = 2 * (2 * P * kE) / 2;
    EXPECT_TRUE(q.fits);
    EXPECT_EQ(q.local_chunks, P);
    EXPECT_DOUBLE_EQ(q.comm_buffer_bytes, 2 * kChunk);
    EXPECT_DOUBLE_EQ(sum(q.h2d_bytes), 2 * twoM_over_N - kChunk) << "rank " << rank;
    EXPECT_DOUBLE_EQ(sum(q.d2h_bytes), 2 * twoM_over_N - kChunk) << "rank " << rank;
    EXPECT_DOUBLE_EQ(q.peak_gpu_chunk_bytes, 2 * kChunk);  // local + gathered remote payload
  }
}

TEST(ChunkSim, PrefetchLoadsTheNextMomentsChunksWithinTheBudget) {
  // One chunk per part, FWD/BWD budgets of two chunks (overall 19000 - non-model 15000), ADAM 3000 (one chunk).
  const int P = 5;
  std::vector<std::vector<double>> one(P, {kE});
  ChunkSimInput in = chain(one, 19000, 15000);
  const ChunkSimResult sync = simulate_chunks(in);
  in.prefetch_runs = 1;
  const ChunkSimResult ahead = simulate_chunks(in);
  const int T = static_cast<int>(in.moments.size());
  ASSERT_EQ(ahead.prefetch_h2d_bytes.size(), static_cast<size_t>(T));
  EXPECT_DOUBLE_EQ(sum(sync.prefetch_h2d_bytes), 0);
  EXPECT_GT(sum(ahead.prefetch_h2d_bytes), 0);
  // The same chunks load and leave (the evictions ahead pick the synchronous step's victims here), most of them a
  // moment early, beside the run.
  EXPECT_DOUBLE_EQ(sum(ahead.h2d_bytes) + sum(ahead.prefetch_h2d_bytes), sum(sync.h2d_bytes));
  EXPECT_DOUBLE_EQ(sum(ahead.d2h_bytes) + sum(ahead.prefetch_d2h_bytes), sum(sync.d2h_bytes));
  EXPECT_LT(sum(ahead.h2d_bytes), sum(sync.h2d_bytes));
  EXPECT_GT(sum(ahead.prefetch_d2h_bytes), 0);
  for (int k = 0; k < T; ++k) {
    EXPECT_LE(ahead.gpu_chunk_bytes[k], ahead.budget_bytes[k]) << k;  // resident + prefetched within the budget
    if (in.moment_is_adam[k] || k == T - 2) {  // nothing ahead
      EXPECT_DOUBLE_EQ(ahead.prefetch_h2d_bytes[k], 0) << k;
    }
  }
  for (const ChunkMove& m : ahead.moves)
    if (m.prefetch && m.to_gpu) {  // a load for the next moment
      ASSERT_LT(m.moment + 1, T);
      EXPECT_EQ(in.moments[m.moment + 1], std::vector<int>{m.chunk}) << m.moment;
    }
  // The worst case's budgets (one chunk): no room to load ahead, the same moves.
  ChunkSimInput tight = chain(one, 17000, 15000);
  tight.prefetch_runs = 2;
  EXPECT_EQ(simulate_chunks(tight).h2d_bytes, simulate_chunks(chain(one, 17000, 15000)).h2d_bytes);
  EXPECT_DOUBLE_EQ(sum(simulate_chunks(tight).prefetch_h2d_bytes), 0);
}

TEST(ChunkSim, PartLargerThanTheBudgetDoesNotFit) {
  // Part 1 is one 5E tensor (its own 10000-byte chunk); overall - nonmodel leaves 4000 bytes.
  ChunkSimInput in = chain({{kE}, {5 * kE}, {kE}}, 20000, 16000);
  ChunkSimResult r;
  ASSERT_NO_THROW(r = simulate_chunks(in));
  EXPECT_FALSE(r.fits);
  EXPECT_EQ(r.unfit_moment, 1);
  EXPECT_NE(r.why.find("moment 1"), std::string::npos) << r.why;
  EXPECT_NE(r.why.find("by 6e-06 GB"), std::string::npos) << r.why;
}

TEST(ChunkSim, Deterministic) {
  // Mixed sizes, parts sharing chunks, world 3, a tight budget: two runs give identical results.
  std::vector<std::vector<double>> parts = {{300, 900}, {700, 200, 2500}, {400}, {999, 1, 600}, {800, 800}};
  for (int rank = 0; rank < 3; ++rank) {
    ChunkSimInput in = chain(parts, 30000, 20000, 1000, 3, rank);
    ChunkSimResult a = simulate_chunks(in), b = simulate_chunks(in);
    ASSERT_EQ(a.moves.size(), b.moves.size());
    for (size_t i = 0; i < a.moves.size(); ++i) {
      EXPECT_EQ(a.moves[i].moment, b.moves[i].moment);
      EXPECT_EQ(a.moves[i].chunk, b.moves[i].chunk);
      EXPECT_EQ(a.moves[i].to_gpu, b.moves[i].to_gpu);
      EXPECT_EQ(a.moves[i].bytes, b.moves[i].bytes);
    }
    EXPECT_EQ(a.h2d_bytes, b.h2d_bytes);
    EXPECT_EQ(a.d2h_bytes, b.d2h_bytes);
    EXPECT_EQ(a.gpu_chunk_bytes, b.gpu_chunk_bytes);
    EXPECT_EQ(a.os_chunks_on_gpu, b.os_chunks_on_gpu);
    EXPECT_EQ(a.adam_d2h_bytes, b.adam_d2h_bytes);
    EXPECT_EQ(a.host_bytes, b.host_bytes);
    EXPECT_EQ(a.fits, b.fits);
    EXPECT_EQ(a.why, b.why);
  }
}

}  // namespace
}  // namespace tp
