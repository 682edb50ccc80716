// trainplan: the command-line program. Subcommands: simulate, validate-published, run, calibrate, validate,
// catalog, export, version, selftest (gpu_cmds.cpp); --version / -V.
// Exit codes: 0 success, 2 bad input or usage (message names the JSON path and what was expected),
// 1 internal error. Output files are written atomically and only after the whole run succeeded.
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "models/catalog.hpp"
#include "models/scenario.hpp"
#include "sim/output.hpp"
#include "sim/simulate.hpp"
#include "args.hpp"
#include "catalog_cmd.hpp"
#include "collective_cmd.hpp"
#include "fit_cmd.hpp"
#include "sim/validate_nccl.hpp"
#include "sim/validate_devset.hpp"
#include "sim/validate_published.hpp"
#include "exec/backends/backend.hpp"
#include "exec/measure/calibrate.hpp"
#include "exec/io/checkpoint.hpp"
#include "exec/backends/cuda/cuda_loader.hpp"
#include "exec/comm/device_comm.hpp"
#include "exec/comm/comm.hpp"
#include "exec/runtime/train.hpp"
#include "exec/measure/validate.hpp"
#include "export/export.hpp"
#include "planner/search.hpp"
#include "reports/report.hpp"

#include <unistd.h>

using namespace tp;

namespace tp::cli {
int cmd_selftest(int argc, char** argv);
int cmd_version();
}  // namespace tp::cli

