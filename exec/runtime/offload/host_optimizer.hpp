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
// Under bf16 working weights (exec/runtime/runtime_rank.hpp host_master) the master copy is the rank's record of its
// parameters and the device holds the GEMM weights only as bf16 (DeepSpeed's fp16 parameters beside the CPU's fp32
// master), as the simulator counts it: their device copies are the master's bf16 rounding; `upload` (set without ZeRO
// sharding) writes them, else the runtime all-gathers the slices step's dev_param received.
// The step is a pipeline over two copy streams with a multi-threaded host Adam (host_adam.hpp); its result is bitwise
// that of one synchronous copy, one single-threaded Adam and one copy back, whatever the block size and threads.
#pragma once
#include <algorithm>
#include <cstring>
#include <functional>
#include <new>
#include <utility>
#include <vector>

#include "exec/backends/backend.hpp"
#include "exec/runtime/offload/copy_streams.hpp"
#include "exec/runtime/offload/host_adam.hpp"
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
  PinnedBuf<uint16_t> stage16;          // bf16 working weights: the bf16 copies' host side (`state` elements)
  double h2d_bytes = 0, d2h_bytes = 0;  // this step's copies (reset by the runtime after each step)
  double early_d2h_bytes = 0;           // of d2h_bytes: sent by grads_down during the backward
  int threads = 1;                      // the host Adam's threads (host_adam.hpp host_adam_threads)
  long long block = 1LL << 22;          // elements per pipeline block (16 MiB of fp32)
  CopyStreams cs;
  // Where the updated parameters go. Unset: step's dev_param, as T. Set (bf16 working weights, the runtime's
  // host_master): master [at, at + n) to its views' device storage on stream s (the GEMM weights as bf16), returning
  // the bytes it queued; step's dev_param is then unused.
  std::function<double(long long at, long long n, Stream s)> upload;

  bool on() const { return master.size() > 0; }
  void init(long long state, int adam_threads) {
    master = PinnedBuf<T>(state);
    grad = PinnedBuf<T>(state);
    m1 = PinnedBuf<T>(state);
    m2 = PinnedBuf<T>(state);
    threads = std::max(1, adam_threads);
  }
  double pinned_bytes() const { return 4.0 * sizeof(T) * (double)master.size() + 2.0 * (double)stage16.size(); }
  // master[off, off + n) = the device parameters at dev (after setup, a checkpoint load or a delink; not counted
  // as step traffic).
  void pull(const T* dev, long long off, long long n) {
    if (n > 0) current_backend().copy(master.data() + off, dev, sizeof(T) * (size_t)n, CopyKind::device_to_host, Stream{});
  }
  // Copies the moments of slice [from, from + n) to [to, to + n) (delink: a slot takes its weight group's state).
  void copy_moments(long long to, long long from, long long n) {
    for (PinnedBuf<T>* m : {&m1, &m2}) std::copy(m->data() + from, m->data() + from + n, m->data() + to);
  }
  // One own range's Adam step on the host (on gscale x the gradient: the global-norm clip's factor, ops::adamw), as
  // a pipeline of blocks over two copy streams: block i+1's gradients go device -> host while the host Adam (over
  // `threads` threads) updates block i, whose parameters then go host -> device while the host goes on. The first
  // copy waits for the compute stream's work queued so far (the gradients); the call returns when the last
  // parameters are on the device. On the CPU (synchronous copies) it is the same sequence, one block at a time.
  // The gradients of [off, off + n) to the host now, on the copy stream after the compute queued so far (the
  // backward that finished them): the range's step then skips its copies (their bytes count here).
  void grads_down(const T* dev_grad, long long off, long long n) {
    if (n <= 0) return;
    const Backend& be = current_backend();
    cs.ensure();
    be.event_record(cs.queued, Stream{});
    be.stream_wait(cs.d2h, cs.queued);
    be.copy(grad.data() + off, dev_grad, sizeof(T) * (size_t)n, CopyKind::device_to_host, cs.d2h);
    d2h_bytes += (double)(sizeof(T) * (size_t)n);
    early_d2h_bytes += (double)(sizeof(T) * (size_t)n);
    down_early.push_back({off, n});
  }
  void step(T* dev_param, const T* dev_grad, long long off, long long n, T lr, T b1, T b2, T eps, T wd, long t,
            T gscale) {
    if (n <= 0) return;
    const Backend& be = current_backend();
    cs.ensure();
    // Already down (grads_down) when a range sent during the backward holds [off, off + n).
    const bool early = std::any_of(down_early.begin(), down_early.end(), [&](const std::pair<long long, long long>& r) {
      return r.first <= off && off + n <= r.first + r.second;
    });
    be.event_record(cs.queued, Stream{});
    be.stream_wait(cs.d2h, cs.queued);
    const long long nb = (n + block - 1) / block;
    auto len = [&](long long i) { return std::min(block, n - i * block); };
    auto down = [&](long long i) {
      if (early) return;
      const size_t bytes = sizeof(T) * (size_t)len(i);
      be.copy(grad.data() + off + i * block, dev_grad + i * block, bytes, CopyKind::device_to_host, cs.d2h);
      d2h_bytes += (double)bytes;
    };
    down(0);
    for (long long i = 0; i < nb; ++i) {
      be.stream_sync(cs.d2h);  // block i's gradients are on the host (block i+1's copy is not queued yet)
      if (i + 1 < nb) down(i + 1);
      const long long at = off + i * block;
      host_adamw(master.data() + at, grad.data() + at, m1.data() + at, m2.data() + at, (long)len(i), lr, b1, b2, eps, wd,
                 t, gscale, threads);
      if (upload) {
        h2d_bytes += upload(at, len(i), cs.h2d);
      } else {
        const size_t bytes = sizeof(T) * (size_t)len(i);
        be.copy(dev_param + i * block, master.data() + at, bytes, CopyKind::host_to_device, cs.h2d);
        h2d_bytes += (double)bytes;
      }
    }
    be.stream_sync(cs.h2d);
  }
  // After the step's last range: the ranges sent during the backward are spent.
  void end_step() {
    if (cs.be) cs.be->stream_sync(cs.d2h);  // (a range sent early but not stepped: its copy done before the next step)
    down_early.clear();
  }
  std::vector<std::pair<long long, long long>> down_early;  // (off, n) sent by grads_down this step
};

}  // namespace tp::exec
