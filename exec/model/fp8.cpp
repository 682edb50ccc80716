// fp8: the delayed-scaling state of the emulated fp8 linear layers. See fp8.hpp.
#include "exec/model/fp8.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <stdexcept>

#include "exec/backends/backend.hpp"
#include "exec/kernels/k_fp8.hpp"

namespace tp::exec {

Fp8Slots::~Fp8Slots() {
  for (Slots& s : bufs_) s.be->free(s.p);
}

void* Fp8Slots::slots_bytes(size_t elem_bytes, size_t n) { return slots_of(elem_bytes, n).p; }

Fp8Slots::Slots& Fp8Slots::slots_of(size_t elem_bytes, size_t n) {
  const Backend& be = current_backend();
  for (Slots& s : bufs_)
    if (s.be == &be && s.elem_bytes == elem_bytes && s.n == n) return s;
  const size_t bytes = elem_bytes * n;
  void* p = be.alloc(bytes);
  if (!p) throw std::runtime_error("fp8: out of device memory for " + std::to_string(n) + " slots");
  const std::vector<char> zeros(bytes, 0);
  be.copy(p, zeros.data(), bytes, CopyKind::host_to_device, Stream{});
  bufs_.push_back({&be, elem_bytes, n, p, 0});
  return bufs_.back();
}

void Fp8Slots::upload(const Slots& s, const std::vector<double>& values) {
  std::vector<char> host(s.elem_bytes * s.n);
  for (size_t i = 0; i < s.n; ++i) {
    if (s.elem_bytes == sizeof(float)) {
      const float f = float(values[i]);
      std::memcpy(host.data() + i * sizeof f, &f, sizeof f);
    } else {
      std::memcpy(host.data() + i * sizeof(double), &values[i], sizeof(double));
    }
  }
  s.be->copy(s.p, host.data(), host.size(), CopyKind::host_to_device, Stream{});  // (in order with the backend's ops)
}

void* Fp8Slots::load_bytes(size_t elem_bytes, const std::vector<double>& values, unsigned long long version) {
  Slots& s = slots_of(elem_bytes, values.size());
  if (s.version != version) {
    upload(s, values);
    s.version = version;
  }
  return s.p;
}

void Fp8Slots::load_all(const std::vector<double>& values, unsigned long long version) {
  for (Slots& s : bufs_)
    if (s.n == values.size() && s.version != version) {
      upload(s, values);
      s.version = version;
    }
}

void Fp8Slots::drain(std::vector<double>& amax) {
  for (Slots& s : bufs_) {
    const size_t bytes = s.elem_bytes * s.n;
    std::vector<char> host(bytes);
    s.be->copy(host.data(), s.p, bytes, CopyKind::device_to_host, Stream{});  // (the default stream: synchronous)
    for (size_t i = 0; i < s.n && i < amax.size(); ++i) {
      double v;
      if (s.elem_bytes == sizeof(float)) {
        float f;
        std::memcpy(&f, host.data() + i * sizeof f, sizeof f);
        v = f;
      } else {
        std::memcpy(&v, host.data() + i * sizeof v, sizeof v);
      }
      amax[i] = std::fmax(amax[i], v);
    }
    std::fill(host.begin(), host.end(), char(0));
    s.be->copy(s.p, host.data(), bytes, CopyKind::host_to_device, Stream{});
  }
}

void Fp8State::refresh_pairs() {
  std::vector<double> p(2 * scale.size());
  for (size_t i = 0; i < scale.size(); ++i) p[2 * i] = scale[i], p[2 * i + 1] = 1.0 / scale[i];
  if (p == pairs_ && pairs_version_ != 0) return;
  static std::atomic<unsigned long long> versions{0};  // (unique over every state: copies share their buffers)
  pairs_ = std::move(p);
  pairs_version_ = ++versions;
  dev_scale->load_all(pairs_, pairs_version_);
}

void Fp8State::init(long long layers, long long experts) {
  groups = layers;
  linears = kFp8Expert + 2 * experts;
  scale.assign((size_t)(groups * linears * 3), 1.0);
  amax.assign(scale.size(), 0.0);
  refresh_pairs();
}

Fp8State Fp8State::for_scenario(const Scenario& sc) {
  Fp8State f;
  if (sc.training.precision == Precision::fp8) f.init(sc.model.layers, gpt_shape(sc.model, sc.training.seq_len).experts);
  return f;
}

void Fp8State::end_step(Comm& world) {
  if (!on()) return;
  dev->drain(amax);
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
  refresh_pairs();
}

void Fp8State::delink(const std::vector<long long>& group_of) {
  if (!on()) return;
  const std::vector<double> before = scale;
  const size_t per = (size_t)linears * 3;
  for (size_t l = 0; l < group_of.size(); ++l)
    std::copy(before.begin() + group_of[l] * per, before.begin() + (group_of[l] + 1) * per, scale.begin() + l * per);
  refresh_pairs();
}

}  // namespace tp::exec
