// test_run_emu_device: `trainplan run --backend emu-device` — the emu kernels with tensor memory that host code
// cannot read (exec/backends/emu/backend_emu_device.cpp: every tensor is a handle into PROT_NONE memory; a host read
// dies with SIGSEGV naming it), so these runs prove that the runtime reaches device memory only through ops and
// the backend's copies: communication staged through pinned host buffers (exec/comm/comm_staged.cpp), checkpoints
// staged (exec/runtime/runtime_state.cpp), chunked offload's host side in pinned memory and its arena compacted by
// device copies (exec/runtime/offload/chunk_store.cpp), optimizer and granular offload through the backend's copies. Every plan
// kind reproduces the CPU backend's single-rank float64 run (1e-9 relative; 1e-4 in float32), as on `emu`; a
// forgotten staging copy makes its run die (the test then sees no result).
#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

#include "exec/oracle_run.hpp"
#include "models/json_check.hpp"

using tp::json;
using namespace oracle;

namespace {

const std::string kDev = "--backend emu-device";

struct Case {
  const char* name;
  json plan;
  std::string extra;
};

void expect_cases(const json& ref, const std::vector<Case>& cases, int steps) {
  for (const Case& c : cases) {
    int code = 0;
    json got = run(scenario(c.name, c.plan), steps, true, &code, kDev + " " + c.extra);
    ASSERT_FALSE(got.is_null()) << c.name << ": exit " << code << " (log: " << tmpdir() << "/" << c.name << ".json.log)";
    expect_close(got, ref, "losses", 1e-9, c.name);
    expect_close(got, ref, "grad_norm", 1e-9, c.name);
  }
}

}  // namespace

TEST(RunEmuDevice, SingleRankDelinkAndResume) {
  const int steps = 3;
  json ref = run(scenario("dev_ref1", json::object()), steps, true);
  ASSERT_FALSE(ref.is_null());
  std::string f = scenario("dev_single", json::object());
  json e64 = run(f, steps, true, nullptr, kDev), e32 = run(f, steps, false, nullptr, kDev);
  ASSERT_FALSE(e64.is_null()) << log_text(f);
  ASSERT_FALSE(e32.is_null()) << log_text(f);
  expect_close(e64, ref, "losses", 1e-9, "emu-device fp64");
  expect_close(e64, ref, "grad_norm", 1e-9, "emu-device fp64");
  expect_close(e32, ref, "losses", 1e-4, "emu-device fp32");
  // peak_memory_bytes is the device high-water mark: at least the fp32 weights, gradients and two Adam moments
  // (16 bytes a parameter), and below the process's resident peak, which holds the emulated device memory too.
  const double dev_peak = e32["peak_memory_bytes"][0].get<double>(), params = e32["param_elements"][0].get<double>();
  EXPECT_GE(dev_peak, 16.0 * params);
  EXPECT_LT(dev_peak, e32["peak_host_memory_bytes"][0].get<double>());
  // Delinking at step 2 matches the CPU backend's delinked run.
  json delink = {{"unique_layers", 2}, {"tokens", 768}};
  std::string d = scenario("dev_delink", {{"delink", delink}});
  json dc = run(d, steps, true, nullptr, "--delink-step 2"), de = run(d, steps, true, nullptr, kDev + " --delink-step 2");
  ASSERT_FALSE(de.is_null()) << log_text(d);
  expect_close(de, dc, "losses", 1e-9, "emu-device delink");
  // Checkpoints of device memory (staged through host copies): a resume at step 2 reproduces the run bit for bit.
  expect_resume_bit_identical(f, steps, e32, kDev, "dev_ckpt");
}

