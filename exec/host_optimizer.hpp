// host_optimizer: ZeRO-Offload for the executor (plan.offload "optimizer", Ren et al. 2021, as the simulator
// costs it): the master copy of the rank's own parameter ranges (its ZeRO slices, or everything without ZeRO),
// their Adam moments and the Adam step live in host memory; each step the reduced, clipped gradients of the own
// ranges go device -> host, the CPU Adam updates the master copy, and the updated parameters go host -> device.
// Invariants: host buffers are laid out like the runtime's optimizer state (own range k at own_off[k], padded
// slices); master equals the device parameters after every step (the executor trains in one precision, so the
// master copy is that precision); every copy goes through the backend (CopyKind) and is counted.
#pragma once
#include <vector>

#include "exec/backend.hpp"
#include "exec/cpu/ops_cpu.hpp"

namespace tp::exec {

template <class T>
struct HostOptimizer {
  std::vector<T> master, grad, m1, m2;  // host memory, own_off layout
  double h2d_bytes = 0, d2h_bytes = 0;  // this step's copies

  void init(long long state) {
    master.assign((size_t)state, T(0));
    grad.assign((size_t)state, T(0));
    m1.assign((size_t)state, T(0));
    m2.assign((size_t)state, T(0));
  }
  // master[off, off + n) = device parameters (after init, a checkpoint load or a delink).
  void pull(const T* dev, long long off, long long n) {
    current_backend().copy(master.data() + off, dev, sizeof(T) * (size_t)n, CopyKind::device_to_host, Stream{});
  }
  // One own range's Adam step on the host: gradients down, CPU Adam on the master copy, parameters up.
  void step(T* dev_param, const T* dev_grad, long long off, long long n, T lr, T b1, T b2, T eps, T wd, long t) {
    const Backend& be = current_backend();
    const size_t bytes = sizeof(T) * (size_t)n;
    be.copy(grad.data() + off, dev_grad, bytes, CopyKind::device_to_host, Stream{});
    ops::cpu::adamw<T>(master.data() + off, grad.data() + off, m1.data() + off, m2.data() + off, (long)n, lr, b1, b2,
                       eps, wd, t);
    be.copy(dev_param, master.data() + off, bytes, CopyKind::host_to_device, Stream{});
    d2h_bytes += (double)bytes;
    h2d_bytes += (double)bytes;
  }
};

}  // namespace tp::exec
