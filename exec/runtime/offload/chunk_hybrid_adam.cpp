// chunk_hybrid_adam: the chunk store's hybrid Adam (chunk_store.hpp "Hybrid Adam"): the optimizer state of the first
// chunks that fit the device's margin lives on the device from the warm-up's end (place_os, the rule of
// sim/chunk_policy.hpp hybrid_adam_chunks), their Adam runs there (device_adam) and their moments go back to the host
// before a checkpoint reads them (sync_os_to_host).
// Invariants: os_at_[c] >= 0 exactly for the chunks whose state is on the device (and
// hold a piece of the rank's own state); each piece's state lies at poff_ in its chunk's region; the
// host's parameters hold the updated master after device_adam_wait (the fp32 reads and the bf16 packing use them);
// every copy goes through the arena's backend and counts in the Adam bytes.
#include <algorithm>
#include <stdexcept>
#include <utility>

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
void ChunkStore<T>::enable_hybrid_adam(std::vector<OsPiece> pieces, double margin_ratio) {
  hybrid_ = true;
  hy_ratio_ = margin_ratio;
  pieces_ = std::move(pieces);
  pieces_of_.assign(chunks(), {});
  poff_.assign(pieces_.size(), 0);
  os_len_.assign(chunks(), 0);
  std::vector<char> seen(tensor_of_view_.size(), 0);
  for (size_t i = 0; i < pieces_.size(); ++i) {
    const OsPiece& q = pieces_[i];
    const int t = q.view >= 0 && q.view < (int)tensor_of_view_.size() ? tensor_of_view_[q.view] : -1;
    if (t < 0 || seen[q.view] || q.lo < 0 || q.n <= 0 || q.lo + q.n > tensors_[t].count)
      throw std::invalid_argument("chunk store: a hybrid Adam piece outside its view, or a view's second piece");
    seen[q.view] = 1;
    pieces_of_[chunk_of_[t]].push_back((int)i);
  }
  for (int c = 0; c < chunks(); ++c) {  // a chunk whose pieces are all of its tensors: its capacity, laid out as it
    long long own = 0, all = 0;
    for (int i : pieces_of_[c]) own += pieces_[i].n;
    for (int t : tensors_of_[c]) all += tensors_[t].count;
    const bool whole = own == all;
    for (int i : pieces_of_[c]) {
      poff_[i] = whole ? toff_[tensor_of_view_[pieces_[i].view]] + pieces_[i].lo : os_len_[c];
      if (!whole) os_len_[c] += pieces_[i].n;
    }
    if (whole) os_len_[c] = cap_[c];
  }
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
  std::vector<double> lens;
  for (int c = 0; c < chunks(); ++c) chunks_bytes += chunk_bytes(c), lens.push_back((double)os_len_[c]);
  const int k = hybrid_adam_chunks(lens, (double)os_parts() * sizeof(T), budget_, max_nonmodel, chunks_bytes, hy_ratio_);
  long long n = 0;
  for (int c = 0; c < k; ++c)
    if (os_len_[c] > 0) os_at_[c] = n, n += os_parts() * os_len_[c];
  if (n == 0) return;
  BackendScope dev(*arena_.get_deleter().be);
  const Backend& be = current_backend();
  os_ = std::unique_ptr<char, ArenaFree>(static_cast<char*>(be.alloc(sizeof(T) * (size_t)n)), ArenaFree{&be});
  if (!os_) throw std::bad_alloc();
  os_bytes_ = (double)sizeof(T) * n;
  for (int c = 0; c < k; ++c)
    for (int i : pieces_of_[c]) {
      const OsPiece& q = pieces_[i];
      if (h16_) up(os_ptr(c, 0, i), host_param(q), q.n);
      up(os_ptr(c, 1, i), q.m1, q.n);
      up(os_ptr(c, 2, i), q.m2, q.n);
      st_.adam_h2d_bytes += (double)os_parts() * sizeof(T) * q.n;
    }
}

