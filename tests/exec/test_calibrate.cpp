// `trainplan calibrate --backend cpu --quick` (and --backend emu-device, the device calibrate on the emulator) writes
// a profile that is an inline cluster object: a scenario that uses it as its cluster parses and simulates; the curves follow read_curve's rules; bad usage exits 2. Also the
// profiler's classes and its classed communicator; the float attention's lane reductions (accuracy, no dependence
// on buffer addresses).
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "exec/backends/cuda/cuda_loader.hpp"
#include "exec/backends/ops.hpp"
#include "exec/comm/comm_classed.hpp"
#include "exec/prof/prof.hpp"
#include "exec/measure/calibrate.hpp"
#include "models/catalog.hpp"
#include "models/hardware.hpp"
#include "models/scenario.hpp"
#include "sim/simulate.hpp"

using tp::json;
namespace fs = std::filesystem;

namespace {

std::string tmp(const std::string& name) {
  fs::path p = fs::temp_directory_path() / ("trainplan-cal-" + std::to_string(::getpid()));
  fs::create_directories(p);
  return (p / name).string();
}

int sh(const std::string& cmd) {
  int rc = std::system(cmd.c_str());
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : 128;
}

// A profile curve as read_curve takes it: at least two points, sizes strictly increasing, efficiencies in (0, 1].
void expect_curve(const json& cv, const char* name) {
  ASSERT_GE(cv.size(), 2u) << name;
  for (size_t i = 0; i < cv.size(); ++i) {
    EXPECT_GT(cv[i][1].get<double>(), 0) << name;
    EXPECT_LE(cv[i][1].get<double>(), 1) << name;
    if (i) {
      EXPECT_GT(cv[i][0].get<double>(), cv[i - 1][0].get<double>()) << name;
    }
  }
}

}  // namespace

// The quick profile is shared with test_validate.cpp through this path (each test makes it if missing).
std::string quick_profile() {
  static std::string f = [] {
    std::string out = tmp("quick-profile.json");
    int ec = sh(std::string(TP_BINARY) + " calibrate --backend cpu --quick --quiet --out " + out + " > " + out + ".log 2>&1");
    return ec == 0 ? out : std::string();
  }();
  return f;
}

TEST(Calibrate, QuickProfileLoadsIntoAScenarioAndSimulates) {
  std::string f = quick_profile();
  ASSERT_FALSE(f.empty()) << "calibrate --quick failed";
  std::ifstream in(f);
  json prof = json::parse(in);
  EXPECT_GT(prof["gpu"]["matrix_flops_per_s"]["fp32"].get<double>(), 1e8);
  EXPECT_EQ(prof["gpu"]["matrix_flops_per_s"]["fp16"].get<double>(), 0.0);
  for (const char* c : {"matrix_efficiency", "memory_efficiency"}) expect_curve(prof["gpu"][c], c);
  std::ifstream sin(std::string(TP_SOURCE_DIR) + "/scenarios/exec/tiny-gpt.json");
  json sc = json::parse(sin);
  sc["cluster"] = prof;
  tp::Scenario s = tp::scenario_from_json(sc, TP_SOURCE_DIR, "tiny-gpt + quick profile");  // throws on any issue
  tp::Result r = tp::simulate(s);
  EXPECT_GT(r.step_time_s, 0);
  EXPECT_GT(r.peak_bytes_per_gpu, 0);
  EXPECT_TRUE(r.fits);
}

TEST(Calibrate, BadUsageExits2) {
  EXPECT_EQ(sh(std::string(TP_BINARY) + " calibrate --backend tpu --out " + tmp("x.json") + " > /dev/null 2>&1"), 2);
  EXPECT_EQ(sh(std::string(TP_BINARY) + " calibrate --backend cpu > /dev/null 2>&1"), 2);
  EXPECT_EQ(sh(std::string(TP_BINARY) + " calibrate --backend emu-device > /dev/null 2>&1"), 2);  // no --out
  EXPECT_FALSE(fs::exists(tmp("x.json")));
}

