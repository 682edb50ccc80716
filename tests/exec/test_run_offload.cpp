// Optimizer offload (plan.offload "optimizer", ZeRO-Offload; exec/runtime/offload/host_optimizer.hpp) in `trainplan run`:
// - it trains exactly like the single-rank float64 run without offload (losses and gradient norms to 1e-9) on
//   one rank, over dp 2 with ZeRO 0-3, with pp 2 and with tp 2 + sequence parallelism, and on the emu backend
//   (whose registry rejects host pointers in device ops and copies of the wrong kind); a checkpoint resume
//   restores the host moments (bit-identical losses);
// - the copies are the closed form: per step, rank 0's own parameters (its ZeRO slices with ZeRO >= 1 and
//   dp > 1, else every parameter of its stage) go down as gradients and up as parameters, sizeof(T) each;
// - the optimizer state left the device: `validate`'s device peak is the no-offload heap peak less the two
//   moments (8 bytes per parameter in fp32), the heap grew by the host's extra copies, and the simulator's
//   device peak matches the measured one within 5 % on the 256-wide benchmark model.
// Granular offload (plan.offload "granular", M6-10T; exec/runtime/offload/runtime_granular.hpp) likewise matches the oracle (dp
// 1 / 2, ZeRO 0-2, pp 2, tp 2 + sequence parallelism, layered accumulation, "fraction", emu) with the closed-form
// copies: every run of an offloaded layer loads it (standard accumulation: 2 m runs a layer a step, layered: 2),
// every backward run sends its gradient down (its ZeRO-2 slice over dp 2); at most prefetch_layers + 1 loaded
// copies are held; the simulator's device peak is within 5 % of the measured one on the benchmark model. With
// ZeRO-3 (a run loads the rank's slice and all-gathers the layer on the device), cp 2, 2D tensor parallelism and
// Pseudo-to-Real delinking (offload by weight slot; the delink moves state between host and device slots) it
// matches the oracle too, with the closed-form copies where tp is 1.
#include <gtest/gtest.h>

#include <sys/wait.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "exec/oracle_run.hpp"
#include "models/json_check.hpp"

using tp::json;
using namespace oracle;

std::string quick_profile();  // test_calibrate.cpp

namespace {

const json kOpt = {{"kind", "optimizer"}};

// The tiny model's (scenarios/exec/tiny-gpt.json: GELU, vocab 256, hidden 64, 4 layers, seq 32, tied) parameter
// units with tp 1, written out: embedding (wte + wpe), one layer, the final LayerNorm.
constexpr long long kV = 256, kC = 64, kT = 32, kF = 4 * kC, kL = 4;
constexpr long long kEmbed = kV * kC + kT * kC;
constexpr long long kLayer = 2 * kC + (kC * 3 * kC + 3 * kC) + (kC * kC + kC) + 2 * kC + (kC * kF + kF) + (kF * kC + kC);
constexpr long long kHead = 2 * kC;
constexpr long long kParams = kEmbed + kL * kLayer + kHead;

// Elements rank 0 (dp rank 0 of stage 0) updates with tp 1: its slice of every unit it holds.
long long rank0_own(int dp, int zero, int pp) {
  auto part = [&](long long len) { return zero >= 1 && dp > 1 ? (len + dp - 1) / dp : len; };
  long long n = part(kEmbed);
  for (long long l = 0; l < kL / pp; ++l) n += part(kLayer);
  if (pp == 1) n += part(kHead);
  return n;
}

void expect_copies(const json& r, long long own_elems, size_t elem_bytes, int steps, const std::string& what) {
  ASSERT_TRUE(r.contains("offload")) << what;
  EXPECT_EQ(r["offload"]["kind"], "optimizer") << what;
  ASSERT_EQ(r["offload"]["d2h_bytes"].size(), (size_t)steps) << what;
  ASSERT_EQ(r["offload"]["h2d_bytes"].size(), (size_t)steps) << what;
  const double want = (double)own_elems * (double)elem_bytes;
  for (int s = 0; s < steps; ++s) {
    EXPECT_EQ(r["offload"]["d2h_bytes"][s].get<double>(), want) << what << " step " << s;
    EXPECT_EQ(r["offload"]["h2d_bytes"][s].get<double>(), want) << what << " step " << s;
  }
}

int sh(const std::string& cmd) {
  int rc = std::system(cmd.c_str());
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : 128;
}

json validate(const std::string& scenario_file, const std::string& prof) {
  std::string out = scenario_file + ".validate.json";
  if (sh(std::string(TP_BINARY) + " validate " + scenario_file + " --profile " + prof + " --steps 2 --json " + out + " > " +
         out + ".log 2>&1") != 0)
    return nullptr;
  return json::parse(std::ifstream(out));
}

}  // namespace

