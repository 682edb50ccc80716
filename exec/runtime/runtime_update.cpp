// runtime_update: what happens to a rank's parameters between its forward / backward work (RankRun,
// exec/runtime/runtime_rank.hpp): ZeRO's reduce-scatter and all-gather of parameter units, the sequence-parallel
// reduction of replicated gradients, the optimizer step (global-norm clipping, AdamW on the device, on the host
// under optimizer offload, on host memory for granular-offloaded units), Pseudo-to-Real's sums over a weight group's
// slot holders, and the tensors a checkpoint holds (the delink itself: exec/runtime/runtime_relayout.cpp).
// Invariant: every rank of a group calls each collective in the same order.
#include <algorithm>

#include "exec/runtime/runtime_rank.hpp"
#include "exec/runtime/offload/host_adam.hpp"
#include "sim/step_formulas.hpp"  // kGradBucketsInFlight

namespace tp::exec::detail {

template <class T>
void RankRun<T>::sp_reduce_layer(int l, long long lo, long long hi) {
  for (size_t v = 0; v < gl.views.size(); ++v)
    if (gl.views[v].layer == l && replicated_view[v] && gl.views[v].offset >= lo && gl.views[v].offset < hi)
      tp->all_reduce_sum(gtab[v], gl.views[v].count, dtype_of<T>());
}

// Gradient reduce-scatter of one unit over dp into this rank's slice (ZeRO >= 2), accumulated.
template <class T>
void RankRun<T>::reduce_scatter_unit(int ui, bool async) {
  const Unit& u = units[ui];
  for (int si = 0; si < nseg(ui); ++si) {  // each segment over its group
    const Seg sg = seg(ui, si);
    const bool host = seg_on_host(ui, si);
    if (async && !host)
      while (dp_pending.size() >= (size_t)kGradBucketsInFlight) dp_wait_oldest();
    long long len = sg.hi - sg.lo;
    Buf<T> in(sg.slice * sg.n), out(sg.slice);  // comm buffers: host memory (exec/comm/comm.hpp)
    ops::fill(in.data() + len, T(0), (long)(sg.slice * sg.n - len));  // the padding; the views fill [0, len)
    gl.read_range(gtab, sg.lo, sg.hi, in.data());
    size_t k = own_index(ui) + si;
    if (async && !host) {  // (in is a copy: the gradients' buffer is released or zeroed below, under the collective)
      const CommRequest req = sg.c->ireduce_scatter_sum(in.data(), out.data(), sg.slice, dtype_of<T>());
      dp_pending.push_back({sg.c, req, std::move(in), std::move(out), 0, 0, -1, (long long)k});
      continue;
    }
    sg.c->reduce_scatter_sum(in.data(), out.data(), sg.slice, dtype_of<T>());
    if (host) gran.grad_to_host(Gd(own[k].first), out.data(), own[k].second - own[k].first);  // own slice down
    else ops::accumulate(gshard.data() + own_off[k], out.data(), (long)sg.slice);
  }
  if (zgrad && is_layer_unit(ui)) grad_release(ui);  // the next run starts from a fresh zeroed buffer
  else gl.zero_range(gtab, u.a, u.b);
}
// All-gather of one unit's slices over dp into the full parameter buffer (ZeRO-1/2 after the update, ZeRO-3
// before a run).
template <class T>
void RankRun<T>::all_gather_unit(int ui) {
  if (zparam && is_layer_unit(ui)) {  // straight into a fresh gathered unit, the views pointing into it
    gather_layer(ui, nullptr);
    return;
  }
  for (int si = 0; si < nseg(ui); ++si) {
    const Seg sg = seg(ui, si);
    // One rank: its slice is the segment, nothing to gather (ZeRO-3 on one data rank); but sliced host_master has
    // its updated slices in zslice, also an expert segment of one expert-data rank.
    if (sg.n == 1 && !(host_master && master_sliced)) continue;
    if (seg_on_host(ui, si)) {  // granular (ZeRO 1-2): the segment's updated slices gathered on the host over its group
      long long a = sg.lo + sg.r * sg.slice;
      gran.host_all_gather(*sg.c, ui, sg.slice, a, std::min(sg.hi, a + sg.slice), sg.lo, sg.hi - sg.lo);
      continue;
    }
    if (host_master && master_sliced) {
      Buf<T> all(sg.slice * sg.n);  // the updated slice is in zslice; the views read as T copied, the others packed
      sg.c->all_gather(zslice.data() + own_off[own_index(ui) + si], all.data(), sg.slice, dtype_of<T>());
      gl.each_view(sg.lo, sg.hi, [&](size_t v, long long lo, long long hi, long long at) {
        if (vdev[v] >= 0) ops::copy(params.data() + vdev[v] + lo, all.data() + at, (long)(hi - lo));
        else ops::pack_bf16(w16->copy[v].data() + lo, all.data() + at, (long)(hi - lo));
      });
      continue;
    }
    ParamGather g = param_gather_start(sg, false);
    param_gather_write(g);
    if (store && store->bf16_slots())  // (bf16 chunks: the weights' bf16 copies of what was written)
      gl.each_view(sg.lo, sg.hi, [&](size_t v, long long lo, long long hi, long long) { store->rewritten((int)v, lo, hi); });
  }
}

template <class T>
void RankRun<T>::gather_layer(int ui, const T* loaded, bool async) {
  long long total = 0;
  for (int si = 0; si < nseg(ui); ++si) total += seg(ui, si).slice * seg(ui, si).n;
  uparam[ui].resize((size_t)total);
  long long at0 = 0;
  for (int si = 0; si < nseg(ui); ++si) {
    const Seg sg = seg(ui, si);
    const size_t k = own_index(ui) + si;
    const T* mine = hoff[k] >= 0 ? loaded + hoff[k] : pslice.data() + own_off[k];
    T* base = uparam[ui].data() + at0;
    if (async) gather_pending[(size_t)ui].push_back({sg.c, sg.c->iall_gather(mine, base, sg.slice, dtype_of<T>())});
    else sg.c->all_gather(mine, base, sg.slice, dtype_of<T>());
    gl.each_view(sg.lo, sg.hi, [&](size_t v, long long lo, long long, long long at) { ptab[v] = base + at - lo; });
    at0 += sg.slice * sg.n;
  }
}

// Checkpoints (exec/runtime/runtime_state.cpp): the compact parameters, the layers' slices (zparam), the optimizer state.
template <class T>
std::vector<TensorView> RankRun<T>::state_tensors(int32_t* meta) {
  Dtype d = dtype_of<T>();
  T* mom1 = hopt.on() ? hopt.m1.data() : m1.data();  // optimizer offload: the host's moments
  T* mom2 = hopt.on() ? hopt.m2.data() : m2.data();
  const long nm = hopt.on() ? (long)hopt.m1.size() : (long)m1.size();
  T* par = host_master ? hopt.master.data() : params.data();  // (host_master: the parameters are the master copy)
  const long np = host_master ? (long)hopt.master.size() : (long)params.size();
  std::vector<TensorView> t = {{"params", d, par, np}, {"m1", d, mom1, nm},
                               {"m2", d, mom2, nm}, {"meta", Dtype::i32, meta, 2}};
  if (zparam) t.push_back({"pslice", d, pslice.data(), (long)pslice.size()});
  if (f8.on()) t.push_back({"fp8_scale", Dtype::f64, f8.scale.data(), (long)f8.scale.size()});
  if (gran.on())  // granular: the host parameters and moments
    for (auto [name, b] : {std::pair{"gparams", &gran.hp}, std::pair{"gm1", &gran.m1}, std::pair{"gm2", &gran.m2}})
      t.push_back({name, d, b->data(), (long)b->size()});
  return t;
}
template <class T>
void RankRun<T>::save_checkpoint(long next_step) {
  if (store) store->sync_os_to_host();  // (hybrid Adam: the device moments)
  int32_t meta[2] = {shared, (int32_t)delink_step};
  save_rank_checkpoint(sc, o, world, next_step, state_tensors(meta));
}
template <class T>
long RankRun<T>::load_checkpoint(long step) {
  int32_t meta[2];
  load_rank_checkpoint(sc, o, world.rank(), step, state_tensors(meta));
  shared = meta[0];
  delink_step = meta[1];
  pull_master();
  return step;
}

// The optimizer step after the step's last backward: one job a function, in this order (every rank of a group
// calls each collective in the same order).
template <class T>
void RankRun<T>::optimizer_step(int step, int warmup, RunResult& res) {
  sp_reduce_grads();
  tied_embedding_grads();
  dp_reduce_grads();
  delink_slot_sums();
  const double norm = grad_norm();
  res.grad_norm.push_back(norm);
  adam_update(step, warmup, norm);
  hopt.end_step();
  zero_gather_params();
}

// Sequence parallelism: the layers' LayerNorm and row-parallel bias gradients are partial per tp rank
// (with ZeRO >= 2 and dp > 1 this happened before each layer's reduce-scatter).
template <class T>
void RankRun<T>::sp_reduce_grads() {
  if (model.sp && !(p.zero >= 2 && p.data_ranks() > 1))
    for (long long l = 0; l < L; ++l)  // (granular: the offloaded layers' were reduced before going down)
      if (units[unit_of_layer(l)].owned && !dp_started[unit_of_layer(l)])  // (else reduced before its dp reduction)
        sp_reduce_layer((int)l, units[unit_of_layer(l)].a, dev_end[unit_of_layer(l)]);
}

// Tied embedding: the first and last stage add their copies' gradients.
template <class T>
void RankRun<T>::tied_embedding_grads() {
  if (units[0].owned && p.pp > 1 && sc.model.tied_embeddings && first_stage != last_stage && emb)
    emb->all_reduce_sum(Gd(units[0].a), units[0].b - units[0].a, dtype_of<T>());
}

// Data parallel: all-reduce (ZeRO 0), reduce-scatter of each owned unit (ZeRO 1; ZeRO >= 2 reduced the layers
// during the backward and reduces the ends here); ZeRO >= 2 on one data rank adds the gradients to its shard.
template <class T>
void RankRun<T>::dp_reduce_grads() {
  if (p.zero == 0) dp_all_reduce_grads();
  else if (p.data_ranks() > 1) dp_reduce_scatter_grads();
  else if (p.zero >= 2) dp1_shard_grads();
  std::fill(dp_started.begin(), dp_started.end(), 0);  // (the next step's backward starts them again)
}

// ZeRO 0: each owned unit's segments summed over their groups (the units not started during the backward).
template <class T>
void RankRun<T>::dp_all_reduce_grads() {
  dp_wait_reduces();  // (those started during the backward)
  for (int ui = 0; ui < (int)units.size(); ++ui)
    if (units[ui].owned && !dp_started[ui]) dp_reduce_unit(ui);
  dp_wait_reduces();
}

// ZeRO >= 1 with dp > 1: each owned unit's segments reduce-scattered into this rank's slices (ZeRO >= 2: the two
// end units only, through reduce_scatter_unit; the layers were reduced during the backward).
template <class T>
void RankRun<T>::dp_reduce_scatter_grads() {
  dp_wait_reduces();  // (those started during the backward)
  for (int ui = 0; ui < (int)units.size(); ++ui) {
    if (!units[ui].owned || dp_started[ui]) continue;
    if (p.zero >= 2 && ui != 0 && ui != (int)L + 1) continue;  // layers already reduced
    if (p.zero >= 2) reduce_scatter_unit(ui);
    else dp_reduce_unit(ui);
  }
  dp_wait_reduces();
}

// ZeRO 0: each segment all-reduced in place over its group; ZeRO 1: each segment (padded to slice x n) reduce-
// scattered into a buffer whose first elements become this rank's slice of the gradients at dp_wait_reduces.
// At most kGradBucketsInFlight reductions in flight (the simulator's bound on unreduced gradient buckets,
// sim/step_formulas.hpp): a new one first completes the oldest, so that the ZeRO-1 staging copies (and the
// communicator's own buffers) of a backward's reductions never add up to a second copy of the gradients.
template <class T>
void RankRun<T>::dp_reduce_unit(int ui, bool down) {
  for (int si = 0; si < nseg(ui); ++si) {
    while (dp_pending.size() >= (size_t)kGradBucketsInFlight) dp_wait_oldest();
    const Seg sg = seg(ui, si);
    const long long k = down ? (long long)(own_index(ui) + si) : -1;
    if (p.zero == 0) {
      if (sg.n > 1) dp_pending.push_back({sg.c, sg.c->iall_reduce_sum(Gd(sg.lo), sg.hi - sg.lo, dtype_of<T>()), {}, {}, 0, 0, k});
      else if (k >= 0) send_own_down((size_t)k);  // (a group of one: nothing to reduce, final now)
      continue;
    }
    BackendScope where(backend_for(seg_on_host(ui, si)));
    Buf<T> inb(sg.slice * sg.n), out(sg.slice);
    ops::copy(inb.data(), Gd(sg.lo), (long)(sg.hi - sg.lo));
    ops::fill(inb.data() + (sg.hi - sg.lo), T(0), (long)(sg.slice * sg.n - (sg.hi - sg.lo)));  // the padding
    const CommRequest req = sg.c->ireduce_scatter_sum(inb.data(), out.data(), sg.slice, dtype_of<T>());
    const long long a = sg.lo + sg.r * sg.slice, z = std::min(sg.hi, a + sg.slice);
    dp_pending.push_back({sg.c, req, std::move(inb), std::move(out), a, std::max(a, z), k});
    if (!overlaps_dp_reduce(ui)) dp_wait_reduces();  // (a host segment's slice is copied under its scope)
  }
}

template <class T>
void RankRun<T>::dp_wait_reduces() {
  while (!dp_pending.empty()) dp_wait_oldest();
}

template <class T>
void RankRun<T>::dp_wait_oldest() {
  DpPending& d = dp_pending.front();
  d.c->wait(d.req);
  if (d.z > d.a) ops::copy(Gd(d.a), d.out.data(), (long)(d.z - d.a));
  if (d.shard >= 0) ops::accumulate(gshard.data() + own_off[(size_t)d.shard], d.out.data(), (long)d.out.size());
  if (d.down >= 0) send_own_down((size_t)d.down);  // (queued after the copy on the compute stream)
  dp_pending.erase(dp_pending.begin());
}

// ZeRO >= 2 with dp == 1: the "slice" is the whole unit; its gradients are added to the shard.
template <class T>
void RankRun<T>::dp1_shard_grads() {
  for (size_t k = 0; k < own.size(); ++k)
    if (own[k].second > own[k].first && !own_on_host(k))
      ops::accumulate(own_grad(k, own[k].first), Gd(own[k].first), (long)(own[k].second - own[k].first));
}

// Pseudo-to-Real with pp > 1: the holders of a weight group add their gradients (after the dp reduction: on
// the own ranges, i.e. the reduced slices, identical on every holder).
template <class T>
void RankRun<T>::delink_slot_sums() {
  for (int g = 0; shared > 0 && g < (int)slot_comm.size(); ++g) {
    if (!slot_comm[g]) continue;
    const int ui = unit_of_layer(g);
    for (int si = 0; si < nseg(ui); ++si) {
      const size_t k = own_index(ui) + si;
      if (own[k].second > own[k].first)
        slot_comm[g]->all_reduce_sum(own_grad(k, own[k].first), own[k].second - own[k].first, dtype_of<T>());
    }
  }
}

// Global gradient norm: each parameter once (tp-replicated on tp rank 0, the tied embedding on its first stage).
// The runs in device memory go to one sum_squares_multi per segment kind (one launch and one read-back for all of
// them, not one per run); host-resident runs to the host's threads.
template <class T>
double RankRun<T>::grad_norm() {
  double sq2[2] = {0, 0};  // dense, experts (without ZeRO each is held by its group's every rank)
  std::vector<const T*> dev_x[2];
  std::vector<long> dev_n[2];
  for (size_t k = 0; k < own.size(); ++k) {
    if (own_other_replica(k)) continue;
    const int sg = own_seg[k];
    // (2D: rows != 0 hold unused copies; the tied copy on the last stage.) One sum per run of adjacent views.
    gl.each_run(
        own[k].first, own[k].second, [&](size_t v, long long at) { return record_copy(v, own[k].first + at) ? 0L : -1L; },
        [&](long long at, long long n, long) {
          const T* gr = own_grad(k, own[k].first + at);
          if (state_on_host(k)) {
            sq2[sg] += host_sum_squares(gr, (long)n, adam_threads);
          } else {
            dev_x[sg].push_back(gr);
            dev_n[sg].push_back((long)n);
          }
        });
  }
  for (int sg : {0, 1})  // (device runs: own_on_host is false, so the run's backend is the current one)
    if (!dev_x[sg].empty()) sq2[sg] += ops::sum_squares_multi(dev_x[sg].data(), dev_n[sg].data(), (long)dev_x[sg].size());
  world.all_reduce_sum(sq2, 2, Dtype::f64);  // over every rank: each parameter counted on exactly one
  if (p.zero == 0) {  // ...except that without ZeRO every rank of a segment's group holds it
    sq2[0] /= p.data_ranks();
    sq2[1] /= edpc ? edpc->size() : p.data_ranks();
  }
  return std::sqrt(sq2[0] + sq2[1]);
}

// AdamW on every own range this step updates, with the global-norm clip (norm over o.grad_clip) fused in: on the
// device (every run in one adamw_multi launch), in the host optimizer (optimizer offload) or on host memory
// (granular-offloaded segments). The device's work (that launch, chunked offload's hybrid Adam) is queued first, so the
// host's Adam runs while the device computes (the simulator's optimizer and host_adam tasks, which depend on the
// backward only, sim/program_build_rank.cpp).
template <class T>
void RankRun<T>::adam_update(int step, int warmup, double norm) {
  T clip = norm > o.grad_clip && o.grad_clip > 0 ? T(o.grad_clip / norm) : T(1);
  if (host_master && master_sliced) zeros(zslice, (long long)hopt.master.size());  // (freed by zero_gather_params)
  double lr = learning_rate(o, step, warmup);
  struct {
    std::vector<T*> p, m, v;
    std::vector<const T*> g;
    std::vector<long> n;
    std::vector<T> wd;
  } dev;  // the device runs (own_on_host is false: the current backend), for one launch after the loop
  struct HostRun {
    size_t k;
    long long a, so, n;
    T wd;
  };
  std::vector<HostRun> host;  // the runs of the host optimizer and of host-resident state, in order, after it
  for (size_t k = 0; k < own.size(); ++k) {
    T* M1 = moments(k, 1);  // (the host optimizer keeps its own: hopt.step below)
    T* M2 = moments(k, 2);
    // One Adam step per run of adjacent views with the same weight decay (key 1: decayed), the clip fused into it
    // (ops::adamw's gscale, on the device or in the host optimizer's CPU Adam).
    auto key = [&](size_t v, long long) -> long {
      const ParamView& pv = gl.views[v];
      if (shared > 0 && pv.layer >= shared) return -1;  // pseudo phase: slots beyond the k groups are unused
      if (model.two_d && replicated_view[v]) return -1;  // 2D: not this grid row's parameter
      if (store && store->os_on_device((int)v)) return -1;  // chunked offload's hybrid Adam: below, on the device
      return pv.decay ? 1 : 0;
    };
    gl.each_run(own[k].first, own[k].second, key, [&](long long at, long long n, long decay) {
      const long long a = own[k].first + at, so = own_off[k] + at;
      const T wd = T(decay ? o.weight_decay : 0);
      if (hopt.on() || state_on_host(k)) {
        host.push_back({k, a, so, n, wd});
      } else {
        dev.p.push_back(P(a)), dev.g.push_back(own_grad(k, a)), dev.m.push_back(M1 + so), dev.v.push_back(M2 + so);
        dev.n.push_back((long)n), dev.wd.push_back(wd);
      }
    });
  }
  if (!dev.p.empty())
    ops::adamw_multi(dev.p.data(), dev.g.data(), dev.m.data(), dev.v.data(), dev.n.data(), dev.wd.data(),
                     (long)dev.p.size(), T(lr), T(o.beta1), T(o.beta2), T(o.eps), (long)step + 1, clip);
  if (store)  // chunked offload's hybrid Adam: the chunks whose state is on the device (none: nothing to do), queued
    store->device_adam([&](int v, T* w, const T* g, T* m, T* s, long n) {
      ops::adamw(w, g, m, s, n, T(lr), T(o.beta1), T(o.beta2), T(o.eps), T(gl.views[(size_t)v].decay ? o.weight_decay : 0),
                 (long)step + 1, clip);
    });
  for (const HostRun& h : host) {
    BackendScope where(backend_for(own_on_host(h.k)));
    T* g = own_grad(h.k, h.a);
    if (hopt.on()) {  // (sliced host_master: the updated slice up as T into zslice, for the units' all-gather)
      hopt.step(host_master && master_sliced ? zslice.data() + h.so : P(h.a), g, h.so, h.n, T(lr), T(o.beta1),
                T(o.beta2), T(o.eps), h.wd, (long)step + 1, clip);
    } else {  // granular's host-resident state, the chunk store's host side
      host_adamw(P(h.a), g, moments(h.k, 1) + h.so, moments(h.k, 2) + h.so, (long)h.n, T(lr), T(o.beta1), T(o.beta2),
                 T(o.eps), h.wd, (long)step + 1, clip, adam_threads);
    }
  }
  if (store) store->device_adam_wait();  // (the hybrid chunks' parameters on the host: what follows reads them)
}

// ZeRO-1/2: every rank gathers the updated parameter slices of its owned units (overlap_param_gather: starts them,
// finished before each unit's first read).
template <class T>
void RankRun<T>::zero_gather_params() {
  if (defer_param_gather()) {
    param_queue.clear();
    for (int ui : {0, (int)L + 1})
      if (units[ui].owned) param_queue.push_back(ui);
    for (int ui = 1; ui <= (int)L; ++ui)
      if (units[ui].owned) param_queue.push_back(ui);
    param_next = 0;
    param_pending.resize(units.size());
    start_param_gathers(-1);
    return;
  }
  if (p.zero >= 1 && p.zero <= 2 && p.data_ranks() > 1)
    for (int ui = 0; ui < (int)units.size(); ++ui)
      if (units[ui].owned) all_gather_unit(ui);
  Buf<T>().swap(zslice);  // (sliced host_master: the slices are in the units now)
}

// all_gather_unit's device path without host copies or chunks (defer_param_gather), its collectives started.
template <class T>
bool RankRun<T>::defer_param_gather() const {
  return runs_param_gather_under_forward(p) && !host_master && !store && !gran.on();  // (the last three: offload's)
}

template <class T>
typename RankRun<T>::ParamGather RankRun<T>::param_gather_start(const Seg& sg, bool async) {
  ParamGather g{sg.c, {}, Buf<T>(sg.slice), Buf<T>(sg.slice * sg.n), sg.lo, sg.hi};
  ops::fill(g.mine.data(), T(0), (long)sg.slice);
  const long long a = sg.lo + sg.r * sg.slice, z = std::min(sg.hi, a + sg.slice);
  if (z > a) gl.read_range(ptab, a, z, g.mine.data());
  if (async) g.req = sg.c->iall_gather(g.mine.data(), g.all.data(), sg.slice, dtype_of<T>());
  else sg.c->all_gather(g.mine.data(), g.all.data(), sg.slice, dtype_of<T>());
  return g;
}

template <class T>
void RankRun<T>::param_gather_write(ParamGather& g) {
  g.c->wait(g.req);  // (a blocking gather's request: none)
  gl.write_range(ptab, g.lo, g.hi, g.all.data());
}

template <class T>
void RankRun<T>::start_param_gathers(int upto) {
  const size_t need = upto < 0 ? 0 : size_t(std::find(param_queue.begin(), param_queue.end(), upto) - param_queue.begin()) + 1;
  while (param_next < param_queue.size() && (param_next < (size_t)kParamGathersInFlight || param_next < need)) {
    const int ui = param_queue[param_next++];
    for (int si = 0; si < nseg(ui); ++si)
      if (seg(ui, si).n > 1) param_pending[(size_t)ui].push_back(param_gather_start(seg(ui, si), true));  // (1: its own)
  }
}

template <class T>
void RankRun<T>::finish_param_gather(int ui) {
  const auto at = std::find(param_queue.begin(), param_queue.end(), ui);
  if (at == param_queue.end()) return;
  start_param_gathers(ui);
  for (ParamGather& g : param_pending[(size_t)ui]) param_gather_write(g);
  param_pending[(size_t)ui].clear();
  param_queue.erase(at);  // (start_param_gathers leaves the queue as it is; ui is among the first param_next now)
  --param_next;
  start_param_gathers(-1);
}

template <class T>
void RankRun<T>::finish_param_gathers() {
  while (!param_queue.empty()) finish_param_gather(param_queue.front());
}

template void RankRun<float>::sp_reduce_layer(int, long long, long long);
template void RankRun<float>::reduce_scatter_unit(int, bool);
template void RankRun<float>::all_gather_unit(int);
template void RankRun<float>::gather_layer(int, const float*, bool);
template std::vector<TensorView> RankRun<float>::state_tensors(int32_t*);
template void RankRun<float>::save_checkpoint(long);
template long RankRun<float>::load_checkpoint(long);
template void RankRun<float>::optimizer_step(int, int, RunResult&);
template void RankRun<float>::finish_param_gather(int);
template void RankRun<float>::finish_param_gathers();
template void RankRun<double>::sp_reduce_layer(int, long long, long long);
template void RankRun<double>::reduce_scatter_unit(int, bool);
template void RankRun<double>::all_gather_unit(int);
template void RankRun<double>::gather_layer(int, const double*, bool);
template std::vector<TensorView> RankRun<double>::state_tensors(int32_t*);
template void RankRun<double>::save_checkpoint(long);
template long RankRun<double>::load_checkpoint(long);
template void RankRun<double>::optimizer_step(int, int, RunResult&);
template void RankRun<double>::finish_param_gather(int);
template void RankRun<double>::finish_param_gathers();

}  // namespace tp::exec::detail
