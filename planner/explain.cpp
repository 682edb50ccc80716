// explain: see explain.hpp.
#include "explain.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <sstream>
#include <thread>

#include "sim/output.hpp"
#include "space.hpp"
#include "workers.hpp"

namespace tp {

bool candidate_less(const Candidate& a, const Candidate& b) {
  if (a.objective != b.objective) return a.objective < b.objective;
  return detail::point_less(a.point, b.point);
}

bool acceptable(const Candidate& c, double capacity_bytes) {
  return c.sim && c.sim->fits && c.sim->host_fits && c.sim->peak_bytes_per_gpu <= capacity_bytes;
}

bool same_plan(const Candidate& a, const Candidate& b) {
  return !detail::point_less(a.point, b.point) && !detail::point_less(b.point, a.point) && a.global_batch == b.global_batch;
}

static std::vector<double> memo_key(const Point& p) {
  const Layout& l = p.lay;
  const Choice& c = p.ch;
  return {(double)l.dp, (double)l.tp, (double)l.pp, (double)l.ep, (double)l.cp, (double)l.tp_mode, (double)l.node_blocks, (double)l.prec,
          (double)c.microbatch, (double)c.num_microbatches, (double)c.schedule, (double)c.virtual_stages,
          (double)c.acc, (double)c.zero, (double)c.offload, c.offload_fraction, (double)c.experts_only,
          (double)c.sp, (double)c.recompute, (double)p.batch, (double)c.first_layers, (double)c.mid_layers,
          (double)c.last_layers};
}

Confirmer::Confirmer(const Scenario& s, Objective obj, int threads)
    : sc(s), obj_(obj), threads_(std::max(1, threads)) {}

Scenario Confirmer::scenario_of(const Point& p, bool* valid) const {
  Scenario s = sc;
  s.search.reset();
  s.training.global_batch = p.batch;
  s.training.precision = p.lay.prec;
  s.plan = plan_from(p.lay, p.ch);
  if (sc.search) s.plan.attention = search_attention(sc.search->fix);
  if (s.plan.offload.kind == OffloadKind::chunked && sc.search)  // PatrickStar's GPU budget within the headroom
    s.plan.offload.gpu_memory_fraction = std::min(s.plan.offload.gpu_memory_fraction, 1 - sc.search->memory_headroom);
  Issues is;  // derives the plan's counts (num_microbatches, offload layers)
  validate_plan(s.model, s.cluster, s.training, s.plan, is);
  if (valid) *valid = is.empty();
  return s;
}

Candidate Confirmer::analytic(const Point& p) const {
  Candidate c;
  c.point = p;
  c.global_batch = p.batch;
  c.plan = scenario_of(p).plan;
  c.objective = p.objective;
  c.time_to_train_s = p.time_to_train_s;
  c.cost_usd = p.cost_usd;
  return c;
}

Candidate Confirmer::simulate_point(const Point& p) {
  Candidate c;
  c.point = p;
  c.global_batch = p.batch;
  bool valid = false;
  Scenario s = scenario_of(p, &valid);
  c.plan = s.plan;
  if (!valid) return c;  // not simulated: never reported
  SimOptions o;
  o.keep_memory_timeline = false;
  c.sim = std::make_shared<Result>(simulate(s, o));
  c.sim->prog = Program{};  // the step's program and events are kept only for the winner (search_one)
  c.sim->eo = EngineOutput{};
  const Result& r = *c.sim;
  c.time_to_train_s = r.run.time_s;
  c.cost_usd = r.run.cost_usd;
  int gpus = p.lay.gpus();
  switch (obj_) {
    case Objective::time_to_train: c.objective = r.run.time_s; break;
    case Objective::cost: c.objective = r.run.cost_usd; break;
    case Objective::throughput_per_gpu: c.objective = -r.tokens_per_s / gpus; break;
  }
  return c;
}

std::vector<Candidate> Confirmer::run(const std::vector<Point>& pts) {
  auto t0 = std::chrono::steady_clock::now();
  std::vector<Candidate> out(pts.size());
  std::vector<int> todo;
  {
    std::lock_guard<std::mutex> lk(mu_);
    for (size_t i = 0; i < pts.size(); ++i) {
      auto it = memo_.find(memo_key(pts[i]));
      if (it != memo_.end()) { out[i] = it->second; continue; }
      double c = cost ? cost(pts[i]) : 0;
      if (simulated_ + (long long)todo.size() > 0 && spent_s_ + c > budget_s) {
        out[i].point = pts[i];  // skipped: no simulation, so never acceptable as confirmed
        ++skipped_;
        continue;
      }
      spent_s_ += c;
      todo.push_back((int)i);
    }
  }
  std::atomic<size_t> next{0};
  Workers workers;  // a worker's exception (bad_alloc, a simulator error) is rethrown here, after the join
  auto work = [&](int) {
    for (size_t k; !workers.failed() && (k = next.fetch_add(1)) < todo.size();) {
      out[todo[k]] = simulate_point(pts[todo[k]]);
      if (on_simulated) on_simulated();
    }
  };
  workers.run(std::max(1, std::min<int>(threads_, (int)todo.size())), work);
  std::lock_guard<std::mutex> lk(mu_);
  for (int i : todo) {
    // Keep the program and engine output only where a trace may be drawn (set by the caller); drop here.
    memo_[memo_key(pts[i])] = out[i];
  }
  simulated_ += (long long)todo.size();
  seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return out;
}

Candidate Confirmer::one(const Point& p) { return run({p})[0]; }

std::vector<GpuPoint> pareto_front(const std::vector<GpuPoint>& v) {
  std::vector<GpuPoint> out;
  for (size_t i = 0; i < v.size(); ++i) {
    const Candidate& a = v[i].best;
    bool dominated = false;
    for (size_t j = 0; j < v.size() && !dominated; ++j) {
      if (i == j) continue;
      const Candidate& b = v[j].best;
      bool le = v[j].gpus <= v[i].gpus && b.time_to_train_s <= a.time_to_train_s && b.cost_usd <= a.cost_usd;
      bool lt = v[j].gpus < v[i].gpus || b.time_to_train_s < a.time_to_train_s || b.cost_usd < a.cost_usd;
      dominated = le && lt;
    }
    if (!dominated) out.push_back(v[i]);
  }
  return out;
}

static std::string fmt(double x, int prec = 3) {
  std::ostringstream o;
  o.precision(prec);
  o << x;
  return o.str();
}


std::string plan_summary(const Plan& p, long long B, Precision prec) {
  std::ostringstream o;
  o << "dp " << p.dp;
  if (p.cp > 1) o << " x cp " << p.cp;
  o << " x tp " << p.tp << (p.tp_mode == TpMode::d2 ? " (2D)" : "") << " x pp " << p.pp;
  if (p.ep > 1) o << " (ep " << p.ep << ")";
  if (p.pp > 1) {
    o << ", " << schedule_name(p.schedule);
    if (p.schedule == Schedule::interleaved) o << " v" << p.virtual_stages;
    if (!p.stage_layers.empty()) o << ", stages " << p.stage_layers.front() << "/" << p.stage_layers[p.pp / 2] << "/"
                                   << p.stage_layers.back() << " layers (first/middle/last)";
  }
  if (p.grad_accumulation == GradAccumulation::layered) o << ", layered";
  o << ", batch " << B << " = " << p.dp << " x " << p.microbatch << " x " << p.num_microbatches;
  if (p.zero > 0) o << ", ZeRO-" << p.zero;
  if (p.offload.on()) {
    o << ", offload " << offload_kind_name(p.offload.kind);
    if (p.offload.kind == OffloadKind::granular) o << " " << p.offload.layers.size() << " layers" << (p.offload.experts_only ? " (experts)" : "");
  }
  if (p.recompute != Recompute::none) {
    o << ", " << recompute_name(p.recompute) << " recompute";
    if (p.recompute_layers >= 0) o << " of " << p.recompute_layers << " layers";
  }
  if (p.sequence_parallel) o << ", SP";
  if (p.tp_comm_overlap) o << ", TP overlap";
  if (p.overlap_param_gather) o << ", param-gather overlap";
  if (p.attention == Attention::unfused) o << ", unfused attention";
  if (prec == Precision::fp8) o << ", fp8";
  return o.str();
}

// Objectives this close (relative) are a tie in the "why the alternatives lose" list.
constexpr double kTieFraction = 1e-3;

std::vector<Explanation> explain(Confirmer& cf, const Candidate& best, const std::vector<std::pair<std::string, Point>>& alts) {
  std::vector<Point> pts;
  for (auto& a : alts) pts.push_back(a.second);
  std::vector<Candidate> sims = cf.run(pts);
  std::vector<Explanation> out;
  const Result& w = *best.sim;
  for (size_t i = 0; i < sims.size(); ++i) {
    Explanation ex;
    ex.alt = sims[i];
    ex.dimension = alts[i].first;
    if (!ex.alt.sim) continue;
    const Result& r = *ex.alt.sim;
    double dt = r.run.time_s / w.run.time_s - 1;
    // A tie does not lose: an alternative that fits within kTieFraction of the winner's objective is left out.
    if (r.fits && r.host_fits && best.objective != 0 && std::fabs(ex.alt.objective / best.objective - 1) < kTieFraction)
      continue;
    if (!r.fits || !r.host_fits) {
      ex.reason = "memory wall";
      ex.detail = !r.fits ? "needs " + gib_text(r.peak_bytes_per_gpu) + " per GPU against " + gib_text(r.capacity_bytes)
                          : "needs " + gib_text(r.host_bytes_per_node) + " of host memory per node against " +
                                gib_text(cf.sc.cluster.host.memory_bytes);
      if (dt < 0) ex.detail += "; it would train " + fmt(-dt * 100, 2) + "% faster";
      out.push_back(ex);
      continue;
    }
    // Per step time, normalised to the winner's number of steps: which part grew the most.
    double scale = r.run.steps > 0 ? r.run.steps / std::max(1.0, w.run.steps) : 1;
    const Breakdown &a = r.breakdown, &b = w.breakdown;
    struct Part { const char* name; double alt, win; };
    Part parts[] = {{"pipeline bubble", a.bubble, b.bubble},
                    {"exposed data-parallel communication", a.dp_comm_exposed, b.dp_comm_exposed},
                    {"exposed tensor-parallel communication", a.tp_comm_exposed, b.tp_comm_exposed},
                    {"exposed pipeline communication", a.pp_comm_exposed, b.pp_comm_exposed},
                    {"offload stalls", a.offload_stall, b.offload_stall},
                    {"compute slowed by communication", a.comm_slowdown, b.comm_slowdown},
                    {"recomputation", a.recompute, b.recompute},
                    {"exposed expert-parallel communication", a.ep_comm_exposed, b.ep_comm_exposed},
                    {"optimizer step", a.optimizer, b.optimizer},
                    {"compute (GEMM efficiency, fewer GPUs or more steps)", a.compute, b.compute}};
    const Part* worst = nullptr;
    double worst_d = -1e300;
    for (const Part& p : parts) {
      double d = p.alt * scale - p.win;
      if (d > worst_d) { worst_d = d; worst = &p; }
    }
    ex.reason = dt <= 0 ? "cheaper or equal" : worst->name;
    ex.detail = days_text(r.run.time_s) + " to train against " + days_text(w.run.time_s) + " (" +
                (dt >= 0 ? "+" : "") + fmt(dt * 100, 3) + "%); " + worst->name + " " + fmt(worst->alt, 3) + " s per step against " +
                fmt(worst->win, 3) + " s";
    if (scale != 1) ex.detail += " (" + fmt(r.run.steps, 4) + " steps against " + fmt(w.run.steps, 4) + ")";
    out.push_back(ex);
  }
  return out;
}

}  // namespace tp