TEST(RunOffload, OptimizerOffloadMatchesSingleRankFloat64) {
  ASSERT_EQ(kParams, 218496);  // the layout the closed forms assume
  const int steps = 4;
  json ref = run(scenario("optoff_ref", json::object()), steps, true);
  ASSERT_FALSE(ref.is_null());
  // early: the layers' gradients go down during the backward (RankRun::grads_down_early, grads_down_after_reduce):
  // one data rank without tp and ZeRO <= 1; ZeRO >= 2 over data ranks after each layer's last reduce-scatter; ZeRO
  // 0-1 over data ranks after each layer's reduction started in the backward (overlap_grad_reduce, the default);
  // else in the optimizer step.
  struct Case { const char* name; json plan; int dp, zero, pp; bool mpi, early; };
  std::vector<Case> cases = {
      {"optoff_1", {{"offload", kOpt}}, 1, 0, 1, false, true},
      {"optoff_dp2_zero0", {{"dp", 2}, {"offload", kOpt}}, 2, 0, 1, true, true},
      {"optoff_dp2_zero1", {{"dp", 2}, {"zero", 1}, {"offload", kOpt}}, 2, 1, 1, true, true},
      {"optoff_dp2_zero1_at_end", {{"dp", 2}, {"zero", 1}, {"overlap_grad_reduce", false}, {"offload", kOpt}}, 2, 1, 1, true, false},
      {"optoff_dp2_zero2", {{"dp", 2}, {"zero", 2}, {"offload", kOpt}}, 2, 2, 1, true, true},
      {"optoff_dp2_zero3_layered", {{"dp", 2}, {"zero", 3}, {"grad_accumulation", "layered"}, {"offload", kOpt}}, 2, 3, 1, true, true},
      {"optoff_pp2", {{"pp", 2}, {"offload", kOpt}}, 1, 0, 2, true, true},
      {"optoff_dp2_pp2_zero2", {{"dp", 2}, {"pp", 2}, {"zero", 2}, {"offload", kOpt}}, 2, 2, 2, true, true},
      {"optoff_dp2_tp2_sp_zero1", {{"dp", 2}, {"tp", 2}, {"sequence_parallel", true}, {"zero", 1}, {"offload", kOpt}}, 0, 0, 0, true, true},
  };
  for (const Case& c : cases) {
    if (c.mpi && !have_mpi()) continue;
    json got = run(scenario(c.name, c.plan), steps, true);
    ASSERT_FALSE(got.is_null()) << c.name;
    expect_close(got, ref, "losses", 1e-9, c.name);
    expect_close(got, ref, "grad_norm", 1e-9, c.name);
    if (c.dp > 0) expect_copies(got, rank0_own(c.dp, c.zero, c.pp), sizeof(double), steps, c.name);
    for (int s = 0; s < steps; ++s) {
      const double early = got["offload"]["early_d2h_bytes"][s].get<double>(), all = got["offload"]["d2h_bytes"][s].get<double>();
      EXPECT_EQ(early > 0, c.early) << c.name << " step " << s;
      EXPECT_LT(early, all) << c.name << " step " << s;  // (the embedding and the head go down in the step)
    }
  }
  // float32: the same copies at 4 bytes an element, the float64 losses to 1e-4.
  json f32 = run(scenario("optoff_f32", {{"offload", kOpt}}), steps, false);
  ASSERT_FALSE(f32.is_null());
  expect_close(f32, ref, "losses", 1e-4, "fp32");
  expect_copies(f32, kParams, sizeof(float), steps, "fp32");
  EXPECT_EQ(f32["offload"]["host_state_bytes"].get<double>(), 4.0 * sizeof(float) * (double)kParams);  // master, grad, m, v
}

