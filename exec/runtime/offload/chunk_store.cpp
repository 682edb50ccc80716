// chunk_store: the executor's PatrickStar chunk manager over a real arena. See chunk_store.hpp.
// Every move of tensor data goes through the current backend (exec/backends/backend.hpp): host flat buffers -> arena is
// a host-to-device copy, arena -> host a device-to-host copy, zeroing a gradient slot the fill op. The arena is
// allocated with the current backend's alloc (on the CPU backend operator new, so `validate` keeps counting it
// in the tracked heap; on emu registered memory its checked ops accept); its compaction is a host memmove where
// the host can read the arena, device-to-device copies otherwise. On a backend that is not host-accessible the
// "host" flat buffers are pinned host memory (the runtime allocates them so; ops may take them).
#include "exec/runtime/offload/chunk_store.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <stdexcept>

#include "exec/backends/backend.hpp"
#include "exec/backends/ops.hpp"
#include "exec/prof/prof.hpp"
#include "exec/runtime/offload/host_adam.hpp"
#include "sim/chunk_policy.hpp"

namespace tp::exec {

namespace {
using Clock = std::chrono::steady_clock;
double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }
template <class T>
void move(T* dst, const T* src, long long n, CopyKind kind, Stream s = Stream{}) {
  current_backend().copy(dst, src, sizeof(T) * (size_t)n, kind, s);
}
// An overlapping move down inside the arena (dst < src), n bytes: a memmove where the host can read the arena; on a
// device, device-to-device copies of pieces no longer than the gap (each piece's destination was read by the
// piece before it, so no copy overlaps itself).
void shift_down(char* dst, const char* src, long long n) {
  const Backend& be = current_backend();
  if (be.host_accessible) {
    std::memmove(dst, src, (size_t)n);
    return;
  }
  const long long gap = src - dst;
  for (long long i = 0; i < n; i += gap)
    be.copy(dst + i, src + i, (size_t)std::min(gap, n - i), CopyKind::device_to_device, Stream{});
}
}  // namespace

template <class T>
ChunkStore<T>::ChunkStore(const std::vector<ChunkTensor>& tensors, int parts, long long chunk_elements,
                          double budget_bytes, double warmup_fraction, T* host_params, T* host_grads,
                          std::vector<T*>& ptab, std::vector<T*>& gtab, const ChunkBf16* bf16)
    : tensors_(tensors), E_(chunk_elements), budget_(budget_bytes), warm_fraction_(warmup_fraction), hp_(host_params),
      hg_(host_grads), pt_(ptab), gt_(gtab), h16_(bf16 ? bf16->host16 : nullptr), p16_(bf16 ? bf16->p16 : nullptr),
      threads_(bf16 ? bf16->threads : 1), es_(h16_ ? sizeof(uint16_t) : sizeof(T)) {
  if (!(budget_bytes >= 0)) throw std::invalid_argument("chunk store: negative budget");
  if (h16_ && (!p16_ || p16_->size() != ptab.size() || bf16->read16.size() != ptab.size()))
    throw std::invalid_argument("chunk store: bf16 slots need bf16 tables of the views");
  ChunkSimInput in;
  in.parts = parts;
  in.chunk_elements = chunk_elements;
  std::vector<int> group(tensors.size());  // per tensor: its simulator-level tensor (joined runs are one)
  for (size_t t = 0; t < tensors.size(); ++t) {
    const ChunkTensor& x = tensors[t];
    if (x.view < 0 || x.view >= (int)ptab.size() || x.view >= (int)gtab.size())
      throw std::invalid_argument("chunk store: tensor view outside the pointer tables");
    if (t > 0 && x.joined) {
      if (x.part != tensors[t - 1].part) throw std::invalid_argument("chunk store: a joined tensor changes part");
      in.tensor_elements.back() += (double)x.count;
    } else {
      in.tensor_elements.push_back((double)x.count);
      in.tensor_part.push_back(x.part);
    }
    group[t] = (int)in.tensor_elements.size() - 1;
  }
  lay_ = layout_chunks(in);  // the simulator's layout (given order, never split)
  const int n = (int)lay_.chunk_elements.size();
  cap_.resize(n);
  tensors_of_.assign(n, {});
  toff_.assign(tensors.size(), 0);
  chunk_of_.assign(tensors.size(), 0);
  std::vector<long long> used(n, 0);
  for (size_t t = 0; t < tensors.size(); ++t) {
    int c = chunk_of_[t] = lay_.chunk_of_tensor[group[t]];
    toff_[t] = used[c];
    used[c] += tensors[t].count;
    tensors_of_[c].push_back((int)t);
  }
  chunks_of_part_.assign(parts, {});
  long long total = 0;
  for (int c = 0; c < n; ++c) {
    cap_[c] = (long long)lay_.chunk_elements[c];
    total += cap_[c];
    for (int p : lay_.parts_of_chunk[c]) chunks_of_part_[p].push_back(c);
  }
  arena_elems_ = std::min(total, (long long)(budget_bytes / (double)es_));
  const Backend& be = current_backend();
  arena_ = std::unique_ptr<char, ArenaFree>(static_cast<char*>(be.alloc(es_ * (size_t)std::max(1LL, arena_elems_))),
                                            ArenaFree{&be});
  if (!arena_) throw std::bad_alloc();
  slot_.assign(n, -1);
  gslot_.assign(n, 0);
  pinned_.assign(n, 0);
  inflight_flag_.assign(n, 0);
  on_copy_stream_.assign(n, 0);
  trace_.assign(n, {});
  os_at_.assign(n, -1);
  tensor_of_view_.assign(ptab.size(), -1);
  for (size_t t = 0; t < tensors.size(); ++t) tensor_of_view_[tensors[t].view] = (int)t;
  moff_.assign(tensors.size(), -1);
  long long nm = 0;  // bf16 slots: the views read as T, mirrored on the device
  for (size_t t = 0; h16_ && t < tensors.size(); ++t)
    if (!bf16->read16[(size_t)tensors[t].view]) moff_[t] = nm, nm += tensors[t].count;
  if (nm > 0) {
    mirror_ = std::unique_ptr<char, ArenaFree>(static_cast<char*>(be.alloc(sizeof(T) * (size_t)nm)), ArenaFree{&be});
    if (!mirror_) throw std::bad_alloc();
    mirror_bytes_ = (double)sizeof(T) * nm;
  }
  for (int c = 0; c < n; ++c) point(c, false);
  refresh_copies();
}

