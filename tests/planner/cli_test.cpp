// `trainplan plan` end to end: --json and --csv (their keys; the best plan pasted into a scenario simulates to
// the same step time), exit 3 when no plan fits, exit 2 for simulate on a search scenario, for plan on a
// scenario without one, and for every search case of the bad-input corpus (tests/bad_inputs/search_*.json,
// expectations in tests/planner/bad_search_expected.json) with the JSON path in the message and no output file.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>

#include "planner_test_util.hpp"

using namespace tp;
using namespace tp::testutil;
namespace fs = std::filesystem;

namespace {

const fs::path kSource = TP_SOURCE_DIR;
const fs::path kCorpus = kSource / "tests/bad_inputs";

struct Tmp : TempDir {
  Tmp() : TempDir("tp_planner_cli") {}
};

std::string q(const fs::path& p) { return shell_quote(p.string()); }

json small_search_scenario() {
  return search_json("gpt3-350m", "selene", {{"max_gpus", 8}, {"top_k", 3}});
}

size_t count_lines(const std::string& s) { return (size_t)std::count(s.begin(), s.end(), '\n'); }

}  // namespace

TEST(PlanCli, JsonAndCsvAndTheBestPlanSimulatesToTheSameStepTime) {
  Tmp tmp;
  fs::path scen = tmp.path / "search.json", out = tmp.path / "plan.json", csv = tmp.path / "plan.csv";
  write_text(scen, small_search_scenario().dump(2));
  CliResult r = run_trainplan("plan " + q(scen) + " --json " + q(out) + " --csv " + q(csv) + " --threads 2");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("top plans (simulated)"), std::string::npos) << r.out;
  ASSERT_TRUE(fs::exists(out));
  ASSERT_TRUE(fs::exists(csv));
  json j = json::parse(read_text(out));
  for (const char* k : {"best", "top", "pareto", "by_gpus", "why", "search", "objective", "scenario"})
    EXPECT_TRUE(j.contains(k)) << k;
  ASSERT_TRUE(j["best"].is_object());
  ASSERT_TRUE(j["best"]["plan"].is_object());
  ASSERT_TRUE(j["best"]["result"]["step_time_s"].is_number());
  EXPECT_GT(j["best"]["global_batch"].get<long long>(), 0);
  EXPECT_TRUE(j["top"].is_array() && !j["top"].empty() && j["top"].size() <= 3);
  EXPECT_TRUE(j["pareto"].is_array() && !j["pareto"].empty());
  EXPECT_TRUE(j["by_gpus"].is_array() && !j["by_gpus"].empty());
  EXPECT_TRUE(j["why"].is_array());
  EXPECT_TRUE(j["search"]["configurations_evaluated"].is_number_integer());
  EXPECT_GT(j["search"]["configurations_evaluated"].get<long long>(), 0);
  EXPECT_TRUE(j["search"]["seconds"].is_number());
  EXPECT_EQ(j["search"]["threads"], 2);
  EXPECT_EQ(j["top"][0]["plan"], j["best"]["plan"]);
  EXPECT_DOUBLE_EQ(j["top"][0]["simulated"]["step_time_s"].get<double>(), j["best"]["result"]["step_time_s"].get<double>());
  EXPECT_FALSE(j.contains("note"));
  // CSV: a header and one row per top plan.
  std::string c = read_text(csv);
  EXPECT_EQ(c.rfind("rank,gpus,dp,tp,", 0), 0u) << c;
  EXPECT_EQ(count_lines(c), 1 + j["top"].size());

  // The best plan pasted into the scenario in place of the search block simulates to the same step time.
  json s = small_search_scenario();
  s.erase("search");
  s["plan"] = j["best"]["plan"];
  s["training"]["global_batch"] = j["best"]["global_batch"];
  fs::path plan_scen = tmp.path / "best.json", sim_out = tmp.path / "sim.json";
  write_text(plan_scen, s.dump(2));
  CliResult rs = run_trainplan("simulate " + q(plan_scen) + " --json " + q(sim_out) + " --quiet");
  ASSERT_EQ(rs.exit_code, 0) << rs.out << "\n" << s.dump(2);
  json sj = json::parse(read_text(sim_out));
  EXPECT_DOUBLE_EQ(sj["step_time_s"].get<double>(), j["best"]["result"]["step_time_s"].get<double>());
  EXPECT_DOUBLE_EQ(sj["memory"]["peak_bytes_per_gpu"].get<double>(),
                   j["best"]["result"]["memory"]["peak_bytes_per_gpu"].get<double>());
}

