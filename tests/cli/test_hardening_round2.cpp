// Hardening, second round (issue 44), as the binary runs: outputs all or none against /dev/full and immutable
// targets (a failed rename puts the earlier outputs back), standard output's write errors (exit 1), option values
// that were silently taken as defaults, --checkpoint-dir checked before step 1, the JSON reader's bounds (nesting
// depth, values, 20 problems then a count), and the messages that were wrong. Every command runs under `timeout`.
// Immutable targets need chattr (root, a file system with the attribute): those cases are skipped without it.
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "models/catalog.hpp"
#include "models/json_check.hpp"
#include "models/safe_io.hpp"
#include "cli_run.hpp"
#include "temp_dir.hpp"

namespace fs = std::filesystem;
using tp::testutil::TempDir;

namespace {

using namespace tp::testutil;  // tp_run, Out, slurp, spit, has, listing (cli_run.hpp)

// chattr +i on a path for the object's life (removed again, so that the TempDir can go); ok() false when the
// attribute cannot be set here.
struct Immutable {
  std::string path;
  bool set = false;
  explicit Immutable(std::string p) : path(std::move(p)) {
    set = std::system(("chattr +i '" + path + "' 2>/dev/null").c_str()) == 0;
  }
  ~Immutable() {
    if (set) (void)std::system(("chattr -i '" + path + "' 2>/dev/null").c_str());
  }
  bool ok() const { return set; }
};

const std::string kScenario = std::string(TP_SOURCE_DIR) + "/scenarios/default.json";
const std::string kTiny = std::string(TP_SOURCE_DIR) + "/scenarios/exec/tiny-gpt.json";

int lines(const std::string& s) { return (int)std::count(s.begin(), s.end(), '\n'); }

}  // namespace

// Item 3: a device that fails at writing (/dev/full) after another output's temporary was written: nothing is
// renamed (before, a.json was written and the command exited 2).
TEST(HardeningRound2, DevFullOutputLeavesTheOthersUnwritten) {
  TempDir d;
  spit(d.file("old.json"), "old");
  for (const std::string& args : {"simulate " + kScenario + " --quiet --json " + d.file("a.json") + " --trace /dev/full",
                                  "simulate " + kScenario + " --quiet --json /dev/full --trace " + d.file("a.json"),
                                  "simulate " + kScenario + " --quiet --json " + d.file("old.json") + " --trace /dev/full",
                                  "run " + kTiny + " --steps 1 --quiet --json " + d.file("a.json") + " --trace /dev/full"}) {
    Out o = tp_run(args);
    EXPECT_EQ(o.rc, 2) << args << "\n" << o.text;
    EXPECT_TRUE(has(o.text, "cannot write /dev/full: No space left on device")) << o.text;
    EXPECT_EQ(listing(d.path), std::vector<std::string>{"old.json"}) << args;
    EXPECT_EQ(slurp(d.file("old.json")), "old");
  }
}

// Item 3: the rename of a later output fails (an immutable target): the earlier output is put back as it was,
// and a new one removed; the message says that no output was changed.
TEST(HardeningRound2, FailedRenamePutsEarlierOutputsBack) {
  TempDir d;
  spit(d.file("a.json"), "old a");
  spit(d.file("t.json"), "old t");
  Immutable imm(d.file("t.json"));
  if (!imm.ok()) GTEST_SKIP() << "chattr +i is not available here";
  Out o = tp_run("simulate " + kScenario + " --quiet --json " + d.file("a.json") + " --trace " + d.file("t.json"));
  EXPECT_EQ(o.rc, 2) << o.text;
  EXPECT_TRUE(has(o.text, "cannot write " + d.file("t.json") + ": Operation not permitted; no output was changed")) << o.text;
  EXPECT_EQ(slurp(d.file("a.json")), "old a");
  EXPECT_EQ(slurp(d.file("t.json")), "old t");
  EXPECT_EQ(listing(d.path), (std::vector<std::string>{"a.json", "t.json"}));  // no temporary, no backup left
  Out n = tp_run("simulate " + kScenario + " --quiet --json " + d.file("new.json") + " --trace " + d.file("t.json"));
  EXPECT_EQ(n.rc, 2) << n.text;
  EXPECT_EQ(listing(d.path), (std::vector<std::string>{"a.json", "t.json"}));  // new.json removed again
}