template <class T>
void ChunkStore<T>::ArenaFree::operator()(char* p) const {
  if (be) be->free(p);
}

template <class T>
void ChunkStore<T>::refresh_copies() {
  if (!h16_) return;
  quiesce();  // (a prefetch may still read host16)
  for (const ChunkTensor& x : tensors_) host_pack_bf16(h16_ + x.offset, hp_ + x.offset, (long)x.count, threads_);
  if (!mirror_) return;
  BackendScope dev(*mirror_.get_deleter().be);
  for (size_t t = 0; t < tensors_.size(); ++t)
    if (moff_[t] >= 0)
      move(reinterpret_cast<T*>(mirror_.get()) + moff_[t], hp_ + tensors_[t].offset, tensors_[t].count,
           CopyKind::host_to_device);
}

template <class T>
void ChunkStore<T>::rewritten(int view, long long lo, long long hi) {
  const int t = h16_ && view >= 0 && view < (int)tensor_of_view_.size() ? tensor_of_view_[view] : -1;
  if (t < 0 || moff_[t] >= 0 || hi <= lo) return;
  const int c = chunk_of_[t];
  if (on_copy_stream_[c]) quiesce();  // (a copy since the last quiesce may still read or write its host16: ZeRO-3's
                                      // gathers over several data ranks so wait for the copy stream at each run)
  const ChunkTensor& x = tensors_[t];
  ops::pack_bf16(h16_ + x.offset + lo, hp_ + x.offset + lo, (long)(hi - lo));
  if (slot_[c] >= 0)
    ops::pack_bf16(reinterpret_cast<uint16_t*>(at(slot_[c])) + toff_[t] + lo, hp_ + x.offset + lo, (long)(hi - lo));
}

template <class T>
std::vector<int> ChunkStore<T>::chunks_of(const std::vector<int>& parts) const {
  std::vector<int> cs;
  for (int p : parts) {
    if (p < 0 || p >= (int)chunks_of_part_.size()) throw std::invalid_argument("chunk store: part out of range");
    cs.insert(cs.end(), chunks_of_part_[p].begin(), chunks_of_part_[p].end());
  }
  std::sort(cs.begin(), cs.end());
  cs.erase(std::unique(cs.begin(), cs.end()), cs.end());
  return cs;
}

template <class T>
double ChunkStore<T>::bytes_of_parts(const std::vector<int>& parts) const {
  double b = 0;
  for (int c : chunks_of(parts)) b += chunk_bytes(c);
  return b;
}

