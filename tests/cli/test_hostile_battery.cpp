// The hostile-input battery (issue 14): every subcommand that reads a file gets a FIFO, a device, a directory, a
// missing path and a huge (sparse, 80 MiB) file in each input slot; every subcommand that writes gets a missing
// directory, an unwritable one (/sys, read-only even for root) and a directory as its output. Each run is under
// `timeout` and `ulimit -v` and must exit 2 with an `error:` line naming the path, without hanging and without
// leaving a file behind in the test's folder. The cases run in one test and every miss is listed.
#include <gtest/gtest.h>

#include "cli_run.hpp"

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "temp_dir.hpp"

namespace fs = std::filesystem;
using tp::testutil::TempDir;

namespace {

using tp::testutil::Out;

// AddressSanitizer reserves terabytes of shadow address space at start, so a binary built with it cannot run under
// `ulimit -v`: the sanitizer build (scripts/test_sanitized.sh) drops the limit and keeps the timeout.
#if defined(__SANITIZE_ADDRESS__)
constexpr const char* kAddressLimit = "";
#else
constexpr const char* kAddressLimit = "ulimit -v 4194304; ";
#endif

Out hostile_run(const std::string& args) {
  std::string cmd = std::string(kAddressLimit) + "timeout -k 2 30 " + std::string(TP_BINARY) + " " + args + " 2>&1 </dev/null";
  return tp::testutil::run_shell("sh -c '" + cmd + "'");
}

std::set<std::string> tree(const fs::path& dir) {
  std::set<std::string> names;
  for (const auto& e : fs::recursive_directory_iterator(dir)) names.insert(e.path().string());
  return names;
}

const std::string kSrc = TP_SOURCE_DIR;
const std::string kScenario = kSrc + "/scenarios/default.json";
const std::string kTiny = kSrc + "/scenarios/exec/tiny-gpt.json";

}  // namespace

TEST(HostileBattery, EveryCommandRefusesHostilePathsWithExitTwo) {
  TempDir d;
  const std::string fifo = d.file("fifo.json"), dir = d.file("adir"), missing = d.file("missing.json");
  const std::string huge = d.file("huge.json");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  fs::create_directory(dir);
  {
    std::ofstream(huge) << "{";
    fs::resize_file(huge, 80ull << 20);  // sparse: 80 MiB, above the 64 MiB input cap
  }
  std::ofstream(d.file("search.json")) << R"({"model": "gpt3-350m", "cluster": "selene",
    "training": {"seq_len": 2048, "tokens": 1e10}, "search": {"max_gpus": 8, "top_k": 2}})";
  const std::string search = d.file("search.json");
  // Input slots: a command line with IN where the hostile path goes.
  const std::vector<std::string> inputs = {
      "simulate IN", "plan IN", "report IN --out " + d.file("rep"), "run IN --steps 1",
      "validate " + kTiny + " --profile IN --steps 2",
      "run " + kTiny + " --steps 1 --data IN", "validate-published --suite IN", "export IN --to megatron"};
  const std::vector<std::string> bad_inputs = {fifo, "/dev/zero", dir, missing, huge};
  // Output slots: OUT is replaced by the hostile path.
  const std::vector<std::string> outputs = {
      "simulate " + kScenario + " --quiet --json OUT", "simulate " + kScenario + " --quiet --trace OUT",
      "plan " + search + " --quiet --json OUT", "plan " + search + " --quiet --csv OUT",
      "run " + kTiny + " --steps 1 --json OUT", "selftest --backend cpu --quick --json OUT",
      "catalog --json OUT", "validate-published --json OUT", "export " + kScenario + " --to megatron --out OUT", "calibrate --backend cpu --quick --out OUT"};
  const std::vector<std::string> bad_outputs = {d.file("no/such/dir/o.json"), "/sys/trainplan-o.json", dir};
  const std::set<std::string> before = tree(d.path);
  std::string misses;
  auto check = [&](std::string cmd, const std::string& slot, const std::string& path, bool dir_ok) {
    cmd.replace(cmd.find(slot), slot.size(), path);
    Out o = hostile_run(cmd);
    bool named = o.text.find(path) != std::string::npos || (dir_ok && o.text.find(path.substr(0, path.rfind('/'))) != std::string::npos);
    if (o.rc != 2 || o.text.find("error:") == std::string::npos || !named)
      misses += "  trainplan " + cmd + "\n    -> exit " + std::to_string(o.rc) + ": " + o.text.substr(0, 300) + "\n";
    if (tree(d.path) != before) {
      misses += "  trainplan " + cmd + "\n    -> left files behind\n";
      for (const auto& p : tree(d.path))
        if (!before.count(p)) fs::remove_all(p);
    }
  };
  for (const std::string& c : inputs)
    for (const std::string& in : bad_inputs) {
      check(c, "IN", in, false);
    }
  for (const std::string& c : outputs)
    for (const std::string& out : bad_outputs) check(c, "OUT", out, true);
  check("report " + kScenario + " --quiet --out OUT", "OUT", "/sys/trainplan-report", true);  // report creates missing folders
  EXPECT_TRUE(misses.empty()) << "hostile paths not refused cleanly:\n" << misses;
}
