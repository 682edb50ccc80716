// exec/backends/: what the ops run on. ops.def is the op list (signatures and contracts, an X-macro file); ops.hpp
// (the op interface the model is written against, declared from it) dispatches through
// the current Backend (this file: memory, copies, streams, one op table per dtype); cpu/ (Eigen), emu/ (the
// kernels on the CPU block emulator, also as emu-device) and cuda/ (the loader of libtrainplan_cuda.so, whose
// sources are exec/kernels/cuda/) fill it. It uses kernels/ and prof/; comm/, model/ and runtime/ use it.
// backend: the executor's compute device as a value chosen at run time (`trainplan run --backend cpu|emu|cuda`).
// A Backend is a plain table: device and pinned-host memory, copies between host and device, streams and
// events, and the op table (one per dtype) that exec/backends/ops.hpp dispatches through. The model (gpt.cpp,
// gpt2d.cpp) and the runtime (runtime*.cpp, chunk_store.cpp) read and write tensor data only through these ops
// and copies, and allocate it through alloc. Where the runtime needs tensor data on the host (communication,
// checkpoint files, chunked offload's host side) it stages it when host_accessible is false (docs/cuda.md).
// Invariants:
//  - Backends are immutable tables; several live in one process. The CURRENT backend (the one ops:: calls
//    use) is per thread, set with BackendScope (RAII, nests), and is the CPU backend by default.
//  - Memory rule for communication: Comm (exec/comm/comm.hpp) takes HOST pointers. On a backend with
//    host_accessible == true (cpu, emu) device memory is host memory and is passed as is; on a device backend
//    (cuda, emu-device) the runtime stages through pinned host buffers around every call (staged_comm).
//  - Op contracts (shapes, overwrite-vs-accumulate, aliasing) are those of exec/backends/ops.def; every backend's
//    table implements all of them (no null entries: tests/exec/test_backend_ops.cpp checks).
//  - Streams and events are handles; on the CPU every call is synchronous and they are trivial.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "exec/backends/ops.hpp"

