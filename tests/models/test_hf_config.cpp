// Hugging Face import: the published config.json of Mixtral-8x7B, Qwen1.5-MoE-A2.7B, DeepSeek-V2-Lite, Qwen2-7B,
// GPT-2 124M, Mistral-Nemo-12B (head_dim != hidden / heads) and Mistral-7B-v0.1 (sliding window), hand-copied
// under tests/models/hf/. Each loads with the right shape, its parameter count is within 1 % of the published
// one, unmodelled fields give one warning each (and no error), and the new inline keys round-trip.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "exec/runtime/train.hpp"
#include "models/scenario.hpp"
#include "sim/op_cost.hpp"

using namespace tp;
namespace fs = std::filesystem;

namespace {

const fs::path kHf = fs::path(TP_SOURCE_DIR) / "tests/models/hf";

std::string config_path(const std::string& model) { return (kHf / model / "config.json").string(); }

json scenario_json(json model, long long seq_len = 4096) {
  return {{"model", model},
          {"cluster", "dgx-h100"},
          {"training", {{"global_batch", 8}, {"seq_len", seq_len}, {"precision", "bf16"}}},
          {"plan", {{"dp", 1}, {"tp", 1}, {"pp", 1}, {"microbatch", 1}, {"schedule", "1f1b"}}}};
}

Scenario load_hf(const std::string& model, long long seq_len = 4096) {
  return scenario_from_json(scenario_json({{"hf_config", config_path(model)}}, seq_len), ".", "test");
}

bool has_warning(const Scenario& sc, const std::string& text) {
  for (const std::string& w : sc.warnings)
    if (w.find(text) != std::string::npos) return true;
  return false;
}

void expect_near_published(double ours, double published, const char* what) {
  EXPECT_NEAR(ours / published, 1.0, 0.01) << what << ": " << ours << " vs published " << published;
}

}  // namespace

TEST(HfConfig, MixtralIsMoe) {
  Scenario sc = load_hf("mixtral-8x7b");
  const Transformer& m = sc.model;
  EXPECT_EQ(m.layers, 32);
  EXPECT_EQ(m.hidden, 4096);
  EXPECT_EQ(m.heads, 32);
  EXPECT_EQ(m.kv_heads, 8);
  EXPECT_EQ(m.activation, Activation::swiglu);
  EXPECT_FALSE(m.tied_embeddings);
  EXPECT_EQ(m.moe.experts, 8);
  EXPECT_EQ(m.moe.top_k, 2);
  EXPECT_EQ(m.moe.every, 1);
  EXPECT_EQ(m.expert_ffn(), 14336);  // Mixtral's experts use intermediate_size
  EXPECT_EQ(m.moe.shared_ffn_hidden, 0);
  EXPECT_DOUBLE_EQ(m.moe.aux_loss_coeff, 0.02);  // router_aux_loss_coef
  EXPECT_EQ(m.moe_layers_in(0, m.layers), 32);
  expect_near_published(total_params(m), 46.7e9, "Mixtral-8x7B total");
  expect_near_published(active_params(m), 12.9e9, "Mixtral-8x7B active");
  EXPECT_TRUE(sc.warnings.empty());  // sliding_window null
}

TEST(HfConfig, QwenMoeWithSharedExpertAndQkvBias) {
  Scenario sc = load_hf("qwen1.5-moe-a2.7b");
  const Transformer& m = sc.model;
  EXPECT_EQ(m.layers, 24);
  EXPECT_EQ(m.hidden, 2048);
  EXPECT_EQ(m.moe.experts, 60);
  EXPECT_EQ(m.moe.top_k, 4);
  EXPECT_EQ(m.moe.every, 1);  // decoder_sparse_step 1
  EXPECT_EQ(m.expert_ffn(), 1408);
  EXPECT_EQ(m.ffn_hidden, 5632);
  EXPECT_EQ(m.moe.shared_ffn_hidden, 5632);
  EXPECT_TRUE(m.qkv_bias);  // qwen2_moe: q, k, v biases
  EXPECT_FALSE(m.proj_bias);
  expect_near_published(total_params(m), 14.3e9, "Qwen1.5-MoE-A2.7B total");
  expect_near_published(active_params(m), 2.7e9, "Qwen1.5-MoE-A2.7B active");
  EXPECT_TRUE(sc.warnings.empty()) << sc.warnings.front();  // use_sliding_window false
}

