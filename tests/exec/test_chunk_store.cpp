// The executor's chunk store (exec/runtime/offload/chunk_store.hpp): the budget is never exceeded, pinned chunks are never
// evicted, Belady picks the chunk used furthest in the future on a hand-built trace, every move is counted,
// data survives moves and arena compaction exactly, and the moves of a steady step are the simulator's
// (sim/chunks.hpp simulate_chunks) for the same tensors, moments and budget; the runtime's tensor list
// (runtime_chunks.cpp) packs into exactly the simulator's chunks.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <vector>

#include "exec/runtime/offload/chunk_store.hpp"
#include "exec/model/gpt.hpp"
#include "exec/runtime/offload/offload_glue.hpp"
#include "models/scenario.hpp"
#include "sim/chunk_offload.hpp"
#include "sim/chunks.hpp"

using tp::exec::ChunkStore;
using tp::exec::ChunkTensor;

namespace {

// A flat buffer of tensors (sizes given) with one part per tensor unless parts are given.
struct Harness {
  std::vector<ChunkTensor> ts;
  std::vector<double> params, grads;
  std::vector<double*> ptab, gtab;
  Harness(const std::vector<long long>& sizes, const std::vector<int>& parts) {
    long long off = 0;
    for (size_t i = 0; i < sizes.size(); ++i) {
      ts.push_back(ChunkTensor{off, sizes[i], parts[i], (int)i});
      off += sizes[i];
    }
    params.resize(off);
    grads.resize(off);
    for (long long i = 0; i < off; ++i) params[i] = 0.5 + (double)i, grads[i] = -(double)i;
    ptab.assign(sizes.size(), nullptr);
    gtab.assign(sizes.size(), nullptr);
  }
  std::unique_ptr<ChunkStore<double>> store(int parts, long long E, double budget, double warm = 1.0) {
    return std::make_unique<ChunkStore<double>>(ts, parts, E, budget, warm, params.data(), grads.data(), ptab, gtab);
  }
};

// Runs `steps` steps of `moments` (then the ADAM moment) and checks the invariants after every access.
void run_steps(ChunkStore<double>& s, const std::vector<std::vector<int>>& moments, int steps) {
  for (int st = 0; st < steps; ++st) {
    s.begin_step();
    for (int k = 0; k < (int)moments.size(); ++k) {
      s.access(k, moments[k]);
      std::vector<int> need = s.chunks_of(moments[k]);
      double need_bytes = 0;
      for (int c : need) {
        EXPECT_TRUE(s.resident(c)) << "step " << st << " moment " << k << " chunk " << c;
        EXPECT_TRUE(s.pinned(c));
        need_bytes += s.chunk_bytes(c);
      }
      EXPECT_LE(s.resident_bytes(), s.arena_bytes());
      const double budget = s.warmup() ? s.budget_bytes() : s.budget_bytes();
      EXPECT_TRUE(s.resident_bytes() <= budget || s.resident_bytes() == need_bytes);
    }
    s.host_phase_begin((int)moments.size());
    s.host_phase_end();
    s.end_step();
  }
}

// The chunk layout the runtime's store gives a rank of layout s holding every unit (embedding, layers, head:
// chunk_tensors' list, compact = flat), with chunk_elements E; `tensors`: how many store tensors it listed.
tp::ChunkLayout runtime_layout(const tp::exec::GptShape& s, long long E, size_t* tensors = nullptr,
                               size_t* views = nullptr) {
  tp::exec::GptLayout lay = tp::exec::gpt_layout(s);
  tp::exec::detail::Flat gl = tp::exec::detail::Flat::of(lay);
  std::vector<std::pair<long long, long long>> units = {{gl.embed_begin, gl.embed_end}};
  for (long long l = 0; l < s.layers; ++l) units.push_back({gl.layer_begin[l], gl.layer_end[l]});
  units.push_back({gl.head_begin, gl.head_end});
  std::vector<long long> cbase;
  for (auto [a, z] : units) cbase.push_back(a);  // every unit held, compact = flat
  std::vector<ChunkTensor> ts = tp::exec::detail::chunk_tensors(gl, units, cbase);
  if (tensors) *tensors = ts.size();
  if (views) *views = gl.views.size();
  std::vector<double> params(gl.total), grads(gl.total);
  std::vector<double*> ptab(gl.views.size()), gtab(gl.views.size());
  ChunkStore<double> store(ts, (int)units.size(), E, 1e9, 1.0, params.data(), grads.data(), ptab, gtab);
  return store.layout();
}

void expect_same_layout(const tp::ChunkLayout& got, const tp::ChunkLayout& want, const std::string& what) {
  EXPECT_EQ(got.chunk_of_tensor, want.chunk_of_tensor) << what;
  EXPECT_EQ(got.chunk_elements, want.chunk_elements) << what;
  EXPECT_EQ(got.used_elements, want.used_elements) << what;
  EXPECT_EQ(got.parts_of_chunk, want.parts_of_chunk) << what;
}

}  // namespace

