// Hostile inputs and outputs (issue 14): FIFOs, device nodes and huge files as inputs are refused before they
// are opened (exit 2, no hang); outputs go through fresh temporaries (a symlink planted at the old fixed
// NAME.tmp is never followed), non-regular targets are never renamed over, and the outputs of one command are
// all written or none. Every command runs under `timeout`, so a regression fails instead of hanging.
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <algorithm>
#include <fstream>
#include <sstream>
#include <string>

#include "exec/io/checkpoint.hpp"
#include "exec/io/data.hpp"
#include "models/json_check.hpp"
#include "models/safe_io.hpp"
#include "cli_run.hpp"
#include "temp_dir.hpp"

namespace fs = std::filesystem;
using tp::testutil::TempDir;

namespace {

using namespace tp::testutil;  // tp_run, Out, slurp, spit, has, listing (cli_run.hpp)

const std::string kScenario = std::string(TP_SOURCE_DIR) + "/scenarios/default.json";

}  // namespace

TEST(Hardening, FifoScenarioRefusedWithoutHanging) {
  TempDir d;
  const std::string fifo = d.file("s.json");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  for (const std::string& cmd : std::vector<std::string>{"simulate ", "plan ", "report --out " + d.file("rep") + " "}) {
    Out o = tp_run(cmd + fifo);
    EXPECT_EQ(o.rc, 2) << cmd << o.text;
    EXPECT_TRUE(has(o.text, fifo) && has(o.text, "FIFO")) << o.text;
  }
}

TEST(Hardening, DeviceAndHugeScenarioRefused) {
  Out z = tp_run("simulate /dev/zero");
  EXPECT_EQ(z.rc, 2) << z.text;
  EXPECT_TRUE(has(z.text, "/dev/zero") && has(z.text, "character device")) << z.text;
  TempDir d;
  const std::string big = d.file("big.json");
  { std::ofstream(big) << "{"; }
  fs::resize_file(big, tp::kMaxJsonBytes + 1);  // sparse: costs no disk
  Out b = tp_run("simulate " + big);
  EXPECT_EQ(b.rc, 2) << b.text;
  EXPECT_TRUE(has(b.text, big) && has(b.text, "limit is 64 MiB")) << b.text;
}

TEST(Hardening, FifoCheckpointAndTokenFileRefused) {
  TempDir d;
  const std::string fifo = d.file("rank_00000.ckpt");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  std::string why;
  EXPECT_FALSE(tp::exec::checkpoint_valid(fifo, nullptr, &why));
  EXPECT_TRUE(has(why, "FIFO")) << why;
  EXPECT_THROW(tp::exec::read_checkpoint(fifo), std::runtime_error);
  try {
    tp::exec::read_tokens(fifo);
    ADD_FAILURE() << "a FIFO token file was read";
  } catch (const tp::InputError& e) {
    EXPECT_TRUE(has(e.what(), fifo) && has(e.what(), "FIFO")) << e.what();
  }
  // Writing a checkpoint over a FIFO is refused, and the FIFO stays.
  double v = 1;
  std::vector<tp::exec::TensorView> t = {{"v", tp::exec::Dtype::f64, &v, 1}};
  EXPECT_THROW(tp::exec::write_checkpoint(fifo, {}, t), std::runtime_error);
  struct stat st;
  ASSERT_EQ(::lstat(fifo.c_str(), &st), 0);
  EXPECT_TRUE(S_ISFIFO(st.st_mode));
}

