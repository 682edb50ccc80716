// kernels.cu: the kernels of exec/kernels/ compiled for the GPU, in fp32 (fp64 is the CPU oracle only): every op ->
// kernel bridge of exec/backends/ops.def's TP_OP entries (exec/kernels/k_ops.hpp) instantiated on the CUDA runner,
// and the kernels of the backend's own ops (instantiate.cuh). The CUDA backend (backend_cuda_ops.cu) calls these;
// the same headers run on the CPU emulator in the tests. One TU of kernels on purpose: nvcc time on CI's two cores
// grows with the number of .cu files that compile device code.
#include "exec/kernels/cuda/backend_cuda_parts.hpp"
#include "exec/kernels/cuda_launch.cuh"
#include "exec/kernels/k_ops.hpp"
#include "exec/kernels/kernels.hpp"
#include "exec/kernels/cuda/instantiate.cuh"

namespace tp::kernels {

TP_CUDA_INSTANTIATE(template)
#undef TP_CUDA_INSTANTIATE

using CR = cuda::CudaRunner;
using T = float;
using ops::CeForm;
#define TP_OP(RET, NAME, PARAMS, ARGS) template RET NAME##_op<CR, float>(const CR&, TP_OP_UNPAREN PARAMS);
#define TP_OWN_OP(RET, NAME, PARAMS, ARGS)
#include "exec/backends/ops.def"

}  // namespace tp::kernels
