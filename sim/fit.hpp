// fit: fits a framework's few free parameters (models/framework.hpp FrameworkFit: compute efficiency scale,
// network efficiency scale, fixed cost per step, attention efficiency scale) to measured runs, as `trainplan fit` does. Each run is a
// scenario and its measured step time; the model of a run is the full simulation under the framework with the
// trial parameters. Least squares on log(predicted / measured) (relative errors, so a 100 s step does not
// outweigh a 1 s one), Levenberg-Marquardt with forward-difference derivatives, inside bounds (scales 0.2..1.5,
// overhead 0..the slowest measured step). Uncertainty: standard errors from the Jacobian at the optimum
// (s^2 (J^T J)^-1, s^2 = residual sum of squares / (runs - parameters)). Leave-one-out: each run predicted by
// the fit to the others (started from the full fit): the error a user should believe.
// A run may also give measured times per class of the step's breakdown (compute, dp_comm_exposed, ...): each adds
// a residual (predicted - measured) / measured step, which tells the compute scale from the network scale; and its
// measured peak memory, reported beside the prediction (no parameter moves memory).
// Invariants: needs at least as many runs as parameters (more for uncertainty); the result is deterministic.
#pragma once
#include <string>
#include <vector>

#include "models/framework.hpp"
#include "models/scenario.hpp"

namespace tp {

struct FitRun {
  std::string name;
  Scenario scenario;
  double measured_s = 0;
  std::vector<std::pair<std::string, double>> measured_classes;  // breakdown class (kBreakdownClasses) -> seconds
  double measured_peak_bytes = 0;                                  // 0 = not measured
};

// The breakdown classes a run may give (the keys of simulate's breakdown_s).
inline const std::vector<std::string> kBreakdownClasses = {"compute", "recompute", "bubble", "tp_comm_exposed",
    "pp_comm_exposed", "dp_comm_exposed", "optimizer", "ep_comm_exposed", "offload_stall", "comm_slowdown"};

inline const std::vector<std::string> kFitParams = {"compute_efficiency_scale", "network_efficiency_scale", "step_overhead_s",
                                                    "attention_efficiency_scale"};
// What `trainplan fit` fits when --params is not given: the attention scale is asked for by name (it is only
// determined by runs whose attention share differs, e.g. sequence lengths from 2K to 256K).
inline const std::vector<std::string> kFitDefaultParams = {"compute_efficiency_scale", "network_efficiency_scale", "step_overhead_s"};
// The value of the fit parameter `name` (one of kFitParams) in `f`.
double fit_param_value(const FrameworkFit& f, const std::string& name);

struct FitResult {
  std::vector<std::string> params;  // the fitted ones, in kFitParams' order
  FrameworkFit fit;                 // the fitted values (the others as in the base framework)
  std::vector<double> std_error;    // per fitted parameter, in its own units; -1 = not determined by these runs
  std::vector<double> before_s, after_s, loo_s;  // per run: predicted with the base framework, the fit, leave-one-out
  std::vector<double> peak_bytes_after;          // per run: predicted peak memory per GPU under the fit
  double mean_abs_before = 0, mean_abs_after = 0, mean_abs_loo = 0;
  double max_abs_before = 0, max_abs_after = 0, max_abs_loo = 0;
  int iterations = 0;
};

// Fits `params` (names from kFitParams) of `base` on `runs` (each simulated under `base` with the trial values).
// threads: simulations at once. Throws InputError when there are fewer runs than parameters or a name is unknown.
FitResult fit_framework(const std::vector<FitRun>& runs, const Framework& base, const std::vector<std::string>& params,
                        int threads = 2);

// One run's predicted step time under framework `f` (what the fit evaluates).
double predicted_step_s(const FitRun& run, const Framework& f);

// What the fit compares of one run: the step, the measured breakdown classes, the peak memory.
struct FitPrediction {
  double step_s = 0, peak_bytes = 0;
  std::vector<double> classes_s;  // in the run's measured_classes order
};
FitPrediction predict_run(const FitRun& run, const Framework& f);

}  // namespace tp