// Communication from device memory: dp (all-reduce), ZeRO 1-3 (reduce-scatter, all-gather), tp with sequence
// parallelism, pipelines (grouped exchanges, under the rendezvous stand-in), 2D tensor parallelism (broadcast,
// reduce), context parallelism.
TEST(RunEmuDevice, ParallelPlansMatchSingleRankFloat64) {
  if (!have_mpi()) GTEST_SKIP() << "built without MPI";
  const ScopedEnv rendezvous = nccl_rendezvous();  // (the staged exchanges under NCCL's semantics)
  const int steps = 2;
  json ref = run(scenario("dev_ref2", json::object()), steps, true);
  ASSERT_FALSE(ref.is_null());
  expect_cases(ref,
               {
                   {"dev_dp2_tp2_pp2", {{"dp", 2}, {"tp", 2}, {"pp", 2}}, ""},
                   {"dev_dp2_tp2_sp_zero1", {{"dp", 2}, {"tp", 2}, {"sequence_parallel", true}, {"zero", 1}}, ""},
                   {"dev_dp2_pp2_zero2_interleaved",
                    {{"dp", 2}, {"pp", 2}, {"zero", 2}, {"schedule", "interleaved"}, {"virtual_stages", 2}}, ""},
                   {"dev_dp2_zero3_layered", {{"dp", 2}, {"zero", 3}, {"grad_accumulation", "layered"}}, ""},
                   {"dev_tp2d_q2", {{"tp", 4}, {"tp_mode", "2d"}}, ""},
                   {"dev_cp2_tp2_sp", {{"cp", 2}, {"tp", 2}, {"sequence_parallel", true}, {"attention", "flash"}}, ""},
               },
               steps);
}

// Offload: chunked (the host side in pinned memory; a tight budget moves chunks and compacts the arena every
// step), optimizer (host Adam on the backend's copies), granular (host layers loaded per run).
// --comm nccl on emu-device: the device communicator between ranks over NCCL's emulated table (exec/backends/emu/
// emu_nccl.cpp): device buffers' collectives, ZeRO's non-blocking reduce-scatters, the data-parallel reduction
// under the backward, and the pipeline's exchanges as one group each (1F1B's and the interleaved schedule's, with
// its receives posted early), under the rendezvous stand-in. The table's sums are rank-ordered: 1e-9 as above.
TEST(RunEmuDevice, NcclStandInMatchesSingleRankFloat64) {
  if (!have_mpi()) GTEST_SKIP() << "built without MPI";
  const ScopedEnv rendezvous = nccl_rendezvous();
  const int steps = 2;
  json ref = run(scenario("dev_ref_nccl", json::object()), steps, true);
  ASSERT_FALSE(ref.is_null());
  expect_cases(ref,
               {
                   {"dev_nccl_dp2_pp2_zero3", {{"dp", 2}, {"pp", 2}, {"zero", 3}}, "--comm nccl"},
                   {"dev_nccl_tp2_sp_pp2_interleaved",
                    {{"tp", 2}, {"sequence_parallel", true}, {"pp", 2}, {"schedule", "interleaved"}, {"virtual_stages", 2}},
                    "--comm nccl"},
                   {"dev_nccl_dp2_overlap", {{"dp", 2}, {"overlap_grad_reduce", true}}, "--comm nccl"},
                   // (the stand-in runs a non-blocking collective at its wait: ZeRO-2's reduce-scatters under the
                   // backward, added to the shard in order; ZeRO-3's gathers a layer ahead, read only after theirs)
                   {"dev_nccl_dp2_zero2", {{"dp", 2}, {"zero", 2}}, "--comm nccl"},
                   // context parallelism's K / V all-gathers and Optimus 2D's row and column broadcasts
                   {"dev_nccl_cp2_flash", {{"cp", 2}, {"attention", "flash"}}, "--comm nccl"},
                   {"dev_nccl_tp2d_q2", {{"tp", 4}, {"tp_mode", "2d"}}, "--comm nccl"},
                   // tp_comm_overlap's pieces: each read only after its wait, each staging buffer reused after it
                   {"dev_nccl_tp2_sp_overlap", {{"tp", 2}, {"sequence_parallel", true}, {"tp_comm_overlap", true}},
                    "--comm nccl"},
                   // overlap_param_gather: each unit's gather waited for at its first read in the next step
                   {"dev_nccl_dp2_zero1_param_gather", {{"dp", 2}, {"zero", 1}, {"overlap_param_gather", true}},
                    "--comm nccl"},
               },
               steps);
}

