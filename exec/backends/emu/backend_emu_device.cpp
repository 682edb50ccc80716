// backend_emu_device: the `emu-device` backend — the emu backend (same kernels, same checks) with tensor memory
// that host code cannot touch, as on a GPU (host_accessible == false). Every tensor allocation is a HANDLE: an
// address in one range of virtual memory reserved PROT_NONE at first use; the bytes live in an ordinary emu
// allocation that only the ops and the backend's copies reach, by translating handle + offset. Host code that
// dereferences a tensor pointer (a memcpy for MPI, a checkpoint write, std::fill, a Buf copy) faults; a SIGSEGV
// handler names the address as emu-device memory and aborts, so a forgotten host access fails a test loudly.
// Pinned host memory (alloc_pinned) is ordinary host memory that ops also accept (CUDA's mapped pinned memory).
// Streams made by stream_create are deferred queues (emu_streams.hpp): a copy on one runs only when a GPU would
// have to have run it, so a missing wait shows.
// Invariants: handles are never host-accessible; is_device_ptr(p) is "p lies in the reserved range"; a handle
// is reused only for an allocation of the same size after its free; translation of a pointer outside every live
// handle leaves it unchanged, so the emu op's registry check rejects it with the op and argument named; the
// multi-tensor ops' pointer tables are translated entry by entry. While a step is captured (emu_graph.hpp) ops and
// default-stream device copies are recorded, everything else that a CUDA stream capture refuses throws, and memory
// follows exec/backends/graph_pool.hpp: a pool block stays live (translatable) until the pool releases it.
#include <execinfo.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "exec/backends/emu/backend_emu.hpp"
#include "exec/backends/emu/emu_graph.hpp"
#include "exec/backends/emu/emu_streams.hpp"
#include "exec/backends/graph_pool.hpp"

namespace tp::exec {
namespace emu_dev {

constexpr size_t kRange = size_t(1) << 40;  // 1 TiB of address space (no memory: PROT_NONE, MAP_NORESERVE)
constexpr size_t kAlign = 256;              // cudaMalloc's alignment

struct Handles {
  std::mutex m;
  uintptr_t base = 0, next = 0;
  struct Live { uintptr_t real; size_t bytes; };
  std::map<uintptr_t, Live> live;                // handle -> its bytes
  std::multimap<size_t, uintptr_t> free_by_size;  // freed handles (reused for an allocation of the same size)
  double now_bytes = 0, peak_bytes = 0;           // live device bytes, their high-water mark
  GraphPool pool;                                 // captured steps' blocks (kept in `live` while the pool has them)
};
Handles& handles();

struct sigaction g_prev_segv;
uintptr_t g_base = 0;  // the reserved range, read by the signal handler

void on_segv(int sig, siginfo_t* si, void* ctx) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(si->si_addr);
  if (g_base && a >= g_base && a < g_base + kRange) {
    char msg[256];
    int n = std::snprintf(msg, sizeof msg,
                          "emu-device backend: host code touched device memory at %p (tensor memory is not "
                          "host-accessible on this backend: stage it through the backend's copies)\n",
                          si->si_addr);
    if (n > 0 && write(2, msg, (size_t)n) < 0) n = 0;
    void* frames[32];
    backtrace_symbols_fd(frames, backtrace(frames, 32), 2);
    signal(SIGABRT, SIG_DFL);
    abort();
  }
  // Not ours: the previous disposition (the fault repeats on return when it is the default).
  if (g_prev_segv.sa_flags & SA_SIGINFO) { g_prev_segv.sa_sigaction(sig, si, ctx); return; }
  if (g_prev_segv.sa_handler == SIG_IGN || g_prev_segv.sa_handler == SIG_DFL) { signal(SIGSEGV, SIG_DFL); return; }
  g_prev_segv.sa_handler(sig);
}

Handles& handles() {
  static Handles* h = [] {
    auto* x = new Handles;  // never destroyed (buffers may be freed during static destruction)
    void* r = mmap(nullptr, kRange, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (r == MAP_FAILED) throw std::runtime_error("emu-device backend: cannot reserve its address range");
    x->base = x->next = reinterpret_cast<uintptr_t>(r);
    g_base = x->base;
    struct sigaction sa {};
    sa.sa_sigaction = &on_segv;
    sa.sa_flags = SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGSEGV, &sa, &g_prev_segv);
    return x;
  }();
  return *h;
}

bool in_range(const void* p) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  return g_base && a >= g_base && a < g_base + kRange;
}