template <class T>
void ChunkStore<T>::point(int c, bool at_arena) {
  for (int t : tensors_of_[c]) {
    const ChunkTensor& x = tensors_[t];
    if (h16_) {  // bf16 slots: the T reads in the mirror (or the host), the bf16 copy in the slot while resident
      pt_[x.view] = moff_[t] >= 0 ? reinterpret_cast<T*>(mirror_.get()) + moff_[t] : hp_ + x.offset;
      gt_[x.view] = hg_ + x.offset;
      (*p16_)[x.view] = at_arena ? reinterpret_cast<const uint16_t*>(at(slot_[c])) + toff_[t] : nullptr;
    } else if (at_arena) {  // the slot holds the parameters (P) or, after their last use in the step, the gradients (G)
      T* s = reinterpret_cast<T*>(at(slot_[c])) + toff_[t];
      pt_[x.view] = gslot_[c] ? hp_ + x.offset : s;
      gt_[x.view] = gslot_[c] ? s : hg_ + x.offset;
    } else {
      pt_[x.view] = hp_ + x.offset;
      gt_[x.view] = hg_ + x.offset;
    }
  }
}

template <class T>
long long ChunkStore<T>::place(long long elems) {
  long long prev = 0;
  for (const auto& [off, c] : slots_) {
    if (off - prev >= elems) return prev;
    prev = off + cap_[c];
  }
  return arena_elems_ - prev >= elems ? prev : -1;
}

template <class T>
void ChunkStore<T>::compact() {
  std::map<long long, int> moved;
  long long prev = 0;
  for (const auto& [off, c] : slots_) {
    if (off != prev) shift_down(at(prev), at(off), cap_[c] * (long long)es_);
    slot_[c] = prev;
    moved[prev] = c;
    if (!host_phase_ && !inflight_flag_[c]) point(c, true);  // (a prefetched chunk: at its settle)
    prev += cap_[c];
  }
  slots_.swap(moved);
  ++st_.compactions;
}

template <class T>
void ChunkStore<T>::load(int c, int moment) {
  const long long need = cap_[c];
  long long off = place(need);
  if (off < 0) {
    compact();
    off = place(need);
  }
  if (off < 0) throw std::logic_error("chunk store: the arena cannot hold the chunks of a moment (budget too small)");
  slot_[c] = off;
  slots_[off] = c;
  auto t0 = Clock::now();
  double bytes = 0;
  for (int t : tensors_of_[c]) {
    const ChunkTensor& x = tensors_[t];
    if (h16_) move(reinterpret_cast<uint16_t*>(at(off)) + toff_[t], h16_ + x.offset, x.count, CopyKind::host_to_device);
    else move(reinterpret_cast<T*>(at(off)) + toff_[t], hp_ + x.offset, x.count, CopyKind::host_to_device);
    bytes += (double)es_ * x.count;
  }
  gslot_[c] = 0;
  st_.h2d_s += since(t0);
  st_.h2d_bytes += bytes;
  ++st_.h2d_moves;
  resident_bytes_ += chunk_bytes(c);
  st_.peak_resident_bytes = std::max(st_.peak_resident_bytes, resident_bytes_);
  win_resident_ = std::max(win_resident_, resident_bytes_);
  point(c, true);
  if (keep_log) log.push_back({steps_, moment, c, true});
}

template <class T>
void ChunkStore<T>::evict(int c, int moment, bool on_copy_stream) {
  if (pinned_[c]) throw std::logic_error("chunk store: evicting a pinned chunk");
  if (inflight_flag_[c]) throw std::logic_error("chunk store: evicting a chunk still being prefetched");
  const Stream s = on_copy_stream ? cs_.h2d : Stream{};
  auto t0 = Clock::now();
  double bytes = 0;
  for (int t : tensors_of_[c]) {
    const ChunkTensor& x = tensors_[t];
    if (h16_)  // (the bf16 chunk as PatrickStar moves it: the host's copy holds the same values)
      move(h16_ + x.offset, reinterpret_cast<const uint16_t*>(at(slot_[c])) + toff_[t], x.count, CopyKind::device_to_host, s);
    else
      move((gslot_[c] ? hg_ : hp_) + x.offset, reinterpret_cast<const T*>(at(slot_[c])) + toff_[t], x.count,
           CopyKind::device_to_host, s);
    bytes += (double)es_ * x.count;
  }
  gslot_[c] = 0;
  on_copy_stream_[c] = on_copy_stream ? 1 : 0;
  if (on_copy_stream) st_.prefetch_d2h_bytes += bytes;
  else st_.d2h_s += since(t0);
  st_.d2h_bytes += bytes;
  ++st_.d2h_moves;
  slots_.erase(slot_[c]);
  slot_[c] = -1;
  resident_bytes_ -= chunk_bytes(c);
  point(c, false);
  if (keep_log) log.push_back({steps_, moment, c, false, on_copy_stream});
}

