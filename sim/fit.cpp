// fit: Levenberg-Marquardt over a framework's fit parameters on measured runs. See fit.hpp.
#include "fit.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <thread>

#include "simulate.hpp"

namespace tp {

namespace {

constexpr double kScaleLo = 0.2, kScaleHi = 1.5;
constexpr int kMaxIterations = 40, kLooIterations = 10;

// The fit parameters by index into kFitParams (Fit: FrameworkFit, const or not); the scales move in log
// coordinates, the overhead as itself.
template <class Fit>
auto& param(Fit& f, int w) {
  switch (w) {
    case 0: return f.compute_efficiency_scale;
    case 1: return f.network_efficiency_scale;
    case 2: return f.step_overhead_s;
    default: return f.attention_efficiency_scale;
  }
}
bool is_scale(int w) { return w != 2; }

// The optimizer's coordinates: log of the scales, the overhead itself (it may be 0).
struct Space {
  std::vector<int> which;  // indices into kFitParams
  double overhead_hi = 1;
  std::vector<double> to_x(const FrameworkFit& f) const {
    std::vector<double> x;
    for (int w : which) x.push_back(is_scale(w) ? std::log(param(f, w)) : param(f, w));
    return x;
  }
  FrameworkFit to_fit(const std::vector<double>& x, FrameworkFit f) const {
    for (size_t i = 0; i < which.size(); ++i)
      param(f, which[i]) = is_scale(which[i]) ? std::clamp(std::exp(x[i]), kScaleLo, kScaleHi) : std::clamp(x[i], 0.0, overhead_hi);
    return f;
  }
  std::vector<double> clamp(std::vector<double> x) const { return to_x(to_fit(x, FrameworkFit{})); }
  double step(int i) const { return is_scale(which[i]) ? 1e-3 : 1e-3 * overhead_hi; }
};

// Predictions of runs[idx] under `base` with `fit`, `threads` at once.
std::vector<FitPrediction> predict_all(const std::vector<FitRun>& runs, const std::vector<int>& idx, Framework f,
                                       const FrameworkFit& fit, int threads) {
  f.fit = fit;
  std::vector<FitPrediction> out(idx.size());
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t k; (k = next++) < idx.size();) out[k] = predict_run(runs[idx[k]], f);
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < threads && t < (int)idx.size(); ++t) pool.emplace_back(work);
  work();
  for (auto& t : pool) t.join();
  return out;
}

// Per run: log(predicted / measured step), then per measured class (predicted - measured) / measured step.
std::vector<double> residuals(const std::vector<FitRun>& runs, const std::vector<int>& idx, const std::vector<FitPrediction>& pred) {
  std::vector<double> r;
  for (size_t k = 0; k < idx.size(); ++k) {
    const FitRun& run = runs[idx[k]];
    r.push_back(std::log(pred[k].step_s / run.measured_s));
    for (size_t c = 0; c < run.measured_classes.size(); ++c)
      r.push_back((pred[k].classes_s[c] - run.measured_classes[c].second) / run.measured_s);
  }
  return r;
}

std::vector<double> steps_of(const std::vector<FitPrediction>& p) {
  std::vector<double> s;
  for (const FitPrediction& x : p) s.push_back(x.step_s);
  return s;
}

double breakdown_class_s(const Breakdown& b, const std::string& name) {
  const double v[] = {b.compute, b.recompute, b.bubble, b.tp_comm_exposed, b.pp_comm_exposed, b.dp_comm_exposed,
                      b.optimizer, b.ep_comm_exposed, b.offload_stall, b.comm_slowdown};
  for (size_t i = 0; i < kBreakdownClasses.size(); ++i)
    if (kBreakdownClasses[i] == name) return v[i];
  throw InputError({"fit: unknown breakdown class \"" + name + "\""});
}

double ssr(const std::vector<double>& r) {
  double s = 0;
  for (double v : r) s += v * v;
  return s;
}

// Solves A x = b (n <= 4) by Gaussian elimination with partial pivoting; false when singular.
bool solve(std::vector<std::vector<double>> A, std::vector<double> b, std::vector<double>& x) {
  const size_t n = b.size();
  for (size_t c = 0; c < n; ++c) {
    size_t p = c;
    for (size_t r = c + 1; r < n; ++r)
      if (std::fabs(A[r][c]) > std::fabs(A[p][c])) p = r;
    if (std::fabs(A[p][c]) < 1e-300) return false;
    std::swap(A[p], A[c]);
    std::swap(b[p], b[c]);
    for (size_t r = c + 1; r < n; ++r) {
      const double m = A[r][c] / A[c][c];
      for (size_t k = c; k < n; ++k) A[r][k] -= m * A[c][k];
      b[r] -= m * b[c];
    }
  }
  x.assign(n, 0);
  for (size_t c = n; c-- > 0;) {
    double s = b[c];
    for (size_t k = c + 1; k < n; ++k) s -= A[c][k] * x[k];
    x[c] = s / A[c][c];
  }
  return true;
}