TEST(ChunkStore, LayoutIsTheSimulatorsAndTablesStartOnTheHost) {
  Harness h({100, 30, 300, 50, 60}, {0, 0, 1, 1, 2});
  auto s = h.store(3, 128, 1e9);
  tp::ChunkSimInput in;
  in.tensor_elements = {100, 30, 300, 50, 60};
  in.tensor_part = {0, 0, 1, 1, 2};
  in.parts = 3;
  in.chunk_elements = 128;
  tp::ChunkLayout want = tp::layout_chunks(in);
  EXPECT_EQ(s->layout().chunk_of_tensor, want.chunk_of_tensor);
  EXPECT_EQ(s->layout().chunk_elements, want.chunk_elements);
  ASSERT_EQ(s->chunks(), 4);  // [100] [30] [300] [50 60]
  for (size_t t = 0; t < h.ts.size(); ++t) {
    EXPECT_EQ(h.ptab[t], h.params.data() + h.ts[t].offset);
    EXPECT_EQ(h.gtab[t], h.grads.data() + h.ts[t].offset);
  }
  // A budget larger than every chunk allocates only the chunks' slots.
  EXPECT_DOUBLE_EQ(s->arena_bytes(), (128 + 128 + 300 + 128) * 8.0);  // a slot is one chunk (grads reuse it)
  EXPECT_EQ(s->chunks_of({1}), (std::vector<int>{2, 3}));
  EXPECT_DOUBLE_EQ(s->bytes_of_parts({1, 2}), (300 + 128) * 8.0);
}

TEST(ChunkStore, BeladyEvictsTheChunkUsedFurthestAhead) {
  // Four equal chunks (a tensor larger than chunk_elements gets its own chunk), room for two plus the ADAM
  // moment's reservation of 16 x chunk_elements bytes (so nothing moves at ADAM). Moments: A B C A B, ADAM.
  const long long E = 64, n = 256;
  Harness h({n, n, n, n}, {0, 1, 2, 3});
  auto s = h.store(4, E, 2 * n * 8.0 + 16.0 * E);
  s->keep_log = true;
  std::vector<std::vector<int>> moments = {{0}, {1}, {2}, {0}, {1}};
  run_steps(*s, moments, 2);
  auto evicted_at = [&](int step, int moment) {
    std::vector<int> out;
    for (const auto& m : s->log)
      if (m.step == step && m.moment == moment && !m.to_device) out.push_back(m.chunk);
    return out;
  };
  // Warm-up: equal priority, the lowest id (A) goes although it is needed next.
  EXPECT_EQ(evicted_at(0, 2), std::vector<int>{0});
  // Steady: A is next used at moment 3, B at 4: Belady evicts B.
  EXPECT_EQ(evicted_at(1, 2), std::vector<int>{1});
  EXPECT_EQ(evicted_at(1, 3), std::vector<int>{});  // A stayed
  // The trace is the warm-up's accesses.
  EXPECT_EQ(s->trace()[0], (std::vector<int>{0, 3}));
  EXPECT_EQ(s->trace()[2], (std::vector<int>{2}));
}

