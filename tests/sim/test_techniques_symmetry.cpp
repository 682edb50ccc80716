// The seeds' techniques in symmetric mode (one simulated rank per stage, copies as link loads) against
// full-cluster mode (every rank, every flow): ZeRO-3 gathers, layered accumulation, the modular schedule,
// offload lanes, MoE expert groups and 2D tensor parallelism must give the same step and memory on aligned
// layouts, and the full mode must not deadlock (every collective's members are created consistently).
#include <gtest/gtest.h>

#include "sim/simulate.hpp"
#include "sim_test_util.hpp"

using namespace tp;
using namespace tp::testutil;

namespace {

json selene_like() {
  json c = finite_links_cluster();  // finite links so that collectives take time and contend
  c["host"]["pcie_bandwidth_bytes_per_s"] = 2.5e10;
  c["host"]["memory_bandwidth_bytes_per_s"] = 2e11;
  c["gpu"]["hbm_bandwidth_bytes_per_s"] = 2e12;
  return c;
}

void expect_modes_agree(const Scenario& sc, const char* what) {
  SimOptions sym, full;
  full.full_cluster = true;
  Result a = simulate(sc, sym), b = simulate(sc, full);
  EXPECT_FALSE(a.fallback_to_full) << what;
  EXPECT_NEAR(a.step_time_s, b.step_time_s, 1e-9 * b.step_time_s) << what;
  EXPECT_NEAR(a.peak_bytes_per_gpu, b.peak_bytes_per_gpu, 1e-9 * b.peak_bytes_per_gpu) << what;
  EXPECT_NEAR(a.inter_bytes_per_gpu + a.intra_bytes_per_gpu, b.inter_bytes_per_gpu + b.intra_bytes_per_gpu,
              1e-6 * (b.inter_bytes_per_gpu + b.intra_bytes_per_gpu) + 1) << what;
  EXPECT_NEAR(a.pcie_bytes_per_gpu, b.pcie_bytes_per_gpu, 1e-9 * b.pcie_bytes_per_gpu + 1) << what;
}

}  // namespace

TEST(TechniqueSymmetry, FullClusterAgreesWithSymmetric) {
  json model = gpt_model(16, 1024, 16, 32000, 1024);
  json moe = model;
  moe["moe"] = {{"experts", 16}, {"top_k", 2}, {"every", 2}};
  struct Case { const char* what; json model; json plan; long long batch; };
  std::vector<Case> cases = {
      {"zero3 standard", model, {{"dp", 8}, {"tp", 2}, {"pp", 2}, {"microbatch", 2}, {"zero", 3}, {"schedule", "gpipe"}}, 64},
      {"zero3 layered", model,
       {{"dp", 8}, {"tp", 2}, {"pp", 2}, {"microbatch", 2}, {"zero", 3}, {"schedule", "gpipe"}, {"grad_accumulation", "layered"}}, 64},
      {"zero2 1f1b", model, {{"dp", 4}, {"tp", 1}, {"pp", 4}, {"microbatch", 1}, {"zero", 2}}, 32},
      {"modular layered", model,
       {{"dp", 2}, {"tp", 2}, {"pp", 4}, {"microbatch", 1}, {"schedule", "modular"}, {"grad_accumulation", "layered"}}, 16},
      {"modular standard", model, {{"dp", 2}, {"tp", 2}, {"pp", 4}, {"microbatch", 1}, {"schedule", "modular"}}, 16},
      {"offload optimizer", model, {{"dp", 8}, {"tp", 1}, {"pp", 1}, {"microbatch", 2}, {"zero", 1},
                                    {"offload", {{"kind", "optimizer"}}}}, 32},
      {"offload granular", model, {{"dp", 4}, {"tp", 2}, {"pp", 2}, {"microbatch", 1}, {"schedule", "gpipe"},
                                   {"grad_accumulation", "layered"}, {"offload", {{"kind", "granular"}, {"fraction", 0.5}}}}, 16},
      {"offload chunked", model, {{"dp", 8}, {"tp", 1}, {"pp", 1}, {"microbatch", 2}, {"zero", 3},
                                  {"offload", {{"kind", "chunked"}, {"chunk_elements", 4000000}}}}, 32},
      {"moe ep", moe, {{"dp", 8}, {"tp", 1}, {"pp", 2}, {"microbatch", 1}, {"ep", 4}}, 32},
      {"2d", model, {{"dp", 4}, {"tp", 4}, {"pp", 1}, {"microbatch", 2}, {"tp_mode", "2d"}}, 32},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    Scenario sc = make_scenario(c.model, selene_like(), c.batch, c.plan);
    expect_modes_agree(sc, c.what);
  }
}

// A pseudo phase whose weight groups span pipeline stages (k = 2 groups of 8 layers over 4 stages): the
// cross-stage all-reduce of the shared layers' gradients must agree between the modes too.
TEST(TechniqueSymmetry, SharedLayersAcrossStagesAgree) {
  json model = gpt_model(16, 1024, 16, 32000, 1024);
  json plan = {{"dp", 4}, {"tp", 2}, {"pp", 4}, {"microbatch", 1}};
  Scenario sc = make_scenario(model, selene_like(), 32, plan);
  sc.plan.shared_layers = 2;
  expect_modes_agree(sc, "shared layers");
  Result r = simulate(sc);
  int shared = 0;
  for (const TaskInfo& ti : r.prog.info) shared += ti.kind == TaskKind::shared_reduce;
  EXPECT_EQ(shared, 4);  // every stage's representative joins its group's cross-stage all-reduce
}
