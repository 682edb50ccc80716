/* cuda_backend.h: the C ABI of libtrainplan_cuda.so beyond the probe (probe.h). The CPU program dlsyms these
   names, so it needs no CUDA header and links no CUDA library.
   tp_cuda_backend_create: picks device local_rank % count, creates the stream, the cuBLASLt handle and the
   workspace, and returns a `const tp::exec::Backend*` (exec/backends/backend.hpp, compiled into both sides from the same
   header) as void*, or null with the reason in why (e.g. "no CUDA device: cudaGetDeviceCount returned 35 ...").
   A second call returns the same backend. TP_CUDA_CREATE_NO_DEVICE in *status means "no usable device".
   tp_cuda_versions: one line with the runtime, driver, cuBLASLt and NCCL versions (run-time values where they
   can be read without a device, compile-time ones otherwise, each marked). Needs no device.
   tp_cuda_nccl_ops: the device communicator's table on NCCL (a `const tp::exec::DeviceCommOps*`, exec/comm/
   device_comm.hpp, as void*), NCCL dlopened on first use; null with the reason in why when NCCL does not load.
   tp_cuda_nccl_version: "NCCL 2.28.3 (run time)", or why it does not load. Neither needs a device. */
#ifndef TP_CUDA_BACKEND_H
#define TP_CUDA_BACKEND_H
#include <stddef.h>

/* The library is built with hidden visibility; only these C entries are exported. */
#ifndef TP_CUDA_API
#define TP_CUDA_API __attribute__((visibility("default")))
#endif

#define TP_CUDA_CREATE_OK 0
#define TP_CUDA_CREATE_NO_DEVICE 1
#define TP_CUDA_CREATE_ERROR 2
/* The version of this C ABI: the loader refuses a library with another one. */
#define TP_CUDA_ABI_VERSION 19 // 2: Backend::is_device_ptr; 3: Backend::peak_device_bytes; 4: Backend::device, device_bytes;
                               // 5: Backend::set_bf16_gemm; 6: OpTable flash_attention_fwd / bwd, adamw gscale;
                               // 7: OpTable pack_bf16 / unpack_bf16, matmul_a16;
                               // 8: matmul16 (either operand packed) replaces matmul_a16, linear_fwd's w16;
                               // 9: linear_fwd x16; 10: OpTable flash_attention_fwd16 / bwd16, gelu_bwd_set16,
                               //     layernorm_fwd16; 11: bias_bwd's dy16, gelu_bwd_bias16 replaces gelu_bwd_set16,
                               //     gelu_fwd16, add_bias's residual, layernorm_bwd16;
                               // 12: Backend::set_attention_library (cuDNN fused attention)
                               // 13: tp_cuda_nccl_ops, tp_cuda_nccl_version (the device communicator)
                               // 14: OpTable ce_grad16
                               // 15: OpTable embedding_shard_fwd16
                               // 16: OpTable adamw_multi, sum_squares_multi
                               // 17: Backend::capture_begin / capture_end / graph_launch / graph_destroy,
                               //     OpTable cross_entropy_fwd_to
                               // 18: DeviceCommOps p2p_group (the pipeline's grouped sends and receives)
                               // 19: fp8_quantize's and matmul_fp8's scales in device memory (pointers),
                               //     DeviceCommOps all_gather async / request, Backend::timer_create / elapsed_s

#ifdef __cplusplus
extern "C" {
#endif
TP_CUDA_API const void* tp_cuda_backend_create(int local_rank, int* status, char* why, size_t why_size);
typedef const void* (*tp_cuda_backend_create_fn)(int, int*, char*, size_t);
TP_CUDA_API void tp_cuda_versions(char* out, size_t out_size);
typedef void (*tp_cuda_versions_fn)(char*, size_t);
TP_CUDA_API int tp_cuda_abi_version(void);
typedef int (*tp_cuda_abi_version_fn)(void);
TP_CUDA_API const void* tp_cuda_nccl_ops(char* why, size_t why_size);
typedef const void* (*tp_cuda_nccl_ops_fn)(char*, size_t);
TP_CUDA_API void tp_cuda_nccl_version(char* out, size_t out_size);
typedef void (*tp_cuda_nccl_version_fn)(char*, size_t);
#ifdef __cplusplus
}
#endif
#endif
