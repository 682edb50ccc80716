// validate: predicted (simulator on the calibrated profile) vs measured (executor) step time, time per op class
// and peak memory. See validate.hpp.
// Invariants: every rank parses and checks the input before any training (bad input: InputError on every rank);
// only rank 0 simulates and assembles the report; measured per-class times are per steady step.
#include "exec/measure/validate.hpp"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <sstream>

#include "exec/backends/backend.hpp"
#include "exec/measure/calibrate.hpp"
#include "exec/measure/calibrate_util.hpp"  // host_name
#include "exec/prof/prof.hpp"
#include "exec/prof/rss.hpp"
#include "exec/runtime/offload/host_adam.hpp"
#include "exec/runtime/train.hpp"
#include "models/scenario.hpp"
#include "sim/simulate.hpp"

namespace tp::exec {
namespace {

// The classes compared: prof's, plus "other" (step time not inside any instrumented call).
constexpr int kRow = prof::kClasses + 1;
const char* row_name(int c) { return c < prof::kClasses ? prof::cls_name((prof::Cls)c) : "other"; }

// Predicted seconds per class for simulated rank r of a result.
std::vector<double> predicted_classes(const Result& res, int r) {
  std::vector<double> out(kRow, 0.0);
  const Program& pg = res.prog;
  const CostModel& cm = pg.cm;
  auto add_pass = [&](const PassCost& pc, double times) {
    if (times == 0) return;
    for (const Op& op : pc.ops) {
      int c = 0;
      switch (op.cls) {
        case OpClass::gemm: c = (int)prof::Cls::gemm; break;
        case OpClass::attention: c = (int)prof::Cls::attention; break;
        case OpClass::elementwise: c = (int)prof::Cls::elementwise; break;
        case OpClass::tp_comm: c = (int)prof::Cls::tp_comm; break;
        case OpClass::ep_comm: c = (int)prof::Cls::dp_comm; break;  // not run by the executor
      }
      out[c] += times * op.time_s;
    }
  };
  for (int t : pg.in.lane_order[(size_t)r * kLanes + kLaneCompute]) {
    const TaskInfo& ti = pg.info[t];
    if (ti.kind != TaskKind::fwd && ti.kind != TaskKind::bwd) continue;
    const bool fwd = ti.kind == TaskKind::fwd;
    for (int l = ti.layer_lo; l < ti.layer_hi; ++l) {
      const bool moe = moe_layers_between(cm, l, l + 1) > 0;
      add_pass(fwd ? (moe ? cm.moe_fwd : cm.layer_fwd) : cm.bwd_of(l, moe), 1);
    }
    if (ti.embed) add_pass(fwd ? cm.embed_fwd : cm.embed_bwd, 1);
    if (ti.head) add_pass(fwd ? cm.head_fwd : cm.head_bwd, 1);
  }
  const Breakdown& bd = res.ranks[r].breakdown;
  out[(int)prof::Cls::optimizer] = bd.optimizer;
  out[(int)prof::Cls::pp_comm] = bd.pp_comm_exposed + bd.bubble;
  out[(int)prof::Cls::dp_comm] += bd.dp_comm_exposed + bd.ep_comm_exposed;
  double sum = 0;
  for (int c = 0; c < prof::kClasses; ++c) sum += out[c];
  out[prof::kClasses] = std::max(0.0, res.step_time_s - sum);
  return out;
}

// validate's machine-speed probe: the GEMM size (a point of calibrate's sweep, so the profile's curve holds it).
constexpr long kProbeSize = 256;
// On a device: a point of calibrate_device's sweep (full mode on a GPU, quick mode on the emulator).
long device_probe_size(const std::string& backend) { return backend == "cuda" ? 1024 : 64; }

double rel_err(double pred, double meas) { return meas > 0 ? (pred - meas) / meas : 0.0; }

// The two scenarios of a validation: the plan the executor runs (fp8 / bf16 run in fp32, see below) and the same
// plan on the calibrated profile for the simulator.
struct Inputs {
  Scenario run_sc, sim_sc;
  int ranks = 0;
  bool delinks = false;  // plan.delink: the measured steps are all of one phase (pseudo or real)
};

// A profile `trainplan calibrate` wrote names its GPU "<backend>-<host>" (cpu-, cuda-, emu-device-): one written on
// another machine, or for another backend, describes other hardware, and the comparison would say nothing about
// this one. Refused before any rank runs; a profile named otherwise (written by hand) is the user's to vouch for.
static void check_profile_machine(const json& profile, const std::string& profile_file, const std::string& backend) {
  const json* g = profile.contains("gpu") && profile["gpu"].is_object() ? &profile["gpu"] : nullptr;
  if (!g || !g->contains("name") || !(*g)["name"].is_string()) return;
  const std::string name = (*g)["name"].get<std::string>(), here = backend + "-" + calib::host_name();
  for (const char* b : {"cpu-", "cuda-", "emu-device-"})
    if (name.rfind(b, 0) == 0 && name != here)
      throw InputError({profile_file + ": $.gpu.name: \"" + name + "\" was calibrated on another machine or backend; this " +
                        "validate runs --backend " + backend + " on " + calib::host_name() + " (\"" + here + "\"): run `trainplan " +
                        "calibrate --backend " + backend + "` here and validate against its profile"});
}

Inputs read_inputs(const std::string& file, const json& profile, const std::string& profile_file,
                   const ValidateOptions& o, Comm& world) {
  Inputs in;
  in.run_sc = load_scenario(file);
  check_runnable(in.run_sc);
  // Both sides in fp32 (the simulation below too): on the CPU the executor's fp8 and bf16 are emulations whose
  // casts and rounded operand copies cost what fp32 element-wise work costs, not what fp8 / bf16 tensor cores
  // save (exec/model/fp8.hpp, Backend::set_bf16_gemm), so validate runs the plan without them.
  const Precision p = in.run_sc.training.precision;
  const bool dev = o.backend != "cpu";
  if (dev && p == Precision::fp8) {  // a device runs bf16 GEMMs; its fp8 is the casts' emulation (issue 42)
    in.run_sc.training.precision = Precision::bf16;
    if (world.rank() == 0)
      std::fprintf(stderr, "note: $.training.precision \"fp8\": validate --backend %s runs and simulates the plan in bf16 "
                   "(the executor emulates fp8's casts around bf16 GEMMs, it does not run fp8 GEMMs)\n", o.backend.c_str());
  } else if (!dev && (p == Precision::fp8 || p == Precision::bf16)) {
    in.run_sc.training.precision = Precision::fp32;
    if (world.rank() == 0)
      std::fprintf(stderr, "note: $.training.precision \"%s\": validate runs and simulates the plan in fp32 (the "
                   "executor's %s is an emulation on the CPU, not %s GEMMs)\n", precision_name(p),
                   p == Precision::fp8 ? "fp8 casts" : "bf16 operand rounding", precision_name(p));
  }
  if ((in.delinks = in.run_sc.delink.on())) {  // one phase measured: the steps after the warm-up step 0
    RunOptions ro;
    ro.delink_step = o.delink_step;
    const long D = delink_step_of(in.run_sc, ro);
    const int steps = std::max(2, o.steps);
    if (D > 1 && D < steps)
      throw InputError({"--delink-step: the run delinks at step " + std::to_string(D) + ", inside the " + std::to_string(steps) +
                        " steps measured; validate compares one phase: --delink-step 1 measures the real (delinked) model, " +
                        "--delink-step " + std::to_string(steps) + " or more the pseudo one"});
  }
  const int R = in.ranks = in.run_sc.plan.gpus();
  check_job_ranks(in.run_sc, file, world.size());
  Issues is;
  json sj = parse_json_file(file, file, is);
  if (!is.empty()) throw InputError(is.messages);
  if (!profile.is_object()) throw InputError({profile_file + ": $: expected a cluster object (from `trainplan calibrate`)"});
  check_profile_machine(profile, profile_file, o.backend);
  json prof_cl = profile;
  if (prof_cl.contains("gpus_per_node") && prof_cl["gpus_per_node"].is_number_integer() &&
      prof_cl.contains("nodes") && prof_cl["nodes"].is_number_integer()) {
    long long gpn = std::max<long long>(1, prof_cl["gpus_per_node"].get<long long>());
    long long need = (R + gpn - 1) / gpn;
    if (prof_cl["nodes"].get<long long>() < need) prof_cl["nodes"] = need;
  }
  sj["cluster"] = prof_cl;
  sj["training"]["precision"] = precision_name(in.run_sc.training.precision);
  sj["training"]["grad_precision"] = "fp32";  // the executor's gradients are fp32 on every backend
  sj["plan"]["overlap_grad_reduce"] = false;
  if (o.device_budget_bytes > 0 && in.run_sc.plan.offload.kind == OffloadKind::chunked) {
    double hbm = prof_cl.contains("gpu") && prof_cl["gpu"].is_object() && prof_cl["gpu"].contains("hbm_bytes") &&
                         prof_cl["gpu"]["hbm_bytes"].is_number() ? prof_cl["gpu"]["hbm_bytes"].get<double>() : 0;
    if (hbm <= 0) throw InputError({profile_file + ": $.gpu.hbm_bytes: expected a number > 0 (needed by --device-budget)"});
    sj["plan"]["offload"]["gpu_memory_fraction"] = std::min(1.0, o.device_budget_bytes / hbm);
  }
  std::string dir = std::filesystem::path(file).parent_path().string();
  in.sim_sc = scenario_from_json(sj, dir.empty() ? "." : dir, file + " (cluster = " + profile_file + ")");
  return in;
}

// What every rank measured, gathered: per rank kRow + 4 numbers (the classes' seconds per steady step, then heap
// growth, RSS growth, device memory, the process's peak), the run's own result and the machine-speed probes.
struct Measured {
  RunResult rr;
  std::string backend;  // cpu or a device backend (ValidateOptions::backend)
  std::string comm;     // ValidateOptions::comm
  int steps = 0;
  bool hooked = false;  // the runtime calls prof::step_begin / step_end
  double probe_before = 0, probe_after = 0;
  std::vector<double> all;
  double at(int rank, int c) const { return all[(size_t)rank * (kRow + 4) + c]; }
};

Measured measure(const Scenario& run_sc, int ranks, const ValidateOptions& o, Comm& world) {
  Measured m;
  RunOptions ro;
  ro.steps = m.steps = std::max(2, o.steps);
  ro.device_budget_bytes = o.device_budget_bytes;
  ro.backend = m.backend = o.backend;
  ro.comm = m.comm = o.comm;
  ro.delink_step = o.delink_step;
  const bool dev = o.backend != "cpu";
  // The machine's speed against the profile's (a shared VM's speed drifts by more than the 10 % target within
  // minutes): calibrate's GEMM point at s = kProbeSize, before the warm-up and after the measured steps. On a
  // device only after them: the allocator's high-water mark, the measured peak, would include the probe's buffers.
  if (!dev) m.probe_before = gemm_probe_flops_per_s(kProbeSize, world);
  detail::reset_peak_rss();  // (the probe's 0.5 GB of operands are not the run's; without a reset the RSS figure includes them)
  {  // a one-step warm-up run (not measured): first-touch page faults, malloc's adaptive thresholds, caches
    if (world.rank() == 0)
      std::fprintf(stderr, "validate: first a one-step warm-up run, not measured (first-touch page faults, the "
                           "allocator's thresholds, caches): its \"iteration 1/1\" line; then the %d measured steps\n",
                   ro.steps);
    RunOptions warm = ro;
    warm.steps = 1;
    prof::set_enabled(false);
    run_training(run_sc, warm, world);
  }
  prof::set_warmup_steps(1);
  const double heap0 = prof::heap_live_bytes(), rss0 = detail::rss_bytes();
  std::string why;
  const Backend* be = dev ? find_backend(o.backend, why) : nullptr;
  prof::reset();
  prof::set_enabled(!dev);
  m.rr = run_training(run_sc, ro, world);  // (a device: unprofiled, its step times and allocator peak)
  prof::set_enabled(false);
  if (be) {  // a device: the classes from a second, 2-step run with a device sync around every op (prof::set_sync)
    RunOptions pr = ro;
    pr.steps = 2;
    prof::reset();
    prof::set_sync(be->sync);
    prof::set_enabled(true);
    run_training(run_sc, pr, world);
    prof::set_enabled(false);
    prof::set_sync(nullptr);
  }
  prof::Snapshot snap = prof::snapshot();
  m.probe_after = be ? device_gemm_probe_flops_per_s(*be, device_probe_size(o.backend), calibrate_gemm_tokens(o.backend != "cuda"))
                     : gemm_probe_flops_per_s(kProbeSize, world);
  m.hooked = snap.steps > 0;
  const double steady = m.hooked ? (double)snap.steps : (double)(be ? 2 : ro.steps);
  std::vector<double> mine(kRow + 4, 0.0);
  for (int c = 0; c < prof::kClasses; ++c) mine[c] = snap.seconds[c] / steady;
  const RunResult& rr = m.rr;
  double my_rss_peak = rr.peak_memory_bytes.empty() ? 0 : rr.peak_memory_bytes[std::min<size_t>(world.rank(), rr.peak_memory_bytes.size() - 1)];
  mine[kRow] = snap.heap_peak_bytes - heap0;
  mine[kRow + 1] = my_rss_peak - rss0;
  const bool opt_off = rr.offload.on && rr.offload.kind != "chunked";  // optimizer or granular
  // Device memory: chunked offload's store figure; optimizer offload's = the heap less its pinned host state.
  mine[kRow + 2] = dev      ? my_rss_peak  // a device backend's RunResult peak: its allocator's high-water mark
                   : opt_off ? mine[kRow] - rr.offload.host_state_bytes
                   : rr.offload.on ? rr.offload.peak_device_bytes_max : 0;
  mine[kRow + 3] = my_rss_peak;  // what the iteration lines print as "peak memory (MB)": the whole process
  m.all.resize(mine.size() * ranks);
  world.all_gather(mine.data(), m.all.data(), (long)mine.size(), Dtype::f64);
  return m;
}

// The report's "offload" entry: optimizer / granular offload's host state and traffic, chunked offload's store.
json offload_json(const RunResult& rr) {
  const bool opt_off = rr.offload.on && rr.offload.kind != "chunked";
  json j = opt_off ? json{{"kind", rr.offload.kind}, {"host_state_bytes", rr.offload.host_state_bytes},
                          {"h2d_bytes", rr.offload.h2d_bytes}, {"d2h_bytes", rr.offload.d2h_bytes}}
           : rr.offload.on ? json{{"kind", "chunked"}, {"budget_bytes", rr.offload.budget_bytes}, {"arena_bytes", rr.offload.arena_bytes},
                                  {"peak_device_bytes", rr.offload.peak_device_bytes},
                                  {"peak_arena_bytes", rr.offload.peak_arena_bytes},
                                  {"h2d_bytes", rr.offload.h2d_bytes}, {"d2h_bytes", rr.offload.d2h_bytes},
                                  {"prefetch_h2d_bytes", rr.offload.prefetch_h2d_bytes},
                                  {"prefetch_d2h_bytes", rr.offload.prefetch_d2h_bytes},
                                  {"chunk_bytes", rr.offload.chunk_bytes}, {"chunks", rr.offload.chunks}}
                           : json(nullptr);
  if (rr.offload.kind == "granular") j["peak_loaded_bytes"] = rr.offload.peak_loaded_bytes;  // per step
  if (rr.offload.kind == "optimizer") j["early_d2h_bytes"] = rr.offload.early_d2h_bytes;    // per step
  return j;
}

// Rank 0: the simulation on the calibrated profile against what was measured.
json report(const std::string& file, const std::string& profile_file, const Inputs& in, const Measured& m, Comm& world) {
  SimOptions so;
  so.keep_memory_timeline = false;
  Result full = simulate(in.sim_sc, so);
  // Pseudo-to-Real: the phase the measured steps ran in (read_inputs refused a run measuring both).
  const bool pseudo = in.delinks && m.rr.delink_step > m.steps - 1;
  const Result& res = pseudo && full.delink && full.delink->pseudo ? *full.delink->pseudo : full;
  const RunResult& rr = m.rr;
  const int R = in.ranks;

  // The step times: the device's clock where the backend has one (CUDA events: the step as the GPU ran it), else
  // rank 0's wall clock.
  const bool device_clock = !rr.device_step_time_s.empty() && rr.device_step_time_s.size() == rr.step_time_s.size();
  const std::vector<double>& times = device_clock ? rr.device_step_time_s : rr.step_time_s;
  std::vector<double> steps(times.begin() + 1, times.end());
  std::sort(steps.begin(), steps.end());
  const double meas_step = steps[steps.size() / 2];
  // Speed = probe / what the profile says that GEMM achieves (1: as fast as when calibrated; 0.9: 10 % slower).
  const Gpu& pg = in.sim_sc.cluster.gpu;
  const bool dev = m.backend != "cpu";
  const long probe_s = dev ? device_probe_size(m.backend) : kProbeSize;
  const long probe_tokens = device_gemm_point_tokens(probe_s, dev ? calibrate_gemm_tokens(m.backend != "cuda") : 0);
  const double probe_flops = device_gemm_point_flops(probe_s, dev ? calibrate_gemm_tokens(m.backend != "cuda") : 0);
  const double expect = pg.matrix_flops_per_s[(int)(dev ? Precision::bf16 : Precision::fp32)] * pg.matrix_efficiency.at(probe_flops);
  const double speed_before = expect > 0 ? m.probe_before / expect : 0, speed_after = expect > 0 ? m.probe_after / expect : 0;
  const double speed = dev ? speed_after : 0.5 * (speed_before + speed_after);  // (a device: after the steps only)
  double meas_heap = 0, meas_rss = 0, meas_dev = 0, log_peak = 0;
  for (int k = 0; k < R; ++k) {
    log_peak = std::max(log_peak, m.at(k, kRow + 3));
    meas_heap = std::max(meas_heap, m.at(k, kRow));
    meas_rss = std::max(meas_rss, m.at(k, kRow + 1));
    meas_dev = std::max(meas_dev, m.at(k, kRow + 2));
  }
  // Offload: the simulator's peak is device memory, so the comparison is against the executor's device figure
  // (chunked: resident chunk slots + activations; optimizer: the tracked heap less the host optimizer's pinned
  // buffers); the whole heap (host memory included) is reported next to it.
  // A device backend: its allocator's high-water mark (tensors, scratch, GEMM workspace) against the predicted tensors
  // (the simulator's framework memory, the CUDA context and the caching allocator's fragmentation, is not in it).
  const bool device = rr.offload.on || dev;
  const double meas_peak = device ? meas_dev : meas_heap;
  auto rank_peak = [&](int g) { return device ? m.at(g, kRow + 2) : m.at(g, kRow); };
  auto pred_peak = [&](const MemoryBreakdown& b) { return dev ? b.tensors() : b.total(); };
  double pred_peak_max = dev ? 0 : res.peak_bytes_per_gpu;
  if (dev)
    for (const RankResult& rk : res.ranks) pred_peak_max = std::max(pred_peak_max, pred_peak(rk.peak));

  json ranks = json::array();
  json headline;
  for (int r = 0; r < (int)res.ranks.size(); ++r) {
    const int g = res.ranks[r].global_rank;
    std::vector<double> pc = predicted_classes(res, r);
    double msum = 0;
    for (int c = 0; c < prof::kClasses; ++c) msum += m.at(g, c);
    json cls = json::object();
    for (int c = 0; c < kRow; ++c) {
      double v = c < prof::kClasses ? m.at(g, c) : std::max(0.0, meas_step - msum);
      cls[row_name(c)] = {{"predicted_s", pc[c]}, {"measured_s", v}};
    }
    json one = {{"rank", g}, {"stage", res.ranks[r].stage}, {"classes", cls},
                {"predicted_peak_memory_bytes", pred_peak(res.ranks[r].peak)}, {"measured_peak_memory_bytes", rank_peak(g)},
                {"measured_peak_heap_bytes", m.at(g, kRow)}};
    if (r == res.breakdown_rank) headline = one;
    ranks.push_back(one);
  }
  json rep = {
      {"scenario", file},
      {"profile", profile_file},
      {"ranks", R},
      {"steps", m.steps},
      {"hooked_steps", m.hooked},
      {"backend", m.backend},
      {"comm", m.comm},
      {"phase", !in.delinks ? "" : pseudo ? "pseudo" : "real"},
      {"predicted", {{"step_time_s", res.step_time_s}, {"peak_memory_bytes", pred_peak_max},
                     {"peak_memory_with_framework_bytes", res.peak_bytes_per_gpu},
                     {"memory", {{"weights", res.memory.weights}, {"gradients", res.memory.gradients},
                                 {"optimizer", res.memory.optimizer}, {"activations", res.memory.activations},
                                 {"buffers", res.memory.buffers}}},
                     {"tokens_per_s", res.tokens_per_s}}},
      {"measured", {{"step_time_s", meas_step}, {"step_times_s", times},
                    {"step_time_clock", device_clock ? "device events" : "host wall clock"},
                    {"host_step_times_s", rr.step_time_s}, {"peak_memory_bytes", meas_peak},
                    {"peak_heap_bytes", meas_heap}, {"peak_rss_growth_bytes", meas_rss},
                    {"peak_process_bytes", log_peak},
                    {"peak_memory_kind", device ? "device" : "heap"},
                    {"tokens_per_s", rr.tokens_per_s}, {"losses", rr.losses}}},
      {"error", {{"step_time", rel_err(res.step_time_s, meas_step)}, {"peak_memory", rel_err(pred_peak_max, meas_peak)}}},
      {"machine_speed", {{"probe", std::string(dev ? "the device calibrate's bf16 GEMM point at s = " : "calibrate's GEMM point at s = ") +
                                       std::to_string(probe_s) +
                                       (dev ? " over " + std::to_string(probe_tokens) + " tokens (three variants"
                                            : std::string(" (4s x s x s, three variants, cold operands")) +
                                       "), against the profile's curve" + (dev ? ", after the steps" : "")},
                         {"before", speed_before}, {"after", speed_after}, {"mean", speed},
                         {"step_time_error_at_that_speed", speed > 0 ? rel_err(res.step_time_s / speed, meas_step) : 0.0}}},
      {"per_op_class", headline},
      {"offload", offload_json(rr)},
      {"per_rank", ranks}};
  rep["warnings"] = json::array();
  const int cores = usable_cores(), local = local_ranks(world.size());
  if (!dev && local > cores)
    rep["warnings"].push_back(std::to_string(local) + " ranks on " + std::to_string(cores) +
                              " cores: the ranks share cores, so the measured step time says nothing about the "
                              "prediction (peak memory still compares)");
  return rep;
}

}  // namespace

json validate_run(const std::string& file, const json& profile, const std::string& profile_file,
                  const ValidateOptions& o, Comm& world) {
  prof::track_heap();  // from here on every block is counted (malloc_usable_size) when allocated and freed
  const Inputs in = read_inputs(file, profile, profile_file, o, world);  // every rank
  const Measured m = measure(in.run_sc, in.ranks, o, world);                      // every rank
  if (world.rank() != 0) return nullptr;
  return report(file, profile_file, in, m, world);                        // rank 0
}

std::string validate_text(const json& r) {
  std::ostringstream os;
  char b[512];
  if (r.contains("warnings"))
    for (const json& w : r["warnings"]) os << "warning: " << w.get<std::string>() << "\n";
  const double step_m = r["measured"]["step_time_s"].get<double>();
  // `small`: an op class under 1 % of the measured step, whose relative error means nothing ("—")
  auto line = [&](const char* name, double p, double m, const char* unit, double scale, bool small = false) {
    double e = m > 0 ? 100.0 * (p - m) / m : 0.0;
    if (small) std::snprintf(b, sizeof b, "  %-22s %12.4g %12.4g %s  %9s\n", name, p * scale, m * scale, unit, "—");
    else std::snprintf(b, sizeof b, "  %-22s %12.4g %12.4g %s  %+7.1f %%\n", name, p * scale, m * scale, unit, e);
    os << b;
  };
  os << "validate " << r["scenario"].get<std::string>() << " on " << r["profile"].get<std::string>() << " ("
     << r["ranks"].get<int>() << " rank(s), " << r["steps"].get<int>() << " steps)\n";
  std::snprintf(b, sizeof b, "  %-22s %12s %12s       %9s\n", "", "predicted", "measured", "error");
  os << b;
  line(r["measured"].value("step_time_clock", "") == "device events" ? "step time (device)" : "step time",
       r["predicted"]["step_time_s"], r["measured"]["step_time_s"], "s ", 1);
  const json& mz = r["measured"];
  const bool device = mz.contains("peak_memory_kind") && mz["peak_memory_kind"] == "device";
  if (r.contains("machine_speed") && r["machine_speed"]["mean"].get<double>() > 0) {  // (0: the profile has no curve)
    const json& ms = r["machine_speed"];
    if (ms["before"].get<double>() > 0)
      std::snprintf(b, sizeof b, "  %-22s %12.4g %12s s   %+7.1f %%  (machine at %.2f / %.2f x the profile's speed "
                    "before / after the steps)\n", "at the probed speed", r["predicted"]["step_time_s"].get<double>() /
                    ms["mean"].get<double>(), "", 100 * ms["step_time_error_at_that_speed"].get<double>(),
                    ms["before"].get<double>(), ms["after"].get<double>());
    else  // a device: probed after the steps only
      std::snprintf(b, sizeof b, "  %-22s %12.4g %12s s   %+7.1f %%  (device at %.2f x the profile's speed after the "
                    "steps)\n", "at the probed speed", r["predicted"]["step_time_s"].get<double>() / ms["mean"].get<double>(),
                    "", 100 * ms["step_time_error_at_that_speed"].get<double>(), ms["after"].get<double>());
    os << b;
  }
  line(device ? "peak device memory" : "peak memory", r["predicted"]["peak_memory_bytes"], mz["peak_memory_bytes"], "MB", 1e-6);
  if (r.contains("backend") && r["backend"] != "cpu") {
    std::snprintf(b, sizeof b, "  %-22s %12.4g %12s MB  (with the framework memory the allocator does not see: CUDA context, "
                  "fragmentation)\n", "predicted process", r["predicted"]["peak_memory_with_framework_bytes"].get<double>() * 1e-6, "");
    os << b;
  }
  if (mz.contains("peak_process_bytes")) {  // the iteration lines' figure, so that the two outputs agree
    std::snprintf(b, sizeof b, "  %-22s %12s %12.4g MB  (the iteration lines' peak memory: the whole process, program, "
                  "libraries and communication buffers included; the simulator predicts the tensors, compared above)\n",
                  "peak process memory", "", mz["peak_process_bytes"].get<double>() * 1e-6);
    os << b;
  }
  if (device && mz.contains("peak_heap_bytes")) {
    std::snprintf(b, sizeof b, "  %-22s %12s %12.4g MB  (host pools included)\n", "peak heap", "",
                  mz["peak_heap_bytes"].get<double>() * 1e-6);
    os << b;
  }
  if (r.contains("backend") && r["backend"] != "cpu")
    os << "  (time per op class on backend " << r["backend"].get<std::string>()
       << ": from a separate 2-step run with a device sync around every op; \"other\" against the unsynchronised step)\n";
  for (const json& rk : r["per_rank"]) {
    os << "  time per step by op class, rank " << rk["rank"].get<int>() << " (stage " << rk["stage"].get<int>() << "):\n";
    for (auto it = rk["classes"].begin(); it != rk["classes"].end(); ++it) {
      double p = it.value()["predicted_s"], m = it.value()["measured_s"];
      if (p == 0 && m == 0) continue;
      line(("  " + it.key()).c_str(), p, m, "s ", 1, std::max(p, m) < 0.01 * step_m);
    }
  }
  if (!r["hooked_steps"].get<bool>()) os << "  (per-class times average every step, the first included: the runtime does not call prof::step_begin)\n";
  return os.str();
}

std::vector<std::string> validate_misses(const json& r, double tolerance) {
  std::vector<std::string> out;
  char b[256];
  auto check = [&](const char* name, double p, double m, const char* unit, double scale) {
    double e = m > 0 ? p / m - 1 : 0;
    if (std::fabs(e) <= tolerance) return;
    std::snprintf(b, sizeof b, "%s: predicted %.4g %s, measured %.4g %s, error %+.1f %% > %.1f %%", name, p * scale, unit,
                  m * scale, unit, 100 * e, 100 * tolerance);
    out.push_back(b);
  };
  check("step time", r["predicted"]["step_time_s"], r["measured"]["step_time_s"], "s", 1);
  check("peak memory", r["predicted"]["peak_memory_bytes"], r["measured"]["peak_memory_bytes"], "MB", 1e-6);
  return out;
}

}  // namespace tp::exec
