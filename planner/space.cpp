// space: see space.hpp.
#include "space.hpp"

#include <algorithm>
#include <cmath>
#include <set>

namespace tp {

namespace {

template <class T>
bool allowed(const std::vector<T>& fixed, const T& x) {
  return fixed.empty() || std::find(fixed.begin(), fixed.end(), x) != fixed.end();
}

bool divides(long long d, long long x) { return d > 0 && x % d == 0; }

// 1, 2, 3, 4, 6, 8, 12, 16, ... (powers of two and three times powers of two) up to hi.
std::vector<long long> two_three_series(long long hi) {
  std::vector<long long> v;
  for (long long p = 1; p <= hi; p *= 2) {
    v.push_back(p);
    if (3 * p / 2 > p && 3 * p / 2 <= hi && p >= 2) v.push_back(3 * p / 2);
  }
  std::sort(v.begin(), v.end());
  v.erase(std::unique(v.begin(), v.end()), v.end());
  return v;
}

}  // namespace

int uneven_stage_splits(long long L, int pp, StageSplit out[2]) {
  int n = 0;
  if (pp < 2 || L < pp) return 0;
  if (pp == 2) {  // no middle stage: the two ends as equal as possible (the even split when L is even)
    if (L % 2 != 0) out[n++] = StageSplit{(int)(L / 2), 0, (int)(L - L / 2)};
    return n;
  }
  const long long c = (L + pp - 1) / pp;
  for (long long k = c; k <= c + 1; ++k) {
    long long rest = L - (pp - 2) * k;  // for the first and last stages
    if (rest < 2) continue;
    long long first = rest / 2, last = rest - first;
    if (first == k && last == k) continue;  // the even split
    out[n++] = StageSplit{(int)first, (int)k, (int)last};
  }
  return n;
}

SpaceLimits space_limits(const Scenario& sc, double bcrit_tokens) {
  SpaceLimits lim;
  const Search& se = *sc.search;
  int cap = se.max_gpus > 0 ? se.max_gpus : sc.cluster.total_gpus();
  if (!se.gpu_counts.empty()) {
    for (int n : se.gpu_counts) if (n >= se.min_gpus && n <= cap) lim.gpu_counts.push_back(n);
  } else {
    for (long long n : two_three_series(cap)) if (n >= se.min_gpus) lim.gpu_counts.push_back((int)n);
    if (cap >= se.min_gpus) lim.gpu_counts.push_back(cap);
  }
  std::sort(lim.gpu_counts.begin(), lim.gpu_counts.end());
  lim.gpu_counts.erase(std::unique(lim.gpu_counts.begin(), lim.gpu_counts.end()), lim.gpu_counts.end());
  lim.max_batch = std::max(1LL, (long long)std::floor(se.max_batch_over_critical * bcrit_tokens / sc.training.seq_len));
  if (!se.fix.global_batch.empty()) lim.batches = se.fix.global_batch;
  else if (sc.training.global_batch > 0) lim.batches = {sc.training.global_batch};
  return lim;
}

namespace {

// Narrows one fixed key: `prod` are the framework's production values, `research` the research values of the key.
template <class T, class Name>
void narrow(std::vector<T>& fixed, const std::vector<T>& prod, const std::vector<T>& research, bool research_ok,
            const std::string& key, const std::string& fw, Name name, Issues& is) {
  const std::vector<T> given = fixed;
  auto in = [](const std::vector<T>& v, const T& x) { return std::find(v.begin(), v.end(), x) != v.end(); };
  if (given.empty()) {
    fixed = prod;
    if (research_ok) fixed.insert(fixed.end(), research.begin(), research.end());
    return;
  }
  fixed.clear();
  for (const T& x : given)
    if (in(prod, x) || in(research, x)) fixed.push_back(x);
  if (fixed.empty()) {
    std::string vals;
    for (const T& x : prod) vals += (vals.empty() ? "" : ", ") + std::string(name(x));
    is.add("$.search.fix." + key, fw + " cannot run any of the fixed values; it runs " + vals +
                                      " (or widen search.fix.framework)");
  }
}

}  // namespace

Fix framework_fix(const Scenario& sc, Issues& is) {
  Fix f = sc.search->fix;
  const Framework& fw = sc.framework;
  const FrameworkCan& c = fw.can;
  const bool res = c.research;
  auto all_if_empty = [](auto v, std::initializer_list<typename decltype(v)::value_type> all) {
    return v.empty() ? decltype(v)(all) : v;
  };
  const std::vector<Schedule> sch = all_if_empty(c.schedules, {Schedule::gpipe, Schedule::one_f_one_b, Schedule::interleaved});
  narrow(f.schedule, sch, {Schedule::modular}, res, "schedule", fw.name, schedule_name, is);
  narrow(f.zero, all_if_empty(c.zero, {0, 1, 2, 3}), {}, res, "zero", fw.name, [](int z) { return std::to_string(z); }, is);
  narrow(f.offload, all_if_empty(c.offload, {OffloadKind::none, OffloadKind::optimizer}),
         {OffloadKind::granular, OffloadKind::chunked}, res, "offload", fw.name, offload_kind_name, is);
  narrow(f.recompute, all_if_empty(c.recompute, {Recompute::none, Recompute::selective, Recompute::full}), {}, res,
         "recompute", fw.name, recompute_name, is);
  narrow(f.tp_mode, {TpMode::d1}, {TpMode::d2}, res, "tp_mode", fw.name, tp_mode_name, is);
  narrow(f.grad_accumulation, {GradAccumulation::standard}, {GradAccumulation::layered}, res, "grad_accumulation",
         fw.name, grad_accumulation_name, is);
  if (!c.sequence_parallel) narrow(f.sequence_parallel, {false}, {}, false, "sequence_parallel", fw.name,
                                   [](bool b) { return b ? "true" : "false"; }, is);
  if (!c.context_parallel) narrow(f.cp, {1}, {}, false, "cp", fw.name, [](int x) { return std::to_string(x); }, is);
  if (!c.expert_parallel) narrow(f.ep, {1}, {}, false, "ep", fw.name, [](int x) { return std::to_string(x); }, is);
  if (!c.uneven_stages) narrow(f.stage_split, {StageSplitKind::even}, {}, false, "stage_split", fw.name,
                               [](StageSplitKind k) { return k == StageSplitKind::even ? "even" : "uneven"; }, is);
  if (!c.precisions.empty()) {
    const std::vector<Precision> given = f.precision.empty() ? std::vector<Precision>{sc.training.precision} : f.precision;
    std::vector<Precision> ok;
    for (Precision p : given)
      if (std::find(c.precisions.begin(), c.precisions.end(), p) != c.precisions.end()) ok.push_back(p);
    if (ok.empty())
      is.add(f.precision.empty() ? "$.training.precision" : "$.search.fix.precision",
             fw.name + " cannot train in " + precision_name(given.front()));
    f.precision = ok;
  }
  // fp8 under a recipe the scenario names (training.fp8_recipe) that the framework does not run: no fp8 for it.
  const std::vector<std::string>& rs = c.fp8_recipes;
  if (sc.training.fp8_recipe_given && !rs.empty() && std::find(rs.begin(), rs.end(), sc.training.fp8_recipe) == rs.end()) {
    const std::vector<Precision> given = f.precision.empty() ? std::vector<Precision>{sc.training.precision} : f.precision;
    std::vector<Precision> ok;
    for (Precision p : given)
      if (p != Precision::fp8) ok.push_back(p);
    if (ok.empty()) is.add("$.training.fp8_recipe", fw.name + " does not run the fp8 recipe \"" + sc.training.fp8_recipe + "\"");
    f.precision = ok;
  }
  return f;
}

std::vector<Layout> enumerate_layouts(const Scenario& sc, const SpaceLimits& lim) {
  const Transformer& M = sc.model;
  const Fix& fx = sc.search->fix;
  const int gpn = sc.cluster.gpus_per_node;
  const bool moe = M.moe.experts > 0;
  const int max_tp = sc.framework.can.max_tp;  // the framework's bound (0: none)
  auto tp_ok_1d = [&](int t) {
    return (max_tp == 0 || t <= max_tp) && divides(t, M.heads) && divides(t, M.kv_heads) && divides(t, M.ffn_hidden);
  };
  auto q_ok = [&](int q) {
    return divides(q, M.heads) && divides(q, M.kv_heads) && divides(q, M.hidden) && divides(q, M.ffn_hidden);
  };
  int gmax = lim.gpu_counts.empty() ? 0 : lim.gpu_counts.back();
  // (tp, mode, node_blocks) candidates.
  struct TpOpt { int tp; TpMode mode; bool blocks; };
  std::vector<TpOpt> tps;
  if (allowed(fx.tp_mode, TpMode::d1))
    for (int t = 1; t <= gmax; ++t)
      // 1D tensor parallelism stays inside a node unless tp is fixed by the user.
      if (tp_ok_1d(t) && (t <= gpn || !fx.tp.empty()) && allowed(fx.tp, t)) tps.push_back({t, TpMode::d1, false});
  if (allowed(fx.tp_mode, TpMode::d2) && !moe) {
    int b = 1;
    while ((b + 1) * (b + 1) <= gpn) ++b;
    for (int q = 2; q * q <= gmax; ++q) {
      if (!q_ok(q) || !allowed(fx.tp, q * q)) continue;
      tps.push_back({q * q, TpMode::d2, false});
      if (b > 1 && b * b == gpn && q % b == 0 && (q * q) % gpn == 0) tps.push_back({q * q, TpMode::d2, true});
    }
  }
  // Context parallelism (powers of two, 2 cp dividing the sequence): searched for long sequences, where each
  // rank keeps at least 2048 tokens of a sequence, or as fixed by the user.
  std::vector<int> cps;
  const long long seq = sc.training.seq_len;
  const bool cp_allowed = search_attention(fx) == Attention::flash;  // validate_plan: cp needs flash attention
  for (int cp = 1; cp <= gmax && 2LL * cp <= seq; cp *= 2)
    if (seq % (2LL * cp) == 0 || cp == 1)
      if (fx.cp.empty() ? cp == 1 || (seq / cp >= 2048 && cp_allowed) : allowed(fx.cp, cp)) cps.push_back(cp);
  if (cps.empty() && fx.cp.empty()) cps.push_back(1);
  // Training precisions: the scenario's, or those search.fix.precision allows (fp8 where the GPU has it).
  const std::vector<Precision> precs = fx.precision.empty() ? std::vector<Precision>{sc.training.precision} : fx.precision;
  std::vector<Layout> out;
  for (int n : lim.gpu_counts)
    for (const TpOpt& to : tps)
      for (long long pp = 1; pp <= M.layers; ++pp) {
        StageSplit splits[2];  // pp not dividing the layers: only uneven stages (Megatron's first / last counts)
        const bool even_pp = divides(pp, M.layers) && allowed(fx.stage_split, StageSplitKind::even);
        if (!even_pp && (!allowed(fx.stage_split, StageSplitKind::uneven) || uneven_stage_splits(M.layers, (int)pp, splits) == 0))
          continue;
        if (!allowed(fx.pp, (int)pp)) continue;
        for (int cp : cps) {
          if (n % (to.tp * pp * cp) != 0) continue;
          if (cp > 1 && to.mode == TpMode::d2) continue;  // not modelled (validate_plan)
          int dp = n / (to.tp * (int)pp * cp);
          if (!allowed(fx.dp, dp)) continue;
          const int dr = dp * cp;  // data ranks: expert parallelism lies inside them
          std::vector<int> eps = {1};
          if (moe) {
            eps.clear();
            for (int e = 1; e <= dr; e *= 2)
              if (divides(e, dr) && divides(e, M.moe.experts)) eps.push_back(e);
            if (dr > 1 && divides(dr, M.moe.experts) && eps.back() != dr) eps.push_back(dr);
          }
          for (int ep : eps) {
            if (!allowed(fx.ep, ep)) continue;
            for (Precision pr : precs) {
              Layout l;
              l.dp = dp; l.tp = to.tp; l.pp = (int)pp; l.ep = ep; l.cp = cp; l.tp_mode = to.mode; l.node_blocks = to.blocks;
              l.prec = pr;
              out.push_back(l);
            }
          }
        }
      }
  return out;
}

long long enumerate_choices(const Scenario& sc, const AnalyticModel& am, const Layout& lay, const SpaceLimits& lim,
                            const std::function<bool(const Choice&, const MicroCost&, long long)>& visit,
                            long long& dominated, bool prune_dominated) {
  const Transformer& M = sc.model;
  const Fix& fx = sc.search->fix;
  const long long L = M.layers, Lp = L / lay.pp, s = sc.training.seq_len;
  const int q = lay.tp_mode == TpMode::d2 ? (int)std::lround(std::sqrt((double)lay.tp)) : 1;
  const bool host_ok = sc.cluster.host.memory_bandwidth_bytes_per_s > 0;
  const bool moe = M.moe.experts > 0;
  long long skipped = 0;
  dominated = 0;

  // Stage splits: the even one when pp divides the layers, and Megatron-style uneven ones (standard accumulation,
  // not modular: see validate_plan).
  const bool even_ok = divides(lay.pp, L) && allowed(fx.stage_split, StageSplitKind::even);
  StageSplit splits[3];
  const int n_splits = allowed(fx.stage_split, StageSplitKind::uneven) ? uneven_stage_splits(L, lay.pp, splits + 1) : 0;
  auto split_ok = [&](int si, Schedule sc_, int v, bool layered) {
    if (si == 0) return even_ok && (sc_ != Schedule::interleaved || divides(v, Lp));
    if (layered || sc_ == Schedule::modular) return false;
    const StageSplit& x = splits[si];
    return sc_ != Schedule::interleaved || (x.first % v == 0 && x.last % v == 0 && x.mid % v == 0);
  };
  std::vector<long long> mbs = fx.microbatch.empty() ? std::vector<long long>{1, 2, 4, 8, 16, 32} : fx.microbatch;
  std::vector<bool> sps = {false};
  if (lay.tp > 1 && lay.tp_mode == TpMode::d1 && s % ((long long)lay.tp * lay.cp) == 0) sps.push_back(true);
  struct Sched { Schedule s; int v; };
  std::vector<Sched> scheds;
  if (lay.pp == 1) {
    for (Schedule x : {Schedule::one_f_one_b, Schedule::gpipe})
      if (allowed(fx.schedule, x)) { scheds.push_back({x, 1}); break; }  // one stage: the schedule is moot
  } else {
    for (Schedule x : {Schedule::gpipe, Schedule::one_f_one_b})
      if (allowed(fx.schedule, x) && allowed(fx.virtual_stages, 1)) scheds.push_back({x, 1});
    if (allowed(fx.schedule, Schedule::interleaved))
      for (long long v = 2; v <= Lp + 2; ++v)  // every chunking Megatron accepts (of the even or an uneven split)
        if ((divides(v, Lp) && even_ok) || n_splits > 0)
          if (allowed(fx.virtual_stages, (int)v)) scheds.push_back({Schedule::interleaved, (int)v});
    if (allowed(fx.schedule, Schedule::modular) && allowed(fx.virtual_stages, (int)Lp) && even_ok)
      scheds.push_back({Schedule::modular, (int)Lp});
  }
  bool interleaved_lp = false;
  for (const Sched& sd : scheds) interleaved_lp |= sd.s == Schedule::interleaved && sd.v == Lp;
  struct Off { OffloadKind k; double f; bool experts; };
  std::vector<Off> offs;
  if (allowed(fx.offload, OffloadKind::none)) offs.push_back({OffloadKind::none, 0, false});
  if (host_ok) {
    if (allowed(fx.offload, OffloadKind::optimizer)) offs.push_back({OffloadKind::optimizer, 0, false});
    if (allowed(fx.offload, OffloadKind::granular)) {
      offs.push_back({OffloadKind::granular, 0.5, false});
      offs.push_back({OffloadKind::granular, 1.0, false});
      if (moe) offs.push_back({OffloadKind::granular, 1.0, true});
    }
    if (allowed(fx.offload, OffloadKind::chunked)) offs.push_back({OffloadKind::chunked, 0, false});
  }
  std::vector<int> zeros;
  const int max_zero = lay.pp > 1 ? sc.framework.can.max_zero_with_pp : 3;  // DeepSpeed's pipeline engine: ZeRO-1
  for (int z = 0; z <= (lay.dp * lay.cp > 1 ? std::min(3, max_zero) : 0); ++z) if (allowed(fx.zero, z)) zeros.push_back(z);

  for (long long mb : mbs) {
    if (mb % q != 0) { ++skipped; continue; }
    if (lim.batches.empty() && mb * lay.dp > lim.max_batch) continue;
    // Micro-batch counts: fixed batches, or a two-three series plus multiples of pp and the largest count.
    std::vector<long long> ms;
    if (!lim.batches.empty()) {
      for (long long B : lim.batches) if (B % (lay.dp * mb) == 0) ms.push_back(B / (lay.dp * mb));
    } else {
      long long mmax = lim.max_batch / (lay.dp * mb);
      ms = two_three_series(mmax);
      for (long long k = lay.pp; k <= mmax && lay.pp > 1; k *= 2) ms.push_back(k);
      if (mmax >= 1) ms.push_back(mmax);
      if (lay.pp > 1 && mmax >= lay.pp) ms.push_back(mmax / lay.pp * lay.pp);
      std::sort(ms.begin(), ms.end());
      ms.erase(std::unique(ms.begin(), ms.end()), ms.end());
    }
    if (ms.empty()) continue;
    for (bool sp : sps) {
      if (!allowed(fx.sequence_parallel, sp)) continue;
      const MicroCost* mcs[kRecomputes];  // in kRecomputeOrder, by growing recompute work
      for (int r = 0; r < kRecomputes; ++r) {
        Recompute rc = kRecomputeOrder[r];
        bool modelled = !(rc == Recompute::selective_op && lay.tp_mode == TpMode::d2);  // plan_rules refuses it
        mcs[r] = modelled && allowed(fx.recompute, rc) ? &am.micro(lay, mb, sp, rc) : nullptr;
      }
      for (long long m : ms) {
        for (const Sched& sd : scheds) {
          for (GradAccumulation acc : {GradAccumulation::standard, GradAccumulation::layered}) {
            if (!allowed(fx.grad_accumulation, acc)) continue;
            bool layered = acc == GradAccumulation::layered;
            if (layered && lay.pp > 1 && sd.s != Schedule::gpipe && sd.s != Schedule::modular) continue;
            // modular with standard accumulation runs Megatron's interleaved order with one layer per chunk:
            // the same plan as interleaved with virtual_stages = layers / pp, kept once (as interleaved).
            if (sd.s == Schedule::modular && !layered && interleaved_lp) continue;
            if (sd.s == Schedule::interleaved && m % lay.pp != 0) { ++skipped; continue; }
            if (sd.s == Schedule::modular && (m < lay.pp || (!layered && m % lay.pp != 0))) { ++skipped; continue; }
            for (int si = 0; si <= n_splits; ++si) {  // the stage split: 0 even, else an uneven candidate
              if (!split_ok(si, sd.s, sd.v, layered)) continue;
              const StageSplit& sp_st = splits[si];
              for (int z : zeros) {
                // Recompute only adds work and offload only adds copies and host work: once a cheaper setting
                // fits, the costlier ones are dominated (same layout and batch, more time) and not estimated.
                for (int r = 0; r < kRecomputes; ++r) {
                  if (!mcs[r]) continue;
                  if (!mcs[r]->ok) { ++skipped; continue; }
                  bool fit_without_offload = false;
                  for (const Off& o : offs) {
                    if (o.k == OffloadKind::chunked && lay.dp * lay.cp > 1 && z != 3) continue;
                    bool per_layer = layered || z >= 2 || o.k == OffloadKind::granular || o.k == OffloadKind::chunked;
                    if (per_layer ? m * L > 5000000 : m * sd.v * lay.pp > 5000000) { ++skipped; continue; }
                    if (prune_dominated && o.k != OffloadKind::none && fit_without_offload) { ++dominated; continue; }
                    Choice ch;
                    ch.microbatch = mb; ch.num_microbatches = m; ch.schedule = sd.s; ch.virtual_stages = sd.v;
                    ch.acc = acc; ch.zero = z; ch.offload = o.k; ch.offload_fraction = o.f; ch.experts_only = o.experts;
                    ch.sp = sp; ch.recompute = kRecomputeOrder[r];
                    ch.first_layers = sp_st.first; ch.mid_layers = sp_st.mid; ch.last_layers = sp_st.last;
                    bool fits = visit(ch, *mcs[r], m * mb * lay.dp);
                    if (o.k == OffloadKind::none && fits) fit_without_offload = true;
                  }
                  if (prune_dominated && fit_without_offload) {  // higher recompute levels: dominated
                    for (int r2 = r + 1; r2 < kRecomputes; ++r2) if (mcs[r2]) dominated += (long long)offs.size();
                    break;
                  }
                }
              }
            }
          }
        }
      }
    }
  }
  return skipped;
}

Plan plan_from(const Layout& lay, const Choice& ch) {
  Plan p;
  if (ch.first_layers > 0) {  // uneven: first, the middle stages, last
    p.stage_layers.assign(lay.pp, ch.mid_layers);
    p.stage_layers.front() = ch.first_layers;
    p.stage_layers.back() = ch.last_layers;
  }
  p.dp = lay.dp; p.tp = lay.tp; p.pp = lay.pp; p.ep = lay.ep; p.cp = lay.cp; p.tp_mode = lay.tp_mode;
  p.tp_grid_node_blocks = lay.node_blocks;
  p.microbatch = ch.microbatch; p.schedule = ch.schedule; p.virtual_stages = ch.virtual_stages;
  p.grad_accumulation = ch.acc; p.zero = ch.zero; p.sequence_parallel = ch.sp; p.recompute = ch.recompute;
  p.overlap_param_gather = ch.overlap_param_gather;
  p.offload.kind = ch.offload;
  if (ch.offload == OffloadKind::granular) { p.offload.fraction = ch.offload_fraction; p.offload.experts_only = ch.experts_only; }
  p.num_microbatches = ch.num_microbatches;
  return p;
}

}  // namespace tp
