// backend_emu: the `emu` backend (`trainplan run --backend emu`) — every non-GEMM op runs as the kernels of
// exec/kernels/ on the CPU block emulator (fiber engine unless TP_EMU_ENGINE says otherwise; blocks of 32
// threads, grids of at most 8 blocks), GEMMs (matmul; attention's products, backend_emu_shard.cpp) through the
// CPU backend's functions. Device memory is host memory, but every allocation is kept in a registry: each op
// checks that every pointer it gets lies, with its whole extent, in a live emu allocation, and the backend's
// copies check that the device side of a copy does. New allocations are filled with 0xff bytes (NaN as float
// or double), and freed ones again, so a read before a write or after a free shows up in the results.
// Invariants: this file and backend_emu_shard.cpp are the only code that touch emu device memory outside the
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
#include "exec/kernels/k_bridge.hpp"
#include "exec/kernels/k_fused.hpp"

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

// ---- element-wise and row ops ----

template <class T>
void matmul(T* C, const T* A, const T* B, long M, long N, long K, bool ta, bool tb, T alpha, T beta) {
  need("matmul", "A", A, sz<T>(M * K));
  need("matmul", "B", B, sz<T>(K * N));
  need("matmul", "C", C, sz<T>(M * N));
  ops::cpu::matmul<T>(C, A, B, M, N, K, ta, tb, alpha, beta);
}
template <class T>
void matmul16(T* C, const T* A, const uint16_t* A16, const T* B, const uint16_t* B16, long M, long N, long K, bool ta,
              bool tb, T alpha, T beta) {
  if ((A == nullptr) == (A16 == nullptr) || (B == nullptr) == (B16 == nullptr))
    throw std::runtime_error("emu backend: matmul16: each operand is given exactly once (A or A16, B or B16)");
  if (A16) need("matmul16", "A16", A16, sz<uint16_t>(M * K));
  else need("matmul16", "A", A, sz<T>(M * K));
  if (B16) need("matmul16", "B16", B16, sz<uint16_t>(K * N));
  else need("matmul16", "B", B, sz<T>(K * N));
  need("matmul16", "C", C, sz<T>(M * N));
  ops::cpu::matmul16<T>(C, A, A16, B, B16, M, N, K, ta, tb, alpha, beta);
}
template <class T>
void add_bias(T* y, const T* x, const T* b, long N, long C, const T* r) {
  need("add_bias", "y", y, sz<T>(N * C));
  need("add_bias", "x", x, sz<T>(N * C));
  need("add_bias", "b", b, sz<T>(C));
  opt("add_bias", "r", r, sz<T>(N * C));
  if (N * C > 0) k::add_bias(launcher(), y, x, b, N, C, r);
}
template <class T>
void bias_bwd(T* db, const T* dy, long N, long C, uint16_t* dy16) {
  need("bias_bwd", "db", db, sz<T>(C));
  need("bias_bwd", "dy", dy, sz<T>(N * C));
  opt("bias_bwd", "dy16", dy16, sz<uint16_t>(N * C));
  if (N <= 0 || C <= 0) return;
  std::vector<k::acc_t<T>> scratch(size_t(k::column_sums_scratch(N, C)));
  if (dy16) k::bias_bwd16(launcher(), db, reinterpret_cast<k::bf16*>(dy16), dy, N, C, scratch.data());
  else k::bias_bwd(launcher(), db, dy, N, C, scratch.data());
}
template <class T>
void add(T* y, const T* a, const T* b, long n) {
  need("add", "y", y, sz<T>(n));
  need("add", "a", a, sz<T>(n));
  need("add", "b", b, sz<T>(n));
  if (n > 0) k::add(launcher(), y, a, b, n);
}
template <class T>
void accumulate(T* y, const T* x, long n) {
  need("accumulate", "y", y, sz<T>(n));
  need("accumulate", "x", x, sz<T>(n));
  if (n > 0) k::accumulate(launcher(), y, x, n);
}
template <class T>
void scale(T* y, const T* x, T s, long n) {
  need("scale", "y", y, sz<T>(n));
  need("scale", "x", x, sz<T>(n));
  if (n > 0) k::scale(launcher(), y, x, s, n);
}
template <class T>
void fill(T* y, T v, long n) {
  need("fill", "y", y, sz<T>(n));
  if (n > 0) k::fill(launcher(), y, v, n);
}
template <class T>
void copy(T* dst, const T* src, long n) {
  need("copy", "dst", dst, sz<T>(n));
  need("copy", "src", src, sz<T>(n));
  if (n > 0) k::copy(launcher(), dst, src, n);
}
template <class T>
void copy_rows(T* dst, long ds, const T* src, long ss, long rows, long cols) {
  if (rows <= 0 || cols <= 0) return;
  need("copy_rows", "dst", dst, sz<T>((rows - 1) * ds + cols));
  need("copy_rows", "src", src, sz<T>((rows - 1) * ss + cols));
  launcher()(k::CopyRows<T>{dst, src, ds, ss, rows, cols}, k::flat_dim(launcher(), rows * cols));
}
template <class T>
void pack_bf16(uint16_t* y, const T* x, long n) {
  need("pack_bf16", "y", y, sz<uint16_t>(n));
  need("pack_bf16", "x", x, sz<T>(n));
  if (n > 0) k::pack_bf16(launcher(), reinterpret_cast<k::bf16*>(y), x, n);
}
template <class T>
void unpack_bf16(T* y, const uint16_t* x, long n) {
  need("unpack_bf16", "y", y, sz<T>(n));
  need("unpack_bf16", "x", x, sz<uint16_t>(n));
  if (n > 0) k::copy(launcher(), y, reinterpret_cast<const k::bf16*>(x), n);
}
// LayerNorm forward's arguments (y of element type Y: T, or uint16_t for layernorm_fwd16).
template <class Y, class T>
void layernorm_fwd_need(const char* op, const Y* y, const T* mean, const T* rstd, const T* x, const T* w, const T* b,
                        long N, long C) {
  need(op, "y", y, sz<Y>(N * C));
  need(op, "mean", mean, sz<T>(N));
  need(op, "rstd", rstd, sz<T>(N));
  need(op, "x", x, sz<T>(N * C));
  need(op, "w", w, sz<T>(C));
  opt(op, "b", b, sz<T>(C));
}
template <class T>
void layernorm_fwd(T* y, T* mean, T* rstd, const T* x, const T* w, const T* b, long N, long C, T eps) {
  layernorm_fwd_need("layernorm_fwd", y, mean, rstd, x, w, b, N, C);
  if (N > 0 && C > 0) k::layernorm_fwd(launcher(), y, mean, rstd, x, w, b, N, C, eps);
}
template <class T>
void layernorm_fwd16(uint16_t* y16, T* mean, T* rstd, const T* x, const T* w, const T* b, long N, long C, T eps) {
  layernorm_fwd_need("layernorm_fwd16", y16, mean, rstd, x, w, b, N, C);
  if (N <= 0 || C <= 0) return;
  k::bf16* y = reinterpret_cast<k::bf16*>(y16);
  if constexpr (std::is_same_v<T, float>) {
    k::layernorm_fwd16(launcher(), y, mean, rstd, x, w, b, N, C, eps);
  } else {  // (fp64: through T, then pack_bf16's double rounding)
    std::vector<T> yt(static_cast<size_t>(N * C));
    k::layernorm_fwd(launcher(), yt.data(), mean, rstd, x, w, b, N, C, eps);
    k::pack_bf16(launcher(), y, yt.data(), N * C);
  }
}
// layernorm_bwd and layernorm_bwd16 (op): x stored as X. The kernels split it: dx by rows, dw / db by columns
// (docs/kernels.md).
template <class T, class X>
void ln_bwd(const char* op, T* dx, T* dw, T* db, const T* dy, const X* x, const T* w, const T* mean, const T* rstd,
            long N, long C) {
  need(op, "dx", dx, sz<T>(N * C));
  need(op, "dw", dw, sz<T>(C));
  opt(op, "db", db, sz<T>(C));
  need(op, "dy", dy, sz<T>(N * C));
  need(op, "x", x, sz<X>(N * C));
  need(op, "w", w, sz<T>(C));
  need(op, "mean", mean, sz<T>(N));
  need(op, "rstd", rstd, sz<T>(N));
  if (N <= 0 || C <= 0) return;
  k::layernorm_bwd_dx(launcher(), dx, dy, x, w, mean, rstd, N, C);
  std::vector<k::acc_t<T>> scratch(size_t(k::column_sums_scratch(N, C)));
  k::layernorm_bwd_wb(launcher(), dw, db, dy, x, mean, rstd, N, C, scratch.data());
}
template <class T>
void layernorm_bwd(T* dx, T* dw, T* db, const T* dy, const T* x, const T* w, const T* mean, const T* rstd, long N,
                   long C) {
  ln_bwd("layernorm_bwd", dx, dw, db, dy, x, w, mean, rstd, N, C);
}
template <class T>
void layernorm_bwd16(T* dx, T* dw, T* db, const T* dy, const uint16_t* x16, const T* w, const T* mean, const T* rstd,
                     long N, long C) {
  ln_bwd("layernorm_bwd16", dx, dw, db, dy, reinterpret_cast<const k::bf16*>(x16), w, mean, rstd, N, C);
}
template <class T>
void gelu_fwd(T* y, const T* x, long n) {
  need("gelu_fwd", "y", y, sz<T>(n));
  need("gelu_fwd", "x", x, sz<T>(n));
  if (n > 0) k::gelu_fwd(launcher(), y, x, n);
}
template <class T>
void gelu_fwd16(uint16_t* y16, uint16_t* x16, const T* x, long n) {
  need("gelu_fwd16", "y16", y16, sz<uint16_t>(n));
  need("gelu_fwd16", "x16", x16, sz<uint16_t>(n));
  need("gelu_fwd16", "x", x, sz<T>(n));
  if (n > 0) k::gelu_fwd16(launcher(), reinterpret_cast<k::bf16*>(y16), reinterpret_cast<k::bf16*>(x16), x, n);
}
template <class T>
void gelu_bwd(T* dx, const T* x, const T* dy, long n) {
  need("gelu_bwd", "dx", dx, sz<T>(n));
  need("gelu_bwd", "x", x, sz<T>(n));
  need("gelu_bwd", "dy", dy, sz<T>(n));
  if (n > 0) k::gelu_bwd(launcher(), dx, x, dy, n);
}
template <class T>
void gelu_bwd_set(T* dx, const T* x, const T* dy, long n) {
  need("gelu_bwd_set", "dx", dx, sz<T>(n));
  need("gelu_bwd_set", "x", x, sz<T>(n));
  need("gelu_bwd_set", "dy", dy, sz<T>(n));
  if (n > 0) k::gelu_bwd_set(launcher(), dx, x, dy, n);
}
template <class T>
void gelu_bwd_bias16(uint16_t* dx16, T* db, const uint16_t* x16, const T* dy, long N, long F) {
  need("gelu_bwd_bias16", "dx16", dx16, sz<uint16_t>(N * F));
  opt("gelu_bwd_bias16", "db", db, sz<T>(F));
  need("gelu_bwd_bias16", "x16", x16, sz<uint16_t>(N * F));
  need("gelu_bwd_bias16", "dy", dy, sz<T>(N * F));
  if (N <= 0 || F <= 0) return;
  std::vector<k::acc_t<T>> scratch(size_t(k::column_sums_scratch(N, F)));
  k::gelu_bwd_bias16(launcher(), reinterpret_cast<k::bf16*>(dx16), db, reinterpret_cast<const k::bf16*>(x16), dy, N,
                     F, scratch.data());
}
template <class T>
void swiglu_fwd(T* y, const T* gu, long N, long F) {
  need("swiglu_fwd", "y", y, sz<T>(N * F));
  need("swiglu_fwd", "gate_up", gu, sz<T>(2 * N * F));
  if (N * F > 0) k::swiglu_fwd(launcher(), y, gu, N, F);
}
template <class T>
void swiglu_bwd(T* dgu, const T* gu, const T* dy, long N, long F) {
  need("swiglu_bwd", "dgate_up", dgu, sz<T>(2 * N * F));
  need("swiglu_bwd", "gate_up", gu, sz<T>(2 * N * F));
  need("swiglu_bwd", "dy", dy, sz<T>(N * F));
  if (N * F > 0) k::swiglu_bwd(launcher(), dgu, gu, dy, N, F);
}
template <class T>
void swiglu_bwd_set(T* dgu, const T* gu, const T* dy, long N, long F) {
  need("swiglu_bwd_set", "dgate_up", dgu, sz<T>(2 * N * F));
  need("swiglu_bwd_set", "gate_up", gu, sz<T>(2 * N * F));
  need("swiglu_bwd_set", "dy", dy, sz<T>(N * F));
  if (N * F > 0) k::swiglu_bwd_set(launcher(), dgu, gu, dy, N, F);
}
// The kernel writes one loss per row; their sum (in double, one block) is the op's result.
template <class T>
T cross_entropy_fwd(T* probs, const T* logits, const int32_t* targets, long N, long V) {
  const char* op = "cross_entropy_fwd";
  need(op, "probs", probs, sz<T>(N * V));
  need(op, "logits", logits, sz<T>(N * V));
  need(op, "targets", targets, sz<int32_t>(N));
  if (N <= 0) return T(0);
  std::vector<T> loss(static_cast<size_t>(N));
  double total = 0;
  k::cross_entropy_fwd(launcher(), probs, loss.data(), logits, targets, N, V);
  launcher()(k::SumToDouble<T>{&total, loss.data(), N}, k::Dim{1, launcher().block, k::kReduceSlots * 8});
  return T(total);
}
template <class T>
void cross_entropy_bwd(T* dlogits, const T* probs, const int32_t* targets, long N, long V, T scale) {
  const char* op = "cross_entropy_bwd";
  need(op, "dlogits", dlogits, sz<T>(N * V));
  need(op, "probs", probs, sz<T>(N * V));
  need(op, "targets", targets, sz<int32_t>(N));
  if (N > 0 && V > 0) k::cross_entropy_bwd<false>(launcher(), dlogits, probs, targets, N, V, 0, scale);
}
template <class T>
void embedding_fwd(T* out, const int32_t* tokens, const T* wte, const T* wpe, long B, long Tn, long C) {
  const char* op = "embedding_fwd";
  need(op, "out", out, sz<T>(B * Tn * C));
  need(op, "tokens", tokens, sz<int32_t>(B * Tn));
  need(op, "wte", wte, sz<T>(C));  // the vocabulary size is not an argument: at least one row
  opt(op, "wpe", wpe, sz<T>(Tn * C));
  if (B * Tn * C > 0) k::embedding_fwd(launcher(), out, tokens, wte, wpe, B, Tn, C, 0, long(1) << 40);
}
template <class T>
void embedding_bwd(T* dwte, T* dwpe, const T* dout, const int32_t* tokens, long B, long Tn, long C) {
  const char* op = "embedding_bwd";
  opt(op, "dwte", dwte, sz<T>(C));
  opt(op, "dwpe", dwpe, sz<T>(Tn * C));
  need(op, "dout", dout, sz<T>(B * Tn * C));
  need(op, "tokens", tokens, sz<int32_t>(B * Tn));
  if (B * Tn * C > 0) k::embedding_bwd(launcher(), dwte, dwpe, dout, tokens, B, Tn, C, 0, long(1) << 40);
}
template <class T>
void adamw(T* p, const T* g, T* m, T* v, long n, T lr, T b1, T b2, T eps, T wd, long t, T gscale) {
  need("adamw", "p", p, sz<T>(n));
  need("adamw", "g", g, sz<T>(n));
  need("adamw", "m", m, sz<T>(n));
  need("adamw", "v", v, sz<T>(n));
  if (n > 0) k::adamw(launcher(), p, g, m, v, static_cast<T*>(nullptr), n, lr, b1, b2, eps, wd, t, gscale);
}
template <class T>
double sum_squares(const T* x, long n) {
  need("sum_squares", "x", x, sz<T>(n));
  if (n <= 0) return 0;
  std::vector<double> scratch(launcher().max_grid);
  double out = 0;
  k::sum_squares(launcher(), &out, scratch.data(), x, n);
  return out;
}
template <class T>
double fp8_quantize(T* y, const T* x, long n, T scale, int format) {
  need("fp8_quantize", "y", y, sz<T>(n));
  need("fp8_quantize", "x", x, sz<T>(n));
  if (n <= 0) return 0;
  std::vector<double> scratch(launcher().max_grid);
  double out = 0;
  k::fp8_quantize(launcher(), &out, scratch.data(), y, x, n, scale, format);
  return out;
}