// Handle (or a pointer inside one, or one past its end) -> the real address; anything else unchanged.
const void* real(const void* p) {
  if (!in_range(p)) return p;
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  Handles& h = handles();
  std::lock_guard<std::mutex> lk(h.m);
  auto it = h.live.upper_bound(a);
  if (it == h.live.begin()) return p;
  --it;
  if (a > it->first + it->second.bytes) return p;  // a freed or never-allocated handle: the op's check rejects it
  return reinterpret_cast<const void*>(it->second.real + (a - it->first));
}

// The emulated device's memory: TP_EMU_DEVICE_BYTES (tests of out-of-memory handling), else the range.
double device_capacity_bytes() {
  static const double cap = [] {
    const char* e = std::getenv("TP_EMU_DEVICE_BYTES");
    return e && *e ? std::atof(e) : double(kRange);
  }();
  return cap;
}

void* dev_alloc(size_t bytes) {
  if (bytes == 0) return nullptr;
  {  // while capturing: a free block of the graph pool first (the same size, as handles are reused)
    Handles& h = handles();
    std::lock_guard<std::mutex> lk(h.m);
    size_t got = 0;
    if (void* p = h.pool.take(bytes, bytes, &got)) {
      h.now_bytes += double(bytes);
      h.peak_bytes = std::max(h.peak_bytes, h.now_bytes);
      return p;
    }
  }
  void* r = emu_be::emu_alloc(bytes);
  if (!r) return nullptr;
  Handles& h = handles();
  std::lock_guard<std::mutex> lk(h.m);
  if (h.now_bytes + double(bytes) > device_capacity_bytes()) {
    emu_be::emu_free(r);
    std::fprintf(stderr, "emu-device backend: out of memory: asked %zu bytes, %.0f of %.0f bytes in use\n", bytes,
                 h.now_bytes, device_capacity_bytes());
    return nullptr;  // as cudaMalloc's failure: the caller reports it
  }
  uintptr_t a = 0;
  auto f = h.free_by_size.find(bytes);
  if (f != h.free_by_size.end()) {
    a = f->second;
    h.free_by_size.erase(f);
  } else {
    const size_t span = (bytes + kAlign - 1) / kAlign * kAlign;
    if (h.next + span > h.base + kRange) {
      emu_be::emu_free(r);
      return nullptr;  // out of "device memory"
    }
    a = h.next;
    h.next += span;
  }
  h.live[a] = Handles::Live{reinterpret_cast<uintptr_t>(r), bytes};
  h.pool.adopt(reinterpret_cast<void*>(a));
  h.now_bytes += double(bytes);
  h.peak_bytes = std::max(h.peak_bytes, h.now_bytes);
  return reinterpret_cast<void*>(a);
}

void dev_free(void* p) {
  if (!p) return;
  void* r = nullptr;
  {
    Handles& h = handles();
    std::lock_guard<std::mutex> lk(h.m);
    auto it = h.live.find(reinterpret_cast<uintptr_t>(p));
    if (it == h.live.end()) {
      std::fprintf(stderr, "emu-device backend: free of %p, which is not a live device allocation\n", p);
      std::abort();
    }
    if (h.pool.keep(p, it->second.bytes)) {  // a captured graph may still use it: stays live, in the pool
      h.now_bytes -= double(it->second.bytes);
      return;
    }
    r = reinterpret_cast<void*>(it->second.real);
    h.free_by_size.insert({it->second.bytes, it->first});
    h.now_bytes -= double(it->second.bytes);
    h.live.erase(it);
  }
  emu_be::emu_free(r);
}

