// versions: tp_cuda_versions (cuda_backend.h) — the CUDA runtime, driver, cuBLASLt and NCCL versions for
// `trainplan --version`, readable without a device: the runtime and cuBLASLt answer without a driver; the
// driver version is reported as "none" when cudaDriverGetVersion gives 0 or fails. NCCL is the library
// nccl_comm.cpp loads at run time (its version, or why it does not load). The attention
// behind the bf16 flash ops: cuDNN's (its run-time version) or the own kernels, with the reason.
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstdio>
#include <string>

#include "exec/kernels/cuda/cuda_backend.h"
#include "exec/kernels/cuda/fused_attention.hpp"
#include "exec/kernels/cuda/gemm_lt.hpp"

namespace {
std::string dotted(long v) {  // 13000 -> 13.0; 13010 -> 13.1 (CUDA's major*1000 + minor*10)
  return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10);
}
}  // namespace

extern "C" void tp_cuda_versions(char* out, size_t out_size) {
  int rt = 0, drv = 0;
  const bool rt_ok = cudaRuntimeGetVersion(&rt) == cudaSuccess;
  const bool drv_ok = cudaDriverGetVersion(&drv) == cudaSuccess && drv > 0;
  cudaGetLastError();
  std::string s = "CUDA runtime " + (rt_ok ? dotted(rt) : dotted(CUDART_VERSION) + " (compile-time)");
  s += ", driver " + (drv_ok ? dotted(drv) : std::string("none (no driver; built against CUDA ") +
                                                 dotted(CUDART_VERSION) + ")");
  const size_t lt = tp::cuda::lt_version();  // major*10000 + minor*100 + patch
  s += ", cuBLASLt " + std::to_string(lt / 10000) + "." + std::to_string((lt / 100) % 100) + "." +
       std::to_string(lt % 100);
  char nccl[256] = "";
  tp_cuda_nccl_version(nccl, sizeof nccl);  // (nccl_comm.cpp: the library loaded at run time, or why not)
  s += std::string(", ") + nccl;
  s += ", architectures sm_80 sm_90";
  s += "; bf16 flash attention: " + tp::cuda::attention_choice().describe();
  if (out && out_size) std::snprintf(out, out_size, "%s", s.c_str());
}
