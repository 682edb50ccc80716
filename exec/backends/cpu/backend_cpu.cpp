// backend_cpu: the CPU backend's table (exec/backends/backend.hpp) — host memory from the C++ heap (device and
// "pinned" memory are the same), memcpy copies, synchronous trivial streams and events, and the ops of exec/backends/cpu/.
// Invariants: the table is a constant built once; nothing in it holds state, so any number of threads and
// other backends may use it at once.
#include <cstring>
#include <new>

#include "exec/backends/backend.hpp"
#include "exec/backends/cpu/ops_cpu.hpp"

namespace tp::exec {
namespace {

// The C++ heap, exactly as std::allocator gets it (so `validate`'s tracked heap, exec/prof/prof.cpp, counts every
// tensor as before the backend existed); aligned for any scalar type.
void* cpu_alloc(size_t bytes) { return bytes == 0 ? nullptr : ::operator new(bytes, std::nothrow); }
void cpu_free(void* p) { ::operator delete(p); }
void cpu_copy(void* dst, const void* src, size_t bytes, CopyKind, Stream) {
  if (bytes > 0) std::memcpy(dst, src, bytes);
}
Stream cpu_stream_create() { return Stream{}; }
void cpu_stream_noop(Stream) {}
Event cpu_event_create() { return Event{}; }
void cpu_event_destroy(Event) {}
void cpu_event_record(Event, Stream) {}
void cpu_stream_wait(Stream, Event) {}
void cpu_sync() {}

template <class T>
OpTable<T> cpu_ops() {
  OpTable<T> t{};
#define TP_OP(RET, NAME, PARAMS, ARGS) t.NAME = &ops::cpu::NAME<T>;
#include "exec/backends/ops.def"
  return t;
}

Backend make_cpu_backend() {
  Backend b;
  b.name = "cpu";
  b.host_accessible = true;
  b.alloc = &cpu_alloc;
  b.free = &cpu_free;
  b.alloc_pinned = &cpu_alloc;
  b.free_pinned = &cpu_free;
  b.copy = &cpu_copy;
  b.stream_create = &cpu_stream_create;
  b.stream_destroy = &cpu_stream_noop;
  b.stream_sync = &cpu_stream_noop;
  b.event_create = &cpu_event_create;
  b.event_destroy = &cpu_event_destroy;
  b.event_record = &cpu_event_record;
  b.stream_wait = &cpu_stream_wait;
  b.sync = &cpu_sync;
  b.set_bf16_gemm = &ops::cpu::set_bf16_gemm;
  b.f32 = cpu_ops<float>();
  b.f64 = cpu_ops<double>();
  return b;
}

}  // namespace

const Backend& cpu_backend() {
  static const Backend b = make_cpu_backend();
  return b;
}

}  // namespace tp::exec
