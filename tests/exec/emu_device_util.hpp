// emu_device_util: the emu-device backend's float buffers for the tests that drive it directly (test_emu_device,
// test_step_graph): up() allocates device memory holding h, down() reads n floats back (both through the backend's
// copies, the only way host code reaches that memory).
#pragma once
#include <vector>

#include "exec/backends/backend.hpp"

namespace tp::exec::testdev {

inline const Backend& dev() { return emu_device_backend(); }

inline float* up(const std::vector<float>& h) {
  auto* d = static_cast<float*>(dev().alloc(sizeof(float) * h.size()));
  dev().copy(d, h.data(), sizeof(float) * h.size(), CopyKind::host_to_device, Stream{});
  return d;
}
inline std::vector<float> down(const float* d, size_t n) {
  std::vector<float> h(n);
  dev().copy(h.data(), d, sizeof(float) * n, CopyKind::device_to_host, Stream{});
  return h;
}

}  // namespace tp::exec::testdev
