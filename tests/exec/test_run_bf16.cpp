// test_run_bf16: `trainplan run` with `training.precision: "bf16"`: every GEMM (linear layers, attention's four
// products and their backwards, the LM head, MoE's experts, Optimus 2D's SUMMA blocks) takes its two operands
// rounded to bf16 (kernels::bf16_round, nearest even) and accumulates in the working precision; tensors stay in
// it. The rounding is element-wise on each GEMM operand, so every plan reproduces the single-rank bf16 float64
// run to 1e-9, as for fp32 — while the bf16 run differs from the fp32 one from the first step. Left out:
// rounding one operand only, or attention's P, fails Ops.Bf16GemmRoundsEveryOperand; a backend that ignores the
// setting fails the emu comparisons here and the selftest's bf16 checks.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "exec/backends/backend.hpp"
#include "exec/kernels/k_fp8.hpp"
#include "exec/oracle_run.hpp"

using tp::json;
using namespace oracle;
namespace K = tp::kernels;

namespace {

// The bundled scenario `base` (scenarios/exec/) in `precision` with `plan` merged over its plan.
std::string bf16_scenario(const std::string& name, const json& plan, const std::string& base = "tiny-gpt",
                          const std::string& precision = "bf16") {
  return precision_scenario("bf16", name, plan, base, precision);
}

std::vector<double> random_values(long n, unsigned seed) {
  std::mt19937 g(seed);
  std::uniform_real_distribution<double> u(-1, 1);
  std::vector<double> v((size_t)n);
  for (double& x : v) x = u(g);
  return v;
}

}  // namespace

// Values worked out by hand: bf16 keeps 8 significant bits (the quantum at 1 is 2^-7), ties go to the even
// mantissa, subnormals have the quantum 2^-133, and values past the largest finite bf16 (2^128 - 2^120) round to
// infinity from the midpoint to 2^128 on. The float and double rules agree on every float.
TEST(Ops, Bf16RoundingOfKnownValues) {
  const double q = std::ldexp(1.0, -7);
  struct Case { double in, want; };
  const Case cases[] = {
      {1.0, 1.0}, {-2.5, -2.5}, {0.0, 0.0},
      {1 + q / 2, 1.0},                    // a tie: to the even mantissa (1.0)
      {1 + 3 * q / 2, 1 + 2 * q},          // a tie: to the even mantissa (1 + 2q)
      {1 + q / 2 + 1e-9, 1 + q},           // past the tie
      {-(1 + 3 * q / 4), -(1 + q)},
      {3.14159265, 3.140625},
      {std::ldexp(1.0, -134), 0.0},        // half the smallest subnormal: a tie to 0
      {std::ldexp(3.0, -135), std::ldexp(1.0, -133)},
      {std::ldexp(1.0, -130) * 1.3, std::ldexp(1.0, -133) * 10},  // a subnormal: 10.4 quanta -> 10
      {3.3895313892515355e38, 3.3895313892515355e38},             // the largest finite bf16
      {3.39e38, 3.3895313892515355e38},
      {3.3961e38, 3.3895313892515355e38},                        // below the midpoint to 2^128 (2^128 - 2^119)
      {3.3962e38, std::numeric_limits<double>::infinity()},      // past it
  };
  for (const Case& c : cases) {
    EXPECT_EQ(K::bf16_round(c.in), c.want) << c.in;
    if (std::abs(c.in) < 3.4e38 && (double)(float)c.in == c.in) {
      EXPECT_EQ((double)K::bf16_round((float)c.in), c.want) << c.in;
    }
  }
  EXPECT_TRUE(std::isnan(K::bf16_round(std::nan(""))));
  std::mt19937 g(5);
  for (int i = 0; i < 100000; ++i) {  // random float bit patterns (finite): the two rules agree
    uint32_t u = g();
    float f;
    std::memcpy(&f, &u, 4);
    if (!std::isfinite(f)) continue;
    ASSERT_EQ((double)K::bf16_round(f), K::bf16_round((double)f)) << f;
  }
}

