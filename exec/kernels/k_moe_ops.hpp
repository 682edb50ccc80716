// k_moe_ops: the mixture-of-experts ops of exec/backends/ops.hpp (router, dispatch, combine and their backwards)
// bridged onto the kernels of k_moe.hpp once, for every backend that launches kernels: the emu backend compiles it
// with g++ for the CPU block emulator (exec/backends/emu/backend_emu.cpp's table), the CUDA library with nvcc
// (exec/kernels/cuda/kernels.cu), so the bridge the emulator checks in CI is the bridge a GPU runs.
// A backend gives a runner (k_runner.hpp).
// Invariants: every check runs before any kernel; the router's scratch is its statistics [2E + 1] doubles then
// its choices [N k] int32 (the kernels write every element they read).
#pragma once
#include <cstddef>
#include <cstdint>

#include "exec/kernels/k_moe.hpp"
#include "exec/kernels/k_runner.hpp"

namespace tp::kernels {

template <class R, class T>
double moe_route_op(const R& r, T* probs, int32_t* slot, T* gate, const T* logits, long N, long E, long k, long cap,
                    int renorm) {
  const char* op = "moe_route";
  double aux = 0;
  r.run(op, {{"N", N}, {"E", E}, {"k", k}, {"cap", cap}, {"renorm", renorm}}, [&] {
    r.check(op, "probs", probs, bytes_of<T>(N * E));
    r.check(op, "slot", slot, bytes_of<int32_t>(N * k));
    r.check(op, "gate", gate, bytes_of<T>(N * k));
    r.check(op, "logits", logits, bytes_of<T>(N * E));
    if (N <= 0 || E <= 0) return;
    double* stats = static_cast<double*>(r.scratch(sizeof(double) * size_t(2 * E + 1) + sizeof(int32_t) * size_t(N * k)));
    int32_t* choice = reinterpret_cast<int32_t*>(stats + 2 * E + 1);
    moe_route(r.launch(), probs, slot, gate, choice, stats, logits, N, E, k, cap, renorm);
    aux = r.read_back(stats + 2 * E);
  });
  return aux;
}

template <class R, class T>
void moe_route_bwd_op(const R& r, T* dlogits, const T* probs, const int32_t* slot, const T* dgate, long N, long E, long k,
                      long cap, int renorm, T aux_weight) {
  const char* op = "moe_route_bwd";
  r.run(op, {{"N", N}, {"E", E}, {"k", k}, {"cap", cap}, {"renorm", renorm}}, [&] {
    r.check(op, "dlogits", dlogits, bytes_of<T>(N * E));
    r.check(op, "probs", probs, bytes_of<T>(N * E));
    r.check(op, "slot", slot, bytes_of<int32_t>(N * k));
    r.check(op, "dgate", dgate, bytes_of<T>(N * k));
    if (N <= 0 || E <= 0) return;
    double* base = static_cast<double*>(r.scratch(sizeof(double) * size_t(E)));
    moe_route_bwd(r.launch(), dlogits, base, probs, slot, dgate, N, E, k, cap, renorm, aux_weight);
  });
}

template <class R, class T>
void moe_dispatch_op(const R& r, T* out, const T* x, const int32_t* slot, long N, long k, long C, long rows) {
  const char* op = "moe_dispatch";
  r.run(op, {{"N", N}, {"k", k}, {"C", C}, {"rows", rows}}, [&] {
    r.check(op, "out", out, bytes_of<T>(rows * C));
    r.check(op, "x", x, bytes_of<T>(N * C));
    r.check(op, "slot", slot, bytes_of<int32_t>(N * k));
    if (rows * C > 0) moe_dispatch(r.launch(), out, x, slot, N, k, C, rows);
  });
}

template <class R, class T>
void moe_dispatch_bwd_op(const R& r, T* dx, const T* dout, const int32_t* slot, long N, long k, long C) {
  const char* op = "moe_dispatch_bwd";
  r.run(op, {{"N", N}, {"k", k}, {"C", C}}, [&] {
    r.check(op, "dx", dx, bytes_of<T>(N * C));
    r.check(op, "slot", slot, bytes_of<int32_t>(N * k));
    if (N > 0) r.check(op, "dout", dout, sizeof(T));
    if (N * C > 0) moe_dispatch_bwd(r.launch(), dx, dout, slot, N, k, C);
  });
}

template <class R, class T>
void moe_combine_op(const R& r, T* y, const T* ein, const int32_t* slot, const T* gate, long N, long k, long C) {
  const char* op = "moe_combine";
  r.run(op, {{"N", N}, {"k", k}, {"C", C}}, [&] {
    r.check(op, "y", y, bytes_of<T>(N * C));
    r.check(op, "slot", slot, bytes_of<int32_t>(N * k));
    r.check(op, "gate", gate, bytes_of<T>(N * k));
    if (N > 0) r.check(op, "ein", ein, sizeof(T));
    if (N * C > 0) moe_combine(r.launch(), y, ein, slot, gate, N, k, C);
  });
}

template <class R, class T>
void moe_combine_bwd_op(const R& r, T* dein, T* dgate, const T* dy, const T* ein, const int32_t* slot, const T* gate,
                        long N, long k, long C) {
  const char* op = "moe_combine_bwd";
  r.run(op, {{"N", N}, {"k", k}, {"C", C}}, [&] {
    r.check(op, "dgate", dgate, bytes_of<T>(N * k));
    r.check(op, "dy", dy, bytes_of<T>(N * C));
    r.check(op, "slot", slot, bytes_of<int32_t>(N * k));
    r.check(op, "gate", gate, bytes_of<T>(N * k));
    if (N > 0) { r.check(op, "dein", dein, sizeof(T)); r.check(op, "ein", ein, sizeof(T)); }
    if (N * k > 0) moe_combine_bwd(r.launch(), dein, dgate, dy, ein, slot, gate, N, k, C);
  });
}

}  // namespace tp::kernels
