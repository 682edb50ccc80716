// backend_cuda: the CUDA Backend (exec/backends/backend.hpp) inside libtrainplan_cuda.so — one GPU per process (rank),
// picked by local rank; device and pinned memory, copies, streams and events; the fp32 op table with every
// non-GEMM op through the kernels of exec/kernels/ (generic __global__ of cuda_launch.cuh) and every matmul,
// including attention's, through cuBLASLt (gemm_lt.hpp). The fp64 table reports "not supported on cuda".
// Plain C++ (g++, CUDA runtime API only): the op tables with their kernel launches are backend_cuda_ops.cu.
// Invariants:
//  - All ops run in order on the backend's stream (g.stream); Stream{} means that stream. Copies on it are
//    synchronous (the host may read or reuse the buffer when copy returns); copies on another stream are not.
//  - Ops that return a value (cross-entropy loss, sum of squares) synchronise the stream to read it back.
//  - Every error throws std::runtime_error naming the op and its shapes; TP_CUDA_SYNC=1 synchronises after
//    each op so an asynchronous fault is blamed on the op that caused it. Out of memory: alloc returns null
//    after printing the bytes asked and the bytes free.
//  - Tensor memory is cached: a freed block is reused by a later alloc of its size (dev_alloc below), so a
//    training step calls neither cudaMalloc nor cudaFree; TP_CUDA_CACHE=0 turns it off.
//  - TP_CUDA_PROFILE times every op (op_profile.hpp).
//  - A step captured as a CUDA graph (capture_begin .. graph_destroy): stream capture of g.stream in relaxed mode;
//    memory by exec/backends/graph_pool.hpp (no cudaFree while capturing; the buffers the backend replaces, its
//    scratch and cuBLASLt's operand copies, are retired while a graph lives, freed after); a read-back, a host copy, a
//    synchronisation or another stream's work while capturing throws before reaching CUDA.
//  - Ops without a kernel yet (the tensor/vocabulary-parallel shard ops) are present and throw "not supported".
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <stdexcept>
#include <algorithm>
#include <string>
#include <unordered_map>
#include <vector>

#include "exec/backends/backend.hpp"
#include "exec/backends/graph_pool.hpp"
#include "exec/kernels/cuda/backend_cuda_parts.hpp"
#include "exec/kernels/cuda/cuda_backend.h"
#include "exec/kernels/cuda/fused_attention.hpp"
#include "exec/kernels/cuda/gemm_lt.hpp"
#include "exec/kernels/cuda/op_profile.hpp"

namespace tp::cuda {

State g;
thread_local int t_device = -1;

void enter() {
  if (t_device != g.device) {
    cudaSetDevice(g.device);
    t_device = g.device;
  }
}

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess)
    throw std::runtime_error(std::string("cuda: ") + what + ": " + cudaGetErrorName(e) + ": " + cudaGetErrorString(e));
}

void after_op() {
  if (!g.sync_each || g.capturing) return;  // (a captured op's fault shows at its graph's launch, which syncs)
  check(cudaStreamSynchronize(g.stream), "after the op (TP_CUDA_SYNC=1)");
  check(cudaGetLastError(), "after the op (TP_CUDA_SYNC=1)");
}

// Bytes allocated now and at most; sizes of the live tensor allocations (their frees carry no size); the graph pool
// and the retired buffers (freed when no graph is left).
namespace {
std::mutex g_mem_m;
double g_mem_now = 0, g_mem_peak = 0;
std::unordered_map<void*, size_t> g_live;
exec::GraphPool g_pool;
std::vector<std::pair<void*, size_t>> g_retired;
double peak_device_bytes() {
  std::lock_guard<std::mutex> lk(g_mem_m);
  return g_mem_peak;
}
}  // namespace
void note_device_alloc(size_t bytes) {
  std::lock_guard<std::mutex> lk(g_mem_m);
  g_mem_now += double(bytes);
  g_mem_peak = std::max(g_mem_peak, g_mem_now);
}
void note_device_free(size_t bytes) {
  std::lock_guard<std::mutex> lk(g_mem_m);
  g_mem_now -= double(bytes);
}

void refuse_in_capture(const char* what) {
  if (g.capturing)
    throw std::runtime_error(std::string("cuda: ") + what +
                             " inside a captured step (a graph replays device work only: no read-backs, host copies, "
                             "synchronisations or other streams)");
}

