// test_run_shapes: `trainplan run` of model shapes beyond GPT-2's: a SwiGLU model with the Qwen2 / Llama bias
// flags (qkv_bias, proj_bias, mlp_bias), grouped-query attention and a head_dim other than hidden / heads. Each
// parallel plan reproduces the single-rank float64 losses and gradient norms to 1e-9 (the single-rank model's
// backward is itself checked against finite differences in test_gpt_gradcheck.cpp), also on the emu backend,
// and the result differs from the same model without the biases (the flags reach the executor).
#include <gtest/gtest.h>

#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "exec/io/data.hpp"
#include "exec/oracle_run.hpp"

using namespace oracle;

namespace {

// hidden 64, 4 query heads of width 24 (query width 96 != 64), 2 kv heads; SwiGLU with q, k, v biases.
json qwen_like(bool all_biases) {
  json m = {{"activation", "swiglu"}, {"heads", 4}, {"kv_heads", 2}, {"head_dim", 24}, {"ffn_hidden", 96},
            {"qkv_bias", true}};
  if (all_biases) { m["proj_bias"] = true; m["mlp_bias"] = true; }
  return m;
}

}  // namespace

TEST(RunShapes, BiasedSwigluWithHeadDimMatchesSingleRankFloat64) {
  const int steps = 3;
  for (bool all : {false, true}) {
    const json model = qwen_like(all);
    const std::string tag = all ? "allb_" : "qkvb_";
    json ref = run(scenario(tag + "ref", json::object(), 8, 0, model), steps, true);
    ASSERT_FALSE(ref.is_null()) << tag;
    EXPECT_LT(ref["losses"].back().get<double>(), ref["losses"].front().get<double>()) << tag;
    // The same model without the biases trains differently (biases start at 0, so only after a step).
    json plain_model = model;
    plain_model.erase("qkv_bias");
    plain_model.erase("proj_bias");
    plain_model.erase("mlp_bias");
    json plain = run(scenario(tag + "plain", json::object(), 8, 0, plain_model), steps, true);
    ASSERT_FALSE(plain.is_null()) << tag;
    EXPECT_NE(plain["losses"].back(), ref["losses"].back()) << tag;
    json emu = run(scenario(tag + "emu", json::object(), 8, 0, model), steps, true, nullptr, "--backend emu");
    ASSERT_FALSE(emu.is_null()) << tag;
    expect_close(emu, ref, "losses", 1e-9, tag + "emu");
    if (!have_mpi()) continue;
    struct Case { std::string name; json plan; };
    std::vector<Case> cases = {
        {"tp2_sp", {{"tp", 2}, {"sequence_parallel", true}}},
        {"dp2_zero2_pp2", {{"dp", 2}, {"zero", 2}, {"pp", 2}}},
        {"tp2d_q2", {{"tp", 4}, {"tp_mode", "2d"}}},
        {"cp2_tp2", {{"cp", 2}, {"tp", 2}, {"attention", "flash"}}},
    };
    for (const Case& c : cases) {
      json got = run(scenario(tag + c.name, c.plan, 8, 0, model), steps, true);
      ASSERT_FALSE(got.is_null()) << tag << c.name;
      expect_close(got, ref, "losses", 1e-9, tag + c.name);
      expect_close(got, ref, "grad_norm", 1e-9, tag + c.name);
    }
  }
}

