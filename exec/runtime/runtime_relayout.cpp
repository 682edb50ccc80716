// runtime_relayout: Pseudo-to-Real whose pseudo phase trains on a plan of another layout (plan.delink.plan with
// other dp, tp, pp, ZeRO, cp, ep, micro-batch, offload, ...). The job has the larger plan's ranks (job_ranks).
// The pseudo phase runs as its own RankRun on the first G_pseudo of them; at the delink step it copies its
// weight groups into every layer (RankRun::delink, as in one layout), and each rank writes its copies of record
// (weights and Adam moments) by their index in the model's single-rank layout. The handover (exec/runtime/handover.hpp)
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
// After the delink the weight-group replicas of other stages (replica_only) are not copies of record.
template <class T>
void RankRun<T>::export_state(Records<T>& out) {
  if (store) store->evict_all();  // the flat buffers hold every chunk (delink did so too)
  const GptLayout full = single_rank_layout();
  std::vector<double> at;  // view iv's single-rank indices
  size_t iv = gl.views.size();
  std::vector<T> w, a1, a2;
  for (size_t k = 0; k < own.size(); ++k) {
    const int ui = own_unit[k];
    if (shared == 0 && replica_only[ui]) continue;
    if (p.zero == 0 && seg(ui, own_seg[k]).r != 0) continue;
    BackendScope where(own_on_host(k) ? cpu_backend() : current_backend());
    gl.each_view(own[k].first, own[k].second, [&](size_t v, long long lo, long long hi, long long off) {
      const long long a = own[k].first + off, n = hi - lo, so = own_off[k] + off;
      if (!record_copy(v, a)) return;
      if (v != iv) at = full_index(full, v), iv = v;
      for (std::vector<T>* h : {&w, &a1, &a2}) h->resize((size_t)n);
      copy_elems(w.data(), P(a), n);
      copy_elems(a1.data(), moments(k, 1) + so, n);
      copy_elems(a2.data(), moments(k, 2) + so, n);
      for (long long i = 0; i < n; ++i) {
        const double g = at[(size_t)(a + i - gl.views[v].offset)];
        if (g >= 0) out.add((long long)g, w[i], a1[i], a2[i]);
      }
    });
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

bool pseudo_plan_differs(const Scenario& sc) {
  if (!sc.delink.on() || !sc.delink.plan) return false;
  Scenario real = sc, pseudo = sc;
  real.delink = Delink{};
  pseudo.delink = Delink{};
  pseudo.plan = *sc.delink.plan;
  return scenario_to_json(real)["plan"] != scenario_to_json(pseudo)["plan"];
}

namespace {
// Per-step lists of the pseudo phase, then the real phase's.
void append_phase(RunResult& r, const RunResult& real) {
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
  r.offload = real.offload;
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

template RunResult run_two_layouts<float>(const Scenario&, const RunOptions&, Comm&);
template RunResult run_two_layouts<double>(const Scenario&, const RunOptions&, Comm&);

}  // namespace detail
}  // namespace tp::exec