// Under Bf16GemmScope the CPU backend's matmul (also the emu backends' GEMMs) equals the product of pre-rounded operands exactly, in both
// precisions and for every transpose; attention equals a naive float64 reference that rounds Q, K, V, P (and, in
// the backward, dO, dS) — and differs from the unrounded attention. The scope restores the setting.
TEST(Ops, Bf16GemmRoundsEveryOperand) {
  using namespace tp::exec;
  for (const Backend* be : {&cpu_backend()}) {  // (emu takes only its own memory: its selftest covers it)
    BackendScope on(*be);
    const long M = 5, N = 6, Kd = 7;
    for (int ta = 0; ta < 2; ++ta)
      for (int tb = 0; tb < 2; ++tb) {
        std::vector<double> A = random_values(M * Kd, 1), B = random_values(Kd * N, 2), C(M * N), R(M * N);
        std::vector<double> Ar = A, Br = B;
        for (double& x : Ar) x = K::bf16_round(x);
        for (double& x : Br) x = K::bf16_round(x);
        {
          Bf16GemmScope b16(*be, true);
          tp::ops::matmul(C.data(), A.data(), B.data(), M, N, Kd, ta, tb, 1.0, 0.0);
        }
        tp::ops::matmul(R.data(), Ar.data(), Br.data(), M, N, Kd, ta, tb, 1.0, 0.0);
        EXPECT_EQ(C, R) << be->name << " ta " << ta << " tb " << tb;
        std::vector<float> Af(A.begin(), A.end()), Bf(B.begin(), B.end()), Cf(M * N), Rf(M * N);
        std::vector<float> Arf = Af, Brf = Bf;
        for (float& x : Arf) x = K::bf16_round(x);
        for (float& x : Brf) x = K::bf16_round(x);
        {
          Bf16GemmScope b16(*be, true);
          tp::ops::matmul(Cf.data(), Af.data(), Bf.data(), M, N, Kd, ta, tb, 1.f, 0.f);
        }
        tp::ops::matmul(Rf.data(), Arf.data(), Brf.data(), M, N, Kd, ta, tb, 1.f, 0.f);
        EXPECT_EQ(Cf, Rf) << be->name << " float ta " << ta << " tb " << tb;
      }
    EXPECT_FALSE(be->set_bf16_gemm(false));  // the scopes restored "off"

    // Attention, B 1, Tq 3 over Tk 5 keys (the rectangular causal mask), H 2 query heads on one kv head, D 4.
    const long Tq = 3, Tk = 5, H = 2, D = 4, off = Tk - Tq;
    const auto q = random_values(Tq * H * D, 3), k = random_values(Tk * D, 4), v = random_values(Tk * D, 5);
    const auto dout = random_values(Tq * H * D, 6);
    const double sc = 1 / std::sqrt((double)D);
    auto r = [](double x) { return K::bf16_round(x); };
    std::vector<double> want(Tq * H * D, 0), dq(Tq * H * D, 0), dk(Tk * D, 0), dv(Tk * D, 0);
    for (long h = 0; h < H; ++h)
      for (long t = 0; t < Tq; ++t) {
        std::vector<double> p(Tk, 0), dp(Tk, 0);
        double mx = -1e300, sum = 0;
        for (long j = 0; j <= t + off; ++j) {
          double s = 0;
          for (long d = 0; d < D; ++d) s += r(q[(t * H + h) * D + d]) * r(k[j * D + d]);
          p[j] = sc * s, mx = std::max(mx, p[j]);
        }
        for (long j = 0; j <= t + off; ++j) p[j] = std::exp(p[j] - mx), sum += p[j];
        for (long j = 0; j <= t + off; ++j) p[j] /= sum;
        for (long d = 0; d < D; ++d)
          for (long j = 0; j <= t + off; ++j) want[(t * H + h) * D + d] += r(p[j]) * r(v[j * D + d]);
        double dot = 0;
        for (long j = 0; j <= t + off; ++j) {
          for (long d = 0; d < D; ++d) dp[j] += r(dout[(t * H + h) * D + d]) * r(v[j * D + d]);
          dot += p[j] * dp[j];
        }
        for (long j = 0; j <= t + off; ++j) {
          const double ds = r(p[j] * (dp[j] - dot));
          for (long d = 0; d < D; ++d) {
            dv[j * D + d] += r(p[j]) * r(dout[(t * H + h) * D + d]);
            dq[(t * H + h) * D + d] += sc * ds * r(k[j * D + d]);
            dk[j * D + d] += sc * ds * r(q[(t * H + h) * D + d]);
          }
        }
      }
    std::vector<double> out(Tq * H * D), att(H * Tq * Tk), gq(Tq * H * D, 0), gk(Tk * D, 0), gv(Tk * D, 0);
    {
      Bf16GemmScope b16(*be, true);
      tp::ops::attention_fwd_kv(out.data(), att.data(), q.data(), k.data(), v.data(), 1, Tq, Tk, H, 1, D);
      tp::ops::attention_bwd_kv(gq.data(), gk.data(), gv.data(), dout.data(), att.data(), q.data(), k.data(), v.data(),
                                1, Tq, Tk, H, 1, D);
    }
    auto near = [&](const std::vector<double>& got, const std::vector<double>& ref, const char* what) {
      for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], ref[i], 1e-12) << be->name << " " << what << " " << i;
    };
    near(out, want, "out"), near(gq, dq, "dq"), near(gk, dk, "dk"), near(gv, dv, "dv");
    std::vector<double> plain(Tq * H * D);
    tp::ops::attention_fwd_kv(plain.data(), att.data(), q.data(), k.data(), v.data(), 1, Tq, Tk, H, 1, D);
    double diff = 0;
    for (size_t i = 0; i < plain.size(); ++i) diff = std::max(diff, std::abs(plain[i] - out[i]));
    EXPECT_GT(diff, 1e-4) << be->name << ": bf16 operands change attention";
  }
}

