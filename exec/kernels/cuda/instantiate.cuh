// instantiate: the kernels the CUDA backend's own ops call (exec/backends/ops.def TP_OWN_OP: the GEMMs' empty-product
// and epilogue fallbacks, attention's softmax, flash attention in fp32 and bf16 storage, the casts), as one macro.
// kernels.cu expands it with PREFIX = `template` (the explicit instantiations: with the bridges of every other op,
// instantiated there from ops.def, the only place nvcc compiles device code); backend_cuda_ops.cu expands it with
// PREFIX = `extern template`, so the backend calls those instantiations without compiling the kernels a second time.
// Needs cuda_launch.cuh and kernels.hpp first.
#pragma once

namespace tp::kernels {
using L = CudaLauncher;
}  // namespace tp::kernels

#define TP_CUDA_INSTANTIATE(PREFIX)                                                                                  \
  PREFIX void fill<L, float>(const L&, float*, float, long);                                                         \
  PREFIX void scale<L, float>(const L&, float*, const float*, float, long);                                          \
  PREFIX void add_bias<L, float>(const L&, float*, const float*, const float*, long, long, const float*);            \
  PREFIX void gelu_fwd<L, float>(const L&, float*, const float*, long);                                              \
  PREFIX void copy<L, bf16, float>(const L&, bf16*, const float*, long);                                             \
  PREFIX void copy<L, float, bf16>(const L&, float*, const bf16*, long);                                             \
  PREFIX void softmax_fwd<L, float>(const L&, float*, const float*, long, long, float, bool, bf16*);                  \
  PREFIX void softmax_fwd_rect<L, float>(const L&, float*, const float*, long, long, long, float, bf16*);             \
  PREFIX void softmax_bwd<true, L, float>(const L&, float*, const float*, const float*, long, long, float, bf16*,     \
                                          bf16*);                                                                    \
  PREFIX void flash_attention_fwd<L, float>(const L&, float*, float*, const float*, const float*, const float*, long, \
                                            long, long, long, long, long, long, long, bool);                         \
  PREFIX void flash_attention_bwd<L, float>(const L&, float*, float*, float*, const float*, const float*,             \
                                            const float*, const float*, const float*, const float*, long, long,      \
                                            long, long, long, long, long, long, bool, float*, bool);                 \
  PREFIX void flash_attention_fwd<L, float, bf16>(const L&, bf16*, float*, const bf16*, const bf16*, const bf16*,     \
                                                  long, long, long, long, long, long, long, long, bool);             \
  PREFIX void flash_attention_bwd<L, float, bf16>(const L&, float*, float*, float*, const float*, const bf16*,       \
                                                  const float*, const bf16*, const bf16*, const bf16*, long, long,   \
                                                  long, long, long, long, long, long, bool, float*, bool);
