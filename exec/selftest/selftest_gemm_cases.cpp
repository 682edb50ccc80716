// selftest_gemm_cases: the GEMM-shaped checks of `trainplan selftest` — matmul in every transpose and beta, with bf16
// operands, fp8 GEMMs of two casts (matmul_fp8), packed bf16 operands (matmul16), linear_fwd with its bias and GELU
// epilogues, and the unfused attention's GEMMs around the softmax — over shapes of one row, odd sizes and multiples of
// 16 (which a GPU's fp8 and epilogue kernels take). Inputs are uniform in [-1, 1), rounded to float, or on the fp8
// grids where the op needs them so.
#include <algorithm>
#include <cmath>
#include <string>
#include <utility>

#include "exec/kernels/k_fp8.hpp"
#include "exec/selftest/selftest_harness.hpp"

#pragma GCC diagnostic ignored "-Wmissing-field-initializers"  // (as selftest_cases.cpp: Specs leave their tail out)

namespace tp::exec::selftest {

void gemm_cases(std::vector<Spec>& cs, bool quick) {
  struct MNK {
    long m, n, k;
  };
  std::vector<MNK> shapes = {{1, 1, 1}, {1, 7, 33}, {5, 7, 9}, {33, 17, 65}, {64, 48, 200}, {3, 5, 1000}};
  if (quick) shapes.resize(3);
  uint32_t s = 100;
  for (auto [M, N, K] : shapes)
    for (int ta = 0; ta < 2; ++ta)
      for (int tb = 0; tb < 2; ++tb)
        for (double beta : {0.0, 0.5}) {
          std::string var = std::string(ta ? "Aᵀ" : "A") + (tb ? "·Bᵀ" : "·B") + (beta == 0 ? " overwrite" : " beta 0.5");
          add(cs, {"matmul", sh({{"M", M}, {"N", N}, {"K", K}}), var, {rnd(M * K, s++), rnd(K * N, s++), rnd(M * N, s++)},
                   {}, {2}, double(K)},
              TP_SELFTEST_BODY {
                t.matmul(p[2], p[0], p[1], M, N, K, ta, tb, TT(1.5), TT(beta));
                return 0;
              });
        }
  // fp8 GEMMs (training.precision "fp8"): operands on the fp8 grids over scales that are not powers of two (the
  // delayed-scaling recipe's fp8_max / amax), as fp8_quantize leaves them; the reference is matmul on the same floats.
  // A backend with fp8 tensor cores packs them to bytes and scales the fp32 sums by alpha and the inverse scales it
  // reads from device memory (buffers 3 and 4: {scale, 1 / scale}): the products are exact, so the fp32 tolerance
  // holds. Shapes of multiples of 16 take cuBLASLt's fp8 kernels on such a GPU; 5 x 7 x 9
  // its fallback; every transpose (the TN packing), both output gradient formats, beta 1 (the weight gradients).
  for (auto [M, N, K] : {MNK{32, 48, 64}, MNK{5, 7, 9}, MNK{16, 32, 256}}) {
    if (quick && K == 256) break;
    for (auto [fa, fb] : {std::pair{0, 0}, std::pair{1, 0}, std::pair{0, 1}})
      for (int ta = 0; ta < 2; ++ta)
        for (int tb = 0; tb < 2; ++tb) {
          const double sa = fa ? 57344.0 / 1.7 : 448.0 / 2.9, sb = fb ? 57344.0 / 1.3 : 448.0 / 0.9;
          auto cast = [](Vec v, double scale, int f) {  // q / scale as floats, q = fp8_round(v fp8_max): a cast's output
            const double sf = double(float(scale));
            for (double& x : v) x = double(float(kernels::fp8_round(x * kernels::fp8_max(f), f) / sf));
            return v;
          };
          const double beta = (ta + tb) % 2 ? 1.0 : 0.0;
          std::string var = std::string(ta ? "Aᵀ" : "A") + (tb ? "·Bᵀ" : "·B") + (fa ? " E5M2" : " E4M3") +
                            (fb ? "·E5M2" : "·E4M3") + (beta == 0 ? " overwrite" : " beta 1");
          add(cs, {"matmul_fp8", sh({{"M", M}, {"N", N}, {"K", K}}), var,
                   {cast(rnd(M * K, s++), sa, fa), cast(rnd(K * N, s++), sb, fb), rnd(M * N, s++),
                    Vec{double(float(sa)), 1 / double(float(sa))}, Vec{double(float(sb)), 1 / double(float(sb))}},
                   {}, {2}, double(K)},
              TP_SELFTEST_BODY {
                t.matmul_fp8(p[2], p[0], p[3], fa, p[1], p[4], fb, M, N, K, ta, tb, TT(1.5), TT(beta));
                return 0;
              });
        }
  }
  // bf16 GEMM operands (training.precision "bf16"): the inputs are floats, so both sides round the same values
  // to bf16 and the products are exact; only the fp32 accumulation differs, so the fp32 tolerance holds. A
  // backend that truncated instead of rounding to nearest even, or skipped the rounding, would be off by about
  // 2^-8 per product.
  for (size_t i = 1; i < shapes.size(); ++i) {
    const auto [M, N, K] = shapes[i];
    for (int ta = 0; ta < 2; ++ta)
      for (int tb = 0; tb < 2; ++tb) {
        std::string var = std::string(ta ? "Aᵀ" : "A") + (tb ? "·Bᵀ" : "·B") + " beta 0.5";
        add(cs, bf16_operands({"matmul", sh({{"M", M}, {"N", N}, {"K", K}}), var,
                               {rnd(M * K, s++), rnd(K * N, s++), rnd(M * N, s++)}, {}, {2}, double(K)}),
            TP_SELFTEST_BODY {
              t.matmul(p[2], p[0], p[1], M, N, K, ta, tb, TT(1.5), TT(0.5));
              return 0;
            });
      }
  }
  // matmul16: A, B or both packed to bf16 first (the saved activations and the weights' copies of training.precision
  // "bf16"); with bf16 operands on a GPU backend hands the packed copies to its bf16 GEMM as they are (the A16 / B16
  // path), off it unpacks them. The GEMMs training runs: the weight gradient (A packed, Aᵀ B, beta 1), the forward
  // and the input gradient (B packed, B or Bᵀ), and both packed.
  struct Packing {
    bool a16, b16, ta, tb;
  };
  const Packing packings[] = {{true, false, true, false}, {true, false, false, false}, {false, true, false, false},
                              {false, true, false, true}, {true, true, true, true}};
  for (size_t i = 1; i < shapes.size(); ++i) {
    const auto [M, N, K] = shapes[i];
    for (const Packing& k : packings)
      for (int b16 = 0; b16 < 2; ++b16) {
        const std::string var = std::string(k.a16 ? "A16" : "A") + (k.ta ? "ᵀ" : "") + "·" + (k.b16 ? "B16" : "B") +
                                (k.tb ? "ᵀ" : "") + " beta 1";
        Spec sp{"matmul16", sh({{"M", M}, {"N", N}, {"K", K}}), var, {rnd(M * K, s++), rnd(K * N, s++), rnd(M * N, s++)},
                {Ints(size_t((M * K + 1) / 2)), Ints(size_t((K * N + 1) / 2))}, {2}, double(K)};
        add(cs, b16 ? bf16_operands(sp) : sp, TP_SELFTEST_BODY {
          uint16_t* a16 = k.a16 ? reinterpret_cast<uint16_t*>(ip[0]) : nullptr;
          uint16_t* w16 = k.b16 ? reinterpret_cast<uint16_t*>(ip[1]) : nullptr;
          if (a16) t.pack_bf16(a16, p[0], M * K);
          if (w16) t.pack_bf16(w16, p[1], K * N);
          t.matmul16(p[2], a16 ? nullptr : p[0], a16, w16 ? nullptr : p[1], w16, M, N, K, k.ta, k.tb, TT(1), TT(1));
          return 0;
        });
      }
  }
  // linear_fwd: GELU and bias epilogues (a CUDA backend fuses them into the GEMM when the output row length is a
  // multiple of 8 and composes them otherwise: both kinds of shape).
  std::vector<MNK> lin = {{1, 1, 1}, {5, 7, 9}, {5, 16, 9}, {33, 64, 40}, {64, 128, 200}};
  if (quick) lin.resize(3);
  for (auto [M, N, K] : lin)
    for (int bias = 0; bias < 2; ++bias)
      for (int gelu = 0; gelu < 2; ++gelu) {
        const std::string var = std::string(bias ? "bias" : "no bias") + (gelu ? ", gelu" : "");
        add(cs, {"linear_fwd", sh({{"M", M}, {"N", N}, {"K", K}}), var,
                 {rnd(M * K, s++), rnd(K * N, s++), rnd(N, s++), Vec(size_t(M * N)), Vec(size_t(M * N))}, {},
                 gelu ? std::vector<int>{3, 4} : std::vector<int>{3}, double(K)},
            TP_SELFTEST_BODY {
              t.linear_fwd(p[3], gelu ? p[4] : nullptr, p[0], nullptr, p[1], nullptr, bias ? p[2] : nullptr, M, N, K);
              return 0;
            });
        if (bias == gelu)
          for (int pk = 0; pk < 3; ++pk) {  // the weight (1) or the input and the weight (2) given as bf16 copies
            const bool x16 = pk == 2, w16 = pk >= 1;
            Spec sp{"linear_fwd", sh({{"M", M}, {"N", N}, {"K", K}}), var + (x16 ? ", x16, w16" : w16 ? ", w16" : ""),
                    {rnd(M * K, s++), rnd(K * N, s++), rnd(N, s++), Vec(size_t(M * N)), Vec(size_t(M * N))},
                    {Ints(size_t((K * N + 1) / 2)), Ints(size_t((M * K + 1) / 2))},
                    gelu ? std::vector<int>{3, 4} : std::vector<int>{3}, double(K)};
            add(cs, bf16_operands(sp), TP_SELFTEST_BODY {
              uint16_t* wp = w16 ? reinterpret_cast<uint16_t*>(ip[0]) : nullptr;
              uint16_t* xp = x16 ? reinterpret_cast<uint16_t*>(ip[1]) : nullptr;
              if (wp) t.pack_bf16(wp, p[1], K * N);
              if (xp) t.pack_bf16(xp, p[0], M * K);
              t.linear_fwd(p[3], gelu ? p[4] : nullptr, xp ? nullptr : p[0], xp, wp ? nullptr : p[1], wp,
                           bias ? p[2] : nullptr, M, N, K);
              return 0;
            });
          }
      }
  struct Att {
    long B, T, H, Hkv, D;
  };
  std::vector<Att> att = {{1, 1, 1, 1, 4}, {1, 5, 2, 2, 8}, {2, 7, 4, 2, 16}, {1, 33, 4, 1, 8}, {2, 64, 2, 2, 32}};
  if (quick) att.resize(3);
  for (auto [B, T, H, Hkv, D] : att) {
    const std::string shape = sh({{"B", B}, {"T", T}, {"H", H}, {"Hkv", Hkv}, {"D", D}});
    const long nq = B * T * H * D, nk = B * T * Hkv * D, na = B * H * T * T;
    add(cs, {"attention_fwd", shape, "", {rnd(nq, s++), rnd(nk, s++), rnd(nk, s++), Vec(size_t(nq)), Vec(size_t(na))}, {},
             {3, 4}, double(std::max(T, D))},
        TP_SELFTEST_BODY {
          t.attention_fwd(p[3], p[4], p[0], p[1], p[2], B, T, H, Hkv, D);
          return 0;
        });
    // Backward from a consistent forward: att is the reference softmax of these q, k (computed in the body
    // by the table under test, then the gradients accumulate into random dq, dk, dv).
    add(cs, {"attention_bwd", shape, "accumulate",
             {rnd(nq, s++), rnd(nk, s++), rnd(nk, s++), Vec(size_t(nq)), Vec(size_t(na)), rnd(nq, s++), rnd(nq, s++),
              rnd(nk, s++), rnd(nk, s++)},
             {}, {5, 7, 8}, double(std::max(T, D) * H / Hkv)},
        TP_SELFTEST_BODY {
          t.attention_fwd(p[3], p[4], p[0], p[1], p[2], B, T, H, Hkv, D);
          t.attention_bwd(p[5], p[7], p[8], p[6], p[4], p[0], p[1], p[2], B, T, H, Hkv, D);
          return 0;
        });
    // bf16 operands: P and dS are computed, not given, so a float value a few ulp from the reference's may round
    // to the neighbouring bf16 value; one such element moves an output by up to 2^-8 of its term. dS = P (dP -
    // rowsum) cancels, so its float error is many of its own ulp and such flips are common in the backward
    // (measured on an H200: up to 1.0e-3; 1.0e-4 on the emulator). Hence 5e-3 for attention with bf16 operands;
    // the matmul and linear checks above hold the rounding rule itself to fp32's tolerance.
    add(cs, bf16_operands({"attention_fwd", shape, "", {rnd(nq, s++), rnd(nk, s++), rnd(nk, s++), Vec(size_t(nq)),
                                                        Vec(size_t(na))}, {}, {3, 4}, double(std::max(T, D))}, 5e-3),
        TP_SELFTEST_BODY {
          t.attention_fwd(p[3], p[4], p[0], p[1], p[2], B, T, H, Hkv, D);
          return 0;
        });
    add(cs, bf16_operands({"attention_bwd", shape, "accumulate",
                           {rnd(nq, s++), rnd(nk, s++), rnd(nk, s++), Vec(size_t(nq)), Vec(size_t(na)), rnd(nq, s++),
                            rnd(nq, s++), rnd(nk, s++), rnd(nk, s++)},
                           {}, {5, 7, 8}, double(std::max(T, D) * H / Hkv)}, 5e-3),
        TP_SELFTEST_BODY {
          t.attention_fwd(p[3], p[4], p[0], p[1], p[2], B, T, H, Hkv, D);
          t.attention_bwd(p[5], p[7], p[8], p[6], p[4], p[0], p[1], p[2], B, T, H, Hkv, D);
          return 0;
        });
  }
}

}  // namespace tp::exec::selftest
