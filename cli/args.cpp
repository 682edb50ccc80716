// args: see args.hpp.
#include "args.hpp"

#include <cmath>
#include <cstdlib>

#include <CLI/CLI.hpp>

#include <algorithm>
#include <iostream>
#include <map>
#include <sstream>

#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "models/catalog.hpp"
#include "models/json_check.hpp"
#include "models/safe_io.hpp"

namespace tp {

const char* const kHelp =
    "trainplan — predict, plan and check the training of large transformers\n"
    "\n"
    "usage:\n"
    "  trainplan simulate SCENARIO.json [--json FILE] [--trace FILE [--trace-detail op|layer|chunk]]\n"
    "                     [--full-cluster] [--quiet]\n"
    "      simulate one training step of the scenario's plan and estimate the whole run\n"
    "  trainplan plan SCENARIO.json [--json FILE] [--csv FILE] [--trace FILE] [--emit DIR] [--threads N] [--quiet]\n"
    "      search every plan for the scenario's \"search\" block: top plans (simulated), Pareto front (GPUs,\n"
    "      time to train, cost), why the alternatives lose; exit 3 when no plan fits; --emit DIR writes\n"
    "      DIR/best.json, DIR/top2.json, ...: the scenario with each top plan, runnable as it stands\n"
    "  trainplan report SPEC.report.json --out DIR [--quiet]\n"
    "  trainplan report SCENARIO.json [SCENARIO.json ...] --out DIR [--quiet]\n"
    "      write a report to DIR: report.md, report.html (self-contained, SVG figures inline), figures/*.svg,\n"
    "      data.json, data.csv. A spec (docs/reports.md) names runs, checks of published claims and figures;\n"
    "      scenario files are compared side by side (one with a search block is planned first)\n"
    "  trainplan validate-published [--suite dev|h100|FILE.json] [--cluster NAME] [--json FILE] [--emit DIR]\n"
    "      regenerate the published rows of the dev suite (A100, 2021) or of the H100 development set\n"
    "      and print predicted vs published; --emit DIR writes each row of a set as the scenario it is simulated as\n"
    "  trainplan run SCENARIO.json [--steps N] [--json FILE] [--fp64] [--seed S] [--lr LR] [--data TOKENS.bin]\n"
    "                [--delink-step N] [--checkpoint-dir DIR [--checkpoint-every K] [--resume | --resume-or-start] [--keep-checkpoints K]]\n"
    "                [--trace FILE] [--log-every N] [--metrics FILE.jsonl] [--plan PLAN.json[#k]]   (the k-th plan of a plan --json result)\n"
    "                [--handover-window N]   (Pseudo-to-Real over two plans: parameters per window of the state\n"
    "                handed to the real plan; default 4194304)\n"
    "                [--device-budget BYTES]   (plan.offload chunked: the per-rank device arena; default\n"
    "                gpu_memory_fraction x the cluster GPU's HBM) [--backend cpu|emu|emu-device|cuda] [--comm mpi|nccl]\n"
    "                [--gpu-memory-budget BYTES]   (cuda, emu-device: a smaller GPU, emulated by the allocator)\n"
    "                [--no-bf16-weight-copies]   (precision bf16: no bf16 copies of the weights; each GEMM rounds\n"
    "                the fp32 weights itself: the same results, a check)\n"
    "                [--cuda-graphs auto|on|off]   (cuda, emu-device: the steady step captured once and replayed\n"
    "                as a graph; auto: as plan.cuda_graphs says; one GPU without offload, MoE, ZeRO-2/3 or --trace)\n"
    "      train the scenario's GPT with its plan (one process per rank: mpirun -np GPUS / srun); --backend\n"
    "      picks the compute backend: cpu (default), emu (the GPU kernels on a CPU emulator of a thread block:\n"
    "      slow, for checking them), emu-device (emu with tensor memory the host cannot read, as on a GPU:\n"
    "      checks the host staging), cuda (one GPU per rank, the local rank's; float32, no --fp64; no device\n"
    "      -> exit 77 with the reason; run `trainplan selftest --backend cuda` first, docs/cuda.md); --comm nccl\n"
    "      (with --backend cuda) runs the GPU tensors' collectives and the pipeline's sends on NCCL, dlopened\n"
    "      (TRAINPLAN_NCCL_LIB), sums not in rank order (with emu-device: NCCL's table emulated over MPI);\n"
    "      mpi (default) stages them through host memory with rank-ordered exact sums\n"
    "  trainplan selftest [--backend cpu|emu|cuda] [--json FILE] [--quick]\n"
    "      every op of the backend against the CPU float64 reference; exit 0 all pass, 1 any fails,\n"
    "      77 no device for the backend\n"
    "  trainplan calibrate --backend cpu|cuda|emu|emu-device --out PROFILE.json [--quick] [--gpus-per-node N]\n"
    "                      [--memory-bytes B] [--power-w W] [--comm mpi|nccl]\n"
    "      measure this machine (GEMM, memory, element-wise ops; links under mpirun -np 2+) and write a cluster\n"
    "      profile for scenarios (\"cluster\": <its contents>); cuda (emu, emu-device: the same code on the CPU\n"
    "      emulator): the device's bf16 GEMMs, flash attention, memory, pinned PCIe and launch cost (no device: 77);\n"
    "      under mpirun also the collectives between the ranks (--comm nccl: NCCL's), nccl-tests' bus bandwidths\n"
    "  trainplan validate SCENARIO.json --profile PROFILE.json [--steps N] [--json FILE] [--device-budget BYTES]\n"
    "                     [--tolerance F] [--backend cpu|cuda|emu-device] [--delink-step N] [--comm mpi|nccl]\n"
    "      run the plan for N steps (under mpirun like run) and compare with the simulation on the profile:\n"
    "      step time, time per op class, peak memory; with --tolerance (e.g. 0.10) exit 1 when step time or\n"
    "      peak memory misses it; --backend cuda (emu-device: the emulator) runs on the device and compares step\n"
    "      time by the device's events and the allocator's peak (with a profile from calibrate --backend of the\n"
    "      same backend); --comm nccl: the collectives on NCCL, as run's\n"
    "  trainplan export SCENARIO.json --to megatron|nemo|deepspeed|torchtitan [--out FILE] [--plan PLAN.json[#k]]\n"
    "      the plan as the framework's configuration: Megatron-LM pretrain_gpt.py arguments, NeMo 2 recipe\n"
    "      overrides, a DeepSpeed ds_config.json with Megatron-DeepSpeed arguments, or a TorchTitan TOML job\n"
    "      config (docs/export.md); a plan feature the framework cannot express is an error (exit 2) naming\n"
    "      it and the nearest plan the framework runs\n"
    "  trainplan collective --cluster NAME|FILE.json --op all_reduce|all_gather|reduce_scatter|all_to_all|send_recv\n"
    "                       --ranks N [--ranks-per-node K] [--bytes MIN:MAX] [--factor F] [--algo A] [--proto P]\n"
    "                       [--json FILE|-]\n"
    "      a collective as NCCL runs it on the cluster (NCCL's topology graphs and tuning model, docs/collectives.md):\n"
    "      per size (default 1M:8G, x2) the time, algorithm and bus bandwidth as nccl-tests prints them, with\n"
    "      the algorithm, protocol and channels NCCL picks (--algo ring|tree|nvls|nvlstree|collnetdirect|\n"
    "      collnetchain and --proto ll|ll128|simple force them, as NCCL_ALGO / NCCL_PROTO do)\n"
    "  trainplan fit RUNS.json [RUNS.json ...] --out PROFILE.json [--framework NAME] [--params P,...]\n"
    "                [--threads N] [--json FILE] [--quiet]\n"
    "      fit a framework profile to measured runs (docs/fit.md): compute and network efficiency scales and a\n"
    "      fixed cost per step; RUNS.json lists scenarios with measured step times or Megatron-LM / DeepSpeed /\n"
    "      TorchTitan logs, or is a validation set whose --framework rows are the runs; prints the values with\n"
    "      their standard errors, each run's error before and after, and the leave-one-out error\n"
    "  trainplan catalog [gpus|clusters|models|NAME] [--json FILE|-]\n"
    "      list the bundled catalog; NAME: that entry as the inline object a scenario takes in its place\n"
    "  trainplan version | --version | -V\n"
    "      the version, the backends compiled in and, for cuda, the CUDA / cuBLASLt / NCCL versions\n"
    "\n"
    "`trainplan COMMAND --help` shows one command. Exit codes: 0 success, 1 a failure while running (or a\n"
    "validate tolerance missed), 2 bad input or usage, 3 no plan fits, 77 a backend without a device,\n"
    "130 / 143 stopped by SIGINT / SIGTERM (run).\n";

const std::vector<std::string> kCommands = {"simulate", "plan", "report", "validate-published", "run", "calibrate",
                                            "validate", "selftest", "catalog", "export", "collective", "fit", "version"};

bool Args::flag(const std::string& n) const {
  for (auto& o : options) if (o.first == n) return true;
  return false;
}

std::string Args::value(const std::string& n, const std::string& dflt) const {
  for (auto& o : options) if (o.first == n) return o.second;
  return dflt;
}

std::string did_you_mean(const std::string& word, const std::vector<std::string>& known) {
  std::string near = closest_name(word, known);
  return near.empty() ? "" : "; did you mean \"" + near + "\"?";
}

// kHelp's sections: "  trainplan CMD ..." starts one (report has two), indented lines continue it.
static std::map<std::string, std::string> help_sections() {
  std::map<std::string, std::string> out;
  std::istringstream in(kHelp);
  std::string line, cur;
  while (std::getline(in, line)) {
    if (line.rfind("  trainplan ", 0) == 0) {
      std::string rest = line.substr(12);
      cur = rest.substr(0, rest.find(' '));
    } else if (line.empty() || line[0] != ' ') {
      cur.clear();
    }
    if (!cur.empty()) out[cur] += line + "\n";
  }
  return out;
}

std::string command_help(const std::string& cmd) {
  auto s = help_sections();
  auto it = s.find(cmd);
  return it == s.end() ? "" : "usage:\n" + it->second;
}

std::string command_usage(const std::string& cmd) {
  std::istringstream in(command_help(cmd));
  std::string line, out;
  std::getline(in, line);  // "usage:"
  // usage lines and their continuations (deeply indented); the description is indented by exactly six spaces
  while (std::getline(in, line) && !(line.rfind("      ", 0) == 0 && line.size() > 6 && line[6] != ' ')) out += line + "\n";
  return out;
}

// A probe file created and removed in dir, as an output will be written there (a fresh file, then a rename):
// access(W_OK) is not enough (root passes it where a filesystem such as /sys, or an immutable folder, refuses).
static void probe_writable(const std::string& opt, const std::string& path, const std::filesystem::path& dir) {
  std::string probe = (dir / ".trainplan-probe-XXXXXX").string();
  const int fd = ::mkstemp(probe.data());
  if (fd < 0) throw InputError({opt + ": cannot write " + path + ": " + std::strerror(errno) + " (" + dir.string() + ")"});
  ::close(fd);
  ::unlink(probe.c_str());
}

// Output files (--json, --trace, --csv, --out) are checked before any work, so a run never trains for minutes
// and then loses its results: a name (not ""), an existing, writable directory, not a directory itself.
static void check_output_path(const std::string& opt, const std::string& path) {
  namespace fs = std::filesystem;
  if (path.empty()) throw InputError({opt + ": expected a file name (or - for standard output), got an empty string"});
  if (path == "-") return;
  fs::path dir = fs::path(path).parent_path();
  if (dir.empty()) dir = ".";
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    throw InputError({opt + ": cannot write " + path + ": " + (fs::exists(dir, ec) ? "not a directory: " : "no such directory: ") + dir.string()});
  if (fs::is_directory(path, ec)) throw InputError({opt + ": cannot write " + path + ": it is a directory"});
  probe_writable(opt, path, dir);
}

void check_output_dir(const std::string& opt, const std::string& dir) {
  namespace fs = std::filesystem;
  if (dir.empty()) throw InputError({opt + ": expected a folder name, got an empty string"});
  if (dir == "-") throw InputError({opt + ": expected a folder name; - (standard output) cannot hold several files"});
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (!fs::is_directory(dir))
    throw InputError({opt + ": cannot write into " + dir + ": " +
                      (ec ? ec.message() : "it is " + (file_kind_of(dir).empty() ? std::string("a regular file") : file_kind_of(dir)))});
  probe_writable(opt, dir, dir);
}

Args parse_args(int argc, char** argv, int from, const std::vector<std::string>& valued,
                const std::vector<std::string>& flags) {
  const std::string cmd = argv[from - 1];
  CLI::App app("trainplan " + cmd, "trainplan " + cmd);
  app.set_help_flag();  // our own -h / --help below: the command's section of the manual
  bool help = false;
  app.add_flag("-h,--help", help);
  std::vector<std::string> vals(valued.size()), positional;
  std::vector<bool> given_flag(flags.size());
  std::vector<CLI::Option*> opts;
  for (size_t i = 0; i < valued.size(); ++i) opts.push_back(app.add_option(valued[i], vals[i])->allow_extra_args(false));
  std::vector<CLI::Option*> fopts;
  for (size_t i = 0; i < flags.size(); ++i) fopts.push_back(app.add_flag(flags[i]));
  app.add_option("args", positional);
  app.allow_extras(false);
  std::vector<std::string> known = valued;
  known.insert(known.end(), flags.begin(), flags.end());
  known.push_back("--help");
  std::vector<std::string> rev;
  for (int i = argc - 1; i >= from; --i) rev.push_back(argv[i]);
  try {
    app.parse(rev);
  } catch (const CLI::ParseError& e) {
    std::string msg = e.what();
    // unknown option: name it and suggest the closest known one
    for (int i = from; i < argc; ++i) {
      std::string s = argv[i];
      std::string name = s.substr(0, s.find('='));
      if (name.rfind("-", 0) == 0 && name != "-" && std::find(known.begin(), known.end(), name) == known.end() && name != "-h")
        throw Usage("unknown option " + name + " for " + cmd + did_you_mean(name, known));
    }
    throw Usage(msg);
  }
  if (help) {
    std::cout << command_help(cmd);
    throw HelpShown{};
  }
  Args a;
  a.positional = positional;
  for (size_t i = 0; i < valued.size(); ++i)
    if (opts[i]->count() > 0) {
      a.options.push_back({valued[i], vals[i]});
      if (valued[i] == "--json" || valued[i] == "--trace" || valued[i] == "--csv" || valued[i] == "--out")
        check_output_path(valued[i], vals[i]);
      else if (valued[i] == "--emit")
        check_output_dir(valued[i], vals[i]);
      else if (vals[i].empty())  // --steps '' is not the default: every option given takes a value
        throw Usage(valued[i] + " expects a value, got an empty string");
    }
  for (size_t i = 0; i < flags.size(); ++i)
    if (fopts[i]->count() > 0) a.options.push_back({flags[i], ""});
  return a;
}

long long parse_count(const std::string& opt, const std::string& text, long long lo, long long hi) {
  char* end = nullptr;
  const double x = text.empty() ? NAN : std::strtod(text.c_str(), &end);
  if (!end || *end || !(x >= double(lo) && x <= double(hi)) || x != std::floor(x))
    throw Usage(opt + " expects a whole number from " + std::to_string(lo) + " to " + std::to_string(hi) + ", got \"" + text +
                "\"");
  return (long long)x;
}

long long count_option(const Args& a, const std::string& opt, long long lo, long long hi, long long dflt) {
  bool given = false;
  for (const auto& [name, value] : a.options) given = given || name == opt;
  return given ? parse_count(opt, a.value(opt), lo, hi) : dflt;
}

}  // namespace tp
