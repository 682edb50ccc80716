// oracle_run: helpers of the executor's oracle tests (test_run_oracle.cpp, test_run_shapes.cpp): write the tiny
// scenario with plan (and model) fields merged in, run `trainplan run` on it (under mpirun for several ranks,
// bounded by `timeout`), and compare result series to a relative tolerance. Header-only, one copy per test file.
#pragma once

#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "models/json_check.hpp"

namespace oracle {

using tp::json;
namespace fs = std::filesystem;

inline std::string tmpdir() {
  static std::string d = [] {
    fs::path p = fs::temp_directory_path() / ("trainplan-oracle-" + std::to_string(::getpid()));
    fs::create_directories(p);
    return p.string();
  }();
  return d;
}

// Writes the tiny scenario with `plan` merged over its plan; returns the file.
// `model` fields (if any) are merged over the model.
// The whole of a run's log (run() writes FILE.log beside the scenario FILE).
inline std::string log_text(const std::string& file) {
  std::ifstream in(file + ".log");
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

inline std::string scenario(const std::string& name, const json& plan, long long global_batch = 8, long long seq_len = 0,
                            const json& model = json::object()) {
  std::ifstream in(std::string(TP_SOURCE_DIR) + "/scenarios/exec/tiny-gpt.json");
  json j = json::parse(in);
  for (auto it = model.begin(); it != model.end(); ++it) j["model"][it.key()] = it.value();
  for (auto it = plan.begin(); it != plan.end(); ++it) j["plan"][it.key()] = it.value();
  j["training"]["global_batch"] = global_batch;
  if (seq_len > 0) j["training"]["seq_len"] = j["model"]["seq_len"] = seq_len;
  std::string f = tmpdir() + "/" + name + ".json";
  std::ofstream(f) << j.dump(2);
  return f;
}

inline int ranks_of(const std::string& file) {
  std::ifstream in(file);
  json p = json::parse(in)["plan"];
  auto n = [](const json& q) { return q.value("dp", 1) * q.value("tp", 1) * q.value("pp", 1) * q.value("cp", 1); };
  // Pseudo-to-Real with a pseudo plan on more GPUs: the job has its ranks (exec::job_ranks)
  return std::max(n(p), p.contains("delink") && p["delink"].contains("plan") ? n(p["delink"]["plan"]) : 1);
}

// `timeout` turns a hung several-rank job into a failure (exit 124). Under AddressSanitizer (with the full unwinder
// below) eight ranks of the emu backends on two cores take minutes where they take seconds otherwise.
#if defined(__SANITIZE_ADDRESS__)
constexpr const char* kRunTimeout = "timeout 900 ";
#else
constexpr const char* kRunTimeout = "timeout 120 ";
#endif

// A shell assignment giving this test process's mpirun jobs their own Open MPI session directory (under
// tmpdir()). Jobs of two tests that share /tmp/ompi.<host>.<uid> race: the first to end removes that directory
// while the other creates its own inside it ("A call to mkdir was unable to create ... /tmp/ompi.vm.0/pid.N",
// orte_session_dir failed; seen once in CI on 2026-11-27). Open MPI 4's variable; others ignore it.
inline std::string mpi_session_env() { return "OMPI_MCA_orte_tmpdir_base=" + tmpdir() + " "; }

// The command prefix that starts n ranks of a trainplan command under mpirun (with the run timeout); "" when
// the build has no MPI.
inline std::string mpi_launcher(int n) {
#ifdef TP_MPIEXEC
  std::string launcher = mpi_session_env() + std::string(kRunTimeout) + std::string(TP_MPIEXEC) + " -np " +
                         std::to_string(n) + " --oversubscribe " + TP_MPI_ROOT_FLAG + " ";
#if defined(__SANITIZE_ADDRESS__)
  // Open MPI's plugins have no frame pointers and are unloaded before LeakSanitizer reports, so the fast
  // unwinder records one stale frame for their one-time allocations and scripts/lsan_openmpi.supp cannot match
  // them; the full unwinder records the libopen-pal / libmpi frames beneath.
  launcher = "ASAN_OPTIONS=\"${ASAN_OPTIONS}:fast_unwind_on_malloc=0\" " + launcher;
#endif
  return launcher;
#else
  (void)n;
  return "";
#endif
}

// Sets an environment variable for this scope (the ranks mpirun starts inherit it), restoring it after.
struct ScopedEnv {
  std::string name;
  bool had = false;
  std::string old;
  ScopedEnv(const char* n, const char* value) : name(n) {
    if (const char* v = std::getenv(n)) had = true, old = v;
    setenv(n, value, 1);
  }
  ~ScopedEnv() { had ? setenv(name.c_str(), old.c_str(), 1) : unsetenv(name.c_str()); }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;
};
// The pipelines' point-to-point under NCCL's semantics (exec/comm/comm_mpi.cpp's stand-in: a send completes only
// as its receive runs): a schedule whose exchanges deadlock on a GPU aborts the job, naming the waiting operation,
// instead of passing on MPI's buffered sends. Results are unchanged (the same rank-ordered sums).
inline ScopedEnv nccl_rendezvous() { return ScopedEnv("TP_COMM_RENDEZVOUS", "60"); }

// Runs the plan; returns the result JSON (null on failure) and the exit code.
inline json run(const std::string& file, int steps, bool fp64, int* code = nullptr, std::string extra = "") {
  int n = ranks_of(file);
  std::string out = file + (fp64 ? ".f64" : ".f32") + ".out.json";
  std::string launcher;
  if (n > 1) {
    launcher = mpi_launcher(n);
    if (launcher.empty()) return nullptr;
  }
  std::string cmd = launcher + TP_BINARY + " run " + file + " --steps " + std::to_string(steps) + (fp64 ? " --fp64" : "") +
                    " --quiet --json " + out + " " + extra + " > " + file + ".log 2>&1";
  int rc = std::system(cmd.c_str());
  int ec = WIFEXITED(rc) ? WEXITSTATUS(rc) : 128;
  if (code) *code = ec;
  if (ec != 0) return nullptr;
  std::ifstream in(out);
  return json::parse(in);
}

inline void expect_close(const json& got, const json& want, const char* key, double tol, const std::string& what) {
  ASSERT_EQ(got[key].size(), want[key].size()) << what;
  for (size_t i = 0; i < want[key].size(); ++i) {
    double a = got[key][i].get<double>(), b = want[key][i].get<double>();
    EXPECT_LE(std::abs(a - b), tol * std::abs(b)) << what << " " << key << "[" << i << "]: " << a << " vs " << b;
  }
}

// The bundled scenario scenarios/exec/<base>.json with `plan` merged over its plan and training.precision set
// (and the cluster, when given), written as tmpdir()/<prefix>_<name>.json.
inline std::string precision_scenario(const std::string& prefix, const std::string& name, const json& plan,
                                      const std::string& base, const std::string& precision,
                                      const std::string& cluster = "") {
  std::ifstream in(std::string(TP_SOURCE_DIR) + "/scenarios/exec/" + base + ".json");
  json j = json::parse(in);
  for (auto it = plan.begin(); it != plan.end(); ++it) j["plan"][it.key()] = it.value();
  j["training"]["precision"] = precision;
  if (!cluster.empty()) j["cluster"] = cluster;
  std::string f = tmpdir() + "/" + prefix + "_" + name + ".json";
  std::ofstream(f) << j.dump(2);
  return f;
}

// The emu and emu-device backends' float64 runs of make(name) (name "emu_<backend>") have the losses and gradient
// norms of `want` to 1e-9.
template <class Make>
void expect_emu_backends_match(const json& want, int steps, Make make) {
  for (const char* be : {"emu", "emu-device"}) {
    const std::string f = make(std::string("emu_") + be);
    json got = run(f, steps, true, nullptr, std::string("--backend ") + be);
    ASSERT_FALSE(got.is_null()) << be << "\n" << log_text(f);
    expect_close(got, want, "losses", 1e-9, be);
    expect_close(got, want, "grad_norm", 1e-9, be);
  }
}

// Each named plan, written by make(name, plan) and run for `steps` float64 steps, has the losses and gradient
// norms of `want` to 1e-9.
struct PlanCase {
  std::string name;
  json plan;
};
template <class Make>
void expect_plans_match(const std::vector<PlanCase>& cases, const json& want, int steps, Make make) {
  for (const PlanCase& c : cases) {
    const std::string f = make(c.name, c.plan);
    json got = run(f, steps, true);
    ASSERT_FALSE(got.is_null()) << c.name << "\n" << log_text(f);
    expect_close(got, want, "losses", 1e-9, c.name);
    expect_close(got, want, "grad_norm", 1e-9, c.name);
  }
}

// Removes the checkpoints of steps (after, last] under dir, so a --resume starts from the one after `after`.
inline void drop_checkpoints_after(const std::string& dir, int after, int last) {
  for (int later = after + 1; later <= last; ++later) {
    char name[32];
    std::snprintf(name, sizeof name, "/step_%08d", later);
    std::filesystem::remove_all(dir + name);
  }
}

inline bool have_mpi() {
#ifdef TP_MPIEXEC
  return true;
#else
  return false;
#endif
}


// Checkpoints on a backend (`flag`, e.g. "--backend emu"): a run checkpointed every 2 steps reproduces the
// uninterrupted fp32 run `e32` of the same file, and a resume at step 2 reproduces its last step bit for bit.
inline void expect_resume_bit_identical(const std::string& f, int steps, const json& e32, const std::string& flag,
                                        const std::string& dir_name) {
  const std::string dir = tmpdir() + "/" + dir_name;
  fs::remove_all(dir);
  json first = run(f, steps, false, nullptr, flag + " --checkpoint-dir " + dir + " --checkpoint-every 2");
  json resumed = run(f, steps, false, nullptr, flag + " --checkpoint-dir " + dir + " --resume");
  std::ifstream log(f + ".log");
  const std::string text((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
  ASSERT_FALSE(first.is_null()) << text;
  ASSERT_FALSE(resumed.is_null()) << text;
  EXPECT_EQ(first["losses"], e32["losses"]);
  EXPECT_EQ(resumed["first_step"], 2);
  ASSERT_EQ(resumed["losses"].size(), 1u);
  EXPECT_EQ(resumed["losses"][0], e32["losses"][2]);
}

}  // namespace oracle
