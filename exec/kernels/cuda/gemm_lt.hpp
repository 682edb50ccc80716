// gemm_lt: every matmul of the CUDA backend through cuBLASLt (host code inside libtrainplan_cuda.so only).
// Invariants: matrices are ROW-major as in exec/ops.hpp; cuBLASLt is column-major, so C = op(A) op(B) is
// computed as Cᵀ = op(B)ᵀ op(A)ᵀ by swapping the operands (a row-major [r, c] matrix with row stride ld is a
// column-major [c, r] one with leading dimension ld). One handle and one workspace per process (one GPU per
// rank), all work on the backend's stream. fp32 storage, fp32 compute (TF32 only when TP_CUDA_TF32=1).
// Every failure throws std::runtime_error naming the op, the shapes, the strides and the cuBLASLt status.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>

namespace tp::cuda {

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
};

// Creates the cuBLASLt handle and a workspace of ws_bytes on the current device.
void lt_init(cudaStream_t stream, size_t ws_bytes);
void lt_shutdown();
void lt_gemm(const GemmArgs& g);
// cuBLASLt's version number (cublasLtGetVersion; needs no device).
size_t lt_version();

}  // namespace tp::cuda
