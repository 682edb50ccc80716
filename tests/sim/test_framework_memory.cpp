// Memory the framework uses beyond its tensors (GPU framework_memory, cluster nccl_buffer_bytes_per_communicator):
// the communicators a rank belongs to, the closed form of the term on a catalog plan, the same term in the
// simulator's peak, fits flipping for a plan within the term of HBM, and bad-input paths.
#include <gtest/gtest.h>

#include "sim/simulate.hpp"
#include "sim/step_formulas.hpp"
#include "sim_test_util.hpp"

using namespace tp;
using namespace tp::testutil;

TEST(FrameworkMemory, CommunicatorsOfARank) {
  // tp, cp, data, ep, expert-data, two pipeline neighbours, the tied embedding group
  EXPECT_EQ(rank_communicators(8, 2, 8, 4, 4, true), 1 + 1 + 1 + 2 + 2 + 1);
  EXPECT_EQ(rank_communicators(1, 1, 1, 1, 1, true), 0);
  EXPECT_EQ(rank_communicators(8, 1, 4, 1, 2, false), 1 + 1 + 1);  // pp 2: one neighbour
  EXPECT_EQ(rank_communicators(1, 1, 8, 8, 1, false), 1 + 1);      // ep = data ranks: no expert-data group
}

TEST(FrameworkMemory, ClosedFormOnAnH100Plan) {
  // GPT-3 2.7B on DGX H100: tp 8, dp 4, pp 2 (tied embeddings) -> tp, dp, one neighbour, tied = 4 communicators.
  json j = {{"name", "fw"}, {"model", "gpt3-2.7b"}, {"cluster", "dgx-h100"},
            {"training", {{"global_batch", 32}, {"seq_len", 2048}, {"precision", "bf16"}}},
            {"plan", {{"dp", 4}, {"tp", 8}, {"pp", 2}, {"microbatch", 1}, {"zero", 1}, {"attention", "flash"}}}};
  Scenario sc = scenario_from_json(j, ".", "test");
  const Gpu& g = sc.cluster.gpu;
  ASSERT_GT(g.framework.cuda_context_bytes, 0);
  ASSERT_GT(sc.cluster.nccl_buffer_bytes_per_communicator, 0);
  Result r = simulate(sc);
  const double expected = g.framework.cuda_context_bytes + g.framework.cublas_workspace_bytes +
                          4 * sc.cluster.nccl_buffer_bytes_per_communicator +
                          g.framework.allocator_fragmentation * r.memory.tensors();
  EXPECT_NEAR(r.memory.framework, expected, 1e-6 * expected);
  EXPECT_NEAR(r.peak_bytes_per_gpu, r.memory.tensors() + r.memory.framework, 1);
  // The planner's estimate adds the same term (sim/step_formulas::framework_bytes); tests/planner/analytic_test
  // keeps its peak within 3% of this one on every bundled example.
}

TEST(FrameworkMemory, FitsFlipsWithinTheFrameworkMargin) {
  json c = ideal_cluster(1, 8);
  json model = gpt_model(4, 1024, 16, 32000, 1024);
  Scenario base = make_scenario(model, c, 8, plan_json(8, 1, 1, 1, "1f1b"));
  Result r0 = simulate(base);
  ASSERT_EQ(r0.memory.framework, 0);  // no framework keys: tensors only
  // HBM just above the tensor peak: fits without the framework term, not with a 256 MiB context.
  c["gpu"]["hbm_bytes"] = r0.peak_bytes_per_gpu * 1.01;
  Result fits = simulate(make_scenario(model, c, 8, plan_json(8, 1, 1, 1, "1f1b")));
  EXPECT_TRUE(fits.fits);
  c["gpu"]["framework_memory"] = {{"cuda_context_bytes", 268435456}};
  Result no = simulate(make_scenario(model, c, 8, plan_json(8, 1, 1, 1, "1f1b")));
  EXPECT_FALSE(no.fits);
  EXPECT_NEAR(no.memory.framework, 268435456, 1);
}

TEST(FrameworkMemory, BadKeysNameTheirPath) {
  json c = ideal_cluster(1, 8);
  c["gpu"]["framework_memory"] = {{"cuda_context_bytes", -1}, {"allocator_fragmentation", 2}, {"nccl", 1}};
  c["nccl_buffer_bytes_per_communicator"] = "big";
  try {
    make_scenario(gpt_model(4, 1024, 16), c, 8, plan_json(8, 1, 1, 1, "1f1b"));
    FAIL() << "accepted bad framework_memory keys";
  } catch (const InputError& e) {
    std::string all;
    for (const std::string& m : e.messages) all += m + "\n";
    EXPECT_NE(all.find("framework_memory.cuda_context_bytes"), std::string::npos) << all;
    EXPECT_NE(all.find("framework_memory.allocator_fragmentation"), std::string::npos) << all;
    EXPECT_NE(all.find("framework_memory.nccl: unknown key"), std::string::npos) << all;
    EXPECT_NE(all.find("nccl_buffer_bytes_per_communicator"), std::string::npos) << all;
  }
}
