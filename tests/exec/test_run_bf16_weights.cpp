// test_run_bf16_weights: training.precision "bf16" keeps a bf16 copy of each weight matrix (exec/model/gpt.hpp
// WeightCopies16), as Megatron-LM keeps bf16 parameters beside the optimizer's fp32 master copy, and the GEMMs read
// the copies (ops::matmul16, linear_fwd's w16) instead of rounding the fp32 weights in each call.
// - Same results: a copy holds exactly the rounding the GEMM would apply, so each plan's losses and gradient norms
//   equal, bit for bit, those of the same run with --no-bf16-weight-copies (each GEMM rounds the fp32 weights). The
//   plans cover where the weights are when a copy is made: resident (single rank, tp + SP, pp), gathered for a run
//   (ZeRO-3), loaded for a run (granular offload), shared by several layers (Pseudo-to-Real), experts (MoE + ep).
//   A copy that outlived its step (the weights changed by the optimizer) would change every loss after the first.
//   The embedding lookup reads the tied table's bf16 values, from its copy or rounded (ParamTables::bf16_lookup).
//   Optimizer offload with ZeRO 0-2 keeps the GEMM weights (and the table) on the device only as their bf16 copies,
//   written from the host's master copy after each step (RankRun::host_master; ZeRO 1-2 over several data ranks:
//   the updated fp32 slices all-gathered, then packed): the same results again, and the same after a resume.
// - Memory (emu-device counts every allocation): one copy of the weight matrices, 2 bytes each, held from their first
//   use; under ZeRO-3 a layer's copy lives only while its parameters are gathered. Under optimizer offload the
//   GEMM weights and the table have no fp32 device copy (2 bytes an element instead of 4 + 2).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "exec/model/gpt.hpp"
#include "exec/oracle_run.hpp"
#include "exec/runtime/train.hpp"
#include "models/scenario.hpp"
#include "sim/op_cost.hpp"

using tp::json;
using namespace oracle;

namespace {

// tiny-gpt (4 layers, hidden 64, vocabulary 256; or `base`) in bf16 with `plan` over its plan.
std::string weights_scenario(const std::string& name, const json& plan, const std::string& base = "tiny-gpt") {
  return precision_scenario("bf16w", name, plan, base, "bf16");
}

// The run of `plan` with and without the weights' copies: the same losses and gradient norms, bit for bit.
void expect_copies_change_nothing(const std::string& name, const json& plan, const std::string& backend = "cpu",
                                  const std::string& base = "tiny-gpt") {
  const int steps = 3;
  const std::string f = weights_scenario(name, plan, base);
  const std::string be = "--backend " + backend;
  json with = run(f, steps, false, nullptr, be);
  ASSERT_FALSE(with.is_null()) << name << "\n" << log_text(f);
  json without = run(f, steps, false, nullptr, be + " --no-bf16-weight-copies");
  ASSERT_FALSE(without.is_null()) << name << "\n" << log_text(f);
  ASSERT_EQ(with["losses"].size(), (size_t)steps) << name;
  for (const char* key : {"losses", "grad_norm"})
    for (size_t i = 0; i < with[key].size(); ++i)
      EXPECT_EQ(with[key][i].get<double>(), without[key][i].get<double>()) << name << " " << key << "[" << i << "]";
}

// Elements of tiny-gpt's weight matrices: per layer QKV [64, 192], proj [64, 64], fc1 [64, 256], fc2 [256, 64]; the
// tied embedding [256, 64] (the LM head's weight).
constexpr double kLayerMatrixElems = 64.0 * 192 + 64 * 64 + 2 * 64 * 256, kWteElems = 256.0 * 64;

}  // namespace

