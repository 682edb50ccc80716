// test_run_bf16_storage: training.precision "bf16" keeps each layer's input and saved activations as bf16 between
// its forward and its backward (exec/model/gpt.hpp LayerActs::pack_bf16, exec/runtime/runtime_step.cpp), as Megatron-LM's bf16
// runs keep them; LayerNorm's and flash's statistics and the router's probabilities stay in the working type.
// - LayerActs: pack moves exactly the stored tensors into bf16 (bytes() counts 2 per element) and unpack gives
//   each value rounded to bf16 back, the statistics untouched.
// - The backward reads ln1, ln2, act (and, unfused, attn) of a dense layer still packed (ops::matmul_a16, the GPU's bf16 GEMM on the
//   packed copy): the same gradients, bit for bit, as from unpacked tensors, on every backend.
// - Device memory (emu-device counts every allocation): the bf16 run's peak drops by the saved activations' bytes
//   less their bf16 bytes, against the same run in fp32.
// - Plans: the layer computes from the input it saves (rounded) and what a recompute rebuilds is rounded as the
//   forward's saved tensors were, so full and selective recompute, flash with context parallelism and Optimus 2D
//   reproduce the single-rank bf16 float64 run to 1e-9 (RunBf16.PlansMatchSingleRankFloat64 covers the unfused
//   plans). Mutations tried: not rounding the layer input, or not rounding after a recompute: the full-recompute
//   plans fail by about 1e-5.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "exec/backends/backend.hpp"
#include "exec/model/gpt.hpp"
#include "exec/backends/ops.hpp"
#include "exec/kernels/k_fp8.hpp"
#include "exec/oracle_run.hpp"

using tp::json;
using namespace oracle;
namespace E = tp::exec;

namespace {

// tiny-gpt in bf16 with `plan` over its plan (attention "flash" unless the plan says otherwise) and seq_len `T`.
std::string storage_scenario(const std::string& name, json plan, const std::string& precision = "bf16", int T = 0) {
  if (!plan.contains("attention")) plan["attention"] = "flash";
  std::string f = precision_scenario("bf16s", name, plan, "tiny-gpt", precision);
  if (T > 0) {
    std::ifstream in(f);
    json j = json::parse(in);
    j["training"]["seq_len"] = j["model"]["seq_len"] = T;
    std::ofstream(f) << j.dump(2);
  }
  return f;
}

template <class T>
std::vector<T> down(const E::Backend& be, const E::Buf<T>& b) {
  std::vector<T> h(b.size());
  be.copy(h.data(), b.data(), sizeof(T) * b.size(), E::CopyKind::device_to_host, E::Stream{});
  be.sync();
  return h;
}
template <class T>
void up(const E::Backend& be, E::Buf<T>& d, const std::vector<T>& h) {
  be.copy(d.data(), h.data(), sizeof(T) * h.size(), E::CopyKind::host_to_device, E::Stream{});
}
// n values uniform in [-1, 1) from g.
template <class T>
std::vector<T> uniform(size_t n, std::mt19937& g) {
  std::uniform_real_distribution<double> u(-1, 1);
  std::vector<T> v(n);
  for (T& x : v) x = T(u(g));
  return v;
}
// A model of layout lay over parameters p and gradients gr (device buffers), its GEMM operands packed once or not.
template <class T>
E::Gpt<T> model_over(const E::GptLayout& lay, E::Buf<T>& p, E::Buf<T>& gr, bool pack_operands16) {
  E::Gpt<T> m;
  m.lay = lay;
  m.params = p.data();
  m.grads = gr.data();
  m.pack_operands16 = pack_operands16;
  return m;
}
template <class T>
void ops_fill(E::Buf<T>& b, T v) {
  tp::ops::fill(b.data(), v, (long)b.size());
}

template <class T>
void fill_random(E::Buf<T>& b, size_t n, unsigned seed) {
  std::mt19937 g(seed);
  std::uniform_real_distribution<double> u(-3, 3);
  b.resize(n);
  for (T& x : b) x = T(u(g));
}

}  // namespace

