// Bad-input handling: every file of tests/bad_inputs/ run through the CLI must exit 2 with one message per problem
// (each expected substring of tests/bad_inputs/expected.json present), no "internal error" and no output files;
// in-process checks of scenario_from_text on a few cases; and the good paths next to them (inline cluster and GPU,
// hf_config by absolute and relative path, case-insensitive catalog names, every bundled scenario).
#include <gtest/gtest.h>

#include "temp_dir.hpp"
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "models/catalog.hpp"
#include "models/scenario.hpp"

using namespace tp;
namespace fs = std::filesystem;

namespace {

const fs::path kSource = TP_SOURCE_DIR;
const fs::path kCorpus = kSource / "tests/bad_inputs";

std::string read_text(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void write_text(const fs::path& p, const std::string& text) {
  std::ofstream out(p, std::ios::binary);
  out << text;
}

struct TempDir : tp::testutil::TempDir {
  TempDir() : tp::testutil::TempDir("tp_bad_inputs") {}
};

std::string quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

struct CliRun {
  int exit_code = -1;
  std::string err;  // stderr only (stdout is discarded)
};

CliRun run_cli(const std::string& args) {
  std::string cmd = quote(TP_BINARY) + " " + args + " 2>&1 >/dev/null";
  CliRun r;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) r.err.append(buf, n);
  int status = pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
  return r;
}

// The corpus cases: every *.json directly under tests/bad_inputs/ except expected.json (support/ holds helpers).
std::vector<std::string> corpus_files() {
  std::vector<std::string> files;
  std::error_code ec;
  for (auto& e : fs::directory_iterator(kCorpus, ec))
    if (e.is_regular_file() && e.path().extension() == ".json" && e.path().filename() != "expected.json")
      files.push_back(e.path().filename().string());
  std::sort(files.begin(), files.end());
  return files;
}

const json& expectations() {
  static const json j = json::parse(read_text(kCorpus / "expected.json"));
  return j;
}

// Runs scenario_from_text and returns the messages of the InputError it must throw.
std::vector<std::string> input_errors(const std::string& text) {
  try {
    scenario_from_text(text, "t");
  } catch (const InputError& e) {
    return e.messages;
  }
  ADD_FAILURE() << "no InputError for:\n" << text.substr(0, 300);
  return {};
}

bool any_contains(const std::vector<std::string>& msgs, const std::string& s) {
  for (auto& m : msgs)
    if (m.find(s) != std::string::npos) return true;
  return false;
}

}  // namespace

// ---- the corpus through the CLI ----

class BadInputFile : public ::testing::TestWithParam<std::string> {};

TEST_P(BadInputFile, ExitsTwoWithPathMessagesAndNoOutput) {
  const std::string name = GetParam();
  const json& exp = expectations();
  ASSERT_TRUE(exp.contains(name)) << name << " has no entry in tests/bad_inputs/expected.json";
  TempDir tmp;
  fs::path out_json = tmp.path / "result.json", out_trace = tmp.path / "trace.json";
  CliRun r = run_cli("simulate " + quote((kCorpus / name).string()) + " --json " + quote(out_json.string()) + " --trace " +
                  quote(out_trace.string()));
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_EQ(r.err.find("internal error"), std::string::npos) << r.err;
  for (const auto& s : exp[name]) EXPECT_NE(r.err.find(s.get<std::string>()), std::string::npos) << "missing \"" << s.get<std::string>() << "\" in:\n" << r.err;
  std::istringstream lines(r.err);
  for (std::string line; std::getline(lines, line);)
    if (!line.empty()) {
      EXPECT_EQ(line.rfind("error: ", 0), 0u) << "unexpected stderr line: " << line;
    }
  EXPECT_FALSE(fs::exists(out_json)) << "the --json file was written for a bad input";
  EXPECT_FALSE(fs::exists(out_trace)) << "the --trace file was written for a bad input";
}

INSTANTIATE_TEST_SUITE_P(Corpus, BadInputFile, ::testing::ValuesIn(corpus_files()),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           std::string n = info.param.substr(0, info.param.size() - 5);  // drop ".json"
                           for (char& c : n)
                             if (!std::isalnum((unsigned char)c)) c = '_';
                           return n;
                         });