template <class T>
void ChunkStore<T>::evict_to(double budget, int moment) {
  double incoming = 0;
  for (int c : pinned_list_)
    if (slot_[c] < 0) incoming += chunk_bytes(c);
  while (resident_bytes_ + incoming > budget) {  // the simulator's policy (sim/chunk_policy.hpp)
    const int victim = chunk_victim(
        chunks(), [](int i) { return i; }, [&](int c) { return slot_[c] >= 0 && !pinned_[c]; }, warm_,
        [&](int c) { return chunk_next_use(trace_[c], moment, moments_); });
    if (victim < 0) break;
    evict(victim, moment);
  }
}

template <class T>
double ChunkStore<T>::moment_budget(int moment) const {
  if (warm_ || nonmodel_.empty()) return warm_ ? warm_fraction_ * budget_ : budget_;
  const int Tm = moments_;
  auto nm = [&](int k) { return k >= 0 && k < (int)nonmodel_.size() ? nonmodel_[k] : 0.0; };
  return budget_ - std::max(nm(moment), nm((moment + 1) % std::max(1, Tm))) - os_bytes_;
}

template <class T>
void ChunkStore<T>::close_window(bool device_side) {
  const double w = std::max(0.0, prof::heap_window_peak_bytes() - heap_base_);
  const double nm = device_side ? w : 0.0;
  if (warm_ && win_moment_ >= 0) {
    if ((int)nonmodel_.size() <= win_moment_) nonmodel_.resize(win_moment_ + 1, 0.0);
    nonmodel_[win_moment_] = std::max(nonmodel_[win_moment_], nm);
  }
  st_.peak_nonmodel_bytes = std::max(st_.peak_nonmodel_bytes, nm);
  st_.peak_device_bytes = std::max(st_.peak_device_bytes, win_resident_ + nm + os_bytes_ + mirror_bytes_);
  prof::heap_window_reset();
  win_resident_ = resident_bytes_;
}

template <class T>
void ChunkStore<T>::begin_step() {
  st_ = ChunkStepStats{};
  st_.peak_resident_bytes = resident_bytes_;
  max_moment_ = -1;
  heap_base_ = prof::heap_live_bytes();  // host pools, arena, batches: what is live between steps
  prof::heap_window_reset();
  win_resident_ = resident_bytes_;
  win_moment_ = -1;
}

template <class T>
void ChunkStore<T>::release() {
  // PatrickStar's gradient reuse: a chunk whose parameters are not used again this step (its last access of
  // the warm-up trace, the backward) takes its gradients into its parameter slot; the host keeps the master
  // parameters, which the pointer table now names.
  if (!warm_ && cur_moment_ >= 0 && !h16_)
    for (int c : pinned_list_)
      if (slot_[c] >= 0 && !gslot_[c] && !trace_[c].empty() && trace_[c].back() == cur_moment_) {
        T* s = reinterpret_cast<T*>(at(slot_[c]));
        for (int t : tensors_of_[c]) {
          const ChunkTensor& x = tensors_[t];
          move(s + toff_[t], hg_ + x.offset, x.count, CopyKind::host_to_device);
          st_.grad_reuse_bytes += (double)sizeof(T) * x.count;
        }
        gslot_[c] = 1;
        point(c, true);
      }
  for (int c : pinned_list_) pinned_[c] = 0;
  pinned_list_.clear();
  cur_moment_ = -1;
}

