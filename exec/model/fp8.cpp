// fp8: the delayed-scaling state of the emulated fp8 linear layers. See fp8.hpp.
#include "exec/model/fp8.hpp"

#include <cmath>

#include "exec/kernels/k_fp8.hpp"

namespace tp::exec {

void Fp8State::init(long long layers, long long experts) {
  groups = layers;
  linears = kFp8Expert + 2 * experts;
  scale.assign((size_t)(groups * linears * 3), 1.0);
  amax.assign(scale.size(), 0.0);
}

Fp8State Fp8State::for_scenario(const Scenario& sc) {
  Fp8State f;
  if (sc.training.precision == Precision::fp8) f.init(sc.model.layers, gpt_shape(sc.model, sc.training.seq_len).experts);
  return f;
}

void Fp8State::end_step(Comm& world) {
  if (!on()) return;
  const long n = (long)amax.size();
  if (world.size() > 1) {
    std::vector<double> all((size_t)n * world.size());
    world.all_gather(amax.data(), all.data(), n, Dtype::f64);
    for (int r = 0; r < world.size(); ++r)
      for (long i = 0; i < n; ++i) amax[(size_t)i] = std::fmax(amax[(size_t)i], all[(size_t)r * n + i]);
  }
  for (long i = 0; i < n; ++i) {
    const double a = amax[(size_t)i];
    // TE's _default_sf_compute with margin 0: fp8_max / amax where amax is positive and finite.
    if (a > 0 && std::isfinite(a)) scale[(size_t)i] = kernels::fp8_max(format_of(i)) / a;
    amax[(size_t)i] = 0;
  }
}

void Fp8State::delink(const std::vector<long long>& group_of) {
  if (!on()) return;
  const std::vector<double> before = scale;
  const size_t per = (size_t)linears * 3;
  for (size_t l = 0; l < group_of.size(); ++l)
    std::copy(before.begin() + group_of[l] * per, before.begin() + (group_of[l] + 1) * per, scale.begin() + l * per);
}

}  // namespace tp::exec
