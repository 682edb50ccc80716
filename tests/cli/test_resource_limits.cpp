// Commands whose size grows with the input estimate the memory they need before allocating it and refuse with
// exit 2 ("needs about X GB of memory; this machine has Y GB available") instead of ending in bad_alloc or the
// OOM killer (issue 14): simulate on 2^22 GPUs, --full-cluster with tens of millions of tasks, run with a
// vocabulary of 2e7 or a hidden size of 1e6. Each command runs under `timeout` and `ulimit -v`, so a regression
// fails (killed, or bad_alloc's exit 1) instead of exhausting the machine.
#include <gtest/gtest.h>

#include "cli_run.hpp"

#include <sys/wait.h>

#include <cstdio>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "temp_dir.hpp"

using json = nlohmann::json;
using tp::testutil::TempDir;

namespace {

using tp::testutil::Out;

// `trainplan ARGS` with at most `kb` KiB of address space and 60 s.
Out limited_run(const std::string& args, long kb) {
  std::string cmd = "ulimit -v " + std::to_string(kb) + "; timeout -k 2 60 " + std::string(TP_BINARY) + " " + args +
                    " 2>&1 </dev/null";
  return tp::testutil::run_shell("sh -c '" + cmd + "'");
}

// AddressSanitizer reserves terabytes of shadow address space at start, so an ASan build cannot run under
// `ulimit -v`, and without the limit a regression would exhaust the machine: these tests skip in that build.
#if defined(__SANITIZE_ADDRESS__)
#define TP_SKIP_UNDER_ASAN() GTEST_SKIP() << "needs ulimit -v, which AddressSanitizer's shadow memory cannot run under"
#else
#define TP_SKIP_UNDER_ASAN() (void)0
#endif

bool has(const std::string& text, const std::string& what) { return text.find(what) != std::string::npos; }

json catalog_cluster(const std::string& name) {
  std::ifstream f(std::string(TP_SOURCE_DIR) + "/models/catalog/clusters.json");
  json c = json::parse(f).at(name);
  c.erase("about");
  return c;
}

// gpt3-1.3b data-parallel over `dp` GPUs of DGX H100 nodes (8 per node, aligned with the nodes).
json wide_dp(int dp, long long microbatches) {
  json c = catalog_cluster("dgx-h100");
  c["nodes"] = std::max(1, dp / 8);
  return {{"model", "gpt3-1.3b"}, {"cluster", c},
          {"training", {{"global_batch", (long long)dp * microbatches}, {"seq_len", 2048}, {"precision", "bf16"}}},
          {"plan", {{"dp", dp}, {"tp", 1}, {"pp", 1}, {"zero", 1}}}};
}

std::string write(TempDir& d, const std::string& name, const json& j) {
  std::string path = d.file(name);
  std::ofstream(path) << j.dump();
  return path;
}

constexpr long kTwoGiB = 2L << 20;  // KiB

}  // namespace

TEST(ResourceLimits, SimulateRefusesAClusterItCannotHold) {
  TP_SKIP_UNDER_ASAN();
  TempDir d;
  std::string s = write(d, "dp22.json", wide_dp(1 << 22, 1));
  Out o = limited_run("simulate " + s, kTwoGiB);
  EXPECT_EQ(o.rc, 2) << o.text;
  EXPECT_TRUE(has(o.text, "simulating 4194304 GPUs needs about") && has(o.text, "GB available")) << o.text;
}

TEST(ResourceLimits, FullClusterRefusesTasksItCannotHold) {
  TP_SKIP_UNDER_ASAN();
  TempDir d;
  std::string s = write(d, "full.json", wide_dp(1 << 16, 256));  // ~6.7e7 tasks
  Out o = limited_run("simulate --full-cluster " + s, kTwoGiB);
  EXPECT_EQ(o.rc, 2) << o.text;
  EXPECT_TRUE(has(o.text, "simulating every rank (65536 GPUs") && has(o.text, "needs about")) << o.text;
}

TEST(ResourceLimits, RunRefusesAModelItCannotHold) {
  TP_SKIP_UNDER_ASAN();
  std::ifstream f(std::string(TP_SOURCE_DIR) + "/scenarios/exec/tiny-gpt.json");
  const json tiny = json::parse(f);
  TempDir d;
  json vocab = tiny, hidden = tiny;
  vocab["model"]["vocab"] = 20000000;
  hidden["model"]["hidden"] = 1000000;
  hidden["model"]["layers"] = 1;
  for (const json& j : {vocab, hidden}) {
    Out o = limited_run("run " + write(d, "big.json", j) + " --steps 1", kTwoGiB);
    EXPECT_EQ(o.rc, 2) << o.text;
    EXPECT_TRUE(has(o.text, "training this model (1 rank on this machine, fp32) needs about")) << o.text;
  }
  // The tiny model itself still trains under the same limit.
  Out ok = limited_run("run " + std::string(TP_SOURCE_DIR) + "/scenarios/exec/tiny-gpt.json --steps 1", kTwoGiB);
  EXPECT_EQ(ok.rc, 0) << ok.text;
}
