// backend_emu_moe: the emu backend's mixture-of-experts ops (router, dispatch, combine and their backwards) on
// the kernels of exec/kernels/k_moe.hpp, launched as the CUDA backend launches them
// (exec/kernels/cuda/backend_cuda_moe.cu), so the code the emulator runs in CI is the code a GPU runs. The
// router's scratch (choices, per-expert statistics) is host memory here, device scratch on cuda.
// Invariants: as backend_emu.cpp — every argument is checked with need() before any work.
#include <cstdint>
#include <vector>

#include "exec/backends/emu/backend_emu.hpp"
#include "exec/kernels/k_moe.hpp"

namespace tp::exec::emu_be {
namespace {

namespace K = tp::kernels;

template <class T>
double moe_route(T* probs, int32_t* slot, T* gate, const T* logits, long N, long E, long k, long cap, int renorm) {
  const char* op = "moe_route";
  need(op, "probs", probs, sz<T>(N * E));
  need(op, "slot", slot, sz<int32_t>(N * k));
  need(op, "gate", gate, sz<T>(N * k));
  need(op, "logits", logits, sz<T>(N * E));
  if (N <= 0 || E <= 0) return 0.0;
  std::vector<int32_t> choice(static_cast<size_t>(N * k));
  std::vector<double> stats(static_cast<size_t>(2 * E + 1));
  K::moe_route(launcher(), probs, slot, gate, choice.data(), stats.data(), logits, N, E, k, cap, renorm);
  return stats[static_cast<size_t>(2 * E)];
}
template <class T>
void moe_route_bwd(T* dlogits, const T* probs, const int32_t* slot, const T* dgate, long N, long E, long k, long cap,
                   int renorm, T aux_weight) {
  const char* op = "moe_route_bwd";
  need(op, "dlogits", dlogits, sz<T>(N * E));
  need(op, "probs", probs, sz<T>(N * E));
  need(op, "slot", slot, sz<int32_t>(N * k));
  need(op, "dgate", dgate, sz<T>(N * k));
  if (N <= 0 || E <= 0) return;
  std::vector<double> base(static_cast<size_t>(E));
  K::moe_route_bwd(launcher(), dlogits, base.data(), probs, slot, dgate, N, E, k, cap, renorm, aux_weight);
}
template <class T>
void moe_dispatch(T* out, const T* x, const int32_t* slot, long N, long k, long C, long rows) {
  need("moe_dispatch", "out", out, sz<T>(rows * C));
  need("moe_dispatch", "x", x, sz<T>(N * C));
  need("moe_dispatch", "slot", slot, sz<int32_t>(N * k));
  if (rows * C > 0) K::moe_dispatch(launcher(), out, x, slot, N, k, C, rows);
}
template <class T>
void moe_dispatch_bwd(T* dx, const T* dout, const int32_t* slot, long N, long k, long C) {
  need("moe_dispatch_bwd", "dx", dx, sz<T>(N * C));
  need("moe_dispatch_bwd", "slot", slot, sz<int32_t>(N * k));
  if (N > 0) need("moe_dispatch_bwd", "dout", dout, sizeof(T));
  if (N * C > 0) K::moe_dispatch_bwd(launcher(), dx, dout, slot, N, k, C);
}
template <class T>
void moe_combine(T* y, const T* ein, const int32_t* slot, const T* gate, long N, long k, long C) {
  need("moe_combine", "y", y, sz<T>(N * C));
  need("moe_combine", "slot", slot, sz<int32_t>(N * k));
  need("moe_combine", "gate", gate, sz<T>(N * k));
  if (N > 0) need("moe_combine", "ein", ein, sizeof(T));
  if (N * C > 0) K::moe_combine(launcher(), y, ein, slot, gate, N, k, C);
}
template <class T>
void moe_combine_bwd(T* dein, T* dgate, const T* dy, const T* ein, const int32_t* slot, const T* gate, long N, long k,
                     long C) {
  const char* op = "moe_combine_bwd";
  need(op, "dgate", dgate, sz<T>(N * k));
  need(op, "dy", dy, sz<T>(N * C));
  need(op, "slot", slot, sz<int32_t>(N * k));
  need(op, "gate", gate, sz<T>(N * k));
  if (N > 0) { need(op, "dein", dein, sizeof(T)); need(op, "ein", ein, sizeof(T)); }
  if (N * k > 0) K::moe_combine_bwd(launcher(), dein, dgate, dy, ein, slot, gate, N, k, C);
}

}  // namespace

template <class T>
void set_moe_ops(OpTable<T>& t) {
  t.moe_route = &moe_route<T>;
  t.moe_route_bwd = &moe_route_bwd<T>;
  t.moe_dispatch = &moe_dispatch<T>;
  t.moe_dispatch_bwd = &moe_dispatch_bwd<T>;
  t.moe_combine = &moe_combine<T>;
  t.moe_combine_bwd = &moe_combine_bwd<T>;
}
template void set_moe_ops<float>(OpTable<float>&);
template void set_moe_ops<double>(OpTable<double>&);

}  // namespace tp::exec::emu_be