TEST(BadInputs, CorpusAndExpectationsMatch) {
  auto files = corpus_files();
  EXPECT_GE(files.size(), 30u);
  for (auto it = expectations().begin(); it != expectations().end(); ++it) {
    if (it.key() == "about") continue;
    EXPECT_TRUE(std::find(files.begin(), files.end(), it.key()) != files.end()) << "expected.json names a missing file " << it.key();
    EXPECT_TRUE(it.value().is_array() && !it.value().empty()) << it.key();
  }
}

TEST(BadInputs, ScenarioPathThatIsADirectory) {
  CliRun r = run_cli("simulate " + quote(kCorpus.string()));
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("is a directory; expected a JSON file"), std::string::npos) << r.err;
}

TEST(BadInputs, ScenarioFileThatDoesNotExist) {
  CliRun r = run_cli("simulate " + quote((kCorpus / "no_such_scenario.json").string()));
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("cannot read file"), std::string::npos) << r.err;
}

// ---- in process ----

TEST(BadInputs, InProcessSingleProblems) {
  struct Case { const char* file; const char* path; };
  for (Case c : {Case{"tp_not_dividing_heads.json", "$.plan.tp"}, Case{"pp_not_dividing_layers.json", "$.plan.pp"},
                 Case{"gpus_exceed_cluster.json", "$.plan"}, Case{"batch_not_divisible.json", "$.training.global_batch"},
                 Case{"unknown_model_name.json", "$.model"}, Case{"zero_4.json", "$.plan.zero"},
                 Case{"bf16_on_v100.json", "$.training.precision"}, Case{"malformed_json.json", "malformed JSON"},
                 Case{"delink_pseudo_batch.json", "$.plan.delink.global_batch"},
                 Case{"offload_chunked_dp_zero1.json", "$.plan.zero"}}) {
    SCOPED_TRACE(c.file);
    auto msgs = input_errors(read_text(kCorpus / c.file));
    ASSERT_FALSE(msgs.empty());
    EXPECT_TRUE(any_contains(msgs, c.path));
    for (auto& m : msgs) EXPECT_EQ(m.rfind("t: ", 0), 0u) << "message does not name its source: " << m;
  }
}

TEST(BadInputs, InProcessMultipleProblemsAllReported) {
  auto msgs = input_errors(read_text(kCorpus / "multiple_problems.json"));
  EXPECT_GE(msgs.size(), 8u);  // cluster, global_batch, precision, tp, pp, zero, plan.sched, extra
  for (const char* p : {"$.cluster", "$.training.global_batch", "$.training.precision", "$.plan.tp", "$.plan.pp",
                        "$.plan.zero", "$.plan.sched", "$.extra"})
    EXPECT_TRUE(any_contains(msgs, p)) << p;
}

TEST(BadInputs, InProcessOddTexts) {
  // Deep nesting must neither overflow the stack nor take memory in parsing: past 64 levels the parse stops
  // (issue 44), naming where; shallower values are rendered into a message, cut.
  const int depth = 200000;
  std::string deep = "{\"plan\": {\"tp\": " + std::string(depth, '[') + std::string(depth, ']') + "}}";
  EXPECT_TRUE(any_contains(input_errors(deep), "nested more than 64 deep (at $.plan.tp"));
  EXPECT_TRUE(any_contains(input_errors(std::string(depth, '[') + std::string(depth, ']')), "nested more than 64 deep"));
  std::string shallow = "{\"plan\": {\"tp\": " + std::string(60, '[') + std::string(60, ']') + "}}";
  EXPECT_TRUE(any_contains(input_errors(shallow), "$.plan.tp: expected an integer"));
  // A long string value is cut in the message.
  auto msgs = input_errors("{\"model\": \"" + std::string(100000, 'x') + "\"}");
  ASSERT_TRUE(any_contains(msgs, "$.model"));
  for (auto& m : msgs) EXPECT_LT(m.size(), 2000u);
  // Invalid UTF-8, NUL bytes, whitespace only, a bare literal.
  EXPECT_TRUE(any_contains(input_errors("{\"name\": \"\xff\xfe\"}"), "malformed JSON"));
  EXPECT_TRUE(any_contains(input_errors(std::string("{\"name\"\0: 1}", 12)), "malformed JSON"));
  EXPECT_TRUE(any_contains(input_errors(" \n\t "), "empty input"));
  EXPECT_TRUE(any_contains(input_errors("null"), "$: the scenario must be a JSON object"));
  EXPECT_TRUE(any_contains(input_errors("{\"training\": {\"global_batch\": 1, \"seq_len\": -1e999}}"), "malformed JSON"));
}

