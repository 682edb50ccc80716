// backend_cuda_moe: the CUDA backend's mixture-of-experts ops (router, dispatch, combine and their backwards;
// contracts in exec/backends/ops.hpp): the bridge of exec/kernels/k_moe_ops.hpp onto the kernels of k_moe.hpp,
// the same code the emu backend runs (exec/backends/emu/backend_emu_moe.cpp), so the code the emulator checks in
// CI is the code that runs here. Invariants: as backend_cuda_ops.cu — everything on g.stream, an error names the op and its shapes; the
// router's scratch (choices, per-expert statistics) is the backend's device scratch, and its load-balancing loss
// is computed on the device and read back (the stream is synchronised for that one double).
#include <cstdint>
#include <initializer_list>
#include <stdexcept>
#include <string>
#include <utility>

#include "exec/kernels/cuda/backend_cuda_parts.hpp"
#include "exec/kernels/cuda_launch.cuh"
#include "exec/kernels/k_moe_ops.hpp"
#include "exec/kernels/kernels.hpp"
#include "exec/kernels/cuda/instantiate.cuh"

namespace tp::kernels {
TP_CUDA_INSTANTIATE(extern template, float)
}  // namespace tp::kernels

namespace tp::cuda {
namespace {

namespace K = tp::kernels;
using F = float;

double moe_route(F* probs, int32_t* slot, F* gate, const F* logits, long N, long E, long k, long cap, int renorm) {
  return K::moe_route_op(CudaRunner{}, probs, slot, gate, logits, N, E, k, cap, renorm);
}
void moe_route_bwd(F* dlogits, const F* probs, const int32_t* slot, const F* dgate, long N, long E, long k, long cap,
                   int renorm, F aux_weight) {
  K::moe_route_bwd_op(CudaRunner{}, dlogits, probs, slot, dgate, N, E, k, cap, renorm, aux_weight);
}
void moe_dispatch(F* out, const F* x, const int32_t* slot, long N, long k, long C, long rows) {
  K::moe_dispatch_op(CudaRunner{}, out, x, slot, N, k, C, rows);
}
void moe_dispatch_bwd(F* dx, const F* dout, const int32_t* slot, long N, long k, long C) {
  K::moe_dispatch_bwd_op(CudaRunner{}, dx, dout, slot, N, k, C);
}
void moe_combine(F* y, const F* ein, const int32_t* slot, const F* gate, long N, long k, long C) {
  K::moe_combine_op(CudaRunner{}, y, ein, slot, gate, N, k, C);
}
void moe_combine_bwd(F* dein, F* dgate, const F* dy, const F* ein, const int32_t* slot, const F* gate, long N, long k,
                     long C) {
  K::moe_combine_bwd_op(CudaRunner{}, dein, dgate, dy, ein, slot, gate, N, k, C);
}

}  // namespace

void fill_f32_moe_ops(exec::OpTable<float>& t) {
  t.moe_route = moe_route, t.moe_route_bwd = moe_route_bwd, t.moe_dispatch = moe_dispatch;
  t.moe_dispatch_bwd = moe_dispatch_bwd, t.moe_combine = moe_combine, t.moe_combine_bwd = moe_combine_bwd;
}

}  // namespace tp::cuda
