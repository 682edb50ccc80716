// k_ops: every op -> kernel bridge of exec/backends/ops.def's TP_OP entries, written once for the backends that launch
// kernels (emu with g++ on the CPU block emulator, the CUDA library with nvcc): kernels::NAME_op(runner, the op's
// arguments). The runner (k_runner.hpp) is the backend's launcher, argument checks, scratch and error naming.
#pragma once
#include "exec/kernels/k_elementwise_ops.hpp"
#include "exec/kernels/k_moe_ops.hpp"
#include "exec/kernels/k_multi_ops.hpp"
#include "exec/kernels/k_rows_ops.hpp"
#include "exec/kernels/k_shard_ops.hpp"
