// prof: per-op-class time accumulator and the tracked heap. See prof.hpp.
// The global operator new / delete replacements below count malloc_usable_size of each block while tracking is
// on (validate switches it on first thing); with tracking off they add one relaxed load to malloc / free.
#include "exec/prof/prof.hpp"

#include <malloc.h>

#include <atomic>
#include <cstdlib>
#include <new>

namespace tp::exec::prof {

namespace detail {
bool g_on = false;
int g_depth = 0;
void (*g_sync)() = nullptr;
}  // namespace detail

namespace {

struct Acc {
  double seconds[kClasses] = {};
  long long calls[kClasses] = {};
  int steps = 0;
};
Acc g_acc;
Cls g_comm = Cls::dp_comm;
int g_warmup = -1;

std::atomic<bool> g_track{false};
std::atomic<long long> g_live{0}, g_peak{0}, g_wpeak{0};

inline void heap_add(void* p) {
  if (!p || !g_track.load(std::memory_order_relaxed)) return;
  long long n = (long long)malloc_usable_size(p);
  long long now = g_live.fetch_add(n, std::memory_order_relaxed) + n;
  long long pk = g_peak.load(std::memory_order_relaxed);
  while (now > pk && !g_peak.compare_exchange_weak(pk, now, std::memory_order_relaxed)) {
  }
  long long wk = g_wpeak.load(std::memory_order_relaxed);
  while (now > wk && !g_wpeak.compare_exchange_weak(wk, now, std::memory_order_relaxed)) {
  }
}
inline void heap_sub(void* p) {
  if (!p || !g_track.load(std::memory_order_relaxed)) return;
  g_live.fetch_sub((long long)malloc_usable_size(p), std::memory_order_relaxed);
}

}  // namespace

void detail::add(int c, double s) {
  g_acc.seconds[c] += s;
  g_acc.calls[c] += 1;
}

const char* cls_name(Cls c) {
  switch (c) {
    case Cls::gemm: return "gemm";
    case Cls::attention: return "attention";
    case Cls::elementwise: return "elementwise";
    case Cls::optimizer: return "optimizer";
    case Cls::tp_comm: return "tp_comm";
    case Cls::pp_comm: return "pp_comm";
    case Cls::dp_comm: return "dp_comm";
  }
  return "?";
}

void set_enabled(bool on) { detail::g_on = on; }
void set_sync(void (*sync)()) { detail::g_sync = sync; }
bool enabled() { return detail::g_on; }

void reset() {
  g_acc = Acc{};
  g_peak.store(g_live.load(std::memory_order_relaxed), std::memory_order_relaxed);
}

Snapshot snapshot() {
  Snapshot s;
  for (int c = 0; c < kClasses; ++c) {
    s.seconds[c] = g_acc.seconds[c];
    s.calls[c] = g_acc.calls[c];
  }
  s.steps = g_acc.steps;
  s.heap_live_bytes = (double)g_live.load(std::memory_order_relaxed);
  s.heap_peak_bytes = (double)g_peak.load(std::memory_order_relaxed);
  return s;
}

void track_heap() { g_track.store(true, std::memory_order_relaxed); }
double heap_live_bytes() { return (double)g_live.load(std::memory_order_relaxed); }
double heap_window_peak_bytes() { return (double)g_wpeak.load(std::memory_order_relaxed); }
void heap_window_reset() { g_wpeak.store(g_live.load(std::memory_order_relaxed), std::memory_order_relaxed); }

Cls comm_class() { return g_comm; }
CommClass::CommClass(Cls c) : prev_(g_comm) { g_comm = c; }
CommClass::~CommClass() { g_comm = prev_; }

void set_warmup_steps(int w) { g_warmup = w; }
void step_begin(int step) {
  if (step == g_warmup) reset();
}
void step_end(int step) { g_acc.steps += 1; }

}  // namespace tp::exec::prof

// ---- tracked heap: global operator new / delete ------------------------------------------------------------------
namespace {
void* tracked_alloc(std::size_t n) {
  void* p = std::malloc(n ? n : 1);
  tp::exec::prof::heap_add(p);
  return p;
}
void* tracked_aligned(std::size_t n, std::size_t al) {
  void* p = nullptr;
  if (al < sizeof(void*)) al = sizeof(void*);
  if (posix_memalign(&p, al, n ? n : 1) != 0) p = nullptr;
  tp::exec::prof::heap_add(p);
  return p;
}
void tracked_free(void* p) {
  tp::exec::prof::heap_sub(p);
  std::free(p);
}
}  // namespace

void* operator new(std::size_t n) {
  if (void* p = tracked_alloc(n)) return p;
  throw std::bad_alloc();
}
void* operator new[](std::size_t n) {
  if (void* p = tracked_alloc(n)) return p;
  throw std::bad_alloc();
}
void* operator new(std::size_t n, const std::nothrow_t&) noexcept { return tracked_alloc(n); }
void* operator new[](std::size_t n, const std::nothrow_t&) noexcept { return tracked_alloc(n); }
void* operator new(std::size_t n, std::align_val_t al) {
  if (void* p = tracked_aligned(n, (std::size_t)al)) return p;
  throw std::bad_alloc();
}
void* operator new[](std::size_t n, std::align_val_t al) {
  if (void* p = tracked_aligned(n, (std::size_t)al)) return p;
  throw std::bad_alloc();
}
void* operator new(std::size_t n, std::align_val_t al, const std::nothrow_t&) noexcept {
  return tracked_aligned(n, (std::size_t)al);
}
void* operator new[](std::size_t n, std::align_val_t al, const std::nothrow_t&) noexcept {
  return tracked_aligned(n, (std::size_t)al);
}
void operator delete(void* p) noexcept { tracked_free(p); }
void operator delete[](void* p) noexcept { tracked_free(p); }
void operator delete(void* p, std::size_t) noexcept { tracked_free(p); }
void operator delete[](void* p, std::size_t) noexcept { tracked_free(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { tracked_free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { tracked_free(p); }
void operator delete(void* p, std::align_val_t) noexcept { tracked_free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { tracked_free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { tracked_free(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { tracked_free(p); }
void operator delete(void* p, std::align_val_t, const std::nothrow_t&) noexcept { tracked_free(p); }
void operator delete[](void* p, std::align_val_t, const std::nothrow_t&) noexcept { tracked_free(p); }