// --backend cuda: a device (measures: 0), none (77, naming cudaGetDeviceCount's error), or a binary without the CUDA
// library (2, "not built"); never a profile without a device.
TEST(Calibrate, CudaWithoutADeviceExits77BeforeWork) {
  const std::string out = tmp("cuda.json"), log = out + ".log";
  const int rc = sh(std::string(TP_BINARY) + " calibrate --backend cuda --quick --quiet --out " + out + " > " + log + " 2>&1");
  std::ifstream in(log);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (rc == 0) {
    EXPECT_TRUE(fs::exists(out));
    return;
  }
  if (tp::exec::cuda_built_in()) {
    EXPECT_EQ(rc, 77) << text;
    EXPECT_NE(text.find("no CUDA device: cudaGetDeviceCount"), std::string::npos) << text;
  } else {
    EXPECT_EQ(rc, 2) << text;
    EXPECT_NE(text.find("not built"), std::string::npos) << text;
  }
  EXPECT_FALSE(fs::exists(out));
}

// The device calibrate (calibrate_device.cpp) on the CPU emulator with device memory the host cannot read: the same
// code a GPU runs (ops on device buffers, pinned copies, syncs). Its profile is an inline cluster with bf16 peaks, a
// matrix, an attention and a memory curve that read_curve accepts, and a scenario on it simulates in bf16.
TEST(Calibrate, DeviceProfileOnTheEmulatedDeviceLoadsAndSimulatesInBf16) {
  const std::string out = tmp("emu-device.json");
  ASSERT_EQ(sh(std::string(TP_BINARY) + " calibrate --backend emu-device --quick --quiet --out " + out + " > " + out + ".log 2>&1"), 0);
  std::ifstream in(out);
  json prof = json::parse(in);
  const json& g = prof["gpu"];
  EXPECT_GT(g["matrix_flops_per_s"]["bf16"].get<double>(), 1e6);
  EXPECT_GT(g["matrix_flops_per_s"]["fp32"].get<double>(), 1e6);
  EXPECT_GT(g["hbm_bandwidth_bytes_per_s"].get<double>(), 1e6);
  EXPECT_GT(prof["host"]["pcie_bandwidth_bytes_per_s"].get<double>(), 1e6);
  EXPECT_GT(g["kernel_overhead_s"].get<double>(), 0);
  for (const char* c : {"matrix_efficiency", "attention_efficiency", "memory_efficiency"}) expect_curve(g[c], c);
  EXPECT_NE(g["about"].get<std::string>().find("not measured"), std::string::npos);  // says what it did not measure
  std::ifstream sin(std::string(TP_SOURCE_DIR) + "/scenarios/exec/tiny-gpt.json");
  json sc = json::parse(sin);
  sc["cluster"] = prof;
  sc["training"]["precision"] = "bf16";
  tp::Scenario s = tp::scenario_from_json(sc, TP_SOURCE_DIR, "tiny-gpt + emu-device profile");  // throws on any issue
  tp::Result r = tp::simulate(s);
  EXPECT_GT(r.step_time_s, 0);
  EXPECT_TRUE(r.fits);
}

TEST(Prof, ClassesAndClassedComm) {
  namespace prof = tp::exec::prof;
  prof::reset();
  prof::set_enabled(true);
  std::vector<float> a(64 * 64, 1.f), c(64 * 64);
  tp::ops::matmul<float>(c.data(), a.data(), a.data(), 64, 64, 64, false, false, 1.f, 0.f);
  tp::ops::add<float>(c.data(), c.data(), a.data(), 64);
  auto comm = prof::classed(tp::exec::make_local_comm(), prof::Cls::tp_comm);
  comm->all_reduce_sum(c.data(), 16, tp::exec::Dtype::f32);
  prof::set_enabled(false);
  tp::ops::add<float>(c.data(), c.data(), a.data(), 64);  // not counted
  prof::Snapshot s = prof::snapshot();
  EXPECT_EQ(s.calls[(int)prof::Cls::gemm], 1);
  EXPECT_EQ(s.calls[(int)prof::Cls::elementwise], 1);
  EXPECT_EQ(s.calls[(int)prof::Cls::tp_comm], 1);
  EXPECT_EQ(s.calls[(int)prof::Cls::dp_comm], 0);
  EXPECT_GT(s.seconds[(int)prof::Cls::gemm], 0);
  EXPECT_EQ(prof::comm_class(), prof::Cls::dp_comm);
  {
    prof::CommClass cc(prof::Cls::pp_comm);
    EXPECT_EQ(prof::comm_class(), prof::Cls::pp_comm);
  }
  EXPECT_EQ(prof::comm_class(), prof::Cls::dp_comm);
  prof::reset();
}

