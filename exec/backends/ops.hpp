// ops: the small op interface every executor backend implements (cpu: Eigen in exec/backends/cpu/; emu: the kernels
// on the CPU block emulator; cuda). The model, the schedules, ZeRO, offload and delinking are written against these
// functions only, so no Eigen (or CUDA) type appears outside a backend, and they never read or write tensor memory
// themselves. Each function dispatches through the calling thread's current backend (exec/backends/backend.hpp;
// exec/backends/ops.cpp).
// The ops, their signatures and their contracts are the list in exec/backends/ops.def, declared here from it.
#pragma once
#include <cstdint>
#include <string_view>
#include <vector>

namespace tp::ops {

// How the vocabulary-parallel cross-entropy's shard partials form the loss (ce_shard_exp, ce_shard_finish; both
// kept so the 1D and 2D models keep their exact results; ops.def).
enum class CeForm { raw_target_divide = 0, shifted_target_reciprocal = 1 };

#define TP_OP(RET, NAME, PARAMS, ARGS) \
  template <class T>                  \
  RET NAME PARAMS;
#include "exec/backends/ops.def"

// The forms without the optional last argument: add_bias without a residual, bias_bwd without the packed copy.
template <class T>
void add_bias(T* y, const T* x, const T* b, long N, long C) {
  add_bias<T>(y, x, b, N, C, nullptr);
}
template <class T>
void bias_bwd(T* db, const T* dy, long N, long C) {
  bias_bwd<T>(db, dy, N, C, nullptr);
}

// The names of every op of ops.def, in its order (the selftest's and the tests' coverage checks).
const std::vector<std::string_view>& op_names();

}  // namespace tp::ops
