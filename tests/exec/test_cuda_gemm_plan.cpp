// test_cuda_gemm_plan: the CUDA backend's GEMM mapping checked without a GPU. The backend turns every matmul
// and attention's GEMMs into cuBLASLt calls through lt_plan (exec/kernels/cuda/gemm_plan.hpp) and the GEMM
// lists of attention_plan.hpp; here the same plans are executed by lt_reference (cublasLtMatmul's definition:
// column-major, op per operand, leading dimensions, strided batches) and compared with the CPU backend's
// float64 matmul and attention; and the cache of cuBLASLt setups (gemm_cache.hpp): its key tells every GEMM
// that needs another setup apart, and it evicts the least recently used; which of attention's GEMMs read the
// softmax's bf16 copies; and the local rank that picks a rank's GPU. What is not checked here: cuBLASLt itself
// and the CUDA calls around it.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "exec/backends/backend.hpp"
#include "exec/backends/cuda/cuda_loader.hpp"
#include "exec/kernels/cuda/attention_plan.hpp"
#include "exec/kernels/cuda/gemm_cache.hpp"
#include "exec/kernels/cuda/gemm_plan.hpp"

using namespace tp;

namespace {

std::vector<float> rndf(long n, unsigned seed) {
  std::mt19937 g(seed);
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = u(g);
  return v;
}
std::vector<double> dbl(const std::vector<float>& v) { return std::vector<double>(v.begin(), v.end()); }
double max_err(const std::vector<float>& got, const std::vector<double>& want) {
  double e = 0;
  for (size_t i = 0; i < got.size(); ++i) e = std::max(e, std::abs(got[i] - want[i]) / (1 + std::abs(want[i])));
  return e;
}
// (fp8: cuBLASLt's D = alpha scaleA scaleB op(A) op(B) + beta C, the scales read through its scale pointers)
void run(const std::vector<cuda::GemmArgs>& gs) {
  for (const cuda::GemmArgs& g : gs)
    cuda::lt_reference(cuda::lt_plan(g), g.alpha * (g.inv_a ? *g.inv_a : 1.f) * (g.inv_b ? *g.inv_b : 1.f), g.beta);
}

}  // namespace

TEST(CudaGemmPlan, MatmulMatchesTheCpuBackendInEveryTransposeAndBeta) {
  const auto& ref = exec::cpu_backend().f64;
  for (auto [M, N, K] : {std::array<long, 3>{1, 1, 1}, {5, 7, 9}, {1, 13, 4}, {17, 3, 33}})
    for (int ta = 0; ta < 2; ++ta)
      for (int tb = 0; tb < 2; ++tb)
        for (float beta : {0.0f, 0.5f}) {
          std::vector<float> A = rndf(M * K, 1), B = rndf(K * N, 2), C = rndf(M * N, 3);
          std::vector<double> want = dbl(C);
          ref.matmul(want.data(), dbl(A).data(), dbl(B).data(), M, N, K, ta, tb, 1.5, beta);
          run({cuda::matmul_args(C.data(), A.data(), B.data(), M, N, K, ta, tb, 1.5f, beta)});
          EXPECT_LT(max_err(C, want), 1e-5) << M << "x" << N << "x" << K << " ta " << ta << " tb " << tb << " beta " << beta;
        }
}

