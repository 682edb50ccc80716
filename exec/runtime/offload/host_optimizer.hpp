// host_optimizer: optimizer offload for the executor (plan.offload "optimizer", ZeRO-Offload, Ren et al. 2021,
// as the simulator costs it: sim/step_formulas.hpp optimizer_split / state_bytes, sim/program_build_rank.cpp
// d2h / host_adam / h2d tasks). The master copy of the rank's own parameter ranges (its ZeRO slices with
// ZeRO >= 1, else every parameter it holds), their Adam moments, a gradient buffer and the Adam step live in
// pinned host memory (Backend::alloc_pinned); the device keeps only the working parameters and gradients. Each
// step, per own range: the reduced gradients go device -> host, the CPU Adam (with the clip factor) updates the master copy,
// and the updated parameters go host -> device (before the ZeRO all-gather reads them).
// Invariants: the host buffers have the layout of the runtime's optimizer state (own range k at own_off[k],
// padded slices); after setup, a checkpoint load, a delink and every step, master equals the device parameters
// of the own ranges (the executor trains in one precision, so the master copy is that precision); every copy
// goes through the backend with its CopyKind and is counted in bytes; pinned_bytes is what this object holds.
#pragma once
#include <algorithm>
#include <cstring>
#include <new>
#include <utility>

#include "exec/backends/backend.hpp"
#include "exec/runtime/train.hpp"

namespace tp::exec {

// n elements of pinned host memory from the backend current at construction (zeroed; freed by the same one).
template <class T>
class PinnedBuf {
 public:
  PinnedBuf() = default;
  explicit PinnedBuf(long long n) : be_(&current_backend()), n_(n) {
    if (n <= 0) return;
    p_ = static_cast<T*>(be_->alloc_pinned(sizeof(T) * (size_t)n));
    if (!p_) throw std::bad_alloc();
    std::memset(static_cast<void*>(p_), 0, sizeof(T) * (size_t)n);
  }
  ~PinnedBuf() { if (p_) be_->free_pinned(p_); }
  PinnedBuf(PinnedBuf&& o) noexcept : be_(o.be_), p_(std::exchange(o.p_, nullptr)), n_(std::exchange(o.n_, 0)) {}
  PinnedBuf& operator=(PinnedBuf&& o) noexcept {
    if (this != &o) {
      if (p_) be_->free_pinned(p_);
      be_ = o.be_;
      p_ = std::exchange(o.p_, nullptr);
      n_ = std::exchange(o.n_, 0);
    }
    return *this;
  }
  PinnedBuf(const PinnedBuf&) = delete;
  PinnedBuf& operator=(const PinnedBuf&) = delete;
  T* data() { return p_; }
  const T* data() const { return p_; }
  long long size() const { return n_; }

 private:
  const Backend* be_ = nullptr;
  T* p_ = nullptr;
  long long n_ = 0;
};

template <class T>
struct HostOptimizer {
  PinnedBuf<T> master, grad, m1, m2;    // host memory, own_off layout, `state` elements each
  double h2d_bytes = 0, d2h_bytes = 0;  // this step's copies (reset by the runtime after each step)

  bool on() const { return master.size() > 0; }
  void init(long long state) {
    master = PinnedBuf<T>(state);
    grad = PinnedBuf<T>(state);
    m1 = PinnedBuf<T>(state);
    m2 = PinnedBuf<T>(state);
  }
  double pinned_bytes() const { return 4.0 * sizeof(T) * (double)master.size(); }
  // master[off, off + n) = the device parameters at dev (after setup, a checkpoint load or a delink; not counted
  // as step traffic).
  void pull(const T* dev, long long off, long long n) {
    if (n > 0) current_backend().copy(master.data() + off, dev, sizeof(T) * (size_t)n, CopyKind::device_to_host, Stream{});
  }
  // Copies the moments of slice [from, from + n) to [to, to + n) (delink: a slot takes its weight group's state).
  void copy_moments(long long to, long long from, long long n) {
    for (PinnedBuf<T>* m : {&m1, &m2}) std::copy(m->data() + from, m->data() + from + n, m->data() + to);
  }
  // One own range's Adam step on the host: gradients down, CPU Adam on the master copy (on gscale x the gradient:
  // the global-norm clip's factor, ops::adamw), parameters up.
  void step(T* dev_param, const T* dev_grad, long long off, long long n, T lr, T b1, T b2, T eps, T wd, long t,
            T gscale) {
    const Backend& be = current_backend();
    const size_t bytes = sizeof(T) * (size_t)n;
    be.copy(grad.data() + off, dev_grad, bytes, CopyKind::device_to_host, Stream{});
    d2h_bytes += (double)bytes;
    cpu_backend().ops<T>().adamw(master.data() + off, grad.data() + off, m1.data() + off, m2.data() + off, (long)n, lr, b1, b2,
                       eps, wd, t, gscale);  // the CPU's Adam (host memory whatever the backend)
    be.copy(dev_param, master.data() + off, bytes, CopyKind::host_to_device, Stream{});
    h2d_bytes += (double)bytes;
  }
};

}  // namespace tp::exec
