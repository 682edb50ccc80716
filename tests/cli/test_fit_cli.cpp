// `trainplan fit`: a runs file with logs and step times gives a profile that simulate takes inline; bad input is
// one line naming the place and exit 2.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "cli_run.hpp"
#include "../temp_dir.hpp"

namespace tp {
namespace {

using testutil::has;
using testutil::slurp;
using testutil::spit;
using testutil::tp_run;

const std::string kExamples = std::string(TP_SOURCE_DIR) + "/scenarios/examples/";

TEST(FitCli, RunsFileWithALogGivesAProfileThatSimulateTakes) {
  testutil::TempDir d("fit_cli");
  // A Megatron-LM log of the llama3-8b example: two warm-up steps, then 3.0 s steps.
  spit(d.file("8b.log"), " iteration 1/10 | elapsed time per iteration (ms): 30000.0 |\n"
                         " iteration 2/10 | elapsed time per iteration (ms): 9000.0 |\n"
                         " iteration 3/10 | elapsed time per iteration (ms): 3000.0 |\n"
                         " iteration 4/10 | elapsed time per iteration (ms): 3000.0 |\n");
  const nlohmann::json runs = {
      {"parameters", {"step_overhead_s"}},
      {"runs", {{{"name", "8b"}, {"scenario", kExamples + "llama3-8b-dgx-h100-fp8.json"}, {"log", "8b.log"}},
                {{"name", "70b"}, {"scenario", kExamples + "llama3-70b-dgx-h100.json"}, {"step_time_s", 19.8}}}}};
  spit(d.file("runs.json"), runs.dump());
  auto o = tp_run("fit " + d.file("runs.json") + " --out " + d.file("prof.json") + " --json " + d.file("rep.json"));
  ASSERT_EQ(o.rc, 0) << o.text;
  EXPECT_TRUE(has(o.text, "step_overhead_s")) << o.text;
  EXPECT_TRUE(has(o.text, "leave-one-out")) << o.text;
  const auto prof = nlohmann::json::parse(slurp(d.file("prof.json")));
  ASSERT_TRUE(prof.contains("fitted")) << prof.dump();
  EXPECT_GT(prof["fitted"]["step_overhead_s"].get<double>(), 0.0);
  const auto rep = nlohmann::json::parse(slurp(d.file("rep.json")));
  EXPECT_DOUBLE_EQ(rep["runs"][0]["measured_s"].get<double>(), 3.0);  // the median after the warm-up
  // The profile is a framework simulate takes inline.
  auto sc = nlohmann::json::parse(slurp(kExamples + "llama3-70b-dgx-h100.json"));
  sc["training"]["framework"] = prof;
  spit(d.file("sc.json"), sc.dump());
  auto s = tp_run("simulate " + d.file("sc.json") + " --json " + d.file("out.json") + " --quiet");
  ASSERT_TRUE(s.rc == 0 || s.rc == 3) << s.text;
  const auto out = nlohmann::json::parse(slurp(d.file("out.json")));
  auto plain = tp_run("simulate " + kExamples + "llama3-70b-dgx-h100.json --json " + d.file("plain.json") + " --quiet");
  const auto p = nlohmann::json::parse(slurp(d.file("plain.json")));
  // The overhead is one more task after the optimizer: the step grows by it, less any slack it fills.
  const double grew = out["step_time_s"].get<double>() - p["step_time_s"].get<double>();
  EXPECT_GT(grew, 0.5 * prof["fitted"]["step_overhead_s"].get<double>());
  EXPECT_LE(grew, prof["fitted"]["step_overhead_s"].get<double>() + 1e-9);
}

TEST(FitCli, BadInputIsOneClearLineAndExitTwo) {
  testutil::TempDir d("fit_bad");
  spit(d.file("empty.log"), "no iterations here\n");
  struct Case { nlohmann::json runs; const char* says; };
  const Case cases[] = {
      {{{"runs", {{{"scenario", {{"model", "gpt3-13b"}}}, {"step_time_s", 1.0}}}}}, "$.runs[0]"},
      {{{"runs", {{{"scenario", kExamples + "llama3-70b-dgx-h100.json"}, {"log", "empty.log"}}}}}, "no iteration line found"},
      {{{"runs", {{{"scenario", kExamples + "llama3-70b-dgx-h100.json"}, {"step_time_s", 9.0}}}}}, "1 runs for 3 parameters"},
      {{{"runs", {{{"scenario", kExamples + "llama3-70b-dgx-h100.json"}}}}}, "give exactly one of step_time_s and log"},
      {{{"runs", nlohmann::json::array()}}, "a non-empty list of runs"},
      {{{"runs", {{{"scenario", kExamples + "llama3-70b-dgx-h100.json"}, {"step_time_s", 9.0}, {"breakdown_s", {{"speed", 1.0}}}}}}},
       "breakdown_s.speed"},
  };
  for (const Case& c : cases) {
    spit(d.file("runs.json"), c.runs.dump());
    auto o = tp_run("fit " + d.file("runs.json") + " --out " + d.file("p.json"));
    EXPECT_EQ(o.rc, 2) << c.runs.dump() << "\n" << o.text;
    EXPECT_TRUE(has(o.text, c.says)) << c.runs.dump() << "\n" << o.text;
    EXPECT_FALSE(std::filesystem::exists(d.file("p.json")));
  }
  auto u = tp_run("fit " + d.file("runs.json"));
  EXPECT_EQ(u.rc, 2);
  EXPECT_TRUE(has(u.text, "--out")) << u.text;
}

}  // namespace
}  // namespace tp