TEST(RunBf16, PlansMatchSingleRankFloat64) {
  const int steps = 4;
  json ref = run(bf16_scenario("ref", json::object()), steps, true);
  json f32 = run(bf16_scenario("ref_fp32", json::object(), "tiny-gpt", "fp32"), steps, true);
  ASSERT_FALSE(ref.is_null());
  ASSERT_FALSE(f32.is_null());
  for (int s = 0; s < steps; ++s)
    EXPECT_GT(std::abs(ref["losses"][s].get<double>() - f32["losses"][s].get<double>()), 1e-6) << s;
  expect_close(ref, f32, "losses", 1e-2, "bf16 near fp32");
  const std::string note = log_text(tmpdir() + "/bf16_ref.json");
  EXPECT_NE(note.find("note: $.training.precision \"bf16\": run computes every GEMM"), std::string::npos) << note;
  expect_emu_backends_match(ref, steps, [](const std::string& n) { return bf16_scenario(n, json::object()); });
  json f32run = run(bf16_scenario("ref", json::object()), steps, false);
  ASSERT_FALSE(f32run.is_null());
  expect_close(f32run, ref, "losses", 1e-4, "float32");
  if (!have_mpi()) return;
  const std::vector<PlanCase> cases = {
      {"dp2", {{"dp", 2}}},
      {"tp2_sp", {{"tp", 2}, {"sequence_parallel", true}}},
      {"pp2_interleaved", {{"pp", 2}, {"schedule", "interleaved"}, {"virtual_stages", 2}}},
      {"cp2_dp2_zero1", {{"cp", 2}, {"dp", 2}, {"zero", 1}}},
      {"dp2_tp2_pp2_sp_zero3_full", {{"dp", 2}, {"tp", 2}, {"pp", 2}, {"sequence_parallel", true}, {"zero", 3},
                                     {"recompute", "full"}}},
      {"dp2_optimizer_offload", {{"dp", 2}, {"zero", 1}, {"offload", {{"kind", "optimizer"}}}}},
      {"pp2_granular", {{"pp", 2}, {"offload", {{"kind", "granular"}, {"fraction", 0.5}}}}},
      {"tp2d_q2", {{"tp", 4}, {"tp_mode", "2d"}}},
  };
  expect_plans_match(cases, ref, steps, [](const std::string& n, const json& p) { return bf16_scenario(n, p); });
}

// MoE: the router's and the experts' GEMMs round too, so expert-parallel and tensor-parallel experts match the
// single-rank bf16 run; a Pseudo-to-Real delink keeps bf16 in both phases and a resume is bit-identical.
TEST(RunBf16, MoeDelinkAndResume) {
  const int steps = 4;
  json moe = run(bf16_scenario("moe_ref", json::object(), "tiny-moe"), steps, true);
  json moe32 = run(bf16_scenario("moe_ref_fp32", json::object(), "tiny-moe", "fp32"), steps, true);
  ASSERT_FALSE(moe.is_null());
  ASSERT_FALSE(moe32.is_null());
  EXPECT_GT(std::abs(moe["losses"][0].get<double>() - moe32["losses"][0].get<double>()), 1e-6);
  if (have_mpi()) {
    for (const auto& [name, plan] : std::vector<std::pair<std::string, json>>{{"moe_dp2_ep2", {{"dp", 2}, {"ep", 2}}},
                                                                               {"moe_tp2", {{"tp", 2}}}}) {
      json got = run(bf16_scenario(name, plan, "tiny-moe"), steps, true);
      ASSERT_FALSE(got.is_null()) << name << "\n" << log_text(tmpdir() + "/bf16_" + name + ".json");
      expect_close(got, moe, "losses", 1e-9, name);
      expect_close(got, moe, "grad_norm", 1e-9, name);
    }
  }
  const json delink = {{"unique_layers", 2}, {"tokens", 768}};
  const std::string f = bf16_scenario("delink", {{"delink", delink}});
  json whole = run(f, 6, true);
  ASSERT_FALSE(whole.is_null()) << log_text(f);
  EXPECT_EQ(whole["delink_step"], 3);
  json f32 = run(bf16_scenario("delink_fp32", {{"delink", delink}}, "tiny-gpt", "fp32"), 6, true);
  ASSERT_FALSE(f32.is_null());
  EXPECT_GT(std::abs(whole["losses"][5].get<double>() - f32["losses"][5].get<double>()), 1e-6);  // bf16 after the delink too
  const std::string dir = tmpdir() + "/bf16_delink_ckpt";
  fs::remove_all(dir);
  json first = run(f, 6, true, nullptr, "--checkpoint-dir " + dir + " --keep-checkpoints 10 --checkpoint-every 2");
  ASSERT_FALSE(first.is_null()) << log_text(f);
  drop_checkpoints_after(dir, 4, 6);
  json rest = run(f, 6, true, nullptr, "--checkpoint-dir " + dir + " --resume");
  ASSERT_FALSE(rest.is_null()) << log_text(f);
  ASSERT_EQ(rest["losses"].size(), 2u);
  for (int s = 4; s < 6; ++s) EXPECT_EQ(rest["losses"][s - 4], whole["losses"][s]) << s;
}
