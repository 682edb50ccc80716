// backend_emu: the `emu` backend (`trainplan run --backend emu`) — every non-GEMM op runs as the kernels of
// exec/kernels/ on the CPU block emulator (fiber engine unless TP_EMU_ENGINE says otherwise; blocks of 32
// threads, grids of at most 8 blocks), GEMMs (matmul; attention's products, backend_emu_own.cpp) through the
// CPU backend's functions. Device memory is host memory, but every allocation is kept in a registry: each op
// checks that every pointer it gets lies, with its whole extent, in a live emu allocation, and the backend's
// copies check that the device side of a copy does. New allocations are filled with 0xff bytes (NaN as float
// or double), and freed ones again, so a read before a write or after a free shows up in the results. The table is
// filled from exec/backends/ops.def: every TP_OP op through its bridge (exec/kernels/k_ops.hpp) on EmuRunner, the
// GEMMs and attention from backend_emu_own.cpp.
// Invariants: this file and backend_emu_own.cpp are the only code that touch emu device memory outside the
// runtime's host-accessible paths (comm, checkpoint I/O, chunk store's compaction: exec/backends/backend.hpp; the
// emu-device backend, backend_emu_device.cpp, is this backend with those paths closed to the host); the
// registry is process-wide and mutex-guarded, so several threads (ranks of a local test) may use it at once.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <new>
#include <sstream>
#include <stdexcept>
#include <vector>

#include "exec/backends/cpu/ops_cpu.hpp"
#include "exec/backends/emu/backend_emu.hpp"
#include "exec/kernels/k_ops.hpp"

namespace tp::exec {
namespace emu_be {
namespace k = tp::kernels;

// ---- the allocation registry ----

struct Registry {
  std::mutex m;
  std::map<uintptr_t, size_t> live;  // base -> bytes
};
Registry& registry() {
  static Registry* r = new Registry;  // never destroyed: buffers may be freed during static destruction
  return *r;
}

void need(const char* op, const char* arg, const void* p, size_t bytes) {
  if (bytes == 0) return;
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  Registry& r = registry();
  {
    std::lock_guard<std::mutex> lk(r.m);
    auto it = r.live.upper_bound(a);
    if (it != r.live.begin()) {
      --it;
      if (a >= it->first && a + bytes <= it->first + it->second) return;
    }
  }
  std::ostringstream os;
  os << "emu backend: " << op << ": argument " << arg << " (" << p << ", " << bytes
     << " bytes) is not inside memory allocated by the emu backend (a host pointer, a freed buffer, or an "
        "access past the end of a buffer)";
  throw std::runtime_error(os.str());
}

void* emu_alloc(size_t bytes) {
  if (bytes == 0) return nullptr;
  void* p = ::operator new(bytes, std::nothrow);
  if (!p) return nullptr;
  std::memset(p, 0xff, bytes);
  Registry& r = registry();
  std::lock_guard<std::mutex> lk(r.m);
  r.live[reinterpret_cast<uintptr_t>(p)] = bytes;
  return p;
}
void emu_free(void* p) {
  if (!p) return;
  Registry& r = registry();
  {
    std::lock_guard<std::mutex> lk(r.m);
    auto it = r.live.find(reinterpret_cast<uintptr_t>(p));
    if (it == r.live.end()) {
      std::fprintf(stderr, "emu backend: free of %p, which the emu backend did not allocate\n", p);
      std::abort();
    }
    std::memset(p, 0xff, it->second);
    r.live.erase(it);
  }
  ::operator delete(p);
}
void* host_alloc(size_t bytes) { return bytes == 0 ? nullptr : ::operator new(bytes, std::nothrow); }
void host_free(void* p) { ::operator delete(p); }

// A copy's device side(s) must be emu memory; host sides are anything.
void emu_copy(void* dst, const void* src, size_t bytes, CopyKind kind, Stream) {
  if (bytes == 0) return;
  if (kind == CopyKind::host_to_device || kind == CopyKind::device_to_device) need("copy", "dst", dst, bytes);
  if (kind == CopyKind::device_to_host || kind == CopyKind::device_to_device) need("copy", "src", src, bytes);
  std::memcpy(dst, src, bytes);
}
Stream stream_create() { return Stream{}; }
void stream_noop(Stream) {}
Event event_create() { return Event{}; }
void event_noop(Event) {}
void event_record(Event, Stream) {}
void stream_wait(Stream, Event) {}
void sync_all() {}

const Launch& launcher() {
  static const Launch l = [] {
    if (!std::getenv("TP_EMU_ENGINE")) k::emu::set_engine(k::emu::Engine::fibers);
    Launch l;
    if (const char* b = std::getenv("TP_EMU_BLOCK")) l.block = unsigned(std::atoi(b));  // checked at launch
    if (const char* g = std::getenv("TP_EMU_GRID")) l.max_grid = unsigned(std::max(1, std::atoi(g)));
    return l;
  }();
  return l;
}

// The table: every op of exec/backends/ops.def, the kernel ops through their bridges (exec/kernels/k_ops.hpp) on
// the emu runner, the others the backend's own.
template <class T>
OpTable<T> table() {
  OpTable<T> t{};
#define TP_OP(RET, NAME, PARAMS, ARGS) \
  t.NAME = [] PARAMS -> RET { return kernels::NAME##_op(EmuRunner{}, TP_OP_UNPAREN ARGS); };
#define TP_OWN_OP(RET, NAME, PARAMS, ARGS)
#include "exec/backends/ops.def"
  set_own_ops(t);  // the GEMMs and attention (backend_emu_own.cpp)
  return t;
}

Backend make() {
  Backend b;
  b.name = "emu";
  b.host_accessible = true;  // comm, checkpoint I/O and the chunk store's host side read it as host memory
  b.alloc = &emu_alloc;
  b.free = &emu_free;
  b.alloc_pinned = &host_alloc;
  b.free_pinned = &host_free;
  b.copy = &emu_copy;
  b.stream_create = &stream_create;
  b.stream_destroy = &stream_noop;
  b.stream_sync = &stream_noop;
  b.event_create = &event_create;
  b.event_destroy = &event_noop;
  b.event_record = &event_record;
  b.stream_wait = &stream_wait;
  b.sync = &sync_all;
  b.set_bf16_gemm = &ops::cpu::set_bf16_gemm;  // every emu GEMM is the CPU backend's matmul
  b.f32 = table<float>();
  b.f64 = table<double>();
  return b;
}

}  // namespace emu_be

const Backend& emu_backend() {
  static const Backend b = emu_be::make();
  return b;
}

}  // namespace tp::exec
