// backend: the registry of compiled-in backends and the per-thread current backend (exec/backends/backend.hpp).
// Invariants: the current backend is a thread_local pointer (null means the CPU backend), changed only by
// BackendScope, so concurrent tests on different threads can use different backends.
#include "exec/backends/backend.hpp"

#include <exception>
#include <map>
#include <mutex>

namespace tp::exec {
namespace {
thread_local const Backend* t_current = nullptr;
}  // namespace

std::vector<const Backend*> available_backends() { return {&cpu_backend(), &emu_backend()}; }

const Backend* find_backend(const std::string& name, std::string& why) {
  for (const Backend* b : available_backends())
    if (name == b->name) return b;
  if (name == "emu-device") return &emu_device_backend();
  if (name == "cuda") return cuda_backend(why);  // dlopens libtrainplan_cuda.so; null with why when no device
  why = "unknown backend \"" + name + "\" (expected cpu, emu, emu-device or cuda)";
  return nullptr;
}

void* capture_graph(const Backend& b, const std::function<void()>& region, std::string& why) {
  char msg[512] = "";
  if (!b.capture_begin) return why = std::string("backend ") + b.name + " cannot capture", nullptr;
  if (!b.capture_begin(msg, sizeof msg)) return why = msg, nullptr;
  try {
    region();
  } catch (const std::exception& e) {
    b.capture_end(false, msg, sizeof msg);
    why = e.what();
    return nullptr;
  }
  void* g = b.capture_end(true, msg, sizeof msg);
  if (!g) why = msg;
  return g;
}

const Backend& pinned_variant(const Backend& b) {
  static std::mutex m;
  static std::map<const Backend*, Backend>* made = new std::map<const Backend*, Backend>;  // never destroyed
  std::lock_guard<std::mutex> lk(m);
  auto it = made->find(&b);
  if (it == made->end()) {
    Backend v = b;
    v.alloc = b.alloc_pinned;
    v.free = b.free_pinned;
    it = made->emplace(&b, v).first;
  }
  return it->second;
}

const Backend& current_backend() { return t_current ? *t_current : cpu_backend(); }

BackendScope::BackendScope(const Backend& b) : prev(t_current) { t_current = &b; }
BackendScope::~BackendScope() { t_current = prev; }

}  // namespace tp::exec
