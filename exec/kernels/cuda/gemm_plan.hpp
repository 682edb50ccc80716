// gemm_plan: how a row-major GEMM of the CUDA backend becomes one cuBLASLt call, as plain data — no CUDA
// header, so the CPU tests check the mapping (and attention's strided batches, attention_plan.hpp) against the
// CPU backend by executing the plan with a column-major reference of cublasLtMatmul's definition.
// Invariant: cuBLASLt is column-major; a row-major [r, c] matrix with row stride ld IS a column-major [c, r]
// matrix with leading dimension ld. So C = op(A) op(B) (row-major) is computed as Cᵀ = op(B)ᵀ op(A)ᵀ
// (column-major): cuBLASLt's first operand is our B, its second our A, transposes unchanged.
#pragma once
#include <cstdint>

namespace tp::cuda {

// A pointer's alignment in bytes as cuBLASLt's preferences take it: 16, 8, 4 or 1.
inline uint32_t alignment(const void* p) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  return a % 16 == 0 ? 16u : a % 8 == 0 ? 8u : a % 4 == 0 ? 4u : 1u;
}

// One GEMM (batch == 1) or a strided batch of them. Row-major operands: A is [M, K] ([K, M] when ta) with
// row stride lda; B is [K, N] ([N, K] when tb) with row stride ldb; C is [M, N] with row stride ldc.
// sa, sb, sc: elements between consecutive batch items. C = alpha op(A) op(B) + beta C (beta 0: C not read).
struct GemmArgs {
  const char* what = "matmul";  // the op named in errors
  float* C = nullptr;
  const float* A = nullptr;
  const float* B = nullptr;
  long M = 0, N = 0, K = 0;
  bool ta = false, tb = false;
  float alpha = 1, beta = 0;
  long lda = 0, ldb = 0, ldc = 0;
  int batch = 1;
  long sa = 0, sb = 0, sc = 0;
  // Epilogue (batch 1 only): C = act(op(A) op(B) + bias[N]) with bias null for none; gelu: aux (laid out as C)
  // receives the pre-activation and C its GELU (cuBLASLt's GELU_AUX[_BIAS]; alpha 1, beta 0).
  const float* bias = nullptr;
  float* aux = nullptr;
  bool gelu = false;
  // With bf16 operands on: bf16 copies of A / B already made (each laid out as A / B: same leading dimension and
  // batch stride, in elements), used instead of casting A / B again; null: cast them. Ignored otherwise.
  const void* A16 = nullptr;
  const void* B16 = nullptr;
  // fp8 operands (matmul_fp8): one float each in device memory that dequantises A / B (1 / the cast's scale),
  // cuBLASLt's scale pointers (its A is our B); null: 1. Ignored otherwise.
  const float* inv_a = nullptr;
  const float* inv_b = nullptr;
};

// ops::matmul's contract on contiguous row-major operands.
inline GemmArgs matmul_args(float* C, const float* A, const float* B, long M, long N, long K, bool ta, bool tb,
                            float alpha, float beta) {
  GemmArgs a;
  a.C = C, a.A = A, a.B = B, a.M = M, a.N = N, a.K = K, a.ta = ta, a.tb = tb, a.alpha = alpha, a.beta = beta;
  a.lda = ta ? M : K, a.ldb = tb ? K : N, a.ldc = N;
  return a;
}

// matmul_fp8 on cuBLASLt's fp8 kernels, which take only the "TN" form (its first operand transposed, its second not):
// C = op(A) op(B) is computed from A8 = op(A) as a row-major [M, K] copy and B8 = op(B)ᵀ as a row-major [N, K] copy
// (the backend's fp8 packing transposes A when ta, B when !tb), so C = A8 B8ᵀ: lt_plan of these args has trans1 (B8ᵀ
// as cuBLASLt's first operand) and not trans2. The pointers are the packed bytes', given as floats only for the plan.
inline bool fp8_transpose_a(bool ta) { return ta; }
inline bool fp8_transpose_b(bool tb) { return !tb; }
inline GemmArgs fp8_tn_args(float* C, const void* A8, const void* B8, const float* inv_a, const float* inv_b, long M,
                            long N, long K, float alpha, float beta) {
  GemmArgs a = matmul_args(C, static_cast<const float*>(A8), static_cast<const float*>(B8), M, N, K, false, true, alpha,
                           beta);
  a.what = "matmul_fp8";
  a.inv_a = inv_a, a.inv_b = inv_b;
  return a;
}

// A column-major matrix as cuBLASLt's layout describes it: rows x cols, leading dimension ld, batch stride.
struct LtMatrix {
  long rows = 0, cols = 0, ld = 0, stride = 0;
};
// The cublasLtMatmul call: D = alpha op1(X1) op2(X2) + beta C with D = C, op(X) = Xᵀ when trans; m x n x k.
struct LtPlan {
  const float* x1 = nullptr;
  const float* x2 = nullptr;
  float* c = nullptr;
  bool trans1 = false, trans2 = false;
  LtMatrix m1, m2, mc;
  long m = 0, n = 0, k = 0;
  int batch = 1;
};

// Column-major layout of a row-major [rows, cols] matrix with row stride ld.
inline LtMatrix col_major(long rows, long cols, long ld, long stride) { return LtMatrix{cols, rows, ld, stride}; }

inline LtPlan lt_plan(const GemmArgs& g) {
  LtPlan p;
  p.x1 = g.B, p.x2 = g.A, p.c = g.C;
  p.trans1 = g.tb, p.trans2 = g.ta;
  p.m1 = col_major(g.tb ? g.N : g.K, g.tb ? g.K : g.N, g.ldb, g.sb);
  p.m2 = col_major(g.ta ? g.K : g.M, g.ta ? g.M : g.K, g.lda, g.sa);
  p.mc = col_major(g.M, g.N, g.ldc, g.sc);
  p.m = g.N, p.n = g.M, p.k = g.K;
  p.batch = g.batch;
  return p;
}

// What cublasLtMatmul computes for plan p, on host memory, in double (the tests' reference of the call).
inline void lt_reference(const LtPlan& p, float alpha, float beta) {
  for (int b = 0; b < p.batch; ++b) {
    const float* x1 = p.x1 + b * p.m1.stride;
    const float* x2 = p.x2 + b * p.m2.stride;
    float* c = p.c + b * p.mc.stride;
    for (long i = 0; i < p.m; ++i)
      for (long j = 0; j < p.n; ++j) {
        double s = 0;
        for (long l = 0; l < p.k; ++l) {
          const double a = p.trans1 ? x1[l + i * p.m1.ld] : x1[i + l * p.m1.ld];  // op1(X1)(i, l)
          const double v = p.trans2 ? x2[j + l * p.m2.ld] : x2[l + j * p.m2.ld];  // op2(X2)(l, j)
          s += a * v;
        }
        float& d = c[i + j * p.mc.ld];
        d = float(alpha * s + (beta == 0 ? 0.0 : beta * double(d)));
      }
  }
}

}  // namespace tp::cuda