namespace {

// Loading warnings (valid input that is not fully modelled) on stderr; they never change the exit code.
void print_warnings(const Scenario& sc) {
  for (const std::string& w : sc.warnings) std::cerr << "warning: " << w << "\n";
}

// Every output of a command, or none: each option's text (skipped when the option was not given) goes to a
// temporary, and all are renamed into place only when all are written (models/safe_io.hpp).
void write_outputs(const Args& a, const std::vector<std::pair<std::string, std::string>>& texts,
                   std::vector<OutputFile> files = {}) {  // `files`: more outputs of the same command
  for (const auto& [opt, text] : texts)
    if (!a.value(opt).empty() && !text.empty()) files.emplace_back(a.value(opt), text);
  write_outputs_atomic(files);
}

int cmd_simulate(int argc, char** argv) {
  Args a = parse_args(argc, argv, 2, {"--json", "--trace", "--trace-detail"}, {"--full-cluster", "--quiet"});
  std::string detail = a.value("--trace-detail", "op");
  if (detail != "op" && detail != "layer" && detail != "chunk") throw Usage("--trace-detail must be op, layer or chunk");
  if (a.positional.size() != 1) throw Usage("simulate needs exactly one scenario file");
  Scenario sc = load_scenario(a.positional[0]);
  print_warnings(sc);
  SimOptions opt;
  opt.full_cluster = a.flag("--full-cluster");
  opt.keep_memory_timeline = !a.value("--trace").empty();
  Result r = simulate(sc, opt);
  std::string json_text, trace_text;
  if (!a.value("--json").empty()) json_text = result_to_json(r).dump(2) + "\n";
  if (!a.value("--trace").empty())
    trace_text = trace_to_json(r, detail == "op" ? TraceDetail::op : detail == "layer" ? TraceDetail::layer : TraceDetail::chunk).dump() + "\n";
  write_outputs(a, {{"--json", json_text}, {"--trace", trace_text}});
  if (!a.flag("--quiet")) print_summary(std::cout, r);
  // A plan that does not fit still has its outputs written (they say why); the exit code says so, as `plan`'s 3
  // when no plan fits, so a script does not take the prediction for a runnable plan.
  const bool delink_fits = !r.delink || !r.delink->pseudo || (r.delink->pseudo->fits && r.delink->pseudo->host_fits);
  if (!r.fits || !r.host_fits || !delink_fits) {
    std::cerr << "note: the plan does not fit (" << (!r.fits || !delink_fits ? "GPU memory" : "host memory")
              << "); exit code 3\n";
    return 3;
  }
  return 0;
}

// Progress bar with ETA on stderr (only when it is a terminal).
void progress_bar(double frac, double elapsed_s) {
  int width = 30, filled = (int)(frac * width + 0.5);
  std::string bar(filled, '#');
  bar.resize(width, '.');
  double eta = frac > 0.02 ? elapsed_s * (1 - frac) / frac : 0;
  std::fprintf(stderr, "\r  searching [%s] %3.0f%%  %.1f s elapsed, ETA %.1f s   ", bar.c_str(), frac * 100, elapsed_s, eta);
  if (frac >= 1) std::fprintf(stderr, "\n");
}

// Progress when stderr is not a terminal (a log file, a pipe, a batch job): one line at the start, one every
// kProgressEvery_s seconds and one at the end, so a long search shows it is alive.
constexpr double kProgressEvery_s = 5;
void progress_lines(double frac, double elapsed_s) {
  static double last_s = -1;
  if (last_s >= 0 && frac < 1 && elapsed_s - last_s < kProgressEvery_s) return;
  last_s = elapsed_s;
  double eta = frac > 0.02 && frac < 1 ? elapsed_s * (1 - frac) / frac : 0;
  std::fprintf(stderr, "searching: %3.0f%% (%s), %.1f s elapsed, ETA %.1f s\n", frac * 100,
               frac < kProgressEstimateShare ? "estimating" : frac < 1 ? "confirming by simulation" : "done", elapsed_s, eta);
}

int cmd_plan(int argc, char** argv) {
  Args a = parse_args(argc, argv, 2, {"--json", "--csv", "--threads", "--trace", "--emit"}, {"--quiet"});
  if (a.positional.size() != 1) throw Usage("plan needs exactly one scenario file (with a \"search\" block)");
  const std::string emit = a.value("--emit");  // the folder for the top plans' scenarios: made by parse_args
  Scenario sc = load_scenario(a.positional[0], true);
  print_warnings(sc);
  if (!sc.search) throw InputError({a.positional[0] + ": $.search: missing; `trainplan plan` needs a search block (use simulate for a plan)"});
  PlanOptions opt;
  opt.threads = (int)count_option(a, "--threads", 0, 1024, 0);
  if (!a.flag("--quiet")) opt.progress = isatty(2) ? progress_bar : progress_lines;
  PlanOutcome o = plan_search(sc, opt);
  std::string json_text, csv_text, trace_text;
  if (!a.value("--json").empty()) json_text = plan_outcome_to_json(o).dump(2) + "\n";
  if (!a.value("--csv").empty()) csv_text = plan_outcome_to_csv(o);
  if (!a.value("--trace").empty() && !o.top.empty()) trace_text = trace_to_json(*o.top[0].sim, TraceDetail::layer).dump() + "\n";
  // --emit: best.json, top2.json, ...: runnable scenarios of the top plans (OutputFile views its text: the
  // texts live in emitted_texts, built in full before any view is taken)
  std::vector<std::string> emitted_texts;
  std::vector<OutputFile> emitted;
  if (!emit.empty() && !o.top.empty()) {
    Issues is;
    json raw = parse_json_file(a.positional[0], a.positional[0], is);
    for (size_t i = 0; i < o.top.size(); ++i) emitted_texts.push_back(emitted_scenario(raw, a.positional[0], o.top[i]).dump(2) + "\n");
    for (size_t i = 0; i < o.top.size(); ++i)
      emitted.emplace_back((std::filesystem::path(emit) / (i == 0 ? std::string("best.json") : "top" + std::to_string(i + 1) + ".json")).string(),
                           emitted_texts[i]);
  }
  write_outputs(a, {{"--json", json_text}, {"--csv", csv_text}, {"--trace", trace_text}}, emitted);
  print_plan_outcome(std::cout, o);  // --quiet silences the progress only: the answer is what was asked for
  return o.top.empty() ? 3 : 0;
}

// run --plan PLAN.json[#k]: the scenario with the k-th plan (default the best) of a `plan --json` result, its
// global batch and precision, validated like a scenario's own plan.
Scenario with_planner_choice(const Scenario& sc, const std::string& scenario_file, const std::string& arg) {
  std::string file = arg;
  int k = 1;
  if (auto h = arg.rfind('#'); h != std::string::npos) {
    file = arg.substr(0, h);
    char* end = nullptr;
    long v = std::strtol(arg.c_str() + h + 1, &end, 10);
    if (!end || *end || v < 1 || v > 100000) throw Usage("--plan expects PLAN.json or PLAN.json#k with k >= 1, got " + arg);
    k = (int)v;
  }
  Issues is;
  json result = parse_json_file(file, file, is);
  if (!is.empty()) throw InputError(is.messages);
  json choice = planner_choice(result, file, k);
  json j = parse_json_file(scenario_file, scenario_file, is);  // the user's scenario as written (it parsed before)
  if (!is.empty()) throw InputError(is.messages);
  j.erase("search");
  j["plan"] = choice["plan"];
  j["training"]["global_batch"] = choice["global_batch"];
  if (!choice["precision"].get<std::string>().empty()) j["training"]["precision"] = choice["precision"];
  if (choice.contains("framework")) j["training"]["framework"] = choice["framework"];  // the plan's framework
  std::string base = std::filesystem::path(scenario_file).parent_path().string();
  Scenario out = scenario_from_json(j, base.empty() ? "." : base, scenario_file + " with " + arg);
  out.name = sc.name;
  return out;
}

// --backend cuda: the CUDA library loaded; without a device, the reason on stderr and true (the caller exits 77,
// before MPI starts: the GPU tests' skip code); a library that does not load is an InputError (exit 2). False for
// any other backend.
bool cuda_without_device(const std::string& backend) {
  if (backend != "cuda") return false;
  std::string why;
  exec::CudaLoad st;
  if (exec::load_cuda_backend(st, why)) return false;
  if (st != exec::CudaLoad::no_device) throw InputError({"--backend cuda: " + why});
  std::cerr << "error: " << why << "\n";
  return true;
}

// A refusal every rank makes alike before any work (device_comm's ranks sharing a GPU, decided from one all-gathered
// table): rank 0 says it in one line and every rank ends with exit 2 (not an abort's line per rank and mpirun's).
int refused_on_every_rank(exec::Comm& world, const exec::DeviceCommRefused& e) {
  if (world.rank() == 0) std::cerr << "error: " << e.what() << "\n";
  exec::finalize_world();
  return 2;
}

// --comm of run, calibrate and validate: mpi (host-staged, rank-ordered sums) or nccl, which needs a device backend.
std::string comm_option(const Args& a, const std::string& backend) {
  const std::string comm = a.value("--comm", "mpi");
  if (comm != "mpi" && comm != "nccl") throw Usage("--comm: expected mpi or nccl, got '" + comm + "'");
  if (comm == "nccl" && backend != "cuda" && backend != "emu-device")
    throw Usage("--comm nccl needs --backend cuda (NCCL runs the collectives of GPU memory) or emu-device (its stand-in, "
                "NCCL's table emulated over MPI)");
  return comm;
}

// One process per rank. Every rank loads and checks the scenario before any work, so bad input fails
// everywhere with exit 2 (printed once, by rank 0); a rank that fails later aborts the whole job.
int cmd_run(int argc, char** argv) {
  Args a = parse_args(argc, argv, 2, {"--steps", "--json", "--seed", "--lr", "--data", "--delink-step", "--checkpoint-dir", "--checkpoint-every", "--trace",
                                          "--device-budget", "--backend", "--log-every", "--keep-checkpoints", "--plan",
                                          "--handover-window", "--metrics", "--comm", "--gpu-memory-budget", "--cuda-graphs"},
                  {"--fp64", "--quiet", "--resume", "--resume-or-start", "--no-bf16-weight-copies"});
  if (a.positional.size() != 1) throw Usage("run needs exactly one scenario file");
  exec::RunOptions o;
  auto num = [&](const char* opt, double lo, double dflt) {
    std::string v = a.value(opt);
    if (v.empty()) return dflt;
    char* end = nullptr;
    double x = std::strtod(v.c_str(), &end);
    if (!end || *end || !(x >= lo)) throw Usage(std::string(opt) + " expects a number >= " + std::to_string(lo) + ", got " + v);
    return x;
  };
  // A count: a whole number from lo to hi (so 2.5, 1e30 or -1 are usage errors, never truncated or wrapped).
  auto count = [&](const char* opt, long long lo, long long hi, long long dflt) { return count_option(a, opt, lo, hi, dflt); };
  constexpr long long kIntMax = 2147483647LL, kExact = 9007199254740992LL;  // int; 2^53, doubles' exact integers
  o.steps = (int)count("--steps", 1, kIntMax, 10);
  o.seed = (uint64_t)count("--seed", 0, kExact, 1234);
  o.lr = num("--lr", 0, 1e-3);
  o.data = a.value("--data");
  o.delink_step = (long)count("--delink-step", 1, kIntMax, -1);
  o.checkpoint_dir = a.value("--checkpoint-dir");
  o.checkpoint_every = (int)count("--checkpoint-every", 1, kIntMax, 0);
  o.resume = a.flag("--resume") || a.flag("--resume-or-start");
  o.resume_or_start = a.flag("--resume-or-start");
  o.trace = a.value("--trace");
  o.device_budget_bytes = num("--device-budget", 1, 0);
  o.log_every = (int)count("--log-every", 0, kIntMax, -1);
  o.keep_checkpoints = (int)count("--keep-checkpoints", 0, kIntMax, 3);
  o.handover_window = count("--handover-window", 1, kExact, 0);
  if ((o.checkpoint_every > 0 || o.resume || a.flag("--keep-checkpoints")) && o.checkpoint_dir.empty())
    throw Usage("--checkpoint-every, --resume and --keep-checkpoints need --checkpoint-dir");
  o.fp64 = a.flag("--fp64");
  o.bf16_weight_copies = !a.flag("--no-bf16-weight-copies");
  o.backend = a.value("--backend", "cpu");
  o.comm = comm_option(a, o.backend);
  // --gpu-memory-budget: a smaller GPU, emulated by the backend's allocator (cuda: TP_CUDA_MEMORY_BUDGET; emu-device:
  // its device's capacity, TP_EMU_DEVICE_BYTES), set before the backend is first used.
  if (const double budget = num("--gpu-memory-budget", 1, 0); budget > 0) {
    if (o.backend != "cuda" && o.backend != "emu-device")
      throw Usage("--gpu-memory-budget needs a backend with device memory (--backend cuda or emu-device)");
    setenv(o.backend == "cuda" ? "TP_CUDA_MEMORY_BUDGET" : "TP_EMU_DEVICE_BYTES", std::to_string(budget).c_str(), 1);
  }
  o.cuda_graphs = a.value("--cuda-graphs", "auto");
  if (o.cuda_graphs != "auto" && o.cuda_graphs != "on" && o.cuda_graphs != "off")
    throw Usage("--cuda-graphs: expected auto, on or off, got '" + o.cuda_graphs + "'");
  if (o.cuda_graphs == "on" && o.backend != "cuda" && o.backend != "emu-device")
    throw Usage("--cuda-graphs on needs a backend that captures steps (--backend cuda or emu-device)");
  if (cuda_without_device(o.backend)) return 77;  // (a device: the local rank's; trains there in fp32)
  if (o.backend == "cuda") {
    if (o.fp64)
      throw Usage("--fp64 with --backend cuda: the cuda backend computes in float32 (float64 is the CPU oracle's "
                  "precision: run it with --backend cpu)");
  }
  exec::Comm& world = exec::world();
  o.progress = world.rank() == 0 && isatty(2) && !a.flag("--quiet");
  Scenario sc;
  try {
    // with --plan, the scenario may be the search scenario the plan came from (its search block is replaced)
    sc = load_scenario(a.positional[0], !a.value("--plan").empty());
    if (!a.value("--plan").empty()) sc = with_planner_choice(sc, a.positional[0], a.value("--plan"));
    if (world.rank() == 0) print_warnings(sc);
    exec::check_runnable(sc);
    if (world.rank() == 0)
      for (const std::string& n : exec::run_notes(sc, o.fp64, o.comm)) std::cerr << "note: " << n << "\n";
    exec::check_run_memory(sc, o.fp64, o.backend == "cuda");
    if (!o.data.empty()) exec::load_run_tokens(o.data, sc.model.vocab);  // a bad token file: exit 2 on every rank, before work
    std::string why;
    if (!exec::find_backend(o.backend, why)) throw InputError({"--backend: " + why});
    exec::check_job_ranks(sc, a.positional[0], world.size());
    if (!o.checkpoint_dir.empty()) exec::check_checkpoint_dir(o.checkpoint_dir, world.size());  // before step 1
  } catch (const InputError& e) {
    if (world.rank() == 0)
      for (auto& m : e.messages) std::cerr << "error: " << m << "\n";
    exec::finalize_world();
    return 2;
  }
  // --metrics FILE.jsonl: rank 0 streams one JSON line per logged step (TensorBoard / W&B importers read it while
  // the run goes); opened before any work, and a failure stops every rank with exit 2.
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> metrics(nullptr, std::fclose);
  double metrics_bad = 0;
  if (!a.value("--metrics").empty() && world.rank() == 0) {
    metrics.reset(std::fopen(a.value("--metrics").c_str(), "w"));
    if (!metrics) {
      std::cerr << "error: --metrics: cannot write " << a.value("--metrics") << ": " << std::strerror(errno) << "\n";
      metrics_bad = 1;
    }
  }
  world.all_reduce_sum(&metrics_bad, 1, exec::Dtype::f64);
  if (metrics_bad > 0) {
    exec::finalize_world();
    return 2;
  }
  o.metrics = metrics.get();
  exec::RunResult r;
  exec::install_stop_handlers();  // SIGINT / SIGTERM (Slurm's pre-emption): finish the step, then stop
  try {
    r = exec::run_training(sc, o, world);
  } catch (const exec::DeviceCommRefused& e) {
    return refused_on_every_rank(world, e);
  } catch (const InputError& e) {
    world.abort(2, e.messages.empty() ? "bad input" : e.messages.front());
  } catch (const std::exception& e) {
    world.abort(1, e.what());
  }
  std::string trace_text;
  if (!o.trace.empty()) {  // every rank's events of the last step, merged on rank 0
    std::string mine = r.trace.dump();
    double len = (double)mine.size(), longest = len;
    std::vector<double> lens(world.size());
    world.all_gather(&len, lens.data(), 1, exec::Dtype::f64);
    for (double x : lens) longest = std::max(longest, x);
    mine.resize((size_t)longest, ' ');
    std::string all((size_t)longest * world.size(), ' ');
    world.all_gather(mine.data(), all.data(), (long)longest, exec::Dtype::u8);
    if (world.rank() == 0) {
      json ev = json::array();
      for (int k = 0; k < world.size(); ++k)
        for (auto& e : json::parse(all.substr((size_t)(k * longest), (size_t)lens[k]))) ev.push_back(e);
      trace_text = json{{"traceEvents", ev}, {"displayTimeUnit", "ms"},
                        {"otherData", {{"producer", "trainplan run"}, {"scenario", sc.name}}}}.dump() + "\n";
    }
  }
  if (world.rank() == 0) {
    std::string json_text;
    if (!a.value("--json").empty()) json_text = exec::run_result_to_json(r, sc, o).dump(2) + "\n";
    try {
      write_outputs(a, {{"--json", json_text}, {"--trace", trace_text}});
    } catch (const InputError& e) {
      for (const auto& m : e.messages) std::cerr << "error: " << m << "\n";
      exec::finalize_world();
      return 2;
    } catch (const StdoutError& e) {
      std::cerr << "error: " << e.what() << "\n";
      exec::finalize_world();
      return 1;
    }
    if (!a.flag("--quiet") && !r.losses.empty()) {
      // The throughput leaves out the run's first step (allocations, first touch of every page, caches: warm-up),
      // as the iteration lines' means do not; say so, with the steps it covers.
      const long first = r.first_step + 1, last = r.first_step + (long)r.losses.size();
      const std::string over = r.losses.size() > 1 ? " over steps " + std::to_string(first + 1) + "-" + std::to_string(last) +
                                                         " (step " + std::to_string(first) + " left out: warm-up)"
                                                   : " (one step: warm-up included)";
      std::printf("trainplan run: %s, %d ranks, %d steps: loss %.4f -> %.4f, %.0f tokens/s%s\n", sc.name.c_str(),
                  world.size(), (int)r.losses.size(), r.losses.front(), r.losses.back(), r.tokens_per_s, over.c_str());
    }
    if (r.stop_signal)
      std::fprintf(stderr, "stopped at step %ld; last checkpoint: %s\n", r.first_step + (long)r.losses.size(),
                   r.last_checkpoint.empty() ? "none (no --checkpoint-dir / --checkpoint-every)" : r.last_checkpoint.c_str());
  }
  if (r.stop_signal && world.size() > 1) {
    // Stopped by a signal under a launcher. mpirun (Open MPI 4.1) forwards SIGTERM / SIGINT and kills the ranks
    // one second later (odls_base_sigkill_timeout), and MPI_Finalize waits on the daemon that is tearing the job
    // down: once every rank's outputs are written (the barrier), each exits at once with 128 + signal.
    world.barrier();
    std::fflush(nullptr);
    std::_Exit(128 + r.stop_signal);
  }
  exec::finalize_world();
  return r.stop_signal ? 128 + r.stop_signal : 0;
}

// Every rank measures (concurrently, so a profile taken under mpirun -np R includes R busy cores); rank 0 writes.
int cmd_calibrate(int argc, char** argv) {
  Args a = parse_args(argc, argv, 2, {"--backend", "--out", "--gpus-per-node", "--memory-bytes", "--power-w", "--comm"},
                      {"--quick", "--quiet"});
  std::string backend;
  if (cuda_without_device(a.value("--backend", "cpu"))) return 77;
  exec::Comm& world = exec::world();
  exec::CalibrateOptions o;
  const exec::Backend* be = nullptr;
  try {
    if (!a.positional.empty()) throw Usage("calibrate takes no positional arguments");
    backend = a.value("--backend", "cpu");
    if (backend != "cpu" && backend != "emu" && backend != "emu-device" && backend != "cuda")
      throw Usage("--backend: expected cpu, emu, emu-device or cuda, got " + backend);
    if (a.value("--out").empty()) throw Usage("calibrate needs --out PROFILE.json");
    auto num = [&](const char* opt, double lo) {
      std::string v = a.value(opt);
      if (v.empty()) return 0.0;
      char* end = nullptr;
      double x = std::strtod(v.c_str(), &end);
      if (!end || *end || !(x >= lo)) throw Usage(std::string(opt) + " expects a number >= " + std::to_string(lo) + ", got " + v);
      return x;
    };
    o.gpus_per_node = (int)num("--gpus-per-node", 1);
    o.memory_bytes = num("--memory-bytes", 1);
    o.power_w = num("--power-w", 0);
    o.comm = comm_option(a, backend);
    if (backend != "cpu") {
      std::string why;
      be = exec::find_backend(backend, why);
      if (!be) throw InputError({"--backend: " + why});
    }
  } catch (...) {
    exec::finalize_world();
    throw;
  }
  o.quick = a.flag("--quick");
  o.progress = world.rank() == 0 && !a.flag("--quiet");
  json prof;
  try {
    if (be) {  // the collectives' communicator: NCCL's (--comm nccl), else the world staged for device memory
      std::unique_ptr<exec::Comm> coll;
      if (o.comm == "nccl") {
        std::string why;
        const exec::DeviceCommOps* ops = exec::device_comm_ops(*be, why);
        if (!ops) throw std::runtime_error(why);
        coll = exec::device_comm(world, *be, *ops);
      } else if (!be->host_accessible) {
        coll = exec::staged_comm(world, *be);
      }
      prof = exec::calibrate_device(*be, o, world, coll ? *coll : world);
    } else {
      prof = exec::calibrate_cpu(o, world);
    }
  } catch (const exec::DeviceCommRefused& e) {
    return refused_on_every_rank(world, e);
  } catch (const std::exception& e) {
    world.abort(1, e.what());
  }
  if (world.rank() == 0) {
    write_file_atomic(a.value("--out"), prof.dump(2) + "\n");
    if (!a.flag("--quiet") && !be)
      std::printf("trainplan calibrate: wrote %s: matmul fp32 peak %.3g FLOP/s, memory %.3g B/s, link %.3g B/s\n",
                  a.value("--out").c_str(), prof["gpu"]["matrix_flops_per_s"]["fp32"].get<double>(),
                  prof["gpu"]["hbm_bandwidth_bytes_per_s"].get<double>(),
                  prof["intra_node"]["bandwidth_bytes_per_s"].get<double>());
    else if (!a.flag("--quiet"))
      std::printf("trainplan calibrate --backend %s: wrote %s: bf16 peak %.3g FLOP/s (best GEMM %.0f %%), HBM %.3g B/s, "
                  "PCIe %.3g B/s, launch %.3g s\n", be->name, a.value("--out").c_str(),
                  prof["gpu"]["matrix_flops_per_s"]["bf16"].get<double>(),
                  100 * prof["gpu"]["matrix_efficiency"].back()[1].get<double>(),
                  prof["gpu"]["hbm_bandwidth_bytes_per_s"].get<double>(),
                  prof["host"]["pcie_bandwidth_bytes_per_s"].get<double>(), prof["gpu"]["kernel_overhead_s"].get<double>());
  }
  exec::finalize_world();
  return 0;
}

// Like run: every rank checks the input first (exit 2 everywhere, printed once); rank 0 simulates and reports.
int cmd_validate(int argc, char** argv) {
  Args a = parse_args(argc, argv, 2, {"--profile", "--steps", "--json", "--device-budget", "--tolerance", "--backend",
                                      "--delink-step", "--comm"}, {"--quiet"});
  exec::ValidateOptions o;
  o.backend = a.value("--backend", "cpu");
  if (o.backend != "cpu" && o.backend != "emu-device" && o.backend != "cuda")
    throw Usage("--backend: expected cpu, emu-device or cuda (a backend with its own device memory), got " + o.backend);
  o.comm = comm_option(a, o.backend);
  if (cuda_without_device(o.backend)) return 77;
  exec::Comm& world = exec::world();
  json profile, rep;
  double tolerance = -1;  // < 0: no tolerance (report only)
  try {
    if (!a.value("--tolerance").empty()) {
      std::string t = a.value("--tolerance");
      char* e = nullptr;
      tolerance = std::strtod(t.c_str(), &e);
      if (!e || *e || !(tolerance > 0 && tolerance < 10))
        throw Usage("--tolerance expects a fraction in (0, 10), e.g. 0.10 for 10 %, got " + t);
    }
    if (a.positional.size() != 1) throw Usage("validate needs exactly one scenario file");
    if (a.value("--profile").empty()) throw Usage("validate needs --profile PROFILE.json (from trainplan calibrate)");
    o.steps = (int)count_option(a, "--steps", 2, 100000, 4);
    if (!a.value("--delink-step").empty()) o.delink_step = count_option(a, "--delink-step", 1, 1000000000, -1);
    if (!a.value("--device-budget").empty()) {
      std::string b = a.value("--device-budget");
      char* end = nullptr;
      double x = std::strtod(b.c_str(), &end);
      if (!end || *end || !(x >= 1)) throw Usage("--device-budget expects a number of bytes >= 1, got " + b);
      o.device_budget_bytes = x;
    }
    Issues is;
    profile = parse_json_file(a.value("--profile"), a.value("--profile"), is);
    if (!is.empty()) throw InputError(is.messages);
    rep = exec::validate_run(a.positional[0], profile, a.value("--profile"), o, world);
  } catch (const exec::DeviceCommRefused& e) {
    return refused_on_every_rank(world, e);
  } catch (const InputError& e) {
    if (world.rank() == 0)
      for (auto& m : e.messages) std::cerr << "error: " << m << "\n";
    exec::finalize_world();
    return 2;
  } catch (const Usage&) {
    exec::finalize_world();
    throw;
  } catch (const std::exception& e) {
    world.abort(1, e.what());
  }
  std::vector<std::string> misses;
  if (tolerance > 0) {
    misses = exec::validate_misses(rep, tolerance);
    rep["tolerance"] = tolerance;
    rep["within_tolerance"] = misses.empty();
  }
  if (world.rank() == 0) {
    if (!a.value("--json").empty()) write_file_atomic(a.value("--json"), rep.dump(2) + "\n");
    if (!a.flag("--quiet")) std::cout << exec::validate_text(rep);
    for (const std::string& m : misses) std::cerr << "validate: outside the tolerance: " << m << "\n";
  }
  exec::finalize_world();
  return misses.empty() ? 0 : 1;
}

// --suite: a file, or the bundled sets by name: "dev" (the 2021 A100 dev suite, the default) and "h100"
// (the H100 development set, data/validation/h100-dev-set.json) and "frameworks" (public runs of DeepSpeed,
// Megatron-DeepSpeed and PyTorch FSDP, data/validation/frameworks-set.json).
std::string suite_file(const std::string& name) {
  std::string root = catalog_dir() + "/../..";
  if (name.empty() || name == "dev") return root + "/scenarios/published/dev-suite.json";
  if (name == "h100") return root + "/data/validation/h100-dev-set.json";
  if (name == "frameworks") return root + "/data/validation/frameworks-set.json";
  if (name == "nccl") return root + "/data/validation/nccl-tests-set.json";
  return name;
}

// --emit DIR: DIR/<row id>.json for every row a scenario can be made of (the rest are listed as skipped).
void emit_row_scenarios(const json& suite, const std::string& cluster, const std::string& dir) {
  std::filesystem::create_directories(dir);
  for (const json& row : suite.at("rows")) {
    json sc;
    try {
      sc = devset_row_scenario(row, cluster, &suite);
    } catch (const InputError&) {
      continue;
    } catch (const json::exception&) {
      continue;
    }
    write_file_atomic(dir + "/" + sc.at("name").get<std::string>() + ".json", sc.dump(1) + "\n");
  }
}

int cmd_validate_published(int argc, char** argv) {
  Args a = parse_args(argc, argv, 2, {"--suite", "--cluster", "--json", "--emit"}, {});
  if (!a.positional.empty()) throw Usage("validate-published takes no positional arguments");
  std::string file = suite_file(a.value("--suite"));
  Issues is;
  json suite = parse_json_file(file, file, is);
  if (!is.empty()) throw InputError(is.messages);
  if (suite.is_object() && suite.contains("rows") && suite["rows"].is_array() && !suite["rows"].empty() &&
      suite["rows"][0].contains("points")) {  // nccl-tests results: the collective model, not a training step
    NcclTestsReport nr;
    try {
      nr = validate_nccl_tests(suite, file);
    } catch (const json::exception& e) {
      throw InputError({file + ": unexpected nccl-tests set layout: " + e.what()});
    }
    print_nccl_tests(std::cout, nr);
    if (!a.value("--json").empty()) write_file_atomic(a.value("--json"), nccl_tests_to_json(nr).dump(2) + "\n");
    return 0;
  }
  if (!a.value("--emit").empty()) {  // each row as the scenario it is simulated as: `simulate` runs it alone
    if (!(suite.is_object() && suite.contains("rows")))
      throw Usage("--emit: the suite has no \"rows\" (a development or frameworks set)");
    emit_row_scenarios(suite, a.value("--cluster"), a.value("--emit"));
  }
  PublishedReport rep;
  try {
    // A development set lists rows with their own plans and clusters; the 2021 dev suite lists paper tables.
    if (suite.is_object() && suite.contains("rows")) rep = validate_devset(suite, a.value("--cluster"));
    else rep = validate_published(suite, a.value("--cluster", "selene"));
  } catch (const json::exception& e) {
    throw InputError({file + ": unexpected dev-suite layout: " + e.what()});
  }
  print_published(std::cout, rep);
  if (!a.value("--json").empty()) write_file_atomic(a.value("--json"), published_to_json(rep).dump(2) + "\n");
  return 0;
}

// catalog NAME: one entry (a GPU, cluster or model) exactly as the catalog holds it — the object a scenario takes
// inline in place of the name, so a user can copy a cluster and grow it. Null when NAME is no entry.
const json* catalog_entry(const std::string& name, std::string* kind) {
  for (const char* k : {"gpus", "clusters", "models", "frameworks"})
    if (const json* e = catalog_find(k, name)) {
      *kind = k;
      return e;
    }
  return nullptr;
}

int cmd_catalog(int argc, char** argv) {
  Args a = parse_args(argc, argv, 2, {"--json"}, {});
  std::vector<std::string> kinds = {"gpus", "clusters", "models", "frameworks"};
  std::string out = a.value("--json");
  if (a.positional.size() == 1 && std::find(kinds.begin(), kinds.end(), a.positional[0]) == kinds.end()) {
    std::string kind;
    const json* e = catalog_entry(a.positional[0], &kind);
    if (!e) {
      std::vector<std::string> all = kinds;
      for (const std::string& k : kinds)
        for (const std::string& n : catalog_names(k)) all.push_back(n);
      const std::string near = closest_name(a.positional[0], all);
      throw Usage("catalog takes a kind (gpus, clusters, models, frameworks) or an entry name, got \"" + a.positional[0] + "\"" +
                  (near.empty() ? std::string() : "; did you mean \"" + near + "\"?"));
    }
    const std::string text = e->dump(2) + "\n";
    if (out.empty() || out == "-") std::cout << text;
    else write_file_atomic(out, text);
    if (out.empty())
      std::cerr << "(the " << kind.substr(0, kind.size() - 1) << " entry; a scenario takes this object in place of the name \""
                << a.positional[0] << "\")\n";
    return 0;
  }
  if (a.positional.size() > 1) throw Usage("catalog takes at most one kind or entry name");
  if (a.positional.size() == 1) kinds = {a.positional[0]};
  json j = catalog_tables(kinds, out == "-" ? nullptr : &std::cout);
  if (out == "-") std::cout << j.dump(2) << "\n";
  else if (!out.empty()) write_file_atomic(out, j.dump(2) + "\n");
  return 0;
}

// export SCENARIO --to T [--out FILE] [--plan PLAN.json[#k]]: the plan as the target framework's configuration
// (export/export.hpp), on stdout or written atomically to --out.
int cmd_export(int argc, char** argv) {
  Args a = parse_args(argc, argv, 2, {"--to", "--out", "--plan"}, {});
  if (a.positional.size() != 1) throw Usage("export needs exactly one scenario file");
  if (a.value("--to").empty()) throw Usage("export needs --to megatron|nemo|deepspeed|torchtitan");
  const exporting::Target t = exporting::target_of(a.value("--to"));
  Scenario sc = load_scenario(a.positional[0], !a.value("--plan").empty());
  if (!a.value("--plan").empty()) sc = with_planner_choice(sc, a.positional[0], a.value("--plan"));
  print_warnings(sc);
  const std::string text = exporting::export_plan(sc, t, a.positional[0]);
  if (a.value("--out").empty()) std::cout << text;
  else write_outputs(a, {{"--out", text}});
  return 0;
}

}  // namespace