// The pool's released blocks become free handles, their bytes returned.
void pool_release(Handles& h) {
  for (const auto& [p, bytes] : h.pool.release()) {
    auto it = h.live.find(reinterpret_cast<uintptr_t>(p));
    if (it == h.live.end()) continue;
    emu_be::emu_free(reinterpret_cast<void*>(it->second.real));
    h.free_by_size.insert({it->second.bytes, it->first});
    h.live.erase(it);
  }
}
void pool_begin_capture() {
  Handles& h = handles();
  std::lock_guard<std::mutex> lk(h.m);
  h.pool.begin_capture();
}
void pool_end_capture(bool made_graph) {
  Handles& h = handles();
  std::lock_guard<std::mutex> lk(h.m);
  h.pool.end_capture(made_graph);
  pool_release(h);
}
void pool_graph_destroyed() {
  Handles& h = handles();
  std::lock_guard<std::mutex> lk(h.m);
  h.pool.graph_destroyed();
  pool_release(h);
}

bool is_device_ptr(const void* p) { return in_range(p); }

double peak_device_bytes() {
  Handles& h = handles();
  std::lock_guard<std::mutex> lk(h.m);
  return h.peak_bytes;
}

// A copy translates only its device side(s): a handle on the host side is a host access and faults, as a
// cudaMemcpy with the wrong kind fails.
// On a created stream the copy is deferred (emu_streams.cpp: it runs when the stream is synchronised or waited on).
void dev_copy(void* dst, const void* src, size_t bytes, CopyKind kind, Stream s) {
  auto copy = [dst, src, bytes, kind] {
    void* d = dst;
    const void* r = src;
    if (kind == CopyKind::host_to_device || kind == CopyKind::device_to_device) d = const_cast<void*>(real(d));
    if (kind == CopyKind::device_to_host || kind == CopyKind::device_to_device) r = real(r);
    emu_be::emu_copy(d, r, bytes, kind, Stream{});
  };
  if (emu_graph::capturing()) {
    if (s.handle) emu_graph::refuse("a copy on another stream");
    if (kind != CopyKind::device_to_device) emu_graph::refuse("a copy to or from the host");
    emu_graph::record(copy);
    return;
  }
  emu_streams::enqueue(s, copy);
}

// ---- the op table: every pointer argument translated, then the emu op (which checks it) ----

template <class U>
U* tr(U* p) {
  return static_cast<U*>(const_cast<void*>(real(p)));
}
template <class U>
const U* tr(const U* p) {
  return static_cast<const U*>(real(p));
}
template <class U>
U tr(U v) {
  return v;
}

// The bf16-GEMM setting of this thread (ops read it when they run: a recorded op runs with the one it was captured
// under).
bool bf16_setting() {
  const bool b = emu_backend().set_bf16_gemm(false);
  emu_backend().set_bf16_gemm(b);
  return b;
}

template <auto M>
struct Tr;
template <class T, class R, class... A, R (*OpTable<T>::*M)(A...)>
struct Tr<M> {
  static inline const char* name = "";
  static R call(A... a) {
    if (emu_graph::capturing()) {
      if constexpr (!std::is_void_v<R>) emu_graph::refuse(std::string("op ") + name + " (it returns a value: a read-back)");
      else {
        if (emu_graph::refused_op(name)) emu_graph::refuse(std::string("op ") + name + " (TP_EMU_GRAPH_REFUSE)");
        emu_graph::record([b16 = bf16_setting(), a...] {
          Bf16GemmScope scope(emu_backend(), b16);
          (emu_backend().ops<T>().*M)(tr(a)...);
        });
        return;
      }
    }
    return (emu_backend().ops<T>().*M)(tr(a)...);
  }
};