template <class T>
void ChunkStore<T>::access(int moment, const std::vector<int>& parts) {
  if (host_phase_) throw std::logic_error("chunk store: access during the host (optimizer) phase");
  close_window(true);
  release();
  settle();
  pinned_list_ = chunks_of(parts);
  for (int c : pinned_list_) {
    pinned_[c] = 1;
    if (warm_ && (trace_[c].empty() || trace_[c].back() != moment)) trace_[c].push_back(moment);
  }
  max_moment_ = std::max(max_moment_, moment);
  evict_to(moment_budget(moment), moment);
  win_resident_ = resident_bytes_;  // evictions come first; the loads below raise it
  for (int c : pinned_list_) {
    if (slot_[c] >= 0 && gslot_[c]) evict(c, moment);  // its gradients are in the slot: it needs its parameters
    if (slot_[c] < 0) load(c, moment);
  }
  cur_moment_ = moment;
  win_moment_ = moment;
  if (warm_ || prefetch_ == 0) return;
  if (host_rewrites_) quiesce();  // (the run's own chunks' host copies written next: the last prefetch done first)
  prefetch(moment);
}

// The next moments' chunks on the copy stream (see Prefetch in chunk_store.hpp).
template <class T>
void ChunkStore<T>::prefetch(int moment) {
  static const std::vector<int> none;
  auto needed_at = [&](int j) -> const std::vector<int>& { return j < (int)at_moment_.size() ? at_moment_[j] : none; };
  const int last = moments_ - 1;  // (the ADAM moment: no chunks)
  const std::vector<int> wanted =
      chunk_prefetch_wanted(moment, prefetch_, last, needed_at, [&](int c) { return slot_[c] >= 0; });
  if (wanted.empty()) return;
  auto protect = [&](int c) {
    if (pinned_[c]) return true;
    for (int j = moment + 1; j <= std::min(moment + prefetch_, last); ++j)
      if (std::binary_search(needed_at(j).begin(), needed_at(j).end(), c)) return true;
    return false;
  };
  double held = resident_bytes_;
  const std::vector<PrefetchStep> steps = chunk_prefetch(
      wanted, chunks(), [](int i) { return i; }, [&](int c) { return slot_[c] >= 0; }, protect,
      [&](int c) { return chunk_bytes(c); }, [&](int c) { return chunk_next_use(trace_[c], moment, moments_); },
      moment_budget(moment), 0.0, held);
  if (steps.empty()) return;
  const Backend& be = *arena_.get_deleter().be;
  cs_.ensure(be);
  be.event_record(cs_.queued, Stream{});  // the kernels that read what the victims' and the loads' slots hold
  be.stream_wait(cs_.h2d, cs_.queued);
  std::vector<int> loads;
  bool evicting = false, compacted = false;  // a victim's copy queued on the copy stream, reading its slot
  for (const PrefetchStep& st : steps) {
    const int c = st.chunk;
    if (!st.load) {
      evict(c, moment, true);
      evicting = true;
      continue;
    }
    long long off = place(cap_[c]);  // (compaction moves settled slots: none is in flight here)
    if (off < 0 && evicting) {  // (compaction slides slots over the victims': after their copies have read them)
      be.event_record(cs_.done, cs_.h2d);
      be.stream_wait(Stream{}, cs_.done);
      evicting = false;
    }
    if (off < 0) compact(), off = place(cap_[c]), compacted = true;
    if (off < 0) throw std::logic_error("chunk store: the arena cannot hold a prefetched chunk");
    slot_[c] = off;
    slots_[off] = c;
    gslot_[c] = 0;
    inflight_flag_[c] = 1;
    on_copy_stream_[c] = 1;
    inflight_.push_back(c);
    loads.push_back(c);
    for (int t : tensors_of_[c]) st_.h2d_bytes += (double)es_ * tensors_[t].count;  // (what load counts)
    resident_bytes_ += chunk_bytes(c);
    st_.peak_resident_bytes = std::max(st_.peak_resident_bytes, resident_bytes_);
    win_resident_ = std::max(win_resident_, resident_bytes_);
    ++st_.h2d_moves;
    if (keep_log) log.push_back({steps_, moment, c, true, true});
  }
  if (compacted) {  // (the compaction's copies, on the compute stream, before the loads)
    be.event_record(cs_.queued, Stream{});
    be.stream_wait(cs_.h2d, cs_.queued);
  }
  for (int c : loads)  // (slot offsets final: the placements above are done)
    for (int t : tensors_of_[c]) {
      const ChunkTensor& x = tensors_[t];
      const size_t n = es_ * (size_t)x.count;
      if (h16_) be.copy(reinterpret_cast<uint16_t*>(at(slot_[c])) + toff_[t], h16_ + x.offset, n, CopyKind::host_to_device, cs_.h2d);
      else be.copy(reinterpret_cast<T*>(at(slot_[c])) + toff_[t], hp_ + x.offset, n, CopyKind::host_to_device, cs_.h2d);
      st_.prefetch_h2d_bytes += (double)n;
    }
  be.event_record(cs_.done, cs_.h2d);
}

