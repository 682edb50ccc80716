// runtime_granular: the GranularHost operations (see runtime_granular.hpp), for float and double.
#include "exec/runtime/offload/runtime_granular.hpp"

#include <algorithm>

#include "exec/backends/ops.hpp"
#include "exec/runtime/offload/offload_glue.hpp"
#include "models/plan.hpp"

namespace tp::exec {

template <class T>
void GranularHost<T>::init(const std::vector<char>& off_units, const std::vector<long long>& host_len,
                           const std::vector<long long>& unit_origin, long long state) {
  off = off_units;
  base.assign(off.size(), -1);
  len = host_len;
  origin = unit_origin;
  long long n = 0;
  for (size_t u = 0; u < off.size(); ++u)
    if (off[u]) { base[u] = n; n += len[u]; }
  hp = PinnedBuf<T>(n);
  hg = PinnedBuf<T>(n);
  m1 = PinnedBuf<T>(state);
  m2 = PinnedBuf<T>(state);
}

template <class T>
void GranularHost<T>::begin_step(const std::vector<int>& run_layer, int shared, int prefetch_layers) {
  const long long layers = (long long)off.size() - 2;  // units: embedding, the layers, head
  run_unit.assign(run_layer.size(), -1);
  prefetch = std::max(1, prefetch_layers);
  off_runs.clear();
  off_index.assign(run_unit.size(), -1);
  for (size_t r = 0; r < run_unit.size(); ++r) {
    const int u = 1 + (int)weight_group(run_layer[r], layers, shared);
    if (!is_off(u)) continue;
    run_unit[r] = u;
    off_index[r] = (int)off_runs.size();
    off_runs.push_back((int)r);
  }
  std::fill(hg.data(), hg.data() + hg.size(), T(0));
  loaded.clear();
  loaded_bytes = 0;
  next = 0;
  load_through(prefetch);
}

template <class T>
GranularHost<T>::~GranularHost() {
  for (auto& [r, e] : ready) cs.be->event_destroy(e);
}

template <class T>
void GranularHost<T>::load_through(size_t i) {
  if (next >= off_runs.size() || next > i) return;
  const Backend& be = current_backend();
  cs.ensure(be);
  be.event_record(cs.queued, Stream{});  // (the new copies' memory may have been read by work queued so far)
  be.stream_wait(cs.h2d, cs.queued);
  for (; next < off_runs.size() && next <= i; ++next) {
    const int r = off_runs[next], u = run_unit[r];
    Buf<T> d((size_t)len[u]);
    be.copy(d.data(), param(u), sizeof(T) * (size_t)len[u], CopyKind::host_to_device, cs.h2d);
    const Event e = be.event_create();
    be.event_record(e, cs.h2d);
    ready[r] = e;
    h2d_bytes += sizeof(T) * (double)len[u];
    loaded[r] = std::move(d);
    loaded_bytes += sizeof(T) * (double)len[u];
    peak_loaded_bytes = std::max(peak_loaded_bytes, loaded_bytes);
  }
}

template <class T>
T* GranularHost<T>::device_copy(int r) {
  if (off_index[r] >= 0) load_through((size_t)off_index[r]);
  if (auto it = ready.find(r); it != ready.end()) {  // the compute stream waits for this run's load, not before
    cs.be->stream_wait(Stream{}, it->second);
    cs.be->event_destroy(it->second);
    ready.erase(it);
  }
  return loaded.at(r).data();
}

template <class T>
void GranularHost<T>::drop(int r) {
  auto it = loaded.find(r);
  if (it == loaded.end()) return;
  loaded_bytes -= sizeof(T) * (double)it->second.size();
  loaded.erase(it);
}

template <class T>
void GranularHost<T>::end_run(int r) {
  if (off_index[r] < 0) return;
  drop(r);
  load_through((size_t)off_index[r] + prefetch + 1);
}

template <class T>
void GranularHost<T>::grad_to_host(T* dst, const T* dev, long long n) {
  if (n <= 0) return;
  const Backend& be = current_backend();
  if (be.host_accessible) {  // (the CPU: copies are synchronous, a staging buffer would only add memory)
    std::vector<T> tmp((size_t)n);
    be.copy(tmp.data(), dev, sizeof(T) * (size_t)n, CopyKind::device_to_host, Stream{});
    d2h_bytes += sizeof(T) * (double)n;
    cpu_backend().ops<T>().accumulate(dst, tmp.data(), (long)n);
    return;
  }
  cs.ensure(be);
  while (grads_down.size() >= kGradsInFlight) {  // the oldest arrived, added (in the order they were sent)
    be.stream_sync(cs.d2h);
    GradDown& g = grads_down.front();
    cpu_backend().ops<T>().accumulate(g.dst, g.staged.data(), (long)g.n);
    spare.push_back(std::move(g.staged));
    grads_down.pop_front();
  }
  GradDown g{dst, n, {}};
  for (size_t i = 0; i < spare.size(); ++i)
    if (spare[i].size() >= n) {
      g.staged = std::move(spare[i]);
      spare.erase(spare.begin() + (long)i);
      break;
    }
  if (g.staged.size() < n) g.staged = PinnedBuf<T>(n);
  be.event_record(cs.queued, Stream{});  // (after the backward that wrote dev)
  be.stream_wait(cs.d2h, cs.queued);
  be.copy(g.staged.data(), dev, sizeof(T) * (size_t)n, CopyKind::device_to_host, cs.d2h);
  be.event_record(cs.done, cs.d2h);
  be.stream_wait(Stream{}, cs.done);  // (what the compute stream does next, reusing dev's memory, follows the copy)
  grads_down.push_back(std::move(g));
  d2h_bytes += sizeof(T) * (double)n;
}

template <class T>
void GranularHost<T>::finish_grads() {
  if (grads_down.empty()) return;
  cs.be->stream_sync(cs.d2h);
  for (GradDown& g : grads_down) {
    cpu_backend().ops<T>().accumulate(g.dst, g.staged.data(), (long)g.n);
    spare.push_back(std::move(g.staged));
  }
  grads_down.clear();
}

template <class T>
void GranularHost<T>::host_all_gather(Comm& c, int u, long long slice, long long a, long long z, long long lo, long long len) {
  std::vector<T> mine((size_t)slice, T(0)), all((size_t)(slice * c.size()));
  if (z > a) std::copy(param_at(u, a), param_at(u, z), mine.begin());
  c.all_gather(mine.data(), all.data(), slice, sizeof(T) == 8 ? Dtype::f64 : Dtype::f32);
  std::copy(all.begin(), all.begin() + len, param_at(u, lo));
}

template <class T>
void GranularHost<T>::move(T* dst, bool dst_host, const T* src, bool src_host, long long n) {
  if (n <= 0) return;
  if (dst_host && src_host) { std::copy(src, src + n, dst); return; }
  if (!dst_host && !src_host) { ops::copy(dst, src, (long)n); return; }
  current_backend().copy(dst, src, sizeof(T) * (size_t)n, dst_host ? CopyKind::device_to_host : CopyKind::host_to_device,
                         Stream{});
}

template struct GranularHost<float>;
template struct GranularHost<double>;

}  // namespace tp::exec
