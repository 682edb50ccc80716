// k_runner: what a backend gives the op -> kernel bridges written once for every backend that launches kernels
// (k_moe_ops.hpp, k_shard_ops.hpp: the emu backend compiles them with g++ for the CPU block emulator, the CUDA
// library with nvcc, so the bridge the emulator checks in CI is the bridge a GPU runs). A runner R has
//   R::launch()                   the kernel launcher (with its block and max_grid);
//   R::check(op, arg, p, bytes)   an argument's extent check before any work (emu: its allocation registry;
//                                 cuda: nothing, device pointers cannot be checked from the host);
//   R::run(op, shape, body)       runs body as the op (cuda: on its device, timed, errors naming op and shape);
//   R::scratch(bytes)             memory the kernels write and read (emu: host, zero-filled; cuda: device; null
//                                 for 0 bytes);
//   R::read_back(p)               the double at p on the host (cuda: a copy and a stream synchronisation);
//   R::upload(dst, src, bytes)    host bytes into the op's scratch, in order before the op's kernels (emu: a copy;
//                                 cuda: an asynchronous copy on the op's stream; src may be freed on return).
// The runners: exec/backends/emu/backend_emu.hpp EmuRunner, exec/kernels/cuda/backend_cuda_parts.hpp CudaRunner.
#pragma once
#include <cstddef>

#include "exec/kernels/k_reduce.hpp"

namespace tp::kernels {

// Bytes of n elements of T (0 for n <= 0: an empty argument may be any pointer).
template <class T>
constexpr size_t bytes_of(long n) {
  return n > 0 ? sizeof(T) * size_t(n) : 0;
}

// r.check for an optional argument (null: nothing to check).
template <class R>
void check_opt(const R& r, const char* op, const char* arg, const void* p, size_t bytes) {
  if (p) r.check(op, arg, p, bytes);
}

// The column sums' scratch of an [N, C] input from the runner (k_reduce.hpp column_sums_scratch elements of
// acc_t<T>; null when none): bias, LayerNorm weight and sharded LayerNorm gradients.
template <class T, class R>
acc_t<T>* column_scratch_of(const R& r, long N, long C) {
  return static_cast<acc_t<T>*>(r.scratch(sizeof(acc_t<T>) * size_t(column_sums_scratch(N, C))));
}

// The embedding backward's row grouping over N rows (k_reduce.hpp embedding_bwd_scratch int32; null when N is 0).
template <class R>
int32_t* embedding_scratch_of(const R& r, long N) {
  return static_cast<int32_t*>(r.scratch(sizeof(int32_t) * size_t(embedding_bwd_scratch(N))));
}

}  // namespace tp::kernels