// matmul_fp8's mapping onto cuBLASLt's "TN" fp8 call: the operands repacked as the backend's fp8 packing lays them out
// (A8 = op(A) [M, K], B8 = op(B)ᵀ [N, K], each transposed where fp8_transpose_a / _b say; values here, bytes there)
// give the matmul, with the two casts' inverse scales as cuBLASLt's scale pointers, and the plan is TN whatever the
// transposes.
TEST(CudaGemmPlan, Fp8PackingAndTnCallGiveTheMatmul) {
  const auto& ref = exec::cpu_backend().f64;
  // (row-major x [rows, cols] -> y [rows, cols], or [cols, rows] transposed: Fp8Pack's layout)
  auto pack = [](const std::vector<float>& x, long rows, long cols, bool tr) {
    std::vector<float> y(x.size());
    for (long r = 0; r < rows; ++r)
      for (long c = 0; c < cols; ++c) y[size_t(tr ? c * rows + r : r * cols + c)] = x[size_t(r * cols + c)];
    return y;
  };
  for (auto [M, N, K] : {std::array<long, 3>{16, 32, 48}, {5, 7, 9}, {1, 13, 4}})
    for (int ta = 0; ta < 2; ++ta)
      for (int tb = 0; tb < 2; ++tb)
        for (float beta : {0.0f, 1.0f}) {
          std::vector<float> A = rndf(M * K, 4), B = rndf(K * N, 5), C = rndf(M * N, 6);
          std::vector<double> want = dbl(C);
          ref.matmul(want.data(), dbl(A).data(), dbl(B).data(), M, N, K, ta, tb, 0.75, beta);
          // A is stored [K, M] when ta (rows K), else [M, K]; B [N, K] when tb, else [K, N]
          const std::vector<float> A8 = pack(A, ta ? K : M, ta ? M : K, cuda::fp8_transpose_a(ta));
          const std::vector<float> B8 = pack(B, tb ? N : K, tb ? K : N, cuda::fp8_transpose_b(tb));
          const float sa = 4, sb = 0.5f, inv[2] = {1 / sa, 1 / sb};  // the scales, and their inverses (device memory there)
          std::vector<float> A8s(A8), B8s(B8);
          for (float& v : A8s) v *= sa;
          for (float& v : B8s) v *= sb;
          const cuda::GemmArgs g = cuda::fp8_tn_args(C.data(), A8s.data(), B8s.data(), &inv[0], &inv[1], M, N, K, 0.75f, beta);
          const cuda::LtPlan p = cuda::lt_plan(g);
          EXPECT_TRUE(p.trans1);
          EXPECT_FALSE(p.trans2);
          run({g});
          EXPECT_LT(max_err(C, want), 1e-5) << M << "x" << N << "x" << K << " ta " << ta << " tb " << tb;
        }
}