namespace tp::exec {

using ops::CeForm;

// A parenthesised argument list of ops.def without its parentheses (the tables that call a bridge per op).
#define TP_OP_UNPAREN(...) __VA_ARGS__

// The op table of one dtype: one entry per op of exec/backends/ops.def, with exactly the signature of the ops::
// function of the same name (whose contract ops.def writes).
template <class T>
struct OpTable {
#define TP_OP(RET, NAME, PARAMS, ARGS) RET(*NAME) PARAMS = nullptr;
#include "exec/backends/ops.def"
};

enum class CopyKind { host_to_device = 0, device_to_host = 1, device_to_device = 2, host_to_host = 3 };
struct Stream { void* handle = nullptr; };  // null: the backend's default stream
struct Event { void* handle = nullptr; };

struct Backend {
  const char* name = "";       // "cpu", "emu", "cuda"
  bool host_accessible = true;  // device memory is host memory (comm, checkpoints may take device pointers)
  // True when p points into this backend's device memory, which host code must not read (only meaningful
  // when !host_accessible; null on host-accessible backends). Pinned host memory (alloc_pinned) is not device
  // memory: host code reads it, and ops may also take it (mapped, as CUDA's unified addressing allows).
  bool (*is_device_ptr)(const void* p) = nullptr;
  // Device memory (aligned for any scalar type; alloc(0) may return null; null when out of memory) and pinned
  // host memory. Buf (exec/model/gpt.hpp) allocates every tensor buffer through alloc / free.
  void* (*alloc)(size_t bytes) = nullptr;
  void (*free)(void* p) = nullptr;
  void* (*alloc_pinned)(size_t bytes) = nullptr;
  void (*free_pinned)(void* p) = nullptr;
  // bytes from src to dst (no overlap), ordered on `s` (synchronous on the CPU).
  void (*copy)(void* dst, const void* src, size_t bytes, CopyKind kind, Stream s) = nullptr;
  Stream (*stream_create)() = nullptr;
  void (*stream_destroy)(Stream) = nullptr;
  void (*stream_sync)(Stream) = nullptr;
  Event (*event_create)() = nullptr;
  void (*event_destroy)(Event) = nullptr;
  void (*event_record)(Event, Stream) = nullptr;
  void (*stream_wait)(Stream, Event) = nullptr;  // work queued on the stream after this waits for the event
  void (*sync)() = nullptr;                      // every stream of the backend
  // The device's clock (validate's step times on a device, as CUDA events time them): timer_create makes an event
  // that can be timed (freed by event_destroy); elapsed_s gives the seconds between two of them recorded on one
  // stream, once both have completed (after a synchronisation). Null: no device clock (the host's is the step's).
  Event (*timer_create)() = nullptr;
  double (*elapsed_s)(Event start, Event end) = nullptr;
  // The high-water mark of device memory allocated by this backend (tensors, its scratch and GEMM workspace),
  // in bytes; null on host-accessible backends, whose peak is the process's resident memory.
  double (*peak_device_bytes)() = nullptr;
  // bf16 GEMM operands (training.precision "bf16"), per calling thread: while on, every GEMM of this backend's
  // ops (matmul, linear_fwd, attention, MoE's experts) takes its two operands rounded to bf16 (nearest even,
  // exec/kernels/k_fp8.hpp bf16_round) and accumulates in the table's type (fp32, or fp64 for the oracle);
  // tensors stay in that type. Returns the previous setting. Set it with Bf16GemmScope.
  bool (*set_bf16_gemm)(bool on) = nullptr;
  // Which attention runs the bf16-storage flash ops (flash_attention_fwd16 / bwd16) where the backend has a choice:
  // on, a library's fused attention where it is loaded and accepts the shape (cuda: cuDNN's SDPA,
  // exec/kernels/cuda/fused_attention.hpp), the backend's own kernels elsewhere; off, always the own kernels. Returns
  // the previous setting. Null on backends without a choice (cpu, emu). The library's stats are the pair (lse, 1).
  bool (*set_attention_library)(bool on) = nullptr;
  // A steady training step captured once and replayed as a graph (CUDA graphs: exec/runtime/step_graph.hpp); null
  // where the backend cannot capture (cpu, emu). Between capture_begin and capture_end the ops and the Stream{}
  // device-to-device copies are RECORDED, not run; an op that reads a value back, a copy to or from the host, a
  // synchronisation, an event or work on another stream throws (naming it) and the caller abandons the capture.
  // Memory while capturing and while a graph lives follows exec/backends/graph_pool.hpp.
  //  capture_begin: false with `why` set when the backend cannot capture now (cuda: TP_CUDA_PROFILE). Callers use
  //  capture_graph below, not the pair directly.
  //  capture_end: keep = false abandons the capture (returns null); else the graph, or null with `why` set.
  //  graph_launch: queues the graph's work on Stream{}, after the work queued before it.
  //  graph_destroy: frees the graph (after its launches have run); its pool returns to the backend.
  bool (*capture_begin)(char* why, size_t why_size) = nullptr;
  void* (*capture_end)(bool keep, char* why, size_t why_size) = nullptr;
  void (*graph_launch)(void* graph) = nullptr;
  void (*graph_destroy)(void* graph) = nullptr;
  // The device this process runs on ("device 0 of 8 (NVIDIA H100 80GB HBM3)") and its memory in bytes; "" and 0
  // on host-accessible backends. Messages (exec/runtime/device_oom.cpp) name it beside the scenario's GPU.
  const char* device = "";
  double device_bytes = 0;
  OpTable<float> f32{};
  OpTable<double> f64{};

