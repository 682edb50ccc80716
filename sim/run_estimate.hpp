// run_estimate: the whole training run from one step — scaling-law loss, critical batch, steps, time, cost,
// energy. Formulas (../shared/spec/seeds.md §5): Kaplan L(N) = (N_c/N)^a_N, B_crit(L) = B*/L^(1/a_B),
// McCandlish S = S_min (1 + B_crit/B). When the scenario gives no token budget, the run stops where Kaplan's
// compute-efficient training stops: L(N, S_min) = (1 + a_N/a_S) L(N), i.e.
// S_min = S_c / ((a_N/a_S) L(N))^(1/a_S), and S = S_min (1 + B_crit/B) steps at batch B.
#pragma once

namespace tp {

struct ScalingLaw {
  double alpha_n = 0.076, n_c = 8.8e13;         // L(N)
  double b_star_tokens = 2e8, alpha_b = 0.21;   // B_crit(L)
  double alpha_s = 0.76, s_c = 2.1e3;           // L(N, S_min)
};

struct RunEstimate {
  double loss_nats = 0;              // L(N) of the converged model
  double critical_batch_tokens = 0;  // B_crit(L(N))
  double batch_tokens = 0;           // B
  double tokens = 0;                 // run length
  bool tokens_from_scenario = false;
  bool from_target_loss = false;    // steps from training.target_loss
  double steps = 0, steps_min = 0;   // S and S_min = S / (1 + B_crit / B)
  double time_s = 0, gpu_hours = 0, cost_usd = 0, energy_kwh = 0;
};

// n_nonembed: non-embedding parameters; tokens: 0 when not given. target_loss (nats, > L(N)): the run stops
// at that loss instead: L(N, S_min) = L(N) + (S_c / S_min)^a_S gives S_min = S_c / (target - L(N))^(1/a_S),
// B_crit is taken at the target loss, and S = S_min (1 + B_crit / B).
RunEstimate estimate_run(double n_nonembed, double batch_tokens, double tokens, double step_time_s, int gpus,
                         double price_per_gpu_hour_usd, double power_per_gpu_w, const ScalingLaw& law = {},
                         double target_loss = 0);
// Kaplan's converged loss L(N) for n_nonembed parameters.
double converged_loss(double n_nonembed, const ScalingLaw& law = {});

}  // namespace tp