template <class T>
void ChunkStore<T>::settle() {
  if (inflight_.empty()) return;  // (a prefetch's evictions always come with a load)
  cs_.be->stream_wait(Stream{}, cs_.done);
  for (int c : inflight_) {
    inflight_flag_[c] = 0;
    point(c, true);
  }
  inflight_.clear();
}

template <class T>
void ChunkStore<T>::quiesce() {
  settle();
  if (cs_.be) cs_.be->stream_sync(cs_.h2d);
  std::fill(on_copy_stream_.begin(), on_copy_stream_.end(), 0);
}

template <class T>
void ChunkStore<T>::zero_resident_grads() {
  for (const auto& [off, c] : slots_)
    if (gslot_[c]) ops::fill(reinterpret_cast<T*>(at(off)), T(0), (long)cap_[c]);
}

template <class T>
void ChunkStore<T>::host_phase_begin(int moment) {
  close_window(true);
  release();
  quiesce();
  max_moment_ = std::max(max_moment_, moment);
  win_moment_ = moment;
  evict_to(budget_ - adam_moment_reserve_bytes((double)E_) - os_bytes_, moment);
  auto t0 = Clock::now();
  for (const auto& [off, c] : slots_) {
    if (gslot_[c])  // its gradients go to the host for CPU Adam (a P slot's gradients are already there)
      for (int t : tensors_of_[c]) {
        const ChunkTensor& x = tensors_[t];
        move(hg_ + x.offset, reinterpret_cast<const T*>(at(off)) + toff_[t], x.count, CopyKind::device_to_host);
        st_.adam_d2h_bytes += (double)sizeof(T) * x.count;
      }
    gslot_[c] = 0;
    point(c, false);
  }
  st_.d2h_s += since(t0);
  win_resident_ = resident_bytes_;
  host_phase_ = true;
}

template <class T>
void ChunkStore<T>::host_phase_end() {
  device_adam_wait();
  close_window(false);  // CPU Adam's temporaries are host memory
  refresh_copies();  // (bf16 slots: every chunk's bf16 parameters, as PatrickStar's CPU Adam writes its fp16 chunks)
  auto t0 = Clock::now();
  for (const auto& [off, c] : slots_) {
    for (int t : tensors_of_[c]) {
      const ChunkTensor& x = tensors_[t];
      if (h16_) move(reinterpret_cast<uint16_t*>(at(off)) + toff_[t], h16_ + x.offset, x.count, CopyKind::host_to_device);
      else move(reinterpret_cast<T*>(at(off)) + toff_[t], hp_ + x.offset, x.count, CopyKind::host_to_device);
      st_.adam_h2d_bytes += (double)es_ * x.count;
    }
    gslot_[c] = 0;
    point(c, true);
  }
  st_.h2d_s += since(t0);
  host_phase_ = false;
  win_moment_ = -1;
}

template <class T>
void ChunkStore<T>::evict_all() {
  release();
  quiesce();
  if (host_phase_) throw std::logic_error("chunk store: evict_all during the host phase");
  for (int c = 0; c < chunks(); ++c)
    if (slot_[c] >= 0) evict(c, -1);
}

template <class T>
void ChunkStore<T>::reset_trace() {
  quiesce();
  if (os_) {  // hybrid Adam placed again at the next warm-up's end
    sync_os_to_host();
    os_.reset();
    os_at_.assign(chunks(), -1);
    os_bytes_ = 0;
  }
  warm_ = true;
  for (auto& tr : trace_) tr.clear();
  nonmodel_.clear();
}

template <class T>
ChunkStepStats ChunkStore<T>::end_step() {
  close_window(win_moment_ >= 0 && !host_phase_);
  release();
  st_.os_device_bytes = os_bytes_;  // (during this step)
  if (warm_) {  // the warm-up step's accesses are the trace from now on
    warm_ = false;
    moments_ = max_moment_ + 1;
    at_moment_.assign(moments_, {});
    for (int c = 0; c < chunks(); ++c)
      for (int k : trace_[c]) at_moment_[k].push_back(c);  // (ascending chunks)
    if (hybrid_ && !os_) place_os();  // (hybrid Adam: from the next step on)
  }
  ++steps_;
  return st_;
}

template class ChunkStore<float>;
template class ChunkStore<double>;

}  // namespace tp::exec
