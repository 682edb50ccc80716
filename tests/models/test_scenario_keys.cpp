// The scenario keys of the seeds' techniques parse into the plan, model and cluster structs with their defaults:
// tp_mode, grad_accumulation, the modular schedule (virtual_stages defaulting to layers / pp), ZeRO 2/3, ep,
// offload (granular fraction resolved to evenly spread layers), delink (pseudo plan and pseudo_phase()), model.moe
// and host.memory_bandwidth_bytes_per_s; and scenario_to_json output reads back to the same scenario.
#include <gtest/gtest.h>

#include "models/scenario.hpp"

using namespace tp;

namespace {

// gpt3-1.3b (24 layers, 16 heads) on dgx-h100, framework "research" (every plan kind), with the given plan keys merged over dp 4, tp 2, pp 2, microbatch 1.
json scenario(const json& plan_keys, long long global_batch = 64) {
  json plan = {{"dp", 4}, {"tp", 2}, {"pp", 2}, {"microbatch", 1}};
  for (auto it = plan_keys.begin(); it != plan_keys.end(); ++it) plan[it.key()] = it.value();
  return {{"model", "gpt3-1.3b"},
          {"cluster", "dgx-h100"},
          {"training", {{"global_batch", global_batch}, {"seq_len", 2048}, {"precision", "bf16"}, {"framework", "research"}}},
          {"plan", plan}};
}

json moe_model() {
  return {{"name", "moe-24"}, {"layers", 24}, {"hidden", 2048}, {"heads", 16}, {"vocab", 50257}, {"seq_len", 2048},
          {"moe", {{"experts", 8}, {"every", 2}}}};
}

Scenario parse(const json& j) { return scenario_from_text(j.dump(), "t"); }

// scenario_to_json less the derived num_microbatches (not an input key) and training.tokens 0 ("not given").
json input_json(const Scenario& sc) {
  json j = scenario_to_json(sc);
  j["plan"].erase("num_microbatches");
  if (j["training"]["tokens"].get<double>() == 0.0) j["training"].erase("tokens");
  if (j["plan"].contains("delink") && j["plan"]["delink"].contains("plan")) j["plan"]["delink"]["plan"].erase("num_microbatches");
  return j;
}

void expect_round_trip(const Scenario& sc) {
  json j = input_json(sc);
  Scenario back;
  try {
    back = scenario_from_json(j, ".", "round-trip");
  } catch (const InputError& e) {
    FAIL() << e.what() << "\n" << j.dump(2);
  }
  EXPECT_EQ(input_json(back), j);
  EXPECT_EQ(back.plan.num_microbatches, sc.plan.num_microbatches);
}

}  // namespace

TEST(ScenarioKeys, DefaultsOfTheNewKeys) {
  Scenario sc = parse(scenario(json::object()));
  EXPECT_EQ(sc.plan.tp_mode, TpMode::d1);
  EXPECT_EQ(sc.plan.tp_q(), 1);
  EXPECT_EQ(sc.plan.grad_accumulation, GradAccumulation::standard);
  EXPECT_EQ(sc.plan.schedule, Schedule::one_f_one_b);
  EXPECT_EQ(sc.plan.zero, 0);
  EXPECT_EQ(sc.plan.ep, 1);
  EXPECT_FALSE(sc.plan.offload.on());
  EXPECT_FALSE(sc.delink.on());
  EXPECT_EQ(sc.plan.shared_layers, 0);
  EXPECT_EQ(sc.model.moe.experts, 0);
  EXPECT_FALSE(sc.model.is_moe_layer(0));
  EXPECT_DOUBLE_EQ(sc.cluster.host.memory_bandwidth_bytes_per_s, 3.7e11);  // from the catalog
  json j = scenario_to_json(sc);
  EXPECT_EQ(j["plan"]["tp_mode"], "1d");
  EXPECT_EQ(j["plan"]["grad_accumulation"], "standard");
  EXPECT_EQ(j["plan"]["ep"], 1);
  EXPECT_FALSE(j["plan"].contains("offload"));
  EXPECT_FALSE(j["plan"].contains("delink"));
  EXPECT_FALSE(j["model"].contains("moe"));
  EXPECT_DOUBLE_EQ(j["cluster"]["host"]["memory_bandwidth_bytes_per_s"].get<double>(), 3.7e11);
  expect_round_trip(sc);
}

