// `trainplan run` as a batch job sees it: the iteration line (Megatron-LM's fields) whatever stderr is, SIGTERM /
// SIGINT finishing the step with a checkpoint and the JSON of the steps done (exit 143 / 130), every rank of an
// mpirun job stopping at the same step, --keep-checkpoints retention and --resume saying where it resumed.
// The signal is sent once the log shows training has started (no fixed sleeps). Bad --data files exit 2.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include "models/json_check.hpp"
#include "temp_dir.hpp"

using tp::json;
namespace fs = std::filesystem;

namespace {

std::string slurp(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Starts `cmd` through sh (its own process group), waits until `log` contains `marker`, sends `sig` to the
// group, and returns the shell's exit status.
int run_and_signal(const std::string& cmd, const fs::path& log, const std::string& marker, int sig) {
  pid_t pid = fork();
  if (pid == 0) {
    setpgid(0, 0);
    execl("/bin/sh", "sh", "-c", cmd.c_str(), (char*)nullptr);
    _exit(127);
  }
  setpgid(pid, pid);
  auto t0 = std::chrono::steady_clock::now();
  while (slurp(log).find(marker) == std::string::npos &&
         std::chrono::steady_clock::now() - t0 < std::chrono::seconds(120))
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  kill(-pid, sig);
  int st = 0;
  waitpid(pid, &st, 0);
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

std::string tiny(const fs::path& dir, int dp) {
  json j = json::parse(slurp(std::string(TP_SOURCE_DIR) + "/scenarios/exec/tiny-gpt.json"));
  j["plan"]["dp"] = dp;
  j["name"] = "tiny-signals";
  fs::path f = dir / ("tiny-dp" + std::to_string(dp) + ".json");
  std::ofstream(f) << j.dump(2);
  return f.string();
}

int count_step_dirs(const fs::path& d) {
  int n = 0;
  for (auto& e : fs::directory_iterator(d)) n += e.path().filename().string().rfind("step_", 0) == 0;
  return n;
}

}  // namespace

TEST(RunSignals, IterationLineEveryStepForShortRuns) {
  tp::testutil::TempDir t("signals_log");
  fs::path log = t.path / "log";
  std::string cmd = std::string(TP_BINARY) + " run " + tiny(t.path, 1) + " --steps 3 --quiet 2> " + log.string();
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  std::string s = slurp(log);
  for (const char* k : {"iteration        3/       3", "consumed samples:", "elapsed time per iteration (ms):",
                        "throughput per GPU (TFLOP/s/GPU):", "learning rate:", "lm loss:", "grad norm:", "peak memory (MB):"})
    EXPECT_NE(s.find(k), std::string::npos) << k << "\n" << s;
  EXPECT_NE(s.find("iteration        1/       3"), std::string::npos);  // every step for runs of <= 20 steps
}

TEST(RunSignals, SigtermCheckpointsWritesJsonAndResumes) {
  tp::testutil::TempDir t("signals_term");
  fs::path log = t.path / "log", ck = t.path / "ck", out = t.path / "o.json";
  std::string sc = tiny(t.path, 1);
  std::string cmd = "exec " + std::string(TP_BINARY) + " run " + sc + " --steps 100000 --checkpoint-dir " + ck.string() +
                    " --checkpoint-every 2 --keep-checkpoints 2 --log-every 3 --json " + out.string() + " 2> " + log.string();
  EXPECT_EQ(run_and_signal(cmd, log, "iteration        9/", SIGTERM), 143);
  json r = json::parse(slurp(out));
  EXPECT_EQ(r["stopped_by_signal"], 15);
  const long steps = (long)r["losses"].size();
  EXPECT_GE(steps, 9);
  EXPECT_LT(steps, 100000);
  std::string s = slurp(log);
  EXPECT_NE(s.find("stopped at step " + std::to_string(steps) + "; last checkpoint:"), std::string::npos) << s;
  EXPECT_EQ(r["last_checkpoint"].get<std::string>(), (ck / ("step_" + std::string(8 - std::to_string(steps).size(), '0') +
                                                              std::to_string(steps))).string());
  EXPECT_LE(count_step_dirs(ck), 2);  // --keep-checkpoints 2
  // --resume says where it resumed, and continues from there.
  fs::path log2 = t.path / "log2", out2 = t.path / "o2.json";
  std::string cmd2 = std::string(TP_BINARY) + " run " + sc + " --steps " + std::to_string(steps + 2) + " --checkpoint-dir " +
                     ck.string() + " --resume --quiet --json " + out2.string() + " 2> " + log2.string();
  ASSERT_EQ(std::system(cmd2.c_str()), 0) << slurp(log2);
  EXPECT_NE(slurp(log2).find("resumed from step " + std::to_string(steps) + ": "), std::string::npos) << slurp(log2);
  EXPECT_EQ(json::parse(slurp(out2))["first_step"], steps);
}

TEST(RunSignals, SigtermUnderMpirunStopsEveryRankAtOneStep) {
#ifndef TP_MPIEXEC
  GTEST_SKIP() << "built without MPI";
#else
  tp::testutil::TempDir t("signals_mpi");
  fs::path log = t.path / "log", ck = t.path / "ck", out = t.path / "o.json";
  // (env execs mpirun in place, so the signal reaches it; its own Open MPI session directory: oracle_run.hpp's
  // mpi_session_env says why)
  std::string cmd = std::string("exec env OMPI_MCA_orte_tmpdir_base=") + t.path.string() + " " + TP_MPIEXEC +
                    " -np 2 --oversubscribe " + TP_MPI_ROOT_FLAG + " " + TP_BINARY +
                    " run " + tiny(t.path, 2) + " --steps 100000 --checkpoint-dir " + ck.string() +
                    " --checkpoint-every 4 --log-every 2 --json " + out.string() + " 2> " + log.string();
  run_and_signal(cmd, log, "iteration        6/", SIGTERM);  // mpirun's own exit code is Open MPI's
  json r = json::parse(slurp(out));
  EXPECT_EQ(r["stopped_by_signal"], 15);
  const long steps = (long)r["losses"].size();
  // the stop step's checkpoint is complete on both ranks (a resume would find it)
  fs::path d = r["last_checkpoint"].get<std::string>();
  EXPECT_TRUE(fs::exists(d / "rank_00000.ckpt"));
  EXPECT_TRUE(fs::exists(d / "rank_00001.ckpt"));
  EXPECT_NE(slurp(log).find("stopped at step " + std::to_string(steps)), std::string::npos) << slurp(log);
#endif
}

// SIGTERM to mpirun itself, as Slurm's pre-emption and `kill <mpirun>` send it (issue 44, item 7): Open MPI 4.1
// forwards it to the ranks and kills them one second later (odls_base_sigkill_timeout). The short steps of the
// tiny model end within that: every rank stops at one step, the stop step's checkpoint is complete, the JSON is
// written, and the ranks exit with 143 at once instead of waiting in MPI_Finalize for the launcher's SIGKILL.
TEST(RunSignals, SigtermToMpirunItselfKeepsCheckpointAndJson) {
#ifndef TP_MPIEXEC
  GTEST_SKIP() << "built without MPI";
#else
  tp::testutil::TempDir t("signals_mpirun");
  fs::path log = t.path / "log", ck = t.path / "ck", out = t.path / "o.json", status = t.path / "status";
  // Each rank is a shell that ignores the signal itself and records trainplan's exit code, if it gets to (the
  // launcher's SIGKILL a second after the signal ends the shell too).
  const std::string rank = std::string(TP_BINARY) + " run " + tiny(t.path, 2) + " --steps 100000 --checkpoint-dir " +
                           ck.string() + " --checkpoint-every 4 --log-every 2 --json " + out.string() +
                           "; echo \"rank $OMPI_COMM_WORLD_RANK exit $?\" >> " + status.string();
  std::string cmd = std::string(TP_MPIEXEC) + " -np 2 --oversubscribe " + TP_MPI_ROOT_FLAG + " sh -c 'trap \"\" TERM INT; " +
                    rank + "'";
  pid_t pid = fork();
  if (pid == 0) {  // mpirun itself is the child: the signal goes to it alone, not to a process group
    setenv("OMPI_MCA_orte_tmpdir_base", t.path.string().c_str(), 1);
    int fd = ::open(log.string().c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, 2);
    execl("/bin/sh", "sh", "-c", ("exec " + cmd).c_str(), (char*)nullptr);
    _exit(127);
  }
  auto t0 = std::chrono::steady_clock::now();
  while (slurp(log).find("iteration        6/") == std::string::npos &&
         std::chrono::steady_clock::now() - t0 < std::chrono::seconds(120))
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  kill(pid, SIGTERM);
  int st = 0;
  waitpid(pid, &st, 0);
  ASSERT_TRUE(fs::exists(out)) << slurp(log);
  json r = json::parse(slurp(out));
  EXPECT_EQ(r["stopped_by_signal"], 15);
  fs::path d = r["last_checkpoint"].get<std::string>();
  EXPECT_TRUE(fs::exists(d / "rank_00000.ckpt"));
  EXPECT_TRUE(fs::exists(d / "rank_00001.ckpt"));
  const std::string s = slurp(log);
  EXPECT_NE(s.find("stopped at step " + std::to_string(r["losses"].size())), std::string::npos) << s;
  // The ranks exit 143 on their own, inside the launcher's second; before, they hung in MPI_Finalize until its
  // SIGKILL and no shell got to record an exit code. (The first rank to exit makes mpirun kill the others, so
  // one line is what every run shows; mpirun's own exit code is Open MPI's: 1.)
  const std::string exits = slurp(status);
  EXPECT_NE(exits.find(" exit 143"), std::string::npos) << exits << s;
  EXPECT_EQ(exits.find(" exit 1\n"), std::string::npos) << exits;
#endif
}

// A bad --data file (not a token file, truncated, missing, ids outside the vocabulary) is bad input: exit 2 with
// one clean line naming --data, checked on every rank before any work.
TEST(RunSignals, BadDataFilesExitTwoBeforeWork) {
  tp::testutil::TempDir t("signals_data");
  std::string sc = tiny(t.path, 1);
  fs::path junk = t.path / "junk.bin";
  std::ofstream(junk) << std::string(1000, 'x');
  for (const std::string& f : {junk.string(), (t.path / "missing.bin").string()}) {
    fs::path log = t.path / "log";
    std::string cmd = std::string(TP_BINARY) + " run " + sc + " --steps 1 --data " + f + " > /dev/null 2> " + log.string();
    int rc = std::system(cmd.c_str());
    EXPECT_EQ(WEXITSTATUS(rc), 2) << f;
    std::string s = slurp(log);
    EXPECT_EQ(s.rfind("error: --data " + f + ": ", 0), 0u) << s;
    EXPECT_EQ(std::count(s.begin(), s.end(), '\n'), 1) << s;
  }
}

// --resume when the newest checkpoint is at or past --steps (killed after its last checkpoint, before its JSON):
// nothing to do, said plainly, exit 0 with an empty JSON record (it crashed before).
TEST(RunSignals, ResumeAtOrPastStepsHasNothingToDo) {
  tp::testutil::TempDir t("signals_done");
  std::string sc = tiny(t.path, 1);
  fs::path ck = t.path / "ck", log = t.path / "log", out = t.path / "o.json";
  std::string base = std::string(TP_BINARY) + " run " + sc + " --steps 4 --checkpoint-dir " + ck.string() + " --log-every 0 --quiet";
  ASSERT_EQ(std::system((base + " --checkpoint-every 2 2> " + log.string()).c_str()), 0);
  int rc = std::system((base + " --resume --json " + out.string() + " 2> " + log.string()).c_str());
  EXPECT_EQ(WEXITSTATUS(rc), 0) << slurp(log);
  EXPECT_NE(slurp(log).find("nothing to do: the checkpoint at step 4 is at or past --steps 4"), std::string::npos) << slurp(log);
  EXPECT_TRUE(json::parse(slurp(out))["losses"].empty());
}

// A resume must continue the same run: another --seed, --lr, --data or precision is refused naming the option
// (exit 2); another --steps only warns that the learning-rate schedule changes.
TEST(RunSignals, ResumeRefusesOtherRunOptions) {
  tp::testutil::TempDir t("signals_opts");
  std::string sc = tiny(t.path, 1);
  fs::path ck = t.path / "ck", log = t.path / "log";
  std::string base = std::string(TP_BINARY) + " run " + sc + " --checkpoint-dir " + ck.string() + " --log-every 0 --quiet";
  ASSERT_EQ(std::system((base + " --steps 2 --checkpoint-every 2 2> " + log.string()).c_str()), 0);
  int rc = std::system((base + " --steps 4 --resume --seed 7 2> " + log.string()).c_str());
  EXPECT_EQ(WEXITSTATUS(rc), 2);
  EXPECT_NE(slurp(log).find("--seed 7 (the checkpoint has 1234)"), std::string::npos) << slurp(log);
  rc = std::system((base + " --steps 4 --resume --lr 0.5 2> " + log.string()).c_str());
  EXPECT_EQ(WEXITSTATUS(rc), 2);
  EXPECT_NE(slurp(log).find("--lr 0.5"), std::string::npos) << slurp(log);
  rc = std::system((base + " --steps 4 --resume 2> " + log.string()).c_str());
  EXPECT_EQ(WEXITSTATUS(rc), 0) << slurp(log);
  EXPECT_NE(slurp(log).find("the learning-rate schedule"), std::string::npos) << slurp(log);
}

// --resume when every checkpoint is corrupt: each is listed with the reason, and the run refuses to restart from
// step 0 (exit 2) unless --resume-or-start allows it.
TEST(RunSignals, ResumeOverOnlyCorruptCheckpointsRefusesToRestart) {
  tp::testutil::TempDir t("signals_corrupt");
  std::string sc = tiny(t.path, 1);
  fs::path ck = t.path / "ck", log = t.path / "log", out = t.path / "o.json";
  std::string base = std::string(TP_BINARY) + " run " + sc + " --checkpoint-dir " + ck.string() + " --log-every 0 --quiet";
  ASSERT_EQ(std::system((base + " --steps 2 --checkpoint-every 2 2> " + log.string()).c_str()), 0);
  fs::path f = ck / "step_00000002" / "rank_00000.ckpt";
  ASSERT_TRUE(fs::exists(f));
  fs::resize_file(f, fs::file_size(f) / 2);  // truncated
  int rc = std::system((base + " --steps 3 --resume 2> " + log.string()).c_str());
  EXPECT_EQ(WEXITSTATUS(rc), 2);
  std::string s = slurp(log);
  EXPECT_NE(s.find("skipped checkpoint step_00000002: rank 0: "), std::string::npos) << s;
  EXPECT_NE(s.find("--resume-or-start"), std::string::npos) << s;
  rc = std::system((base + " --steps 3 --resume-or-start --json " + out.string() + " 2> " + log.string()).c_str());
  EXPECT_EQ(WEXITSTATUS(rc), 0) << slurp(log);
  EXPECT_EQ(json::parse(slurp(out))["first_step"], 0);
}
