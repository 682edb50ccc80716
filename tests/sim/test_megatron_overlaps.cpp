// Megatron-LM's communication overlaps that today's published runs use: --tp-comm-overlap (the sequence-
// parallel all-gathers / reduce-scatters hidden under the adjacent GEMM, closed form from the op list) and
// --overlap-param-gather (ZeRO-1/2 parameter all-gathers in buckets before the first forward of their layers
// instead of one gather after the optimizer). And the H100 development set's regression bounds.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <map>

#include "sim/program.hpp"
#include "sim/simulate.hpp"
#include "sim/validate_devset.hpp"
#include "sim_test_util.hpp"

using namespace tp;
using namespace tp::testutil;

namespace {

Scenario h100(json plan, long long batch = 64, const char* precision = "bf16") {
  json j = {{"name", "overlap"},
            {"model", gpt_model(8, 4096, 32, 51200, 4096)},
            {"cluster", "dgx-h100"},
            {"training", {{"global_batch", batch}, {"seq_len", 4096}, {"precision", precision}}},
            {"plan", plan}};
  return scenario_from_json(j, ".", "overlap");
}

std::map<std::string, double> op_times(const PassCost& pc) {
  std::map<std::string, double> t;
  for (const Op& op : pc.ops) t[op.name] += op.time_s + op.hidden_s;
  return t;
}

}  // namespace

TEST(TpCommOverlap, ForwardCollectivesHiddenUnderTheirGemms) {
  json plan = {{"dp", 1}, {"tp", 8}, {"pp", 1}, {"microbatch", 1}, {"sequence_parallel", true}};
  Result plain = simulate(h100(plan, 8));
  plan["tp_comm_overlap"] = true;
  Result over = simulate(h100(plan, 8));
  std::map<std::string, double> t = op_times(plain.prog.cm.layer_fwd);
  // each collective is exposed only beyond the GEMM it runs under: ag1 | qkv, rs1 | proj, ag2 | fc1, rs2 | fc2
  double want = std::max(0.0, t["tp.ag1"] - t["qkv"]) + std::max(0.0, t["tp.rs1"] - t["proj"]) +
                std::max(0.0, t["tp.ag2"] - t["fc1"]) + std::max(0.0, t["tp.rs2"] - t["fc2"]);
  EXPECT_NEAR(over.prog.cm.layer_fwd.tp_comm_s, want, 1e-12);
  EXPECT_GT(plain.prog.cm.layer_fwd.tp_comm_s, 2 * over.prog.cm.layer_fwd.tp_comm_s);
  EXPECT_DOUBLE_EQ(over.prog.cm.layer_fwd.compute_s, plain.prog.cm.layer_fwd.compute_s);  // the same GEMMs
  EXPECT_LT(over.step_time_s, plain.step_time_s);
  EXPECT_LT(over.prog.cm.layer_bwd.tp_comm_s, plain.prog.cm.layer_bwd.tp_comm_s);  // row-parallel dgrad gathers
}

TEST(OverlapParamGather, BucketsRunBeforeTheFirstForwardOfTheirLayers) {
  // dp 16 over two nodes (inter-node gathers), 8 micro-batches of 8 sequences: the first forward is long.
  json plan = {{"dp", 16}, {"tp", 1}, {"pp", 1}, {"microbatch", 2}, {"zero", 1}};
  Result plain = simulate(h100(plan, 256));
  plan["overlap_param_gather"] = true;
  Result over = simulate(h100(plan, 256));
  int gathers_plain = 0, gathers = 0;
  for (const TaskInfo& ti : plain.prog.info) gathers_plain += ti.kind == TaskKind::dp_gather;
  for (const TaskInfo& ti : over.prog.info) gathers += ti.kind == TaskKind::dp_gather;
  EXPECT_EQ(gathers_plain, 1);  // one gather after the optimizer
  EXPECT_GT(gathers, 2);        // buckets of the forward
  // every gather feeds a forward task (not the optimizer)
  const Program& pr = over.prog;
  for (size_t id = 0; id < pr.info.size(); ++id) {
    if (pr.info[id].kind != TaskKind::dp_gather) continue;
    bool feeds_fwd = false;
    for (auto& e : pr.in.edges)
      if (e.first == (int)id && pr.info[e.second].kind == TaskKind::fwd) feeds_fwd = true;
    EXPECT_TRUE(feeds_fwd) << "gather task " << id;
  }
  EXPECT_LT(over.step_time_s, plain.step_time_s);
  EXPECT_NEAR(over.peak_bytes_per_gpu, plain.peak_bytes_per_gpu, 0.01 * plain.peak_bytes_per_gpu);
  // Every parameter is gathered once per step, as by the one gather after the optimizer: the later
  // micro-batches' forwards (one run of the whole chunk) reuse what the first one gathered.
  auto gathered = [](const Program& p) {
    double b = 0;
    for (const TaskInfo& ti : p.info)
      if (ti.kind == TaskKind::dp_gather) b += ti.sent.intra + ti.sent.inter;
    return b;
  };
  EXPECT_GT(gathered(plain.prog), 0);
  EXPECT_NEAR(gathered(over.prog), gathered(plain.prog), 1e-9 * gathered(plain.prog));
}