// ---- good inputs next to the bad ones ----

static json inline_cluster_json() {
  json gpu = {{"name", "my-gpu"},
              {"matrix_flops_per_s", {{"fp32", 6.0e13}, {"fp16", 9.0e14}, {"bf16", 9.0e14}}},
              {"vector_flops_per_s", {{"fp32", 6.0e13}, {"fp16", 1.2e14}, {"bf16", 1.2e14}}},
              {"hbm_bytes", 8.0e10},
              {"hbm_bandwidth_bytes_per_s", 3.0e12},
              {"matrix_efficiency", {{1e6, 0.01}, {1e9, 0.3}, {1e12, 0.7}}},
              {"memory_efficiency", {{1e4, 0.02}, {1e7, 0.5}, {1e9, 0.85}}},
              {"kernel_overhead_s", 4e-6},
              {"power_w", 700}};
  return {{"name", "my-cluster"},
          {"gpu", gpu},
          {"nodes", 2},
          {"gpus_per_node", 4},
          {"intra_node", {{"kind", "nvlink"}, {"bandwidth_bytes_per_s", 2.0e11}, {"latency_s", 3e-6},
                          {"efficiency", {{1e4, 0.05}, {1e8, 0.8}}}}},
          {"inter_node", {{"nics_per_node", 2}, {"nic_bandwidth_bits_per_s", 2.0e11}, {"topology", "rail_optimized"},
                          {"oversubscription", 2.0}, {"nodes_per_leaf", 2}, {"latency_s", 5e-6},
                          {"efficiency", {{1e4, 0.02}, {1e8, 0.7}}}}},
          {"host", {{"memory_bytes", 1.0e12}, {"pcie_bandwidth_bytes_per_s", 2.5e10}, {"cpu_cores", 64}}},
          {"price_per_gpu_hour_usd", 2.5},
          {"power_per_gpu_w", 900}};
}

TEST(GoodInputs, InlineClusterAndInlineGpu) {
  json s = {{"model", "gpt3-125m"},
            {"cluster", inline_cluster_json()},
            {"training", {{"global_batch", 16}, {"seq_len", 1024}, {"precision", "bf16"}}},
            {"plan", {{"dp", 2}, {"tp", 2}, {"pp", 2}, {"microbatch", 2}}}};
  Scenario sc = scenario_from_text(s.dump());
  EXPECT_EQ(sc.cluster.name, "my-cluster");
  EXPECT_EQ(sc.cluster.gpu.name, "my-gpu");
  EXPECT_EQ(sc.cluster.total_gpus(), 8);
  EXPECT_EQ(sc.cluster.intra.kind, Fabric::nvlink);
  EXPECT_EQ(sc.cluster.inter.topology, NetTopology::rail_optimized);
  EXPECT_DOUBLE_EQ(sc.cluster.inter.nic_bandwidth_bytes_per_s, 2.0e11 / 8);
  EXPECT_DOUBLE_EQ(sc.cluster.gpu.matrix_flops_per_s[(int)Precision::bf16], 9.0e14);
  EXPECT_EQ(sc.cluster.gpu.matrix_efficiency.points.size(), 3u);
  EXPECT_EQ(sc.cluster.host.cpu_cores, 64);
  EXPECT_DOUBLE_EQ(sc.cluster.power_per_gpu_w, 900);
  EXPECT_EQ(sc.plan.num_microbatches, 4);
  EXPECT_EQ(sc.training.precision, Precision::bf16);
  // The same cluster with its GPU named from the catalog, in another case.
  s["cluster"]["gpu"] = "h100-sxm-80gb";
  sc = scenario_from_text(s.dump());
  EXPECT_EQ(sc.cluster.gpu.hbm_bytes, 85899345920.0);
}

