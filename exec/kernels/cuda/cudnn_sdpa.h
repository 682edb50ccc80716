/* cudnn_sdpa.h: the C ABI of libtrainplan_cudnn.so, cuDNN's fused scaled-dot-product attention (SDPA, through the
   cudnn-frontend graph API) for the CUDA backend's bf16-storage flash attention (exec/backends/ops.hpp flash_attention_fwd16 /
   bwd16). libtrainplan_cuda.so dlopens this library (fused_attention.cpp); when it or cuDNN cannot be loaded, or
   cuDNN refuses a shape, the backend runs its own flash kernels instead.
   Layouts (bf16 storage, exec/backends/ops.hpp): q row stride ldq (>= H*D), k and v row stride ldkv (>= Hkv*D), a token's heads
   side by side in its row; out [B, Tq, H, D] contiguous; causal mask aligned bottom-right (query i attends keys
   j <= i + Tk - Tq). lse [B, H, Tq] fp32: each query row's log-sum-exp of its scaled scores (max + log sum exp(s - max)),
   natural log; the backend stores it in ops' stats as the pair (lse, 1). dq, dk, dv bf16 in the layouts of q, k, v
   (strides ldq, ldkv), overwritten; dout bf16 [B, Tq, H, D].
   Invariants: one graph pair (forward and backward) per shape, built once and cached; a shape is accepted only when
   both build, so a forward run by cuDNN always has a cuDNN backward. Every entry returns TP_SDPA_OK, TP_SDPA_REFUSED
   (cuDNN does not support the shape: run the own kernels) or TP_SDPA_ERROR, with the reason in why. */
#ifndef TP_CUDNN_SDPA_H
#define TP_CUDNN_SDPA_H
#include <stddef.h>

#ifndef TP_SDPA_API
#define TP_SDPA_API __attribute__((visibility("default")))
#endif

#define TP_SDPA_OK 0
#define TP_SDPA_REFUSED 1
#define TP_SDPA_ERROR 2
#define TP_SDPA_ABI_VERSION 1

#ifdef __cplusplus
extern "C" {
#endif
typedef struct {
  long B, Tq, Tk, H, Hkv, D, ldq, ldkv;
  float scale; /* the scores' scale, 1 / sqrt(D) */
} tp_sdpa_shape;

TP_SDPA_API int tp_sdpa_abi_version(void);
typedef int (*tp_sdpa_abi_version_fn)(void);
/* "cuDNN 9.13.0 (frontend 1.32.0)": the cuDNN loaded at run time; needs no device. */
TP_SDPA_API void tp_sdpa_version(char* out, size_t out_size);
typedef void (*tp_sdpa_version_fn)(char*, size_t);
/* Builds (or finds) the shape's forward and backward graphs on the current device; *workspace_bytes: the larger of
   their workspaces. stream: the cudaStream_t every later call runs on. */
TP_SDPA_API int tp_sdpa_prepare(const tp_sdpa_shape* s, void* stream, size_t* workspace_bytes, char* why, size_t why_size);
typedef int (*tp_sdpa_prepare_fn)(const tp_sdpa_shape*, void*, size_t*, char*, size_t);
TP_SDPA_API int tp_sdpa_fwd(const tp_sdpa_shape* s, void* out16, float* lse, const void* q16, const void* k16,
                            const void* v16, void* workspace, char* why, size_t why_size);
typedef int (*tp_sdpa_fwd_fn)(const tp_sdpa_shape*, void*, float*, const void*, const void*, const void*, void*, char*,
                              size_t);
TP_SDPA_API int tp_sdpa_bwd(const tp_sdpa_shape* s, void* dq16, void* dk16, void* dv16, const void* dout16,
                            const void* out16, const float* lse, const void* q16, const void* k16, const void* v16,
                            void* workspace, char* why, size_t why_size);
typedef int (*tp_sdpa_bwd_fn)(const tp_sdpa_shape*, void*, void*, void*, const void*, const void*, const float*,
                              const void*, const void*, const void*, void*, char*, size_t);
#ifdef __cplusplus
}
#endif
#endif
