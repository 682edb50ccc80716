// The answers and logs in the form people compare (issue 43): `plan --quiet` silences the progress only, `simulate`
// of a plan that does not fit writes its outputs and exits 3 (as `plan` when nothing fits), `catalog NAME --json` is
// the inline object a scenario accepts, `run`'s iteration lines carry the wall clock and the mean time over the
// log interval (Megatron-LM's), `--metrics FILE.jsonl` has one JSON line per logged step, and the closing line says
// which steps its throughput leaves out.
#include <gtest/gtest.h>

#include "cli_run.hpp"

#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>

#include "models/json_check.hpp"
#include "temp_dir.hpp"

namespace fs = std::filesystem;
using tp::json;

namespace {

using tp::testutil::Out;

Out tp_run(const std::string& args, bool with_stderr = true) {
  std::string cmd = std::string(TP_BINARY) + " " + args + (with_stderr ? " 2>&1" : " 2>/dev/null");
  return tp::testutil::run_shell(cmd);
}

std::string src(const std::string& rel) {  // (appended in place: GCC 12's -Warray-bounds misfires on the temporaries' sum)
  std::string s = TP_SOURCE_DIR;
  s += '/';
  s += rel;
  return s;
}

json read_json(const fs::path& f) {
  std::ifstream in(f);
  return json::parse(in);
}

void write(const fs::path& f, const std::string& text) { std::ofstream(f) << text; }

}  // namespace

TEST(Answers, PlanQuietSilencesTheProgressNotTheAnswer) {
  tp::testutil::TempDir d("tp_plan_quiet");
  const json s = {{"name", "small-search"}, {"model", "gpt3-125m"}, {"cluster", "selene"},
                  {"training", {{"seq_len", 2048}, {"tokens", 1e9}, {"global_batch", 64}, {"precision", "bf16"}}},
                  {"search", {{"max_gpus", 8}, {"top_k", 2}}}};
  write(d.path / "s.json", s.dump());
  Out o = tp_run("plan " + (d.path / "s.json").string() + " --quiet");
  ASSERT_EQ(o.rc, 0) << o.text;
  EXPECT_EQ(o.text.find("searching"), std::string::npos) << o.text;  // no progress
  EXPECT_NE(o.text.find("dp"), std::string::npos) << o.text;         // the answer's table
  EXPECT_GT(o.text.size(), 200u) << o.text;
}

TEST(Answers, SimulateOfAPlanThatDoesNotFitWritesItsOutputsAndExits3) {
  tp::testutil::TempDir d("tp_sim_nofit");
  json s = read_json(src("scenarios/default.json"));
  s["plan"] = {{"dp", 8}, {"tp", 1}, {"pp", 1}, {"zero", 0}, {"microbatch", 1}};  // GPT-3 175B unsharded: no
  write(d.path / "s.json", s.dump());
  const fs::path out = d.path / "r.json";
  Out o = tp_run("simulate " + (d.path / "s.json").string() + " --json " + out.string());
  EXPECT_EQ(o.rc, 3) << o.text;
  EXPECT_NE(o.text.find("does not fit"), std::string::npos) << o.text;
  ASSERT_TRUE(fs::exists(out));
  EXPECT_FALSE(read_json(out)["memory"]["fits"].get<bool>());
  // A plan that fits: 0, as before.
  EXPECT_EQ(tp_run("simulate " + src("scenarios/default.json") + " --quiet").rc, 0);
}