static void expect_tiny_llama(const Transformer& m) {
  EXPECT_EQ(m.hidden, 256);
  EXPECT_EQ(m.layers, 4);
  EXPECT_EQ(m.heads, 8);
  EXPECT_EQ(m.kv_heads, 4);
  EXPECT_EQ(m.ffn_hidden, 688);
  EXPECT_EQ(m.vocab, 1000);
  EXPECT_EQ(m.seq_len, 512);
  EXPECT_EQ(m.activation, Activation::swiglu);
  EXPECT_FALSE(m.tied_embeddings);
}

TEST(GoodInputs, HfConfigAbsoluteAndRelativePaths) {
  const fs::path config = kSource / "tests/models/hf_llama_tiny_config.json";
  ASSERT_TRUE(fs::exists(config));
  TempDir tmp;
  json s = {{"cluster", "dgx-h100"},
            {"training", {{"global_batch", 16}, {"seq_len", 512}, {"precision", "bf16"}}},
            {"plan", {{"dp", 2}, {"tp", 2}, {"pp", 2}, {"microbatch", 1}}}};
  s["model"] = {{"hf_config", fs::absolute(config).string()}};
  write_text(tmp.path / "absolute.json", s.dump(2));
  expect_tiny_llama(load_scenario((tmp.path / "absolute.json").string()).model);

  fs::create_directories(tmp.path / "tiny");
  fs::copy_file(config, tmp.path / "tiny/config.json");
  s["model"] = {{"hf_config", "tiny/config.json"}};
  write_text(tmp.path / "relative.json", s.dump(2));
  Scenario sc = load_scenario((tmp.path / "relative.json").string());
  expect_tiny_llama(sc.model);
  EXPECT_EQ(sc.model.name, "tiny");  // named after the config's folder
  // The relative path is resolved against the scenario's folder, not the working directory.
  auto msgs = input_errors(s.dump());
  EXPECT_TRUE(any_contains(msgs, "$.model.hf_config")) << "resolved against the cwd?";
}

TEST(GoodInputs, CatalogNamesAreCaseInsensitive) {
  json s = {{"model", "GPT3-175B"},
            {"cluster", "SELENE"},
            {"training", {{"global_batch", 1536}, {"precision", "fp16"}}},
            {"plan", {{"dp", 16}, {"tp", 8}, {"pp", 12}, {"microbatch", 1}}}};
  Scenario sc = scenario_from_text(s.dump());
  EXPECT_EQ(sc.model.layers, 96);
  EXPECT_EQ(sc.model.hidden, 12288);
  EXPECT_EQ(sc.cluster.total_gpus(), 560 * 8);
  EXPECT_EQ(sc.training.seq_len, 2048);  // the model's default
  EXPECT_NE(catalog_find("gpus", "a100-sxm4-80gb"), nullptr);
  EXPECT_EQ(catalog_find("gpus", "a100"), nullptr);
}

TEST(GoodInputs, EveryBundledScenarioLoads) {
  int n = 0;
  for (auto& e : fs::recursive_directory_iterator(kSource / "scenarios")) {
    if (!e.is_regular_file() || e.path().extension() != ".json") continue;
    if (fs::relative(e.path(), kSource / "scenarios").begin()->string() == "published") continue;
    json j = json::parse(read_text(e.path()), nullptr, false);
    // Hugging Face configs referenced by a scenario (hf_config) live next to them; they are not scenarios.
    if (j.is_object() && (j.contains("architectures") || j.contains("model_type"))) continue;
    // Report specs (trainplan report) list runs of scenarios; they are not scenarios themselves.
    if (j.is_object() && j.contains("runs")) continue;
    SCOPED_TRACE(e.path().string());
    try {
      Scenario sc = load_scenario(e.path().string(), true);  // a plan, or a search block for trainplan plan
      if (!sc.search) {
        EXPECT_GT(sc.plan.num_microbatches, 0);
      }
      ++n;
    } catch (const InputError& err) {
      ADD_FAILURE() << err.what();
    }
  }
  EXPECT_GE(n, 1);
}
