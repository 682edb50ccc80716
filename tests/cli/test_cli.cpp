// The command line as users of Megatron-LM / DeepSpeed / Slurm expect it: per-subcommand --help / -h (exit 0),
// --version / -V, --opt=value, "-" for standard output, "did you mean" for misspelt commands and options, and a
// short usage (not the whole manual) on a usage error (exit 2).
#include <gtest/gtest.h>

#include "cli_run.hpp"

#include <sys/wait.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "models/json_check.hpp"
#include "temp_dir.hpp"

namespace fs = std::filesystem;

namespace {

using tp::testutil::Out;

Out tp_run(const std::string& args, const std::string& cwd = ".") {
  std::string cmd = "cd " + cwd + " && " + std::string(TP_BINARY) + " " + args + " 2>&1";
  return tp::testutil::run_shell(cmd);
}

long lines(const std::string& s) { return std::count(s.begin(), s.end(), '\n'); }

const std::string kScenario = std::string(TP_SOURCE_DIR) + "/scenarios/default.json";

}  // namespace

TEST(Cli, HelpPerSubcommandExitsZero) {
  for (const char* cmd : {"simulate", "plan", "run", "validate", "calibrate", "validate-published", "catalog", "collective", "fit",
                          "version"}) {
    for (const char* h : {"--help", "-h"}) {
      Out o = tp_run(std::string(cmd) + " " + h);
      EXPECT_EQ(o.rc, 0) << cmd << " " << h << "\n" << o.text;
      EXPECT_EQ(o.text.rfind("usage:\n  trainplan " + std::string(cmd), 0), 0u) << o.text;
    }
  }
  Out all = tp_run("--help");
  EXPECT_EQ(all.rc, 0);
  EXPECT_NE(all.text.find("Exit codes:"), std::string::npos);
}

TEST(Cli, VersionFlags) {
  for (const char* v : {"--version", "-V", "version"}) {
    Out o = tp_run(v);
    EXPECT_EQ(o.rc, 0) << v;
    EXPECT_EQ(o.text.rfind("trainplan ", 0), 0u) << o.text;
    EXPECT_NE(o.text.find("backends: cpu"), std::string::npos) << o.text;
  }
}

TEST(Cli, MisspeltCommandAndOptionGetSuggestionsAndAShortUsage) {
  Out c = tp_run("simulat " + kScenario);
  EXPECT_EQ(c.rc, 2);
  EXPECT_NE(c.text.find("did you mean \"simulate\"?"), std::string::npos) << c.text;
  EXPECT_LE(lines(c.text), 3) << c.text;
  Out o = tp_run("simulate " + kScenario + " --jsn out.json");
  EXPECT_EQ(o.rc, 2);
  EXPECT_NE(o.text.find("unknown option --jsn for simulate; did you mean \"--json\"?"), std::string::npos) << o.text;
  EXPECT_NE(o.text.find("trainplan simulate SCENARIO.json"), std::string::npos) << o.text;
  EXPECT_LE(lines(o.text), 6) << o.text;  // the command's usage lines, not the 40-line manual
  Out p = tp_run("plan");
  EXPECT_EQ(p.rc, 2);
  EXPECT_LE(lines(p.text), 6) << p.text;
}

TEST(Cli, EqualsValuesAndDashForStdout) {
  tp::testutil::TempDir t("cli_eq");
  std::string f = t.file("o.json");
  Out a = tp_run("simulate " + kScenario + " --json=" + f + " --quiet");
  EXPECT_EQ(a.rc, 0) << a.text;
  EXPECT_TRUE(fs::exists(f));
  Out b = tp_run("simulate " + kScenario + " --json - --quiet", t.path.string());
  EXPECT_EQ(b.rc, 0) << b.text;
  tp::json j = tp::json::parse(b.text);  // the JSON went to standard output
  EXPECT_GT(j["step_time_s"].get<double>(), 0);
  EXPECT_FALSE(fs::exists(t.path / "-"));
}