struct LmOut {
  std::vector<double> x, r;
  std::vector<std::vector<double>> J;  // at x
  int iterations = 0;
};

// Levenberg-Marquardt from x0 over the runs idx.
LmOut levenberg_marquardt(const std::vector<FitRun>& runs, const std::vector<int>& idx, const Framework& base, const Space& sp,
                          std::vector<double> x0, int max_iter, int threads) {
  LmOut o;
  o.x = sp.clamp(x0);
  o.r = residuals(runs, idx, predict_all(runs, idx, base, sp.to_fit(o.x, base.fit), threads));
  double lambda = 1e-2;
  const size_t k = o.x.size(), n = o.r.size();  // residuals: a run's step and its measured classes
  auto jacobian = [&](const std::vector<double>& x, const std::vector<double>& r) {
    std::vector<std::vector<double>> J(n, std::vector<double>(k));
    for (size_t j = 0; j < k; ++j) {
      // A step inside slack (an overhead hidden behind a longer lane) changes nothing: widen it up to 1000x.
      for (double widen = 1; widen <= 1000; widen *= 10) {
        std::vector<double> xh = x;
        double h = sp.step((int)j) * widen;
        xh[j] += h;
        xh = sp.clamp(xh);
        if (xh[j] == x[j]) { xh[j] -= h; xh = sp.clamp(xh); }  // at the upper bound: step down
        h = xh[j] - x[j];
        const std::vector<double> rh = residuals(runs, idx, predict_all(runs, idx, base, sp.to_fit(xh, base.fit), threads));
        bool moved = false;
        for (size_t i = 0; i < n; ++i) {
          J[i][j] = h != 0 ? (rh[i] - r[i]) / h : 0;
          moved = moved || J[i][j] != 0;
        }
        if (moved) break;
      }
    }
    return J;
  };
  o.J = jacobian(o.x, o.r);
  for (o.iterations = 0; o.iterations < max_iter; ++o.iterations) {
    std::vector<std::vector<double>> A(k, std::vector<double>(k, 0));
    std::vector<double> g(k, 0);
    for (size_t i = 0; i < n; ++i)
      for (size_t a = 0; a < k; ++a) {
        g[a] -= o.J[i][a] * o.r[i];
        for (size_t b = 0; b < k; ++b) A[a][b] += o.J[i][a] * o.J[i][b];
      }
    bool improved = false;
    for (int tries = 0; tries < 8 && !improved; ++tries) {
      std::vector<std::vector<double>> D = A;
      for (size_t a = 0; a < k; ++a) D[a][a] += lambda * std::max(A[a][a], 1e-9);
      std::vector<double> dx;
      if (!solve(D, g, dx)) { lambda *= 10; continue; }
      std::vector<double> xn(k);
      for (size_t a = 0; a < k; ++a) xn[a] = o.x[a] + dx[a];
      xn = sp.clamp(xn);
      const std::vector<double> rn = residuals(runs, idx, predict_all(runs, idx, base, sp.to_fit(xn, base.fit), threads));
      if (ssr(rn) < ssr(o.r) - 1e-12) {
        const double gain = ssr(o.r) - ssr(rn);
        o.x = xn;
        o.r = rn;
        lambda = std::max(lambda / 3, 1e-7);
        improved = true;
        if (gain < 1e-10 * std::max(1.0, ssr(o.r))) return o;
        o.J = jacobian(o.x, o.r);
      } else {
        lambda *= 4;
      }
    }
    if (!improved) break;
  }
  return o;
}

void stats(const std::vector<FitRun>& runs, const std::vector<double>& pred, double& mean, double& mx) {
  mean = mx = 0;
  for (size_t i = 0; i < runs.size(); ++i) {
    const double e = std::fabs(pred[i] / runs[i].measured_s - 1);
    mean += e;
    mx = std::max(mx, e);
  }
  if (!runs.empty()) mean /= runs.size();
}

}  // namespace