TEST(ChunkStore, MovesAreCountedAndDataSurvivesExactly) {
  // Uneven chunk sizes so that holes appear and the arena compacts.
  Harness h({40, 200, 30, 30, 150, 90, 10, 250}, {0, 0, 1, 1, 2, 3, 3, 4});
  const std::vector<double> p0 = h.params;
  auto s = h.store(5, 64, (250 + 200 + 64) * 8.0);
  s->keep_log = true;
  std::vector<std::vector<int>> moments = {{0}, {1}, {2}, {4}, {3}, {4}, {2, 3}, {1}, {0}};
  long long moves = 0;
  double bytes = 0;
  for (int st = 0; st < 4; ++st) {
    s->begin_step();
    for (int k = 0; k < (int)moments.size(); ++k) {
      s->access(k, moments[k]);
      // "compute": add 1 to the gradients of every tensor of the accessed parts, through the tables.
      for (size_t t = 0; t < h.ts.size(); ++t)
        if (std::find(moments[k].begin(), moments[k].end(), h.ts[t].part) != moments[k].end())
          for (long long i = 0; i < h.ts[t].count; ++i) h.gtab[t][i] += 1.0;
    }
    s->host_phase_begin((int)moments.size());
    for (double& g : h.grads) g *= 1.0;  // the optimizer reads the flat buffers
    s->host_phase_end();
    auto stats = s->end_step();
    moves += stats.h2d_moves + stats.d2h_moves;
    bytes += stats.h2d_bytes + stats.d2h_bytes;
    EXPECT_LE(stats.peak_resident_bytes, s->arena_bytes());
    EXPECT_GT(stats.h2d_moves, 0);
  }
  s->evict_all();
  EXPECT_EQ(moves + 0, (long long)std::count_if(s->log.begin(), s->log.end(), [](auto& m) { return m.moment >= 0; }));
  double logged = 0;
  for (const auto& m : s->log)
    if (m.moment >= 0)
      for (size_t t = 0; t < h.ts.size(); ++t)
        if (s->chunk_of((int)t) == m.chunk) logged += 8.0 * h.ts[t].count;
  EXPECT_DOUBLE_EQ(bytes, logged);
  EXPECT_EQ(h.params, p0);  // parameters untouched by the moves
  std::vector<int> uses(5, 0);
  for (auto& m : moments)
    for (int part : m) uses[part] += 4;
  for (size_t t = 0; t < h.ts.size(); ++t)
    for (long long i = 0; i < h.ts[t].count; ++i)
      ASSERT_EQ(h.grads[h.ts[t].offset + i], -(double)(h.ts[t].offset + i) + uses[h.ts[t].part]) << "tensor " << t;
  for (size_t t = 0; t < h.ts.size(); ++t) EXPECT_EQ(h.ptab[t], h.params.data() + h.ts[t].offset);
}

TEST(ChunkStore, PinnedChunksAreNeverEvictedAndTooSmallBudgetsThrow) {
  Harness h({64, 64, 64}, {0, 1, 2});
  auto s = h.store(3, 64, 2 * 64 * 8.0);
  s->access(0, {0, 1});
  EXPECT_TRUE(s->resident(0) && s->resident(1) && s->pinned(0) && s->pinned(1));
  EXPECT_THROW(s->access(1, {0, 1, 2}), std::logic_error);  // three chunks cannot fit: the runtime checks first
}