// The host moments (and granular's host parameters) are checkpointed: a resumed run continues bit-identically.
TEST(RunOffload, HostStateResumesBitIdentically) {
  const json gran = {{"kind", "granular"}, {"layers", {0, 3}}};
  for (int dp : {1, 2}) for (const json& kind : {kOpt, gran}) {
    if (dp > 1 && !have_mpi()) continue;
    std::string name = "optoff_ckpt_dp" + std::to_string(dp) + kind["kind"].get<std::string>();
    std::string f = scenario(name, {{"dp", dp}, {"zero", dp > 1 ? 2 : 0}, {"offload", kind}});
    std::string dir = tmpdir() + "/" + name;
    std::filesystem::remove_all(dir);
    json whole = run(f, 6, false);
    json first = run(f, 6, false, nullptr, "--checkpoint-dir " + dir + " --checkpoint-every 3");
    std::filesystem::remove_all(dir + "/step_00000006");  // resume from step 3 (the schedule depends on --steps)
    json resumed = run(f, 6, false, nullptr, "--checkpoint-dir " + dir + " --resume");
    ASSERT_FALSE(whole.is_null());
    ASSERT_FALSE(first.is_null());
    ASSERT_FALSE(resumed.is_null());
    EXPECT_EQ(resumed["first_step"], 3);
    ASSERT_EQ(resumed["losses"].size(), 3u);
    for (int s = 3; s < 6; ++s) EXPECT_EQ(resumed["losses"][s - 3], whole["losses"][s]) << name << " step " << s;
  }
}

TEST(RunOffloadEmu, OptimizerOffloadMatchesSingleRankFloat64) {
  const int steps = 3;
  json ref = run(scenario("optoff_emu_ref", json::object()), steps, true);
  ASSERT_FALSE(ref.is_null());
  json one = run(scenario("optoff_emu_1", {{"offload", kOpt}}), steps, true, nullptr, "--backend emu");
  ASSERT_FALSE(one.is_null());
  expect_close(one, ref, "losses", 1e-9, "emu");
  expect_close(one, ref, "grad_norm", 1e-9, "emu");
  expect_copies(one, kParams, sizeof(double), steps, "emu");
  if (!have_mpi()) return;
  json par = run(scenario("optoff_emu_dp2_pp2_zero2", {{"dp", 2}, {"pp", 2}, {"zero", 2}, {"offload", kOpt}}), steps, true,
                 nullptr, "--backend emu");
  ASSERT_FALSE(par.is_null());
  expect_close(par, ref, "losses", 1e-9, "emu dp2 pp2 zero2");
  expect_copies(par, rank0_own(2, 2, 2), sizeof(double), steps, "emu dp2 pp2 zero2");
}

