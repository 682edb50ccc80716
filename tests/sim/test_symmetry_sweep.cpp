// Property test: for random valid plans on the catalog clusters (aligned and misaligned layouts, shared NICs,
// PCIe-only nodes, leaf crossings), the default symmetric simulation agrees with the full-cluster simulation.
// Exact (1e-9) when every copy of a representative flow sees the same links; when copies differ only in
// latency (leaf crossings) the representative carries the largest latency, so agreement is within 1e-3; layouts
// that are not symmetric fall back to full mode by themselves. Also: every rank's breakdown sums to the step.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "sim/program.hpp"
#include "sim/simulate.hpp"

using namespace tp;

TEST(SymmetrySweep, RandomPlansAgreeWithFullCluster) {
  std::mt19937 rng(12345);
  const char* clusters[] = {"selene", "frontera-rtx", "v100-m6", "dgx-h100"};
  const char* models[] = {"gpt2-124m", "gpt3-1.3b", "llama3-8b"};
  const char* schedules[] = {"gpipe", "1f1b", "interleaved"};
  const char* recompute[] = {"none", "selective", "full"};
  int simulated = 0;
  for (int it = 0; it < 300; ++it) {
    int tp = 1 << (rng() % 4), pp = 1 << (rng() % 3), dp = 1 + (int)(rng() % 6), v = 1 + (int)(rng() % 3);
    const char* s = schedules[rng() % 3];
    if (std::string(s) != "interleaved") v = 1;
    long long batch = (long long)dp * (1 + rng() % 3) * pp * (1 + rng() % 3);
    json j = {{"model", models[rng() % 3]},
              {"cluster", clusters[rng() % 4]},
              {"training", {{"global_batch", batch}, {"seq_len", 512}, {"precision", "fp16"}}},
              {"plan", {{"dp", dp}, {"tp", tp}, {"pp", pp}, {"virtual_stages", v}, {"microbatch", 1}, {"schedule", s},
                        {"sequence_parallel", (bool)(rng() % 2)}, {"recompute", recompute[rng() % 3]},
                        {"zero", (int)(rng() % 2)}, {"overlap_grad_reduce", (bool)(rng() % 2)}}}};
    Scenario sc;
    try {
      sc = scenario_from_json(j, ".", "sweep");
    } catch (const InputError&) {
      continue;  // random plan not valid for this model / cluster
    }
    ++simulated;
    Result a = simulate(sc);
    SimOptions full;
    full.full_cluster = true;
    Result b = simulate(sc, full);
    EXPECT_NEAR(a.step_time_s / b.step_time_s, 1.0, 1e-3) << j.dump();
    EXPECT_NEAR(a.peak_bytes_per_gpu / b.peak_bytes_per_gpu, 1.0, 1e-9) << j.dump();
    for (const RankResult& rr : a.ranks) EXPECT_NEAR(rr.breakdown.total(), a.step_time_s, 1e-9 * a.step_time_s);
  }
  EXPECT_GT(simulated, 150);
}

// The fast path of copy_loads (aligned layouts: only copies touching the representatives' nodes are routed)
// must give exactly what routing every copy gives: same symmetry verdict, links, multiplicities, latencies.
TEST(SymmetrySweep, FastPathEqualsExhaustiveEnumeration) {
  std::mt19937 rng(777);
  const char* clusters[] = {"selene", "frontera-rtx", "v100-m6", "dgx-h100"};
  int compared = 0;
  for (int it = 0; it < 300; ++it) {
    int tp = 1 << (rng() % 4), pp = 1 << (rng() % 3), dp = 1 + (int)(rng() % 40), v = 1;
    json j = {{"model", "gpt3-1.3b"},
              {"cluster", clusters[rng() % 4]},
              {"training", {{"global_batch", dp * pp * 2}, {"seq_len", 512}, {"precision", "fp16"}}},
              {"plan", {{"dp", dp}, {"tp", tp}, {"pp", pp}, {"virtual_stages", v}, {"microbatch", 1}, {"schedule", "1f1b"},
                        {"zero", (int)(rng() % 2)}, {"overlap_grad_reduce", (bool)(rng() % 2)}}}};
    Scenario sc;
    try {
      sc = scenario_from_json(j, ".", "sweep");
    } catch (const InputError&) {
      continue;
    }
    Program fast = build_program(sc, false, false), slow = build_program(sc, false, true);
    if (!fast.symmetric) continue;  // not an aligned layout: the fast path did not run
    ++compared;
    ASSERT_TRUE(slow.symmetric) << j.dump();
    ASSERT_EQ(fast.engine_links, slow.engine_links) << j.dump();
    ASSERT_EQ(fast.in.shapes.size(), slow.in.shapes.size());
    for (size_t s = 0; s < fast.in.shapes.size(); ++s)
      for (size_t ph = 0; ph < fast.in.shapes[s].size(); ++ph)
        for (size_t f = 0; f < fast.in.shapes[s][ph].size(); ++f) {
          const FlowSpec &a = fast.in.shapes[s][ph][f], &b = slow.in.shapes[s][ph][f];
          EXPECT_EQ(a.links, b.links) << j.dump();
          EXPECT_EQ(a.mult, b.mult) << j.dump();
          EXPECT_DOUBLE_EQ(a.latency_s, b.latency_s) << j.dump();
        }
  }
  EXPECT_GT(compared, 50);
}