template <class T>
void ChunkStore<T>::device_adam(const std::function<void(int, T*, const T*, T*, T*, long)>& adamw) {
  if (!os_) return;
  BackendScope dev(*arena_.get_deleter().be);  // (the runtime's optimizer phase may run under the CPU's)
  long long most = 0;
  for (int c = 0; c < chunks(); ++c)
    for (int i : pieces_of_[c])
      if (os_at_[c] >= 0) most = std::max(most, pieces_[i].n);
  const Backend& be = current_backend();
  device_adam_wait();  // (a stage still in use)
  const long long stage = (h16_ ? 1 : 2) * std::max(1LL, most);  // the gradients; T slots: and the parameters
  adam_stage_ = std::unique_ptr<char, ArenaFree>(static_cast<char*>(be.alloc(sizeof(T) * (size_t)stage)), ArenaFree{&be});
  if (!adam_stage_) throw std::bad_alloc();
  T* gs = reinterpret_cast<T*>(adam_stage_.get());
  T* ps = gs + std::max(1LL, most);
  cs_.ensure(be);
  be.event_record(cs_.queued, Stream{});  // the compute stream's work so far (the gradients' last writes)
  be.stream_wait(cs_.h2d, cs_.queued);
  for (int c = 0; c < chunks(); ++c)
    for (int i : pieces_of_[c]) {
      if (os_at_[c] < 0) continue;
      const OsPiece& q = pieces_[i];
      T* w = h16_ ? os_ptr(c, 0, i) : ps;
      const size_t bytes = sizeof(T) * (size_t)q.n;
      be.copy(gs, q.grad, bytes, CopyKind::host_to_device, cs_.h2d);
      if (!h16_) be.copy(ps, host_param(q), bytes, CopyKind::host_to_device, cs_.h2d);
      be.event_record(cs_.done, cs_.h2d);
      be.stream_wait(Stream{}, cs_.done);
      adamw(q.view, w, gs, os_ptr(c, 1, i), os_ptr(c, 2, i), (long)q.n);
      be.event_record(cs_.queued, Stream{});
      be.stream_wait(cs_.h2d, cs_.queued);
      be.copy(host_param(q), w, bytes, CopyKind::device_to_host, cs_.h2d);  // (then the next piece's stage, in order)
      st_.adam_h2d_bytes += (double)(h16_ ? 1 : 2) * sizeof(T) * q.n;
      st_.adam_d2h_bytes += (double)sizeof(T) * q.n;
    }
}

template <class T>
void ChunkStore<T>::device_adam_wait() {
  if (!adam_stage_) return;
  cs_.be->stream_sync(cs_.h2d);  // (the host's parameters final, the stage read)
  adam_stage_.reset();
}

template <class T>
void ChunkStore<T>::sync_os_to_host() {
  if (!os_) return;
  BackendScope dev(*arena_.get_deleter().be);
  for (int c = 0; c < chunks(); ++c)
    for (int i : pieces_of_[c]) {
      if (os_at_[c] < 0) continue;
      down(pieces_[i].m1, os_ptr(c, 1, i), pieces_[i].n);
      down(pieces_[i].m2, os_ptr(c, 2, i), pieces_[i].n);
    }
  current_backend().sync();
}

#define TP_CHUNK_HYBRID_ADAM(T)                                                                   \
  template void ChunkStore<T>::enable_hybrid_adam(std::vector<ChunkStore<T>::OsPiece>, double);  \
  template bool ChunkStore<T>::os_on_device(int) const;                                          \
  template void ChunkStore<T>::place_os();                                                       \
  template void ChunkStore<T>::device_adam(const std::function<void(int, T*, const T*, T*, T*, long)>&); \
  template void ChunkStore<T>::device_adam_wait();                                               \
  template void ChunkStore<T>::sync_os_to_host();
TP_CHUNK_HYBRID_ADAM(float)
TP_CHUNK_HYBRID_ADAM(double)
#undef TP_CHUNK_HYBRID_ADAM

}  // namespace tp::exec