TEST(ScenarioKeys, TensorParallel2dAndZero) {
  Scenario sc = parse(scenario({{"dp", 2}, {"tp", 4}, {"pp", 1}, {"microbatch", 2}, {"tp_mode", "2d"}, {"zero", 3}}));
  EXPECT_EQ(sc.plan.tp_mode, TpMode::d2);
  EXPECT_EQ(sc.plan.tp_q(), 2);
  EXPECT_EQ(sc.plan.zero, 3);
  EXPECT_EQ(sc.plan.num_microbatches, 16);
  expect_round_trip(sc);
  EXPECT_EQ(parse(scenario({{"zero", 2}})).plan.zero, 2);
  // tp 1 is the trivial 1 x 1 grid.
  EXPECT_EQ(parse(scenario({{"tp", 1}, {"tp_mode", "2d"}})).plan.tp_q(), 1);
}

TEST(ScenarioKeys, ModularScheduleAndLayeredAccumulation) {
  // Without virtual_stages every model chunk is one layer: 24 layers / pp 4 = 6 chunks per stage.
  Scenario sc = parse(scenario({{"dp", 1}, {"pp", 4}, {"schedule", "modular"}}, 8));
  EXPECT_EQ(sc.plan.schedule, Schedule::modular);
  EXPECT_EQ(sc.plan.virtual_stages, 6);
  EXPECT_EQ(sc.plan.num_microbatches, 8);
  expect_round_trip(sc);
  // Given virtual_stages is kept.
  EXPECT_EQ(parse(scenario({{"dp", 1}, {"pp", 4}, {"schedule", "modular"}, {"virtual_stages", 2}}, 8)).plan.virtual_stages, 2);
  // Layered accumulation: modular needs only m >= pp, not a multiple of pp.
  sc = parse(scenario({{"dp", 1}, {"pp", 4}, {"schedule", "modular"}, {"grad_accumulation", "layered"}}, 6));
  EXPECT_EQ(sc.plan.grad_accumulation, GradAccumulation::layered);
  EXPECT_EQ(sc.plan.num_microbatches, 6);
  expect_round_trip(sc);
  // With gpipe, and with any schedule when pp == 1.
  EXPECT_EQ(parse(scenario({{"schedule", "gpipe"}, {"grad_accumulation", "layered"}})).plan.schedule, Schedule::gpipe);
  EXPECT_EQ(parse(scenario({{"pp", 1}, {"grad_accumulation", "layered"}})).plan.schedule, Schedule::one_f_one_b);
}

