// run_estimate: see run_estimate.hpp.
#include "run_estimate.hpp"

#include <cmath>

namespace tp {

double converged_loss(double N, const ScalingLaw& law) { return std::pow(law.n_c / N, law.alpha_n); }

RunEstimate estimate_run(double N, double B, double tokens, double step_s, int gpus, double price, double power_w,
                         const ScalingLaw& law, double target_loss) {
  RunEstimate r;
  r.loss_nats = converged_loss(N, law);
  r.critical_batch_tokens = law.b_star_tokens / std::pow(r.loss_nats, 1.0 / law.alpha_b);
  r.batch_tokens = B;
  if (target_loss > r.loss_nats && tokens <= 0) {
    r.from_target_loss = true;
    r.critical_batch_tokens = law.b_star_tokens / std::pow(target_loss, 1.0 / law.alpha_b);
    r.steps_min = law.s_c / std::pow(target_loss - r.loss_nats, 1.0 / law.alpha_s);
    r.steps = std::ceil(r.steps_min * (1 + r.critical_batch_tokens / B));
    r.tokens = r.steps * B;
  } else if (tokens > 0) {
    r.tokens_from_scenario = true;
    r.tokens = tokens;
    r.steps = std::ceil(tokens / B);
    r.steps_min = r.steps / (1 + r.critical_batch_tokens / B);
  } else {
    r.steps_min = law.s_c / std::pow(law.alpha_n / law.alpha_s * r.loss_nats, 1.0 / law.alpha_s);
    r.steps = std::ceil(r.steps_min * (1 + r.critical_batch_tokens / B));
    r.tokens = r.steps * B;
  }
  r.time_s = r.steps * step_s;
  r.gpu_hours = r.time_s / 3600.0 * gpus;
  r.cost_usd = r.gpu_hours * price;
  r.energy_kwh = r.gpu_hours * power_w / 1000.0;
  return r;
}

}  // namespace tp