// A vocabulary that tp does not divide (GPT-2's 50257 with tp 2 is the common case): the rows split as evenly as
// they go (the first V % t ranks one row more), no padding classes, so every plan is the single-rank model:
// vocab 255 and 257 with tp 2, tp 4, tp 2 with SP and pp 2, on the emu backend, and 2D over a 2 x 2 grid (its
// vocabulary blocks padded to the longest, exec/model/gpt2d.hpp), to 1e-9; vocab 6 and 7 over
// tp 4 (shards of 2, 2, 1, 1 and 2, 2, 2, 1 rows, where ceil(V / t) rows per rank would leave the last rank
// none or one) on a token file of their own. Fewer rows than tp ranks exits 2.
TEST(RunShapes, VocabularyThatTpDoesNotDivideMatchesSingleRank) {
  if (!have_mpi()) GTEST_SKIP() << "built without MPI";
  const int steps = 3;
  for (long long V : {255LL, 257LL}) {
    const json model = {{"vocab", V}};
    const std::string tag = std::string("v") + std::to_string(V) + "_";
    json ref = run(scenario(tag + "ref", json::object(), 8, 0, model), steps, true);
    ASSERT_FALSE(ref.is_null()) << tag;
    struct Case { const char* name; json plan; const char* extra; };
    std::vector<Case> cases = {
        {"tp2", {{"tp", 2}}, ""},
        {"tp4", {{"tp", 4}}, ""},
        {"tp2_sp_pp2", {{"tp", 2}, {"sequence_parallel", true}, {"pp", 2}}, ""},
        {"tp2_emu", {{"tp", 2}}, "--backend emu"},
        {"tp4_2d", {{"tp", 4}, {"tp_mode", "2d"}}, ""},  // Optimus: blocks of 128 and 127 (129 and 128) rows
    };
    for (const Case& c : cases) {
      json got = run(scenario(tag + c.name, c.plan, 8, 0, model), steps, true, nullptr, c.extra);
      ASSERT_FALSE(got.is_null()) << tag << c.name;
      expect_close(got, ref, "losses", 1e-9, tag + c.name);
      expect_close(got, ref, "grad_norm", 1e-9, tag + c.name);
    }
  }
  // Tokens in [0, 7): a deterministic stream with some structure to learn.
  const std::string data = tmpdir() + "/tokens_mod7.bin";
  std::vector<uint16_t> toks(4096);
  for (size_t i = 0; i < toks.size(); ++i) toks[i] = (uint16_t)((i * i + i / 3) % 7);
  for (long long V : {6LL, 7LL}) {
    std::vector<uint16_t> t = toks;
    for (uint16_t& x : t) x = (uint16_t)(x % V);
    const std::string file = data + std::to_string(V);
    tp::exec::write_tokens(file, t);
    const json model = {{"vocab", V}, {"heads", 4}};
    const std::string tag = std::string("v") + std::to_string(V) + "_";
    json ref = run(scenario(tag + "ref", json::object(), 8, 0, model), steps, true, nullptr, "--data " + file);
    json got = run(scenario(tag + "tp4", {{"tp", 4}}, 8, 0, model), steps, true, nullptr, "--data " + file);
    ASSERT_FALSE(ref.is_null()) << tag;
    ASSERT_FALSE(got.is_null()) << tag;
    expect_close(got, ref, "losses", 1e-9, tag + "tp4");
    expect_close(got, ref, "grad_norm", 1e-9, tag + "tp4");
  }
  int code = 0;  // vocab 3 over tp 4: a rank without rows
  const std::string f3 = scenario("v3_tp4", {{"tp", 4}}, 8, 0, json{{"vocab", 3}, {"heads", 4}});
  json none = run(f3, 1, true, &code);
  EXPECT_TRUE(none.is_null());
  EXPECT_EQ(code, 2);
  const std::string text = log_text(f3);
  EXPECT_NE(text.find("$.plan.tp: 4 vocabulary shards of a vocabulary of 3 rows would leave a rank without rows"),
            std::string::npos) << text;
  // 2D: the vocabulary is split over the grid side q (tp 4: q = 2); a vocabulary of 1 row leaves a block empty.
  const std::string f1 = scenario("v1_tp4_2d", {{"tp", 4}, {"tp_mode", "2d"}}, 8, 0, json{{"vocab", 1}, {"heads", 4}});
  json none2d = run(f1, 1, true, &code);
  EXPECT_TRUE(none2d.is_null());
  EXPECT_EQ(code, 2);
  const std::string text2d = log_text(f1);
  EXPECT_NE(text2d.find("$.plan.tp: 2 vocabulary shards of a vocabulary of 1 rows would leave a rank without rows"),
            std::string::npos) << text2d;
}