void retire_or_free(void* p, size_t bytes, bool sync_first) {
  if (!p) return;
  {
    std::lock_guard<std::mutex> lk(g_mem_m);
    if (g_pool.busy()) {
      g_retired.emplace_back(p, bytes);
      return;
    }
  }
  if (sync_first) check(cudaStreamSynchronize(g.stream), "freeing a backend buffer");
  check(cudaFree(p), "freeing a backend buffer");
  note_device_free(bytes);
}

void* scratch(size_t bytes) {
  if (bytes <= g.scratch_bytes) return g.scratch;
  if (g.scratch) retire_or_free(g.scratch, g.scratch_bytes, false);
  g.scratch = nullptr;
  g.scratch_bytes = 0;
  if (cudaMalloc(&g.scratch, bytes) != cudaSuccess) {
    cudaGetLastError();
    size_t fr = 0, tot = 0;
    cudaMemGetInfo(&fr, &tot);
    throw std::runtime_error("cuda: out of memory for a scratch buffer: asked " + std::to_string(bytes) +
                             " bytes, " + std::to_string(fr) + " of " + std::to_string(tot) + " bytes free");
  }
  g.scratch_bytes = bytes;
  note_device_alloc(bytes);
  return g.scratch;
}

namespace {

// ---- memory, copies, streams, events ----

// Tensor memory is cached (as the frameworks' allocators do): a freed block goes to a free list by size and a
// later allocation of the same rounded size (or up to 1/8 larger) reuses it, so a training step makes no
// cudaMalloc / cudaFree calls (cudaFree synchronises the whole device, which left the GPU idle while the host
// launched the next ops). Safe because every op and every copy of the runtime runs on the one stream g.stream
// (Stream{}): work queued after the reuse runs after the work queued before the free. TP_CUDA_CACHE=0 turns it
// off. peak_device_bytes counts live tensors (cached free blocks are not tensors); a cudaMalloc that fails
// first returns the cached blocks to the device and tries again.
constexpr size_t kRound = 512;
bool g_cache_on = true;
// TP_CUDA_MEMORY_BUDGET (`trainplan run --gpu-memory-budget BYTES`): a smaller GPU, emulated. An allocation that would
// take the live tensors past it fails as a full device does (the runtime's out-of-memory message); 0: the device.
double memory_budget_bytes() {
  static const double b = [] {
    const char* e = std::getenv("TP_CUDA_MEMORY_BUDGET");
    return e && *e ? std::atof(e) : 0.0;
  }();
  return b;
}
std::multimap<size_t, void*> g_free_blocks;  // rounded size -> block (under g_mem_m)

void release_cached() {
  std::lock_guard<std::mutex> lk(g_mem_m);
  for (auto& [sz, p] : g_free_blocks) cudaFree(p);
  g_free_blocks.clear();
}

void* dev_alloc(size_t bytes) {
  if (bytes == 0) return nullptr;
  enter();
  size_t size = (bytes + kRound - 1) / kRound * kRound;
  void* p = nullptr;
  if (const double budget = memory_budget_bytes(); budget > 0) {
    std::lock_guard<std::mutex> lk(g_mem_m);
    if (g_mem_now + double(size) > budget) {
      std::fprintf(stderr, "cuda: out of memory under the memory budget: asked %zu bytes, %.0f of %.0f bytes in use\n",
                   bytes, g_mem_now, budget);
      return nullptr;
    }
  }
  bool capturing = false;
  {  // while capturing: the graph pool's free blocks first (exec/backends/graph_pool.hpp), then the cache
    std::lock_guard<std::mutex> lk(g_mem_m);
    capturing = g_pool.capturing();
    size_t got = 0;
    if (void* q = g_pool.take(size, size + size / 8, &got)) {
      size = got, p = q;
    } else if (g_cache_on) {
      auto it = g_free_blocks.lower_bound(size);
      if (it != g_free_blocks.end() && it->first <= size + size / 8) {
        size = it->first, p = it->second;
        g_free_blocks.erase(it);
      }
    }
  }
  cudaError_t e = p ? cudaSuccess : cudaMalloc(&p, size);
  if (e != cudaSuccess && g_cache_on && !capturing) {  // (no cudaFree while capturing)
    cudaGetLastError();
    release_cached();
    e = cudaMalloc(&p, size);
  }
  if (e == cudaSuccess) {
    note_device_alloc(size);
    std::lock_guard<std::mutex> lk(g_mem_m);
    g_live[p] = size;
    g_pool.adopt(p);
    return p;
  }
  cudaGetLastError();
  size_t fr = 0, tot = 0;
  cudaMemGetInfo(&fr, &tot);
  std::fprintf(stderr, "cuda: out of memory on device %d: asked %zu bytes, %zu of %zu bytes free\n", g.device, bytes,
               fr, tot);
  return nullptr;
}
// Frees never throw: they run in destructors, also at exit after the runtime may be unloading. A failure
// (usually a sticky error of an earlier fault) is printed once per kind.
void report_free_error(cudaError_t e, const char* what) {
  if (e == cudaSuccess || e == cudaErrorCudartUnloading) return;
  static bool told = false;
  if (!told) std::fprintf(stderr, "cuda: %s failed: %s: %s\n", what, cudaGetErrorName(e), cudaGetErrorString(e));
  told = true;
}
void dev_free(void* p) {
  if (!p) return;
  enter();
  size_t bytes = 0;
  bool kept = false;
  {
    std::lock_guard<std::mutex> lk(g_mem_m);
    if (auto it = g_live.find(p); it != g_live.end()) bytes = it->second, g_live.erase(it);
    kept = bytes && g_pool.keep(p, bytes);  // a captured graph may still use it
    if (g_cache_on && bytes && !kept) g_free_blocks.emplace(bytes, p);
  }
  if (!kept && (!g_cache_on || !bytes)) report_free_error(cudaFree(p), "cudaFree");
  note_device_free(bytes);
}
void* pinned_alloc(size_t bytes) {
  if (bytes == 0) return nullptr;
  enter();
  void* p = nullptr;
  if (cudaMallocHost(&p, bytes) == cudaSuccess) return p;
  cudaGetLastError();
  std::fprintf(stderr, "cuda: cudaMallocHost failed: asked %zu bytes of pinned host memory\n", bytes);
  return nullptr;
}
void pinned_free(void* p) {
  if (!p) return;
  enter();
  report_free_error(cudaFreeHost(p), "cudaFreeHost");
}
cudaStream_t stream_of(exec::Stream s) { return s.handle ? static_cast<cudaStream_t>(s.handle) : g.stream; }

const char* kind_name(exec::CopyKind k) {
  static const char* names[4] = {"host to device", "device to host", "device to device", "host to host"};
  return names[int(k) & 3];
}
bool is_device_ptr(const void* p) {
  cudaPointerAttributes a{};
  if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
    (void)cudaGetLastError();  // (a host pointer of an old driver: not an error to keep)
    return false;
  }
  return a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged;
}