TEST(ChunkStore, SteadyStepMovesAreTheSimulators) {
  // A model-like sequence: embedding, 4 layers of mixed tensors, head; 1F1B-like moments for 2 micro-batches.
  std::vector<long long> sizes = {300, 40};
  std::vector<int> parts = {0, 0};
  for (int l = 0; l < 4; ++l)
    for (long long e : {8LL, 96LL, 12LL, 48LL, 8LL, 120LL, 16LL, 120LL, 8LL}) {
      sizes.push_back(e);
      parts.push_back(1 + l);
    }
  sizes.push_back(16);
  parts.push_back(5);
  Harness h(sizes, parts);
  const long long E = 64;
  std::vector<std::vector<int>> moments;
  for (int mb = 0; mb < 2; ++mb) {
    moments.push_back({1, 0});
    moments.push_back({2});
    moments.push_back({3});
    moments.push_back({4, 5, 0});
    moments.push_back({4, 5, 0});
    moments.push_back({3});
    moments.push_back({2});
    moments.push_back({1, 0});
  }
  double most = 0;
  for (const auto& m : moments) most = std::max(most, h.store(6, E, 1e9)->bytes_of_parts(m));
  for (int prefetch : {0, 1, 2})  // (plan.offload.prefetch_runs: the same rule on both sides, sim/chunk_policy.hpp)
  for (double budget_chunks : {1.0, 1.4, 2.0, 3.0}) {
    const double budget = budget_chunks * most;
    auto s = h.store(6, E, budget, 0.1);
    s->set_prefetch(prefetch);
    s->keep_log = true;
    run_steps(*s, moments, 3);
    tp::ChunkSimInput in;
    for (auto x : sizes) in.tensor_elements.push_back((double)x);
    in.tensor_part = parts;
    in.parts = 6;
    in.chunk_elements = E;
    in.moments = moments;
    in.moments.push_back({});
    in.moment_is_adam.assign(in.moments.size(), 0);
    in.moment_is_adam.back() = 1;
    in.nonmodel_bytes.assign(in.moments.size(), 0.0);
    in.hbm_bytes = budget;
    in.gpu_memory_fraction = 1.0;
    in.warmup_chunk_fraction = 0.1;
    in.hybrid_adam_margin = 0;  // no GPU Adam: the executor runs CPU Adam for every chunk
    in.param_bytes = 8;         // fp64 params; the grads reuse the slot
    in.prefetch_runs = prefetch;
    tp::ChunkSimResult r = tp::simulate_chunks(in);
    std::vector<std::tuple<int, int, bool, bool>> sim, ours;
    for (const auto& m : r.moves) sim.emplace_back(m.moment, m.chunk, m.to_gpu, m.prefetch);
    for (const auto& m : s->log)
      if (m.step == 2) ours.emplace_back(m.moment, m.chunk, m.to_device, m.prefetch);
    const bool prefetched = std::any_of(r.moves.begin(), r.moves.end(), [](const tp::ChunkMove& m) { return m.prefetch; });
    if (budget_chunks < 2) {  // tight budgets move every step
      EXPECT_FALSE(sim.empty()) << budget_chunks;
    }
    if (budget_chunks == 1.4) {  // (at 1.0 the largest moment leaves no room to load ahead)
      EXPECT_EQ(prefetched, prefetch > 0) << budget_chunks << " prefetch " << prefetch;
    }
    EXPECT_EQ(ours, sim) << "budget " << budget_chunks << " chunks, prefetch " << prefetch;
  }
}

// Prefetch: from the first steady step on, access(k) also loads the next moments' chunks (here one layer per moment,
// one chunk per layer, a budget of two chunks); a prefetched chunk is resident at once but its tables name the host
// until its own access, which loads nothing more. Data survives exactly.
TEST(ChunkStore, PrefetchLoadsTheNextMomentsChunksAndPointsAtThemAtTheirAccess) {
  Harness h({64, 64, 64, 64}, {0, 1, 2, 3});
  const std::vector<double> p0 = h.params;
  auto s = h.store(4, 64, 2 * 64 * 8.0);
  s->set_prefetch(1);
  s->keep_log = true;
  const std::vector<std::vector<int>> moments = {{0}, {1}, {2}, {3}, {3}, {2}, {1}, {0}};
  for (int st = 0; st < 3; ++st) {
    s->begin_step();
    for (int k = 0; k < (int)moments.size(); ++k) {
      const size_t before = s->log.size();
      s->access(k, moments[k]);
      const int t = moments[k][0];
      EXPECT_NE(h.ptab[t], h.params.data() + h.ts[t].offset) << st << " " << k;  // its own chunk: in the slot
      for (size_t i = before; i < s->log.size(); ++i) {
        const auto& m = s->log[i];
        if (st == 0) {
          EXPECT_FALSE(m.prefetch) << "the warm-up step prefetches nothing";
        }
        if (st > 0 && m.to_device && !(k == 0 && m.chunk == 0)) {  // (the ADAM moment's 16 E reserve evicted chunk 0)
          EXPECT_TRUE(m.prefetch) << st << " " << k << ": every other steady load is a prefetch";
        }
        if (m.prefetch && m.to_device) {
          EXPECT_EQ(m.chunk, moments[k + 1][0]);  // the next moment's chunk ...
          EXPECT_TRUE(s->resident(m.chunk));
          EXPECT_EQ(h.ptab[m.chunk], h.params.data() + h.ts[m.chunk].offset);  // ... named on the host until its access
        }
      }
      for (long long i = 0; i < 64; ++i) EXPECT_EQ(h.ptab[t][i], p0[h.ts[t].offset + i]);
    }
    s->host_phase_begin((int)moments.size());
    s->host_phase_end();
    s->end_step();
  }
  s->evict_all();
  EXPECT_EQ(h.params, p0);
}