TEST(Bf16Storage, PackKeepsTheStatisticsAndRoundsTheRest) {
  for (bool flash : {false, true}) {
    E::LayerActs<double> a;
    fill_random(a.x_in, 64, 1);
    fill_random(a.ln1, 64, 2);
    fill_random(a.ln1_mean, 8, 3);
    fill_random(a.ln1_rstd, 8, 4);
    fill_random(a.q, 192, 5);
    fill_random(a.att, 16, 6);
    fill_random(a.fc1, 256, 7);
    fill_random(a.m_probs, 24, 8);
    const E::LayerActs<double> before = a;
    const size_t packed = 64 + 64 + 192 + 256 + (flash ? 0 : 16), kept = 8 + 8 + 24 + (flash ? 16 : 0);
    a.pack_bf16(flash);
    EXPECT_EQ(a.bytes(), packed * 2 + kept * 8) << flash;
    EXPECT_TRUE(a.x_in.empty() && a.ln1.empty() && a.q.empty() && a.fc1.empty());
    EXPECT_EQ(a.att.empty(), !flash);
    EXPECT_EQ(a.ln1_mean, before.ln1_mean);
    a.unpack_bf16(flash);
    EXPECT_EQ(a.bytes(), (packed + kept) * 8);
    for (size_t i = 0; i < before.q.size(); ++i) ASSERT_EQ(a.q[i], tp::kernels::bf16_round(before.q[i])) << i;
    for (size_t i = 0; i < before.fc1.size(); ++i) ASSERT_EQ(a.fc1[i], tp::kernels::bf16_round(before.fc1[i])) << i;
    EXPECT_NE(a.x_in, before.x_in);  // values of [-3, 3) do not all fit in bf16
    EXPECT_EQ(a.att == before.att, flash);  // flash's statistics are kept as they were
    EXPECT_EQ(a.ln1_rstd, before.ln1_rstd);
    EXPECT_EQ(a.m_probs, before.m_probs);
  }
}

// round_input rounds x_in in place and keeps its packed copy, which pack_bf16 then takes (x_in's T buffer freed):
// unpacked, x_in is the rounded input.
TEST(Bf16Storage, RoundInputKeepsTheInputsCopyForThePack) {
  E::LayerActs<double> a;
  fill_random(a.x_in, 64, 11);
  fill_random(a.fc1, 32, 12);
  const std::vector<double> in(a.x_in.begin(), a.x_in.end());
  a.round_input();
  for (size_t i = 0; i < in.size(); ++i) ASSERT_EQ(a.x_in[i], tp::kernels::bf16_round(in[i])) << i;
  EXPECT_EQ(a.bytes(), (64 + 32) * 8 + 64 * 2);  // the input in both forms until the pack
  a.pack_bf16(false);
  EXPECT_TRUE(a.x_in.empty());
  EXPECT_EQ(a.bytes(), (64 + 32) * 2);
  a.unpack_bf16(false);
  for (size_t i = 0; i < in.size(); ++i) ASSERT_EQ(a.x_in[i], tp::kernels::bf16_round(in[i])) << i;
}