// A validation set of data/validation/ (an empty object when it cannot be read: the row counts then fail).
static json read_set(const std::string& name) {
  std::ifstream in(std::string(TP_SOURCE_DIR) + "/data/validation/" + name);
  return in.good() ? json::parse(in) : json::object();
}

// The H100 development set (data/validation/h100-dev-set.json) with the fitted H100 curves (the llm-foundry rows
// with the H100's llm-foundry kernel profile, its per-head attention backward grid included). The target
// (mean <= 8 %, max <= 15 % over the set) is met for the mean, NOT for the max: one row, the Megatron-LM README's
// 32B (+30.6 %), misses (docs/accuracy.md says why). These are regression bounds at today's accuracy, the step's
// collectives on the NCCL model (6.0 % mean, 30.6 % max over all 40 rows; with the curves 6.0 % / 27.8 %): the
// Megatron-Core fp8 rows (NeMo, Megatron-Bridge) and the llm-foundry rows (6.4 % / 13.8 %) meet the target; the
// Megatron-LM README rows (fp16, interleaved for pp > 1) meet the mean.
TEST(DevSetH100, RegressionBoundsAtTodaysAccuracy) {
  PublishedReport r = validate_devset(read_set("h100-dev-set.json"));
  EXPECT_EQ(r.time_rows.size(), 40u);
  EXPECT_TRUE(r.skipped.empty());
  EXPECT_LE(r.time_mean_abs, 0.065);
  EXPECT_LE(r.time_max_abs, 0.31);
  // Each family: its row count, and its mean / max |error| bounds.
  auto family = [&](const char* what, auto in_family, size_t rows, double mean_bound, double max_bound) {
    std::vector<PublishedRow> sel;
    for (const PublishedRow& row : r.time_rows)
      if (in_family(row.table)) sel.push_back(row);
    ASSERT_EQ(sel.size(), rows) << what;
    double mean = 0, mx = 0;
    published_stats(sel, mean, mx);
    EXPECT_LE(mean, mean_bound) << what;
    EXPECT_LE(mx, max_bound) << what;
  };
  family("Megatron-Core fp8", [](const std::string& t) { return t.rfind("nemo", 0) == 0 || t.rfind("megatron-bridge", 0) == 0; },
         14, 0.08, 0.15);
  family("Megatron-LM README", [](const std::string& t) { return t == "megatron-lm-readme-h100"; }, 9, 0.08, 0.31);
  family("llm-foundry", [](const std::string& t) { return t == "llm-foundry-benchmarks"; }, 17, 0.07, 0.15);
}

// The public runs of other frameworks (data/validation/frameworks-set.json, docs/accuracy.md): every row
// simulates with its own framework profile (the six TorchTitan 405B pp 8 rows with TorchTitan's stage split), and
// the errors stay at today's bounds. Issue 38's per-framework target (<= 8 % mean, <= 15 % max) is met for the
// means of fsdp and torchtitan, not for their maxima nor for deepspeed and megatron-deepspeed: these bounds catch
// regressions only, and tighten as profiles are fitted (deepspeed's `fitted` block: 54.0 % / 84.3 % before its fit,
// 14.6 % / 58.5 % after; torchtitan's (compute, network and attention scales, over its 46 rows with the float8
// rowwise recipe modelled): 7.0 % / 22.0 %; fsdp through the A100 llm-foundry kernel profile: 8.7 % / 25.2 % ->
// 5.3 % / 16.2 %; megatron-deepspeed is not fitted, docs/accuracy.md).
TEST(FrameworksSet, EveryRowSimulatesAndErrorsStayAtTodaysBounds) {
  PublishedReport r = validate_devset(read_set("frameworks-set.json"));
  EXPECT_EQ(r.time_rows.size(), 112u);
  EXPECT_TRUE(r.skipped.empty()) << r.skipped.front();
  json stats = framework_stats(r.time_rows);
  std::map<std::string, std::pair<double, double>> bounds = {
      {"fsdp", {0.06, 0.17}}, {"torchtitan", {0.075, 0.23}}, {"deepspeed", {0.15, 0.59}}, {"megatron-deepspeed", {0.41, 1.03}}};
  for (auto& [name, b] : bounds) {
    SCOPED_TRACE(name);
    ASSERT_TRUE(stats.contains(name)) << stats.dump();
    EXPECT_LE(stats[name]["mean_abs_error"].get<double>(), b.first);
    EXPECT_LE(stats[name]["max_abs_error"].get<double>(), b.second);
  }
  int split = 0;
  for (const PublishedRow& row : r.time_rows)
    if (row.name.find("405b") != std::string::npos && row.name.find("pp8") != std::string::npos) ++split;
  EXPECT_EQ(split, 6);
}