TEST(ChunkStore, GradientsReuseTheParameterSlotAfterTheLastAccess) {
  // PatrickStar: once a chunk's parameters are not used again in the step (its last access of the warm-up
  // trace), its gradients take its slot; the host keeps the parameters. A slot is one chunk.
  Harness h({64, 64, 64}, {0, 1, 2});
  const std::vector<double> p0 = h.params, g0 = h.grads;
  auto s = h.store(3, 64, 1e9);
  std::vector<std::vector<int>> moments = {{0}, {1}, {2}, {2}, {1}, {0}};
  auto on_host = [&](const std::vector<double*>& tab, const std::vector<double>& flat, int t) {
    return tab[t] == flat.data() + h.ts[t].offset;
  };
  for (int st = 0; st < 3; ++st) {
    s->begin_step();
    for (int k = 0; k < (int)moments.size(); ++k) {
      s->access(k, moments[k]);
      for (int t : moments[k]) {
        EXPECT_FALSE(on_host(h.ptab, h.params, t)) << st << " " << k;  // parameters in the slot while used
        for (long long i = 0; i < 64; ++i) h.gtab[t][i] += 1.0;
      }
      if (st > 0 && k == 4) {  // chunk 2's last access (moment 3) is over: its slot holds its gradients
        EXPECT_TRUE(s->resident(2));
        EXPECT_TRUE(on_host(h.ptab, h.params, 2));
        EXPECT_FALSE(on_host(h.gtab, h.grads, 2));
      }
      if (st == 0 && k == 4) {
        EXPECT_TRUE(on_host(h.gtab, h.grads, 2));  // warm-up: the trace is not known yet
      }
    }
    s->host_phase_begin((int)moments.size());
    for (int t = 0; t < 3; ++t) EXPECT_TRUE(on_host(h.gtab, h.grads, t) && on_host(h.ptab, h.params, t));
    s->host_phase_end();
    s->end_step();
  }
  s->evict_all();
  EXPECT_EQ(h.params, p0);
  for (size_t i = 0; i < h.grads.size(); ++i) EXPECT_EQ(h.grads[i], g0[i] + 6.0) << i;  // 2 uses x 3 steps
}