namespace {

int run_command(int argc, char** argv) {
  if (argc < 2) {
    std::cerr << kHelp;
    return 2;
  }
  std::string cmd = argv[1];
  if (cmd == "--help" || cmd == "-h" || cmd == "help") {
    std::cout << kHelp;
    return 0;
  }
  try {
    if (cmd == "--version" || cmd == "-V" || cmd == "version") {
      if (cmd == "version") parse_args(argc, argv, 2, {}, {});
      return tp::cli::cmd_version();
    }
    if (cmd == "simulate") return cmd_simulate(argc, argv);
    if (cmd == "plan") return cmd_plan(argc, argv);
    if (cmd == "validate-published") return cmd_validate_published(argc, argv);
    if (cmd == "catalog") return cmd_catalog(argc, argv);
    if (cmd == "export") return cmd_export(argc, argv);
    if (cmd == "collective") return cmd_collective(argc, argv);
    if (cmd == "fit") return cmd_fit(argc, argv);
    if (cmd == "run") return cmd_run(argc, argv);
    if (cmd == "calibrate") return cmd_calibrate(argc, argv);
    if (cmd == "validate") return cmd_validate(argc, argv);
    if (cmd == "report") return report_main(std::vector<std::string>(argv + 2, argv + argc));
    if (cmd == "selftest") return tp::cli::cmd_selftest(argc, argv);
    std::cerr << "error: unknown command \"" << cmd << "\"" << did_you_mean(cmd, kCommands)
              << "\nusage: trainplan COMMAND [options]   (commands: simulate, plan, report, validate-published, run, "
                 "calibrate, validate, selftest, catalog, export, collective, fit, version; `trainplan --help` for all)\n";
    return 2;
  } catch (const HelpShown&) {
    return 0;
  } catch (const InputError& e) {
    for (auto& m : e.messages) std::cerr << "error: " << m << "\n";
    return 2;
  } catch (const Usage& e) {
    std::cerr << "error: " << e.what() << "\nusage:\n" << command_usage(cmd) << "(`trainplan " << cmd
              << " --help` for details)\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
}

}  // namespace

// Whatever the command wrote on standard output must have arrived: a full disk or a closed descriptor is a
// failure (exit 1), never a silent exit 0 (issue 44).
int main(int argc, char** argv) {
  int rc = run_command(argc, argv);
  try {
    check_stdout();
  } catch (const StdoutError& e) {
    std::cerr << "error: " << e.what() << "\n";
    if (rc == 0) rc = 1;
  }
  return rc;
}