// The optimizer state is not on the device: `validate` (fp32, tracked heap) of the tiny model without and with
// offload. The device peak drops by the two Adam moments (2 x 4 bytes a parameter; the master copy is the fp32
// parameter itself), the whole heap grows by the host's master copy and gradient buffer (2 x 4 bytes a
// parameter), both to 0.1 % of the moments (allocator rounding). On the benchmark model the simulator's device
// peak for the offloaded plan is within 5 % of the measured one.
TEST(RunOffload, OptimizerStateLeavesTheDevice) {
  std::string prof = quick_profile();
  ASSERT_FALSE(prof.empty());
  json base = validate(scenario("optoff_val_base", json::object()), prof);
  json off = validate(scenario("optoff_val_off", {{"offload", kOpt}}), prof);
  ASSERT_FALSE(base.is_null());
  ASSERT_FALSE(off.is_null());
  EXPECT_EQ(off["measured"]["peak_memory_kind"], "device");
  const double moments = 2.0 * sizeof(float) * (double)kParams;
  const double base_heap = base["measured"]["peak_heap_bytes"].get<double>();
  const double off_dev = off["measured"]["peak_memory_bytes"].get<double>();
  const double off_heap = off["measured"]["peak_heap_bytes"].get<double>();
  EXPECT_NEAR(base_heap - off_dev, moments, 1e-3 * moments) << base_heap << " " << off_dev;
  EXPECT_NEAR(off_heap - base_heap, moments, 1e-3 * moments) << base_heap << " " << off_heap;
  EXPECT_EQ(off["predicted"]["memory"]["optimizer"].get<double>(), 0.0);
  EXPECT_EQ(off["offload"]["host_state_bytes"].get<double>(), 2.0 * moments);

  std::ifstream in(std::string(TP_SOURCE_DIR) + "/scenarios/exec/validate-gpt256-1r.json");
  json sj = json::parse(in);
  sj["plan"]["offload"] = kOpt;
  std::string f = tmpdir() + "/optoff_gpt256.json";
  std::ofstream(f) << sj.dump(2);
  json big = validate(f, prof);
  ASSERT_FALSE(big.is_null());
  const double pred = big["predicted"]["peak_memory_bytes"].get<double>(), meas = big["measured"]["peak_memory_bytes"].get<double>();
  EXPECT_LT(std::abs(pred - meas) / meas, 0.05) << "predicted " << pred << " measured " << meas;
}

namespace {

struct GranCase {
  const char* name;
  json plan;
  int dp = 1, zero = 0, pp = 1, off_layers = 0, prefetch = 1;  // off_layers: offloaded layers rank 0 holds
  bool layered = false, mpi = false;
  int cp = 1;
  int real_from = -1, pseudo_off_layers = 0;  // delink: the first real step; offloaded positions before it
};

// Rank 0's closed-form copies per step (tp 1, the tiny model, global batch 8, micro-batch 2). The ZeRO shards
// span the data ranks (dp x cp); cp does not split the batch. ZeRO-3 (data ranks > 1): a run loads the rank's
// slice of its layer (then all-gathers it on the device), the host holds the slices' parameters and gradients.
void expect_granular(const json& r, const GranCase& c, size_t eb, int steps) {
  ASSERT_TRUE(r.contains("offload")) << c.name;
  const json& f = r["offload"];
  EXPECT_EQ(f["kind"], "granular") << c.name;
  const long long m = 8 / (2 * c.dp), data = (long long)c.dp * c.cp;
  const long long runs = c.layered ? 2 : 2 * m, bwd_runs = runs / 2;
  const long long part = (kLayer + data - 1) / data;  // a ZeRO slice
  const long long slice = c.zero >= 2 && data > 1 ? part : kLayer;   // a gradient sent down
  const long long own = c.zero >= 1 && data > 1 ? part : kLayer;     // the moments
  const long long load = c.zero >= 3 && data > 1 ? part : kLayer;    // a loaded copy; the host's parameters
  for (int s = 0; s < steps; ++s) {
    const long long layers = s < c.real_from ? c.pseudo_off_layers : c.off_layers, total_runs = runs * layers;
    EXPECT_EQ(f["h2d_bytes"][s].get<double>(), (double)(eb * load * total_runs)) << c.name << " step " << s;
    EXPECT_EQ(f["d2h_bytes"][s].get<double>(), (double)(eb * slice * bwd_runs * layers)) << c.name << " step " << s;
    EXPECT_EQ(f["peak_loaded_bytes"][s].get<double>(), (double)(eb * load * std::min<long long>(c.prefetch + 1, total_runs)))
        << c.name << " step " << s;
  }
  EXPECT_EQ(f["host_state_bytes"].get<double>(), (double)(eb * c.off_layers * (2 * load + 2 * own))) << c.name;
}

}  // namespace

