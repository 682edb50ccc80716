// kcommon: what every kernel header shares — the TP_HD qualifier, the bf16 storage type and its float
// conversions, the accumulation type, portable math, and the warp / block reductions written against a
// context object (kernel code never names threadIdx, __syncthreads or __shfl_xor_sync directly).
// Compiled two ways: by nvcc (TP_HD = __host__ __device__, bf16 = __nv_bfloat16, the context is DeviceCtx in
// cuda_launch.cuh) and by g++ (TP_HD empty, bf16 a 16-bit struct, the context is the block emulator's EmuCtx).
// Invariants: blocks are one-dimensional with blockDim a multiple of 32 (the launchers check it); every lane
// of a warp takes part in a shuffle; every thread of a block reaches every sync (no early return before one).
#pragma once
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <type_traits>

#include <cmath>
#ifdef __CUDACC__
#include <cuda_bf16.h>
#define TP_HD __host__ __device__
#define TP_INLINE __forceinline__
#define TP_UNROLL _Pragma("unroll")
#else
#define TP_HD
#define TP_INLINE inline
#define TP_UNROLL
#endif

namespace tp::kernels {

#ifdef __CUDACC__
using bf16 = __nv_bfloat16;
TP_HD TP_INLINE float to_float(bf16 x) { return __bfloat162float(x); }
TP_HD TP_INLINE bf16 to_bf16(float f) { return __float2bfloat16_rn(f); }
#else
// bfloat16 storage: the top 16 bits of an IEEE float. Conversion from float rounds to nearest even (NaN kept).
struct bf16 {
  uint16_t bits;
};
inline float to_float(bf16 x) {
  uint32_t u = uint32_t(x.bits) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline bf16 to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return bf16{uint16_t((u >> 16) | 0x40u)};  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return bf16{uint16_t(u >> 16)};
}
#endif

// Accumulation type: fp32 for float and bf16 storage, fp64 for double (the oracle precision).
template <class T>
struct Acc {
  using type = float;
};
template <>
struct Acc<double> {
  using type = double;
};
template <class T>
using acc_t = typename Acc<T>::type;

// Load a stored value into its accumulation type, store an accumulated value back (rounding for bf16).
TP_HD TP_INLINE float ld(float x) { return x; }
TP_HD TP_INLINE double ld(double x) { return x; }
TP_HD TP_INLINE float ld(bf16 x) { return to_float(x); }
template <class T>
struct St {
  TP_HD static TP_INLINE T make(acc_t<T> a) { return T(a); }
};
template <>
struct St<bf16> {
  TP_HD static TP_INLINE bf16 make(float a) { return to_bf16(a); }
};
template <class T, class A>
TP_HD TP_INLINE T st(A a) {
  return St<T>::make(acc_t<T>(a));
}

// Four adjacent floats read at once: one 16-byte load on the GPU (p must be 16-byte aligned there), a copy on the
// host, which throws where the GPU's access would fault (vector_align_check), so the emulator catches it.
struct alignas(16) F4 {
  float x, y, z, w;
};
#ifndef __CUDA_ARCH__
inline void vector_align_check(const void* p, unsigned bytes, const char* what) {
  if (reinterpret_cast<uintptr_t>(p) % bytes != 0)
    throw std::runtime_error(std::string(what) + ": address not " + std::to_string(bytes) + "-byte aligned");
}
#endif
TP_HD TP_INLINE F4 ld4(const float* p) {
#ifdef __CUDA_ARCH__
  const float4 t = *reinterpret_cast<const float4*>(p);
  return F4{t.x, t.y, t.z, t.w};
#else
  vector_align_check(p, 16, "ld4 (float)");
  F4 r;
  std::memcpy(&r, p, sizeof r);
  return r;
#endif
}
// Four adjacent bf16 as floats: one 8-byte load on the GPU (p must be 8-byte aligned there).
TP_HD TP_INLINE F4 ld4(const bf16* p) {
#ifdef __CUDA_ARCH__
  const uint2 u = *reinterpret_cast<const uint2*>(p);
  const float2 a = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&u.x));
  const float2 b = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&u.y));
  return F4{a.x, a.y, b.x, b.y};
#else
  vector_align_check(p, 8, "ld4 (bf16)");
  return F4{to_float(p[0]), to_float(p[1]), to_float(p[2]), to_float(p[3])};
