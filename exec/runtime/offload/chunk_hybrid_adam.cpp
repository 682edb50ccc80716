// chunk_hybrid_adam: the chunk store's hybrid Adam (chunk_store.hpp "Hybrid Adam"): the optimizer state of the first
// chunks that fit the device's margin lives on the device from the warm-up's end (place_os, the rule of
// sim/chunk_policy.hpp hybrid_adam_chunks), their Adam runs there (device_adam) and their moments go back to the host
// before a checkpoint reads them (sync_os_to_host).
// Invariants: only bf16 slots enable it; os_at_[c] >= 0 exactly for the chunks whose state is on the device; the
// host's parameters hold the updated master after every device_adam (the fp32 reads and the bf16 packing use them);
// every copy goes through the arena's backend and counts in the Adam bytes.
#include <algorithm>

#include "exec/backends/backend.hpp"
#include "exec/runtime/offload/chunk_store.hpp"
#include "sim/chunk_policy.hpp"

namespace tp::exec {

namespace {
template <class T>
void up(T* dst, const T* src, long long n) {
  current_backend().copy(dst, src, sizeof(T) * (size_t)n, CopyKind::host_to_device, Stream{});
}
template <class T>
void down(T* dst, const T* src, long long n) {
  current_backend().copy(dst, src, sizeof(T) * (size_t)n, CopyKind::device_to_host, Stream{});
}
}  // namespace

template <class T>
void ChunkStore<T>::enable_hybrid_adam(T* host_m1, T* host_m2, double margin_ratio) {
  if (!h16_) throw std::logic_error("chunk store: hybrid Adam needs bf16 slots");
  hm1_ = host_m1, hm2_ = host_m2, hy_ratio_ = margin_ratio;
}

template <class T>
bool ChunkStore<T>::os_on_device(int view) const {
  const int t = view >= 0 && view < (int)tensor_of_view_.size() ? tensor_of_view_[view] : -1;
  return t >= 0 && os_at_[chunk_of_[t]] >= 0;
}

// At the warm-up's end: the first chunks whose state fits the margin (sim/chunk_policy.hpp) get it on the device.
template <class T>
void ChunkStore<T>::place_os() {
  double max_nonmodel = 0, chunks_bytes = 0;
  for (double b : nonmodel_) max_nonmodel = std::max(max_nonmodel, b);
  std::vector<double> caps;
  for (int c = 0; c < chunks(); ++c) chunks_bytes += chunk_bytes(c), caps.push_back((double)cap_[c]);
  const int k = hybrid_adam_chunks(caps, 3.0 * sizeof(T), budget_, max_nonmodel, chunks_bytes, hy_ratio_);
  if (k == 0) return;
  BackendScope dev(*arena_.get_deleter().be);
  long long n = 0;
  for (int c = 0; c < k; ++c) os_at_[c] = n, n += 3 * cap_[c];
  const Backend& be = current_backend();
  os_ = std::unique_ptr<char, ArenaFree>(static_cast<char*>(be.alloc(sizeof(T) * (size_t)n)), ArenaFree{&be});
  if (!os_) throw std::bad_alloc();
  os_bytes_ = (double)sizeof(T) * n;
  for (int c = 0; c < k; ++c)
    for (int t : tensors_of_[c]) {
      const ChunkTensor& x = tensors_[t];
      up(os_ptr(c, 0, t), hp_ + x.offset, x.count);
      up(os_ptr(c, 1, t), hm1_ + x.offset, x.count);
      up(os_ptr(c, 2, t), hm2_ + x.offset, x.count);
      st_.adam_h2d_bytes += 3.0 * sizeof(T) * x.count;
    }
}

template <class T>
void ChunkStore<T>::device_adam(const std::function<void(int, T*, const T*, T*, T*, long)>& adamw) {
  if (!os_) return;
  BackendScope dev(*arena_.get_deleter().be);  // (the runtime's optimizer phase may run under the CPU's)
  long long most = 0;
  for (int c = 0; c < chunks(); ++c)
    for (int t : tensors_of_[c])
      if (os_at_[c] >= 0) most = std::max(most, tensors_[t].count);
  const Backend& be = current_backend();
  std::unique_ptr<char, ArenaFree> g(static_cast<char*>(be.alloc(sizeof(T) * (size_t)std::max(1LL, most))), ArenaFree{&be});
  if (!g) throw std::bad_alloc();
  T* gs = reinterpret_cast<T*>(g.get());
  for (int c = 0; c < chunks(); ++c)
    for (int t : tensors_of_[c]) {
      if (os_at_[c] < 0) continue;
      const ChunkTensor& x = tensors_[t];
      up(gs, hg_ + x.offset, x.count);
      adamw(x.view, os_ptr(c, 0, t), gs, os_ptr(c, 1, t), os_ptr(c, 2, t), (long)x.count);
      down(hp_ + x.offset, os_ptr(c, 0, t), x.count);
      st_.adam_h2d_bytes += (double)sizeof(T) * x.count;
      st_.adam_d2h_bytes += (double)sizeof(T) * x.count;
    }
}

template <class T>
void ChunkStore<T>::sync_os_to_host() {
  if (!os_) return;
  BackendScope dev(*arena_.get_deleter().be);
  for (int c = 0; c < chunks(); ++c)
    for (int t : tensors_of_[c]) {
      if (os_at_[c] < 0) continue;
      const ChunkTensor& x = tensors_[t];
      down(hm1_ + x.offset, os_ptr(c, 1, t), x.count);
      down(hm2_ + x.offset, os_ptr(c, 2, t), x.count);
    }
  current_backend().sync();
}

#define TP_CHUNK_HYBRID_ADAM(T)                                                                   \
  template void ChunkStore<T>::enable_hybrid_adam(T*, T*, double);                               \
  template bool ChunkStore<T>::os_on_device(int) const;                                          \
  template void ChunkStore<T>::place_os();                                                       \
  template void ChunkStore<T>::device_adam(const std::function<void(int, T*, const T*, T*, T*, long)>&); \
  template void ChunkStore<T>::sync_os_to_host();
TP_CHUNK_HYBRID_ADAM(float)
TP_CHUNK_HYBRID_ADAM(double)
#undef TP_CHUNK_HYBRID_ADAM

}  // namespace tp::exec