TEST(ScenarioKeys, MixtureOfExpertsAndExpertParallelism) {
  json j = scenario({{"ep", 4}});
  j["model"] = moe_model();
  Scenario sc = parse(j);
  EXPECT_EQ(sc.model.moe.experts, 8);
  EXPECT_EQ(sc.model.moe.top_k, 1);
  EXPECT_DOUBLE_EQ(sc.model.moe.capacity_factor, 1.0);
  EXPECT_EQ(sc.model.moe.every, 2);
  EXPECT_FALSE(sc.model.is_moe_layer(0));
  EXPECT_TRUE(sc.model.is_moe_layer(1));
  EXPECT_EQ(sc.model.moe_layers_in(0, 24), 12);
  EXPECT_EQ(sc.plan.ep, 4);
  json out = scenario_to_json(sc);
  EXPECT_EQ(out["model"]["moe"]["experts"], 8);
  EXPECT_EQ(out["plan"]["ep"], 4);
  expect_round_trip(sc);

  // The catalog's M6-10T.
  json m6 = {{"model", "m6-10t"}, {"cluster", "v100-m6"}, {"training", {{"global_batch", 512}}},
             {"plan", {{"dp", 512}, {"tp", 1}, {"pp", 1}, {"ep", 512}}}};
  sc = parse(m6);
  EXPECT_EQ(sc.model.layers, 48);
  EXPECT_EQ(sc.model.hidden, 1024);
  EXPECT_EQ(sc.model.ffn_hidden, 9984);
  EXPECT_EQ(sc.model.vocab, 21128);
  EXPECT_EQ(sc.model.seq_len, 512);
  EXPECT_EQ(sc.model.moe.experts, 10240);
  EXPECT_EQ(sc.model.moe.top_k, 1);
  EXPECT_EQ(sc.model.moe_layers_in(0, 48), 48);
  EXPECT_EQ(sc.training.seq_len, 512);
}

TEST(ScenarioKeys, GranularOffload) {
  // fraction f: layer l is offloaded iff floor((l + 1) f) > floor(l f), evenly spread.
  Scenario sc = parse(scenario({{"offload", {{"kind", "granular"}, {"fraction", 0.25}}}}));
  EXPECT_EQ(sc.plan.offload.kind, OffloadKind::granular);
  EXPECT_DOUBLE_EQ(sc.plan.offload.fraction, 0.25);
  EXPECT_EQ(sc.plan.offload.layers, (std::vector<int>{3, 7, 11, 15, 19, 23}));
  EXPECT_FALSE(sc.plan.offload.experts_only);
  EXPECT_EQ(sc.plan.offload.prefetch_layers, 1);
  json out = scenario_to_json(sc);
  EXPECT_EQ(out["plan"]["offload"]["layers"], json({3, 7, 11, 15, 19, 23}));  // written resolved
  expect_round_trip(sc);

  sc = parse(scenario({{"offload", {{"kind", "granular"}, {"fraction", 1}}}}));
  EXPECT_EQ(sc.plan.offload.layers.size(), 24u);
  sc = parse(scenario({{"offload", {{"kind", "granular"}, {"fraction", 0.5}}}}));
  EXPECT_EQ(sc.plan.offload.layers.size(), 12u);
  EXPECT_EQ(sc.plan.offload.layers.front(), 1);
  sc = parse(scenario({{"offload", {{"kind", "granular"}, {"fraction", 0.3}}}}));
  EXPECT_EQ(sc.plan.offload.layers.size(), 7u);  // floor(24 x 0.3)

  // Explicit layers are sorted; experts only on an MoE model; prefetch depth.
  json j = scenario({{"offload", {{"kind", "granular"}, {"layers", {5, 1, 3}}, {"target", "experts"}, {"prefetch_layers", 2}}}});
  j["model"] = moe_model();
  sc = parse(j);
  EXPECT_EQ(sc.plan.offload.layers, (std::vector<int>{1, 3, 5}));
  EXPECT_DOUBLE_EQ(sc.plan.offload.fraction, 0);
  EXPECT_TRUE(sc.plan.offload.experts_only);
  EXPECT_EQ(sc.plan.offload.prefetch_layers, 2);
  expect_round_trip(sc);
}