TEST(Bf16Weights, CopiesGiveTheResultsOfRoundingInEachGemm) {
  expect_copies_change_nothing("single_flash", json::object());
  expect_copies_change_nothing("single_unfused", {{"attention", "unfused"}, {"recompute", "full"}});
  expect_copies_change_nothing("single_emu_device", {{"attention", "flash"}}, "emu-device");
  expect_copies_change_nothing("granular", {{"offload", {{"kind", "granular"}, {"fraction", 0.5}}}});
  expect_copies_change_nothing("delink", {{"delink", {{"unique_layers", 2}, {"tokens", 512}}}});  // (at step 2)
  expect_copies_change_nothing("moe", json::object(), "cpu", "tiny-moe");
  // optimizer offload: the layers' GEMM weights as bf16 only on the device (written from the host master copy)
  const json opt = {{"kind", "optimizer"}};
  expect_copies_change_nothing("optimizer", {{"offload", opt}});
  expect_copies_change_nothing("optimizer_zero3_one_rank", {{"zero", 3}, {"offload", opt}});  // (nothing to shard)
  expect_copies_change_nothing("optimizer_emu_device", {{"attention", "flash"}, {"offload", opt}}, "emu-device");
  expect_copies_change_nothing("optimizer_delink", {{"offload", opt}, {"delink", {{"unique_layers", 2}, {"tokens", 512}}}});
  expect_copies_change_nothing("optimizer_moe", {{"offload", opt}}, "cpu", "tiny-moe");
  if (!have_mpi()) return;
  expect_copies_change_nothing("tp2_sp_pp2", {{"tp", 2}, {"sequence_parallel", true}, {"pp", 2}});
  expect_copies_change_nothing("dp2_zero3", {{"dp", 2}, {"zero", 3}});
  expect_copies_change_nothing("moe_dp2_ep2", {{"dp", 2}, {"ep", 2}}, "cpu", "tiny-moe");
  expect_copies_change_nothing("optimizer_tp2_pp2", {{"tp", 2}, {"pp", 2}, {"offload", opt}});
  // Pseudo-to-Real on two layouts: the pseudo phase on tp 2, the handover into the real plan's master copy
  const json pseudo_tp2 = {{"attention", "unfused"}, {"dp", 1}, {"tp", 2}, {"pp", 1}, {"microbatch", 2}};
  expect_copies_change_nothing("optimizer_delink_from_tp2",
                               {{"offload", opt}, {"delink", {{"unique_layers", 2}, {"tokens", 512}, {"plan", pseudo_tp2}}}});
  expect_copies_change_nothing("optimizer_dp2", {{"dp", 2}, {"offload", opt}});
  // ZeRO 1-2: the slices all-gathered as fp32, the weights packed into their copies on the device
  expect_copies_change_nothing("optimizer_dp2_zero1", {{"dp", 2}, {"zero", 1}, {"offload", opt}});
  expect_copies_change_nothing("optimizer_dp2_zero2_pp2", {{"dp", 2}, {"zero", 2}, {"pp", 2}, {"offload", opt}});
  expect_copies_change_nothing("optimizer_moe_dp2_ep2_zero1", {{"dp", 2}, {"ep", 2}, {"zero", 1}, {"offload", opt}}, "cpu",
                               "tiny-moe");
}

// Single rank on emu-device: the peak grows by the copies of every weight matrix, 2 bytes per element.
TEST(Bf16Weights, DevicePeakHoldsOneCopyOfTheWeights) {
  const std::string f = weights_scenario("mem", json::object());
  json with = run(f, 2, false, nullptr, "--backend emu-device");
  json without = run(f, 2, false, nullptr, "--backend emu-device --no-bf16-weight-copies");
  ASSERT_FALSE(with.is_null()) << log_text(f);
  ASSERT_FALSE(without.is_null()) << log_text(f);
  const double want = 2 * (4 * kLayerMatrixElems + kWteElems);
  const double got = with["peak_memory_bytes"][0].get<double>() - without["peak_memory_bytes"][0].get<double>();
  EXPECT_GT(got, 0.95 * want) << with["peak_memory_bytes"][0] << " vs " << without["peak_memory_bytes"][0];
  EXPECT_LT(got, 1.05 * want);
}

// x rounded to bf16, nearest even (x finite).
float bf16_of(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
  std::memcpy(&x, &u, 4);
  return x;
}