void copy_bytes(void* dst, const void* src, size_t bytes, exec::CopyKind kind, exec::Stream s) {
  if (bytes == 0) return;
  enter();
  if (g.capturing && s.handle) refuse_in_capture("a copy on another stream");
  if (g.capturing && kind != exec::CopyKind::device_to_device) refuse_in_capture("a copy to or from the host");
  // cudaMemcpyDefault: unified addressing infers the direction from the pointers, so a "host" side that is
  // pinned memory another backend scope allocated, or a pinned buffer used as device memory (chunked offload's
  // host flat buffers), is copied right; `kind` names the copy in errors (and is what the emu backends check).
  const cudaStream_t st = stream_of(s);
  const cudaError_t e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, st);
  if (e != cudaSuccess)
    check(e, ("copy of " + std::to_string(bytes) + " bytes (" + kind_name(kind) + ")").c_str());
  if (!s.handle && !g.capturing) check(cudaStreamSynchronize(st), "synchronising a copy");
}
exec::Stream stream_create() {
  enter();
  cudaStream_t s = nullptr;
  check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
  return exec::Stream{s};
}
void stream_destroy(exec::Stream s) {
  if (s.handle) report_free_error(cudaStreamDestroy(static_cast<cudaStream_t>(s.handle)), "cudaStreamDestroy");
}
void stream_sync(exec::Stream s) {
  enter();
  refuse_in_capture("a stream synchronisation");
  check(cudaStreamSynchronize(stream_of(s)), "cudaStreamSynchronize");
}
exec::Event event_create() {
  enter();
  cudaEvent_t e = nullptr;
  check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate");
  return exec::Event{e};
}
exec::Event timer_create() {  // (timing on: cudaEventElapsedTime)
  enter();
  cudaEvent_t e = nullptr;
  check(cudaEventCreate(&e), "cudaEventCreate (timing)");
  return exec::Event{e};
}
double elapsed_s(exec::Event a, exec::Event b) {
  enter();
  float ms = 0;
  check(cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(a.handle), static_cast<cudaEvent_t>(b.handle)),
        "cudaEventElapsedTime");
  return double(ms) * 1e-3;
}
void event_destroy(exec::Event e) {
  if (e.handle) report_free_error(cudaEventDestroy(static_cast<cudaEvent_t>(e.handle)), "cudaEventDestroy");
}
void event_record(exec::Event e, exec::Stream s) {
  enter();
  refuse_in_capture("an event record");
  check(cudaEventRecord(static_cast<cudaEvent_t>(e.handle), stream_of(s)), "cudaEventRecord");
}
void stream_wait(exec::Stream s, exec::Event e) {
  enter();
  refuse_in_capture("a stream wait");
  check(cudaStreamWaitEvent(stream_of(s), static_cast<cudaEvent_t>(e.handle), 0), "cudaStreamWaitEvent");
}
void sync_all() {
  enter();
  refuse_in_capture("a device synchronisation");
  check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  check(cudaGetLastError(), "cudaDeviceSynchronize");
}