// Output paths are checked before any work: a missing directory, an empty name or a directory is exit 2 with
// the reason, and a run does not train first.
// run's counts (--steps, --handover-window, ...) are whole numbers in range: 2.5, 1e30, -1 or text are usage
// errors (exit 2) naming the option, never truncated or wrapped; a good value runs.
TEST(Cli, RunCountOptionsAreWholeNumbersInRange) {
  const std::string tiny = std::string(TP_SOURCE_DIR) + "/scenarios/exec/tiny-gpt.json";
  for (const char* bad : {"--handover-window 0", "--handover-window 2.5", "--handover-window abc",
                          "--handover-window 1e30", "--steps -1", "--steps 3.5", "--keep-checkpoints -2",
                          "--log-every 1e10", "--seed -3"}) {
    SCOPED_TRACE(bad);
    Out o = tp_run("run " + tiny + " " + bad);
    EXPECT_EQ(o.rc, 2) << o.text;
    const std::string opt = std::string(bad).substr(0, std::string(bad).find(' '));
    EXPECT_NE(o.text.find(opt + " expects a whole number"), std::string::npos) << o.text;
  }
  Out ok = tp_run("run " + tiny + " --steps 1 --handover-window 97 --seed 7 --quiet");
  EXPECT_EQ(ok.rc, 0) << ok.text;
}

// --comm: mpi or nccl; nccl only with --backend cuda (the GPU's memory) or emu-device (NCCL's stand-in); either
// refusal is exit 2 naming the option, before any work. (With --backend cuda and no device the backend's exit 77
// comes first: docs/cuda.md.)
TEST(Cli, RunCommIsMpiOrNcclWithTheCudaBackend) {
  const std::string tiny = std::string(TP_SOURCE_DIR) + "/scenarios/exec/tiny-gpt.json";
  Out bad = tp_run("run " + tiny + " --steps 1 --comm gloo");
  EXPECT_EQ(bad.rc, 2) << bad.text;
  EXPECT_NE(bad.text.find("--comm: expected mpi or nccl, got 'gloo'"), std::string::npos) << bad.text;
  Out cpu = tp_run("run " + tiny + " --steps 1 --comm nccl");
  EXPECT_EQ(cpu.rc, 2) << cpu.text;
  EXPECT_NE(cpu.text.find("--comm nccl needs --backend cuda (NCCL runs the collectives of GPU memory) or emu-device"),
            std::string::npos) << cpu.text;
  Out ok = tp_run("run " + tiny + " --steps 1 --comm mpi --quiet");
  EXPECT_EQ(ok.rc, 0) << ok.text;
}

// recompute "selective_op" (TorchTitan's op-level checkpointing) is simulated and exported; `run` says it does not
// run it, naming the key, before any work.
TEST(Cli, RunRefusesOpLevelCheckpointingByName) {
  tp::testutil::TempDir d("tp_opsac");
  tp::json j = tp::json::parse(tp::testutil::slurp(std::string(TP_SOURCE_DIR) + "/scenarios/exec/tiny-gpt.json"));
  j["plan"]["recompute"] = "selective_op";
  const std::string f = (d.path / "s.json").string();
  tp::testutil::spit(f, j.dump());
  Out sim = tp_run("simulate " + f + " --quiet");
  EXPECT_EQ(sim.rc, 0) << sim.text;
  Out o = tp_run("run " + f + " --steps 1");
  EXPECT_EQ(o.rc, 2) << o.text;
  EXPECT_TRUE(tp::testutil::has(o.text, "$.plan.recompute \"selective_op\": not supported by `trainplan run` yet")) << o.text;
}

