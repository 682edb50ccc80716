// cuda_launch: the CUDA side of "written once" — DeviceCtx maps the kernel context onto threadIdx / blockIdx /
// blockDim / gridDim, __syncthreads, __shfl_xor_sync over the full warp and extern dynamic shared memory; one
// generic __global__ template runs any kernel functor; CudaLauncher is the launcher the op functions of
// exec/kernels/k_*.hpp take. nvcc only (included by .cu files of libtrainplan_cuda.so).
// Invariants: as kcommon.hpp (1-D blocks of whole warps, every lane in every shuffle); launch errors are
// reported with the kernel's name and geometry (std::runtime_error), never ignored.
#pragma once
#ifndef __CUDACC__
#error "cuda_launch.cuh is for nvcc; g++ builds use exec/kernels/emu.hpp"
#endif
#include <cuda_runtime.h>
#include <mma.h>

#include <stdexcept>
#include <string>

#include "exec/kernels/kcommon.hpp"

namespace tp::kernels {

struct DeviceCtx {
  __device__ unsigned tid() const { return threadIdx.x; }
  __device__ unsigned bid() const { return blockIdx.x; }
  __device__ unsigned bdim() const { return blockDim.x; }
  __device__ unsigned gdim() const { return gridDim.x; }
  template <class T>
  __device__ T* shared() const {
    extern __shared__ __align__(32) unsigned char tp_smem[];  // (32: warp-matrix loads and stores)
    return reinterpret_cast<T*>(tp_smem);
  }
  __device__ void sync() { __syncthreads(); }
  __device__ float shfl_xor(float v, int mask) { return __shfl_xor_sync(0xffffffffu, v, mask); }
  __device__ double shfl_xor(double v, int mask) { return __shfl_xor_sync(0xffffffffu, v, mask); }
  __device__ int shfl_xor(int v, int mask) { return __shfl_xor_sync(0xffffffffu, v, mask); }
  __device__ void syncwarp() { __syncwarp(); }
  // Warp matrix products: nvcuda::wmma 16 x 16 x 16 with bf16 operands and fp32 accumulation (sm_80 and later;
  // the emulator's EmuCtx has the same interface, exec/kernels/emu.hpp).
  using FragA = nvcuda::wmma::fragment<nvcuda::wmma::matrix_a, 16, 16, 16, __nv_bfloat16, nvcuda::wmma::row_major>;
  using FragBRow = nvcuda::wmma::fragment<nvcuda::wmma::matrix_b, 16, 16, 16, __nv_bfloat16, nvcuda::wmma::row_major>;
  using FragBCol = nvcuda::wmma::fragment<nvcuda::wmma::matrix_b, 16, 16, 16, __nv_bfloat16, nvcuda::wmma::col_major>;
  using FragC = nvcuda::wmma::fragment<nvcuda::wmma::accumulator, 16, 16, 16, float>;
  __device__ void load_a(FragA& f, const __nv_bfloat16* p, unsigned ld) { nvcuda::wmma::load_matrix_sync(f, p, ld); }
  __device__ void load_b_row(FragBRow& f, const __nv_bfloat16* p, unsigned ld) { nvcuda::wmma::load_matrix_sync(f, p, ld); }
  __device__ void load_b_col(FragBCol& f, const __nv_bfloat16* p, unsigned ld) { nvcuda::wmma::load_matrix_sync(f, p, ld); }
  __device__ void fill(FragC& f, float x) { nvcuda::wmma::fill_fragment(f, x); }
  template <class FB>
  __device__ void mma(FragC& d, const FragA& a, const FB& b, const FragC& c) { nvcuda::wmma::mma_sync(d, a, b, c); }
  __device__ void store(float* p, const FragC& f, unsigned ld) {
    nvcuda::wmma::store_matrix_sync(p, f, ld, nvcuda::wmma::mem_row_major);
  }
};

// The one kernel: the functor is passed by value (kernel parameters, <= 4 KiB).
template <class K>
__global__ void __launch_bounds__(1024) tp_kernel(const K k) {
  DeviceCtx c;
  k(c);
}

// The same with a tighter bound (LaunchBound, kcommon.hpp): more registers per thread.
template <class K, unsigned kBound>
__global__ void __launch_bounds__(kBound) tp_kernel_bounded(const K k) {
  DeviceCtx c;
  k(c);
}

inline std::string cuda_launch_where(const char* name, Dim d) {
  return std::string("kernel ") + name + " (grid " + std::to_string(d.grid) + ", block " + std::to_string(d.block) +
         ", shared " + std::to_string(d.smem) + " B)";
}

// Launches on `stream`; grids are capped at max_grid (the kernels' loops cover the rest).
struct CudaLauncher {
  unsigned block = 256;
  unsigned max_grid = 4096;
  cudaStream_t stream = nullptr;
  template <class K>
  void operator()(const K& k, Dim d) const {
    if (const char* why = launch_problem_for<K>(d))
      throw std::runtime_error(cuda_launch_where(K::kName, d) + ": bad launch: " + why);
    if constexpr (LaunchBound<K>::value == 1024) tp_kernel<K><<<d.grid, d.block, d.smem, stream>>>(k);
    else tp_kernel_bounded<K, LaunchBound<K>::value><<<d.grid, d.block, d.smem, stream>>>(k);
    const cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess)
      throw std::runtime_error(cuda_launch_where(K::kName, d) + ": " + cudaGetErrorName(e) + ": " +
                               cudaGetErrorString(e));
  }
};

}  // namespace tp::kernels