TEST(ScenarioKeys, OptimizerAndChunkedOffload) {
  Scenario sc = parse(scenario({{"offload", {{"kind", "optimizer"}}}, {"zero", 1}}));
  EXPECT_EQ(sc.plan.offload.kind, OffloadKind::optimizer);
  EXPECT_TRUE(sc.plan.offload.on());
  expect_round_trip(sc);

  sc = parse(scenario({{"dp", 1}, {"offload", {{"kind", "chunked"}}}}, 16));
  EXPECT_EQ(sc.plan.offload.kind, OffloadKind::chunked);
  EXPECT_EQ(sc.plan.offload.chunk_elements, 67108864);
  EXPECT_DOUBLE_EQ(sc.plan.offload.gpu_memory_fraction, 0.8);
  EXPECT_DOUBLE_EQ(sc.plan.offload.warmup_chunk_fraction, 0.1);
  EXPECT_DOUBLE_EQ(sc.plan.offload.hybrid_adam_margin, 0.8);
  EXPECT_EQ(sc.plan.offload.prefetch_runs, 0);  // PatrickStar's synchronous moves
  expect_round_trip(sc);

  sc = parse(scenario({{"zero", 3},
                       {"offload", {{"kind", "chunked"}, {"chunk_elements", 1 << 20}, {"gpu_memory_fraction", 0.5},
                                    {"warmup_chunk_fraction", 0.2}, {"hybrid_adam_margin", 0}, {"prefetch_runs", 2}}}}));
  EXPECT_EQ(sc.plan.offload.prefetch_runs, 2);
  EXPECT_EQ(sc.plan.offload.chunk_elements, 1 << 20);
  EXPECT_DOUBLE_EQ(sc.plan.offload.gpu_memory_fraction, 0.5);
  EXPECT_DOUBLE_EQ(sc.plan.offload.warmup_chunk_fraction, 0.2);
  EXPECT_DOUBLE_EQ(sc.plan.offload.hybrid_adam_margin, 0);
  expect_round_trip(sc);
}

TEST(ScenarioKeys, DelinkWithItsOwnPlanAndBatch) {
  json j = scenario({{"offload", {{"kind", "granular"}, {"fraction", 0.5}}},
                     {"delink", {{"unique_layers", 4}, {"tokens", 1e10}, {"global_batch", 32},
                                 {"plan", {{"dp", 8}, {"tp", 1}, {"pp", 2}, {"schedule", "modular"}}}}}});
  Scenario sc = parse(j);
  ASSERT_TRUE(sc.delink.on());
  EXPECT_EQ(sc.delink.unique_layers, 4);
  EXPECT_DOUBLE_EQ(sc.delink.tokens, 1e10);
  EXPECT_EQ(sc.delink.global_batch, 32);
  ASSERT_TRUE(sc.delink.plan);
  EXPECT_EQ(sc.delink.plan->dp, 8);
  EXPECT_EQ(sc.delink.plan->virtual_stages, 12);  // modular default, resolved by validation
  EXPECT_EQ(sc.delink.plan->num_microbatches, 4);
  EXPECT_EQ(sc.plan.shared_layers, 0);

  Scenario ps = pseudo_phase(sc);
  EXPECT_EQ(ps.plan.dp, 8);
  EXPECT_EQ(ps.plan.pp, 2);
  EXPECT_EQ(ps.plan.schedule, Schedule::modular);
  EXPECT_EQ(ps.plan.shared_layers, 4);
  EXPECT_FALSE(ps.plan.offload.on());
  EXPECT_EQ(ps.training.global_batch, 32);
  EXPECT_DOUBLE_EQ(ps.training.tokens, 1e10);
  EXPECT_EQ(ps.plan.num_microbatches, 4);
  EXPECT_FALSE(ps.delink.on());
  EXPECT_EQ(ps.name, sc.name + ".pseudo");
  EXPECT_EQ(weight_group(11, 24, ps.plan.shared_layers), 1);

  json out = scenario_to_json(sc);
  EXPECT_EQ(out["plan"]["delink"]["unique_layers"], 4);
  EXPECT_EQ(out["plan"]["delink"]["global_batch"], 32);
  EXPECT_EQ(out["plan"]["delink"]["plan"]["dp"], 8);
  expect_round_trip(sc);
}