// Every integer option of every command is parsed one way (cli/args parse_count): a fraction, a negative, text
// or a number out of range is a usage error (exit 2) that names the option and its range.
TEST(Cli, EveryIntegerOptionSaysItsRangeTheSameWay) {
  const std::string src = TP_SOURCE_DIR;
  struct Case { std::string args, says; };
  const Case cases[] = {
      {"plan " + src + "/scenarios/plan-default.json --threads 2.5", "--threads expects a whole number from 0 to 1024, got \"2.5\""},
      {"fit " + src + "/data/validation/frameworks-set.json --out /tmp/x.json --threads 0", "--threads expects a whole number from 1 to 256"},
      {"validate " + src + "/scenarios/exec/tiny-gpt.json --profile p.json --steps 1", "--steps expects a whole number from 2 to 100000"},
      {"collective --cluster dgx-h100 --op all_reduce --ranks 8 --factor x", "--factor expects a whole number from 2 to 1024, got \"x\""},
      {"run " + src + "/scenarios/exec/tiny-gpt.json --steps 0", "--steps expects a whole number from 1 to 2147483647, got \"0\""}};
  for (const Case& c : cases) {
    SCOPED_TRACE(c.args);
    Out o = tp_run(c.args);
    EXPECT_EQ(o.rc, 2) << o.text;
    EXPECT_NE(o.text.find(c.says), std::string::npos) << o.text;
  }
}