FitPrediction predict_run(const FitRun& run, const Framework& f) {
  Scenario sc = run.scenario;
  set_framework(sc, f);
  SimOptions o;
  o.keep_memory_timeline = false;
  const Result r = simulate(sc, o);
  FitPrediction p;
  p.step_s = r.step_time_s;
  p.peak_bytes = r.peak_bytes_per_gpu;
  for (const auto& [name, s] : run.measured_classes) p.classes_s.push_back(breakdown_class_s(r.breakdown, name));
  return p;
}

double fit_param_value(const FrameworkFit& f, const std::string& name) {
  for (size_t i = 0; i < kFitParams.size(); ++i)
    if (kFitParams[i] == name) return param(f, (int)i);
  throw InputError({"fit: unknown parameter \"" + name + "\""});
}

double predicted_step_s(const FitRun& run, const Framework& f) { return predict_run(run, f).step_s; }

FitResult fit_framework(const std::vector<FitRun>& runs, const Framework& base, const std::vector<std::string>& params,
                        int threads) {
  Space sp;
  FitResult res;
  for (size_t i = 0; i < kFitParams.size(); ++i)
    if (std::find(params.begin(), params.end(), kFitParams[i]) != params.end()) {
      sp.which.push_back((int)i);
      res.params.push_back(kFitParams[i]);
    }
  for (const std::string& p : params)
    if (std::find(kFitParams.begin(), kFitParams.end(), p) == kFitParams.end())
      throw InputError({"fit: unknown parameter \"" + p + "\"; expected compute_efficiency_scale, network_efficiency_scale, "
                        "step_overhead_s, attention_efficiency_scale"});
  if (sp.which.empty()) throw InputError({"fit: no parameter to fit"});
  if (runs.size() < sp.which.size())
    throw InputError({"fit: " + std::to_string(runs.size()) + " runs for " + std::to_string(sp.which.size()) +
                      " parameters; give at least as many runs as parameters"});
  for (const FitRun& r : runs) sp.overhead_hi = std::max(sp.overhead_hi, r.measured_s);
  std::vector<int> all(runs.size());
  for (size_t i = 0; i < runs.size(); ++i) all[i] = (int)i;

  res.before_s = steps_of(predict_all(runs, all, base, base.fit, threads));
  FrameworkFit start = base.fit;
  const LmOut lm = levenberg_marquardt(runs, all, base, sp, sp.to_x(start), kMaxIterations, threads);
  res.iterations = lm.iterations;
  res.fit = sp.to_fit(lm.x, base.fit);
  const std::vector<FitPrediction> after = predict_all(runs, all, base, res.fit, threads);
  res.after_s = steps_of(after);
  for (const FitPrediction& p : after) res.peak_bytes_after.push_back(p.peak_bytes);

  // Standard errors: s^2 (J^T J)^-1 in the optimizer's coordinates, mapped back (scales: d exp = exp dx).
  const size_t k = sp.which.size(), n = runs.size(), nr = lm.r.size();
  res.std_error.assign(k, -1);
  if (nr > k) {
    const double s2 = ssr(lm.r) / (double)(nr - k);
    std::vector<std::vector<double>> A(k, std::vector<double>(k, 0));
    for (size_t i = 0; i < nr; ++i)
      for (size_t a = 0; a < k; ++a)
        for (size_t b = 0; b < k; ++b) A[a][b] += lm.J[i][a] * lm.J[i][b];
    for (size_t a = 0; a < k; ++a) {
      std::vector<double> e(k, 0), col;
      e[a] = 1;
      if (!solve(A, e, col) || !(col[a] > 0) || !std::isfinite(col[a])) continue;
      const double se_x = std::sqrt(s2 * col[a]);
      res.std_error[a] = is_scale(sp.which[a]) ? param(res.fit, sp.which[a]) * se_x : se_x;
    }
  }

  // Leave one out.
  res.loo_s.assign(n, 0);
  for (size_t i = 0; i < n; ++i) {
    if (n <= k) { res.loo_s[i] = res.after_s[i]; continue; }
    std::vector<int> rest;
    for (size_t j = 0; j < n; ++j)
      if (j != i) rest.push_back((int)j);
    const LmOut l = levenberg_marquardt(runs, rest, base, sp, lm.x, kLooIterations, threads);
    Framework f = base;
    f.fit = sp.to_fit(l.x, base.fit);
    res.loo_s[i] = predicted_step_s(runs[i], f);
  }
  stats(runs, res.before_s, res.mean_abs_before, res.max_abs_before);
  stats(runs, res.after_s, res.mean_abs_after, res.max_abs_after);
  stats(runs, res.loo_s, res.mean_abs_loo, res.max_abs_loo);
  return res;
}

}  // namespace tp
