// instantiate: the list of kernel op functions libtrainplan_cuda.so compiles, as one macro.
// kernels.cu expands it with PREFIX = `template` (the explicit instantiations: the only place nvcc compiles
// the device code); backend_cuda_ops.cu expands it with PREFIX = `extern template`, so the backend calls those
// instantiations without compiling the kernels a second time. Needs cuda_launch.cuh and kernels.hpp first.
#pragma once

namespace tp::kernels {
using L = CudaLauncher;
}  // namespace tp::kernels

#define TP_CUDA_INSTANTIATE(PREFIX, T)                                                                                  \
  PREFIX void fill<L, T>(const L&, T*, acc_t<T>, long);                                                       \
  PREFIX void copy<L, T, T>(const L&, T*, const T*, long);                                                    \
  PREFIX void add<L, T>(const L&, T*, const T*, const T*, long);                                              \
  PREFIX void accumulate<L, T>(const L&, T*, const T*, long);                                                 \
  PREFIX void scale<L, T>(const L&, T*, const T*, acc_t<T>, long);                                            \
  PREFIX void add_bias<L, T>(const L&, T*, const T*, const T*, long, long, const T*);                         \
  PREFIX void gelu_fwd<L, T>(const L&, T*, const T*, long);                                                   \
  PREFIX void gelu_bwd<L, T>(const L&, T*, const T*, const T*, long);                                         \
  PREFIX void gelu_bwd_set<L, T>(const L&, T*, const T*, const T*, long);                                     \
  PREFIX void swiglu_fwd<L, T>(const L&, T*, const T*, long, long);                                           \
  PREFIX void swiglu_bwd<L, T>(const L&, T*, const T*, const T*, long, long);                                 \
  PREFIX void swiglu_bwd_set<L, T>(const L&, T*, const T*, const T*, long, long);                             \
  PREFIX void adamw<L, float, T>(const L&, float*, const T*, float*, float*, T*, long, double, double, double, \
                                   double, double, long, double);                                               \
  PREFIX void layernorm_fwd<L, T>(const L&, T*, float*, float*, const T*, const T*, const T*, long, long,     \
                                    float);                                                                     \
  PREFIX void layernorm_bwd_dx<L, T>(const L&, T*, const T*, const T*, const T*, const float*, const float*,  \
                                       long, long);                                                             \
  PREFIX void layernorm_bwd_wb<L, T>(const L&, T*, T*, const T*, const T*, const float*, const float*, long,  \
                                       long, float*);                                                           \
  PREFIX void softmax_fwd<L, T>(const L&, T*, const T*, long, long, float, bool, bf16*);                      \
  PREFIX void softmax_fwd_rect<L, T>(const L&, T*, const T*, long, long, long, float, bf16*);                 \
  PREFIX void softmax_bwd<false, L, T>(const L&, T*, const T*, const T*, long, long, float, bf16*, bf16*);    \
  PREFIX void softmax_bwd<true, L, T>(const L&, T*, const T*, const T*, long, long, float, bf16*, bf16*);     \
  PREFIX void cross_entropy_fwd<L, T>(const L&, T*, float*, const T*, const int32_t*, long, long);            \
  PREFIX void ce_shard_max<L, T>(const L&, float*, const T*, long, long);                                     \
  PREFIX void ce_shard_expsum<L, T>(const L&, float*, float*, const T*, const float*, const int32_t*, long,    \
                                      long, long);                                                              \
  PREFIX void ce_shard_normalize<L, T>(const L&, T*, const T*, const float*, const float*, long, long);       \
  PREFIX void cross_entropy_bwd<false, L, T>(const L&, T*, const T*, const int32_t*, long, long, long, float); \
  PREFIX void cross_entropy_bwd<true, L, T>(const L&, T*, const T*, const int32_t*, long, long, long, float);  \
  PREFIX void bias_bwd<L, T>(const L&, T*, const T*, long, long, float*);                                     \
  PREFIX void gelu_fwd16<L, T>(const L&, bf16*, bf16*, const T*, long);                                      \
  PREFIX void bias_bwd16<L, T>(const L&, T*, bf16*, const T*, long, long, float*);                            \
  PREFIX void gelu_bwd_bias16<L, T>(const L&, bf16*, T*, const bf16*, const T*, long, long, float*);          \
  PREFIX void sum_squares<L, T>(const L&, double*, double*, const T*, long);                                  \
  PREFIX void fp8_quantize<L, T>(const L&, double*, double*, T*, const T*, long, acc_t<T>, int);              \
  PREFIX void embedding_fwd<L, T>(const L&, T*, const int32_t*, const T*, const T*, long, long, long, long,   \
                                    long, long);                                                                \
  PREFIX void embedding_bwd<L, T>(const L&, T*, T*, const T*, const int32_t*, long, long, long, long, long); \
  PREFIX void moe_route<L, T>(const L&, T*, int32_t*, T*, int32_t*, double*, const T*, long, long, long, long, int); \
  PREFIX void moe_route_bwd<L, T>(const L&, T*, double*, const T*, const int32_t*, const T*, long, long, long, long, \
                                    int, float);                                                                \
  PREFIX void moe_dispatch<L, T>(const L&, T*, const T*, const int32_t*, long, long, long, long);             \
  PREFIX void moe_dispatch_bwd<L, T>(const L&, T*, const T*, const int32_t*, long, long, long);               \
  PREFIX void moe_combine<L, T>(const L&, T*, const T*, const int32_t*, const T*, long, long, long);          \
  PREFIX void moe_combine_bwd<L, T>(const L&, T*, T*, const T*, const T*, const int32_t*, const T*, long, long, \
                                      long);
