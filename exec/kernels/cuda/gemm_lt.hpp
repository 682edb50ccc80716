// gemm_lt: every matmul of the CUDA backend through cuBLASLt (host code inside libtrainplan_cuda.so only).
// Invariants: matrices are ROW-major as in exec/backends/ops.hpp; the mapping onto column-major cuBLASLt is
// lt_plan (gemm_plan.hpp, checked on the CPU by tests/exec/test_cuda_gemm_plan.cpp). One handle and one workspace per process (one GPU per
// rank), all work on the backend's stream. fp32 storage, fp32 compute (TF32 only when TP_CUDA_TF32=1); with bf16
// operands on (lt_set_bf16, training.precision "bf16") each operand is cast to a bf16 copy (round to nearest
// even, the CPU backends' bf16_round) and the GEMM runs on bf16 tensor cores, accumulating in fp32. Each
// GEMM's cuBLASLt setup is cached by shape (gemm_cache.hpp): the heuristic runs once per distinct GEMM.
// Every failure throws std::runtime_error naming the op, the shapes, the strides and the cuBLASLt status.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>

#include "exec/kernels/cuda/gemm_plan.hpp"

namespace tp::cuda {

// Creates the cuBLASLt handle and a workspace of ws_bytes on the current device.
void lt_init(cudaStream_t stream, size_t ws_bytes);
void lt_shutdown();
// Runs g. False (nothing computed) only when g asks for an epilogue that cuBLASLt has no algorithm for, or
// whose pointers or leading dimension it cannot take (then the caller composes it from kernels).
bool lt_gemm(const GemmArgs& g);
// bf16 GEMM operands for this thread's later GEMMs (Backend::set_bf16_gemm); returns the previous setting.
bool lt_set_bf16(bool on);
bool lt_bf16();
// Device scratch for attention's bf16 copies of P (slot 0) and dS (slot 1), at least `bytes`; valid until the next
// call with the same slot (the ops fill and consume it within one op, in stream order).
void* lt_bf16_scratch(int slot, size_t bytes);
// fp8 GEMMs (ops::matmul_fp8) on cuBLASLt's fp8 kernels: C [M, N] (row-major fp32) = alpha inv_a[0] inv_b[0] A8 B8ᵀ +
// beta C, A8 [M, K] and B8 [N, K] row-major fp8 bytes of formats fa, fb (0 E4M3, 1 E5M2; gemm_plan.hpp fp8_tn_args:
// cuBLASLt's "TN"), inv_a and inv_b one float each in device memory (cuBLASLt's scale pointers, read as it runs).
// lt_fp8_usable: whether this device and shape take it — compute capability 8.9 or later, TP_CUDA_FP8_GEMM unset or
// not 0, not two E5M2 operands, M, N and K multiples of 16, and no earlier call of the shape found cuBLASLt without an
// algorithm for it. lt_fp8_gemm runs it; false (nothing computed) when cuBLASLt has no algorithm (remembered).
bool lt_fp8_usable(long M, long N, long K, int fa, int fb);
bool lt_fp8_gemm(float* C, const void* A8, const void* B8, const float* inv_a, const float* inv_b, long M, long N, long K,
                 int fa, int fb, float alpha, float beta);
// Device scratch for the fp8 operands' bytes (slot 0: A8, 1: B8), at least `bytes` (the bf16 copies' buffers: an op
// uses one kind at a time).
void* lt_fp8_scratch(int slot, size_t bytes);
// cuBLASLt's version number (cublasLtGetVersion; needs no device).
size_t lt_version();

}  // namespace tp::cuda