TEST(PlanCli, ExitsThreeWhenNoPlanFits) {
  Tmp tmp;
  fs::path scen = tmp.path / "big.json", out = tmp.path / "plan.json", csv = tmp.path / "plan.csv";
  write_text(scen, search_json("gpt3-175b", "frontera-rtx", {{"max_gpus", 8}, {"fix", {{"offload", "none"}}}}, 3e11, 0, "fp16")
                       .dump(2));
  CliResult r = run_trainplan("plan " + q(scen) + " --json " + q(out) + " --csv " + q(csv));
  EXPECT_EQ(r.exit_code, 3) << r.out;
  EXPECT_NE(r.out.find("no plan"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("internal error"), std::string::npos) << r.out;
  ASSERT_TRUE(fs::exists(out));
  json j = json::parse(read_text(out));
  EXPECT_TRUE(j["best"].is_null());
  EXPECT_TRUE(j["top"].empty());
  EXPECT_TRUE(j["note"].is_string());
  EXPECT_EQ(count_lines(read_text(csv)), 1u);  // the header only
}

TEST(PlanCli, SimulateOnASearchScenarioNamesThePlan) {
  Tmp tmp;
  fs::path scen = tmp.path / "search.json", out = tmp.path / "out.json";
  write_text(scen, small_search_scenario().dump(2));
  CliResult r = run_trainplan("simulate " + q(scen) + " --json " + q(out), /*stderr_only=*/true);
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find("$.plan"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("trainplan plan"), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(out));
}

TEST(PlanCli, PlanOnAScenarioWithoutSearchNamesTheSearchBlock) {
  Tmp tmp;
  fs::path out = tmp.path / "out.json";
  CliResult r = run_trainplan("plan " + q(kSource / "scenarios/examples/gpt2-124m-h200-single.json") + " --json " + q(out),
                              /*stderr_only=*/true);
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find("$.search"), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(out));
}

TEST(PlanCli, BadThreadsIsAUsageError) {
  Tmp tmp;
  fs::path scen = tmp.path / "search.json";
  write_text(scen, small_search_scenario().dump(2));
  CliResult r = run_trainplan("plan " + q(scen) + " --threads two", /*stderr_only=*/true);
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find("--threads"), std::string::npos) << r.out;
}

// ---- the search cases of the bad-input corpus through `trainplan plan` ----

namespace {

const json& plan_expectations() {
  static const json j = json::parse(read_text(kSource / "tests/planner/bad_search_expected.json"));
  return j;
}

std::vector<std::string> search_corpus_files() {
  std::vector<std::string> files;
  for (auto& e : fs::directory_iterator(kCorpus)) {
    std::string n = e.path().filename().string();
    if (e.is_regular_file() && n.rfind("search_", 0) == 0 && e.path().extension() == ".json") files.push_back(n);
  }
  std::sort(files.begin(), files.end());
  return files;
}

}  // namespace

class BadSearchFile : public ::testing::TestWithParam<std::string> {};

TEST_P(BadSearchFile, PlanExitsTwoNamingTheJsonPath) {
  const std::string name = GetParam();
  ASSERT_TRUE(plan_expectations().contains(name)) << name << " has no entry in tests/planner/bad_search_expected.json";
  Tmp tmp;
  fs::path out = tmp.path / "plan.json", csv = tmp.path / "plan.csv";
  CliResult r = run_trainplan("plan " + q(kCorpus / name) + " --json " + q(out) + " --csv " + q(csv), /*stderr_only=*/true);
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_EQ(r.out.find("internal error"), std::string::npos) << r.out;
  for (const auto& s : plan_expectations()[name])
    EXPECT_NE(r.out.find(s.get<std::string>()), std::string::npos) << "missing \"" << s.get<std::string>() << "\" in:\n" << r.out;
  std::istringstream lines(r.out);
  for (std::string line; std::getline(lines, line);)
    if (!line.empty()) {
      EXPECT_EQ(line.rfind("error: ", 0), 0u) << "unexpected stderr line: " << line;
    }
  EXPECT_FALSE(fs::exists(out)) << "--json written for a bad input";
  EXPECT_FALSE(fs::exists(csv)) << "--csv written for a bad input";
}

INSTANTIATE_TEST_SUITE_P(Corpus, BadSearchFile, ::testing::ValuesIn(search_corpus_files()),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           std::string n = info.param.substr(0, info.param.size() - 5);
                           for (char& c : n)
                             if (!std::isalnum((unsigned char)c)) c = '_';
                           return n;
                         });

TEST(BadSearchInputs, ExpectationsNameExistingFiles) {
  auto files = search_corpus_files();
  EXPECT_GE(files.size(), 9u);
  for (auto it = plan_expectations().begin(); it != plan_expectations().end(); ++it) {
    if (it.key() == "about") continue;
    EXPECT_TRUE(std::find(files.begin(), files.end(), it.key()) != files.end()) << "names a missing file " << it.key();
    EXPECT_TRUE(it.value().is_array() && !it.value().empty()) << it.key();
  }
}