// A library that cannot put two ranks on one GPU (NCCL before 2.30; the stand-in under TP_EMU_NCCL_ONE_GPU=1, every
// rank on device 0): every rank refuses alike before any work, so the job ends with exit 2 and one error line.
TEST(RunEmuDevice, RanksSharingAGpuAreRefusedInOneLine) {
  if (!have_mpi()) GTEST_SKIP() << "built without MPI";
  const ScopedEnv one_gpu("TP_EMU_NCCL_ONE_GPU", "1");
  const std::string f = scenario("dev_nccl_one_gpu", {{"dp", 2}});
  int code = 0;
  EXPECT_TRUE(run(f, 1, false, &code, kDev + " --comm nccl").is_null());
  EXPECT_EQ(code, 2);
  const std::string log = log_text(f);
  EXPECT_NE(log.find("error: --comm nccl: ranks 0 and 1 share GPU 0 of one host"), std::string::npos) << log;
  size_t lines = 0;
  for (size_t at = log.find("error"); at != std::string::npos; at = log.find("error", at + 1)) ++lines;
  EXPECT_EQ(lines, 1u) << log;  // (no line per rank, no mpirun abort banner)
}

TEST(RunEmuDevice, OffloadPlansMatchSingleRankFloat64) {
  const int steps = 2;
  json ref = run(scenario("dev_ref3", json::object()), steps, true);
  ASSERT_FALSE(ref.is_null());
  const json chunked = {{"kind", "chunked"}, {"chunk_elements", 2048}};
  const json gran = {{"kind", "granular"}, {"layers", {1, 2}}};
  json prefetch = chunked;  // (the copy stream's loads are deferred here: a missing wait reads stale slots)
  prefetch["prefetch_runs"] = 2;
  std::vector<Case> cases = {
      {"dev_chunked_tight", {{"offload", chunked}}, "--device-budget 1000000"},
      {"dev_chunked_prefetch", {{"offload", prefetch}}, "--device-budget 1000000"},
      {"dev_optimizer", {{"offload", {{"kind", "optimizer"}}}}, ""},
      {"dev_granular", {{"offload", gran}}, ""},
  };
  if (have_mpi()) {
    cases.push_back({"dev_chunked_dp2_zero3", {{"dp", 2}, {"zero", 3}, {"offload", chunked}}, "--device-budget 1000000"});
    cases.push_back({"dev_chunked_dp2_zero3_prefetch", {{"dp", 2}, {"zero", 3}, {"offload", prefetch}}, "--device-budget 1000000"});
    cases.push_back({"dev_optimizer_dp2_pp2_zero2", {{"dp", 2}, {"pp", 2}, {"zero", 2}, {"offload", {{"kind", "optimizer"}}}}, ""});
    cases.push_back({"dev_optimizer_dp2_zero1", {{"dp", 2}, {"zero", 1}, {"offload", {{"kind", "optimizer"}}}}, ""});
    cases.push_back({"dev_granular_dp2_zero2", {{"dp", 2}, {"zero", 2}, {"offload", gran}}, ""});
  }
  expect_cases(ref, cases, steps);
  json off = run(scenario("dev_chunked_tight", {{"offload", chunked}}), steps, true, nullptr, kDev + " --device-budget 1000000");
  ASSERT_FALSE(off.is_null());
  EXPECT_GT(off["offload"]["h2d_moves"][steps - 1].get<double>(), 0);  // chunks did move
  off = run(scenario("dev_chunked_prefetch", {{"offload", prefetch}}), steps, true, nullptr, kDev + " --device-budget 1000000");
  ASSERT_FALSE(off.is_null());
  EXPECT_GT(off["offload"]["prefetch_h2d_bytes"][steps - 1].get<double>(), 0);  // loads went through the copy stream
  // A roomy budget: hybrid Adam's state on the device from the second step, its copies on the (deferred) copy stream
  // around the device Adam, queued before the host's Adam of the other chunks (three steps: the second step's update
  // shows in the third loss; without the compute stream's wait for the gradients' upload the losses differ).
  json ref3 = run(scenario("dev_ref3_hybrid", json::object()), 3, true);
  off = run(scenario("dev_chunked_hybrid", {{"offload", chunked}}), 3, true, nullptr, kDev + " --device-budget 8000000");
  ASSERT_FALSE(ref3.is_null());
  ASSERT_FALSE(off.is_null());
  EXPECT_GT(off["offload"]["os_device_bytes"][2].get<double>(), 0);
  expect_close(off, ref3, "losses", 1e-9, "dev_chunked_hybrid");
}