// The float attention's softmax and backward row reductions run in 16 lanes (exec/backends/cpu/ops_gemm.cpp): with rows
// longer than 16 (T = 53: full lane blocks and a tail), float agrees with double, and the result does not depend
// on the buffers' addresses (a shifted copy of every buffer gives bit-identical outputs).
TEST(AttentionLanes, FloatMatchesDoubleAndIgnoresAlignment) {
  const long B = 1, T = 53, H = 2, D = 8, n = B * T * H * D;
  std::vector<double> qd(n), kd(n), vd(n), gd(n);
  uint32_t st = 7;
  auto rnd = [&] { st = st * 1664525u + 1013904223u; return (double)(st >> 8) / (1 << 24) * 2 - 1; };
  for (auto* v : {&qd, &kd, &vd, &gd})
    for (double& x : *v) x = rnd();
  auto run_f = [&](long shift, std::vector<float>& out, std::vector<float>& dq) {
    std::vector<float> buf(8 * (n + shift) + T * T * H * B + shift, 0.f);
    float *q = buf.data() + shift, *k = q + n, *v = k + n, *g = v + n, *o = g + n, *dqp = o + n, *dk = dqp + n,
          *dv = dk + n, *att = dv + n;
    for (long i = 0; i < n; ++i) { q[i] = (float)qd[i]; k[i] = (float)kd[i]; v[i] = (float)vd[i]; g[i] = (float)gd[i]; }
    tp::ops::attention_fwd(o, att, q, k, v, B, T, H, H, D);
    tp::ops::attention_bwd(dqp, dk, dv, g, att, q, k, v, B, T, H, H, D);
    out.assign(o, o + n);
    dq.assign(dqp, dqp + n);
  };
  std::vector<double> od(n), attd(B * H * T * T), dqd(n, 0), dkd(n, 0), dvd(n, 0);
  tp::ops::attention_fwd(od.data(), attd.data(), qd.data(), kd.data(), vd.data(), B, T, H, H, D);
  tp::ops::attention_bwd(dqd.data(), dkd.data(), dvd.data(), gd.data(), attd.data(), qd.data(), kd.data(), vd.data(), B, T, H, H, D);
  std::vector<float> o0, dq0, o1, dq1;
  run_f(0, o0, dq0);
  run_f(3, o1, dq1);  // 12 bytes off: a different vector / scalar split if anything depended on the address
  for (long i = 0; i < n; ++i) {
    EXPECT_NEAR(o0[i], od[i], 1e-5) << i;
    EXPECT_NEAR(dq0[i], dqd[i], 1e-5) << i;
    EXPECT_EQ(o0[i], o1[i]) << i;
    EXPECT_EQ(dq0[i], dq1[i]) << i;
  }
}

