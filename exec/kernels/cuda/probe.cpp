// probe: the C-ABI entry the CPU program calls after dlopen("libtrainplan_cuda.so") to learn whether a CUDA
// device can be used, without linking the CUDA runtime itself. Any error from cudaGetDeviceCount (35 without a
// driver, 34 with the stub driver) or a count of 0 means "no device"; the message says which.
#include <cuda_runtime.h>

#include <cstdio>

#include "exec/kernels/cuda/probe.h"

extern "C" int tp_cuda_backend_probe(int* device_count, char* message, size_t message_size) {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (device_count) *device_count = e == cudaSuccess ? n : 0;
  if (e != cudaSuccess) {
    if (message && message_size)
      std::snprintf(message, message_size, "no CUDA device: cudaGetDeviceCount returned %d (%s: %s)", int(e),
                    cudaGetErrorName(e), cudaGetErrorString(e));
    return TP_CUDA_PROBE_NO_DEVICE;
  }
  if (n == 0) {
    if (message && message_size) std::snprintf(message, message_size, "no CUDA device: cudaGetDeviceCount found 0");
    return TP_CUDA_PROBE_NO_DEVICE;
  }
  int rt = 0, drv = 0;
  cudaRuntimeGetVersion(&rt);
  cudaDriverGetVersion(&drv);
  if (message && message_size)
    std::snprintf(message, message_size, "%d CUDA device(s); runtime %d, driver %d", n, rt, drv);
  return TP_CUDA_PROBE_OK;
}