TEST(HfConfig, DeepSeekLiteWarnsForMlaAndLeadingDenseLayer) {
  Scenario sc = load_hf("deepseek-v2-lite");
  const Transformer& m = sc.model;
  EXPECT_EQ(m.layers, 27);
  EXPECT_EQ(m.moe.experts, 64);
  EXPECT_EQ(m.moe.top_k, 6);
  EXPECT_EQ(m.expert_ffn(), 1408);
  EXPECT_EQ(m.ffn_hidden, 10944);
  EXPECT_EQ(m.moe.shared_ffn_hidden, 2 * 1408);  // n_shared_experts x moe_intermediate_size
  EXPECT_EQ(m.moe.every, 1);
  EXPECT_EQ(sc.warnings.size(), 2u);
  EXPECT_TRUE(has_warning(sc, "config.json: first_k_dense_replace (1) is not modelled"));
  EXPECT_TRUE(has_warning(sc, "config.json: kv_lora_rank (512) is not modelled"));
  EXPECT_FALSE(has_warning(sc, "q_lora_rank"));  // null
  // Active < total, and the shared experts are counted in both.
  Transformer no_shared = m;
  no_shared.moe.shared_ffn_hidden = 0;
  EXPECT_LT(active_params(m), total_params(m));
  EXPECT_DOUBLE_EQ(total_params(m) - total_params(no_shared), active_params(m) - active_params(no_shared));
  EXPECT_DOUBLE_EQ(total_params(m) - total_params(no_shared), 27.0 * 3 * 2048 * 2816);
}

TEST(HfConfig, Qwen2HasQkvBias) {
  Scenario sc = load_hf("qwen2-7b");
  const Transformer& m = sc.model;
  EXPECT_EQ(m.layers, 28);
  EXPECT_EQ(m.hidden, 3584);
  EXPECT_EQ(m.kv_heads, 4);
  EXPECT_EQ(m.ffn_hidden, 18944);
  EXPECT_TRUE(m.qkv_bias);
  EXPECT_FALSE(m.mlp_bias);
  EXPECT_EQ(m.moe.experts, 0);
  expect_near_published(total_params(m), 7.6e9, "Qwen2-7B");
  Transformer no_bias = m;
  no_bias.qkv_bias = false;
  EXPECT_DOUBLE_EQ(total_params(m) - total_params(no_bias), 28.0 * (3584 + 2 * 4 * 128));
  EXPECT_TRUE(sc.warnings.empty());
}

TEST(HfConfig, Gpt2Names) {
  Scenario sc = load_hf("gpt2", 1024);
  const Transformer& m = sc.model;
  EXPECT_EQ(m.layers, 12);
  EXPECT_EQ(m.hidden, 768);
  EXPECT_EQ(m.heads, 12);
  EXPECT_EQ(m.kv_heads, 12);
  EXPECT_EQ(m.ffn_hidden, 4 * 768);  // n_inner absent
  EXPECT_EQ(m.vocab, 50257);
  EXPECT_EQ(m.seq_len, 1024);        // n_positions
  EXPECT_EQ(m.activation, Activation::gelu);  // gelu_new
  EXPECT_TRUE(m.tied_embeddings);
  EXPECT_TRUE(m.dropout);
  expect_near_published(total_params(m), 124e6, "GPT-2");
  EXPECT_EQ(active_params(m), total_params(m));
}