// device_profile on a GPU the catalog knows (synthetic measurements of an H100 at 60 % of its bf16 peak): the catalog
// entry's peaks and cluster links are kept, the curves are the measured fractions of those peaks, so the simulator
// predicts a measured GEMM's time back; an unknown device takes its best GEMM as the peak.
TEST(Calibrate, DeviceProfileOfACatalogGpuKeepsItsPeaksAndPredictsTheMeasuredGemm) {
  EXPECT_EQ(tp::exec::catalog_gpu_for_device("device 0 of 8 (NVIDIA H100 80GB HBM3)", 85e9), "H100-SXM-80GB");
  EXPECT_EQ(tp::exec::catalog_gpu_for_device("device 0 of 1 (NVIDIA H200)", 150e9), "H200-SXM-141GB");
  EXPECT_EQ(tp::exec::catalog_gpu_for_device("device 0 of 8 (NVIDIA A100-SXM4-40GB)", 42e9), "A100-SXM4-40GB");
  EXPECT_EQ(tp::exec::catalog_gpu_for_device("device 0 of 8 (NVIDIA A100-SXM4-80GB)", 85e9), "A100-SXM4-80GB");
  EXPECT_EQ(tp::exec::catalog_gpu_for_device("the CPU block emulator's device memory", 1e9), "");
  const json* cat = tp::catalog_find("gpus", "H100-SXM-80GB");
  ASSERT_NE(cat, nullptr);
  const double peak = (*cat)["matrix_flops_per_s"]["bf16"].get<double>();
  tp::exec::DeviceMeasurements m;
  m.backend = "cuda";
  m.device = "device 0 of 8 (NVIDIA H100 80GB HBM3)";
  m.device_bytes = 85e9;
  for (double s : {1024.0, 4096.0, 8192.0}) {
    const double f = 8 * s * s * s, eff = s < 2000 ? 0.4 : 0.6;
    m.gemm.push_back({f, f, f / (eff * peak)});
  }
  m.fp32_size = 8192, m.fp32_rate = 50e12;
  m.attention_head_dim = 128;
  for (double f : {1e10, 1e11, 1e12}) m.attention.push_back({f, f, f / (0.5 * peak)});
  for (double b : {1e6, 1e8, 1e9}) m.triad.push_back({b, b, b / 3e12});
  m.mix.push_back({1e6, 1e7, 1e7 / 1.5e12});
  m.mix.push_back({1e8, 1e9, 1e9 / 2.5e12});
  m.opt.push_back({1e9, 1e9, 1e9 / 2.8e12});
  m.pcie_h2d = 50e9, m.pcie_d2h = 40e9, m.overhead_s = 4e-6;
  const json prof = tp::exec::device_profile(m, tp::exec::CalibrateOptions{});
  const json& g = prof["gpu"];
  EXPECT_EQ(g["matrix_flops_per_s"]["bf16"], (*cat)["matrix_flops_per_s"]["bf16"]);
  EXPECT_EQ(g["matrix_flops_per_s"]["fp8"], (*cat)["matrix_flops_per_s"]["fp8"]);
  EXPECT_DOUBLE_EQ(g["hbm_bandwidth_bytes_per_s"].get<double>(), 3e12);
  EXPECT_DOUBLE_EQ(prof["host"]["pcie_bandwidth_bytes_per_s"].get<double>(), 45e9);
  EXPECT_EQ(prof["intra_node"], (*tp::catalog_find("clusters", "dgx-h100"))["intra_node"]);
  tp::Issues is;
  tp::Gpu gp = tp::read_gpu(g, "profile.gpu", is);
  ASSERT_TRUE(is.empty()) << is.messages.front();
  const double f = 8.0 * 4096 * 4096 * 4096;
  EXPECT_NEAR(gp.matrix_flops_per_s[(int)tp::Precision::bf16] * gp.matrix_efficiency.at(f), 0.6 * peak, 1e9);
  EXPECT_NEAR(gp.attention_curve().at(1e11 * gp.attention_kernel_head_dim(128) / 128), 0.5, 1e-9);
  // fp32: the measured rate at the largest size, predicted back through the (bf16) matrix curve
  const double f32 = 8.0 * 8192 * 8192 * 8192;
  EXPECT_NEAR(gp.matrix_flops_per_s[(int)tp::Precision::fp32] * gp.matrix_efficiency.at(f32), 50e12, 1e6);
  json sc = json::parse(std::ifstream(std::string(TP_SOURCE_DIR) + "/scenarios/exec/tiny-gpt.json"));
  sc["cluster"] = prof;
  sc["training"]["precision"] = "bf16";
  EXPECT_GT(tp::simulate(tp::scenario_from_json(sc, TP_SOURCE_DIR, "tiny-gpt + H100 profile")).step_time_s, 0);
  m.device = "device 0 of 1 (Some Future GPU)";
  const json unknown = tp::exec::device_profile(m, tp::exec::CalibrateOptions{});
  EXPECT_NEAR(unknown["gpu"]["matrix_flops_per_s"]["bf16"].get<double>(), 0.6 * peak, 1e6);
  EXPECT_EQ(unknown["gpu"]["matrix_efficiency"].back()[1].get<double>(), 1.0);
}

