/* probe.h: the C ABI of libtrainplan_cuda.so's device probe (dlsym name "tp_cuda_backend_probe"). Plain C so
   the CPU program can declare the function pointer type without any CUDA header. */
#ifndef TP_CUDA_PROBE_H
#define TP_CUDA_PROBE_H
#include <stddef.h>

/* The library is built with hidden visibility; only these C entries are exported. */
#ifndef TP_CUDA_API
#define TP_CUDA_API __attribute__((visibility("default")))
#endif

#define TP_CUDA_PROBE_OK 0
#define TP_CUDA_PROBE_NO_DEVICE 1

#ifdef __cplusplus
extern "C" {
#endif
/* Returns TP_CUDA_PROBE_OK when at least one device is usable, else TP_CUDA_PROBE_NO_DEVICE; *device_count
   gets the count (0 on error); message (may be null) gets a one-line reason or summary. */
TP_CUDA_API int tp_cuda_backend_probe(int* device_count, char* message, size_t message_size);
typedef int (*tp_cuda_backend_probe_fn)(int*, char*, size_t);
#ifdef __cplusplus
}
#endif
#endif