TEST(RunOffload, GranularOffloadMatchesSingleRankFloat64) {
  const int steps = 4;
  json ref = run(scenario("gran_ref", json::object()), steps, true);
  ASSERT_FALSE(ref.is_null());
  const json g = {{"kind", "granular"}, {"layers", {1, 2}}};
  json g2 = g;
  g2["prefetch_layers"] = 2;
  const json half = {{"kind", "granular"}, {"fraction", 0.5}};  // layers 1 and 3
  std::vector<GranCase> cases = {
      {"gran_1", {{"offload", g}}, 1, 0, 1, 2},
      {"gran_1_prefetch2", {{"offload", g2}}, 1, 0, 1, 2, 2},
      {"gran_1_layered_fraction", {{"offload", half}, {"grad_accumulation", "layered"}}, 1, 0, 1, 2, 1, true},
      {"gran_dp2_zero0", {{"dp", 2}, {"offload", g}}, 2, 0, 1, 2, 1, false, true},
      {"gran_dp2_zero1", {{"dp", 2}, {"zero", 1}, {"offload", g}}, 2, 1, 1, 2, 1, false, true},
      {"gran_dp2_zero2", {{"dp", 2}, {"zero", 2}, {"offload", g2}}, 2, 2, 1, 2, 2, false, true},
      {"gran_pp2", {{"pp", 2}, {"offload", g}}, 1, 0, 2, 1, 1, false, true},
      {"gran_dp2_pp2_zero2_gpipe_layered", {{"dp", 2}, {"pp", 2}, {"zero", 2}, {"schedule", "gpipe"}, {"grad_accumulation", "layered"}, {"offload", g}},
       2, 2, 2, 1, 1, true, true},
      {"gran_dp2_tp2_sp_zero2", {{"dp", 2}, {"tp", 2}, {"sequence_parallel", true}, {"zero", 2}, {"offload", g}}, 0, 0, 0, 0,
       1, false, true},
  };
  for (const GranCase& c : cases) {
    if (c.mpi && !have_mpi()) continue;
    json got = run(scenario(c.name, c.plan), steps, true);
    ASSERT_FALSE(got.is_null()) << c.name;
    expect_close(got, ref, "losses", 1e-9, c.name);
    expect_close(got, ref, "grad_norm", 1e-9, c.name);
    if (c.dp > 0) expect_granular(got, c, sizeof(double), steps);
  }
}

// Granular offload with ZeRO-3 (the host holds the rank's slices; a run loads its slice and all-gathers the layer
// on the device; the gradient is reduce-scattered back to the host slice), context parallelism and Optimus 2D
// tensor parallelism: the single-rank float64 oracle, and the closed-form copies where tp is 1.
TEST(RunOffload, GranularZero3CpAnd2dMatchSingleRankFloat64) {
  if (!have_mpi()) GTEST_SKIP() << "built without MPI";
  const int steps = 3;
  json ref = run(scenario("gran3_ref", json::object()), steps, true);
  ASSERT_FALSE(ref.is_null());
  const json g = {{"kind", "granular"}, {"layers", {1, 2}}};
  json g2 = g;
  g2["prefetch_layers"] = 2;
  const json fl = "flash";
  GranCase cp2{"gran_cp2", {{"cp", 2}, {"attention", fl}, {"offload", g}}, 1, 0, 1, 2};
  cp2.cp = 2;
  GranCase cp2z3{"gran_cp2_dp2_zero3_layered", {{"cp", 2}, {"dp", 2}, {"zero", 3}, {"grad_accumulation", "layered"},
                 {"attention", fl}, {"offload", g}}, 2, 3, 1, 2, 1, true};
  cp2z3.cp = 2;
  std::vector<GranCase> cases = {
      {"gran_dp2_zero3", {{"dp", 2}, {"zero", 3}, {"offload", g}}, 2, 3, 1, 2},
      {"gran_dp2_zero3_layered_prefetch2", {{"dp", 2}, {"zero", 3}, {"grad_accumulation", "layered"}, {"offload", g2}},
       2, 3, 1, 2, 2, true},
      {"gran_dp2_pp2_zero3_gpipe_layered", {{"dp", 2}, {"pp", 2}, {"zero", 3}, {"schedule", "gpipe"},
       {"grad_accumulation", "layered"}, {"offload", g}}, 2, 3, 2, 1, 1, true},
      {"gran_dp2_tp2_sp_zero3", {{"dp", 2}, {"tp", 2}, {"sequence_parallel", true}, {"zero", 3}, {"offload", g}}, 0},
      cp2,
      cp2z3,
      {"gran_tp2d_q2", {{"tp", 4}, {"tp_mode", "2d"}, {"offload", g}}, 0},
      {"gran_tp2d_q2_zero3", {{"tp", 4}, {"tp_mode", "2d"}, {"dp", 2}, {"zero", 3}, {"grad_accumulation", "layered"},
       {"offload", g}}, 0},
  };
  for (const GranCase& c : cases) {
    json got = run(scenario(c.name, c.plan), steps, true);
    ASSERT_FALSE(got.is_null()) << c.name;
    expect_close(got, ref, "losses", 1e-9, c.name);
    expect_close(got, ref, "grad_norm", 1e-9, c.name);
    if (c.dp > 0) expect_granular(got, c, sizeof(double), steps);
  }
}

