// backend_emu_moe: the emu backend's mixture-of-experts ops (router, dispatch, combine and their backwards): the
// bridge of exec/kernels/k_moe_ops.hpp, which the CUDA library compiles too (exec/kernels/cuda/backend_cuda_moe.cu),
// run by the emu runner below, so the code the emulator runs in CI is the code a GPU runs. The router's scratch is
// host memory here (zero-filled), device scratch on cuda.
// Invariants: as backend_emu.cpp — every argument is checked with need() before any work.
#include <cstdint>

#include "exec/backends/emu/backend_emu.hpp"
#include "exec/kernels/k_moe_ops.hpp"

namespace tp::exec::emu_be {
namespace {

namespace K = tp::kernels;

template <class T>
double moe_route(T* probs, int32_t* slot, T* gate, const T* logits, long N, long E, long k, long cap, int renorm) {
  return K::moe_route_op(EmuRunner{}, probs, slot, gate, logits, N, E, k, cap, renorm);
}
template <class T>
void moe_route_bwd(T* dlogits, const T* probs, const int32_t* slot, const T* dgate, long N, long E, long k, long cap,
                   int renorm, T aux_weight) {
  K::moe_route_bwd_op(EmuRunner{}, dlogits, probs, slot, dgate, N, E, k, cap, renorm, aux_weight);
}
template <class T>
void moe_dispatch(T* out, const T* x, const int32_t* slot, long N, long k, long C, long rows) {
  K::moe_dispatch_op(EmuRunner{}, out, x, slot, N, k, C, rows);
}
template <class T>
void moe_dispatch_bwd(T* dx, const T* dout, const int32_t* slot, long N, long k, long C) {
  K::moe_dispatch_bwd_op(EmuRunner{}, dx, dout, slot, N, k, C);
}
template <class T>
void moe_combine(T* y, const T* ein, const int32_t* slot, const T* gate, long N, long k, long C) {
  K::moe_combine_op(EmuRunner{}, y, ein, slot, gate, N, k, C);
}
template <class T>
void moe_combine_bwd(T* dein, T* dgate, const T* dy, const T* ein, const int32_t* slot, const T* gate, long N, long k,
                     long C) {
  K::moe_combine_bwd_op(EmuRunner{}, dein, dgate, dy, ein, slot, gate, N, k, C);
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