namespace {
// A one-rank communicator whose non-blocking all-reduces run "beside" compute (each returns a request to wait for,
// as NCCL's do), counting them.
struct OverlappingComm final : tp::exec::Comm {
  std::unique_ptr<tp::exec::Comm> local = tp::exec::make_local_comm();
  long started = 0, waited = 0;
  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::unique_ptr<tp::exec::Comm> split(int c, int k) override { return local->split(c, k); }
  void all_reduce_sum(void* b, long n, tp::exec::Dtype d) override { local->all_reduce_sum(b, n, d); }
  void reduce_scatter_sum(const void* i, void* o, long n, tp::exec::Dtype d) override { local->reduce_scatter_sum(i, o, n, d); }
  tp::exec::CommRequest iall_reduce_sum(void*, long, tp::exec::Dtype) override { return {started++}; }
  void wait(tp::exec::CommRequest r) override { waited += r.id >= 0; }
  bool progresses_async() const override { return true; }
  void all_gather(const void* i, void* o, long n, tp::exec::Dtype d) override { local->all_gather(i, o, n, d); }
  void broadcast(void* b, long n, tp::exec::Dtype d, int r) override { local->broadcast(b, n, d, r); }
  void reduce_sum(const void* i, void* o, long n, tp::exec::Dtype d, int r) override { local->reduce_sum(i, o, n, d, r); }
  void all_to_all(const void* i, void* o, long n, tp::exec::Dtype d) override { local->all_to_all(i, o, n, d); }
  void send(const void*, long, tp::exec::Dtype, int, int) override {}
  void recv(void*, long, tp::exec::Dtype, int, int) override {}
  void isend(const void*, long, tp::exec::Dtype, int, int) override {}
  void wait_sends() override {}
  int reap_sends() override { return 0; }
  void barrier() override {}
  [[noreturn]] void abort(int, const std::string& m) override { throw std::runtime_error(m); }
};
}  // namespace