TEST(Answers, CatalogEntryIsTheInlineObjectAScenarioTakes) {
  tp::testutil::TempDir d("tp_catalog_entry");
  for (const char* kind_name : {"dgx-h100", "llama3-8b", "H100-SXM-80GB"}) {
    Out o = tp_run(std::string("catalog ") + kind_name + " --json -", false);
    ASSERT_EQ(o.rc, 0) << kind_name << ": " << o.text;
    EXPECT_NO_THROW(json::parse(o.text)) << o.text;
  }
  // Copy the cluster, grow it, and simulate with it inline: the same result as the name for the same nodes.
  json cl = json::parse(tp_run("catalog dgx-h100 --json -", false).text);
  json s = read_json(src("scenarios/examples/llama3-70b-dgx-h100.json"));
  const json named = s;
  s["cluster"] = cl;
  write(d.path / "inline.json", s.dump());
  write(d.path / "named.json", named.dump());
  Out a = tp_run("simulate " + (d.path / "inline.json").string() + " --json " + (d.path / "a.json").string() + " --quiet");
  Out b = tp_run("simulate " + (d.path / "named.json").string() + " --json " + (d.path / "b.json").string() + " --quiet");
  ASSERT_EQ(a.rc, b.rc) << a.text << b.text;
  EXPECT_EQ(read_json(d.path / "a.json")["step_time_s"], read_json(d.path / "b.json")["step_time_s"]);
  cl["nodes"] = cl["nodes"].get<long long>() * 2;  // grown: still loads
  s["cluster"] = cl;
  write(d.path / "grown.json", s.dump());
  EXPECT_NE(tp_run("simulate " + (d.path / "grown.json").string() + " --quiet").rc, 2);
  Out bad = tp_run("catalog dgx-h10");
  EXPECT_EQ(bad.rc, 2);
  EXPECT_NE(bad.text.find("did you mean \"dgx-h100\""), std::string::npos) << bad.text;
}

TEST(Logs, IterationLinesShowTheIntervalMeanAndTheMetricsFileOneLinePerLoggedStep) {
  tp::testutil::TempDir d("tp_run_metrics");
  const fs::path metrics = d.path / "m.jsonl", res = d.path / "r.json";
  Out o = tp_run("run " + src("scenarios/exec/tiny-gpt.json") + " --steps 6 --log-every 3 --metrics " + metrics.string() +
                 " --json " + res.string());
  ASSERT_EQ(o.rc, 0) << o.text;
  // "[YYYY-MM-DD HH:MM:SS] iteration        3/       6 | ... elapsed time per iteration (ms): X |"
  std::regex line(R"(\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\] iteration +(\d+)/ +6 \|.*elapsed time per iteration \(ms\): ([0-9.]+) \|)");
  std::vector<double> logged_ms;
  for (std::sregex_iterator it(o.text.begin(), o.text.end(), line), end; it != end; ++it) logged_ms.push_back(std::stod((*it)[2]));
  ASSERT_EQ(logged_ms.size(), 2u) << o.text;
  // The mean over steps 1-3 and 4-6 of the run's own step times (its --json), not the last step's.
  const json r = read_json(res);
  const std::vector<double> t = r["step_time_s"].get<std::vector<double>>();
  ASSERT_EQ(t.size(), 6u);
  EXPECT_NEAR(logged_ms[0], (t[0] + t[1] + t[2]) / 3 * 1e3, 0.06) << o.text;
  EXPECT_NEAR(logged_ms[1], (t[3] + t[4] + t[5]) / 3 * 1e3, 0.06) << o.text;
  // The metrics file: one JSON line per logged step, the same numbers.
  std::ifstream in(metrics);
  std::vector<json> rows;
  for (std::string l; std::getline(in, l);) rows.push_back(json::parse(l));
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0]["step"], 3);
  EXPECT_EQ(rows[1]["step"], 6);
  EXPECT_EQ(rows[1]["iterations_averaged"], 3);
  EXPECT_NEAR(rows[1]["iteration_time_s"].get<double>(), (t[3] + t[4] + t[5]) / 3, 1e-9);
  EXPECT_NEAR(rows[1]["loss"].get<double>(), r["losses"][5].get<double>(), 1e-6);
  for (const char* k : {"grad_norm", "learning_rate", "tokens_per_s", "tflops_per_gpu", "peak_memory_bytes", "timestamp"})
    EXPECT_TRUE(rows[1].contains(k)) << k;
  // The closing line names the steps its throughput covers.
  EXPECT_NE(o.text.find("over steps 2-6 (step 1 left out: warm-up)"), std::string::npos) << o.text;
  // A metrics file that cannot be written: exit 2 before any work.
  Out bad = tp_run("run " + src("scenarios/exec/tiny-gpt.json") + " --steps 2 --metrics /nonexistent-dir/m.jsonl");
  EXPECT_EQ(bad.rc, 2) << bad.text;
  EXPECT_NE(bad.text.find("--metrics: cannot write"), std::string::npos) << bad.text;
  EXPECT_EQ(bad.text.find("iteration"), std::string::npos) << bad.text;
}