// ---- a captured step (CUDA graphs) ----

// The pool's free blocks back to the cache (or the device), and the retired buffers freed, once no graph is left.
void release_pool() {
  std::vector<std::pair<void*, size_t>> blocks, retired;
  {
    std::lock_guard<std::mutex> lk(g_mem_m);
    blocks = g_pool.release();
    if (!g_pool.busy()) retired.swap(g_retired);
    for (const auto& [p, bytes] : blocks)
      if (g_cache_on) g_free_blocks.emplace(bytes, p);
  }
  if (!g_cache_on)
    for (const auto& [p, bytes] : blocks) report_free_error(cudaFree(p), "cudaFree");
  for (const auto& [p, bytes] : retired) report_free_error(cudaFree(p), "cudaFree"), note_device_free(bytes);
}
bool capture_begin(char* why, size_t why_size) {
  enter();
  const char* no = g.capturing       ? "a capture is already running"
                   : prof::enabled() ? "TP_CUDA_PROFILE times every op with synchronisations"
                                     : nullptr;
  if (no) return std::snprintf(why, why_size, "%s", no), false;
  const cudaError_t e = cudaStreamBeginCapture(g.stream, cudaStreamCaptureModeRelaxed);
  if (e != cudaSuccess) {
    cudaGetLastError();
    return std::snprintf(why, why_size, "cudaStreamBeginCapture: %s", cudaGetErrorString(e)), false;
  }
  {
    std::lock_guard<std::mutex> lk(g_mem_m);
    g_pool.begin_capture();
  }
  g.capturing = true;
  return true;
}
void* capture_end(bool keep, char* why, size_t why_size) {
  enter();
  if (!g.capturing) return std::snprintf(why, why_size, "no capture is running"), nullptr;
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  cudaError_t e = cudaStreamEndCapture(g.stream, &graph);
  g.capturing = false;
  if (e == cudaSuccess && keep) e = cudaGraphInstantiate(&exec, graph, 0);
  if (graph) cudaGraphDestroy(graph);
  const bool made = e == cudaSuccess && keep && exec;
  if (!made) {
    if (e != cudaSuccess) std::snprintf(why, why_size, "%s: %s", cudaGetErrorName(e), cudaGetErrorString(e));
    else std::snprintf(why, why_size, "the capture was abandoned");
    cudaGetLastError();
  }
  {
    std::lock_guard<std::mutex> lk(g_mem_m);
    g_pool.end_capture(made);
  }
  release_pool();
  return made ? static_cast<void*>(exec) : nullptr;
}
void graph_launch(void* graph) {
  enter();
  refuse_in_capture("a graph launch");
  check(cudaGraphLaunch(static_cast<cudaGraphExec_t>(graph), g.stream), "cudaGraphLaunch");
  after_op();
}
void graph_destroy(void* graph) {
  if (!graph) return;
  enter();
  report_free_error(cudaStreamSynchronize(g.stream), "synchronising before a graph's destruction");
  report_free_error(cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(graph)), "cudaGraphExecDestroy");
  {
    std::lock_guard<std::mutex> lk(g_mem_m);
    g_pool.graph_destroyed();
  }
  release_pool();
}