#endif
}
// v stored at p as four floats (one 16-byte store on the GPU; p 16-byte aligned there).
TP_HD TP_INLINE void st4(float* p, F4 v) {
#ifdef __CUDA_ARCH__
  *reinterpret_cast<float4*>(p) = make_float4(v.x, v.y, v.z, v.w);
#else
  vector_align_check(p, 16, "st4 (float)");
  std::memcpy(p, &v, sizeof v);
#endif
}
// v rounded to bf16 (to_bf16's rounding) and stored at p: one 8-byte store on the GPU (p 8-byte aligned there).
TP_HD TP_INLINE void st4(bf16* p, F4 v) {
#ifdef __CUDA_ARCH__
  const __nv_bfloat162 lo = __floats2bfloat162_rn(v.x, v.y), hi = __floats2bfloat162_rn(v.z, v.w);
  uint2 u;
  u.x = *reinterpret_cast<const unsigned*>(&lo);
  u.y = *reinterpret_cast<const unsigned*>(&hi);
  *reinterpret_cast<uint2*>(p) = u;
#else
  vector_align_check(p, 8, "st4 (bf16)");
  p[0] = to_bf16(v.x), p[1] = to_bf16(v.y), p[2] = to_bf16(v.z), p[3] = to_bf16(v.w);
#endif
}
// Eight adjacent bf16 moved as they are: one 16-byte load or store on the GPU (p 16-byte aligned there; the host
// copy throws where the GPU's access would fault).
struct alignas(16) B8 {
  uint32_t w[4];
};
TP_HD TP_INLINE B8 ld8(const bf16* p) {
#ifdef __CUDA_ARCH__
  const uint4 u = *reinterpret_cast<const uint4*>(p);
  return B8{{u.x, u.y, u.z, u.w}};
#else
  vector_align_check(p, 16, "ld8 (bf16)");
  B8 r;
  std::memcpy(&r, p, sizeof r);
  return r;
#endif
}
TP_HD TP_INLINE void st8(bf16* p, B8 v) {
#ifdef __CUDA_ARCH__
  *reinterpret_cast<uint4*>(p) = make_uint4(v.w[0], v.w[1], v.w[2], v.w[3]);
#else
  vector_align_check(p, 16, "st8 (bf16)");
  std::memcpy(p, &v, sizeof v);
#endif
}
// lo and hi rounded to bf16 (to_bf16's rounding) in one 32-bit register, lo in the low half: the operand pairs of
// the tensor-core instructions (EmuCtx::mma16816, exec/kernels/emulator/emu.hpp).
TP_HD TP_INLINE uint32_t pack_bf16x2(float lo, float hi) {
#ifdef __CUDACC__
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  uint32_t u;
  memcpy(&u, &v, 4);
  return u;
#else
  return uint32_t(to_bf16(lo).bits) | uint32_t(to_bf16(hi).bits) << 16;
#endif
}
// Whether p sits on a `bytes` boundary (the vector loads' and stores' condition).
template <class T>
TP_HD TP_INLINE bool aligned_to(const T* p, unsigned bytes) {
  return reinterpret_cast<uintptr_t>(p) % bytes == 0;
}

// Math on the accumulation type, the same names on host and device.
TP_HD TP_INLINE float k_exp(float x) { return ::expf(x); }
TP_HD TP_INLINE double k_exp(double x) { return ::exp(x); }
// 2^x: one MUFU.EX2 (and its range scaling) on the GPU, where expf is a polynomial; exp(x) = 2^(x log2 e).
TP_HD TP_INLINE float k_exp2(float x) { return ::exp2f(x); }
constexpr float kLog2e = 1.4426950408889634f;
TP_HD TP_INLINE float k_log(float x) { return ::logf(x); }
TP_HD TP_INLINE double k_log(double x) { return ::log(x); }
TP_HD TP_INLINE float k_tanh(float x) { return ::tanhf(x); }
TP_HD TP_INLINE double k_tanh(double x) { return ::tanh(x); }
TP_HD TP_INLINE float k_sqrt(float x) { return ::sqrtf(x); }
TP_HD TP_INLINE double k_sqrt(double x) { return ::sqrt(x); }
template <class A>
TP_HD TP_INLINE A k_max(A a, A b) {
  return a > b ? a : b;
}
template <class A>
TP_HD TP_INLINE A k_min(A a, A b) {
  return a < b ? a : b;
}
// -inf, the same on host and device (INFINITY is a float constant).
template <class A>
TP_HD TP_INLINE A k_neg_inf() {
  return -A(INFINITY);
}