// compute_slowdown_under_comm: measured only where the communicator's collectives progress beside compute, with every
// all-reduce it started waited for; a communicator that completes them at once (MPI, staging) gives -1; the profile
// takes a measured value and says how it was measured. Measured fp8 GEMMs become the profile's fp8 curve.
TEST(Calibrate, SlowdownBesideAnAllReduceAndFp8GemmsReachTheProfile) {
  const tp::exec::Backend& be = tp::exec::cpu_backend();
  std::vector<float> buf(1024, 1.f);
  std::unique_ptr<tp::exec::Comm> local = tp::exec::make_local_comm();
  EXPECT_EQ(tp::exec::gemm_slowdown_beside_allreduce(be, *local, *local, buf.data(), 1024, 1e-4, 32, 1e-3), -1);
  OverlappingComm c;
  std::string about;
  const double slow = tp::exec::gemm_slowdown_beside_allreduce(be, c, c, buf.data(), 1024, 1e-4, 32, 1e-3, &about);
  EXPECT_GE(slow, 0);
  EXPECT_LE(slow, 1);
  EXPECT_GE(c.started, 2);  // at least two beside the GEMMs
  EXPECT_EQ(c.waited, c.started);
  EXPECT_NE(about.find("compute_slowdown_under_comm measured: a bf16 GEMM (128 x 32 x 32)"), std::string::npos) << about;
  tp::exec::DeviceMeasurements m;
  m.backend = "cuda";
  m.device = "device 0 of 1 (NVIDIA H200)";
  m.device_bytes = 150e9;
  for (double sz : {1024.0, 4096.0}) m.gemm.push_back({8 * sz * sz * sz, 8 * sz * sz * sz, 8 * sz * sz * sz / 5e14});
  m.fp32_size = 4096, m.fp32_rate = 50e12, m.attention_head_dim = 128;
  for (double f : {1e10, 1e11}) m.attention.push_back({f, f, f / 4e14});
  for (double b : {1e6, 1e9}) m.triad.push_back({b, b, b / 4e12});
  m.mix.push_back({1e8, 1e9, 1e9 / 3e12});
  m.opt.push_back({1e9, 1e9, 1e9 / 3e12});
  m.pcie_h2d = m.pcie_d2h = 50e9, m.overhead_s = 4e-6;
  tp::exec::CollectiveMeasurements coll;
  coll.ranks = 2;
  coll.points.push_back({"all_reduce", 1e8, 1e-3, 1e11, 1e11});
  coll.gemm_slowdown = 0.17;
  coll.slowdown_about = about;
  const json g = tp::exec::device_profile(m, tp::exec::CalibrateOptions{}, coll)["gpu"];
  EXPECT_DOUBLE_EQ(g["compute_slowdown_under_comm"].get<double>(), 0.17);
  EXPECT_NE(g["about"].get<std::string>().find("compute_slowdown_under_comm measured"), std::string::npos);
  EXPECT_EQ(g["fp8_matrix_efficiency"], (*tp::catalog_find("gpus", "H200-SXM-141GB"))["fp8_matrix_efficiency"]);  // (kept)
  // fp8 GEMMs measured (synthetic: 0.45 of the H200's fp8 peak at every size): the profile's fp8 curve says so
  const double fp8_peak = (*tp::catalog_find("gpus", "H200-SXM-141GB"))["matrix_flops_per_s"]["fp8"].get<double>();
  for (double sz : {1024.0, 4096.0}) m.fp8_gemm.push_back({8 * sz * sz * sz, 8 * sz * sz * sz, 8 * sz * sz * sz / (0.45 * fp8_peak)});
  const json g8 = tp::exec::device_profile(m, tp::exec::CalibrateOptions{}, coll)["gpu"];
  tp::Issues is;
  const tp::Gpu gp = tp::read_gpu(g8, "profile.gpu", is);
  ASSERT_TRUE(is.empty()) << is.messages.front();
  EXPECT_NEAR(gp.fp8_curve().at(8.0 * 4096 * 4096 * 4096), 0.45, 1e-9);
  EXPECT_NE(g8["about"].get<std::string>().find("fp8 GEMMs (ops::matmul_fp8"), std::string::npos);
  m.fp8_gemm.clear();
  coll.gemm_slowdown = -1;  // not measured: the catalog's figure stays, and the about says why
  const json g2 = tp::exec::device_profile(m, tp::exec::CalibrateOptions{}, coll)["gpu"];
  EXPECT_EQ(g2["compute_slowdown_under_comm"], (*tp::catalog_find("gpus", "H200-SXM-141GB"))["compute_slowdown_under_comm"]);
  EXPECT_NE(g2["about"].get<std::string>().find("--comm nccl on GPUs under mpirun"), std::string::npos);
}

// The fp8 GEMM sweep (what calibrate runs on an fp8 GPU) on the CPU: one point per width, the GEMM's FLOPs as x, a
// positive time (matmul_fp8 emulated: the casts and a matmul).
TEST(Calibrate, Fp8GemmSweepMeasuresEachWidth) {
  const auto pts = tp::exec::fp8_gemm_sweep(tp::exec::cpu_backend(), {32, 64}, 0, 1e-3);
  ASSERT_EQ(pts.size(), 2u);
  EXPECT_DOUBLE_EQ(pts[1].x, tp::exec::device_gemm_point_flops(64, 0));
  for (const auto& p : pts) EXPECT_GT(p.sec, 0);
}

