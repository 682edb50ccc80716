// Golden outputs (SimGrid-style examples as tests): every bundled scenario is simulated and its full JSON
// result compared with the committed one under tests/golden/ — strings exactly, numbers to 1e-9 relative.
// This pins the simulator's determinism and flags any change of a prediction; regenerate intended changes with
// scripts/update_golden.sh and review the diff.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "sim/output.hpp"

using namespace tp;
namespace fs = std::filesystem;

static void compare(const json& got, const json& want, const std::string& path) {
  if (!(want.is_number() && got.is_number())) {
    ASSERT_EQ(got.type(), want.type()) << path;
  }
  if (want.is_object()) {
    ASSERT_EQ(got.size(), want.size()) << path;
    for (auto it = want.begin(); it != want.end(); ++it) {
      ASSERT_TRUE(got.contains(it.key())) << path << "." << it.key();
      compare(got[it.key()], it.value(), path + "." + it.key());
    }
  } else if (want.is_array()) {
    ASSERT_EQ(got.size(), want.size()) << path;
    for (size_t i = 0; i < want.size(); ++i) compare(got[i], want[i], path + "[" + std::to_string(i) + "]");
  } else if (want.is_number()) {
    double a = got.get<double>(), b = want.get<double>();
    EXPECT_LE(std::fabs(a - b), 1e-9 * std::max(std::fabs(a), std::fabs(b)) + 1e-300) << path << ": " << a << " vs " << b;
  } else {
    EXPECT_EQ(got, want) << path;
  }
}

TEST(Golden, BundledScenariosReproduceCommittedResults) {
  std::vector<fs::path> files = {fs::path(TP_SOURCE_DIR) / "scenarios/default.json"};
  for (auto& e : fs::directory_iterator(fs::path(TP_SOURCE_DIR) / "scenarios/examples"))
    if (e.path().extension() == ".json") files.push_back(e.path());
  std::sort(files.begin(), files.end());
  ASSERT_GE(files.size(), 4u);
  for (const fs::path& f : files) {
    fs::path golden = fs::path(TP_SOURCE_DIR) / "tests/golden" / (f.stem().string() + ".json");
    ASSERT_TRUE(fs::exists(golden)) << golden << " missing: run scripts/update_golden.sh";
    std::ifstream in(golden);
    json want = json::parse(in);
    json got = result_to_json(simulate(load_scenario(f.string())));
    // The scenario echo holds the catalog path-independent resolved input; compare everything.
    compare(got, want, f.stem().string());
  }
}