// In process: the loader's messages for search blocks name the source and the JSON path.
TEST(BadSearchInputs, InProcessMessagesNameThePath) {
  auto errors = [](json search) {
    try {
      search_scenario(search_json("gpt3-350m", "selene", search));
    } catch (const InputError& e) {
      return e.messages;
    }
    ADD_FAILURE() << "no InputError for " << search.dump();
    return std::vector<std::string>{};
  };
  auto has = [](const std::vector<std::string>& m, const std::string& s) {
    return std::any_of(m.begin(), m.end(), [&](const std::string& x) { return x.find(s) != std::string::npos; });
  };
  EXPECT_TRUE(has(errors({{"objective", "fastest"}}), "$.search.objective"));
  EXPECT_TRUE(has(errors({{"min_gpus", 16}, {"max_gpus", 8}}), "$.search.min_gpus"));
  EXPECT_TRUE(has(errors({{"gpu_counts", json::array()}}), "$.search.gpu_counts"));
  EXPECT_TRUE(has(errors({{"gpu_counts", {8, 0}}}), "$.search.gpu_counts[1]"));
  EXPECT_TRUE(has(errors({{"fix", {{"zero", {1, 4}}}}}), "$.search.fix.zero[1]"));
  EXPECT_TRUE(has(errors({{"fix", {{"tp_mode", "3d"}}}}), "$.search.fix.tp_mode"));
  EXPECT_TRUE(has(errors({{"fix", {{"sequence_parallel", "yes"}}}}), "$.search.fix.sequence_parallel"));
  EXPECT_TRUE(has(errors({{"fix", 3}}), "$.search.fix"));
  EXPECT_TRUE(has(errors({{"compare", {{"ethernet_nics", 2}}}}), "$.search.compare.ethernet_nics"));
  EXPECT_TRUE(has(errors({{"top_k", 0}}), "$.search.top_k"));
  for (auto& m : errors({{"top_k", 0}, {"bogus", 1}})) EXPECT_EQ(m.rfind("test: ", 0), 0u) << m;
  // Without allow_search the block is refused and the plan asked for.
  try {
    scenario_from_json(search_json("gpt3-350m", "selene", {{"max_gpus", 8}}), ".", "test");
    ADD_FAILURE() << "a search block accepted without allow_search";
  } catch (const InputError& e) {
    EXPECT_TRUE(has(e.messages, "$.plan"));
  }
}

// Issue 14: the confirmation is bounded by search.confirm_budget_s (estimated simulation seconds, deterministic):
// past it, candidates stay unsimulated and the output says so (text note, JSON search.confirm_skipped and
// budget_note); the first candidate is always simulated, so the search still answers.
TEST(PlanCli, ConfirmationBudgetBoundsTheSimulationsAndSaysSo) {
  Tmp tmp;
  json s = small_search_scenario();
  s["search"]["confirm_budget_s"] = 1e-6;
  fs::path scen = tmp.path / "budget.json", out = tmp.path / "plan.json";
  write_text(scen, s.dump(2));
  CliResult r = run_trainplan("plan " + q(scen) + " --json " + q(out) + " --threads 2");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("note: the confirmation budget (search.confirm_budget_s = 1e-06"), std::string::npos) << r.out;
  json j = json::parse(read_text(out));
  EXPECT_EQ(j["search"]["simulated"], 1);
  EXPECT_GT(j["search"]["confirm_skipped"].get<long long>(), 0);
  EXPECT_NE(j["search"]["budget_note"].get<std::string>().find("not simulated"), std::string::npos);
  ASSERT_EQ(j["top"].size(), 1u);  // only the simulated plan is reported as confirmed
  // The default budget confirms the same search fully and says nothing about a budget.
  write_text(scen, small_search_scenario().dump(2));
  CliResult full = run_trainplan("plan " + q(scen) + " --json " + q(out) + " --threads 2");
  ASSERT_EQ(full.exit_code, 0) << full.out;
  json jf = json::parse(read_text(out));
  EXPECT_GT(jf["search"]["simulated"].get<long long>(), 1);
  EXPECT_FALSE(jf["search"].contains("confirm_skipped"));
  EXPECT_EQ(full.out.find("confirmation budget"), std::string::npos);
}

// Progress reaches stderr also when it is not a terminal (a log file, a batch job): a line at the start, one
// every few seconds, one at the end. --quiet silences it.
TEST(PlanCli, ProgressLinesWhenStderrIsNotATerminal) {
  Tmp tmp;
  fs::path scen = tmp.path / "search.json";
  write_text(scen, small_search_scenario().dump(2));
  CliResult r = run_trainplan("plan " + q(scen) + " --threads 2", true);  // stderr into a pipe
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("(estimating)"), std::string::npos) << r.out;  // the first line (its % depends on timing)
  EXPECT_NE(r.out.find("searching: 100% (done)"), std::string::npos) << r.out;
  CliResult quiet = run_trainplan("plan " + q(scen) + " --threads 2 --quiet", true);
  ASSERT_EQ(quiet.exit_code, 0) << quiet.out;
  EXPECT_EQ(quiet.out.find("searching:"), std::string::npos) << quiet.out;
}