// Pseudo-to-Real with granular offload: offloading weight SLOT 1 of the tiny model (4 layers, 2 unique). In the
// pseudo phase positions 2 and 3 use slot 1 (two offloaded runs per micro-batch and pass), after the delink only
// position 1 does; the delink moves slot 0's weights and moments into the host slot 1 and slot 1's host state
// into the device slots 2 and 3. The delinked run matches the same run without offload (float64, 1e-9), on one
// rank and over dp 2 with ZeRO-2 and ZeRO-3.
TEST(RunOffload, GranularThroughDelinkMatchesWithoutOffload) {
  const json delink = {{"unique_layers", 2}, {"tokens", 768}};
  const json g = {{"kind", "granular"}, {"layers", {1}}};
  json ref = run(scenario("gran_delink_ref", {{"delink", delink}}), 6, true, nullptr, "--delink-step 3");
  ASSERT_FALSE(ref.is_null());
  std::vector<GranCase> cases = {
      {"gran_delink_1", {{"delink", delink}, {"offload", g}}, 1, 0, 1, 1},
      {"gran_delink_dp2_zero2", {{"delink", delink}, {"dp", 2}, {"zero", 2}, {"offload", g}}, 2, 2, 1, 1, 1, false, true},
      {"gran_delink_dp2_zero3", {{"delink", delink}, {"dp", 2}, {"zero", 3}, {"offload", g}}, 2, 3, 1, 1, 1, false, true},
  };
  for (GranCase c : cases) {
    if (c.mpi && !have_mpi()) continue;
    c.real_from = 3;
    c.pseudo_off_layers = 2;
    json got = run(scenario(c.name, c.plan), 6, true, nullptr, "--delink-step 3");
    ASSERT_FALSE(got.is_null()) << c.name;
    EXPECT_EQ(got["delink_step"], 3) << c.name;
    expect_close(got, ref, "losses", 1e-9, c.name);
    expect_close(got, ref, "grad_norm", 1e-9, c.name);
    expect_granular(got, c, sizeof(double), 6);
  }
}

