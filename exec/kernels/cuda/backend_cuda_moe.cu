// backend_cuda_moe: the CUDA backend's mixture-of-experts ops (router, dispatch, combine and their backwards;
// contracts in exec/backends/ops.hpp) on the kernels of exec/kernels/k_moe.hpp, launched exactly as the emu backend
// launches them (exec/backends/emu/backend_emu_moe.cpp), so the code the emulator checks in CI is the code that runs
// here. Invariants: as backend_cuda_ops.cu — everything on g.stream, an error names the op and its shapes; the
// router's scratch (choices, per-expert statistics) is the backend's device scratch, and its load-balancing loss
// is computed on the device and read back (the stream is synchronised for that one double).
#include <cstdint>
#include <initializer_list>
#include <stdexcept>
#include <string>
#include <utility>

#include "exec/kernels/cuda/backend_cuda_parts.hpp"
#include "exec/kernels/cuda_launch.cuh"
#include "exec/kernels/kernels.hpp"
#include "exec/kernels/cuda/instantiate.cuh"

namespace tp::kernels {
TP_CUDA_INSTANTIATE(extern template, float)
}  // namespace tp::kernels

namespace tp::cuda {
namespace {

namespace K = tp::kernels;
using F = float;

// Scratch: stats [2E + 1] doubles, then the choices [N k] int32.
double moe_route(F* probs, int32_t* slot, F* gate, const F* logits, long N, long E, long k, long cap, int renorm) {
  double aux = 0;
  run_op("moe_route", {{"N", N}, {"E", E}, {"k", k}, {"cap", cap}, {"renorm", renorm}}, [&] {
    if (N <= 0 || E <= 0) return;
    double* stats = static_cast<double*>(scratch(sizeof(double) * size_t(2 * E + 1) + sizeof(int32_t) * size_t(N * k)));
    int32_t* choice = reinterpret_cast<int32_t*>(stats + 2 * E + 1);
    K::moe_route(launcher(), probs, slot, gate, choice, stats, logits, N, E, k, cap, renorm);
    check(cudaMemcpyAsync(&aux, stats + 2 * E, sizeof aux, cudaMemcpyDeviceToHost, g.stream), "aux loss copy");
    check(cudaStreamSynchronize(g.stream), "aux loss read-back");
  });
  return aux;
}
void moe_route_bwd(F* dlogits, const F* probs, const int32_t* slot, const F* dgate, long N, long E, long k, long cap,
                   int renorm, F aux_weight) {
  run_op("moe_route_bwd", {{"N", N}, {"E", E}, {"k", k}, {"cap", cap}, {"renorm", renorm}}, [&] {
    if (N <= 0 || E <= 0) return;
    double* base = static_cast<double*>(scratch(sizeof(double) * size_t(E)));
    K::moe_route_bwd(launcher(), dlogits, base, probs, slot, dgate, N, E, k, cap, renorm, aux_weight);
  });
}
void moe_dispatch(F* out, const F* x, const int32_t* slot, long N, long k, long C, long rows) {
  run_op("moe_dispatch", {{"N", N}, {"k", k}, {"C", C}, {"rows", rows}}, [&] {
    if (rows * C > 0) K::moe_dispatch(launcher(), out, x, slot, N, k, C, rows);
  });
}
void moe_dispatch_bwd(F* dx, const F* dout, const int32_t* slot, long N, long k, long C) {
  run_op("moe_dispatch_bwd", {{"N", N}, {"k", k}, {"C", C}}, [&] {
    if (N * C > 0) K::moe_dispatch_bwd(launcher(), dx, dout, slot, N, k, C);
  });
}
void moe_combine(F* y, const F* ein, const int32_t* slot, const F* gate, long N, long k, long C) {
  run_op("moe_combine", {{"N", N}, {"k", k}, {"C", C}}, [&] {
    if (N * C > 0) K::moe_combine(launcher(), y, ein, slot, gate, N, k, C);
  });
}
void moe_combine_bwd(F* dein, F* dgate, const F* dy, const F* ein, const int32_t* slot, const F* gate, long N, long k,
                     long C) {
  run_op("moe_combine_bwd", {{"N", N}, {"k", k}, {"C", C}}, [&] {
    if (N * k > 0) K::moe_combine_bwd(launcher(), dein, dgate, dy, ein, slot, gate, N, k, C);
  });
}

}  // namespace

void fill_f32_moe_ops(exec::OpTable<float>& t) {
  t.moe_route = moe_route, t.moe_route_bwd = moe_route_bwd, t.moe_dispatch = moe_dispatch;
  t.moe_dispatch_bwd = moe_dispatch_bwd, t.moe_combine = moe_combine, t.moe_combine_bwd = moe_combine_bwd;
}

}  // namespace tp::cuda
