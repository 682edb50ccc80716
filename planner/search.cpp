// search: see search.hpp. Threads take layouts from a shared counter; each keeps its best points (by the
// objective, then a total order on plans) overall, per GPU count and per value of every plan dimension;
// the merge is therefore independent of the thread count. Confirmation simulates the analytic best in
// parallel and re-ranks by the simulated objective.
#include "search.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "analytic.hpp"
#include "explain.hpp"
#include "sim/op_cost.hpp"
#include "space.hpp"
#include "workers.hpp"

namespace tp {

namespace detail {
// Total order on points: objective, then plan keys (deterministic ties).
bool point_less(const Point& a, const Point& b) {
  if (a.objective != b.objective) return a.objective < b.objective;
  auto key = [](const Point& p) {
    const Layout& l = p.lay;
    const Choice& c = p.ch;
    return std::make_tuple(l.gpus(), l.tp, (int)l.tp_mode, l.node_blocks, l.pp, l.ep, l.cp, (int)l.prec, c.microbatch, c.num_microbatches,
                           (int)c.schedule, c.virtual_stages, (int)c.acc, c.zero, (int)c.offload, c.offload_fraction,
                           c.experts_only, c.sp, (int)c.recompute, c.first_layers, c.mid_layers, c.last_layers);
  };
  return key(a) < key(b);
}

}  // namespace detail

using detail::point_less;

namespace {

// The best `cap` points by point_less.
struct TopList {
  size_t cap = 1;
  std::vector<Point> v;  // max-heap on point_less
  void add(const Point& p) {
    if (v.size() < cap) { v.push_back(p); std::push_heap(v.begin(), v.end(), point_less); return; }
    if (!point_less(p, v.front())) return;
    std::pop_heap(v.begin(), v.end(), point_less);
    v.back() = p;
    std::push_heap(v.begin(), v.end(), point_less);
  }
  void merge(const TopList& o) { for (const Point& p : o.v) add(p); }
  std::vector<Point> sorted() const {
    std::vector<Point> s = v;
    std::sort(s.begin(), s.end(), point_less);
    return s;
  }
};

struct Keeper {
  TopList top;
  std::map<std::pair<int, int>, TopList> per_gpus;   // fitting points per (GPU count, family)
  // Per GPU count, its kConfirmRounds x confirm analytic-best fitting points: confirmed as a search restricted to
  // that count confirms its top list, so that by_gpus agrees with such a search.
  std::map<int, TopList> per_count;
  SearchStats st;
};

}  // namespace

// Confirmation: up to kConfirmRounds x confirm analytic-best points overall, and kPerGpuTries per GPU count.
constexpr int kConfirmRounds = 4;
constexpr int kTopKept = 32;        // analytic-best points kept (x confirm): enough for top_k distinct layouts
constexpr int kPerLayoutTries = 2;  // analytic-best points of one layout confirmed before giving up on it
constexpr double kEstimateShare = kProgressEstimateShare;
constexpr int kPerGpuTries = 6;

// The layout the top list tells apart (dp, tp, tp_mode, pp, cp, ep, precision, schedule and accumulation, ZeRO,
// offload): the top K are the best plan of K distinct layouts; other batch sizes or micro-batches of a layout
// appear per GPU count (by_gpus), not in the top K.
static auto layout_key(const Point& p) {
  const Layout& l = p.lay;
  return std::make_tuple(l.dp, l.tp, (int)l.tp_mode, l.node_blocks, l.pp, l.cp, l.ep, (int)l.prec, (int)p.ch.schedule,
                         (int)p.ch.acc, p.ch.zero, (int)p.ch.offload);
}
using LayoutKey = decltype(layout_key(Point{}));

// The same layout with the data ranks counted once (dp x cp): two layouts that differ only by moving GPUs between
// dp and cp share it.
static auto idea_key(const Point& p) {
  const Layout& l = p.lay;
  return std::make_tuple(l.dp * l.cp, l.tp, (int)l.tp_mode, l.node_blocks, l.pp, l.ep, (int)l.prec, (int)p.ch.schedule,
                         (int)p.ch.acc, p.ch.zero, (int)p.ch.offload);
}
// Step times this close (relative) make two dp / cp splits one idea in the top list.
constexpr double kSameStepFraction = 0.005;

// Keeps the first candidate of each layout (v sorted best first), and of layouts that differ only by moving GPUs
// between dp and cp with the same step time (within kSameStepFraction), the first: the top K are distinct ideas.
static void keep_distinct_layouts(std::vector<Candidate>& v) {
  std::set<LayoutKey> seen;
  std::vector<Candidate> out;
  for (Candidate& c : v) {
    if (!seen.insert(layout_key(c.point)).second) continue;
    bool same_idea = false;
    for (const Candidate& k : out)
      if (idea_key(k.point) == idea_key(c.point) && k.sim && c.sim &&
          std::fabs(c.sim->step_time_s / k.sim->step_time_s - 1) <= kSameStepFraction)
        same_idea = true;
    if (!same_idea) out.push_back(std::move(c));
  }
  v = std::move(out);
}

// A point's family for per-GPU-count confirmation: ZeRO stage, schedule kind (contiguous, interleaved,
// layered), offload kind.
static int family(const Point& p) {
  int kind = p.ch.acc == GradAccumulation::layered ? 2 : (p.ch.virtual_stages > 1 ? 1 : 0);
  return (p.ch.zero * 3 + kind) * 4 + (int)p.ch.offload;
}

// Scores a point: its analytic estimate, the whole run's steps at its global batch (as the simulator's run
// estimate computes them), time to train, cost and the search objective.
struct Scorer {
  const AnalyticModel& am;
  Objective obj;
  double n_nonembed = 0, tokens = 0, target_loss = 0, seq = 0, price = 0;
  Scorer(const Scenario& sc, const AnalyticModel& a)
      : am(a), obj(sc.search->objective), n_nonembed((double)sc.model.layers * layer_params_full(sc.model)),
        tokens(sc.training.tokens), target_loss(sc.training.target_loss), seq((double)sc.training.seq_len),
        price(sc.cluster.price_per_gpu_hour_usd) {}
  RunEstimate run(long long batch) const {
    return estimate_run(n_nonembed, (double)batch * seq, tokens, 1.0, 1, 0, 0, ScalingLaw{}, target_loss);
  }
  Point point(const Layout& lay, const Choice& ch, const MicroCost& mc, long long B) const {
    Point p;
    p.lay = lay;
    p.ch = ch;
    p.batch = B;
    p.est = am.estimate(lay, mc, ch);
    double steps = run(B).steps;
    p.time_to_train_s = steps * p.est.step_s;
    p.cost_usd = p.time_to_train_s / 3600 * lay.gpus() * price;
    switch (obj) {
      case Objective::time_to_train: p.objective = p.time_to_train_s; break;
      case Objective::cost: p.objective = p.cost_usd; break;
      case Objective::throughput_per_gpu: p.objective = -(double)B * seq / p.est.step_s / lay.gpus(); break;
    }
    return p;
  }
};


// Tasks of a point's step program (what a simulation costs): compute pieces per micro-batch and layer (or
// model chunk), and ZeRO-3 gathers, on every simulated stage. A layout whose groups straddle nodes unevenly
// (tensor-parallel groups across a node's edge, or stages of dp x cp x tp GPUs that do not tile the nodes) is
// usually not symmetric, and the simulator then runs it rank by rank (sim/simulate.cpp): counted as every
// translate's tasks. (One stage inside one node stays symmetric.)
static double sim_tasks(const Scenario& sc, const Point& p) {
  const Choice& c = p.ch;
  double Lp = std::max<double>((double)sc.model.layers / p.lay.pp, c.mid_layers);
  bool per_layer = c.acc == GradAccumulation::layered || c.zero >= 2 || c.offload == OffloadKind::granular ||
                   c.offload == OffloadKind::chunked;
  double per_stage = 2.0 * c.num_microbatches * (per_layer ? Lp : c.virtual_stages) * (c.zero >= 3 ? 2 : 1);
  const int gpn = std::max(1, sc.cluster.gpus_per_node), stage = p.lay.dp * p.lay.cp * p.lay.tp;
  const bool aligned = (gpn % p.lay.tp == 0 || p.lay.tp % gpn == 0) &&
                       (stage % gpn == 0 || gpn % stage == 0 || (stage < gpn && p.lay.pp == 1));
  return per_stage * p.lay.pp * (aligned ? 1 : stage);
}

double confirm_cost_s(const Scenario& sc, const Point& p) { return 1e-5 * p.lay.gpus() + 1e-6 * sim_tasks(sc, p); }

// The winner's neighbours: plans on the same GPU count that differ from it in exactly one plan dimension
// (dp, the number of micro-batches and virtual stages follow). Per dimension, the best that fits and, when
// it would be faster, the best that does not (the memory wall).
static std::vector<std::pair<std::string, Point>> neighbours(const Scenario& sc, const AnalyticModel& am,
                                                             const SpaceLimits& lim, const std::vector<Layout>& layouts,
                                                             const Point& w, const Scorer& score) {
  constexpr int kN = 11;
  const char* names[kN] = {"tensor parallelism", "pipeline parallelism", "micro-batch size", "pipeline schedule",
                           "gradient accumulation", "ZeRO stage", "offload", "recomputation", "sequence parallelism",
                           "global batch", "expert parallelism"};
  auto values = [](const Point& p, long long* v) {
    v[0] = p.lay.tp * 4 + (int)p.lay.tp_mode * 2 + p.lay.node_blocks; v[1] = p.lay.pp * 1000000LL + p.ch.first_layers * 1000LL + p.ch.last_layers; v[2] = p.ch.microbatch;
    v[3] = (int)p.ch.schedule * 100 + (p.ch.schedule == Schedule::interleaved ? p.ch.virtual_stages : 0);
    v[4] = (int)p.ch.acc; v[5] = p.ch.zero;
    v[6] = (int)p.ch.offload * 100 + (long long)std::lround(p.ch.offload_fraction * 10) + (p.ch.experts_only ? 50 : 0);
    v[7] = (int)p.ch.recompute; v[8] = p.ch.sp; v[9] = p.batch; v[10] = p.lay.ep;
  };
  long long wv[kN];
  values(w, wv);
  std::vector<Point> fit(kN), over(kN);
  std::vector<char> has_fit(kN, 0), has_over(kN, 0);
  for (const Layout& lay : layouts) {
    if (lay.gpus() != w.lay.gpus()) continue;
    long long dominated = 0;
    enumerate_choices(sc, am, lay, lim, [&](const Choice& ch, const MicroCost& mc, long long B) {
      Point p;
      p.lay = lay; p.ch = ch; p.batch = B;
      long long v[kN];
      values(p, v);
      int diff = -1, ndiff = 0;
      for (int d = 0; d < kN; ++d) if (v[d] != wv[d]) { diff = d; ++ndiff; }
      if (ndiff != 1) return true;
      p = score.point(lay, ch, mc, B);
      bool ok = p.est.fits && p.est.host_fits;
      std::vector<Point>& slot = ok ? fit : over;
      std::vector<char>& has = ok ? has_fit : has_over;
      if (!has[diff] || point_less(p, slot[diff])) { slot[diff] = p; has[diff] = 1; }
      return ok;
    }, dominated, false);
  }
  std::vector<std::pair<std::string, Point>> out;
  for (int d = 0; d < kN; ++d) {
    if (has_fit[d]) out.push_back({names[d], fit[d]});
    // The memory wall: a faster neighbour that does not fit, or the only neighbours in this dimension.
    if (has_over[d] && (over[d].objective < w.objective || !has_fit[d])) out.push_back({names[d], over[d]});
  }
  return out;
}

// The analytic pass over every layout on `threads` workers: the kept best points overall and per (GPU count,
// family), and the counts, merged in worker order.
static Keeper estimate_all(const Scenario& sc, const AnalyticModel& am, const Scorer& score, const SpaceLimits& lim,
                           const std::vector<Layout>& layouts, int confirm, int threads, const PlanOptions& opt,
                           std::chrono::steady_clock::time_point t0) {
  std::vector<Keeper> keepers(threads);
  std::atomic<size_t> next{0}, done{0};
  Workers workers;  // an exception in a worker (bad_alloc, a simulator error) reaches the caller
  auto work = [&](int w) {
    Keeper& K = keepers[w];
    K.top.cap = kTopKept * confirm;
    for (size_t i; !workers.failed() && (i = next.fetch_add(1)) < layouts.size(); done.fetch_add(1)) {
      const Layout& lay = layouts[i];
      long long dominated = 0;
      K.st.pruned_invalid += enumerate_choices(sc, am, lay, lim, [&](const Choice& ch, const MicroCost& mc, long long B) {
        ++K.st.configurations_evaluated;
        Point p = score.point(lay, ch, mc, B);
        if (!p.est.fits || !p.est.host_fits) {
          ++K.st.pruned_memory;
          return false;
        }
        K.top.add(p);
        TopList& pg = K.per_gpus[{lay.gpus(), family(p)}];
        pg.cap = 1;
        pg.add(p);
        TopList& pc = K.per_count[lay.gpus()];
        pc.cap = (size_t)(kConfirmRounds * confirm);
        pc.add(p);
        return true;
      }, dominated);
      K.st.pruned_dominated += dominated;
    }
  };
  std::function<void()> progress;
  if (opt.progress)
    progress = [&] {
      while (done.load() < layouts.size() && !workers.failed()) {
        opt.progress(kEstimateShare * done.load() / std::max<size_t>(1, layouts.size()),
                     std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
    };
  workers.run(threads, work, progress);
  Keeper all;
  all.top.cap = kTopKept * confirm;
  for (Keeper& k : keepers) {
    all.top.merge(k.top);
    for (auto& [key, tl] : k.per_gpus) { all.per_gpus[key].cap = 1; all.per_gpus[key].merge(tl); }
    for (auto& [n, tl] : k.per_count) { all.per_count[n].cap = (size_t)(kConfirmRounds * confirm); all.per_count[n].merge(tl); }
    all.st.configurations_evaluated += k.st.configurations_evaluated;
    all.st.pruned_invalid += k.st.pruned_invalid;
    all.st.pruned_memory += k.st.pruned_memory;
    all.st.pruned_dominated += k.st.pruned_dominated;
  }
  return all;
}

// Confirms analytic points (best first) in rounds of `confirm` (at most kPerLayoutTries per layout, a layout
// dropped once one of its plans is confirmed), until top_k distinct layouts fit when simulated (the closed-form
// memory model can be optimistic) or the points run out. Returns the confirmed candidates that fit.
static std::vector<Candidate> confirm_points(Confirmer& cf, const std::vector<Point>& best_first, int top_k,
                                             int confirm, double capacity_bytes) {
  std::vector<Point> queue;
  {
    std::map<LayoutKey, int> tries;
    for (const Point& p : best_first)
      if (tries[layout_key(p)]++ < kPerLayoutTries) queue.push_back(p);
  }
  std::vector<Candidate> out;
  std::set<LayoutKey> confirmed;
  for (size_t at = 0; at < queue.size() && (int)confirmed.size() < top_k;) {
    std::vector<Point> round;
    for (; at < queue.size() && (int)round.size() < confirm; ++at)
      if (!confirmed.count(layout_key(queue[at]))) round.push_back(queue[at]);
    for (Candidate& c : cf.run(round))
      if (acceptable(c, capacity_bytes)) {
        confirmed.insert(layout_key(c.point));
        out.push_back(c);
      }
  }
  return out;
}

// The top list: the analytic-best points over every GPU count, confirmed (confirm_points).
static void confirm_top(Confirmer& cf, const Keeper& all, int top_k, int confirm, double capacity_bytes,
                        PlanOutcome& out) {
  out.top = confirm_points(cf, all.top.sorted(), top_k, confirm, capacity_bytes);
  std::sort(out.top.begin(), out.top.end(), candidate_less);
}

// Per GPU count: the analytic best of each family (ZeRO stage x schedule kind x offload), best first; the first
// kPerGpuTries within the simulation budget are simulated. Families guard against an analytic bias of one
// technique (e.g. ZeRO-3 gathers at large dp). With them, the count's own analytic-best points confirmed as a
// search restricted to that count would (confirm_points); the best that fits is the count's answer. Then the top
// list and these answers are made consistent, and the top list cut to top_k distinct layouts.
static void best_per_gpu_count(const Scenario& sc, Confirmer& cf, const Keeper& all, int top_k, int confirm,
                               double capacity_bytes, PlanOutcome& out) {
  std::map<int, std::vector<Point>> fam_best;
  for (auto& [key, tl] : all.per_gpus) fam_best[key.first].push_back(tl.v.front());
  for (auto& [n, pts] : fam_best) {
    std::sort(pts.begin(), pts.end(), point_less);
    std::vector<Point> sims;
    for (const Point& p : pts)
      if ((int)sims.size() < kPerGpuTries && sim_tasks(sc, p) <= kConfirmTaskBudget) sims.push_back(p);
    GpuPoint g{n, Candidate{}, false};
    bool have = false;
    std::vector<Candidate> found = cf.run(sims);
    // What a search restricted to this count confirms (the confirmer simulates a point once: repeats are free).
    auto it = all.per_count.find(n);
    if (it != all.per_count.end()) {
      std::vector<Point> own;  // (within the per-count simulation budget, as the families' points)
      for (const Point& p : it->second.sorted())
        if (sim_tasks(sc, p) <= kConfirmTaskBudget) own.push_back(p);
      for (Candidate& c : confirm_points(cf, own, top_k, confirm, capacity_bytes)) found.push_back(c);
    }
    for (Candidate& c : found)
      if (acceptable(c, capacity_bytes) && (!have || candidate_less(c, g.best))) { g.best = c; g.simulated = have = true; }
    if (!have) g.best = cf.analytic(pts.front());  // nothing simulated fits, or all beyond the budget
    out.by_gpus.push_back(g);
  }
  // A GPU count's best is the best confirmed plan with that count, whichever pass confirmed it.
  for (GpuPoint& g : out.by_gpus)
    for (const Candidate& c : out.top)
      if (c.plan.gpus() == g.gpus && (!g.simulated || candidate_less(c, g.best))) { g.best = c; g.simulated = true; }
  // The overall best may be a per-GPU-count best found only by that pass.
  for (const GpuPoint& g : out.by_gpus) {
    if (!g.simulated) continue;
    bool have = false;
    for (const Candidate& c : out.top) have |= same_plan(c, g.best);
    if (!have) out.top.push_back(g.best);
  }
  std::sort(out.top.begin(), out.top.end(), candidate_less);
  keep_distinct_layouts(out.top);
  const Search& se = *sc.search;
  if ((int)out.top.size() > se.top_k) out.top.resize(se.top_k);
  // Without search.min_gpus (and without an offload fix), the per-GPU answers start at the smallest count
  // where a plan fits without offload, when any does: offload plans below it (years to train) stay reachable
  // with min_gpus or fix.offload.
  if (!se.min_gpus_given && se.fix.offload.empty()) {
    int first = 0;
    for (auto& [key, tl] : all.per_gpus)
      if (key.second % 4 == (int)OffloadKind::none && !tl.v.empty() && (first == 0 || key.first < first)) first = key.first;
    if (first > 0) {
      out.min_gpus = first;
      std::erase_if(out.by_gpus, [&](const GpuPoint& g) { return g.gpus < first; });
    }
  }
}

// The scenario with its search fix narrowed to what its framework can run (planner/space.hpp framework_fix).
static Scenario narrowed(const Scenario& given) {
  Scenario sc = given;
  sc.search = std::make_shared<Search>(*given.search);
  Issues is;
  sc.search->fix = framework_fix(given, is);
  if (!is.empty()) {
    for (auto& m : is.messages) m = given.name + ": " + m;
    throw InputError(is.messages);
  }
  return sc;
}

// Every candidate of an outcome names the framework it was searched with.
static void stamp_framework(PlanOutcome& out, const std::string& name) {
  for (Candidate& c : out.top) c.framework = name;
  for (GpuPoint& g : out.by_gpus) g.best.framework = name;
  for (GpuPoint& g : out.pareto) g.best.framework = name;
  for (Explanation& e : out.why) e.alt.framework = name;
}

// The search proper on one scenario and framework (no compare variants).
static PlanOutcome search_one(const Scenario& given, const PlanOptions& opt) {
  auto t0 = std::chrono::steady_clock::now();
  const Scenario sc = narrowed(given);
  const Search& se = *sc.search;
  PlanOutcome out;
  out.scenario = given;
  check_target_loss(sc);
  AnalyticModel am(sc);
  const Scorer score(sc, am);
  RunEstimate probe = score.run(1);
  SpaceLimits lim = space_limits(sc, probe.critical_batch_tokens);
  std::vector<Layout> layouts = enumerate_layouts(sc, lim);
  const int confirm = se.confirm > 0 ? se.confirm : std::max(3 * se.top_k, 12);

  int threads = opt.threads > 0 ? opt.threads : (int)std::max(1u, std::thread::hardware_concurrency());
  threads = std::max(1, std::min<int>(threads, (int)layouts.size()));
  const Keeper all = estimate_all(sc, am, score, lim, layouts, confirm, threads, opt, t0);
  out.stats = all.st;
  out.stats.threads = threads;
  out.stats.analytic_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  // Confirm: the analytic best, then per GPU count the best that the simulation finds fitting.
  Confirmer cf(sc, se.objective, threads);
  cf.cost = [&sc](const Point& p) { return confirm_cost_s(sc, p); };
  cf.budget_s = se.confirm_budget_s;
  // Progress of the confirming phase: simulations done against those expected (the first round, a few per GPU
  // count, the alternatives of the explanation and the winner's trace).
  std::atomic<long long> sims_done{0};
  std::mutex progress_mu;
  const double expected_sims = (double)confirm + kPerGpuTries * (double)lim.gpu_counts.size() + 12;
  if (opt.progress)
    cf.on_simulated = [&]() {
      double f = std::min(0.99, (double)++sims_done / expected_sims);
      std::lock_guard<std::mutex> lk(progress_mu);
      opt.progress(kEstimateShare + (1 - kEstimateShare) * f,
                   std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    };
  confirm_top(cf, all, se.top_k, confirm, am.capacity_bytes, out);
  best_per_gpu_count(sc, cf, all, se.top_k, confirm, am.capacity_bytes, out);
  out.pareto = pareto_front(out.by_gpus);
  if (!out.top.empty()) {  // the winner keeps its program and events (the report draws its timeline)
    out.top[0].sim = std::make_shared<Result>(simulate(cf.scenario_of(out.top[0].point)));
  }
  if (!out.top.empty()) {
    out.why = explain(cf, out.top[0], neighbours(sc, am, lim, layouts, out.top[0].point, score));
  } else {
    out.note = all.st.configurations_evaluated == 0 ? "no valid plan: no configuration of the search space passes the plan rules (check search.fix, min_gpus / max_gpus and gpu_counts against the model and cluster)"
             : all.st.configurations_evaluated == all.st.pruned_memory
                   ? "no plan fits in memory: every configuration exceeds the GPU's memory (or the host's, with offload)"
                   : "no plan was confirmed by the simulation: every analytic candidate ran out of memory when simulated";
  }
  out.stats.simulated = cf.simulated();
  out.stats.confirm_skipped = cf.skipped();
  out.stats.confirm_estimated_s = cf.estimated_s();
  if (cf.skipped() > 0)
    out.budget_note = "the confirmation budget (search.confirm_budget_s = " + json(se.confirm_budget_s).dump() +
                      " estimated simulation seconds) was spent: " + std::to_string(cf.skipped()) +
                      " candidates were not simulated; the top list may be shorter and per-GPU-count answers past it "
                      "are analytic";
  out.stats.simulate_seconds = cf.seconds();
  out.stats.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  stamp_framework(out, sc.framework.name);
  if (opt.progress) opt.progress(1.0, out.stats.seconds);
  return out;
}

// search.fix.framework: the frameworks searched (empty: the scenario's own, already in force).
static std::vector<Framework> searched_frameworks(const Scenario& sc) {
  std::vector<Framework> out;
  const std::vector<std::string>& names = sc.search->fix.framework;
  const bool any = std::find(names.begin(), names.end(), "any") != names.end();
  for (const Framework& f : catalog_frameworks())
    if (any || std::find(names.begin(), names.end(), f.name) != names.end()) out.push_back(f);
  // The scenario's own framework first: a plan that costs the same under two frameworks is reported under it.
  std::stable_partition(out.begin(), out.end(), [&](const Framework& f) { return f.name == sc.framework.name; });
  return out;
}

// One outcome from the searches of several frameworks: the top K distinct layouts of all, the best per GPU count,
// its Pareto front, the winner's explanation; statistics summed.
static PlanOutcome merge_outcomes(const Scenario& given, std::vector<PlanOutcome>& outs) {
  PlanOutcome m;
  m.scenario = given;
  size_t winner = outs.size();
  for (size_t i = 0; i < outs.size(); ++i) {
    PlanOutcome& o = outs[i];
    if (!o.top.empty() && (winner == outs.size() || candidate_less(o.top[0], outs[winner].top[0]))) winner = i;
    m.top.insert(m.top.end(), o.top.begin(), o.top.end());
    for (const GpuPoint& g : o.by_gpus) {
      auto it = std::find_if(m.by_gpus.begin(), m.by_gpus.end(), [&](const GpuPoint& x) { return x.gpus == g.gpus; });
      if (it == m.by_gpus.end()) m.by_gpus.push_back(g);
      else if ((g.simulated && !it->simulated) || (g.simulated == it->simulated && candidate_less(g.best, it->best))) *it = g;
    }
    SearchStats& s = m.stats;
    s.configurations_evaluated += o.stats.configurations_evaluated;
    s.pruned_invalid += o.stats.pruned_invalid;
    s.pruned_memory += o.stats.pruned_memory;
    s.pruned_dominated += o.stats.pruned_dominated;
    s.simulated += o.stats.simulated;
    s.confirm_skipped += o.stats.confirm_skipped;
    s.confirm_estimated_s += o.stats.confirm_estimated_s;
    s.seconds += o.stats.seconds;
    s.analytic_seconds += o.stats.analytic_seconds;
    s.simulate_seconds += o.stats.simulate_seconds;
    s.threads = std::max(s.threads, o.stats.threads);
    if (!o.budget_note.empty()) m.budget_note += (m.budget_note.empty() ? "" : "; ") + o.budget_note;
    m.min_gpus = m.min_gpus == 0 ? o.min_gpus : o.min_gpus == 0 ? m.min_gpus : std::min(m.min_gpus, o.min_gpus);
  }
  std::sort(m.by_gpus.begin(), m.by_gpus.end(), [](const GpuPoint& a, const GpuPoint& b) { return a.gpus < b.gpus; });
  std::stable_sort(m.top.begin(), m.top.end(), candidate_less);
  keep_distinct_layouts(m.top);
  if ((int)m.top.size() > given.search->top_k) m.top.resize(given.search->top_k);
  m.pareto = pareto_front(m.by_gpus);
  if (winner < outs.size()) {
    m.why = outs[winner].why;
    // The winner keeps its simulation with program and events (the merged top's first is the winner's first).
    if (!m.top.empty() && !m.top[0].sim && outs[winner].top[0].sim) m.top[0].sim = outs[winner].top[0].sim;
  } else {
    m.note = outs.empty() ? "no framework to search" : outs.front().note;
  }
  return m;
}

PlanOutcome plan_search(const Scenario& sc, const PlanOptions& opt) {
  if (!sc.search) throw InputError({sc.name + ": $.search: missing; `trainplan plan` needs a search block"});
  PlanOutcome out;
  const std::vector<Framework> fws = searched_frameworks(sc);
  if (fws.empty()) {
    out = search_one(sc, opt);
  } else {
    std::vector<PlanOutcome> outs;
    // search.fix.framework "any": a framework that cannot run the scenario's fixed choices (its precision, its
    // fp8 recipe, a fixed schedule...) is left out of the search; a framework named there is an error as before.
    const std::vector<std::string>& named = sc.search->fix.framework;
    const bool any = std::find(named.begin(), named.end(), "any") != named.end();
    std::vector<std::string> left_out;
    for (size_t i = 0; i < fws.size(); ++i) {
      Scenario v = sc;
      PlanOptions o{opt.threads, nullptr};
      if (opt.progress)
        o.progress = [&opt, i, n = fws.size()](double f, double s) { opt.progress(((double)i + f) / (double)n, s); };
      try {
        set_framework(v, fws[i]);
        outs.push_back(search_one(v, o));
      } catch (const InputError&) {
        if (!any || (i + 1 == fws.size() && outs.empty())) throw;  // (every framework left out: the last one's error)
        left_out.push_back(fws[i].name);
      }
    }
    out = merge_outcomes(sc, outs);
    out.frameworks_left_out = left_out;
  }
  if (!sc.search->compare.on) return out;
  // Lamy-Poirier's question: the shortest time with and without LGA+MPP, on this network and on Ethernet.
  auto variant = [&](bool lga_mpp, bool ethernet, const std::string& name, const std::string& label) {
    ShortestVariant sv;
    sv.name = name;
    sv.label = label;
    Scenario v = sc;
    v.search = std::make_shared<Search>(*sc.search);
    v.search->compare.on = false;
    v.search->objective = Objective::time_to_train;
    v.search->fix.framework.clear();  // the question is asked of the scenario's framework
    if (lga_mpp) {  // research techniques (labelled) on the scenario's framework's communication and kernels
      v.framework.can.research = true;
      v.framework.can.schedules.clear();  // every schedule, ZeRO stage and offload kind
      v.framework.can.zero.clear();
      v.framework.can.offload.clear();
    }
    if (!lga_mpp) {  // standard accumulation and non-looping schedules, within what the user's fix allows
      Fix& f = v.search->fix;
      auto has = [](const auto& list, auto x) { return list.empty() || std::find(list.begin(), list.end(), x) != list.end(); };
      std::vector<Schedule> keep;
      for (Schedule s : {Schedule::gpipe, Schedule::one_f_one_b, Schedule::interleaved})
        if (has(f.schedule, s)) keep.push_back(s);
      if (keep.empty() || !has(f.grad_accumulation, GradAccumulation::standard)) {
        sv.outcome = std::make_shared<PlanOutcome>();
        sv.outcome->scenario = v;
        sv.outcome->note = "search.fix allows only layered accumulation or the modular schedule: no plan without LGA + MPP";
        return sv;
      }
      f.schedule = keep;
      f.grad_accumulation = {GradAccumulation::standard};
    }
    if (ethernet) {
      v.cluster.inter.nics_per_node = sc.search->compare.ethernet_nics_per_node;
      v.cluster.inter.nic_bandwidth_bytes_per_s = sc.search->compare.ethernet_nic_bits_per_s / 8;
      v.cluster.name = sc.cluster.name + "-ethernet";
    }
    sv.outcome = std::make_shared<PlanOutcome>(search_one(v, PlanOptions{opt.threads, nullptr}));
    return sv;
  };
  const Compare& cmp = sc.search->compare;
  std::string eth = std::to_string(cmp.ethernet_nics_per_node) + " x " +
                    std::to_string((long long)std::lround(cmp.ethernet_nic_bits_per_s / 1e9)) + " Gb/s per node";
  std::string net = sc.cluster.name + " network", ethn = "Ethernet-class network (" + eth + ")";
  std::string std3d = "3D parallelism (standard accumulation, contiguous or interleaved pipeline), ";
  out.shortest.push_back(variant(false, false, "standard_ib", std3d + net));
  out.shortest.push_back(variant(true, false, "lga_mpp_ib", "with LGA + MPP (every technique allowed), " + net));
  out.shortest.push_back(variant(false, true, "standard_ethernet", std3d + ethn));
  out.shortest.push_back(variant(true, true, "lga_mpp_ethernet", "with LGA + MPP, " + ethn));
  return out;
}

}  // namespace tp