std::string device_name(int d) {
  cudaDeviceProp p{};
  if (cudaGetDeviceProperties(&p, d) != cudaSuccess) return "?";
  return p.name;
}
double device_total_bytes(int d) {
  cudaDeviceProp p{};
  if (cudaGetDeviceProperties(&p, d) != cudaSuccess) return 0;
  return double(p.totalGlobalMem);
}

// Creates the process's backend on device local_rank % count; status and why as in cuda_backend.h.
const exec::Backend* create(int local_rank, int& status, std::string& why) {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n == 0) {
    status = TP_CUDA_CREATE_NO_DEVICE;
    why = e != cudaSuccess ? "no CUDA device: cudaGetDeviceCount returned " + std::to_string(int(e)) + " (" +
                                 cudaGetErrorName(e) + ": " + cudaGetErrorString(e) + ")"
                           : std::string("no CUDA device: cudaGetDeviceCount found 0");
    cudaGetLastError();
    return nullptr;
  }
  g.device = (local_rank < 0 ? 0 : local_rank) % n;
  t_device = -1;
  enter();
  check(cudaStreamCreateWithFlags(&g.stream, cudaStreamNonBlocking), "creating the backend stream");
  const char* ws = std::getenv("TP_CUDA_WORKSPACE_MB");
  lt_init(g.stream, size_t(ws ? std::atol(ws) : 32) << 20);
  const char* se = std::getenv("TP_CUDA_SYNC");
  g.sync_each = se && std::string(se) == "1";
  const char* cc = std::getenv("TP_CUDA_CACHE");
  g_cache_on = !(cc && std::string(cc) == "0");
  prof::init_from_env();
  static exec::Backend b;
  b.name = "cuda";
  b.host_accessible = false;
  b.is_device_ptr = is_device_ptr;
  b.alloc = dev_alloc;
  b.free = dev_free;
  b.alloc_pinned = pinned_alloc;
  b.free_pinned = pinned_free;
  b.copy = copy_bytes;
  b.stream_create = stream_create;
  b.stream_destroy = stream_destroy;
  b.stream_sync = stream_sync;
  b.event_create = event_create;
  b.event_destroy = event_destroy;
  b.event_record = event_record;
  b.stream_wait = stream_wait;
  b.sync = sync_all;
  b.timer_create = timer_create;
  b.elapsed_s = elapsed_s;
  b.peak_device_bytes = peak_device_bytes;
  b.capture_begin = capture_begin;
  b.capture_end = capture_end;
  b.graph_launch = graph_launch;
  b.graph_destroy = graph_destroy;
  b.set_bf16_gemm = lt_set_bf16;
  b.set_attention_library = [](bool on) {
    return attention_choice().set_mode(on ? AttentionMode::library : AttentionMode::own) == AttentionMode::library;
  };
  fill_f32_table(b.f32);
  fill_f64_unsupported(b.f64);
  g.description = "device " + std::to_string(g.device) + " of " + std::to_string(n) + " (" + device_name(g.device) + ")";
  b.device = g.description.c_str();  // g lives as long as the library
  b.device_bytes = device_total_bytes(g.device);
  if (memory_budget_bytes() > 0) b.device_bytes = std::min(b.device_bytes, memory_budget_bytes());
  status = TP_CUDA_CREATE_OK;
  return &b;
}

}  // namespace
}  // namespace tp::cuda

extern "C" const void* tp_cuda_backend_create(int local_rank, int* status, char* why, size_t why_size) {
  static std::mutex mu;
  static const tp::exec::Backend* made = nullptr;
  std::lock_guard<std::mutex> lock(mu);
  int st = TP_CUDA_CREATE_OK;
  std::string msg;
  if (!made) {
    try {
      made = tp::cuda::create(local_rank, st, msg);
    } catch (const std::exception& e) {
      st = TP_CUDA_CREATE_ERROR;
      msg = e.what();
    }
  }
  if (made) msg = "cuda " + tp::cuda::g.description;
  if (status) *status = made ? TP_CUDA_CREATE_OK : st;
  if (why && why_size) std::snprintf(why, why_size, "%s", msg.c_str());
  return made;
}

extern "C" int tp_cuda_abi_version(void) { return TP_CUDA_ABI_VERSION; }