TEST(HfConfig, ExplicitHeadDim) {
  Scenario sc = load_hf("mistral-nemo-12b");
  const Transformer& m = sc.model;
  EXPECT_EQ(m.hidden, 5120);
  EXPECT_EQ(m.heads, 32);
  EXPECT_EQ(m.head_dim(), 128);
  EXPECT_EQ(m.q_width(), 4096);  // != hidden
  expect_near_published(total_params(m), 12.2e9, "Mistral-Nemo-12B");
  // With the default head_dim (160) the model would be larger: the field is used, not ignored.
  Transformer dflt = m;
  dflt.attn_head_dim = 0;
  EXPECT_GT(total_params(dflt), total_params(m) * 1.02);
}

TEST(HfConfig, SlidingWindowWarnsOnlyWhenShorterThanTheSequence) {
  Scenario sc = load_hf("mistral-7b-v0.1", 8192);
  expect_near_published(total_params(sc.model), 7.24e9, "Mistral-7B");
  ASSERT_EQ(sc.warnings.size(), 1u);
  EXPECT_EQ(sc.warnings[0], config_path("mistral-7b-v0.1") +
                                ": sliding_window (4096) is not modelled: attention is costed over the full "
                                "8192-token sequence");
  EXPECT_TRUE(load_hf("mistral-7b-v0.1", 4096).warnings.empty());
}

TEST(HfConfig, WarningGoesToStderrAndTheRunSucceeds) {
  fs::path dir = fs::temp_directory_path() / ("tp_hf_warn_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  fs::path file = dir / "s.json";
  {
    FILE* f = std::fopen(file.c_str(), "w");
    std::fputs(scenario_json({{"hf_config", config_path("mistral-7b-v0.1")}}, 8192).dump().c_str(), f);
    std::fclose(f);
  }
  std::string cmd = std::string(TP_BINARY) + " simulate " + file.string() + " --json " + (dir / "r.json").string() +
                    " 2>&1 >/dev/null";
  std::string err;
  FILE* p = popen(cmd.c_str(), "r");
  ASSERT_TRUE(p);
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) err.append(buf, n);
  int status = pclose(p);
  // The warning does not stop the run: exit 0, or 3 because this plan does not fit (its result is written anyway).
  EXPECT_TRUE(WIFEXITED(status) && (WEXITSTATUS(status) == 0 || WEXITSTATUS(status) == 3)) << err;
  EXPECT_NE(err.find("warning: " + config_path("mistral-7b-v0.1") + ": sliding_window (4096) is not modelled"),
            std::string::npos) << err;
  FILE* rf = std::fopen((dir / "r.json").c_str(), "r");
  ASSERT_TRUE(rf);
  std::string text;
  while ((n = fread(buf, 1, sizeof buf, rf)) > 0) text.append(buf, n);
  std::fclose(rf);
  json r = json::parse(text);
  Scenario sc = load_hf("mistral-7b-v0.1", 8192);
  EXPECT_DOUBLE_EQ(r["params_total"].get<double>(), total_params(sc.model));
  EXPECT_DOUBLE_EQ(r["params_active"].get<double>(), total_params(sc.model));
  fs::remove_all(dir);
}

