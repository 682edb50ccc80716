// Framework profiles (training.framework, models/catalog/frameworks.json): the catalog reads, simulate refuses a
// plan its framework cannot run (naming the nearest plan and the frameworks that can), research techniques are
// run and labelled, the communication each profile describes changes the simulation as it should, and a
// prediction above the best published efficiency is flagged.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <set>

#include "models/catalog.hpp"
#include "models/scenario.hpp"
#include "sim/output.hpp"
#include "sim/simulate.hpp"

using namespace tp;

namespace {

// gpt3-1.3b on dgx-h100 with the given plan keys over dp 4, tp 2, pp 2, microbatch 1; `framework` null = none.
json scenario(const json& plan_keys, const json& framework = nullptr, long long global_batch = 64) {
  json plan = {{"dp", 4}, {"tp", 2}, {"pp", 2}, {"microbatch", 1}};
  for (auto it = plan_keys.begin(); it != plan_keys.end(); ++it) plan[it.key()] = it.value();
  json training = {{"global_batch", global_batch}, {"seq_len", 2048}, {"precision", "bf16"}};
  if (!framework.is_null()) training["framework"] = framework;
  return {{"model", "gpt3-1.3b"}, {"cluster", "dgx-h100"}, {"training", training}, {"plan", plan}};
}

Scenario parse(const json& j) { return scenario_from_text(j.dump(), "t"); }

// The joined messages of the InputError `j` raises ("" when it parses).
std::string refusal(const json& j) {
  try {
    parse(j);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// gpt3-175b (1.8 B parameters per layer) over dp 64 on selene, micro-batch 1, full recompute, the given ZeRO stage
// and framework (null = none).
Scenario gpt3_175b_dp64(int zero, const json& framework) {
  json j = {{"model", "gpt3-175b"}, {"cluster", "selene"},
            {"training", {{"global_batch", 64}, {"seq_len", 2048}, {"precision", "bf16"}}},
            {"plan", {{"dp", 64}, {"tp", 1}, {"pp", 1}, {"microbatch", 1}, {"zero", zero}, {"recompute", "full"}}}};
  if (!framework.is_null()) j["training"]["framework"] = framework;
  return parse(j);
}

}  // namespace

TEST(Framework, CatalogReadsEveryProfileAndTheDefaultIsMegatronCore) {
  std::vector<Framework> all = catalog_frameworks();
  std::set<std::string> names;
  for (const Framework& f : all) names.insert(f.name);
  for (const char* n : {"megatron-core", "megatron-deepspeed", "deepspeed", "fsdp", "torchtitan", "research"}) EXPECT_TRUE(names.count(n)) << n;
  Scenario sc = parse(scenario(json::object()));
  EXPECT_EQ(sc.framework.name, "megatron-core");
  EXPECT_FALSE(sc.framework_given);
  EXPECT_EQ(scenario_to_json(sc)["training"]["framework"], "megatron-core");
}

TEST(Framework, SimulateRefusesWhatTheFrameworkCannotRunNamingTheNearestPlanAndWhoCan) {
  std::string m = refusal(scenario({{"schedule", "gpipe"}}));
  EXPECT_TRUE(has(m, "$.plan.schedule")) << m;
  EXPECT_TRUE(has(m, "megatron-core cannot run schedule \"gpipe\"")) << m;
  EXPECT_TRUE(has(m, "nearest: schedule \"1f1b\"")) << m;
  EXPECT_TRUE(has(m, "fsdp")) << m;  // a framework that can
  EXPECT_EQ(refusal(scenario({{"schedule", "gpipe"}}, "fsdp")), "");

  m = refusal(scenario({{"zero", 2}}, "deepspeed"));  // tp 2 and ZeRO-2 with pp 2
  EXPECT_TRUE(has(m, "$.plan.zero")) << m;
  EXPECT_TRUE(has(m, "$.plan.tp")) << m;
  EXPECT_TRUE(has(m, "at most ZeRO stage 1 with pipeline parallelism")) << m;
  m = refusal(scenario({{"zero", 1}}, "fsdp"));
  EXPECT_TRUE(has(m, "nearest: zero 2")) << m;
  m = refusal(scenario({{"cp", 2}, {"dp", 2}}, "megatron-deepspeed"));
  EXPECT_TRUE(has(m, "$.plan.cp")) << m;
  json fp8 = scenario(json::object(), "megatron-deepspeed");
  fp8["training"]["precision"] = "fp8";
  EXPECT_TRUE(has(refusal(fp8), "$.training.precision")) << refusal(fp8);
}

TEST(Framework, UnknownNamesAndBadInlineProfilesAreInputErrors) {
  std::string m = refusal(scenario(json::object(), "fsdpp"));
  EXPECT_TRUE(has(m, "$.training.framework")) << m;
  EXPECT_TRUE(has(m, "did you mean \"fsdp\"")) << m;
  m = refusal(scenario(json::object(), json{{"can_run", {{"schedules", {"1f1b"}}, {"zero", {5}}}}}));
  EXPECT_TRUE(has(m, "$.training.framework.can_run.zero[0]")) << m;
  m = refusal(scenario(json::object(), json{{"can_run", {{"schedules", {"1f1b"}}, {"zero", {1}}}}, {"colour", 1}}));
  EXPECT_TRUE(has(m, "colour")) << m;
}

TEST(Framework, InlineProfileReadsBackThroughTheResolvedScenario) {
  json fw = *catalog_find("frameworks", "deepspeed");
  Scenario sc = parse(scenario({{"tp", 1}, {"dp", 8}}, fw));
  EXPECT_EQ(sc.framework.name, "inline");
  EXPECT_EQ(sc.framework.can.max_tp, 1);
  json j = scenario_to_json(sc);  // less the derived and "not given" keys, as test_scenario_keys reads it back
  j["plan"].erase("num_microbatches");
  j["training"].erase("tokens");
  Scenario back = scenario_from_json(j, ".", "back");
  EXPECT_EQ(back.framework.name, "inline");
  EXPECT_EQ(framework_to_json(back.framework), framework_to_json(sc.framework));
}

TEST(Framework, ResearchTechniquesRunAndAreLabelledInEveryOutput) {
  Scenario sc = parse(scenario({{"grad_accumulation", "layered"}, {"schedule", "modular"}}));
  Result r = simulate(sc);
  json j = result_to_json(r);
  ASSERT_TRUE(j.contains("research"));
  EXPECT_EQ(j["research"]["label"], kResearchLabel);
  EXPECT_EQ(j["research"]["techniques"].size(), 2u);
  bool labelled = false;
  for (const std::string& n : result_notes(r)) labelled |= has(n, kResearchLabel);
  EXPECT_TRUE(labelled);
  Result plain = simulate(parse(scenario(json::object())));
  EXPECT_FALSE(result_to_json(plain).contains("research"));
  EXPECT_EQ(result_to_json(plain)["framework"]["name"], "megatron-core");
}

TEST(Framework, DeepSpeedPipelinesReduceGradientsAfterTheFlush) {
  // dp 4 x pp 2, ZeRO-1: Megatron-Core reduces the last micro-batch's buckets under its backward; DeepSpeed's
  // pipeline engine reduces everything after the flush, so more of the reduction is exposed.
  json keys = {{"tp", 1}, {"dp", 8}, {"zero", 1}};
  Result mc = simulate(parse(scenario(keys)));
  Result ds = simulate(parse(scenario(keys, "megatron-deepspeed")));
  EXPECT_GT(ds.breakdown.dp_comm_exposed, mc.breakdown.dp_comm_exposed);
  EXPECT_GT(ds.step_time_s, mc.step_time_s);
}

TEST(Framework, FsdpReducesOneBucketPerLayer) {
  // gpt3-350m: 24 layers of about 12.6 M parameters. Megatron-Core fills 40 M-parameter buckets (about 4 layers
  // each); FSDP reduce-scatters every layer (its unit) on its own.
  auto sc = [](const json& fw) {
    json j = scenario({{"tp", 1}, {"pp", 1}, {"dp", 8}, {"zero", 0}}, fw);
    j["model"] = "gpt3-350m";
    return parse(j);
  };
  auto buckets = [](const Result& r) {
    std::set<int> b;
    for (const TaskInfo& ti : r.prog.info)
      if (ti.kind == TaskKind::dp_reduce) b.insert(ti.bucket);
    return b.size();
  };
  const size_t fsdp = buckets(simulate(sc("fsdp"))), mc = buckets(simulate(sc(nullptr)));
  EXPECT_GE(fsdp, 24u);
  EXPECT_LE(mc, 8u);
}

TEST(Framework, DeepSpeedZero3HoldsAtMostItsLiveParameters) {
  // gpt3-175b layers (1.8 B parameters each): Megatron-Core / FSDP gather two whole layers, DeepSpeed at most
  // stage3_max_live_parameters (1e9).
  Result ds = simulate(gpt3_175b_dp64(3, "deepspeed")), mc = simulate(gpt3_175b_dp64(3, nullptr));
  EXPECT_LT(ds.memory.weights, mc.memory.weights - 4e9);  // about 2 x 1.8e9 x 2 B gathered against 1e9 x 2 B
}

TEST(Framework, LayersLargerThanTheBucketStreamTheirGradientsOutBucketByBucket) {
  // gpt3-175b layers (1.8 B parameters each) under ZeRO-2 at dp 64: DeepSpeed's 5e8-element reduce bucket and
  // Megatron-Core's 64 M bucket each hold at most two buckets of fp32 gradients, not two whole layers (14.5 GB);
  // FSDP reduce-scatters whole blocks and holds them.
  auto sc = [](const json& fw) { return gpt3_175b_dp64(2, fw); };
  const double layer_grad_bytes = 12.0 * 12288 * 12288 * 4;  // one layer's fp32 gradients
  Result ds = simulate(sc("deepspeed")), mc = simulate(sc(nullptr)), fsdp = simulate(sc("fsdp"));
  const double sharded = 175e9 * 4 / 64 * 1.01;  // the reduced fp32 shards ZeRO-2 keeps, with the ends
  EXPECT_LE(ds.memory.gradients, sharded + 2 * 5e8 * 4);
  EXPECT_LE(mc.memory.gradients, sharded + 2 * 64e6 * 4);
  EXPECT_GE(fsdp.memory.gradients, layer_grad_bytes);
}

TEST(Framework, DeepSpeedRuns530BWithZero3On640A100sWithinMemory) {
  // The check: Megatron-Turing 530B with ZeRO-3 and no model parallelism over 640 A100-80GB (the
  // configuration DeepSpeed ran in Narayanan et al. 2021's comparison; a memory check, not a fitted time),
  // micro-batch 1 with full recompute. Before gradients streamed per bucket, two 5-billion-parameter layers of
  // fp32 gradients (40.6 GiB) sat on top of the rest.
  json j = {{"model", "megatron-530b"}, {"cluster", "selene"},
            {"training", {{"global_batch", 2560}, {"seq_len", 2048}, {"precision", "fp16"}, {"framework", "deepspeed"}}},
            {"plan", {{"dp", 640}, {"tp", 1}, {"pp", 1}, {"microbatch", 1}, {"zero", 3}, {"recompute", "full"}}}};
  Result r = simulate(parse(j));
  EXPECT_TRUE(r.fits) << r.peak_bytes_per_gpu / 1073741824.0 << " GiB";
  EXPECT_LT(r.memory.gradients, 10.0 * 1073741824.0);
}

TEST(Framework, PredictionsAboveTheBestPublishedAreFlaggedNotCapped) {
  json fw = *catalog_find("frameworks", "megatron-core");
  fw["best_published"] = {{{"gpu", "H100-SXM-80GB"}, {"precision", "16-bit"}, {"model_tflops_per_gpu", 1},
                           {"source", "a test row"}}};
  Result low = simulate(parse(scenario(json::object(), fw)));
  json j = result_to_json(low);
  ASSERT_TRUE(j.contains("beyond_published"));
  EXPECT_EQ(j["beyond_published"]["source"], "a test row");
  fw["best_published"][0]["model_tflops_per_gpu"] = 5000;
  Result high = simulate(parse(scenario(json::object(), fw)));
  EXPECT_FALSE(result_to_json(high).contains("beyond_published"));
  EXPECT_DOUBLE_EQ(low.step_time_s, high.step_time_s);  // flagged, not capped
}

// A fitted attention scale (framework "fitted".attention_efficiency_scale) slows the fused attention kernels and
// nothing else: a flash plan's step grows, the same plan with the unfused core (batched GEMMs on the matrix curve)
// keeps its time to the last bit, and the scale reads back through the resolved scenario.
TEST(Framework, AttentionScaleSlowsOnlyTheFusedAttention) {
  json fw = *catalog_find("frameworks", "megatron-core");
  fw["fitted"] = {{"attention_efficiency_scale", 0.5}, {"source", "test"}};
  for (const char* core : {"flash", "unfused"}) {
    SCOPED_TRACE(core);
    const Scenario plain = parse(scenario({{"attention", core}}, "megatron-core"));
    const Scenario scaled = parse(scenario({{"attention", core}}, fw));
    EXPECT_DOUBLE_EQ(scaled.framework.fit.attention_efficiency_scale, 0.5);
    const double t0 = simulate(plain).step_time_s, t1 = simulate(scaled).step_time_s;
    if (std::string(core) == "flash") EXPECT_GT(t1, t0 * 1.01);
    else EXPECT_EQ(t1, t0);
  }
  fw["fitted"]["attention_efficiency_scale"] = 0.0;
  EXPECT_TRUE(has(refusal(scenario(json::object(), fw)), "attention_efficiency_scale")) << refusal(scenario(json::object(), fw));
}

// Every production framework names the best published run per GPU it has public runs on, so that a prediction
// above it is flagged (issue 38); a source that names a row of the frameworks set names one that is there.
TEST(Framework, EveryProductionFrameworkHasItsBestPublishedRuns) {
  const tp::json set = tp::json::parse(std::ifstream(std::string(TP_SOURCE_DIR) + "/data/validation/frameworks-set.json"));
  std::set<std::string> ids;
  for (const tp::json& r : set.at("rows")) ids.insert(r.at("id").get<std::string>());
  const std::string tag = "frameworks-set.json ";
  for (const Framework& f : catalog_frameworks()) {
    if (f.name == "research") continue;
    EXPECT_FALSE(f.best_published.empty()) << f.name;
    for (const PublishedBest& b : f.best_published) {
      EXPECT_EQ(published_best(f, b.gpu, b.precision == "fp8" ? Precision::fp8 : Precision::bf16), &b) << f.name << " " << b.gpu;
      const size_t at = b.source.find(tag);
      if (at == std::string::npos) continue;
      std::string id = b.source.substr(at + tag.size());
      id = id.substr(0, id.find_first_of(") ,;"));
      EXPECT_TRUE(ids.count(id)) << f.name << ": " << id;
    }
  }
}