// One dense GELU layer of Gpt<T> with bf16 GEMM operands, its saved tensors packed after the forward and unpacked
// for the backward, with its GEMM operands either rounded in each GEMM or packed once where they are made
// (Gpt::pack_operands16: then what the forward marked stays packed through unpack_bf16, LayerActs::stay16, and the
// backward reads it so; under flash the attention runs on the packed QKV output, flash_attention_fwd16 / _bwd16):
// identical input and weight gradients. moe: a MoE layer (4 experts, top 2, a shared expert), whose expert tensors
// are never marked.
template <class T>
void packed_operands_case(const E::Backend& be, bool flash, bool moe = false) {
  E::BackendScope on(be);
  E::Bf16GemmScope b16(be, true);
  E::GptShape s;
  s.layers = 1, s.C = 32, s.H = 4, s.Hkv = 2, s.D = 8, s.F = 64, s.V = 16, s.maxT = 9;
  if (moe) s.experts = 4, s.top_k = 2, s.Fe = 48, s.Fs = 40, s.capacity_factor = 1.5;
  const long B = 2, Tn = 9, N = B * Tn, C = (long)s.C;
  const E::GptLayout lay = E::gpt_layout(s);
  const std::vector<T> params = E::init_full_params<T>(s, 5);
  std::vector<std::vector<T>> grads, dxs;
  for (bool share : {false, true}) {
    E::Buf<T> p(params.size()), gr(params.size()), x(N * C), y(N * C), dx(N * C);
    up(be, p, params);
    ops_fill(gr, T(0.25));  // (accumulated into: the weight gradients add to what is there)
    std::mt19937 g(3);
    up(be, x, uniform<T>(N * C, g));
    up(be, dx, uniform<T>(N * C, g));
    E::Gpt<T> m = model_over(lay, p, gr, share);
    m.flash = flash;
    E::LayerActs<T> a;
    m.layer_fwd(0, x.data(), y.data(), a, B, Tn);
    a.pack_bf16(flash);
    a.unpack_bf16(flash);
    // (with the operands packed once, LayerNorm writes ln1, and ln2 in a dense layer, packed only, read so; so does
    // the dense MLP's GELU write act and fc1: gelu_fwd16; the attention output stays packed, unfused for the
    // projection's weight gradient, under flash also for flash_attention_bwd16, which reads the QKV output packed)
    EXPECT_EQ(a.packed(a.ln1) != nullptr, share);
    EXPECT_EQ(a.packed(a.act) != nullptr, share && !moe);
    EXPECT_EQ(a.packed(a.fc1) != nullptr, share && !moe);
    EXPECT_EQ(a.ln2.empty(), share && !moe);
    if (moe) {
      EXPECT_FALSE(a.m_xe.empty());
      EXPECT_FALSE(a.s_act.empty());
    }
    EXPECT_EQ(a.packed(a.attn) != nullptr, share);
    EXPECT_EQ(a.packed(a.q) != nullptr, flash && share);
    m.layer_bwd(0, dx.data(), dx.data(), a, B, Tn);
    grads.push_back(down(be, gr));
    dxs.push_back(down(be, dx));
  }
  EXPECT_EQ(grads[0], grads[1]) << be.name << (flash ? " flash" : " unfused");
  EXPECT_EQ(dxs[0], dxs[1]) << be.name << (flash ? " flash" : " unfused");
  EXPECT_NE(grads[0], std::vector<T>(grads[0].size(), T(0.25)));
}

// The head (final norm, tied LM head, cross-entropy) with its logits' gradient rounded in each GEMM or packed once.
template <class T>
void head_share_case(const E::Backend& be) {
  E::BackendScope on(be);
  E::Bf16GemmScope b16(be, true);
  E::GptShape s;
  s.layers = 1, s.C = 32, s.H = 4, s.Hkv = 4, s.D = 8, s.F = 64, s.V = 40, s.maxT = 9;
  const long B = 2, Tn = 9, N = B * Tn, C = (long)s.C;
  const E::GptLayout lay = E::gpt_layout(s);
  const std::vector<T> params = E::init_full_params<T>(s, 7);
  std::vector<int32_t> tg(N);
  for (long i = 0; i < N; ++i) tg[i] = int32_t((i * 7) % s.V);
  std::vector<std::vector<T>> grads, dxs;
  for (bool share : {false, true}) {
    E::Buf<T> p(params.size()), gr(params.size()), x(N * C), dx(N * C);
    E::Buf<int32_t> t(N);
    up(be, p, params);
    up(be, t, tg);
    ops_fill(gr, T(0));
    std::mt19937 g(5);
    up(be, x, uniform<T>(N * C, g));
    E::Gpt<T> m = model_over(lay, p, gr, share);
    E::HeadActs<T> a;
    m.head_fwd(x.data(), t.data(), a, B, Tn);
    m.head_bwd(dx.data(), t.data(), a, B, Tn, T(1.0 / N));
    grads.push_back(down(be, gr));
    dxs.push_back(down(be, dx));
  }
  EXPECT_EQ(grads[0], grads[1]) << be.name;
  EXPECT_EQ(dxs[0], dxs[1]) << be.name;
  EXPECT_NE(grads[0], std::vector<T>(grads[0].size(), T(0)));
}

TEST(Bf16Storage, HeadReadsItsLogitsGradientPackedBitForBit) {
  for (const E::Backend* be : {&E::cpu_backend(), &E::emu_backend(), &E::emu_device_backend()}) {
    head_share_case<double>(*be);
    head_share_case<float>(*be);
  }
}