// Mixture of experts: the all-to-all of dispatched tokens from device memory (ep 2 inside dp 2).
TEST(RunEmuDevice, MoeMatchesSingleRankFloat64) {
  auto moe = [](const std::string& name, const json& plan) {
    std::ifstream in(std::string(TP_SOURCE_DIR) + "/scenarios/exec/tiny-moe.json");
    json j = json::parse(in);
    for (auto it = plan.begin(); it != plan.end(); ++it) j["plan"][it.key()] = it.value();
    std::string f = tmpdir() + "/" + name + ".json";
    std::ofstream(f) << j.dump(2);
    return f;
  };
  json ref = run(moe("dev_moe_ref", json::object()), 2, true);
  ASSERT_FALSE(ref.is_null());
  std::string one = moe("dev_moe_1", json::object());
  json got = run(one, 2, true, nullptr, kDev);
  ASSERT_FALSE(got.is_null()) << log_text(one);
  expect_close(got, ref, "losses", 1e-9, "emu-device moe");
  if (!have_mpi()) return;
  std::string par = moe("dev_moe_dp2_ep2", {{"dp", 2}, {"ep", 2}});
  got = run(par, 2, true, nullptr, kDev);
  ASSERT_FALSE(got.is_null()) << log_text(par);
  expect_close(got, ref, "losses", 1e-9, "emu-device moe dp2 ep2");
  expect_close(got, ref, "grad_norm", 1e-9, "emu-device moe dp2 ep2");
}

// A device too small for the run (TP_EMU_DEVICE_BYTES, the emulated device's memory): `run` exits 2 naming the
// backend's peak, the scenario's GPU and the simulator's predicted breakdown, instead of a bare bad_alloc.
TEST(RunEmuDevice, OutOfDeviceMemoryNamesThePredictedBreakdown) {
  const std::string f = scenario("dev_oom", json::object());
  const std::string cmd = "TP_EMU_DEVICE_BYTES=300000 " + std::string(TP_BINARY) + " run " + f +
                          " --backend emu-device --steps 1 --quiet 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  const int st = pclose(p);
  EXPECT_EQ(WIFEXITED(st) ? WEXITSTATUS(st) : -1, 2) << out;
  EXPECT_NE(out.find("backend emu-device: out of device memory after allocating"), std::string::npos) << out;
  // The device the run is on, with the capacity TP_EMU_DEVICE_BYTES gave it (300000 bytes = 0.29 MiB), then the
  // scenario's GPU.
  EXPECT_NE(out.find("on the CPU block emulator's device memory, which has 0.29 MiB; the scenario's GPU"), std::string::npos) << out;
  EXPECT_NE(out.find("The simulator predicts"), std::string::npos) << out;
  EXPECT_NE(out.find("activations"), std::string::npos) << out;
  EXPECT_EQ(out.find("bad_alloc"), std::string::npos) << out;
}

// --gpu-memory-budget (a smaller GPU, emulated by the backend's allocator) on emu-device: the same refusal at the
// budget's capacity, a budget that fits trains; on the cpu backend the option is a usage error.
TEST(RunEmuDevice, GpuMemoryBudgetEmulatesASmallerDevice) {
  const std::string f = scenario("dev_budget", json::object());
  auto sh = [](const std::string& cmd, std::string& out) {
    FILE* p = popen((cmd + " 2>&1").c_str(), "r");
    out.clear();
    char buf[4096];
    size_t n;
    while (p && (n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
    const int st = p ? pclose(p) : -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  };
  const std::string run = std::string(TP_BINARY) + " run " + f + " --steps 1 --quiet ";
  std::string out;
  EXPECT_EQ(sh(run + "--backend emu-device --gpu-memory-budget 300000", out), 2) << out;
  EXPECT_NE(out.find("out of device memory"), std::string::npos) << out;
  EXPECT_NE(out.find("which has 0.29 MiB"), std::string::npos) << out;
  EXPECT_EQ(sh(run + "--backend emu-device --gpu-memory-budget 2e9", out), 0) << out;
  EXPECT_EQ(sh(run + "--gpu-memory-budget 2e9", out), 2) << out;
  EXPECT_NE(out.find("--gpu-memory-budget needs a backend with device memory"), std::string::npos) << out;
}
