// kernels.cu: the kernels of exec/kernels/ compiled for the GPU — every op function instantiated with
// CudaLauncher for fp32 and bf16 storage (the GPU's two precisions; fp64 is the CPU oracle only). The CUDA
// backend (later) calls these; the same headers run on the CPU emulator in the tests. One translation unit on
// purpose: nvcc time on CI's two cores grows with the number of .cu files.
#include "exec/kernels/cuda_launch.cuh"
#include "exec/kernels/kernels.hpp"

namespace tp::kernels {

using L = CudaLauncher;

#define TP_CUDA_INSTANTIATE(T)                                                                                  \
  template void fill<L, T>(const L&, T*, acc_t<T>, long);                                                       \
  template void copy<L, T, T>(const L&, T*, const T*, long);                                                    \
  template void add<L, T>(const L&, T*, const T*, const T*, long);                                              \
  template void accumulate<L, T>(const L&, T*, const T*, long);                                                 \
  template void scale<L, T>(const L&, T*, const T*, acc_t<T>, long);                                            \
  template void add_bias<L, T>(const L&, T*, const T*, const T*, long, long);                                   \
  template void gelu_fwd<L, T>(const L&, T*, const T*, long);                                                   \
  template void gelu_bwd<L, T>(const L&, T*, const T*, const T*, long);                                         \
  template void gelu_bwd_set<L, T>(const L&, T*, const T*, const T*, long);                                     \
  template void swiglu_fwd<L, T>(const L&, T*, const T*, long, long);                                           \
  template void swiglu_bwd<L, T>(const L&, T*, const T*, const T*, long, long);                                 \
  template void swiglu_bwd_set<L, T>(const L&, T*, const T*, const T*, long, long);                             \
  template void adamw<L, float, T>(const L&, float*, const T*, float*, float*, T*, long, double, double, double, \
                                   double, double, long);                                                       \
  template void layernorm_fwd<L, T>(const L&, T*, float*, float*, const T*, const T*, const T*, long, long,     \
                                    float);                                                                     \
  template void layernorm_bwd_dx<L, T>(const L&, T*, const T*, const T*, const T*, const float*, const float*,  \
                                       long, long);                                                             \
  template void layernorm_bwd_wb<L, T>(const L&, T*, T*, const T*, const T*, const float*, const float*, long,  \
                                       long);                                                                   \
  template void softmax_fwd<L, T>(const L&, T*, const T*, long, long, float, bool);                             \
  template void softmax_bwd<false, L, T>(const L&, T*, const T*, const T*, long, long, float);                  \
  template void softmax_bwd<true, L, T>(const L&, T*, const T*, const T*, long, long, float);                   \
  template void cross_entropy_fwd<L, T>(const L&, T*, float*, const T*, const int32_t*, long, long);            \
  template void ce_shard_max<L, T>(const L&, float*, const T*, long, long);                                     \
  template void ce_shard_expsum<L, T>(const L&, float*, float*, const T*, const float*, const int32_t*, long,    \
                                      long, long);                                                              \
  template void ce_shard_normalize<L, T>(const L&, T*, const T*, const float*, const float*, long, long);       \
  template void cross_entropy_bwd<false, L, T>(const L&, T*, const T*, const int32_t*, long, long, long, float); \
  template void cross_entropy_bwd<true, L, T>(const L&, T*, const T*, const int32_t*, long, long, long, float);  \
  template void bias_bwd<L, T>(const L&, T*, const T*, long, long);                                             \
  template void sum_squares<L, T>(const L&, double*, double*, const T*, long);                                  \
  template void embedding_fwd<L, T>(const L&, T*, const int32_t*, const T*, const T*, long, long, long, long,   \
                                    long, long);                                                                \
  template void embedding_bwd<L, T>(const L&, T*, T*, const T*, const int32_t*, long, long, long, long, long);

TP_CUDA_INSTANTIATE(float)
TP_CUDA_INSTANTIATE(bf16)
#undef TP_CUDA_INSTANTIATE
template void copy<L, bf16, float>(const L&, bf16*, const float*, long);
template void copy<L, float, bf16>(const L&, float*, const bf16*, long);

}  // namespace tp::kernels
