// cuda_launch: the CUDA side of "written once" — DeviceCtx maps the kernel context onto threadIdx / blockIdx /
// blockDim / gridDim, __syncthreads, __shfl_xor_sync over the full warp and extern dynamic shared memory; one
// generic __global__ template runs any kernel functor; CudaLauncher is the launcher the op functions of
// exec/kernels/k_*.hpp take. nvcc only (included by .cu files of libtrainplan_cuda.so).
// Invariants: as kcommon.hpp (1-D blocks of whole warps, every lane in every shuffle); launch errors are
// reported with the kernel's name and geometry (std::runtime_error), never ignored.
#pragma once
#ifndef __CUDACC__
#error "cuda_launch.cuh is for nvcc; g++ builds use exec/kernels/emulator/emu.hpp"
#endif
#include <cuda_runtime.h>

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
  // Warp-level tensor-core instructions, as the emulator's EmuCtx documents them (exec/kernels/emulator/emu.hpp): every
  // lane of the warp executes each (sm_80 and later).
  __device__ void mma16816(float d[4], const uint32_t a[4], const uint32_t b[2]) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  }
  __device__ void ldsm4(uint32_t r[4], const __nv_bfloat16* p) {
    const unsigned addr = unsigned(__cvta_generic_to_shared(p));
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr)
                 : "memory");
  }
  // cp.async (sm_80 and later), as EmuCtx documents it: 16 bytes global -> shared (zero: src-size 0, zeros).
  __device__ void cp_async16(void* dst, const void* src, bool zero) {
    const unsigned addr = unsigned(__cvta_generic_to_shared(dst));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(addr), "l"(src), "r"(zero ? 0 : 16) : "memory");
  }
  __device__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
  template <int N>
  __device__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
  }
  __device__ void ldsm4_t(uint32_t r[4], const __nv_bfloat16* p) {
    const unsigned addr = unsigned(__cvta_generic_to_shared(p));
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr)
                 : "memory");
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