// Square causal attention (Tk = T: attention_fwd / bwd) and context parallelism's rectangular blocks (T queries
// over Tk > T keys, the mask bottom-right: attention_fwd_kv / bwd_kv).
TEST(CudaGemmPlan, AttentionGemmsAroundTheSoftmaxMatchTheCpuBackend) {
  const auto& ref = exec::cpu_backend().f64;
  for (auto [B, T, Tk, H, Hkv, D] : {std::array<long, 6>{1, 1, 1, 1, 1, 4}, {2, 5, 5, 4, 2, 8}, {1, 7, 7, 6, 2, 4},
                                     {2, 9, 9, 3, 3, 5}, {2, 4, 8, 4, 2, 8}, {1, 3, 12, 6, 3, 4}, {1, 1, 5, 2, 1, 4}}) {
    const cuda::AttnDims d{B, T, H, Hkv, D, Tk};
    const long nq = B * T * H * D, nk = B * Tk * Hkv * D, na = B * H * T * Tk, rows = B * H * T;
    const float sc = float(1 / std::sqrt(double(D)));
    std::vector<float> q = rndf(nq, 4), k = rndf(nk, 5), v = rndf(nk, 6), dout = rndf(nq, 7);
    std::vector<float> out(static_cast<size_t>(nq)), att(static_cast<size_t>(na)), dq = rndf(nq, 8), dk = rndf(nk, 9), dv = rndf(nk, 10);
    // Forward: scores, the causal softmax kernel's definition (row r is query r % T), att · v.
    run(cuda::attn_qk("scores", att.data(), q.data(), k.data(), d));
    for (long r = 0; r < rows; ++r) {
      float* x = att.data() + r * Tk;
      const long n = r % T + (Tk - T) + 1;
      double mx = -INFINITY, s = 0;
      for (long j = 0; j < n; ++j) mx = std::max(mx, double(sc * x[j]));
      for (long j = 0; j < n; ++j) s += std::exp(double(sc * x[j]) - mx);
      for (long j = 0; j < Tk; ++j) x[j] = j < n ? float(std::exp(double(sc * x[j]) - mx) / s) : 0.f;
    }
    run(cuda::attn_out(out.data(), att.data(), v.data(), d));
    std::vector<double> rout(static_cast<size_t>(nq)), ratt(static_cast<size_t>(na));
    if (Tk == T) ref.attention_fwd(rout.data(), ratt.data(), dbl(q).data(), dbl(k).data(), dbl(v).data(), B, T, H, Hkv, D);
    else ref.attention_fwd_kv(rout.data(), ratt.data(), dbl(q).data(), dbl(k).data(), dbl(v).data(), B, T, Tk, H, Hkv, D);
    EXPECT_LT(max_err(att, ratt), 1e-5) << "att B " << B << " T " << T << " Tk " << Tk << " H " << H << " Hkv " << Hkv;
    EXPECT_LT(max_err(out, rout), 1e-5) << "out B " << B << " T " << T << " H " << H << " Hkv " << Hkv;
    // Backward: dP, the softmax backward kernel's definition (overwrite), then the gradient GEMMs (accumulate).
    std::vector<float> dp(static_cast<size_t>(na));
    run(cuda::attn_qk("dP", dp.data(), dout.data(), v.data(), d));
    for (long r = 0; r < rows; ++r) {
      const float* y = att.data() + r * Tk;
      float* g = dp.data() + r * Tk;
      double dot = 0;
      for (long j = 0; j < Tk; ++j) dot += double(y[j]) * g[j];
      for (long j = 0; j < Tk; ++j) g[j] = float(sc * y[j] * (g[j] - dot));
    }
    std::vector<double> rdq = dbl(dq), rdk = dbl(dk), rdv = dbl(dv);
    run(cuda::attn_grads(dq.data(), dk.data(), dv.data(), dp.data(), att.data(), q.data(), k.data(), dout.data(), d));
    if (Tk == T)
      ref.attention_bwd(rdq.data(), rdk.data(), rdv.data(), dbl(dout).data(), ratt.data(), dbl(q).data(), dbl(k).data(),
                        dbl(v).data(), B, T, H, Hkv, D);
    else
      ref.attention_bwd_kv(rdq.data(), rdk.data(), rdv.data(), dbl(dout).data(), ratt.data(), dbl(q).data(),
                           dbl(k).data(), dbl(v).data(), B, T, Tk, H, Hkv, D);
    EXPECT_LT(max_err(dq, rdq), 1e-5) << "dq B " << B << " T " << T << " H " << H << " Hkv " << Hkv;
    EXPECT_LT(max_err(dk, rdk), 1e-5) << "dk B " << B << " T " << T << " Tk " << Tk << " H " << H << " Hkv " << Hkv;
    EXPECT_LT(max_err(dv, rdv), 1e-5) << "dv B " << B << " T " << T << " H " << H << " Hkv " << Hkv;
  }
}