TEST(HfConfig, InlineNewFieldsRoundTrip) {
  json model = {{"layers", 4}, {"hidden", 512}, {"heads", 8}, {"kv_heads", 2}, {"head_dim", 96}, {"vocab", 1000},
                {"seq_len", 1024}, {"activation", "swiglu"}, {"qkv_bias", true}, {"proj_bias", true},
                {"mlp_bias", true}, {"sliding_window", 256},
                {"moe", {{"experts", 4}, {"top_k", 2}, {"ffn_hidden", 384}, {"shared_ffn_hidden", 768}}}};
  Scenario sc = scenario_from_json(scenario_json(model, 1024), ".", "test");
  const Transformer& m = sc.model;
  EXPECT_EQ(m.head_dim(), 96);
  EXPECT_EQ(m.q_width(), 768);
  EXPECT_TRUE(m.qkv_bias && m.proj_bias && m.mlp_bias);
  EXPECT_EQ(m.expert_ffn(), 384);
  EXPECT_EQ(m.moe.shared_ffn_hidden, 768);
  ASSERT_EQ(sc.warnings.size(), 1u);
  EXPECT_EQ(sc.warnings[0], "$.model: sliding_window (256) is not modelled: attention is costed over the full "
                            "1024-token sequence");
  json out = scenario_to_json(sc);
  for (const char* k : {"head_dim", "qkv_bias", "proj_bias", "mlp_bias", "sliding_window"})
    EXPECT_EQ(out["model"][k], model[k]) << k;
  EXPECT_EQ(out["model"]["moe"]["ffn_hidden"], 384);
  EXPECT_EQ(out["model"]["moe"]["shared_ffn_hidden"], 768);
  Scenario back = scenario_from_json(scenario_json(out["model"], 1024), ".", "round trip");
  EXPECT_EQ(transformer_to_json(back.model), out["model"]);
  EXPECT_DOUBLE_EQ(total_params(back.model), total_params(m));
  // A head_dim equal to hidden / heads is the default and is not written.
  model["head_dim"] = 64;
  EXPECT_FALSE(scenario_to_json(scenario_from_json(scenario_json(model, 1024), ".", "t"))["model"].contains("head_dim"));
}

TEST(HfConfig, HfModelRoundTripsAsInline) {
  for (const char* name : {"mixtral-8x7b", "qwen1.5-moe-a2.7b", "qwen2-7b", "gpt2", "mistral-nemo-12b"}) {
    Scenario sc = load_hf(name, 1024);
    json out = transformer_to_json(sc.model);
    Scenario back = scenario_from_json(scenario_json(out, 1024), ".", "round trip");
    EXPECT_EQ(transformer_to_json(back.model), out) << name;
    EXPECT_DOUBLE_EQ(total_params(back.model), total_params(sc.model)) << name;
    EXPECT_DOUBLE_EQ(active_params(back.model), active_params(sc.model)) << name;
  }
}

TEST(HfConfig, ExecutorRunsHeadDimAndSwigluBiases) {
  // `trainplan run` trains an explicit head_dim (Mistral-NeMo) and q/k/v biases (Qwen2): exec/model/gpt.hpp GptShape;
  // their gradients are checked in tests/exec/test_gpt_gradcheck.cpp, the parallel plans in test_run_shapes.cpp.
  for (const char* name : {"mistral-nemo-12b", "qwen2-7b", "gpt2"}) EXPECT_NO_THROW(exec::check_runnable(load_hf(name))) << name;
}

// A Llama-family config whose hidden_act is missing or null is its family's silu (swiglu), as transformers'
// config classes default it; GPT-2 without activation_function stays gelu (issue 44, item 9: it was gelu).
TEST(HfConfig, MissingActivationTakesTheFamilyDefault) {
  json mistral = json::parse(std::ifstream(config_path("mistral-7b-v0.1")));
  const fs::path dir = fs::temp_directory_path() / ("tp_hf_act_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  for (bool null_value : {false, true}) {
    json c = mistral;
    if (null_value) c["hidden_act"] = nullptr;
    else c.erase("hidden_act");
    std::ofstream((dir / "config.json").string()) << c.dump();
    Scenario sc = scenario_from_json(scenario_json({{"hf_config", (dir / "config.json").string()}}), ".", "test");
    EXPECT_EQ(sc.model.activation, Activation::swiglu) << (null_value ? "null" : "missing");
  }
  json gpt2 = json::parse(std::ifstream(config_path("gpt2")));
  gpt2.erase("activation_function");
  std::ofstream((dir / "config.json").string()) << gpt2.dump();
  Scenario g = scenario_from_json(scenario_json({{"hf_config", (dir / "config.json").string()}}, 1024), ".", "test");
  EXPECT_EQ(g.model.activation, Activation::gelu);
  fs::remove_all(dir);
}
