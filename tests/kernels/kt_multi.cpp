// The multi-tensor kernels (exec/kernels/k_multi.hpp) on the emulator, for float and double, over every
// kt::configs() launcher / schedule: AdamWMulti over segments of odd lengths (an empty one among them, segments
// longer and shorter than a tile) is bit-identical to AdamW launched per segment, whatever the grid; the sum of
// squares over segments matches the float64 sum.
#include <cmath>

#include "tests/kernels/kt_util.hpp"

namespace {
namespace K = tp::kernels;
using kt::Buf;
using kt::Vec;

template <class T>
class KernelMulti : public ::testing::Test {};
using Types = ::testing::Types<float, double>;
TYPED_TEST_SUITE(KernelMulti, Types);

// Segment lengths from a config's shape: rows segments of cols elements, an empty one, then 1 and cols + 3.
std::vector<long> lengths(const kt::Shape& s) {
  std::vector<long> n(size_t(s.rows), s.cols);
  n.insert(n.begin() + 1, 0);
  n.push_back(1);
  n.push_back(s.cols + 3);
  return n;
}

TYPED_TEST(KernelMulti, AdamWOverSegmentsIsAdamWPerSegment) {
  using T = TypeParam;
  std::mt19937_64 rng(11);
  for (const kt::Config& cf : kt::configs()) {
    SCOPED_TRACE(cf.str());
    kt::ScheduleScope sc(cf.sched);
    const std::vector<long> n = lengths(cf.s);
    const long count = long(n.size());
    std::vector<long> start = {0};
    for (long x : n) start.push_back(start.back() + x);
    const long total = start.back();
    const Vec p0 = kt::randv(size_t(total), rng), g0 = kt::randv(size_t(total), rng);
    const Vec m0 = kt::randv(size_t(total), rng, 0, 0.1), v0 = kt::randv(size_t(total), rng, 0, 0.1);
    Buf<T> p(p0), g(g0), m(m0), v(v0), pr(p0), mr(m0), vr(v0);  // one launch; per segment (the reference)
    std::vector<K::AdamSeg<T>> seg;
    for (long s = 0; s < count; ++s) {
      const long o = start[size_t(s)];
      const double wd = s % 2 ? 0.0 : 0.1;
      seg.push_back({p.data() + o, g.data() + o, m.data() + o, v.data() + o, K::acc_t<T>(wd)});
      if (n[size_t(s)] > 0)
        K::adamw(cf.L, pr.data() + o, g.data() + o, mr.data() + o, vr.data() + o, static_cast<T*>(nullptr), n[size_t(s)],
                 1e-2, 0.9, 0.95, 1e-8, wd, 3, 0.7);
    }
    K::adamw_multi(cf.L, seg.data(), start.data(), count, total, 1e-2, 0.9, 0.95, 1e-8, 3, 0.7);
    ASSERT_EQ(p.v, pr.v);
    ASSERT_EQ(m.v, mr.v);
    ASSERT_EQ(v.v, vr.v);
  }
}

TYPED_TEST(KernelMulti, SumSquaresOverSegments) {
  using T = TypeParam;
  std::mt19937_64 rng(12);
  for (const kt::Config& cf : kt::configs()) {
    SCOPED_TRACE(cf.str());
    kt::ScheduleScope sc(cf.sched);
    const std::vector<long> n = lengths(cf.s);
    std::vector<Buf<T>> bufs;
    std::vector<const T*> x;
    std::vector<long> start = {0};
    double want = 0;
    for (long len : n) {
      bufs.emplace_back(kt::randv(size_t(len), rng));
      start.push_back(start.back() + len);
      for (double e : bufs.back().dbl()) want += e * e;
    }
    for (Buf<T>& b : bufs) x.push_back(b.data());
    std::vector<double> scratch(cf.L.max_grid + 1, -1.0);
    K::sum_squares_multi(cf.L, scratch.data(), scratch.data() + 1, x.data(), start.data(), long(n.size()), start.back());
    EXPECT_NEAR(scratch[0], want, 1e-12 * want);
  }
}

}  // namespace