// Item 3: a report folder whose report.md is immutable gets none of the other files.
TEST(HardeningRound2, ReportWithImmutableFileWritesNothing) {
  TempDir d;
  const fs::path rep = d.path / "rep";
  fs::create_directories(rep);
  spit((rep / "report.md").string(), "old");
  Immutable imm((rep / "report.md").string());
  if (!imm.ok()) GTEST_SKIP() << "chattr +i is not available here";
  Out o = tp_run("report " + kScenario + " --quiet --out " + rep.string());
  EXPECT_EQ(o.rc, 2) << o.text;
  EXPECT_TRUE(has(o.text, "report.md")) << o.text;
  std::vector<std::string> files;
  for (const auto& e : fs::recursive_directory_iterator(rep))
    if (!e.is_directory()) files.push_back(e.path().filename().string());
  EXPECT_EQ(files, std::vector<std::string>{"report.md"});
}

// Item 4: a write error on standard output is exit 1 with a message (before: exit 0, the output lost).
TEST(HardeningRound2, StdoutWriteErrorsExitOne) {
  TempDir d;
  for (const std::string& args : std::vector<std::string>{"export " + std::string(TP_SOURCE_DIR) + "/scenarios/default.json --to megatron",
                                  "simulate " + kScenario + " --quiet --json -", "simulate " + kScenario,
                                  "catalog --json -", "catalog", "run " + kTiny + " --steps 1 --quiet --json -"}) {
    Out o = tp_run(args, "/dev/full");
    EXPECT_EQ(o.rc, 1) << args << "\n" << o.text;
    EXPECT_TRUE(has(o.text, "error: cannot write standard output")) << args << "\n" << o.text;
    if (has(args, "--quiet --json -")) {
      EXPECT_TRUE(has(o.text, "standard output: No space left on device")) << o.text;
    }
  }
  // simulate --json - --trace FILE: standard output fails first, so the trace file is not written either.
  Out t = tp_run("simulate " + kScenario + " --quiet --json - --trace " + d.file("t.json"), "/dev/full");
  EXPECT_EQ(t.rc, 1) << t.text;
  EXPECT_TRUE(listing(d.path).empty());
}

// Item 9: an option given with an empty value is refused, never its default; --emit '' and --emit - too;
// --keep-checkpoints needs --checkpoint-dir.
TEST(HardeningRound2, EmptyOptionValuesAndLoneKeepCheckpointsRefused) {
  TempDir d;
  for (const std::string& args : {"run " + kTiny + " --steps ''", "run " + kTiny + " --keep-checkpoints ''",
                                  "run " + kTiny + " --seed ''", "plan " + kScenario + " --threads ''",
                                  "simulate " + kScenario + " --trace-detail ''"}) {
    Out o = tp_run(args);
    EXPECT_EQ(o.rc, 2) << args << "\n" << o.text;
    EXPECT_TRUE(has(o.text, "expects a value, got an empty string")) << o.text;
  }
  Out e = tp_run("plan " + kScenario + " --emit ''");
  EXPECT_EQ(e.rc, 2) << e.text;
  EXPECT_TRUE(has(e.text, "--emit: expected a folder name, got an empty string")) << e.text;
  Out dash = tp_run("plan " + kScenario + " --emit -", "", d.path.string());
  EXPECT_EQ(dash.rc, 2) << dash.text;
  EXPECT_TRUE(has(dash.text, "--emit: expected a folder name; - (standard output)")) << dash.text;
  EXPECT_FALSE(fs::exists(d.path / "-"));
  Out k = tp_run("run " + kTiny + " --steps 1 --keep-checkpoints 3");
  EXPECT_EQ(k.rc, 2) << k.text;
  EXPECT_TRUE(has(k.text, "--keep-checkpoints need --checkpoint-dir")) << k.text;
}

// Item 5: --checkpoint-dir is checked before step 1 (before: a file as the folder trained until the first
// checkpoint was due, then exited 1 without the JSON).
TEST(HardeningRound2, CheckpointDirCheckedBeforeTraining) {
  TempDir d;
  spit(d.file("afile"), "x");
  ASSERT_EQ(::mkfifo(d.file("fifo").c_str(), 0600), 0);
  for (const std::string& dir : {d.file("afile"), d.file("fifo"), std::string("/proc/trainplan-ckpt")}) {
    Out o = tp_run("run " + kTiny + " --steps 2 --quiet --checkpoint-dir " + dir + " --checkpoint-every 1000 --json " +
                   d.file("o.json"));
    EXPECT_EQ(o.rc, 2) << dir << "\n" << o.text;
    EXPECT_TRUE(has(o.text, "--checkpoint-dir: ") && has(o.text, dir)) << o.text;
    EXPECT_FALSE(has(o.text, "iteration")) << o.text;  // no step ran
    EXPECT_FALSE(fs::exists(d.file("o.json")));
  }
}

