// exec/backends/cpu/: the CPU backend (Eigen GEMMs, plain loops), the default and the float64 oracle.
// ops_cpu: the CPU backend's op implementations (namespace tp::ops::cpu), one per op of exec/backends/ops.def (the
// signatures and contracts), defined in ops_cpu.cpp, ops_gemm.cpp, ops_shard.cpp and ops_moe.cpp; internal to
// exec/backends/cpu/ (backend_cpu.cpp fills the CPU backend's table with them).
#pragma once
#include <cstdint>

#include "exec/backends/ops.hpp"

namespace tp::ops::cpu {

// bf16 GEMM operands (training.precision "bf16"), per thread: while on, matmul and attention round every
// product's operands to bf16 (kernels::bf16_round) and accumulate in T. Returns the previous setting. The emu
// backends' GEMMs are this file's matmul, so the setting is theirs too.
bool set_bf16_gemm(bool on);
bool bf16_gemm();

// One per op of exec/backends/ops.def, with its signature and contract.
#define TP_OP(RET, NAME, PARAMS, ARGS) \
  template <class T>                  \
  RET NAME PARAMS;
#include "exec/backends/ops.def"

}  // namespace tp::ops::cpu