  template <class T>
  const OpTable<T>& ops() const;
};
template <>
inline const OpTable<float>& Backend::ops<float>() const { return f32; }
template <>
inline const OpTable<double>& Backend::ops<double>() const { return f64; }

// Sets b's bf16 GEMM operands to `on` on this thread for the scope's lifetime, then restores the previous setting.
struct Bf16GemmScope {
  Bf16GemmScope(const Backend& b, bool on) : be(&b), prev(b.set_bf16_gemm(on)) {}
  ~Bf16GemmScope() { be->set_bf16_gemm(prev); }
  Bf16GemmScope(const Bf16GemmScope&) = delete;
  Bf16GemmScope& operator=(const Bf16GemmScope&) = delete;
  const Backend* be;
  bool prev;
};

// ops::linear_fwd as its three ops on backend Be() (the CPU and emu backends, which fuse nothing).
template <const Backend& (*Be)(), class T>
void composed_linear_fwd(T* y, T* pre, const T* x, const uint16_t* x16, const T* w, const uint16_t* w16, const T* b,
                         long M, long N, long K) {
  const OpTable<T>& t = Be().template ops<T>();
  T* z = pre ? pre : y;
  if (x16 || w16) t.matmul16(z, x, x16, w, w16, M, N, K, false, false, T(1), T(0));
  else t.matmul(z, x, w, M, N, K, false, false, T(1), T(0));
  if (b) t.add_bias(z, z, b, M, N, nullptr);
  if (pre) t.gelu_fwd(y, pre, M * N);
}

// The CPU backend (exec/backends/cpu/backend_cpu.cpp): host memory, synchronous, Eigen GEMMs and plain loops.
const Backend& cpu_backend();
// The emu backend (exec/backends/emu/backend_emu.cpp): the kernels of exec/kernels/ on the CPU block emulator, GEMMs
// on the CPU backend, every op's pointers checked against its registry of allocations (docs/kernels.md).
const Backend& emu_backend();
// The emu backend with device memory the host cannot read (host_accessible == false), backend "emu-device"
// (exec/backends/emu/backend_emu_device.cpp): tensor allocations are handles into an address range mapped
// PROT_NONE; ops and the backend's copies translate them, and host code that reads or writes one dies with
// SIGSEGV and a message naming the address. It runs the executor under a GPU's memory rules without a GPU.
const Backend& emu_device_backend();
// The CUDA backend, dlopened from libtrainplan_cuda.so (exec/backends/cuda/cuda_loader.cpp: load_cuda_backend), or
// null with `why` set when this binary lacks it, the library does not load or there is no device.
const Backend* cuda_backend(std::string& why);
// True when `b` is not host-accessible and p lies in its device memory (the runtime's staging decisions).
inline bool on_device(const Backend& b, const void* p) { return !b.host_accessible && b.is_device_ptr && b.is_device_ptr(p); }
// region() captured on b as a graph (b.capture_begin, then region, then b.capture_end; a region that throws abandons the
// capture, which ran nothing): the graph, or null with `why` set (also when b cannot capture). The one way to capture.
void* capture_graph(const Backend& b, const std::function<void()>& region, std::string& why);
// The same backend with alloc / free taken from its pinned host memory (alloc_pinned / free_pinned): a
// BackendScope over it makes Buf containers of pinned host memory that the backend's ops also accept.
const Backend& pinned_variant(const Backend& b);

// The backends compiled into this binary, "cpu" first, then "emu" (the list tests loop over).
std::vector<const Backend*> available_backends();
// The backend named `name` (also "emu-device"), or null with `why` set: "backend cuda is not built in this version" for a known
// backend that this binary lacks, or an unknown-name message listing cpu|emu|cuda.
const Backend* find_backend(const std::string& name, std::string& why);

// The current backend of this thread (ops:: dispatch through it); the CPU backend unless a scope set another.
const Backend& current_backend();
// Makes `b` current on this thread for the scope's lifetime, then restores the previous one.
struct BackendScope {
  explicit BackendScope(const Backend& b);
  ~BackendScope();
  BackendScope(const BackendScope&) = delete;
  BackendScope& operator=(const BackendScope&) = delete;
  const Backend* prev;
};

}  // namespace tp::exec