// The bf16 lookup (ParamTables::bf16_lookup): each row is wte's bf16 values plus the positions in fp32, the same
// from wte's copy (WeightCopies16) as from the looked-up rows rounded; without it, the fp32 rows.
TEST(Bf16Weights, LookupReadsTheTablesBf16Values) {
  namespace E = tp::exec;
  E::GptShape s;
  s.layers = 1, s.C = 8, s.H = 2, s.Hkv = 2, s.D = 4, s.F = 32, s.V = 16, s.maxT = 4;
  const E::GptLayout lay = E::gpt_layout(s);
  E::Buf<float> p((size_t)lay.total), g((size_t)lay.total);
  std::mt19937 gen(7);
  std::uniform_real_distribution<double> u(-1, 1);
  for (float& x : p) x = float(u(gen));
  E::Gpt<float> m;
  m.lay = lay;
  m.params = p.data();
  m.grads = g.data();
  const long B = 2, Tn = 4, C = 8, N = B * Tn;
  const std::vector<int32_t> tok = {3, 0, 15, 7, 7, 1, 9, 12};
  auto embed = [&](bool b16, E::WeightCopies16* w) {
    m.bf16_lookup = b16;
    m.w16 = w;
    E::Buf<float> x((size_t)(N * C));
    m.embed_fwd(x.data(), tok.data(), B, Tn);
    return std::vector<float>(x.begin(), x.end());
  };
  E::WeightCopies16 copies(lay.views.size());
  const std::vector<float> plain = embed(false, nullptr), rounded = embed(true, nullptr), copied = embed(true, &copies);
  EXPECT_EQ(rounded, copied);
  const float* wte = p.data() + lay.views[(size_t)lay.params.wte].offset;
  const float* wpe = p.data() + lay.views[(size_t)lay.params.wpe].offset;
  int differ = 0;
  for (long n = 0; n < N; ++n)
    for (long c = 0; c < C; ++c) {
      const float e = wte[tok[(size_t)n] * C + c], q = wpe[(n % Tn) * C + c];
      EXPECT_EQ(rounded[(size_t)(n * C + c)], bf16_of(e) + q) << n << " " << c;
      EXPECT_EQ(plain[(size_t)(n * C + c)], e + q) << n << " " << c;
      differ += plain[(size_t)(n * C + c)] != rounded[(size_t)(n * C + c)];
    }
  EXPECT_GT(differ, N * C / 2);
}

// Optimizer offload, single rank on emu-device: the layers' GEMM weights and the tied embedding table are on the
// device only as bf16 (2 bytes an element where the run without copies holds them as fp32, 4); the positions, norms
// and biases stay fp32. And a resume from a checkpoint of the host master copy continues bit for bit.
TEST(Bf16Weights, OptimizerOffloadHoldsTheGemmWeightsOnlyAsBf16) {
  const json plan = {{"offload", {{"kind", "optimizer"}}}};
  const std::string f = weights_scenario("mem_optimizer", plan);
  json with = run(f, 2, false, nullptr, "--backend emu-device");
  json without = run(f, 2, false, nullptr, "--backend emu-device --no-bf16-weight-copies");
  ASSERT_FALSE(with.is_null()) << log_text(f);
  ASSERT_FALSE(without.is_null()) << log_text(f);
  EXPECT_EQ(with["param_elements"][0], without["param_elements"][0]);
  const double matrices = 4 * kLayerMatrixElems + kWteElems;  // (the layers' and the table's, bf16 only)
  const double want = -2 * matrices;                              // 2 bytes an element
  const double got = with["peak_memory_bytes"][0].get<double>() - without["peak_memory_bytes"][0].get<double>();
  EXPECT_NEAR(got, want, 0.05 * 2 * matrices) << with["peak_memory_bytes"][0] << " vs "
                                              << without["peak_memory_bytes"][0];
  // The host step sends those weights up as bf16 (2 bytes), the rest as fp32; the gradients come down as fp32.
  const double params = with["param_elements"][0].get<double>();
  for (size_t s = 0; s < 2; ++s) {
    EXPECT_EQ(with["offload"]["h2d_bytes"][s].get<double>(), 2 * matrices + 4 * (params - matrices)) << s;
    EXPECT_EQ(without["offload"]["h2d_bytes"][s].get<double>(), 4 * params) << s;
    EXPECT_EQ(with["offload"]["d2h_bytes"][s].get<double>(), 4 * params) << s;
  }
  // The resume: one rank (the master copy is every parameter), and ZeRO-2 over two (each master its slices).
  for (const auto& [name, pl] : std::vector<std::pair<std::string, json>>{
           {"optimizer_ckpt", plan}, {"optimizer_ckpt_dp2_zero2", {{"dp", 2}, {"zero", 2}, {"offload", plan["offload"]}}}}) {
    if (pl.contains("dp") && !have_mpi()) continue;
    const std::string g = weights_scenario(name, pl), dir = tmpdir() + "/bf16w_" + name;
    std::filesystem::remove_all(dir);
    json whole = run(g, 4, false);
    json first = run(g, 4, false, nullptr, "--checkpoint-dir " + dir + " --checkpoint-every 2");
    std::filesystem::remove_all(dir + "/step_00000004");  // resume from step 2
    json rest = run(g, 4, false, nullptr, "--checkpoint-dir " + dir + " --resume");
    ASSERT_FALSE(whole.is_null()) << name;
    ASSERT_FALSE(first.is_null()) << name;
    ASSERT_FALSE(rest.is_null()) << name << "\n" << log_text(g);
    ASSERT_EQ(rest["losses"].size(), 2u) << name;
    for (int s = 2; s < 4; ++s) EXPECT_EQ(rest["losses"][s - 2], whole["losses"][s]) << name << " " << s;
    if (!pl.contains("dp")) continue;
    // ZeRO-2's checkpoint holds the slices' master copy; without copies the run keeps whole units: refused, exit 2
    int code = 0;
    EXPECT_TRUE(run(g, 4, false, &code, "--checkpoint-dir " + dir + " --resume --no-bf16-weight-copies").is_null());
    EXPECT_EQ(code, 2) << name;
  }
}

