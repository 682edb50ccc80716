// runtime_relayout: Pseudo-to-Real as two runs. The pseudo phase trains on plan.delink.plan (another layout: dp,
// tp, pp, ZeRO, cp, ep, micro-batch, offload, ...) or on the real plan; the job has the larger plan's ranks
// (job_ranks). The pseudo phase runs as its own RankRun on the first G_pseudo of them and holds only the k
// weight-group slots (RankRun::groups_only: M6-10T's pseudo model is k layers, as the simulator's pseudo phase);
// at the delink step each rank writes its copies of record (weights and Adam moments), every layer's from its
// group's slot, by their index in the model's single-rank layout. The handover (exec/runtime/handover.hpp)
// assembles that layout one window at a time with one sum over every rank per window; the real phase's RankRun,
// on the first G_real ranks, takes its elements of each window (its weights in setup, as the seed's model would
// be sharded, and its moments like its optimizer state) and trains on from the delink step.
// Invariants: every element of the single-rank layout is written by exactly one rank (checked per window: a
// layout error is a logic_error, never a silently different model); a sum of one value and zeros is exact, so
// the real phase starts from bit for bit the pseudo phase's state. No rank holds the whole model for it: a rank
// holds its copies of record, one window and its real-phase elements. Checkpoints: the pseudo phase's are those
// of its RankRun (steps up to the delink, its G_pseudo ranks), the real phase's those of a run without delink
// on the real plan (steps after it); --resume continues in the phase of the newest complete one.
#include <climits>
#include <stdexcept>

#include "exec/runtime/runtime_rank.hpp"

