// runtime_relayout: Pseudo-to-Real whose pseudo phase trains on a plan of another layout (plan.delink.plan with
// other dp, tp, pp, ZeRO, cp, ep, micro-batch, offload, ...). The job has the larger plan's ranks (job_ranks).
// The pseudo phase runs as its own RankRun on the first G_pseudo of them; at the delink step it copies its
// weight groups into every layer (RankRun::delink, as in one layout), and each rank writes its copies of record
// (weights and Adam moments) into the model's single-rank layout (FullState). One sum over every rank
// assembles the state; the real phase's RankRun, on the first G_real ranks, shards it like the seed's model
// (setup) and its moments like its optimizer state, and trains on from the delink step.
// Invariants: every element of the single-rank layout is written by exactly one rank (checked: a layout error
// is a logic_error, never a silently different model); a sum of one value and zeros is exact, so the real
// phase starts from bit for bit the pseudo phase's state. Checkpoints: the pseudo phase's are those of its
// RankRun (steps up to the delink, its G_pseudo ranks), the real phase's those of a run without delink on
// the real plan (steps after it); --resume continues in the phase of the newest complete one.
#include "exec/runtime_rank.hpp"

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

// The single-rank index of every flat element, -1 for none (2D: a wte block's padding rows): the shard of the
// identity plus one (the shard functions move values only, and write 0 where there is no full element).
template <class T>
std::vector<double> RankRun<T>::full_index_map() const {
  const GptLayout full = gpt_layout(gpt_shape(sc.model, Tn, 1, 0));
  std::vector<double> id(full.total);
  for (long long i = 0; i < full.total; ++i) id[i] = (double)(i + 1);
  std::vector<double> at = model.two_d ? shard_params_2d<double>(full, id, model.d2.lay)
                                        : shard_params<double>(full, id, model.d1.lay);
  for (double& x : at) x -= 1;
  return at;
}

// Each own range's views, where this rank holds the copy of record: weights and moments into st by their
// single-rank index. Without ZeRO every rank of a segment's group holds the same values; its rank 0 writes them.
// After the delink the weight-group replicas of other stages (replica_only) are not copies of record.
template <class T>
void RankRun<T>::export_state(FullState<T>& st) {
  if (store) store->evict_all();  // the flat buffers hold every chunk (delink did so too)
  const std::vector<double> at = full_index_map();
  const size_t total = (size_t)gpt_layout(gpt_shape(sc.model, Tn, 1, 0)).total;
  for (std::vector<T>* v : {&st.w, &st.m1, &st.m2, &st.n}) v->assign(total, T(0));
  std::vector<T> w, a1, a2;
  for (size_t k = 0; k < own.size(); ++k) {
    const int ui = own_unit[k];
    if (shared == 0 && replica_only[ui]) continue;
    if (p.zero == 0 && seg(ui, own_seg[k]).r != 0) continue;
    BackendScope where(own_on_host(k) ? cpu_backend() : current_backend());
    gl.each_view(own[k].first, own[k].second, [&](size_t v, long long lo, long long hi, long long off) {
      const long long a = own[k].first + off, n = hi - lo, so = own_off[k] + off;
      if (!record_copy(v, a)) return;
      for (std::vector<T>* h : {&w, &a1, &a2}) h->resize((size_t)n);
      copy_elems(w.data(), P(a), n);
      copy_elems(a1.data(), moments(k, 1) + so, n);
      copy_elems(a2.data(), moments(k, 2) + so, n);
      for (long long i = 0; i < n; ++i) {
        const double g = at[(size_t)(a + i)];
        if (g >= 0) st.w[(size_t)g] = w[i], st.m1[(size_t)g] = a1[i], st.m2[(size_t)g] = a2[i], st.n[(size_t)g] += T(1);
      }
    });
  }
}

// The real phase's moments from the handed state (its weights came through setup, its host optimizer's master
// copy with them); every own range's views, the unused copies included (they stay unused).
template <class T>
void RankRun<T>::import_moments(const FullState<T>& st) {
  const std::vector<double> at = full_index_map();
  std::vector<T> a1, a2;
  for (size_t k = 0; k < own.size(); ++k) {
    BackendScope where(own_on_host(k) ? cpu_backend() : current_backend());
    gl.each_view(own[k].first, own[k].second, [&](size_t, long long lo, long long hi, long long off) {
      const long long a = own[k].first + off, n = hi - lo, so = own_off[k] + off;
      a1.resize((size_t)n);
      a2.resize((size_t)n);
      for (long long i = 0; i < n; ++i) {
        const double g = at[(size_t)(a + i)];
        a1[i] = g >= 0 ? st.m1[(size_t)g] : T(0), a2[i] = g >= 0 ? st.m2[(size_t)g] : T(0);
      }
      copy_elems(moments(k, 1) + so, a1.data(), n);
      copy_elems(moments(k, 2) + so, a2.data(), n);
    });
  }
}

template std::vector<double> RankRun<float>::full_index_map() const;
template std::vector<double> RankRun<double>::full_index_map() const;
template void RankRun<float>::export_state(FullState<float>&);
template void RankRun<double>::export_state(FullState<double>&);
template void RankRun<float>::import_moments(const FullState<float>&);
template void RankRun<double>::import_moments(const FullState<double>&);

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
  FullState<T> st;
  double handed = 0;  // 1: the pseudo phase reached the delink (it may end before: --steps, a signal)
  if (!(real_ckpt && *real_ckpt > D)) {
    std::unique_ptr<Comm> group = world.split(world.rank() < G ? 0 : 1, world.rank());
    if (world.rank() < G) {
      RankRun<T> r(pseudo, o, *group);
      r.handoff = &st;
      res = r.run();
      handed = world.rank() == 0 && !st.w.empty() ? 1 : 0;
    }
    world.all_reduce_sum(&handed, 1, Dtype::f64);
    if (handed == 0) return res;  // the run ended in the pseudo phase (ranks outside it: an empty result)
    const size_t total = (size_t)gpt_layout(gpt_shape(sc.model, sc.training.seq_len, 1, 0)).total;
    for (std::vector<T>* v : {&st.w, &st.m1, &st.m2, &st.n}) {
      v->resize(total, T(0));  // (ranks without a pseudo-phase share: zeros)
      world.all_reduce_sum(v->data(), (long)total, dtype_of<T>());
    }
    if (world.rank() == 0)
      std::fprintf(stderr, "delinked at step %ld: %zu parameters and their Adam moments handed from the pseudo "
                   "plan's %d rank%s to the real plan's %d\n", D, total, G, G == 1 ? "" : "s", sc.plan.gpus());
    for (size_t g = 0; g < total; ++g)
      if (st.n[g] != T(1))
        throw std::logic_error("Pseudo-to-Real over two layouts: element " + std::to_string(g) +
                               " of the single-rank layout was written by " + std::to_string((long long)st.n[g]) +
                               " ranks, not one (exec/runtime_relayout.cpp)");
  }
  // The real phase on the first G_real ranks (a pseudo phase on more GPUs: the job has its ranks).
  const int Gr = real.plan.gpus();
  std::unique_ptr<Comm> group = Gr < world.size() ? world.split(world.rank() < Gr ? 0 : 1, world.rank()) : nullptr;
  if (world.rank() >= Gr) return res;
  RankRun<T> r(real, o, group ? *group : world);
  if (handed != 0) {
    r.start = &st;
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