// The runtime's tensor list (exec/runtime/offload/runtime_chunks.cpp chunk_tensors) gives the store exactly the simulator's
// chunks: the simulator's tensors (sim/chunk_offload.cpp, sizes from sim/op_cost.cpp: embedding, per layer
// QKV, projection, fc1, fc2 and the rest as one, head) laid out by layout_chunks are the store's layout, for
// one rank and for tp 2 (rank 1), with chunks that split the layers unevenly.
TEST(ChunkStore, RuntimeTensorsPackLikeTheSimulator) {
  for (int tp : {1, 2})
    for (long long E : {3000LL, 5000LL, 20000LL}) {
      tp::exec::GptShape s;
      s.layers = 3, s.C = 32, s.H = 4, s.Hkv = 4, s.D = 8, s.F = 128, s.V = 64, s.maxT = 16, s.gelu = true;
      s.tp = tp, s.tp_rank = tp - 1;
      size_t tensors = 0, views = 0;
      const tp::ChunkLayout got = runtime_layout(s, E, &tensors, &views);
      ASSERT_EQ(tensors, views);

      const double h = (double)s.C, kvd = (double)s.Hkv * s.D, f = (double)s.F, t = tp, V = (double)s.V;
      tp::ChunkSimInput in;  // the simulator's list for the same model and rank
      in.parts = (int)s.layers + 2;
      in.chunk_elements = E;
      auto add = [&](double n, int part) { in.tensor_elements.push_back(n), in.tensor_part.push_back(part); };
      add(V * h / t + (double)s.maxT * h, 0);
      const double layer = (h * (h + 2 * kvd) + h * h + 2 * h * f + (h + 2 * kvd) + f) / t + 6 * h;
      for (int l = 0; l < s.layers; ++l) {
        const double qkv = h * (h + 2 * kvd) / t, proj = h * h / t, fc1 = h * f / t, fc2 = f * h / t;
        for (double x : {qkv, proj, fc1, fc2}) add(x, 1 + l);
        add(layer - qkv - proj - fc1 - fc2, 1 + l);
      }
      add(2 * h, (int)s.layers + 1);
      expect_same_layout(got, tp::layout_chunks(in), "tp " + std::to_string(tp) + " E " + std::to_string(E));
    }
}

// MoE layers (and the dense ones between them) pack alike too: the simulator's own list
// (sim/chunk_offload.cpp list_chunk_tensors over sim/op_cost.cpp's parameter counts: router, shared experts'
// fc1 / fc2, the local experts' fc1 / fc2 as one tensor each, the rest as one) against the runtime's views of
// the same rank, for GELU with biases and SwiGLU without, tp 1 and 2, ep 2 (rank 1), with shared experts.
TEST(ChunkStore, RuntimeTensorsOfMoeLayersPackLikeTheSimulator) {
  tp::TpComm free;
  free.time_s = [](tp::Coll, double, tp::CommGroup) { return 0.0; };
  free.bytes = [](tp::Coll, double, tp::CommGroup) { return tp::TierBytes{}; };
  for (const char* act : {"gelu", "swiglu"})
    for (int tp : {1, 2})
      for (long long E : {3000LL, 9000LL}) {
        tp::json j = {{"name", "moe-chunks"},
                      {"model", {{"name", "m"}, {"layers", 4}, {"hidden", 32}, {"heads", 4}, {"vocab", 64}, {"seq_len", 16},
                                 {"activation", act}, {"tied_embeddings", true}, {"dropout", false},
                                 {"moe", {{"experts", 4}, {"top_k", 2}, {"every", 2}, {"ffn_hidden", 48}, {"shared_ffn_hidden", 24}}}}},
                      {"cluster", "selene"},
                      {"training", {{"global_batch", 8}, {"seq_len", 16}, {"precision", "fp32"}}},
                      {"plan", {{"dp", 2}, {"ep", 2}, {"tp", tp}, {"pp", 1}, {"microbatch", 1}, {"attention", "unfused"},
                                {"offload", {{"kind", "chunked"}, {"chunk_elements", E}}}, {"zero", 3}}}};
        tp::Scenario sc = tp::scenario_from_json(j, ".", "test");
        tp::exec::GptShape s = tp::exec::gpt_shape(sc.model, 16, tp, tp - 1);
        s.ep = 2, s.ep_rank = 1;
        const tp::ChunkLayout got = runtime_layout(s, E);

        tp::ChunkSimInput in;
        in.parts = (int)s.layers + 2;
        in.chunk_elements = E;
        tp::list_chunk_tensors(sc, tp::build_cost_model(sc, free), {0, 1, 2, 3}, true, true, in);
        tp::ChunkLayout want = tp::layout_chunks(in);
        const std::string what = std::string(act) + " tp " + std::to_string(tp) + " E " + std::to_string(E);
        EXPECT_GT(want.chunk_elements.size(), 2u) << what;
        expect_same_layout(got, want, what);
      }
}