// Chunked offload in bf16 keeps its chunks as bf16 (exec/runtime/offload/chunk_store.hpp "bf16 slots": PatrickStar's
// fp16 chunks, the simulator's 2 bytes an element): half the chunk bytes of the T chunks that --no-bf16-weight-copies
// keeps, and the losses and gradient norms of the T chunks, bit for bit, with a budget that moves chunks in every
// step (cpu and emu-device; on cpu also dp 2 with ZeRO-3), which on cpu are the plan's without offload (on emu-device the chunks' host Adam and
// gradient norm sum on the host, the plan without offload on the device: equal to rounding); a resume continues bit
// for bit (the host's bf16 chunks packed from the loaded parameters).
TEST(Bf16Weights, ChunkedOffloadKeepsItsChunksInBf16) {
  const json chunked = {{"kind", "chunked"}, {"chunk_elements", 2048}};
  const std::string f = weights_scenario("chunked16", {{"offload", chunked}});
  const std::string ref = weights_scenario("chunked16_ref", json::object());
  const std::string budget = " --device-budget 300000";
  for (const std::string be : {"cpu", "emu-device"}) {
    json want = run(ref, 3, false, nullptr, "--backend " + be);
    json b16 = run(f, 3, false, nullptr, "--backend " + be + budget);
    json t = run(f, 3, false, nullptr, "--backend " + be + budget + " --no-bf16-weight-copies");
    ASSERT_FALSE(want.is_null()) << log_text(ref);
    ASSERT_FALSE(b16.is_null()) << log_text(f);
    ASSERT_FALSE(t.is_null()) << log_text(f);
    for (const char* key : {"losses", "grad_norm"})
      for (size_t i = 0; i < want[key].size(); ++i) {
        EXPECT_EQ(b16[key][i].get<double>(), t[key][i].get<double>()) << be << " " << key << "[" << i << "]";
        if (be == "cpu") {
          EXPECT_EQ(b16[key][i].get<double>(), want[key][i].get<double>()) << key << "[" << i << "]";
        } else {
          EXPECT_NEAR(b16[key][i].get<double>(), want[key][i].get<double>(), 1e-5) << key << "[" << i << "]";
        }
      }
    EXPECT_EQ(2 * b16["offload"]["chunk_bytes"].get<double>(), t["offload"]["chunk_bytes"].get<double>()) << be;
    EXPECT_GT(b16["offload"]["h2d_bytes"][2].get<double>(), 0) << be;  // (the budget moves chunks every step)
    EXPECT_GT(b16["offload"]["d2h_bytes"][2].get<double>(), 0) << be;
  }
  // dp 2 with ZeRO-3 (the validator's rule for chunked with dp > 1): the all-gathers before each run write the T
  // parameters, which the bf16 chunks then repack (ChunkStore::rewritten); without it every loss after the first moves.
  if (have_mpi()) {
    const json dp2 = {{"dp", 2}, {"zero", 3}};
    json want2 = run(weights_scenario("chunked16_dp2_ref", dp2), 3, false);
    json plan2 = dp2;
    plan2["offload"] = chunked;
    const std::string g = weights_scenario("chunked16_dp2", plan2);
    json b2 = run(g, 3, false, nullptr, budget);
    json t2 = run(g, 3, false, nullptr, budget + " --no-bf16-weight-copies");
    ASSERT_FALSE(want2.is_null());
    ASSERT_FALSE(b2.is_null()) << log_text(g);
    ASSERT_FALSE(t2.is_null()) << log_text(g);
    EXPECT_EQ(b2["losses"], want2["losses"]);
    EXPECT_EQ(b2["grad_norm"], want2["grad_norm"]);
    EXPECT_EQ(t2["losses"], want2["losses"]);
    EXPECT_EQ(2 * b2["offload"]["chunk_bytes"].get<double>(), t2["offload"]["chunk_bytes"].get<double>());
    // With prefetch: the all-gathers' repacking of a run's chunks after the copy stream's prefetch of them
    // (ChunkStore::set_host_rewrites), bit for bit.
    json plan2p = plan2;
    plan2p["offload"]["prefetch_runs"] = 1;
    const std::string gp = weights_scenario("chunked16_dp2_prefetch", plan2p);
    json p2 = run(gp, 3, false, nullptr, budget);
    ASSERT_FALSE(p2.is_null()) << log_text(gp);
    EXPECT_EQ(p2["losses"], want2["losses"]);
    EXPECT_GT(p2["offload"]["prefetch_h2d_bytes"][2].get<double>(), 0);
    // A roomy budget: hybrid Adam over this rank's ZeRO-3 slices (a chunk's state is its slices' elements).
    json h2 = run(g, 3, false, nullptr, " --device-budget 1500000");
    ASSERT_FALSE(h2.is_null()) << log_text(g);
    EXPECT_EQ(h2["losses"], want2["losses"]);
    EXPECT_EQ(h2["grad_norm"], want2["grad_norm"]);
    const double os2 = h2["offload"]["os_device_bytes"][2].get<double>();
    EXPECT_GT(os2, 0);
    EXPECT_EQ(std::fmod(os2, 12.0), 0.0);
    const std::string dir = tmpdir() + "/bf16w_chunked16_dp2";  // resumed: the device moments of both ranks saved
    std::filesystem::remove_all(dir);
    json first = run(g, 3, false, nullptr, " --device-budget 1500000 --checkpoint-dir " + dir + " --checkpoint-every 2");
    std::filesystem::remove_all(dir + "/step_00000003");
    json rest = run(g, 3, false, nullptr, " --device-budget 1500000 --checkpoint-dir " + dir + " --resume");
    ASSERT_FALSE(rest.is_null()) << log_text(g);
    ASSERT_EQ(rest["losses"].size(), 1u);
    EXPECT_EQ(rest["losses"][0], h2["losses"][2]);
  }
  // A roomy budget: hybrid Adam keeps the first chunks' optimizer state on the device from the second step on, the
  // tight one none; the same results. Resumes (the device moments written to the checkpoint) continue bit for bit.
  const std::string roomy = " --device-budget 1500000";
  json hy = run(f, 4, false, nullptr, roomy);
  json want4 = run(ref, 4, false);
  ASSERT_FALSE(hy.is_null()) << log_text(f);
  ASSERT_FALSE(want4.is_null());
  EXPECT_EQ(hy["losses"], want4["losses"]);
  EXPECT_EQ(hy["grad_norm"], want4["grad_norm"]);
  EXPECT_EQ(hy["offload"]["os_device_bytes"][0].get<double>(), 0);  // (the warm-up step: none yet)
  const double os = hy["offload"]["os_device_bytes"][1].get<double>();
  EXPECT_GT(os, 0);
  EXPECT_EQ(std::fmod(os, 12.0), 0.0);  // fp32 master and two moments, 12 bytes an element
  EXPECT_LT(os + hy["offload"]["chunk_bytes"].get<double>(), 1500000);
  for (const std::string& b : {budget, roomy}) {
    const std::string dir = tmpdir() + "/bf16w_chunked16";
    std::filesystem::remove_all(dir);
    json whole = run(f, 4, false, nullptr, b);
    json first = run(f, 4, false, nullptr, b + " --checkpoint-dir " + dir + " --checkpoint-every 2");
    std::filesystem::remove_all(dir + "/step_00000004");  // resume from step 2
    json rest = run(f, 4, false, nullptr, b + " --checkpoint-dir " + dir + " --resume");
    ASSERT_FALSE(whole.is_null()) << b;
    ASSERT_FALSE(first.is_null()) << b;
    ASSERT_FALSE(rest.is_null()) << b << "\n" << log_text(f);
    ASSERT_EQ(rest["losses"].size(), 2u) << b;
    for (int s = 2; s < 4; ++s) EXPECT_EQ(rest["losses"][s - 2], whole["losses"][s]) << b << " " << s;
    if (b == roomy) {
      EXPECT_GT(first["offload"]["os_device_bytes"][3].get<double>(), 0);
    }
  }
}

