// selftest_cases: the checks of `trainplan selftest` (the GEMM-shaped ones: selftest_gemm_cases.cpp) — every entry of
// exec/backends/backend.hpp's OpTable over shapes
// with one row, odd sizes and rows longer than a GPU block (up to 5000), in place where ops.hpp allows it, and
// the accumulate and overwrite variants, and the mixture-of-experts ops. Inputs that must be consistent (LayerNorm
// statistics, row maxima, positive second moments, router slots) are built so; everything else is uniform in
// [-1, 1), rounded to float.
#include <algorithm>
#include <cmath>
#include <random>
#include <string>

#include "exec/selftest/selftest_harness.hpp"

// Specs are written as designated-order aggregates that leave the trailing members (red, scalar and the two
// bodies, which add() sets) to their defaults.
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

namespace tp::exec::selftest {
namespace {

struct RC {
  long r, c;
};
std::vector<RC> row_shapes(bool quick) {
  std::vector<RC> v = {{1, 1}, {1, 37}, {3, 64}, {17, 100}, {5, 1031}, {2, 5000}};
  if (quick) v.resize(3);
  return v;
}
// LayerNorm statistics of x [N, C] in float64, rounded to float (what a float forward would have saved).
void ln_stats(const Vec& x, long N, long C, Vec& mean, Vec& rstd) {
  mean.assign(size_t(N), 0), rstd.assign(size_t(N), 0);
  for (long n = 0; n < N; ++n) {
    double m = 0, v = 0;
    for (long c = 0; c < C; ++c) m += x[size_t(n * C + c)];
    m /= double(C);
    for (long c = 0; c < C; ++c) v += (x[size_t(n * C + c)] - m) * (x[size_t(n * C + c)] - m);
    mean[size_t(n)] = double(float(m));
    rstd[size_t(n)] = double(float(1 / std::sqrt(v / double(C) + 1e-5)));
  }
}
Vec row_maxima(const Vec& x, long N, long V) {
  Vec m(static_cast<size_t>(N));
  for (long n = 0; n < N; ++n) m[size_t(n)] = *std::max_element(x.begin() + n * V, x.begin() + (n + 1) * V);
  return m;
}

// Context parallelism's rectangular causal attention: Tq queries over Tk >= Tq keys, the mask bottom-right.
void attention_kv_cases(std::vector<Spec>& cs, bool quick) {
  struct Att {
    long B, Tq, Tk, H, Hkv, D;
  };
  std::vector<Att> att = {{1, 1, 1, 1, 1, 4}, {1, 3, 6, 2, 2, 8}, {2, 4, 12, 4, 2, 16}, {1, 16, 64, 2, 1, 32},
                          {1, 33, 33, 2, 2, 8}};
  if (quick) att.resize(3);
  uint32_t s = 700;
  for (auto [B, Tq, Tk, H, Hkv, D] : att) {
    const std::string shape = sh({{"B", B}, {"Tq", Tq}, {"Tk", Tk}, {"H", H}, {"Hkv", Hkv}, {"D", D}});
    const long nq = B * Tq * H * D, nk = B * Tk * Hkv * D, na = B * H * Tq * Tk;
    add(cs, {"attention_fwd_kv", shape, "", {rnd(nq, s++), rnd(nk, s++), rnd(nk, s++), Vec(size_t(nq)), Vec(size_t(na))},
             {}, {3, 4}, double(std::max(Tk, D))},
        TP_SELFTEST_BODY {
          t.attention_fwd_kv(p[3], p[4], p[0], p[1], p[2], B, Tq, Tk, H, Hkv, D);
          return 0;
        });
    add(cs, {"attention_bwd_kv", shape, "accumulate",
             {rnd(nq, s++), rnd(nk, s++), rnd(nk, s++), Vec(size_t(nq)), Vec(size_t(na)), rnd(nq, s++), rnd(nq, s++),
              rnd(nk, s++), rnd(nk, s++)},
             {}, {5, 7, 8}, double(std::max(Tk, D) * H / Hkv)},
        TP_SELFTEST_BODY {
          t.attention_fwd_kv(p[3], p[4], p[0], p[1], p[2], B, Tq, Tk, H, Hkv, D);
          t.attention_bwd_kv(p[5], p[7], p[8], p[6], p[4], p[0], p[1], p[2], B, Tq, Tk, H, Hkv, D);
          return 0;
        });
    add(cs, bf16_operands({"attention_bwd_kv", shape, "accumulate",  // (tolerance: attention_bwd's bf16 note)
                           {rnd(nq, s++), rnd(nk, s++), rnd(nk, s++), Vec(size_t(nq)), Vec(size_t(na)), rnd(nq, s++),
                            rnd(nq, s++), rnd(nk, s++), rnd(nk, s++)},
                           {}, {3, 4, 5, 7, 8}, double(std::max(Tk, D) * H / Hkv)}, 5e-3),
        TP_SELFTEST_BODY {
          t.attention_fwd_kv(p[3], p[4], p[0], p[1], p[2], B, Tq, Tk, H, Hkv, D);
          t.attention_bwd_kv(p[5], p[7], p[8], p[6], p[4], p[0], p[1], p[2], B, Tq, Tk, H, Hkv, D);
          return 0;
        });
  }
}

// Flash attention (the fused kernels on emu and cuda): one, two and four lanes per row (D <= 32, 64, 128), several
// query and key tiles, grouped kv heads, Tq < Tk. The backward runs from the forward of the table under test.
void flash_cases(std::vector<Spec>& cs, bool quick) {
  struct Att {
    long B, Tq, Tk, H, Hkv, D;
  };
  std::vector<Att> att = {{1, 1, 1, 1, 1, 4}, {1, 3, 6, 2, 2, 8}, {2, 7, 7, 4, 2, 40}, {1, 70, 70, 2, 1, 64},
                          {1, 5, 13, 2, 2, 100}, {1, 33, 33, 1, 1, 128}};
  if (quick) att.resize(3);
  uint32_t s = 800;
  for (auto [B, Tq, Tk, H, Hkv, D] : att) {
    const std::string shape = sh({{"B", B}, {"Tq", Tq}, {"Tk", Tk}, {"H", H}, {"Hkv", Hkv}, {"D", D}});
    const long nq = B * Tq * H * D, nk = B * Tk * Hkv * D, ns = B * H * Tq * 2;
    for (bool bf16 : {false, true}) {
      Spec fwd{"flash_attention_fwd", shape, "", {rnd(nq, s++), rnd(nk, s++), rnd(nk, s++), Vec(size_t(nq)),
                                                  Vec(size_t(ns))}, {}, {3, 4}, double(std::max(Tk, D))};
      add(cs, bf16 ? bf16_operands(fwd, 5e-3) : fwd, TP_SELFTEST_BODY {
        t.flash_attention_fwd(p[3], p[4], p[0], p[1], p[2], B, Tq, Tk, H, Hkv, D, H * D, Hkv * D);
        return 0;
      });
      Spec bwd{"flash_attention_bwd", shape, "accumulate",
               {rnd(nq, s++), rnd(nk, s++), rnd(nk, s++), Vec(size_t(nq)), Vec(size_t(ns)), rnd(nq, s++), rnd(nq, s++),
                rnd(nk, s++), rnd(nk, s++)},
               {}, {5, 7, 8}, double(std::max(Tk, D) * H / Hkv)};
      add(cs, bf16 ? bf16_operands(bwd, 5e-3) : bwd, TP_SELFTEST_BODY {  // (tolerance: attention_bwd's bf16 note)
        t.flash_attention_fwd(p[3], p[4], p[0], p[1], p[2], B, Tq, Tk, H, Hkv, D, H * D, Hkv * D);
        t.flash_attention_bwd(p[5], p[7], p[8], p[6], p[3], p[4], p[0], p[1], p[2], B, Tq, Tk, H, Hkv, D, H * D, Hkv * D);
        return 0;
      });
      if (bf16) {
        // bf16 storage (flash_attention_fwd16 / _bwd16): q, k, v packed, out written packed and read so by the
        // backward; with Tq = Tk in place in a fused QKV buffer, as the model calls them.
        const long W = Tq == Tk ? (H + 2 * Hkv) * D : 0, ldq = W ? W : H * D, ldkv = W ? W : Hkv * D;
        const long nqs = W ? B * Tq * W : nq, nks = W ? 0 : nk;  // the packed q (or qkv) and k, v buffers
        Spec s16{"flash_attention_fwd16+flash_attention_bwd16", shape,
                 W ? "bf16 storage, packed qkv, overwrite" : "bf16 storage, overwrite",
                 {rnd(nqs, s++), rnd(nks, s++), rnd(nks, s++), Vec(size_t(nq)), Vec(size_t(ns)), rnd(nq, s++),
                  rnd(nqs, s++), rnd(nks, s++), rnd(nks, s++)},
                 {Ints(size_t((nqs + 1) / 2)), Ints(size_t((nks + 1) / 2)), Ints(size_t((nks + 1) / 2)),
                  Ints(size_t((nq + 1) / 2))},
                 {3, 4, 6, 7, 8}, double(std::max(Tk, D) * H / Hkv)};
        s16.lse_pairs = {4};  // (also run with the backend's attention library, selftest.cpp)
        add(cs, bf16_operands(s16, 5e-3), TP_SELFTEST_BODY {
          uint16_t* q16 = reinterpret_cast<uint16_t*>(ip[0]);
          uint16_t* o16 = reinterpret_cast<uint16_t*>(ip[3]);
          t.pack_bf16(q16, p[0], nqs);
          const uint16_t* k16 = q16 + H * D;
          const uint16_t* v16 = q16 + (H + Hkv) * D;
          TT* dq = p[6];
          TT* dk = dq + H * D;
          TT* dv = dq + (H + Hkv) * D;
          if (!W) {  // (separate q, k, v)
            t.pack_bf16(reinterpret_cast<uint16_t*>(ip[1]), p[1], nks);
            t.pack_bf16(reinterpret_cast<uint16_t*>(ip[2]), p[2], nks);
            k16 = reinterpret_cast<const uint16_t*>(ip[1]), v16 = reinterpret_cast<const uint16_t*>(ip[2]);
            dk = p[7], dv = p[8];
          }
          t.flash_attention_fwd16(o16, p[4], q16, k16, v16, B, Tq, Tk, H, Hkv, D, ldq, ldkv);
          t.unpack_bf16(p[3], o16, nq);
          t.flash_attention_bwd16(dq, dk, dv, p[5], o16, p[4], q16, k16, v16, B, Tq, Tk, H, Hkv, D, ldq, ldkv);
          return 0;
        });
      }
      if (Tq != Tk) continue;
      // The model's call: q, k, v in place in the fused QKV output [B T, W], W = (H + 2 Hkv) D, and the gradients
      // into dqkv's columns (accumulating).
      const long W = (H + 2 * Hkv) * D, nw = B * Tq * W;
      Spec packed{"flash_attention_fwd+bwd", shape, "packed qkv, accumulate",
                  {rnd(nw, s++), Vec(size_t(nq)), Vec(size_t(ns)), rnd(nw, s++), rnd(nq, s++)}, {}, {1, 2, 3},
                  double(std::max(Tk, D) * H / Hkv)};
      add(cs, bf16 ? bf16_operands(packed, 5e-3) : packed, TP_SELFTEST_BODY {
        auto* qkv = p[0];
        auto* dqkv = p[3];
        t.flash_attention_fwd(p[1], p[2], qkv, qkv + H * D, qkv + (H + Hkv) * D, B, Tq, Tk, H, Hkv, D, W, W);
        t.flash_attention_bwd(dqkv, dqkv + H * D, dqkv + (H + Hkv) * D, p[4], p[1], p[2], qkv, qkv + H * D,
                              qkv + (H + Hkv) * D, B, Tq, Tk, H, Hkv, D, W, W);
        return 0;
      });
    }
  }
}

void elementwise_cases(std::vector<Spec>& cs, bool quick) {
  uint32_t s = 1000;
  for (auto [N, C] : row_shapes(quick)) {
    const long n = N * C;
    const std::string shape = sh({{"N", N}, {"C", C}});
    add(cs, {"add_bias", shape, "", {rnd(n, s++), rnd(C, s++), Vec(size_t(n))}, {}, {2}},
        TP_SELFTEST_BODY { return t.add_bias(p[2], p[0], p[1], N, C, nullptr), 0.0; });
    add(cs, {"add_bias", shape, "in place", {rnd(n, s++), rnd(C, s++)}, {}, {0}},
        TP_SELFTEST_BODY { return t.add_bias(p[0], p[0], p[1], N, C, nullptr), 0.0; });
    add(cs, {"add_bias", shape, "residual, in place over x", {rnd(n, s++), rnd(C, s++), rnd(n, s++)}, {}, {0}},
        TP_SELFTEST_BODY { return t.add_bias(p[0], p[0], p[1], N, C, p[2]), 0.0; });
    add(cs, {"add_bias", shape, "residual, in place over it", {rnd(n, s++), rnd(C, s++), rnd(n, s++)}, {}, {2}},
        TP_SELFTEST_BODY { return t.add_bias(p[2], p[0], p[1], N, C, p[2]), 0.0; });
    add(cs, {"bias_bwd", shape, "accumulate", {rnd(C, s++), rnd(n, s++)}, {}, {0}, double(N)},
        TP_SELFTEST_BODY { return t.bias_bwd(p[0], p[1], N, C, nullptr), 0.0; });
    add(cs, {"add", sh({{"n", n}}), "in place", {rnd(n, s++), rnd(n, s++)}, {}, {0}},
        TP_SELFTEST_BODY { return t.add(p[0], p[0], p[1], n), 0.0; });
    add(cs, {"accumulate", sh({{"n", n}}), "", {rnd(n, s++), rnd(n, s++)}, {}, {0}},
        TP_SELFTEST_BODY { return t.accumulate(p[0], p[1], n), 0.0; });
    add(cs, {"scale", sh({{"n", n}}), "in place", {rnd(n, s++)}, {}, {0}},
        TP_SELFTEST_BODY { return t.scale(p[0], p[0], TT(-0.375), n), 0.0; });
    add(cs, {"fill", sh({{"n", n}}), "", {rnd(n, s++)}, {}, {0}}, TP_SELFTEST_BODY { return t.fill(p[0], TT(2.5), n), 0.0; });
    add(cs, {"copy", sh({{"n", n}}), "", {rnd(n, s++), rnd(n, s++)}, {}, {0}},
        TP_SELFTEST_BODY { return t.copy(p[0], p[1], n), 0.0; });
    // bf16 storage: the packed bits (compared exactly, in an int32 buffer) and the values unpacked from them
    add(cs, {"pack_bf16", sh({{"n", n}}), "then unpack_bf16", {Vec(size_t(n)), rnd(n, s++, -300, 300)},
             {Ints(size_t((n + 1) / 2))}, {0}, 1, false, {}, {}, {0}},
        TP_SELFTEST_BODY {
          t.pack_bf16(reinterpret_cast<uint16_t*>(ip[0]), p[1], n);
          return t.unpack_bf16(p[0], reinterpret_cast<const uint16_t*>(ip[0]), n), 0.0;
        });
    add(cs, {"copy_rows", shape, "column block", {rnd(N * (C + 3), s++), rnd(N * (2 * C + 1), s++)}, {}, {0}},
        TP_SELFTEST_BODY { return t.copy_rows(p[0], C + 3, p[1] + 1, 2 * C + 1, N, C), 0.0; });
    add(cs, {"gelu_fwd", sh({{"n", n}}), "in place", {rnd(n, s++, -4, 4)}, {}, {0}},
        TP_SELFTEST_BODY { return t.gelu_fwd(p[0], p[0], n), 0.0; });
    add(cs, {"gelu_bwd", sh({{"n", n}}), "accumulate", {rnd(n, s++), rnd(n, s++, -4, 4), rnd(n, s++)}, {}, {0}},
        TP_SELFTEST_BODY { return t.gelu_bwd(p[0], p[1], p[2], n), 0.0; });
    add(cs, {"gelu_bwd_set", sh({{"n", n}}), "overwrite, in place over dy", {rnd(n, s++, -4, 4), rnd(n, s++)}, {}, {1}},
        TP_SELFTEST_BODY { return t.gelu_bwd_set(p[1], p[0], p[1], n), 0.0; });
    add(cs, {"swiglu_fwd", sh({{"N", N}, {"F", C}}), "", {rnd(2 * n, s++, -3, 3), Vec(size_t(n))}, {}, {1}},
        TP_SELFTEST_BODY { return t.swiglu_fwd(p[1], p[0], N, C), 0.0; });
    add(cs, {"swiglu_bwd", sh({{"N", N}, {"F", C}}), "accumulate", {rnd(2 * n, s++), rnd(2 * n, s++, -3, 3), rnd(n, s++)},
             {}, {0}},
        TP_SELFTEST_BODY { return t.swiglu_bwd(p[0], p[1], p[2], N, C), 0.0; });
    add(cs, {"swiglu_bwd_set", sh({{"N", N}, {"F", C}}), "overwrite, in place over gate_up",
             {rnd(2 * n, s++, -3, 3), rnd(n, s++)}, {}, {0}},
        TP_SELFTEST_BODY { return t.swiglu_bwd_set(p[0], p[0], p[1], N, C), 0.0; });
  }
  // The fused bf16 steps (k_fused.hpp), also on more rows than a column sum takes in one pass.
  std::vector<RC> fused = row_shapes(quick);
  if (!quick) fused.push_back({300, 70});
  for (auto [N, C] : fused) {
    const long n = N * C, h = (n + 1) / 2;  // (h: int32 elements holding n bf16 values)
    const std::string shape = sh({{"N", N}, {"C", C}});
    // the bias gradient (the sum's tolerance), then the gradient's packed copy unpacked (bf16's: a value near a
    // rounding boundary may round either way)
    for (int copy = 0; copy < 2; ++copy) {
      Spec b16{"bias_bwd", shape, copy ? "dy's packed copy" : "accumulate, with dy's packed copy",
               {rnd(C, s++), rnd(n, s++), Vec(size_t(n))}, {Ints(size_t(h))}, {copy ? 2 : 0}, copy ? 1.0 : double(N)};
      if (copy) b16.tol = 5e-3;
      add(cs, b16, TP_SELFTEST_BODY {
        uint16_t* dy16 = reinterpret_cast<uint16_t*>(ip[0]);
        t.bias_bwd(p[0], p[1], N, C, dy16);
        return t.unpack_bf16(p[2], dy16, n), 0.0;
      });
    }
    // GELU written as bf16 only: y's packed copy, then x's (exact: x's own rounding), unpacked
    for (int copy = 0; copy < 2; ++copy) {
      Spec f16{"gelu_fwd16", sh({{"n", n}}), copy ? "x's packed copy" : "y packed", {rnd(n, s++, -4, 4), Vec(size_t(n))},
               {Ints(size_t(h)), Ints(size_t(h))}, {1}};
      f16.tol = 5e-3;
      add(cs, f16, TP_SELFTEST_BODY {
        uint16_t* y16 = reinterpret_cast<uint16_t*>(ip[0]);
        uint16_t* x16 = reinterpret_cast<uint16_t*>(ip[1]);
        t.gelu_fwd16(y16, x16, p[0], n);
        return t.unpack_bf16(p[1], copy ? x16 : y16, n), 0.0;
      });
    }
    // GELU's backward from x as bf16: the bias gradient, then the packed gradient unpacked; and without a bias
    for (int copy = 0; copy < 3; ++copy) {
      Spec g16{"gelu_bwd_bias16", sh({{"N", N}, {"F", C}}),
               copy == 0 ? "x as bf16, bias accumulated" : copy == 1 ? "x as bf16, dx's packed copy" : "no bias",
               {rnd(n, s++, -4, 4), rnd(n, s++), rnd(C, s++), Vec(size_t(n))}, {Ints(size_t(h)), Ints(size_t(h))},
               {copy ? 3 : 2}, copy ? 1.0 : double(N)};
      if (copy) g16.tol = 5e-3;
      add(cs, g16, TP_SELFTEST_BODY {
        uint16_t* x16 = reinterpret_cast<uint16_t*>(ip[0]);
        uint16_t* dx16 = reinterpret_cast<uint16_t*>(ip[1]);
        t.pack_bf16(x16, p[0], n);
        t.gelu_bwd_bias16(dx16, copy < 2 ? p[2] : nullptr, x16, p[1], N, C);
        return t.unpack_bf16(p[3], dx16, n), 0.0;
      });
    }
  }
  for (long n : {1L, 7L, 1000L, 100003L}) {
    if (quick && n > 1000) break;
    for (long step : {1L, 7L}) {
      const double gs = step == 1 ? 1.0 : 0.37;  // t = 7: the clip's scale on the gradient
      add(cs, {"adamw", sh({{"n", n}, {"t", step}}), step == 1 ? "" : "gradient scaled 0.37",
               {rnd(n, s++), rnd(n, s++), rnd(n, s++), rnd(n, s++, 0, 1)}, {}, {0, 1, 2, 3}, 4},
          TP_SELFTEST_BODY {
            return t.adamw(p[0], p[1], p[2], p[3], n, TT(1e-3), TT(0.9), TT(0.95), TT(1e-8), TT(0.1), step, TT(gs)), 0.0;
          });
    }
    add(cs, {"sum_squares", sh({{"n", n}}), "", {rnd(n, s++)}, {}, {}, double(n), true},
        TP_SELFTEST_BODY { return t.sum_squares(p[0], n); });
    // The multi-tensor forms over segments of two buffers (an empty one among them), each segment its own decay.
    {
      const long a = n / 3, b = n - n / 3;  // buffer 0 split at a; buffer 1 whole
      add(cs, {"adamw_multi", sh({{"n", 2 * n}, {"segments", 4}}), "gradient scaled 0.37",
               {rnd(n, s++), rnd(n, s++), rnd(n, s++), rnd(n, s++, 0, 1), rnd(n, s++), rnd(n, s++), rnd(n, s++),
                rnd(n, s++, 0, 1)},
               {}, {0, 2, 3, 4, 6, 7}, 4},
          TP_SELFTEST_BODY {
            using E = TT;
            E* const pp[4] = {p[0], p[0] + a, p[4], p[4]};
            const E* const gg[4] = {p[1], p[1] + a, p[5], p[5]};
            E* const mm[4] = {p[2], p[2] + a, p[6], p[6]};
            E* const vv[4] = {p[3], p[3] + a, p[7], p[7]};
            const long nn[4] = {a, b, 0, n};
            const E wd[4] = {E(0.1), E(0), E(0.5), E(0.01)};
            return t.adamw_multi(pp, gg, mm, vv, nn, wd, 4, E(1e-3), E(0.9), E(0.95), E(1e-8), 7, E(0.37)), 0.0;
          });
      add(cs, {"sum_squares_multi", sh({{"n", 2 * n}, {"segments", 3}}), "", {rnd(n, s++), rnd(n, s++)}, {}, {},
               double(2 * n), true},
          TP_SELFTEST_BODY {
            const TT* const xs[3] = {p[0], p[1], p[0] + a};
            const long nn[3] = {a, n, b};
            return t.sum_squares_multi(xs, nn, 3);
          });
    }
    // fp8 casts: power-of-two scales keep x * scale and the division back exact in float and double, so the
    // backend's fp8 values are the reference's (ties and saturation included: scale 1024 saturates E4M3). The amax
    // slot (buffer 2) starts below max |x| (raised to it) or, at scale 1, above it (kept); the scale is read from the
    // backend's memory (buffer 3).
    for (int format : {0, 1})
      for (double sc : {1.0, format == 0 ? 256.0 : 4096.0, format == 0 ? 1024.0 : 65536.0}) {
        const std::string var = std::string(format == 0 ? "E4M3" : "E5M2") + ", scale " + std::to_string(long(sc));
        add(cs, {"fp8_quantize", sh({{"n", n}}), var, {rnd(n, s++), Vec(size_t(n)), Vec{sc == 1.0 ? 3.0 : 0.25}, Vec{sc}},
                 {}, {1, 2}},
            TP_SELFTEST_BODY { return t.fp8_quantize(p[1], p[0], n, p[3], format, p[2]), 0.0; });
      }
    add(cs, {"fp8_quantize", sh({{"n", n}}), "E4M3, in place, no amax", {rnd(n, s++), Vec{16.0}}, {}, {0}},
        TP_SELFTEST_BODY { return t.fp8_quantize(p[0], p[0], n, p[1], 0, nullptr), 0.0; });
  }
}

void row_cases(std::vector<Spec>& cs, bool quick) {
  uint32_t s = 5000;
  for (auto [N, C] : row_shapes(quick)) {
    const long n = N * C;
    const std::string shape = sh({{"N", N}, {"C", C}});
    Vec x = rnd(n, s++, -2, 2), mean, rstd;
    ln_stats(x, N, C, mean, rstd);
    add(cs, {"layernorm_fwd", shape, "", {x, rnd(C, s++), rnd(C, s++), Vec(size_t(n)), Vec(size_t(N)), Vec(size_t(N))}, {},
             {3, 4, 5}, double(C)},
        TP_SELFTEST_BODY { return t.layernorm_fwd(p[3], p[4], p[5], p[0], p[1], p[2], N, C, TT(1e-5)), 0.0; });
    {  // y written packed only: bf16's tolerance (a value near a rounding boundary may round either way)
      Spec ln16{"layernorm_fwd16", shape, "y as bf16", {x, rnd(C, s++), rnd(C, s++), Vec(size_t(n)), Vec(size_t(N)),
                Vec(size_t(N))}, {Ints(size_t((n + 1) / 2))}, {3, 4, 5}, double(C)};
      ln16.tol = 5e-3;
      add(cs, ln16, TP_SELFTEST_BODY {
        uint16_t* y16 = reinterpret_cast<uint16_t*>(ip[0]);
        t.layernorm_fwd16(y16, p[4], p[5], p[0], p[1], p[2], N, C, TT(1e-5));
        return t.unpack_bf16(p[3], y16, N * C), 0.0;
      });
    }
    for (bool with_db : {true, false})
      add(cs, {"layernorm_bwd", shape, with_db ? "accumulate" : "accumulate, db null",
               {rnd(n, s++), rnd(C, s++), rnd(C, s++), rnd(n, s++), x, rnd(C, s++), mean, rstd}, {},
               with_db ? std::vector<int>{0, 1, 2} : std::vector<int>{0, 1}, double(std::max(N, C))},
          TP_SELFTEST_BODY {
            return t.layernorm_bwd(p[0], p[1], with_db ? p[2] : nullptr, p[3], p[4], p[5], p[6], p[7], N, C), 0.0;
          });
    add(cs, {"layernorm_bwd16", shape, "x as bf16, accumulate",
             {rnd(n, s++), rnd(C, s++), rnd(C, s++), rnd(n, s++), x, rnd(C, s++), mean, rstd}, {Ints(size_t((n + 1) / 2))},
             {0, 1, 2}, double(std::max(N, C))},
        TP_SELFTEST_BODY {
          uint16_t* x16 = reinterpret_cast<uint16_t*>(ip[0]);
          t.pack_bf16(x16, p[4], N * C);
          return t.layernorm_bwd16(p[0], p[1], p[2], p[3], x16, p[5], p[6], p[7], N, C), 0.0;
        });
    // Cross-entropy over V = C classes; targets cover the whole vocabulary.
    const long V = C;
    for (bool inplace : {false, true})
      add(cs, {"cross_entropy_fwd", sh({{"N", N}, {"V", V}}), inplace ? "in place" : "",
               {rnd(n, s++, -4, 4), Vec(size_t(n))}, {ids(N, int32_t(V), s++)}, {inplace ? 0 : 1}, double(V), true},
          TP_SELFTEST_BODY { return double(t.cross_entropy_fwd(inplace ? p[0] : p[1], p[0], ip[0], N, V)); });
    add(cs, {"cross_entropy_fwd_to", sh({{"N", N}, {"V", V}}), "in place, the loss sum to device memory",
             {rnd(n, s++, -4, 4)}, {ids(N, int32_t(V), s++), Ints(2)}, {0}, double(V), true},
        TP_SELFTEST_BODY {
          double* loss = reinterpret_cast<double*>(ip[1]);  // (8 bytes of device memory)
          t.cross_entropy_fwd_to(p[0], loss, p[0], ip[0], N, V);
          double v = 0;
          tp::exec::current_backend().copy(&v, loss, sizeof v, tp::exec::CopyKind::device_to_host, tp::exec::Stream{});
          return double(TT(v));
        });
    add(cs, {"cross_entropy_bwd", sh({{"N", N}, {"V", V}}), "accumulate", {rnd(n, s++), rnd(n, s++, 0, 1)},
             {ids(N, int32_t(V), s++)}, {0}},
        TP_SELFTEST_BODY { return t.cross_entropy_bwd(p[0], p[1], ip[0], N, V, TT(0.25)), 0.0; });
    add(cs, {"row_max", sh({{"N", N}, {"V", V}}), "", {Vec(size_t(N)), rnd(n, s++)}, {}, {0}},
        TP_SELFTEST_BODY { return t.row_max(p[0], p[1], N, V), 0.0; });
  }
}

void shard_cases(std::vector<Spec>& cs, bool quick) {
  uint32_t s = 9000;
  for (auto [N, Cl] : row_shapes(quick)) {
    const long n = N * Cl, C = 3 * Cl, v0 = Cl;  // this rank: the middle third of the columns / vocabulary
    const std::string shape = sh({{"N", N}, {"Cl", Cl}, {"C", C}});
    add(cs, {"ln_shard_sum", shape, "", {Vec(size_t(N)), rnd(n, s++)}, {}, {0}, double(Cl)},
        TP_SELFTEST_BODY { return t.ln_shard_sum(p[0], p[1], N, Cl), 0.0; });
    add(cs, {"ln_shard_sqdev", shape, "in place over sum", {rnd(N, s++, -C, C), Vec(size_t(N)), rnd(n, s++)}, {},
             {0, 1}, double(Cl)},
        TP_SELFTEST_BODY { return t.ln_shard_sqdev(p[0], p[1], p[0], p[2], N, Cl, C), 0.0; });
    add(cs, {"ln_shard_apply", shape, "",
             {Vec(size_t(n)), Vec(size_t(N)), rnd(n, s++), rnd(N, s++), rnd(N, s++, 0.5 * C, 2.0 * C), rnd(Cl, s++),
              rnd(Cl, s++)},
             {}, {0, 1}},
        TP_SELFTEST_BODY { return t.ln_shard_apply(p[0], p[1], p[2], p[3], p[4], p[5], p[6], N, Cl, C, TT(1e-5)), 0.0; });
    add(cs, {"ln_shard_bwd_sums", shape, "",
             {Vec(size_t(2 * N)), rnd(n, s++), rnd(n, s++), rnd(Cl, s++), rnd(N, s++), rnd(N, s++, 0.5, 2)}, {}, {0},
             double(Cl)},
        TP_SELFTEST_BODY { return t.ln_shard_bwd_sums(p[0], p[1], p[2], p[3], p[4], p[5], N, Cl), 0.0; });
    add(cs, {"ln_shard_bwd_apply", shape, "accumulate",
             {rnd(n, s++), rnd(Cl, s++), rnd(Cl, s++), rnd(n, s++), rnd(n, s++), rnd(Cl, s++), rnd(N, s++),
              rnd(N, s++, 0.5, 2), rnd(2 * N, s++, -C, C)},
             {}, {0, 1, 2}, double(N)},
        TP_SELFTEST_BODY {
          return t.ln_shard_bwd_apply(p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7], p[8], N, Cl, C), 0.0;
        });
    const long V = Cl;  // vocabulary shard [v0, v0 + V) of a 3V vocabulary
    Vec logits = rnd(n, s++, -4, 4);
    const Ints tg = ids(N, int32_t(3 * V), s++);
    add(cs, {"max_combine", sh({{"N", N}, {"P", 3}}), "", {rnd(N, s++), rnd(3 * N, s++)}, {}, {0}},
        TP_SELFTEST_BODY { return t.max_combine(p[0], p[1], N, 3), 0.0; });
    for (CeForm form : {CeForm::raw_target_divide, CeForm::shifted_target_reciprocal}) {
      const std::string fv = form == CeForm::raw_target_divide ? "raw_target_divide" : "shifted_target_reciprocal";
      add(cs, {"ce_shard_exp", sh({{"N", N}, {"V", V}, {"v0", v0}}), fv + ", in place",
               {logits, Vec(size_t(N)), Vec(size_t(N)), row_maxima(logits, N, V)}, {tg}, {0, 1, 2}, double(V)},
          TP_SELFTEST_BODY { return t.ce_shard_exp(p[0], p[1], p[2], p[0], p[3], ip[0], N, V, v0, form), 0.0; });
      add(cs, {"ce_shard_finish", sh({{"N", N}, {"V", V}}), fv,
               {rnd(n, s++, 0, 1), rnd(N, s++, 1, 5), rnd(N, s++), rnd(N, s++)}, {}, {0}, double(N), true},
          TP_SELFTEST_BODY { return t.ce_shard_finish(p[0], p[1], p[2], p[3], N, V, form); });
    }
    add(cs, {"ce_shard_target_grad", sh({{"N", N}, {"V", V}, {"v0", v0}}), "accumulate", {rnd(n, s++)}, {tg}, {0}},
        TP_SELFTEST_BODY { return t.ce_shard_target_grad(p[0], ip[0], N, V, v0, TT(0.5)), 0.0; });
    {  // written packed only: bf16's tolerance, unpacked by the body for the comparison
      Spec g16{"ce_grad16", sh({{"N", N}, {"V", V}, {"v0", v0}}), "dlogits as bf16", {rnd(n, s++, 0, 1), Vec(size_t(n))},
               {tg, Ints(size_t((n + 1) / 2))}, {1}};
      g16.tol = 5e-3;
      add(cs, g16, TP_SELFTEST_BODY {
        uint16_t* d16 = reinterpret_cast<uint16_t*>(ip[1]);
        t.ce_grad16(d16, p[0], ip[0], N, V, v0, TT(0.5));
        return t.unpack_bf16(p[1], d16, N * V), 0.0;
      });
    }
    add(cs, {"embedding_shard_fwd", sh({{"N", N}, {"C", Cl}, {"v0", v0}, {"Vl", V}}), "rows outside kept",
             {rnd(n, s++), rnd(V * Cl, s++)}, {tg}, {0}},
        TP_SELFTEST_BODY { return t.embedding_shard_fwd(p[0], ip[0], p[1], N, Cl, v0, V), 0.0; });
    {  // the shard as its bf16 copy, packed by the body (bf16's tolerance: the oracle rounds from float64)
      Spec e16{"embedding_shard_fwd16", sh({{"N", N}, {"C", Cl}, {"v0", v0}, {"Vl", V}}), "rows outside kept",
               {rnd(n, s++), rnd(V * Cl, s++)}, {tg, Ints(size_t((V * Cl + 1) / 2))}, {0}};
      e16.tol = 5e-3;
      add(cs, e16, TP_SELFTEST_BODY {
            uint16_t* w16 = reinterpret_cast<uint16_t*>(ip[1]);
            t.pack_bf16(w16, p[1], V * Cl);
            return t.embedding_shard_fwd16(p[0], ip[0], w16, N, Cl, v0, V), 0.0;
          });
    }
    add(cs, {"embedding_shard_bwd", sh({{"N", N}, {"C", Cl}, {"v0", v0}, {"Vl", V}}), "accumulate",
             {rnd(V * Cl, s++), rnd(n, s++)}, {tg}, {0}, double(N)},
        TP_SELFTEST_BODY { return t.embedding_shard_bwd(p[0], p[1], ip[0], N, Cl, v0, V), 0.0; });
    const long Tn = std::max(1L, N / 2 + 1), row0 = N / 3;
    add(cs, {"add_positions", sh({{"rows", N}, {"C", Cl}, {"Tn", Tn}, {"row0", row0}}), "", {rnd(n, s++), rnd(Tn * Cl, s++)},
             {}, {0}},
        TP_SELFTEST_BODY { return t.add_positions(p[0], p[1], N, Cl, Tn, row0), 0.0; });
    add(cs, {"positions_bwd", sh({{"rows", N}, {"C", Cl}, {"Tn", Tn}, {"row0", row0}}), "accumulate",
             {rnd(Tn * Cl, s++), rnd(n, s++)}, {}, {0}, double(N)},
        TP_SELFTEST_BODY { return t.positions_bwd(p[0], p[1], N, Cl, Tn, row0), 0.0; });
  }
  struct E {
    long B, T, C, V;
  };
  std::vector<E> es = {{1, 1, 1, 1}, {2, 3, 5, 4}, {3, 17, 64, 11}, {2, 33, 1031, 50}};
  if (quick) es.resize(3);
  for (auto [B, T, C, V] : es) {
    const std::string shape = sh({{"B", B}, {"T", T}, {"C", C}, {"V", V}});
    const Ints tok = ids(B * T, int32_t(V), s++);
    for (bool wpe : {true, false}) {
      add(cs, {"embedding_fwd", shape, wpe ? "with wpe" : "no wpe", {Vec(size_t(B * T * C)), rnd(V * C, s++), rnd(T * C, s++)},
               {tok}, {0}},
          TP_SELFTEST_BODY { return t.embedding_fwd(p[0], ip[0], p[1], wpe ? p[2] : nullptr, B, T, C), 0.0; });
      add(cs, {"embedding_bwd", shape, wpe ? "accumulate" : "accumulate, dwpe null",
               {rnd(V * C, s++), rnd(T * C, s++), rnd(B * T * C, s++)}, {tok}, wpe ? std::vector<int>{0, 1} : std::vector<int>{0},
               double(B * T)},
          TP_SELFTEST_BODY { return t.embedding_bwd(p[0], wpe ? p[1] : nullptr, p[2], ip[0], B, T, C), 0.0; });
    }
  }
}

// Mixture of experts: router logits far apart per token (so fp32 and float64 choose the same experts) or small
// integers (exact ties, equal in every precision: the lower expert wins); capacities that drop copies and ones
// that keep all; renormalised gates or not. The router's slots must be identical. Dispatch and combine take
// slots built as a router makes them: distinct kept positions, the rest dropped (-(e + 1)).
Vec moe_logits(long N, long E, bool ties, uint32_t seed) {
  std::mt19937 g(seed);
  Vec z(size_t(N * E));
  std::vector<long> perm(static_cast<size_t>(E));
  for (long i = 0; i < N; ++i) {
    for (long e = 0; e < E; ++e) perm[size_t(e)] = e;
    std::shuffle(perm.begin(), perm.end(), g);
    for (long e = 0; e < E; ++e)
      z[size_t(i * E + e)] = ties ? double(long(g() % 3) - 1) : double(float(0.25 * double(perm[size_t(e)]) - 2));
  }
  return z;
}
Ints moe_slots(long N, long E, long k, long cap, uint32_t seed) {
  std::mt19937 g(seed);
  Ints pos(size_t(E * cap)), slot(size_t(N * k));
  for (long q = 0; q < E * cap; ++q) pos[size_t(q)] = int32_t(q);
  std::shuffle(pos.begin(), pos.end(), g);
  size_t used = 0;
  for (int32_t& s : slot) s = (g() % 4 != 0 && used < pos.size()) ? pos[used++] : -int32_t(g() % uint32_t(E)) - 1;
  return slot;
}

void moe_cases(std::vector<Spec>& cs, bool quick) {
  struct M {
    long N, E, k, cap, C;
  };
  std::vector<M> ms = {{1, 1, 1, 1, 1}, {7, 3, 2, 4, 5}, {33, 8, 2, 5, 37}, {64, 4, 1, 64, 70}, {300, 16, 4, 60, 33},
                       {40, 40, 3, 2, 300}};
  if (quick) ms.resize(3);
  uint32_t s = 13000;
  for (auto [N, E, k, cap, C] : ms) {
    const std::string shape = sh({{"N", N}, {"E", E}, {"k", k}, {"cap", cap}});
    const long rows = E * cap;
    for (bool ties : {false, true})
      for (int renorm : {0, 1}) {
        const std::string var = std::string(ties ? "exact ties" : "distinct") + (renorm ? ", renorm" : "");
        const Vec z = moe_logits(N, E, ties, s++);
        Spec r{"moe_route", shape, var, {z, Vec(size_t(N * E)), Vec(size_t(N * k))}, {Ints(size_t(N * k))}, {1, 2},
               double(E), true};
        r.iouts = {0};
        add(cs, r, TP_SELFTEST_BODY { return t.moe_route(p[1], ip[0], p[2], p[0], N, E, k, cap, renorm); });
        Spec b{"moe_route_bwd", shape, var + ", accumulate, after moe_route",
               {z, Vec(size_t(N * E)), Vec(size_t(N * k)), rnd(N * E, s++), rnd(N * k, s++)}, {Ints(size_t(N * k))},
               {3}, double(E * k)};
        b.iouts = {0};
        add(cs, b, TP_SELFTEST_BODY {
          t.moe_route(p[1], ip[0], p[2], p[0], N, E, k, cap, renorm);
          return t.moe_route_bwd(p[3], p[1], ip[0], p[4], N, E, k, cap, renorm, TT(0.3)), 0.0;
        });
      }
    const std::string dshape = sh({{"N", N}, {"k", k}, {"C", C}, {"rows", rows}});
    const Ints slot = moe_slots(N, E, k, cap, s++);
    add(cs, {"moe_dispatch", dshape, "overwrite", {rnd(N * C, s++), rnd(rows * C, s++)}, {slot}, {1}},
        TP_SELFTEST_BODY { return t.moe_dispatch(p[1], p[0], ip[0], N, k, C, rows), 0.0; });
    add(cs, {"moe_dispatch_bwd", dshape, "accumulate", {rnd(N * C, s++), rnd(rows * C, s++)}, {slot}, {0}, double(k)},
        TP_SELFTEST_BODY { return t.moe_dispatch_bwd(p[0], p[1], ip[0], N, k, C), 0.0; });
    add(cs, {"moe_combine", dshape, "overwrite", {rnd(N * C, s++), rnd(rows * C, s++), rnd(N * k, s++, 0, 1)}, {slot},
             {0}, double(k)},
        TP_SELFTEST_BODY { return t.moe_combine(p[0], p[1], ip[0], p[2], N, k, C), 0.0; });
    add(cs, {"moe_combine_bwd", dshape, "accumulate",
             {rnd(rows * C, s++), rnd(N * k, s++), rnd(N * C, s++), rnd(rows * C, s++), rnd(N * k, s++, 0, 1)}, {slot},
             {0, 1}, double(C)},
        TP_SELFTEST_BODY { return t.moe_combine_bwd(p[0], p[1], p[2], p[3], ip[0], p[4], N, k, C), 0.0; });
  }
}

}  // namespace

std::vector<Spec> all_specs(bool quick) {
  std::vector<Spec> cs;
  gemm_cases(cs, quick);
  attention_kv_cases(cs, quick);
  flash_cases(cs, quick);
  elementwise_cases(cs, quick);
  row_cases(cs, quick);
  shard_cases(cs, quick);
  moe_cases(cs, quick);
  return cs;
}

}  // namespace tp::exec::selftest