// The setup cache's key: equal for the same GEMM at other addresses (same alignments) or with other alpha /
// beta; different when any shape, leading dimension, batch stride, transpose, the batch, the compute mode, the
// epilogue or a pointer's alignment differs (each of those changes the descriptor, a layout or the heuristic's choice).
// bf16 operands: the GEMMs over P and dS read the softmax kernels' bf16 copies only where a copy is 16-byte
// aligned; the others cast their operand into an aligned buffer. An H200 showed cuBLASLt's heuristic refusing a bf16
// operand told 2-byte alignment (the second query head's P at T = 7): this keeps every such GEMM on the cast path.
TEST(CudaGemmPlan, AttentionBf16CopiesOnlyWhereAligned) {
  for (const cuda::AttnDims d : {cuda::AttnDims{2, 7, 4, 2, 16}, cuda::AttnDims{2, 8, 4, 2, 16}, cuda::AttnDims{1, 33, 4, 1, 8}}) {
    const long na = d.B * d.H * d.T * d.K(), nv = d.B * d.K() * d.Hkv * d.D;
    std::vector<float> att(na), val(nv), out(d.B * d.T * d.H * d.D);
    std::vector<uint16_t> store(na + 8);
    uint16_t* c16 = store.data();
    while (cuda::alignment(c16) != 16) ++c16;
    std::vector<cuda::GemmArgs> v = cuda::attn_out(out.data(), att.data(), val.data(), d);
    cuda::attach_copies16(v, att.data(), c16, na);
    long attached = 0;
    for (const cuda::GemmArgs& g : v) {
      const long off = g.A - att.data();
      const bool aligned = (2 * off) % 16 == 0;
      EXPECT_EQ(g.A16, aligned ? static_cast<const void*>(c16 + off) : nullptr) << d.T << " offset " << off;
      EXPECT_EQ(g.B16, nullptr);  // v is not in att
      attached += aligned;
    }
    if (d.T % 8 == 0) {
      EXPECT_EQ(attached, (long)v.size()) << d.T;  // training shapes: every copy is used
    } else {
      EXPECT_LT(attached, (long)v.size()) << d.T;
    }
    std::vector<cuda::GemmArgs> none = cuda::attn_out(out.data(), att.data(), val.data(), d);
    cuda::attach_copies16(none, att.data(), nullptr, na);  // bf16 operands off: nothing attached
    for (const cuda::GemmArgs& g : none) EXPECT_EQ(g.A16, nullptr);
  }
}

TEST(CudaGemmCache, KeyTellsApartEveryGemmThatNeedsAnotherSetup) {
  alignas(16) static float buf[4096];
  auto key = [](const cuda::GemmArgs& g, int compute = cuda::kComputeF32) {
    return cuda::gemm_key(cuda::lt_plan(g), cuda::alignment(g.B), cuda::alignment(g.A), cuda::alignment(g.C), compute);
  };
  const cuda::GemmArgs base = cuda::matmul_args(buf, buf + 1024, buf + 2048, 8, 12, 16, false, false, 1, 0);
  cuda::GemmArgs moved = base;  // other addresses, same alignments, other alpha / beta
  moved.A += 4, moved.B += 8, moved.C += 12, moved.alpha = 0.5f, moved.beta = 1;
  EXPECT_TRUE(key(base) == key(moved));
  EXPECT_EQ(cuda::GemmKeyHash{}(key(base)), cuda::GemmKeyHash{}(key(moved)));
  std::vector<cuda::GemmArgs> others;
  for (int f = 0; f < 11; ++f) {
    cuda::GemmArgs g = base;
    switch (f) {
      case 0: g.M = 9, g.ldc = 12; break;
      case 1: g = cuda::matmul_args(buf, buf + 1024, buf + 2048, 8, 13, 16, false, false, 1, 0); break;
      case 2: g = cuda::matmul_args(buf, buf + 1024, buf + 2048, 8, 12, 17, false, false, 1, 0); break;
      case 3: g = cuda::matmul_args(buf, buf + 1024, buf + 2048, 8, 12, 16, true, false, 1, 0); break;
      case 4: g = cuda::matmul_args(buf, buf + 1024, buf + 2048, 8, 12, 16, false, true, 1, 0); break;
      case 5: g.lda = 20; break;
      case 6: g.ldc = 14; break;
      case 7: g.batch = 2, g.sa = 128, g.sb = 192, g.sc = 96; break;
      case 8: g.A += 1; break;  // 4-byte instead of 16-byte aligned
      case 9: g.C += 2; break;  // 8-byte
      case 10: g.B += 3; break;
    }
    others.push_back(g);
  }
  for (size_t i = 0; i < others.size(); ++i) {
    EXPECT_FALSE(key(others[i]) == key(base)) << "variant " << i;
    for (size_t j = 0; j < i; ++j) EXPECT_FALSE(key(others[i]) == key(others[j])) << i << " vs " << j;
  }
  cuda::GemmArgs batched = others[7];
  batched.sc = 100;  // another batch stride of C
  EXPECT_FALSE(key(batched) == key(others[7]));
  EXPECT_FALSE(key(base, cuda::kComputeTf32) == key(base));  // TF32 compute
  EXPECT_FALSE(key(base, cuda::kComputeBf16Cast) == key(base));  // bf16 operands
  // The epilogue (none, bias, GELU with aux, GELU with aux and bias): each its own setup.
  const cuda::LtPlan lp = cuda::lt_plan(base);
  for (int e = 0; e < 4; ++e)
    for (int f = 0; f < e; ++f)
      EXPECT_FALSE(cuda::gemm_key(lp, 16, 16, 16, false, e) == cuda::gemm_key(lp, 16, 16, 16, false, f)) << e << " vs " << f;
}