TEST(Bf16Storage, BackwardReadsPackedGemmOperandsBitForBit) {
  for (const E::Backend* be : {&E::cpu_backend(), &E::emu_backend(), &E::emu_device_backend()})
    for (bool flash : {false, true}) {
      packed_operands_case<double>(*be, flash);
      packed_operands_case<float>(*be, flash);
      packed_operands_case<float>(*be, flash, true);
    }
}

// With T = 128 (unfused: each layer also saves its [mb, H, T, T] probabilities) every saved element of a layer takes
// 2 bytes instead of float64's 8 until its backward. Saved per token and layer: x_in, ln1, q, k, v, attn, x_mid, ln2
// (C each), fc1 and act (4C each), the probabilities (H T). The layer being computed holds its tensors in the working
// type until its forward ends, so at the peak (the last layer's forward, here 0.82 of the bound) the drop lies
// between that of L - 1 layers and that of L.
TEST(Bf16Storage, SavedActivationsTakeTwoBytesOnTheDevice) {
  const int T = 128;
  const json plan = {{"attention", "unfused"}, {"microbatch", 2}};
  json b16 = run(storage_scenario("mem_bf16", plan, "bf16", T), 2, true, nullptr, "--backend emu-device");
  json f32 = run(storage_scenario("mem_fp32", plan, "fp32", T), 2, true, nullptr, "--backend emu-device");
  ASSERT_FALSE(b16.is_null()) << log_text(tmpdir() + "/bf16s_mem_bf16.json");
  ASSERT_FALSE(f32.is_null());
  const double layers = 4, mb = 2, C = 64, H = 4;
  const double saved_elems = layers * mb * T * (8 * C + 8 * C + H * T);
  const double want = saved_elems * (8 - 2);
  const double got = f32["peak_memory_bytes"][0].get<double>() - b16["peak_memory_bytes"][0].get<double>();
  EXPECT_GT(got, 0.95 * (layers - 1) / layers * want) << "fp32 " << f32["peak_memory_bytes"][0] << ", bf16 "
                                                      << b16["peak_memory_bytes"][0];
  EXPECT_LT(got, 1.05 * want);
}

// Flash (the statistics stay in the working type) and the unfused attention's selective recompute: every plan
// reproduces its single-rank bf16 float64 run; emu and emu-device (the pack kernel) match the CPU.
TEST(Bf16Storage, RecomputeAndPlansMatchSingleRankFloat64) {
  const int steps = 3;
  json ref = run(storage_scenario("ref", json::object()), steps, true);
  ASSERT_FALSE(ref.is_null()) << log_text(tmpdir() + "/bf16s_ref.json");
  expect_emu_backends_match(ref, steps, [](const std::string& n) { return storage_scenario(n, json::object()); });
  json un = run(storage_scenario("ref_unfused", {{"attention", "unfused"}}), steps, true);
  ASSERT_FALSE(un.is_null());
  expect_close(un, ref, "losses", 1e-3, "unfused near flash");
  if (!have_mpi()) return;
  const std::vector<PlanCase> flash_cases = {
      {"cp2_full", {{"cp", 2}, {"recompute", "full"}}},
      {"tp2_sp_pp2_full", {{"tp", 2}, {"sequence_parallel", true}, {"pp", 2}, {"recompute", "full"}}},
      // (tp_comm_overlap: ln1, ln2 and the output gradients packed block by block as their pieces arrive)
      {"tp2_sp_overlap", {{"tp", 2}, {"sequence_parallel", true}, {"tp_comm_overlap", true}}},
      {"tp2d_q2_full", {{"tp", 4}, {"tp_mode", "2d"}, {"recompute", "full"}}},
  };
  expect_plans_match(flash_cases, ref, steps, [](const std::string& n, const json& p) { return storage_scenario(n, p); });
  const std::vector<PlanCase> unfused_cases = {
      {"un_pp2_selective", {{"attention", "unfused"}, {"pp", 2}, {"recompute", "selective"}}},
      {"un_cp2_selective", {{"attention", "unfused"}, {"cp", 2}, {"recompute", "selective"}}},
      // (the projection's gradient in pieces while the packed attention output is still read)
      {"un_tp2_sp_overlap", {{"attention", "unfused"}, {"tp", 2}, {"sequence_parallel", true}, {"tp_comm_overlap", true}}},
  };
  expect_plans_match(unfused_cases, un, steps, [](const std::string& n, const json& p) { return storage_scenario(n, p); });
}
