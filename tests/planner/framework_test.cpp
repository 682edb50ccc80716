// The planner and the framework profiles: by default the search covers what the scenario's framework can run
// (no research technique, none of the framework's refusals); search.fix.framework widens it and each plan names
// its framework; a fix that names a research value opts in, and the plans carry the research label in JSON.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "models/framework.hpp"
#include "planner/search.hpp"
#include "planner/explain.hpp"  // plan_summary
#include "planner_test_util.hpp"

using namespace tp;
using tp::testutil::search_json;
using tp::testutil::search_scenario;

namespace {

// gpt3-1.3b on up to 16 H100s: a search of about a second.
json small_search(const json& fix, const json& framework = nullptr) {
  json j = search_json("gpt3-1.3b", "dgx-h100", {{"max_gpus", 16}, {"top_k", 4}, {"fix", fix}}, 2e10);
  if (!framework.is_null()) j["training"]["framework"] = framework;
  return j;
}

std::vector<const Candidate*> every_candidate(const PlanOutcome& o) {
  std::vector<const Candidate*> v;
  for (const Candidate& c : o.top) v.push_back(&c);
  for (const GpuPoint& g : o.by_gpus) v.push_back(&g.best);
  for (const Explanation& e : o.why) v.push_back(&e.alt);
  return v;
}

}  // namespace

TEST(FrameworkSearch, DefaultSearchIsWhatMegatronCoreRuns) {
  PlanOutcome o = plan_search(search_scenario(small_search(json::object())), PlanOptions{1, nullptr});
  ASSERT_FALSE(o.top.empty());
  for (const Candidate* c : every_candidate(o)) {
    EXPECT_EQ(c->framework, "megatron-core");
    EXPECT_TRUE(research_techniques(c->plan, Delink{}).empty()) << c->plan.dp;
    EXPECT_TRUE(framework_refusals(o.scenario.framework, c->plan, c->point.lay.prec).empty());
  }
  json j = plan_outcome_to_json(o);
  EXPECT_EQ(j["framework"], "megatron-core");
  // The CSV carries every plan field and the framework: the header and each row have the same columns.
  const std::string csv = plan_outcome_to_csv(o);
  const std::string head = csv.substr(0, csv.find('\n'));
  for (const char* col : {",cp,", ",precision,", ",attention,", ",stage_layers,", ",framework,", ",research_techniques,"})
    EXPECT_NE(head.find(col), std::string::npos) << col;
  const std::string row1 = csv.substr(head.size() + 1, csv.find('\n', head.size() + 1) - head.size() - 1);
  EXPECT_EQ(std::count(head.begin(), head.end(), ','), std::count(row1.begin(), row1.end(), ','));
  EXPECT_NE(row1.find(",megatron-core,"), std::string::npos) << row1;
  EXPECT_FALSE(j["top"][0].contains("research_techniques"));
}

TEST(FrameworkSearch, DeepSpeedSearchKeepsItsLimits) {
  PlanOutcome o = plan_search(search_scenario(small_search(json::object(), "deepspeed")), PlanOptions{1, nullptr});
  ASSERT_FALSE(o.top.empty());
  for (const Candidate* c : every_candidate(o)) {
    EXPECT_EQ(c->plan.tp, 1);
    EXPECT_FALSE(c->plan.pp > 1 && c->plan.zero > 1);
    EXPECT_FALSE(c->plan.sequence_parallel);
    EXPECT_NE(c->plan.recompute, Recompute::selective);
    EXPECT_EQ(c->framework, "deepspeed");
  }
}

TEST(FrameworkSearch, FixFrameworkAnyWidensAndEveryPlanNamesItsFramework) {
  PlanOutcome o = plan_search(search_scenario(small_search({{"framework", "any"}})), PlanOptions{1, nullptr});
  ASSERT_FALSE(o.top.empty());
  std::set<std::string> names;
  for (const Framework& f : catalog_frameworks()) names.insert(f.name);
  for (const Candidate* c : every_candidate(o)) EXPECT_TRUE(names.count(c->framework)) << c->framework;
  json j = plan_outcome_to_json(o);
  for (const json& t : j["top"]) EXPECT_TRUE(t["framework"].is_string());
  // The merged best is no worse than the default search's (the space only widened).
  PlanOutcome d = plan_search(search_scenario(small_search(json::object())), PlanOptions{1, nullptr});
  EXPECT_LE(o.top[0].objective, d.top[0].objective * (1 + 1e-9));
}