TEST(ScenarioKeys, DelinkWithoutPlanUsesTheRealPlanLessOffload) {
  Scenario sc = parse(scenario({{"offload", {{"kind", "optimizer"}}}, {"delink", {{"unique_layers", 6}, {"tokens", 5e9}}}}));
  ASSERT_TRUE(sc.delink.on());
  EXPECT_FALSE(sc.delink.plan);
  EXPECT_EQ(sc.delink.global_batch, 0);
  Scenario ps = pseudo_phase(sc);
  EXPECT_EQ(ps.plan.dp, sc.plan.dp);
  EXPECT_EQ(ps.plan.tp, sc.plan.tp);
  EXPECT_EQ(ps.plan.shared_layers, 6);
  EXPECT_FALSE(ps.plan.offload.on());
  EXPECT_EQ(ps.training.global_batch, 64);
  EXPECT_EQ(ps.plan.num_microbatches, sc.plan.num_microbatches);
  EXPECT_DOUBLE_EQ(ps.training.tokens, 5e9);
  json out = scenario_to_json(sc);
  EXPECT_FALSE(out["plan"]["delink"].contains("plan"));
  EXPECT_FALSE(out["plan"]["delink"].contains("global_batch"));
  expect_round_trip(sc);

  // Its own batch with the real plan: validated against dp x microbatch.
  sc = parse(scenario({{"delink", {{"unique_layers", 6}, {"tokens", 5e9}, {"global_batch", 128}}}}));
  EXPECT_EQ(pseudo_phase(sc).plan.num_microbatches, 32);
}

TEST(ScenarioKeys, HostMemoryBandwidthInline) {
  json j = scenario({{"offload", {{"kind", "optimizer"}}}});
  j["cluster"] = {{"gpu", "H100-SXM-80GB"},
                  {"nodes", 1},
                  {"gpus_per_node", 16},
                  {"intra_node", {{"kind", "nvswitch"}, {"bandwidth_bytes_per_s", 4.5e11}, {"latency_s", 3e-6}}},
                  {"inter_node", {{"nics_per_node", 1}, {"nic_bandwidth_bits_per_s", 4e11}, {"latency_s", 5e-6}}},
                  {"host", {{"memory_bytes", 1e12}, {"pcie_bandwidth_bytes_per_s", 5e10}, {"memory_bandwidth_bytes_per_s", 2e11}}}};
  Scenario sc = parse(j);
  EXPECT_DOUBLE_EQ(sc.cluster.host.memory_bandwidth_bytes_per_s, 2e11);
  EXPECT_DOUBLE_EQ(scenario_to_json(sc)["cluster"]["host"]["memory_bandwidth_bytes_per_s"].get<double>(), 2e11);
  // Absent: fine without offload, and not written.
  j["cluster"]["host"].erase("memory_bandwidth_bytes_per_s");
  j["plan"].erase("offload");
  sc = parse(j);
  EXPECT_DOUBLE_EQ(sc.cluster.host.memory_bandwidth_bytes_per_s, 0);
  EXPECT_FALSE(scenario_to_json(sc)["cluster"]["host"].contains("memory_bandwidth_bytes_per_s"));
}

TEST(ScenarioKeys, ValidatePlanPathsForThePlanner) {
  // validate_plan names the paths it is given (the delink pseudo plan, the planner's candidates).
  Scenario sc = parse(scenario(json::object()));
  Plan p = sc.plan;
  p.tp = 3;
  Training t = sc.training;
  t.global_batch = 30;
  Issues is;
  validate_plan(sc.model, sc.cluster, t, p, is, "$.plan.delink.plan", "$.plan.delink.global_batch");
  bool tp = false, batch = false;
  for (auto& m : is.messages) {
    tp |= m.rfind("$.plan.delink.plan.tp: must divide the model's heads (16), got 3", 0) == 0;
    batch |= m.rfind("$.plan.delink.global_batch: must be divisible by dp x microbatch = 4", 0) == 0;
  }
  EXPECT_TRUE(tp) << testing::PrintToString(is.messages);
  EXPECT_TRUE(batch) << testing::PrintToString(is.messages);
}
