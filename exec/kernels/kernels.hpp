// exec/kernels/: the kernels written once for g++ and nvcc (k_*.hpp, this file), the op -> kernel bridges of the ops
// (k_ops.hpp, on a backend's runner, k_runner.hpp), the CPU block emulator that runs them without a GPU (emulator/)
// and the CUDA backend library libtrainplan_cuda.so (cuda/).
// kernels: every non-GEMM kernel of the executor (exec/kernels/k_*.hpp), written once as TP_HD functors and
// launched through a launcher: emu::Launcher (exec/kernels/emulator/emu.hpp, g++) or the CUDA one (cuda_launch.cuh,
// nvcc). docs/kernels.md explains the rules.
#pragma once
#include "exec/kernels/k_elementwise.hpp"
#include "exec/kernels/k_multi.hpp"
#include "exec/kernels/k_flash.hpp"
#include "exec/kernels/k_fp8.hpp"
#include "exec/kernels/k_fused.hpp"
#include "exec/kernels/k_moe.hpp"
#include "exec/kernels/k_reduce.hpp"
#include "exec/kernels/k_rows.hpp"
