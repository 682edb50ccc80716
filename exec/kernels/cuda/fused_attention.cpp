// fused_attention: loads libtrainplan_cudnn.so (cudnn_sdpa.h) from the folder of libtrainplan_cuda.so itself and
// keeps the process's AttentionChoice (fused_attention.hpp). The library is loaded with RTLD_NOW, so a cuDNN that
// lacks a symbol it needs, or no cuDNN at all, is a clean "not loaded" with the loader's message, never a crash later.
// TP_CUDA_ATTENTION=own starts the choice on the own kernels (the benchmark's comparison, the selftest's both sides).
#include "exec/kernels/cuda/fused_attention.hpp"

#include <dlfcn.h>

#include <cstdlib>
#include <cstring>
#include <string>

namespace tp::cuda {
namespace {

// The folder this library was loaded from ("" when dladdr cannot say).
std::string own_folder() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&own_folder), &info) == 0 || !info.dli_fname) return "";
  std::string p = info.dli_fname;
  const size_t slash = p.rfind('/');
  return slash == std::string::npos ? "" : p.substr(0, slash + 1);
}

template <class Fn>
Fn sym(void* h, const char* name) {
  return reinterpret_cast<Fn>(dlsym(h, name));
}

}  // namespace

SdpaLibrary load_sdpa_library() {
  SdpaLibrary lib;
#ifndef TP_HAVE_CUDNN_SDPA
  lib.missing = "built without cuDNN attention: no cudnn-frontend header at build time";
  return lib;
#else
  const std::string path = own_folder() + "libtrainplan_cudnn.so";
  void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    const char* e = dlerror();
    lib.missing = "cuDNN attention not loaded: " + std::string(e ? e : path.c_str());
    return lib;
  }
  auto abi = sym<tp_sdpa_abi_version_fn>(h, "tp_sdpa_abi_version");
  auto version = sym<tp_sdpa_version_fn>(h, "tp_sdpa_version");
  if (!abi || !version || abi() != TP_SDPA_ABI_VERSION) {
    lib.missing = path + " has another C ABI version (rebuild it with this libtrainplan_cuda.so)";
    dlclose(h);
    return lib;
  }
  lib.prepare = sym<tp_sdpa_prepare_fn>(h, "tp_sdpa_prepare");
  lib.fwd = sym<tp_sdpa_fwd_fn>(h, "tp_sdpa_fwd");
  lib.bwd = sym<tp_sdpa_bwd_fn>(h, "tp_sdpa_bwd");
  char name[256] = "";
  version(name, sizeof name);
  lib.name = name;
  if (!lib.loaded()) lib.missing = path + " lacks an entry of cudnn_sdpa.h";
  return lib;  // (never unloaded: the process's choice keeps its entries)
#endif
}

AttentionChoice& attention_choice() {
  static AttentionChoice c = [] {
    const char* env = std::getenv("TP_CUDA_ATTENTION");
    const bool own = env && std::strcmp(env, "own") == 0;
    return AttentionChoice(load_sdpa_library(), own ? AttentionMode::own : AttentionMode::library);
  }();
  return c;
}

}  // namespace tp::cuda
