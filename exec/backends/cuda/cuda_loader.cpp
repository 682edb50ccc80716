// cuda_loader: dlopen of libtrainplan_cuda.so for --backend cuda, selftest and --version (cuda_loader.hpp).
#include "exec/backends/cuda/cuda_loader.hpp"

#include <dlfcn.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <mutex>
#include <string>
#include <vector>

#include "exec/kernels/cuda/cuda_backend.h"

#ifndef TRAINPLAN_WITH_CUDA
#define TRAINPLAN_WITH_CUDA 0
#endif
#ifndef TRAINPLAN_CUDA_LIB_DIR
#define TRAINPLAN_CUDA_LIB_DIR ""
#endif

namespace tp::exec {
namespace {

constexpr const char* kLib = "libtrainplan_cuda.so";

std::string program_dir() {
  char buf[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return "";
  std::string p(buf, size_t(n));
  const size_t slash = p.rfind('/');
  return slash == std::string::npos ? "" : p.substr(0, slash);
}

struct Lib {
  void* handle = nullptr;
  std::string why;  // when handle is null
};

// Opens the library once per process (thread-safe); the handle is kept for the process's lifetime.
const Lib& library() {
  static std::once_flag once;
  static Lib lib;
  std::call_once(once, [] {
    std::vector<std::string> tries;
    if (const char* env = std::getenv("TRAINPLAN_CUDA_LIB"); env && *env) tries.push_back(env);
    const std::string dir = program_dir();
    if (!dir.empty()) {
      tries.push_back(dir + "/" + kLib);
      tries.push_back(dir + "/../lib/" + kLib);
    }
    if (*TRAINPLAN_CUDA_LIB_DIR) tries.push_back(std::string(TRAINPLAN_CUDA_LIB_DIR) + "/" + kLib);
    tries.push_back(kLib);  // LD_LIBRARY_PATH and the system's search
    std::string errors;
    for (const std::string& t : tries) {
      const bool is_path = t.find('/') != std::string::npos;
      if (is_path && access(t.c_str(), F_OK) != 0) continue;
      if (void* h = dlopen(t.c_str(), RTLD_NOW | RTLD_LOCAL)) {
        lib.handle = h;
        return;
      }
      const char* e = dlerror();
      if (is_path || (e && std::string(e).find(kLib) == std::string::npos)) errors += std::string("; ") + (e ? e : t);
    }
    lib.why = "backend cuda: " + std::string(kLib) + " could not be loaded (looked beside the program, in ../lib, in " +
              (*TRAINPLAN_CUDA_LIB_DIR ? std::string(TRAINPLAN_CUDA_LIB_DIR) : std::string("-")) +
              ", and on LD_LIBRARY_PATH; set TRAINPLAN_CUDA_LIB to its path)" + errors;
  });
  return lib;
}

template <class Fn>
Fn symbol(const Lib& lib, const char* name, std::string& why) {
  void* s = dlsym(lib.handle, name);
  if (!s) why = std::string("backend cuda: ") + kLib + " has no symbol " + name + " (a library from another version?)";
  return reinterpret_cast<Fn>(s);
}

}  // namespace

int local_rank_from_env() {
  for (const char* v : {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID", "LOCAL_RANK"}) {
    const char* s = std::getenv(v);
    if (!s || !*s) continue;
    char* end = nullptr;
    errno = 0;
    const long r = std::strtol(s, &end, 10);
    if (*end == '\0' && errno == 0 && r >= 0 && r <= 1 << 20) return int(r);
  }
  return 0;
}

bool cuda_built_in() { return TRAINPLAN_WITH_CUDA != 0; }

const Backend* load_cuda_backend(CudaLoad& status, std::string& why) {
  if (!cuda_built_in()) {
    status = CudaLoad::not_built;
    why = "backend cuda is not built in this version";
    return nullptr;
  }
  const Lib& lib = library();
  status = CudaLoad::error;
  if (!lib.handle) {
    why = lib.why;
    return nullptr;
  }
  auto abi = symbol<tp_cuda_abi_version_fn>(lib, "tp_cuda_abi_version", why);
  auto create = symbol<tp_cuda_backend_create_fn>(lib, "tp_cuda_backend_create", why);
  if (!abi || !create) return nullptr;
  if (abi() != TP_CUDA_ABI_VERSION) {
    why = "backend cuda: " + std::string(kLib) + " has C ABI version " + std::to_string(abi()) + ", this program " +
          std::to_string(TP_CUDA_ABI_VERSION) + " (mixed builds)";
    return nullptr;
  }
  char msg[512] = {0};
  int st = TP_CUDA_CREATE_ERROR;
  const void* b = create(local_rank_from_env(), &st, msg, sizeof msg);
  if (b) {
    status = CudaLoad::ok;
    return static_cast<const Backend*>(b);
  }
  status = st == TP_CUDA_CREATE_NO_DEVICE ? CudaLoad::no_device : CudaLoad::error;
  why = msg;
  return nullptr;
}

const Backend* cuda_backend(std::string& why) {
  CudaLoad status;
  return load_cuda_backend(status, why);
}

const DeviceCommOps* load_nccl_ops(std::string& why) {
  if (!cuda_built_in()) {
    why = "--comm nccl: the CUDA library is not built in this version";
    return nullptr;
  }
  const Lib& lib = library();
  if (!lib.handle) {
    why = lib.why;
    return nullptr;
  }
  auto abi = symbol<tp_cuda_abi_version_fn>(lib, "tp_cuda_abi_version", why);
  if (!abi || abi() != TP_CUDA_ABI_VERSION) {
    if (abi) why = "--comm nccl: " + std::string(kLib) + " has another C ABI version (mixed builds)";
    return nullptr;
  }
  auto ops = symbol<tp_cuda_nccl_ops_fn>(lib, "tp_cuda_nccl_ops", why);
  if (!ops) return nullptr;
  char msg[512] = {0};
  const void* t = ops(msg, sizeof msg);
  if (!t) why = std::string("--comm nccl: ") + msg;
  return static_cast<const DeviceCommOps*>(t);
}

std::string cuda_versions_line() {
  if (!cuda_built_in()) return "not built in (TRAINPLAN_CUDA=OFF)";
  const Lib& lib = library();
  if (!lib.handle) return lib.why;
  std::string why;
  auto versions = symbol<tp_cuda_versions_fn>(lib, "tp_cuda_versions", why);
  if (!versions) return why;
  char buf[512] = {0};
  versions(buf, sizeof buf);
  return buf;
}

}  // namespace tp::exec