// Least recently used eviction; each value destroyed exactly once (evicted, cleared or with the cache).
TEST(CudaGemmCache, EvictsTheLeastRecentlyUsedAndDestroysEachSetupOnce) {
  static int alive = 0, destroyed = 0;
  struct Setup {
    int id;
    explicit Setup(int i) : id(i) { ++alive; }
    ~Setup() { --alive, ++destroyed; }
  };
  auto key = [](long n) {
    cuda::GemmKey k;
    k.m = n, k.n = 2 * n, k.k = 3;
    return k;
  };
  {
    cuda::GemmCache<Setup> c(3);
    for (int i = 0; i < 3; ++i) EXPECT_EQ(c.insert(key(i), std::make_unique<Setup>(i))->id, i);
    EXPECT_EQ(c.size(), 3u);
    ASSERT_NE(c.find(key(0)), nullptr);  // 0 used: 1 is now the least recently used
    EXPECT_EQ(c.find(key(0))->id, 0);
    c.insert(key(3), std::make_unique<Setup>(3));
    EXPECT_EQ(c.size(), 3u);
    EXPECT_EQ(c.find(key(1)), nullptr);
    EXPECT_EQ(destroyed, 1);
    for (long i : {0L, 2L, 3L}) ASSERT_NE(c.find(key(i)), nullptr) << i;
    c.insert(key(4), std::make_unique<Setup>(4));  // 0 was used least recently of 0, 2, 3
    EXPECT_EQ(c.find(key(0)), nullptr);
    EXPECT_EQ(alive, 3);
    c.clear();
    EXPECT_EQ(alive, 0);
    EXPECT_EQ(c.find(key(4)), nullptr);
    c.insert(key(5), std::make_unique<Setup>(5));
  }
  EXPECT_EQ(alive, 0);
  EXPECT_EQ(destroyed, 6);
  EXPECT_EQ(cuda::GemmCache<Setup>(0).capacity(), 1u);
}

// One GPU per rank: the local rank that picks the device (local rank % device count) comes from the first launcher
// variable holding a whole number >= 0 (Open MPI's first, as it is also set under srun), else 0.
TEST(CudaDevice, LocalRankFromTheLaunchersVariables) {
  const char* vars[] = {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID", "LOCAL_RANK"};
  std::vector<std::pair<std::string, std::string>> saved;
  for (const char* v : vars) {
    if (const char* s = std::getenv(v)) saved.emplace_back(v, s);
    unsetenv(v);
  }
  EXPECT_EQ(tp::exec::local_rank_from_env(), 0);
  setenv("LOCAL_RANK", "3", 1);
  EXPECT_EQ(tp::exec::local_rank_from_env(), 3);
  setenv("SLURM_LOCALID", "5", 1);
  EXPECT_EQ(tp::exec::local_rank_from_env(), 5);
  setenv("OMPI_COMM_WORLD_LOCAL_RANK", "7", 1);
  EXPECT_EQ(tp::exec::local_rank_from_env(), 7);
  setenv("OMPI_COMM_WORLD_LOCAL_RANK", "x7", 1);  // not a number: the next variable
  setenv("MPI_LOCALRANKID", "-1", 1);             // negative: the next
  EXPECT_EQ(tp::exec::local_rank_from_env(), 5);
  for (const char* v : vars) unsetenv(v);
  for (const auto& [k, v] : saved) setenv(k.c_str(), v.c_str(), 1);
}
