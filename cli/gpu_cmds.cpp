// gpu_cmds: `trainplan selftest --backend NAME [--json FILE] [--quick]` and `trainplan --version` — the first
// commands to run on a GPU machine. selftest checks every op of one backend against the CPU float64 reference
// (exec/selftest/selftest.hpp), then (not for cpu) trains a tiny GPT a few steps against the cpu backend
// (selftest_train.cpp), and prints a table and "N passed, M failed". Exit codes: 0 all passed, 1 any failed,
// 2 bad usage or a backend this binary cannot load, 77 the backend has no device here (the reason printed).
// --version names the backends compiled in and, for cuda, the versions read through libtrainplan_cuda.so's
// C ABI (this program links no CUDA library).
#include <cstdio>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "args.hpp"
#include "sim/output.hpp"
#include "exec/backends/backend.hpp"
#include "exec/backends/cuda/cuda_loader.hpp"
#include "exec/selftest/selftest.hpp"

namespace tp::cli {

namespace {
const char* status_name(exec::CheckStatus s) {
  return s == exec::CheckStatus::pass ? "ok" : s == exec::CheckStatus::fail ? "FAIL" : "unsupported";
}

// The backend named `name`, or null after printing why; code gets the exit code (2, or 77 for no device).
const exec::Backend* backend_for_selftest(const std::string& name, int& code) {
  std::string why;
  if (name == "cuda") {
    exec::CudaLoad st;
    const exec::Backend* b = exec::load_cuda_backend(st, why);
    if (b) return b;
    code = st == exec::CudaLoad::no_device ? 77 : 2;
    std::cerr << (code == 77 ? "selftest: skipped: " : "error: ") << why << "\n";
    return nullptr;
  }
  const exec::Backend* b = exec::find_backend(name, why);
  if (!b) {
    code = 2;
    std::cerr << "error: --backend: " << why << "\n";
  }
  return b;
}

// tcs: the training comparisons, when they ran (each counted in passed / failed like an op check).
void write_json(const std::string& file, const exec::SelftestResult& r, const std::vector<exec::TrainCheck>& tcs) {
  int tpassed = 0;
  for (const exec::TrainCheck& tc : tcs) tpassed += tc.status == exec::CheckStatus::pass;
  nlohmann::json j = {{"backend", r.backend}, {"passed", r.passed + tpassed},
                      {"failed", r.failed + int(tcs.size()) - tpassed}, {"unsupported", r.unsupported},
                      {"tolerance_f32", exec::kSelftestTolF32}};
  nlohmann::json tj = nlohmann::json::array();
  for (const exec::TrainCheck& tc : tcs)
    tj.push_back({{"precision", tc.precision}, {"attention", tc.attention}, {"steps", tc.steps},
                  {"losses", tc.got_losses}, {"cpu_losses", tc.want_losses},
                  {"error", std::isfinite(tc.err) ? nlohmann::json(tc.err) : nlohmann::json("inf")},
                  {"tolerance", tc.tol}, {"status", status_name(tc.status)}, {"message", tc.message}});
  if (!tcs.empty()) j["training"] = tj;
  nlohmann::json cs = nlohmann::json::array();
  for (const exec::OpCheck& c : r.checks)
    cs.push_back({{"op", c.op}, {"shape", c.shape}, {"variant", c.variant}, {"dtype", "f32"},
                  {"error", std::isfinite(c.err) ? nlohmann::json(c.err) : nlohmann::json("inf")}, {"tolerance", c.tol},
                  {"status", status_name(c.status)}, {"message", c.message}});
  j["checks"] = cs;
  write_file_atomic(file, j.dump(2) + "\n");  // "-": standard output
}
}  // namespace

int cmd_selftest(int argc, char** argv) {
  Args a = parse_args(argc, argv, 2, {"--backend", "--json"}, {"--quick"});
  if (!a.positional.empty()) throw Usage("selftest takes no positional arguments");
  const std::string name = a.value("--backend", "cpu"), json_file = a.value("--json");
  const bool quick = a.flag("--quick");
  int code = 0;
  const exec::Backend* b = backend_for_selftest(name, code);
  if (!b) return code;
  const exec::SelftestResult r = exec::run_selftest(*b, quick);
  std::printf("selftest: backend %s, fp32 ops against the CPU float64 reference (error = max |got - want| / "
              "(1 + |want|))\n",
              r.backend.c_str());
  std::printf("%-20s %-34s %-32s %10s %9s  %s\n", "op", "shape", "variant", "error", "tolerance", "status");
  for (const exec::OpCheck& c : r.checks) {
    std::printf("%-20s %-34s %-32s %10.2e %9.1e  %s\n", c.op.c_str(), c.shape.c_str(), c.variant.c_str(), c.err, c.tol,
                status_name(c.status));
    if (!c.message.empty()) std::printf("    %s\n", c.message.c_str());
  }
  // Training: a tiny GPT for a few steps on this backend against the CPU backend (not for cpu itself), in fp32 and
  // bf16 with each attention.
  std::vector<exec::TrainCheck> tcs;
  if (std::string(b->name) != "cpu") tcs = exec::run_selftest_training(*b, quick ? 2 : 3);
  int tpassed = 0;
  for (const exec::TrainCheck& tc : tcs) {
    tpassed += tc.status == exec::CheckStatus::pass;
    std::string g, w;
    for (double x : tc.got_losses) g.append(g.empty() ? "" : " ").append(std::to_string(x));
    for (double x : tc.want_losses) w.append(w.empty() ? "" : " ").append(std::to_string(x));
    const bool self = tc.attention.find("against eager") != std::string::npos;  // (graphs against the same backend)
    const std::string ref = self ? r.backend + " eager" : "cpu";
    std::printf("%-20s %-34s %-32s %10.2e %9.1e  %s\n", "training", "tiny GPT, 1 rank",
                (std::to_string(tc.steps) + " steps vs " + ref + " (" + tc.precision + ", " + tc.attention + ")").c_str(),
                tc.err, tc.tol, status_name(tc.status));
    if (!tc.message.empty()) std::printf("    %s\n", tc.message.c_str());
    else std::printf("    losses %s: %s; %s: %s\n", r.backend.c_str(), g.c_str(), ref.c_str(), w.c_str());
  }
  const int failed = r.failed + int(tcs.size()) - tpassed;
  std::printf("%d passed, %d failed", r.passed + tpassed, failed);
  if (r.unsupported) std::printf(", %d not supported on %s (not counted as failures)", r.unsupported, r.backend.c_str());
  std::printf("\n");
  if (!json_file.empty()) write_json(json_file, r, tcs);
  return failed ? 1 : 0;
}

int cmd_version() {
  std::printf("trainplan 0.1.0\n");
  std::string names;
  for (const exec::Backend* b : exec::available_backends()) names += (names.empty() ? "" : ", ") + std::string(b->name);
  if (exec::cuda_built_in()) names += ", cuda (libtrainplan_cuda.so, loaded on demand)";
  std::printf("backends: %s\n", names.c_str());
  if (exec::cuda_built_in()) std::printf("cuda: %s\n", exec::cuda_versions_line().c_str());
  return 0;
}

}  // namespace tp::cli