// Pseudo-to-Real (since the twenty-ninth session the pseudo phase keeps bf16 chunks too): both phases' chunks in
// bf16, hybrid Adam in each where the budget leaves room, its device moments handed over at the delink
// (ChunkStore::sync_os_to_host before the export); bit for bit the run without offload, one rank and pp 2.
TEST(Bf16Weights, ChunkedOffloadKeepsBf16ChunksThroughTheDelink) {
  const json delink = {{"unique_layers", 2}, {"tokens", 512}};
  for (const json& base : {json::object(), json{{"pp", 2}}}) {
    if (!base.empty() && !have_mpi()) continue;
    const std::string tag = base.empty() ? "" : "_pp2";
    json plan = base;
    plan["delink"] = delink;
    json want = run(weights_scenario("chunked16_delink_ref" + tag, plan), 4, false, nullptr, "--delink-step 2");
    ASSERT_FALSE(want.is_null()) << tag;
    plan["offload"] = {{"kind", "chunked"}, {"chunk_elements", 16384}};
    const std::string f = weights_scenario("chunked16_delink" + tag, plan);
    for (const char* budget : {"400000", "1500000"}) {
      json got = run(f, 4, false, nullptr, std::string("--delink-step 2 --device-budget ") + budget);
      ASSERT_FALSE(got.is_null()) << tag << " " << budget << "\n" << log_text(f);
      EXPECT_EQ(got["losses"], want["losses"]) << tag << " " << budget;
      EXPECT_EQ(got["grad_norm"], want["grad_norm"]) << tag << " " << budget;
      if (std::string(budget) == "1500000") {  // (each phase places it at the end of its warm-up step)
        EXPECT_GT(got["offload"]["os_device_bytes"][1].get<double>(), 0) << tag;
        EXPECT_GT(got["offload"]["os_device_bytes"][3].get<double>(), 0) << tag;
      }
    }
  }
}