// The multi-tensor ops' host tables hold handles: each entry translated, into a copy of the table.
template <class P>
std::vector<P> tr_table(const P* tab, long count) {
  std::vector<P> r(size_t(count > 0 ? count : 0));
  for (size_t s = 0; s < r.size(); ++s) r[s] = tr(tab[s]);
  return r;
}
template <class T>
void adamw_multi(T* const* p, const T* const* g, T* const* m, T* const* v, const long* n, const T* wd, long count, T lr,
                 T b1, T b2, T eps, long t, T gscale) {
  if (emu_graph::capturing()) emu_graph::refuse("op adamw_multi (its pointer table is host memory)");
  const auto P = tr_table(p, count), M = tr_table(m, count), V = tr_table(v, count);
  const auto G = tr_table(g, count);
  emu_backend().ops<T>().adamw_multi(P.data(), G.data(), M.data(), V.data(), n, wd, count, lr, b1, b2, eps, t, gscale);
}
template <class T>
double sum_squares_multi(const T* const* x, const long* n, long count) {
  if (emu_graph::capturing()) emu_graph::refuse("op sum_squares_multi (it returns a value: a read-back)");
  const auto X = tr_table(x, count);
  return emu_backend().ops<T>().sum_squares_multi(X.data(), n, count);
}

template <class T>
OpTable<T> table() {
  OpTable<T> t{};
#define TP_OP(RET, NAME, PARAMS, ARGS) \
  t.NAME = &Tr<&OpTable<T>::NAME>::call;  \
  Tr<&OpTable<T>::NAME>::name = #NAME;
#include "exec/backends/ops.def"
  t.adamw_multi = &adamw_multi<T>;
  t.sum_squares_multi = &sum_squares_multi<T>;
  return t;
}

Backend make() {
  Backend b = emu_backend();
  b.name = "emu-device";
  b.host_accessible = false;
  b.is_device_ptr = &is_device_ptr;
  b.alloc = &dev_alloc;
  b.free = &dev_free;
  b.alloc_pinned = &emu_be::emu_alloc;  // host memory the emu ops accept (mapped pinned memory)
  b.free_pinned = &emu_be::emu_free;
  b.copy = &dev_copy;
  b.stream_create = &emu_streams::create;
  b.stream_destroy = &emu_streams::destroy;
  b.stream_sync = [](Stream s) {
    if (emu_graph::capturing()) emu_graph::refuse("a stream synchronisation");
    emu_streams::sync(s);
  };
  b.event_create = &emu_streams::event_create;
  b.event_destroy = &emu_streams::event_destroy;
  b.timer_create = &emu_streams::event_create;  // (every emulated event is timed: the host's clock at its record)
  b.elapsed_s = &emu_streams::elapsed_s;
  b.event_record = [](Event e, Stream s) {
    if (emu_graph::capturing()) emu_graph::refuse("an event record");
    emu_streams::record(e, s);
  };
  b.stream_wait = [](Stream s, Event e) {
    if (emu_graph::capturing()) emu_graph::refuse("a stream wait");
    emu_streams::wait(s, e);
  };
  b.sync = [] {
    if (emu_graph::capturing()) emu_graph::refuse("a device synchronisation");
    emu_streams::sync_all();
  };
  b.capture_begin = &emu_graph::capture_begin;
  b.capture_end = &emu_graph::capture_end;
  b.graph_launch = &emu_graph::graph_launch;
  b.graph_destroy = &emu_graph::graph_destroy;
  b.peak_device_bytes = &peak_device_bytes;
  b.device = "the CPU block emulator's device memory";
  b.device_bytes = device_capacity_bytes();
  b.f32 = table<float>();
  b.f64 = table<double>();
  return b;
}

}  // namespace emu_dev

const Backend& emu_device_backend() {
  static const Backend b = emu_dev::make();
  return b;
}

}  // namespace tp::exec