template <class T>
OpTable<T> table() {
  OpTable<T> t{};
  t.matmul = &matmul<T>;
  t.matmul16 = &matmul16<T>;
  t.add_bias = &add_bias<T>;
  t.linear_fwd = &composed_linear_fwd<emu_backend, T>;
  t.bias_bwd = &bias_bwd<T>;
  t.add = &add<T>;
  t.accumulate = &accumulate<T>;
  t.scale = &scale<T>;
  t.fill = &fill<T>;
  t.copy = &copy<T>;
  t.copy_rows = &copy_rows<T>;
  t.pack_bf16 = &pack_bf16<T>;
  t.unpack_bf16 = &unpack_bf16<T>;
  t.layernorm_fwd = &layernorm_fwd<T>;
  t.layernorm_fwd16 = &layernorm_fwd16<T>;
  t.layernorm_bwd = &layernorm_bwd<T>;
  t.layernorm_bwd16 = &layernorm_bwd16<T>;
  t.gelu_fwd = &gelu_fwd<T>;
  t.gelu_fwd16 = &gelu_fwd16<T>;
  t.gelu_bwd = &gelu_bwd<T>;
  t.gelu_bwd_set = &gelu_bwd_set<T>;
  t.gelu_bwd_bias16 = &gelu_bwd_bias16<T>;
  t.swiglu_fwd = &swiglu_fwd<T>;
  t.swiglu_bwd = &swiglu_bwd<T>;
  t.swiglu_bwd_set = &swiglu_bwd_set<T>;
  t.cross_entropy_fwd = &cross_entropy_fwd<T>;
  t.cross_entropy_bwd = &cross_entropy_bwd<T>;
  t.embedding_fwd = &embedding_fwd<T>;
  t.embedding_bwd = &embedding_bwd<T>;
  t.adamw = &adamw<T>;
  t.sum_squares = &sum_squares<T>;
  t.fp8_quantize = &fp8_quantize<T>;
  set_moe_ops(t);    // the mixture-of-experts router, dispatch and combine (backend_emu_moe.cpp)
  set_shard_ops(t);  // the sharded ops and attention (backend_emu_shard.cpp)
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