// A backward slower than its forward (a forward of F FLOPs at 60 % of the peak, its backward of 2.5 F at 30 %): both
// curve points carry the pair's rate, so the simulator's two kernels take the measured time together; the host Adam
// measured gives the host's bandwidth (28 B per parameter per second x the ranks on the node) and cores.
TEST(Calibrate, DeviceProfileTakesTheAttentionPairsRateAndTheMeasuredHostAdam) {
  const double peak = (*tp::catalog_find("gpus", "H100-SXM-80GB"))["matrix_flops_per_s"]["bf16"].get<double>();
  tp::exec::DeviceMeasurements m;
  m.backend = "cuda";
  m.device = "device 0 of 8 (NVIDIA H100 80GB HBM3)";
  m.device_bytes = 85e9;
  for (double s : {1024.0, 8192.0}) m.gemm.push_back({8 * s * s * s, 8 * s * s * s, 8 * s * s * s / (0.6 * peak)});
  m.fp32_size = 8192, m.fp32_rate = 50e12;
  m.attention_head_dim = 128;
  const double F = 1e11, tf = F / (0.6 * peak), tb = 2.5 * F / (0.3 * peak);
  m.attention = {{F, F, tf}, {2.5 * F, 2.5 * F, tb}};
  m.triad.push_back({1e9, 1e9, 1e9 / 3e12});
  m.mix.push_back({1e8, 1e9, 1e9 / 2.5e12});
  m.opt.push_back({1e9, 1e9, 1e9 / 2.8e12});
  m.pcie_h2d = m.pcie_d2h = 50e9, m.overhead_s = 4e-6;
  m.host_adam_n = 1L << 24, m.host_adam_s = 0.01, m.host_adam_threads = 4, m.local_ranks = 4, m.cores = 16;
  const json prof = tp::exec::device_profile(m, tp::exec::CalibrateOptions{});
  tp::Issues is;
  tp::Gpu gp = tp::read_gpu(prof["gpu"], "profile.gpu", is);
  ASSERT_TRUE(is.empty()) << is.messages.front();
  const double scale = gp.attention_kernel_head_dim(128) / 128, pair = 3.5 * F / (tf + tb) / peak;
  EXPECT_NEAR(gp.attention_curve().at(F * scale), pair, 1e-9);
  EXPECT_NEAR(gp.attention_curve().at(2.5 * F * scale), pair, 1e-9);
  EXPECT_NEAR(F / (peak * pair) + 2.5 * F / (peak * pair), tf + tb, 1e-12);
  EXPECT_DOUBLE_EQ(prof["host"]["memory_bandwidth_bytes_per_s"].get<double>(), 28.0 * (1L << 24) / 0.01 * 4);
  EXPECT_EQ(prof["host"]["cpu_cores"].get<int>(), 16);
}

// prof::op_class (the class a device backend's op is timed in, at dispatch) is the class the CPU backend's ops charge
// themselves: one classification for both, checked on one op of each kind.
TEST(Prof, OpClassIsTheCpuBackendsOwn) {
  namespace prof = tp::exec::prof;
  std::vector<float> a(64, 0.5f), b(64, 0.25f), c(64), m(64, 0.f), v(64, 0.f), att(64), mean(4), rstd(4);
  const std::vector<std::pair<const char*, std::function<void()>>> calls = {
      {"matmul", [&] { tp::ops::matmul<float>(c.data(), a.data(), b.data(), 4, 4, 4, false, false, 1.f, 0.f); }},
      {"add", [&] { tp::ops::add<float>(c.data(), a.data(), b.data(), 16); }},
      {"gelu_fwd", [&] { tp::ops::gelu_fwd<float>(c.data(), a.data(), 16); }},
      {"layernorm_fwd", [&] { tp::ops::layernorm_fwd<float>(c.data(), mean.data(), rstd.data(), a.data(), b.data(), b.data(), 4, 4, 1e-5f); }},
      {"attention_fwd", [&] { tp::ops::attention_fwd<float>(c.data(), att.data(), a.data(), a.data(), b.data(), 1, 4, 1, 1, 4); }},
      {"adamw", [&] { tp::ops::adamw<float>(c.data(), a.data(), m.data(), v.data(), 16, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.f, 1, 1.f); }},
      {"sum_squares", [&] { (void)tp::ops::sum_squares<float>(a.data(), 16); }},
  };
  for (const auto& [name, call] : calls) {
    prof::reset();
    prof::set_enabled(true);
    call();
    prof::set_enabled(false);
    const prof::Snapshot s = prof::snapshot();
    EXPECT_EQ(s.calls[(int)prof::op_class(name)], 1) << name;
  }
  prof::reset();
}
