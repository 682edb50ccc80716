// exec/kernels/cuda/: libtrainplan_cuda.so, which the CPU program dlopens — the CUDA backend (backend_cuda.cpp, its op
// tables in backend_cuda_ops.cu), the kernels' one device TU (kernels.cu), cuBLASLt GEMMs (gemm_lt), the fused
// attention's choice (fused_attention, cudnn_sdpa), NCCL's communicator table (nccl_comm.cpp) and the C ABI
// (cuda_backend.h, probe.h). It fills exec/backends/backend.hpp's table: the backends' layer, in kernels/'s folder.
// backend_cuda_parts: what the CUDA backend's files share (backend_cuda.cpp: memory, streams, creation;
// backend_cuda_ops.cu: the op tables). Host code inside libtrainplan_cuda.so only.
// Invariants: one State per process (one GPU per rank); enter() makes the backend's device current on the
// calling thread before any CUDA call (host threads start on device 0).
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <initializer_list>
#include <stdexcept>
#include <string>
#include <utility>

#include "exec/backends/backend.hpp"
#include "exec/kernels/cuda/op_profile.hpp"
#ifdef __CUDACC__
#include "exec/kernels/cuda_launch.cuh"
#endif

namespace tp::cuda {

struct State {
  int device = 0;
  cudaStream_t stream = nullptr;  // every op and every Stream{} copy
  bool sync_each = false;         // TP_CUDA_SYNC=1
  void* scratch = nullptr;        // grows on demand (losses, partial sums, attention's dP)
  size_t scratch_bytes = 0;
  bool capturing = false;         // g.stream is being captured (a step as a CUDA graph)
  std::string description;
};
extern State g;

void enter();
// Throws "cuda: <what>: <error name>: <error string>" unless e is cudaSuccess.
void check(cudaError_t e, const char* what);
// With TP_CUDA_SYNC=1: synchronise the stream and throw on any error (so the fault names its op).
void after_op();
// Runs `body` on the backend's device, then after_op(); any error is rethrown as
// "cuda op NAME (N n, E e, ...): <what>" (CudaRunner below: the bridges of exec/kernels/k_ops.hpp).
template <class Body>
void run_op(const char* name, std::initializer_list<std::pair<const char*, long>> shape, Body body) {
  try {
    enter();
    {
      prof::OpTimer timer(name, shape);
      body();
    }
    after_op();
  } catch (const std::exception& e) {
    std::string s;
    for (const auto& [n, v] : shape) s += (s.empty() ? "" : ", ") + std::string(n) + " " + std::to_string(v);
    throw std::runtime_error(std::string("cuda op ") + name + " (" + s + "): " + e.what());
  }
}
// Device scratch of at least `bytes` (contents undefined; reused by the next op that asks).
void* scratch(size_t bytes);
// Throws "<what> inside a captured step ..." while g.stream is being captured (a read-back, a host copy, a sync).
void refuse_in_capture(const char* what);
// A backend buffer being replaced (scratch, cuBLASLt's operand copies): freed (after a stream synchronisation when
// sync_first), or, while a capture runs or a graph lives that may use it, kept until no graph is left.
void retire_or_free(void* p, size_t bytes, bool sync_first);
// y[n] (bf16, device) = x[n] rounded to nearest even, on g.stream (kernels::copy; gemm_lt's bf16 operands).
void cast_to_bf16(void* y, const float* x, long n);
// y[n] (float, device) = x[n] (bf16, device), exactly.
void cast_from_bf16(float* y, const void* x, long n);
// Device-memory accounting of every cudaMalloc / cudaFree of the library (Backend::peak_device_bytes).
void note_device_alloc(size_t bytes);
void note_device_free(size_t bytes);
#ifdef __CUDACC__
// The launcher every op uses: block 256, grid capped at 4096, on g.stream.
kernels::CudaLauncher launcher();

// The CUDA backend's runner of the bridges written once for emu and CUDA (exec/kernels/k_runner.hpp): its
// launcher on g.stream, no extent checks (device pointers), run_op's error naming, the device scratch, and a
// read-back that synchronises the stream for its one double.
struct CudaRunner {
  kernels::CudaLauncher launch() const { return launcher(); }
  void check(const char*, const char*, const void*, size_t) const {}
  template <class Body>
  void run(const char* op, std::initializer_list<std::pair<const char*, long>> shape, Body body) const {
    run_op(op, shape, body);
  }
  void* scratch(size_t bytes) const { return bytes ? tp::cuda::scratch(bytes) : nullptr; }
  double read_back(const double* p) const {
    refuse_in_capture("a read-back (an op that returns a value)");
    double v = 0;
    check_cuda(cudaMemcpyAsync(&v, p, sizeof v, cudaMemcpyDeviceToHost, g.stream), "read-back copy");
    check_cuda(cudaStreamSynchronize(g.stream), "read-back");
    return v;
  }
  void upload(void* dst, const void* src, size_t bytes) const {
    refuse_in_capture("an upload of host memory (an op's pointer table)");
    check_cuda(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, g.stream), "table upload");
  }
  static void check_cuda(cudaError_t e, const char* what) { tp::cuda::check(e, what); }
};
#endif

// The op tables (backend_cuda_ops.cu): fp32, every op of exec/backends/ops.def; fp64, entries that throw.
void fill_f32_table(exec::OpTable<float>& t);
void fill_f64_unsupported(exec::OpTable<double>& t);

}  // namespace tp::cuda
