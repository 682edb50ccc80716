// test_backend_pack: bf16 storage's two ops on every backend that has a float64 table (cpu, emu, emu-device):
// pack_bf16 rounds as bf16_round (exec/kernels/k_fp8.hpp) does, to the bit, for values around every rounding
// boundary (ties, subnormals, overflow, infinities, NaN), and unpack_bf16 gives the rounded value back exactly.
// Views off the 16-byte boundary and lengths that are not multiples of 4 check the kernels' vector path against
// their element path (the emulator's ld4 / st4 throw on an access the GPU would fault on).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "exec/backends/backend.hpp"
#include "exec/kernels/k_fp8.hpp"

using namespace tp::exec;

namespace {
// bf16 storage (ops::pack_bf16 / unpack_bf16; training.precision "bf16" keeps the saved activations so): on every
// backend (emu-device too), in float and double, pack gives the bits of kernels::bf16_round (the GEMM operands'
// rounding: ties to even, subnormals, overflow to infinity, NaN kept) and unpack gives that value back exactly. The
// double rule rounds the double itself: 1 + 2^-8 + 2^-30 is above the tie between 1 and 1 + 2^-7, although as a
// float it is the tie (a pack through float would give 1).
template <class T>
void check_pack_bf16(const Backend& be, const OpTable<T>& t) {
  std::vector<T> x = {T(0), T(-0.0), T(1), T(-2.5), T(3.14159265), T(1 + std::ldexp(1.0, -8)),
                      T(1 + 3 * std::ldexp(1.0, -8)), T(std::ldexp(1.0, -134)), T(std::ldexp(3.0, -135)),
                      T(3.3895313892515355e38), T(3.3961775292304767e38), T(-3.4e38),
                      std::numeric_limits<T>::infinity(), -std::numeric_limits<T>::infinity()};
  if (sizeof(T) == 8) x.push_back(T(1 + std::ldexp(1.0, -8) + std::ldexp(1.0, -30)));
  std::mt19937 g(97);
  std::uniform_real_distribution<double> u(-40, 40);
  for (int i = 0; i < 3000; ++i) x.push_back(T(std::ldexp(u(g) / 40, (int)u(g))));
  const long n = (long)x.size();
  const size_t nb = sizeof(T) * (size_t)n, hb = sizeof(uint16_t) * (size_t)n;
  T* dx = (T*)be.alloc(nb);
  uint16_t* dh = (uint16_t*)be.alloc(hb);
  T* dy = (T*)be.alloc(nb);
  be.copy(dx, x.data(), nb, CopyKind::host_to_device, Stream{});
  t.pack_bf16(dh, dx, n);
  t.unpack_bf16(dy, dh, n);
  std::vector<uint16_t> h((size_t)n);
  std::vector<T> y((size_t)n);
  be.copy(h.data(), dh, hb, CopyKind::device_to_host, Stream{});
  be.copy(y.data(), dy, nb, CopyKind::device_to_host, Stream{});
  be.sync();
  for (long i = 0; i < n; ++i) {
    const double want = tp::kernels::bf16_round((double)x[i]);
    const float wf = (float)want;
    uint32_t bits;
    std::memcpy(&bits, &wf, 4);
    ASSERT_EQ(h[i], uint16_t(bits >> 16)) << be.name << " x = " << x[i];
    ASSERT_EQ((double)y[i], want) << be.name << " x = " << x[i];
  }
  if (sizeof(T) == 8) {
    EXPECT_EQ((double)y[n - 3001], 1 + std::ldexp(1.0, -7)) << be.name;
  }
  const T nan = std::numeric_limits<T>::quiet_NaN();
  be.copy(dx, &nan, sizeof(T), CopyKind::host_to_device, Stream{});
  t.pack_bf16(dh, dx, 1);
  t.unpack_bf16(dy, dh, 1);
  be.copy(y.data(), dy, sizeof(T), CopyKind::device_to_host, Stream{});
  be.sync();
  EXPECT_TRUE(std::isnan(y[0])) << be.name;
  // Views that start off the 16-byte boundary and lengths that are not multiples of 4 (the kernels' vector loads
  // take the aligned part, element loads the rest): each element of [off, off + m) is written, nothing else.
  be.copy(dx, x.data(), nb, CopyKind::host_to_device, Stream{});
  for (long off : {1L, 2L, 4L})
    for (long m : {1L, 6L, n - 5}) {
      const std::vector<uint16_t> h0((size_t)n, 0x7fc1);
      const std::vector<T> y0((size_t)n, T(-7));
      be.copy(dh, h0.data(), hb, CopyKind::host_to_device, Stream{});
      be.copy(dy, y0.data(), nb, CopyKind::host_to_device, Stream{});
      t.pack_bf16(dh + off, dx + off, m);
      t.unpack_bf16(dy + off, dh + off, m);
      be.copy(h.data(), dh, hb, CopyKind::device_to_host, Stream{});
      be.copy(y.data(), dy, nb, CopyKind::device_to_host, Stream{});
      be.sync();
      for (long i = 0; i < n; ++i) {
        const bool in = i >= off && i < off + m;
        const double want = in ? tp::kernels::bf16_round((double)x[i]) : -7.0;
        ASSERT_EQ((double)y[i], want) << be.name << " off " << off << " m " << m << " i " << i;
        if (!in) {
          ASSERT_EQ(h[i], 0x7fc1) << be.name << " off " << off << " m " << m << " i " << i;
        }
      }
    }
  be.free(dx);
  be.free(dh);
  be.free(dy);
}
}  // namespace

TEST(BackendOps, PackBf16IsTheGemmOperandsRounding) {
  std::vector<const Backend*> bes = available_backends();
  bes.push_back(&emu_device_backend());
  for (const Backend* be : bes) {
    if (std::string(be->name) == "cuda") continue;  // no fp64 table there; the selftest checks its fp32 pack
    check_pack_bf16(*be, be->f32);
    check_pack_bf16(*be, be->f64);
  }
}