TEST(FrameworkSearch, FixingAResearchValueOptsInAndLabelsIt) {
  PlanOutcome o = plan_search(search_scenario(small_search({{"grad_accumulation", "layered"}})), PlanOptions{1, nullptr});
  ASSERT_FALSE(o.top.empty());
  json j = plan_outcome_to_json(o);
  for (const json& t : j["top"]) {
    ASSERT_TRUE(t.contains("research_techniques")) << t.dump();
    EXPECT_NE(t["summary"].get<std::string>().find("[research]"), std::string::npos);
  }
  bool legend = false;
  for (const json& n : j["notes"]) legend |= n.get<std::string>().find(kResearchLabel) != std::string::npos;
  EXPECT_TRUE(legend);
}

TEST(FrameworkSearch, AFixTheFrameworkCannotRunIsAnInputError) {
  try {
    plan_search(search_scenario(small_search({{"schedule", "gpipe"}})), PlanOptions{1, nullptr});
    FAIL() << "expected an InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("$.search.fix.schedule"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("megatron-core cannot run"), std::string::npos) << e.what();
  }
}

// search.fix.framework "any" leaves out the frameworks that cannot run the scenario's fixed choices (here fp8 with
// the rowwise recipe: Megatron-Core has no rowwise recipe, DeepSpeed and Megatron-DeepSpeed no fp8) and says so;
// a framework named there that cannot is still an input error naming the key.
TEST(FrameworkSearch, AnyLeavesOutTheFrameworksThatCannotRunTheScenario) {
  json j = small_search({{"framework", "any"}}, "torchtitan");
  j["training"]["precision"] = "fp8";
  j["training"]["fp8_recipe"] = "rowwise";
  PlanOutcome o = plan_search(search_scenario(j), PlanOptions{1, nullptr});
  ASSERT_FALSE(o.top.empty());
  const std::set<std::string> left(o.frameworks_left_out.begin(), o.frameworks_left_out.end());
  EXPECT_EQ(left, (std::set<std::string>{"deepspeed", "megatron-core", "megatron-deepspeed"}));
  for (const Candidate* c : every_candidate(o)) EXPECT_FALSE(left.count(c->framework)) << c->framework;
  bool said = false;
  for (const std::string& n : plan_outcome_notes(o)) said |= n.find("left out of \"any\": deepspeed, megatron-core") != std::string::npos;
  EXPECT_TRUE(said);
  j["search"]["fix"]["framework"] = {"torchtitan", "megatron-core"};
  try {
    plan_search(search_scenario(j), PlanOptions{1, nullptr});
    FAIL() << "expected an InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("$.training.fp8_recipe: megatron-core does not run the fp8 recipe \"rowwise\""),
              std::string::npos) << e.what();
  }
}

// A table row names every choice of the plan that is not its default (issue 43): recompute of a share of the
// layers, the overlaps, unfused attention, fp8.
TEST(PlanSummary, NamesEveryNonDefaultChoice) {
  Plan p;
  p.dp = 4; p.tp = 2; p.pp = 1; p.microbatch = 1; p.num_microbatches = 2;
  p.recompute = Recompute::full; p.recompute_layers = 6; p.sequence_parallel = true; p.tp_comm_overlap = true;
  p.zero = 1; p.overlap_param_gather = true; p.attention = Attention::unfused;
  EXPECT_EQ(plan_summary(p, 8, Precision::fp8),
            "dp 4 x tp 2 x pp 1, batch 8 = 4 x 1 x 2, ZeRO-1, full recompute of 6 layers, SP, TP overlap, "
            "param-gather overlap, unfused attention, fp8");
}