TEST(Hardening, SymlinkAtOldTemporaryNameIsNotFollowed) {
  TempDir d;
  const std::string victim = d.file("victim.txt");
  spit(victim, "precious");
  fs::create_symlink(victim, d.file("o.json.tmp"));
  fs::create_symlink(victim, d.file("t.json.tmp"));
  Out o = tp_run("simulate " + kScenario + " --quiet --json " + d.file("o.json") + " --trace " + d.file("t.json"));
  EXPECT_EQ(o.rc, 0) << o.text;
  EXPECT_EQ(slurp(victim), "precious");
  EXPECT_TRUE(fs::is_symlink(d.file("o.json.tmp")));
  EXPECT_TRUE(tp::json::accept(slurp(d.file("o.json"))));
  EXPECT_EQ(listing(d.path), (std::vector<std::string>{"o.json", "o.json.tmp", "t.json", "t.json.tmp", "victim.txt"}));
  // The checkpoint writer too (it used NAME.tmp).
  const std::string ck = d.file("c.ckpt");
  fs::create_symlink(victim, ck + ".tmp");
  double v = 1;
  std::vector<tp::exec::TensorView> t = {{"v", tp::exec::Dtype::f64, &v, 1}};
  tp::exec::write_checkpoint(ck, {}, t);
  EXPECT_EQ(slurp(victim), "precious");
  EXPECT_TRUE(tp::exec::checkpoint_valid(ck));
}

TEST(Hardening, NonRegularTargetsAreNeverRenamedOver) {
  Out o = tp_run("simulate " + kScenario + " --quiet --json /dev/null");
  EXPECT_EQ(o.rc, 0) << o.text;
  struct stat st;
  ASSERT_EQ(::lstat("/dev/null", &st), 0);
  EXPECT_TRUE(S_ISCHR(st.st_mode));
  TempDir d;
  const std::string fifo = d.file("out.fifo");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  Out f = tp_run("simulate " + kScenario + " --quiet --json " + fifo);  // no reader: refused, not blocked
  EXPECT_EQ(f.rc, 2) << f.text;
  EXPECT_TRUE(has(f.text, "cannot write " + fifo + ": it is a FIFO with no reader")) << f.text;
  ASSERT_EQ(::lstat(fifo.c_str(), &st), 0);
  EXPECT_TRUE(S_ISFIFO(st.st_mode));
}

TEST(Hardening, AllOutputsOrNone) {
  TempDir d;
  const std::string fifo = d.file("bad.fifo");  // passes the pre-check (writable directory), fails at writing
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  Out s = tp_run("simulate " + kScenario + " --quiet --json " + d.file("o.json") + " --trace " + fifo);
  EXPECT_EQ(s.rc, 2) << s.text;
  EXPECT_TRUE(has(s.text, fifo)) << s.text;
  EXPECT_EQ(listing(d.path), std::vector<std::string>{"bad.fifo"});  // no o.json, no temporary left
  Out p = tp_run("plan " + std::string(TP_SOURCE_DIR) + "/scenarios/plan-default.json --quiet --json " +
                 d.file("p.json") + " --csv " + fifo + " --trace " + d.file("p.trace.json"));
  EXPECT_EQ(p.rc, 2) << p.text;
  EXPECT_EQ(listing(d.path), std::vector<std::string>{"bad.fifo"});
}

TEST(Hardening, WriteErrorsSayWhy) {
  try {
    tp::write_outputs_atomic({tp::OutputFile("/nonexistent-dir/x.json", "{}")});
    ADD_FAILURE() << "wrote into a missing directory";
  } catch (const tp::InputError& e) {
    EXPECT_TRUE(has(e.what(), "cannot write /nonexistent-dir/x.json: No such file or directory")) << e.what();
  }
  // Two outputs, the second impossible: neither is written.
  TempDir d;
  EXPECT_THROW(tp::write_outputs_atomic({tp::OutputFile(d.file("a.json"), "{}"),
                                         tp::OutputFile(d.file("missing/b.json"), "{}")}),
               tp::InputError);
  EXPECT_TRUE(listing(d.path).empty());
  // The mode of a written file follows the umask, not mkstemp's 0600.
  tp::write_outputs_atomic({tp::OutputFile(d.file("m.json"), "{}")});
  const mode_t um = ::umask(0);
  ::umask(um);
  EXPECT_EQ(fs::status(d.file("m.json")).permissions(), static_cast<fs::perms>(0666 & ~um));
}
