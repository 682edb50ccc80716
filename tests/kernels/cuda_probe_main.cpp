// cuda_probe_main: loads libtrainplan_cuda.so with dlopen (this program links no CUDA library, like the CPU
// trainplan) and calls tp_cuda_backend_probe. Passes when the library loads and the probe answers either
// "device(s) found" or "no device" with a reason (what CI, without a GPU or driver, must see).
#include <dlfcn.h>

#include <cstdio>
#include <cstring>

#include "exec/kernels/cuda/probe.h"

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s path/to/libtrainplan_cuda.so\n", argv[0]);
    return 2;
  }
  void* lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    std::fprintf(stderr, "dlopen failed: %s\n", dlerror());
    return 1;
  }
  auto probe = reinterpret_cast<tp_cuda_backend_probe_fn>(dlsym(lib, "tp_cuda_backend_probe"));
  if (!probe) {
    std::fprintf(stderr, "dlsym failed: %s\n", dlerror());
    return 1;
  }
  int n = -1;
  char msg[256] = {};
  const int st = probe(&n, msg, sizeof msg);
  std::printf("probe: status %d, devices %d: %s\n", st, n, msg);
  if (st == TP_CUDA_PROBE_OK) return n > 0 ? 0 : 1;
  if (st == TP_CUDA_PROBE_NO_DEVICE) return n == 0 && std::strncmp(msg, "no CUDA device", 14) == 0 ? 0 : 1;
  return 1;
}