// ZeRO-3 over two data ranks: a layer's copy is dropped with its gathered parameters at its run's end, so a rank
// holds the embedding's copy and those of the layers gathered at the moment (at most two), not all four.
TEST(Bf16Weights, Zero3HoldsTheGatheredLayersCopiesOnly) {
  if (!have_mpi()) GTEST_SKIP() << "no MPI launcher";
  const std::string f = weights_scenario("mem_zero3", {{"dp", 2}, {"zero", 3}});
  json with = run(f, 2, false, nullptr, "--backend emu-device");
  json without = run(f, 2, false, nullptr, "--backend emu-device --no-bf16-weight-copies");
  ASSERT_FALSE(with.is_null()) << log_text(f);
  ASSERT_FALSE(without.is_null()) << log_text(f);
  const double got = with["peak_memory_bytes"][0].get<double>() - without["peak_memory_bytes"][0].get<double>();
  EXPECT_GE(got, 2 * kWteElems) << with["peak_memory_bytes"][0] << " vs " << without["peak_memory_bytes"][0];
  EXPECT_LE(got, 2 * (2 * kLayerMatrixElems + kWteElems) * 1.05);
}

// run_bytes_per_rank (the CPU run's host-memory check) counts the copies as 2 bytes per parameter of the rank's
// share, only where plan_keeps_bf16_weight_copies says the run keeps them: not under chunked offload nor Optimus 2D.
TEST(Bf16Weights, RunBytesCountTwoBytesPerParameterWhereCopiesAreKept) {
  const auto bytes = [](const std::string& name, const json& plan, const std::string& precision = "bf16") {
    const tp::Scenario sc = tp::load_scenario(precision_scenario("bf16bytes", name, plan, "tiny-gpt", precision));
    return std::pair{tp::exec::run_bytes_per_rank(sc, false), tp::exec::plan_keeps_bf16_weight_copies(sc)};
  };
  const std::string tiny = std::string(TP_SOURCE_DIR) + "/scenarios/exec/tiny-gpt.json";
  const double params = tp::total_params(tp::load_scenario(tiny).model);
  const json chunked = {{"kind", "chunked"}, {"chunk_elements", 2048}};
  // One rank: the same plan with chunked offload differs by the copies alone (the estimate has no offload term).
  const auto [resident, keeps] = bytes("resident", json::object());
  const auto [offloaded, keeps_chunked] = bytes("chunked", {{"offload", chunked}});
  EXPECT_TRUE(keeps);
  EXPECT_FALSE(keeps_chunked);
  EXPECT_DOUBLE_EQ(resident - offloaded, 2 * params);
  // tp 4 in 1D keeps copies of its quarter; Optimus 2D on the same 4 GPUs keeps none.
  const auto [tp1d, keeps1d] = bytes("tp4", {{"tp", 4}});
  const auto [tp2d, keeps2d] = bytes("tp4_2d", {{"tp", 4}, {"tp_mode", "2d"}});
  EXPECT_TRUE(keeps1d);
  EXPECT_FALSE(keeps2d);
  EXPECT_DOUBLE_EQ(tp1d - tp2d, 2 * params / 4);
  // fp32 keeps none: its estimate is the bf16 one's without the copies, with 4-byte activations.
  EXPECT_FALSE(bytes("fp32", json::object(), "fp32").second);
}

