// From plan to run: `plan --emit DIR` writes the user's scenario with each top plan (best.json, top2.json, ...),
// valid for simulate and run as they stand; `run --plan RESULT.json[#k]` trains the k-th plan of a `plan --json`
// result, checked like a scenario's own plan (a k beyond the list is exit 2 before any work).
#include <gtest/gtest.h>

#include <sys/wait.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "models/json_check.hpp"
#include "temp_dir.hpp"

namespace fs = std::filesystem;
using tp::json;

namespace {

json read_json(const fs::path& p) {
  std::ifstream in(p);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  json j = json::parse(text, nullptr, false);
  if (j.is_discarded()) ADD_FAILURE() << p << " is not JSON: " << text.substr(0, 200);
  return j;
}

int sh(const std::string& cmd) {
  int rc = std::system(cmd.c_str());
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : 128;
}

std::string tiny_search(const fs::path& dir) {
  std::ifstream in(std::string(TP_SOURCE_DIR) + "/scenarios/exec/tiny-gpt.json");
  json j = json::parse(in);
  j.erase("plan");
  j["training"]["tokens"] = 1e6;
  j["search"] = {{"gpu_counts", {1}}, {"top_k", 3},
                 {"fix", {{"offload", "none"}, {"attention", "unfused"}, {"tp_mode", "1d"}}}};
  fs::path f = dir / "tiny-search.json";
  std::ofstream(f) << j.dump(2);
  return f.string();
}

}  // namespace

TEST(PlanToRun, EmitWritesRunnableScenariosAndRunTakesThePlannersChoice) {
  tp::testutil::TempDir t("plan_emit");
  std::string sc = tiny_search(t.path);
  fs::path emit = t.path / "emitted", result = t.path / "r.json";
  ASSERT_EQ(sh(std::string(TP_BINARY) + " plan " + sc + " --emit " + emit.string() + " --json " + result.string() +
               " --quiet > " + t.file("plan.log") + " 2>&1"), 0);
  ASSERT_TRUE(fs::exists(emit / "best.json"));
  json r = read_json(result);
  const size_t n = r["top"].size();
  ASSERT_GE(n, 1u);
  for (size_t i = 0; i < n; ++i) {
    fs::path f = emit / (i == 0 ? std::string("best.json") : "top" + std::to_string(i + 1) + ".json");
    ASSERT_TRUE(fs::exists(f)) << f;
    json e = read_json(f);
    EXPECT_FALSE(e.contains("search"));
    EXPECT_EQ(e["plan"], r["top"][i]["plan"]);
    EXPECT_EQ(e["training"]["global_batch"], r["top"][i]["global_batch"]);
    EXPECT_EQ(sh(std::string(TP_BINARY) + " simulate " + f.string() + " --quiet"), 0) << f;
  }
  // the best plan (1 GPU) trains from the search scenario itself
  fs::path out = t.path / "run.json";
  ASSERT_EQ(sh(std::string(TP_BINARY) + " run " + sc + " --plan " + result.string() + " --steps 2 --log-every 0 --quiet --json " +
               out.string() + " 2> " + t.file("run.log")), 0);
  json run = read_json(out);
  EXPECT_EQ(run["losses"].size(), 2u);
  EXPECT_EQ(run["scenario"]["plan"]["dp"], r["top"][0]["plan"]["dp"]);
  // #k beyond the list: exit 2 naming it
  EXPECT_EQ(sh(std::string(TP_BINARY) + " run " + sc + " --plan " + result.string() + "#" + std::to_string(n + 1) +
               " --steps 1 > " + t.file("bad.log") + " 2>&1"), 2);
  std::ifstream bad(t.file("bad.log"));
  std::string text((std::istreambuf_iterator<char>(bad)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("top plans; expected #1 to #" + std::to_string(n)), std::string::npos) << text;
}