// On emu every device op checks its pointers: the layers' loaded copies, not the host parameters, are used.
TEST(RunOffloadEmu, GranularOffloadMatchesSingleRankFloat64) {
  const int steps = 2;
  json ref = run(scenario("gran_emu_ref", json::object()), steps, true);
  ASSERT_FALSE(ref.is_null());
  const json g = {{"kind", "granular"}, {"layers", {1, 2}}};
  GranCase one{"gran_emu_1", {{"offload", g}}, 1, 0, 1, 2};
  json got = run(scenario(one.name, one.plan), steps, true, nullptr, "--backend emu");
  ASSERT_FALSE(got.is_null());
  expect_close(got, ref, "losses", 1e-9, one.name);
  expect_close(got, ref, "grad_norm", 1e-9, one.name);
  expect_granular(got, one, sizeof(double), steps);
  if (!have_mpi()) return;
  GranCase par{"gran_emu_dp2_zero2", {{"dp", 2}, {"zero", 2}, {"offload", g}}, 2, 2, 1, 2};
  got = run(scenario(par.name, par.plan), steps, true, nullptr, "--backend emu");
  ASSERT_FALSE(got.is_null());
  expect_close(got, ref, "losses", 1e-9, par.name);
  expect_granular(got, par, sizeof(double), steps);
  // ZeRO-3: the loaded slices are gathered into device memory; cp 2: the attention's K / V gathers.
  GranCase z3{"gran_emu_dp2_zero3", {{"dp", 2}, {"zero", 3}, {"offload", g}}, 2, 3, 1, 2};
  got = run(scenario(z3.name, z3.plan), steps, true, nullptr, "--backend emu");
  ASSERT_FALSE(got.is_null());
  expect_close(got, ref, "losses", 1e-9, z3.name);
  expect_granular(got, z3, sizeof(double), steps);
  GranCase cp2{"gran_emu_cp2", {{"cp", 2}, {"attention", "flash"}, {"offload", g}}, 1, 0, 1, 2};
  cp2.cp = 2;
  got = run(scenario(cp2.name, cp2.plan), steps, true, nullptr, "--backend emu");
  ASSERT_FALSE(got.is_null());
  expect_close(got, ref, "losses", 1e-9, cp2.name);
  expect_granular(got, cp2, sizeof(double), steps);
}

// On emu the delink's copies between host slots and device slots go through the backend with their kinds.
TEST(RunOffloadEmu, GranularThroughDelinkMatchesWithoutOffload) {
  const json delink = {{"unique_layers", 2}, {"tokens", 768}};
  json ref = run(scenario("gran_emu_delink_ref", {{"delink", delink}}), 5, true, nullptr, "--delink-step 3");
  json got = run(scenario("gran_emu_delink", {{"delink", delink}, {"offload", {{"kind", "granular"}, {"layers", {1}}}}}), 5,
                 true, nullptr, "--backend emu --delink-step 3");
  ASSERT_FALSE(ref.is_null());
  ASSERT_FALSE(got.is_null());
  expect_close(got, ref, "losses", 1e-9, "emu delink");
  expect_close(got, ref, "grad_norm", 1e-9, "emu delink");
}

// `validate` of granular offload on the benchmark model (half its layers on the host): the simulator's device
// peak within 5 % of the measured one (the tracked heap less the pinned host state), and the host bytes reported.
TEST(RunOffload, GranularValidatesDeviceMemory) {
  std::string prof = quick_profile();
  ASSERT_FALSE(prof.empty());
  std::ifstream in(std::string(TP_SOURCE_DIR) + "/scenarios/exec/validate-gpt256-1r.json");
  json sj = json::parse(in);
  sj["plan"]["offload"] = {{"kind", "granular"}, {"fraction", 0.5}};
  std::string f = tmpdir() + "/gran_gpt256.json";
  std::ofstream(f) << sj.dump(2);
  json r = validate(f, prof);
  ASSERT_FALSE(r.is_null());
  EXPECT_EQ(r["measured"]["peak_memory_kind"], "device");
  EXPECT_EQ(r["offload"]["kind"], "granular");
  EXPECT_GT(r["offload"]["host_state_bytes"].get<double>(), 0);
  ASSERT_TRUE(r["offload"].contains("peak_loaded_bytes"));
  ASSERT_FALSE(r["offload"]["peak_loaded_bytes"].empty());
  EXPECT_GT(r["offload"]["peak_loaded_bytes"][0].get<double>(), 0);
  EXPECT_GT(r["offload"]["h2d_bytes"][0].get<double>(), 0);
  const double pred = r["predicted"]["peak_memory_bytes"].get<double>(), meas = r["measured"]["peak_memory_bytes"].get<double>();
  EXPECT_LT(std::abs(pred - meas) / meas, 0.05) << "predicted " << pred << " measured " << meas;
}