// Item 8: nesting is bounded (64 MiB of "[" took 5.6 GB), so are the values (5.2 million unknown keys took 3.8 GB),
// and at most 20 problems are printed, then a count.
TEST(HardeningRound2, JsonNestingValuesAndErrorCountBounded) {
  TempDir d;
  spit(d.file("deep.json"), std::string(1 << 20, '['));
  Out deep = tp_run("simulate " + d.file("deep.json"));
  EXPECT_EQ(deep.rc, 2) << deep.text.substr(0, 500);
  EXPECT_TRUE(has(deep.text, "nested more than 64 deep")) << deep.text.substr(0, 500);
  {
    std::ofstream f(d.file("keys.json"));
    f << "{";
    for (int i = 0; i < 1200000; ++i) f << (i ? "," : "") << "\"k" << i << "\":0";
    f << "}";
  }
  Out keys = tp_run("simulate " + d.file("keys.json"));
  EXPECT_EQ(keys.rc, 2) << keys.text.substr(0, 500);
  EXPECT_TRUE(has(keys.text, "more than 1000000 values and keys")) << keys.text.substr(0, 500);
  EXPECT_LE(lines(keys.text), 2);
  // 30 unknown keys in a valid scenario: 20 lines, then "... and 10 more problems (not shown)".
  tp::json j = tp::json::parse(slurp(kScenario));
  for (int i = 0; i < 30; ++i) j["unknown_" + std::to_string(100 + i)] = i;
  spit(d.file("many.json"), j.dump());
  Out many = tp_run("simulate " + d.file("many.json"));
  EXPECT_EQ(many.rc, 2) << many.text;
  EXPECT_EQ(lines(many.text), 21) << many.text;
  EXPECT_TRUE(has(many.text, ": ... and 10 more problems (not shown)")) << many.text;
}

// Items 9 and 10: a NUL in an hf_config path, an inline GPU without a name, the size message, a path printed
// twice, --emit into an immutable folder.
TEST(HardeningRound2, ClearMessages) {
  TempDir d;
  spit(d.file("nul.json"), R"({"model": {"hf_config": "config.json\u0000junk"}, "cluster": "selene",
    "training": {"global_batch": 8, "seq_len": 1024}, "plan": {"dp": 1, "tp": 1, "pp": 1, "microbatch": 1}})");
  spit(d.file("config.json"), "{}");
  Out nul = tp_run("simulate " + d.file("nul.json"));
  EXPECT_EQ(nul.rc, 2) << nul.text;
  EXPECT_TRUE(has(nul.text, "$.model.hf_config") && has(nul.text, "NUL character")) << nul.text;

  tp::json j = tp::json::parse(slurp(kTiny));
  j["cluster"] = *tp::catalog_find("clusters", "selene");
  j["cluster"]["gpu"] = *tp::catalog_find("gpus", "A100-SXM4-80GB");
  j["cluster"]["gpu"].erase("name");
  j["training"]["precision"] = "fp8";
  spit(d.file("noname.json"), j.dump());
  Out g = tp_run("simulate " + d.file("noname.json"));
  EXPECT_EQ(g.rc, 2) << g.text;
  EXPECT_TRUE(has(g.text, "fp8 needs a GPU with fp8 tensor cores; the GPU of $.cluster.gpu (no name) has none")) << g.text;

  const std::string big = d.file("big.json");
  { std::ofstream(big) << "{"; }
  fs::resize_file(big, tp::kMaxJsonBytes + 1);
  Out b = tp_run("simulate " + big);
  EXPECT_EQ(b.rc, 2) << b.text;
  EXPECT_TRUE(has(b.text, "is 67108865 bytes (64.0 MiB); the limit is 64 MiB")) << b.text;

  ASSERT_EQ(::mkfifo(d.file("fifo1").c_str(), 0600), 0);
  for (const std::string& args : {"run " + kTiny + " --plan " + d.file("fifo1"), "validate-published --suite " + d.file("fifo1")}) {
    Out f = tp_run(args);
    EXPECT_EQ(f.rc, 2) << args << "\n" << f.text;
    EXPECT_TRUE(has(f.text, "FIFO")) << f.text;
    EXPECT_FALSE(has(f.text, d.file("fifo1") + ": " + d.file("fifo1"))) << f.text;
  }

  fs::create_directories(d.path / "emit");
  Immutable imm((d.path / "emit").string());
  if (imm.ok()) {
    Out e = tp_run("plan " + kScenario + " --emit " + (d.path / "emit").string());
    EXPECT_EQ(e.rc, 2) << e.text;
    EXPECT_TRUE(has(e.text, "--emit: cannot write " + (d.path / "emit").string() + ": Operation not permitted")) << e.text;
  }
}