constexpr unsigned kWarp = 32;
// Shared-memory words one block reduction needs (one per warp, 1024 / 32).
constexpr unsigned kReduceSlots = 32;

// Sum (or max) over the R lanes of a lane group (R a power of two up to 32, groups aligned at multiples of R) by
// butterfly shuffles; every lane of the group gets the result. warp_sum / warp_max: R = 32, the whole warp.
template <class Ctx, class A>
TP_HD TP_INLINE A group_sum(Ctx& c, A v, int R) {
  for (int m = R / 2; m > 0; m >>= 1) v += c.shfl_xor(v, m);
  return v;
}
template <class Ctx, class A>
TP_HD TP_INLINE A group_max(Ctx& c, A v, int R) {
  for (int m = R / 2; m > 0; m >>= 1) v = k_max(v, c.shfl_xor(v, m));
  return v;
}
template <class Ctx, class A>
TP_HD TP_INLINE A warp_sum(Ctx& c, A v) {
  return group_sum(c, v, int(kWarp));
}
template <class Ctx, class A>
TP_HD TP_INLINE A warp_max(Ctx& c, A v) {
  return group_max(c, v, int(kWarp));
}

// Sum (kMax: max) over the block; every thread gets the result. `slots` is shared memory of kReduceSlots
// values of A; it is free again when the function returns. Three syncs: warp partials written -> read by warp
// 0; total written -> read by all; all have read -> slots may be reused. TP_KERNELS_TEST_DROP_SYNC removes the
// first one (the test build that proves a missing sync is detected, tests/kernels/).
template <bool kMax, class Ctx, class A>
TP_HD A block_reduce(Ctx& c, A v, A* slots) {
  const unsigned lane = c.tid() % kWarp, warp = c.tid() / kWarp, nwarps = c.bdim() / kWarp;
  v = kMax ? warp_max(c, v) : warp_sum(c, v);
  if (lane == 0) slots[warp] = v;
#ifndef TP_KERNELS_TEST_DROP_SYNC
  c.sync();
#endif
  if (warp == 0) {
    A r = lane < nwarps ? slots[lane] : (kMax ? k_neg_inf<A>() : A(0));
    r = kMax ? warp_max(c, r) : warp_sum(c, r);
    if (lane == 0) slots[0] = r;
  }
  c.sync();
  const A total = slots[0];
  c.sync();
  return total;
}
template <class Ctx, class A>
TP_HD TP_INLINE A block_sum(Ctx& c, A v, A* slots) {
  return block_reduce<false>(c, v, slots);
}
template <class Ctx, class A>
TP_HD TP_INLINE A block_max(Ctx& c, A v, A* slots) {
  return block_reduce<true>(c, v, slots);
}

// Launch geometry of a kernel: 1-D grid of 1-D blocks, `smem` bytes of dynamic shared memory per block.
struct Dim {
  unsigned grid = 1, block = 256;
  unsigned smem = 0;
};
// Why a launch is invalid on every GPU we build for (block of whole warps, at most 1024 threads, at most
// 48 KiB of dynamic shared memory without opting in), or null. Both launchers check it.
inline const char* launch_problem(Dim d) {
  if (d.grid < 1) return "the grid is empty";
  if (d.block < kWarp || d.block > 1024) return "block size must be in [32, 1024]";
  if (d.block % kWarp != 0) return "block size must be a multiple of 32 (whole warps)";
  if (d.smem > 48 * 1024) return "shared memory above 48 KiB per block";
  return nullptr;
}
// A kernel's launch bound: K::kMaxThreads when the functor declares one (a tighter bound, so nvcc may give each
// thread more registers: cuda_launch.cuh compiles it with __launch_bounds__(kMaxThreads)), else 1024. Both
// launchers refuse a block above it.
template <class K, class = void>
struct LaunchBound {
  static constexpr unsigned value = 1024;
};
template <class K>
struct LaunchBound<K, std::void_t<decltype(K::kMaxThreads)>> {
  static constexpr unsigned value = K::kMaxThreads;
};
template <class K>
inline const char* launch_problem_for(Dim d) {
  if (d.block > LaunchBound<K>::value) return "block size above the kernel's launch bound";
  return launch_problem(d);
}

// Blocks for `n` independent items at `per_block` items per block, capped (grid-stride loops cover the rest).
inline unsigned blocks_for(long n, long per_block, unsigned max_grid) {
  long g = (n + per_block - 1) / per_block;
  if (g < 1) g = 1;
  return g > long(max_grid) ? max_grid : unsigned(g);
}

}  // namespace tp::kernels