// An fp16 scenario trains in float32 (no fp16 in the executor): run says so on stderr; a bf16 one says that its
// GEMMs take bf16 operands while tensors stay in float32; an fp32 scenario gets no note.
TEST(Cli, RunSaysWhenItTrainsInAnotherPrecision) {
  tp::testutil::TempDir d("tp_cli_bf16");
  std::ifstream in(std::string(TP_SOURCE_DIR) + "/scenarios/exec/tiny-gpt.json");
  const std::string base((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string f32 = "\"precision\": \"fp32\"";
  ASSERT_NE(base.find(f32), std::string::npos);
  auto with = [&](const std::string& p) {
    std::string text = base;
    text.replace(text.find(f32), f32.size(), "\"precision\": \"" + p + "\"");
    const std::string sc = d.file(p + ".json");
    std::ofstream(sc) << text;
    return sc;
  };
  Out h = tp_run("run " + with("fp16") + " --steps 1 --quiet");
  EXPECT_EQ(h.rc, 0) << h.text;
  EXPECT_NE(h.text.find("note: $.training.precision \"fp16\": run trains in float32"), std::string::npos) << h.text;
  Out o = tp_run("run " + with("bf16") + " --steps 1 --quiet");
  EXPECT_EQ(o.rc, 0) << o.text;
  EXPECT_NE(o.text.find("note: $.training.precision \"bf16\": run computes every GEMM"), std::string::npos) << o.text;
  EXPECT_NE(o.text.find("saved activations are stored as bf16"), std::string::npos) << o.text;
  EXPECT_NE(o.text.find("the GEMMs read bf16 copies of the weights"), std::string::npos) << o.text;
  EXPECT_NE(o.text.find("stay in float32 (no bf16 op table yet)"), std::string::npos) << o.text;
  Out f = tp_run("run " + std::string(TP_SOURCE_DIR) + "/scenarios/exec/tiny-gpt.json --steps 1 --quiet");
  EXPECT_EQ(f.rc, 0) << f.text;
  EXPECT_EQ(f.text.find("note:"), std::string::npos) << f.text;
}

TEST(Cli, OutputPathsCheckedBeforeWork) {
  Out a = tp_run("simulate " + kScenario + " --json /nonexistent-dir/o.json");
  EXPECT_EQ(a.rc, 2);
  EXPECT_NE(a.text.find("--json: cannot write /nonexistent-dir/o.json: no such directory"), std::string::npos) << a.text;
  Out b = tp_run("simulate " + kScenario + " --json \"\"");
  EXPECT_EQ(b.rc, 2);
  EXPECT_NE(b.text.find("--json: expected a file name"), std::string::npos) << b.text;
  Out c = tp_run("run " + std::string(TP_SOURCE_DIR) + "/scenarios/exec/tiny-gpt.json --steps 50 --trace /nonexistent-dir/t.json");
  EXPECT_EQ(c.rc, 2);
  EXPECT_EQ(c.text.find("iteration"), std::string::npos) << c.text;  // no step ran
  Out d = tp_run("plan " + kScenario + " --csv /tmp");
  EXPECT_EQ(d.rc, 2);
  EXPECT_NE(d.text.find("it is a directory"), std::string::npos) << d.text;
  // A directory that passes access(W_OK) for root but refuses new files (sysfs): refused before any step ran.
  if (fs::is_directory("/sys/kernel")) {
    Out e = tp_run("run " + std::string(TP_SOURCE_DIR) + "/scenarios/exec/tiny-gpt.json --steps 50 --json /sys/kernel/o.json");
    EXPECT_EQ(e.rc, 2) << e.text;
    EXPECT_NE(e.text.find("--json: cannot write /sys/kernel/o.json"), std::string::npos) << e.text;
    EXPECT_EQ(e.text.find("iteration"), std::string::npos) << e.text;  // no step ran
  }
}

// trainplan export (export/export.hpp; the mapping itself is tests/export/test_export.cpp): the script on
// stdout or atomically in --out, the refusal with its JSON path and exit 2, a bad --to, --plan.
TEST(Cli, ExportWritesTheFrameworkConfigurationOrRefuses) {
  Out a = tp_run("export " + kScenario + " --to megatron");
  EXPECT_EQ(a.rc, 0) << a.text;
  EXPECT_NE(a.text.find("--tensor-model-parallel-size 8"), std::string::npos) << a.text;
  tp::testutil::TempDir d("tp_export");
  const std::string out = (d.path / "ds.sh").string();
  Out b = tp_run("export " + kScenario + " --to=deepspeed --out " + out);
  EXPECT_EQ(b.rc, 0) << b.text;
  EXPECT_TRUE(fs::exists(out));
  Out c = tp_run("export " + kScenario + " --to torchtitan --out " + (d.path / "t.toml").string());
  EXPECT_EQ(c.rc, 2) << c.text;
  EXPECT_NE(c.text.find("$.model.activation"), std::string::npos) << c.text;
  EXPECT_NE(c.text.find("nearest plan TorchTitan runs"), std::string::npos) << c.text;
  EXPECT_FALSE(fs::exists(d.path / "t.toml"));  // nothing written on a refusal
  Out e = tp_run("export " + kScenario + " --to colossalai");
  EXPECT_EQ(e.rc, 2);
  EXPECT_NE(e.text.find("--to: expected megatron, nemo, deepspeed or torchtitan"), std::string::npos) << e.text;
  Out f = tp_run("export " + kScenario);
  EXPECT_EQ(f.rc, 2);
  EXPECT_NE(f.text.find("--to"), std::string::npos) << f.text;
  Out g = tp_run("export " + kScenario + " --to nemo --plan " + (d.path / "missing.json").string());
  EXPECT_EQ(g.rc, 2) << g.text;
  Out h = tp_run("export --help");
  EXPECT_EQ(h.rc, 0);
  EXPECT_NE(h.text.find("--to megatron|nemo|deepspeed|torchtitan"), std::string::npos) << h.text;
}

// The README's quick path from the planner to a framework: plan-megatron.json's answer exports.
TEST(Cli, PlannerAnswerExportsToMegatron) {
  tp::testutil::TempDir d("tp_export_plan");
  const std::string sc = std::string(TP_SOURCE_DIR) + "/scenarios/plan-megatron.json", res = (d.path / "plan.json").string();
  Out p = tp_run("plan " + sc + " --json " + res + " --quiet");
  ASSERT_EQ(p.rc, 0) << p.text;
  for (const char* to : {"megatron", "nemo"}) {
    Out e = tp_run("export " + sc + " --plan " + res + "#1 --to " + to);
    EXPECT_EQ(e.rc, 0) << to << ": " << e.text;
  }
}