namespace tp::exec {
namespace detail {

namespace {
// n elements between host and backend memory, whichever side each pointer is on.
template <class T>
void copy_elems(T* dst, const T* src, long long n) {
  const Backend& b = current_backend();
  const bool sd = on_device(b, src), dd = on_device(b, dst);
  const CopyKind k = sd ? (dd ? CopyKind::device_to_device : CopyKind::device_to_host)
                        : (dd ? CopyKind::host_to_device : CopyKind::host_to_host);
  b.copy(dst, src, sizeof(T) * (size_t)n, k, Stream{});
}
}  // namespace

// The single-rank layout (gpt_layout at tp 1 with every expert), and the index in it of each element of view v,
// -1 for none (2D: a wte block's padding rows).
template <class T>
GptLayout RankRun<T>::single_rank_layout() const {
  return gpt_layout(gpt_shape(sc.model, Tn, 1, 0));
}

template <class T>
std::vector<double> RankRun<T>::full_index(const GptLayout& full, size_t v) const {
  return model.two_d ? view_full_index(full, model.d2.lay, gl.views[v])
                      : view_full_index(full, model.d1.lay, gl.views[v]);
}

// Each own range's views, where this rank holds the copy of record: weights and moments into rec by their
// single-rank index. Without ZeRO every rank of a segment's group holds the same values; its rank 0 writes them.
// While weights are shared (the pseudo phase's run at its delink) a layer slot's own range holds the records of
// every layer of this stage in its group (slots are units of equal size: a ZeRO slice of slot g is the same slice
// of layer l), written by the ranks of layer l's stage, which hold the slot (hold_weight_groups); the fp8 scales
// are delinked first.
template <class T>
void RankRun<T>::export_state(Records<T>& out) {
  if (store) store->evict_all(), store->sync_os_to_host();  // the flat buffers hold every chunk and its moments
  if (shared > 0) delink_fp8_scales();
  const GptLayout full = single_rank_layout();
  std::vector<double> at;  // view iv's single-rank indices
  size_t iv = gl.views.size();
  std::vector<T> w, a1, a2;
  std::vector<int> dst;  // the units whose records own range k holds
  for (size_t k = 0; k < own.size(); ++k) {
    const int ui = own_unit[k];
    if (p.zero == 0 && seg(ui, own_seg[k]).r != 0) continue;
    dst.assign(1, ui);
    if (shared > 0 && is_layer_unit(ui)) {
      dst.clear();
      for (long long l = 0; l < L; ++l)
        if (weight_group(l, L, shared) == ui - 1 && stage_of_layer(l) == rc.stage) dst.push_back(unit_of_layer(l));
    }
    BackendScope where(own_on_host(k) ? cpu_backend() : current_backend());
    for (int ud : dst) {
      const long long shift = units[ud].a - units[ui].a;  // slot -> layer: the same offsets in a unit of equal size
      gl.each_view(own[k].first + shift, own[k].second + shift, [&](size_t v, long long lo, long long hi, long long off) {
        const long long a = own[k].first + off, n = hi - lo, so = own_off[k] + off;
        if (!record_copy(v, a + shift)) return;
        if (v != iv) at = full_index(full, v), iv = v;
        for (std::vector<T>* h : {&w, &a1, &a2}) h->resize((size_t)n);
        copy_elems(w.data(), P(a), n);
        copy_elems(a1.data(), moments(k, 1) + so, n);
        copy_elems(a2.data(), moments(k, 2) + so, n);
        for (long long i = 0; i < n; ++i) {
          const double g = at[(size_t)(a + shift + i - gl.views[v].offset)];
          if (g >= 0) out.add((long long)g, w[i], a1[i], a2[i]);
        }
      });
    }
  }
  out.fp8_scale = f8.scale;
  out.done = true;
}

template <class T>
std::vector<IndexRun> RankRun<T>::wanted(const std::vector<std::pair<long long, long long>>& ranges,
                                         std::vector<long long>& base) const {
  const GptLayout full = single_rank_layout();
  std::vector<IndexRun> want;
  base.assign(ranges.size() + 1, 0);
  for (size_t k = 0; k < ranges.size(); ++k) {
    gl.each_view(ranges[k].first, ranges[k].second, [&](size_t v, long long lo, long long hi, long long at) {
      const std::vector<double> idx = full_index(full, v);
      append_runs(want, idx.data() + lo, hi - lo, base[k] + at);
    });
    base[k + 1] = base[k] + (ranges[k].second - ranges[k].first);
  }
  return split_and_sort(std::move(want), start->window);
}

// setup's initial parameters in the real phase: the weights' pass of the handover (every rank of the job takes
// part) for the ranges setup places, one after the other; the source reads them from there.
template <class T>
ParamSource<T> RankRun<T>::place_handed() {
  Handover<T>& h = *start;
  std::vector<std::pair<long long, long long>> ranges = params_needed();
  std::vector<long long> base;
  const std::vector<IndexRun> want = wanted(ranges, base);
  Placed<T> got;
  exchange_state(h.mine, want, base.back(), h.total, h.window, *h.job, HandoverPart::weights, &got);
  h.mine.w = std::vector<T>();  // (the moments' pass needs only the moments)
  return [ranges, base, w = std::move(got.w)](long long a, long long z, T* dst) {
    if (z <= a) return;  // (an empty ZeRO slice may lie outside every range)
    // (a request lies inside one of the ranges: the last that starts at or before a)
    const size_t k = std::upper_bound(ranges.begin(), ranges.end(), std::pair{a, LLONG_MAX}) - ranges.begin();
    if (k == 0 || z > ranges[k - 1].second) throw std::logic_error("handover: flat range outside the placed ranges");
    const auto& r = ranges[k - 1];
    std::copy(w.begin() + base[k - 1] + (a - r.first), w.begin() + base[k - 1] + (z - r.first), dst);
  };
}

// The moments' pass of the handover into every own range's optimizer state (the unused copies included: they
// stay unused), through a staging buffer of the own ranges one after the other; then the records are released.
template <class T>
void RankRun<T>::import_moments() {
  Handover<T>& h = *start;
  std::vector<long long> base;
  const std::vector<IndexRun> want = wanted(own, base);
  Placed<T> got;
  exchange_state(h.mine, want, base.back(), h.total, h.window, *h.job, HandoverPart::moments, &got);
  h.mine.release();
  for (size_t k = 0; k < own.size(); ++k) {
    BackendScope where(own_on_host(k) ? cpu_backend() : current_backend());
    const long long n = own[k].second - own[k].first;
    copy_elems(moments(k, 1) + own_off[k], got.m1.data() + base[k], n);
    copy_elems(moments(k, 2) + own_off[k], got.m2.data() + base[k], n);
  }
}

// fp8: each layer's delayed-scaling state from its weight group's (at the delink, before the records are written).
template <class T>
void RankRun<T>::delink_fp8_scales() {
  std::vector<long long> group_of((size_t)L);
  for (long long l = 0; l < L; ++l) group_of[(size_t)l] = weight_group(l, L, shared);
  f8.delink(group_of);
}

// One layout: the pseudo run's state as it holds it (the k slots and their replicas), into host memory.
template <class T>
void RankRun<T>::export_local(LocalState<T>& out) {
  if (store) store->evict_all(), store->sync_os_to_host();  // the flat buffers hold every chunk and its moments
  delink_fp8_scales();
  out.shared = shared;
  out.ranges = params_needed();
  out.base.assign(out.ranges.size() + 1, 0);
  for (size_t i = 0; i < out.ranges.size(); ++i) out.base[i + 1] = out.base[i] + (out.ranges[i].second - out.ranges[i].first);
  out.w.resize((size_t)out.base.back());
  for (size_t i = 0; i < out.ranges.size(); ++i)  // a unit's device part, then its host part (granular)
    for (long long a = out.ranges[i].first; a < out.ranges[i].second;) {
      const int u = unit_at(a);
      const bool host = host_at(u, a);
      const long long z = std::min(out.ranges[i].second, host ? units[u].b : dev_end[u]);
      BackendScope where(host ? cpu_backend() : current_backend());
      copy_elems(out.w.data() + out.base[i] + (a - out.ranges[i].first), P(a), z - a);
      a = z;
    }
  out.own.clear(), out.m1.clear(), out.m2.clear();
  for (size_t k = 0; k < own.size(); ++k) {
    const long long n = own[k].second - own[k].first;
    out.own.push_back({own_unit[k], own_seg[k]});
    out.m1.emplace_back((size_t)n), out.m2.emplace_back((size_t)n);
    BackendScope where(own_on_host(k) ? cpu_backend() : current_backend());
    copy_elems(out.m1.back().data(), moments(k, 1) + own_off[k], n);
    copy_elems(out.m2.back().data(), moments(k, 2) + own_off[k], n);
  }
  out.fp8_scale = f8.scale;
  out.done = true;
}

// One layout, the real run: a layer unit's flat index -> its group's slot in the pseudo run (units of equal size).
template <class T>
ParamSource<T> RankRun<T>::place_local() {
  const LocalState<T>& s = *local;
  return [this, &s](long long a, long long z, T* dst) {
    if (z <= a) return;
    const int u = unit_at(a);
    const long long shift = is_layer_unit(u) ? units[unit_of_layer(weight_group(u - 1, L, s.shared))].a - units[u].a : 0;
    const long long sa = a + shift, sz = z + shift;
    const size_t k = std::upper_bound(s.ranges.begin(), s.ranges.end(), std::pair{sa, LLONG_MAX}) - s.ranges.begin();
    if (k == 0 || sz > s.ranges[k - 1].second)
      throw std::logic_error("delink: the pseudo phase's run did not hold the real phase's flat range");
    std::copy(s.w.begin() + s.base[k - 1] + (sa - s.ranges[k - 1].first),
              s.w.begin() + s.base[k - 1] + (sz - s.ranges[k - 1].first), dst);
  };
}

// One layout, the real run: every own range's moments from its group's slot's own range (same segment, same slice).
template <class T>
void RankRun<T>::import_local_moments() {
  const LocalState<T>& s = *local;
  for (size_t k = 0; k < own.size(); ++k) {
    const int ui = own_unit[k];
    const int su = is_layer_unit(ui) ? unit_of_layer(weight_group(ui - 1, L, s.shared)) : ui;
    const auto it = std::find(s.own.begin(), s.own.end(), std::pair{su, own_seg[k]});
    const long long n = own[k].second - own[k].first;
    if (it == s.own.end() || (long long)s.m1[(size_t)(it - s.own.begin())].size() != n)
      throw std::logic_error("delink: the pseudo phase's run did not hold the real phase's optimizer state");
    const size_t j = (size_t)(it - s.own.begin());
    BackendScope where(own_on_host(k) ? cpu_backend() : current_backend());
    copy_elems(moments(k, 1) + own_off[k], s.m1[j].data(), n);
    copy_elems(moments(k, 2) + own_off[k], s.m2[j].data(), n);
  }
}

template GptLayout RankRun<float>::single_rank_layout() const;
template GptLayout RankRun<double>::single_rank_layout() const;
template std::vector<double> RankRun<float>::full_index(const GptLayout&, size_t) const;
template std::vector<double> RankRun<double>::full_index(const GptLayout&, size_t) const;
template void RankRun<float>::export_state(Records<float>&);
template void RankRun<double>::export_state(Records<double>&);
template std::vector<IndexRun> RankRun<float>::wanted(const std::vector<std::pair<long long, long long>>&,
                                                      std::vector<long long>&) const;
template std::vector<IndexRun> RankRun<double>::wanted(const std::vector<std::pair<long long, long long>>&,
                                                       std::vector<long long>&) const;
template ParamSource<float> RankRun<float>::place_handed();
template ParamSource<double> RankRun<double>::place_handed();
template void RankRun<float>::import_moments();
template void RankRun<double>::import_moments();
template void RankRun<float>::export_local(LocalState<float>&);
template void RankRun<double>::export_local(LocalState<double>&);
template ParamSource<float> RankRun<float>::place_local();
template ParamSource<double> RankRun<double>::place_local();
template void RankRun<float>::import_local_moments();
template void RankRun<double>::import_local_moments();

bool pseudo_plan_differs(const Scenario& sc) {
  if (!sc.delink.on() || !sc.delink.plan) return false;
  Scenario real = sc, pseudo = sc;
  real.delink = Delink{};
  pseudo.delink = Delink{};
  pseudo.plan = *sc.delink.plan;
  return scenario_to_json(real)["plan"] != scenario_to_json(pseudo)["plan"];
}

namespace {
// The offload record of both phases: with the same offload kind, the per-step lists of the pseudo phase, then the
// real phase's, and the real phase's totals (its host state, arena and chunks); else the real phase's alone.
void append_offload(OffloadResult& o, const OffloadResult& real) {
  if (!(o.on && real.on && o.kind == real.kind)) {
    o = real;
    return;
  }
  OffloadResult r = real;
  for (auto [to, from] : {std::pair{&r.peak_loaded_bytes, &o.peak_loaded_bytes}, std::pair{&r.h2d_bytes, &o.h2d_bytes},
                          std::pair{&r.d2h_bytes, &o.d2h_bytes}, std::pair{&r.h2d_s, &o.h2d_s}, std::pair{&r.d2h_s, &o.d2h_s},
                          std::pair{&r.h2d_moves, &o.h2d_moves}, std::pair{&r.d2h_moves, &o.d2h_moves},
                          std::pair{&r.adam_h2d_bytes, &o.adam_h2d_bytes}, std::pair{&r.adam_d2h_bytes, &o.adam_d2h_bytes},
                          std::pair{&r.peak_arena_bytes, &o.peak_arena_bytes}, std::pair{&r.peak_device_bytes, &o.peak_device_bytes},
                          std::pair{&r.os_device_bytes, &o.os_device_bytes},
                          std::pair{&r.prefetch_h2d_bytes, &o.prefetch_h2d_bytes},
                          std::pair{&r.prefetch_d2h_bytes, &o.prefetch_d2h_bytes},
                          std::pair{&r.early_d2h_bytes, &o.early_d2h_bytes}})
    to->insert(to->begin(), from->begin(), from->end());
  r.peak_arena_bytes_max = std::max(r.peak_arena_bytes_max, o.peak_arena_bytes_max);
  r.peak_device_bytes_max = std::max(r.peak_device_bytes_max, o.peak_device_bytes_max);
  o = std::move(r);
}

// Per-step lists of the pseudo phase, then the real phase's.
void append_phase(RunResult& r, const RunResult& real) {
  r.graph_steps.insert(r.graph_steps.end(), real.graph_steps.begin(), real.graph_steps.end());
  for (auto [to, from] : {std::pair{&r.losses, &real.losses}, std::pair{&r.step_time_s, &real.step_time_s},
                          std::pair{&r.grad_norm, &real.grad_norm}})
    to->insert(to->end(), from->begin(), from->end());
  if (!real.step_time_s.empty()) r.tokens_per_s = real.tokens_per_s;  // the real phase's throughput
  for (auto [to, from] : {std::pair{&r.peak_memory_bytes, &real.peak_memory_bytes},
                          std::pair{&r.peak_host_memory_bytes, &real.peak_host_memory_bytes}}) {
    to->resize(std::max(to->size(), from->size()), 0.0);  // (either phase may have run on fewer ranks)
    for (size_t i = 0; i < from->size(); ++i) (*to)[i] = std::max((*to)[i], (*from)[i]);
  }
  r.param_elements = real.param_elements;  // the real plan's holdings
  r.moment_elements = real.moment_elements;
  r.trace = real.trace;
  append_offload(r.offload, real.offload);
  r.stop_signal = real.stop_signal;
  if (!real.last_checkpoint.empty()) r.last_checkpoint = real.last_checkpoint;
}
}  // namespace

template <class T>
RunResult run_two_layouts(const Scenario& sc, const RunOptions& o, Comm& world) {
  Scenario pseudo = sc;  // the pseudo phase: its plan, delinked by its own run
  pseudo.plan = *sc.delink.plan;
  Scenario real = sc;  // the real phase: a run without delink that starts at the delink step
  real.delink = Delink{};
  const long D = delink_step_of(sc, o);
  const int G = pseudo.plan.gpus();
  // --resume: the real phase's newest complete checkpoint when it is past the delink, else the pseudo phase's.
  std::optional<long> real_ckpt;
  if (o.resume && !o.checkpoint_dir.empty()) real_ckpt = latest_complete(o.checkpoint_dir, sc.plan.gpus());
  RunResult res;
  Handover<T> h;
  h.job = &world;
  h.total = gpt_layout(gpt_shape(sc.model, sc.training.seq_len, 1, 0)).total;
  h.window = o.handover_window > 0 ? o.handover_window : default_handover_window;
  double handed = 0;  // 1: the pseudo phase reached the delink (it may end before: --steps, a signal)
  if (!(real_ckpt && *real_ckpt > D)) {
    std::unique_ptr<Comm> group = world.split(world.rank() < G ? 0 : 1, world.rank());
    if (world.rank() < G) {
      RankRun<T> r(pseudo, o, *group);
      r.handoff = &h.mine;
      res = r.run();
      handed = world.rank() == 0 && h.mine.done ? 1 : 0;
    }  // (the pseudo phase's memory is freed here; its copies of record stay in h.mine)
    world.all_reduce_sum(&handed, 1, Dtype::f64);
    if (handed == 0) return res;  // the run ended in the pseudo phase (ranks outside it: an empty result)
    h.mine.finish(h.window);
    if (Fp8State f = Fp8State::for_scenario(sc); f.on()) {  // the delink's scales, from rank 0 (a pseudo rank) to all
      if (world.rank() == 0) f.scale = h.mine.fp8_scale;
      world.broadcast(f.scale.data(), (long)f.scale.size(), Dtype::f64, 0);
      h.fp8_scale = std::move(f.scale);
    }
    if (world.rank() == 0)
      std::fprintf(stderr, "delinked at step %ld: %lld parameters and their Adam moments handed from the pseudo "
                   "plan's %d rank%s to the real plan's %d\n", D, h.total, G, G == 1 ? "" : "s", sc.plan.gpus());
  }
  // The real phase on the first G_real ranks (a pseudo phase on more GPUs: the job has its ranks, and those
  // outside the real plan add their copies of record to the handover's windows).
  const int Gr = real.plan.gpus();
  std::unique_ptr<Comm> group = Gr < world.size() ? world.split(world.rank() < Gr ? 0 : 1, world.rank()) : nullptr;
  if (world.rank() >= Gr) {
    if (handed != 0) {
      exchange_state<T>(h.mine, {}, 0, h.total, h.window, world, HandoverPart::weights, nullptr);
      h.mine.w = std::vector<T>();
      exchange_state<T>(h.mine, {}, 0, h.total, h.window, world, HandoverPart::moments, nullptr);
    }
    return res;
  }
  RankRun<T> r(real, o, group ? *group : world);
  if (handed != 0) {
    r.start = &h;  // (the handover's two passes: in setup, place_handed; after it, import_moments)
    r.start_step = (int)D;
  }
  RunResult rest = r.run();
  if (handed == 0) {  // resumed in the real phase
    rest.delink_step = D;
    return rest;
  }
  append_phase(res, rest);
  res.delink_step = D;
  return res;
}

// One layout (no plan.delink.plan, or the real plan): the pseudo phase's run keeps its state in host memory
// (LocalState), is freed, and the real phase's run on the same ranks takes it; checkpoints and --resume as above.
template <class T>
RunResult run_one_layout(const Scenario& sc, const RunOptions& o, Comm& world) {
  Scenario real = sc;
  real.delink = Delink{};
  const long D = delink_step_of(sc, o);
  std::optional<long> real_ckpt;
  if (o.resume && !o.checkpoint_dir.empty()) real_ckpt = latest_complete(o.checkpoint_dir, sc.plan.gpus());
  RunResult res;
  LocalState<T> st;
  if (!(real_ckpt && *real_ckpt > D)) {
    {
      RankRun<T> r(sc, o, world);
      r.keep = &st;
      res = r.run();
    }  // (the pseudo phase's memory is freed here; its k slots stay in st)
    double handed = st.done ? 1 : 0;  // (every rank runs the same steps; the sum keeps them in step)
    world.all_reduce_sum(&handed, 1, Dtype::f64);
    if (handed < world.size()) return res;  // the run ended in the pseudo phase
    if (world.rank() == 0)
      std::fprintf(stderr, "delinked at step %ld: %d weight group%s into %lld layers on %d rank%s\n", D, st.shared,
                   st.shared == 1 ? "" : "s", (long long)sc.model.layers, world.size(), world.size() == 1 ? "" : "s");
  }
  const bool handed = st.done;
  RankRun<T> r(real, o, world);
  if (handed) {
    r.local = &st;  // (setup places the weights through place_local; run imports the moments, then frees st)
    r.start_step = (int)D;
  }
  RunResult rest = r.run();
  if (!handed) {  // resumed in the real phase
    rest.delink_step = D;
    return rest;
  }
  append_phase(res, rest);
  res.delink_step = D;
  return res;
}

template RunResult run_one_layout<float>(const Scenario&, const RunOptions&, Comm&);
template RunResult run_one_layout<double>(const Scenario&, const RunOptions&, Comm&);
template RunResult run_two_layouts<float>(const Scenario&, const RunOptions&, Comm&);
template RunResult run_two_layouts<double>(const Scenario&, const RunOptions&, Comm&);

}  // namespace detail
}  // namespace tp::exec
