// kernels.cu: the kernels of exec/kernels/ compiled for the GPU — every op function instantiated with
// CudaLauncher for fp32 and bf16 storage (the GPU's two precisions; fp64 is the CPU oracle only). The CUDA
// backend (backend_cuda_ops.cu) calls these; the same headers run on the CPU emulator in the tests. One TU of
// kernels on purpose: nvcc time on CI's two cores grows with the number of .cu files that compile device code.
#include "exec/kernels/cuda_launch.cuh"
#include "exec/kernels/kernels.hpp"
#include "exec/kernels/cuda/instantiate.cuh"

namespace tp::kernels {

TP_CUDA_INSTANTIATE(template, float)
TP_CUDA_INSTANTIATE(template, bf16)
#undef TP_CUDA_INSTANTIATE
template void copy<L, bf16, float>(const L&, bf16*, const float*, long);
template void copy<L, float, bf16>(const L&, float*, const bf16*, long);
template void pack_bf16<L, float>(const L&, bf16*, const float*, long);
template void layernorm_bwd_dx<L, float, bf16>(const L&, float*, const float*, const bf16*, const float*, const float*,
                                              const float*, long, long);
template void layernorm_bwd_wb<L, float, bf16>(const L&, float*, float*, const float*, const bf16*, const float*,
                                              const float*, long, long, float*);
template void layernorm_fwd16<L>(const L&, bf16*, float*, float*, const float*, const float*, const float*, long, long,
                                 float);
// Flash attention on fp32 storage, and on bf16 q, k, v and out (the *16 ops: bf16 storage of the activations).
template void flash_attention_fwd<L, float>(const L&, float*, float*, const float*, const float*, const float*, long, long, long, long, long, long, long, long, bool);
template void flash_attention_bwd<L, float>(const L&, float*, float*, float*, const float*, const float*, const float*,
                                           const float*, const float*, const float*, long, long, long, long, long,
                                           long, long, long, bool, float*, bool);
template void flash_attention_fwd<L, float, bf16>(const L&, bf16*, float*, const bf16*, const bf16*, const bf16*, long,
                                                 long, long, long, long, long, long, long, bool);
template void flash_attention_bwd<L, float, bf16>(const L&, float*, float*, float*, const float*, const bf16*,
                                                 const float*, const bf16*, const bf16*, const bf16*, long, long, long,
                                                 long, long, long, long, long, bool, float*, bool);

}  // namespace tp::kernels