// run_bytes_per_rank shards the model states as the simulator does (sim/step_formulas.hpp zero_shard): ZeRO-1 the
// Adam moments, ZeRO-2 also the gradients, ZeRO-3 also the weights (holding the gathered layer and the next).
TEST(RunBytes, ModelStatesShardByZeroStageAsTheSimulatorShardsThem) {
  const auto bytes = [](int zero) {
    const tp::Scenario sc =
        tp::load_scenario(precision_scenario("zerobytes", "z" + std::to_string(zero), {{"dp", 4}, {"zero", zero}}, "tiny-gpt", "fp32"));
    return tp::exec::run_bytes_per_rank(sc, false);
  };
  const std::string tiny = std::string(TP_SOURCE_DIR) + "/scenarios/exec/tiny-gpt.json";
  const tp::Transformer m = tp::load_scenario(tiny).model;
  const double P = tp::total_params(m), e = 4;
  EXPECT_DOUBLE_EQ(bytes(0) - bytes(1), e * 2 * P * 3 / 4);                 // the moments
  EXPECT_DOUBLE_EQ(bytes(1) - bytes(2), e * P * 3 / 4);                     // the gradients
  EXPECT_DOUBLE_EQ(bytes(2) - bytes(3), e * (P * 3 / 4 - 2 * tp::layer_params_full(m)));  // the weights, less two layers
}
