// The mixture-of-experts kernels (exec/kernels/k_moe.hpp) on the emulator against float64 references written
// from exec/backends/ops.hpp's contracts: router (softmax, top-k with ties to the lower expert, renormalised or not,
// capacity with all first choices before any second choice, dropped slots -(e + 1), the load-balancing loss)
// in float and double; router backward; dispatch, combine and their backwards in float, double and bf16.
// Shapes from one token to more tokens than a block, with and without drops, under several block sizes and the
// three schedules. Slots are compared exactly; values within the per-dtype tolerances.
#include <algorithm>
#include <cmath>

#include "tests/kernels/kt_util.hpp"

namespace {
namespace K = tp::kernels;
using kt::Buf;
using kt::Vec;
using Ints = std::vector<int32_t>;

struct MoeShape {
  long N, E, k, cap, C;
};
struct MoeConfig {
  MoeShape s;
  K::emu::Launcher L;
  K::emu::Schedule sched;
  std::string str() const {
    return "N " + std::to_string(s.N) + ", E " + std::to_string(s.E) + ", k " + std::to_string(s.k) + ", cap " +
           std::to_string(s.cap) + ", C " + std::to_string(s.C) + ", block " + std::to_string(L.block) +
           ", grid <= " + std::to_string(L.max_grid) + ", schedule " + std::to_string(int(sched));
  }
};
// Capacities below N k / E drop copies; cap >= N keeps every copy.
std::vector<MoeConfig> moe_configs() {
  std::vector<MoeShape> sh = {{1, 1, 1, 1, 1}, {7, 3, 2, 4, 5},   {33, 8, 2, 5, 37},
                              {64, 4, 1, 64, 70}, {130, 16, 4, 30, 33}, {40, 40, 3, 2, 9}};
  std::vector<K::emu::Launcher> ls = {{32, 1}, {64, 3}, {128, 2}, {256, 2}};
  if (kt::quick()) sh = {{7, 3, 2, 4, 5}, {33, 8, 2, 5, 37}}, ls = {{64, 2}};
  std::vector<MoeConfig> r;
  size_t i = 0;
  for (const MoeShape& s : sh)
    for (const K::emu::Launcher& L : ls) {
      r.push_back({s, L, K::emu::Schedule(i % 3)});
      ++i;
    }
  return r;
}

long expert_of(int32_t s, long cap) { return s >= 0 ? s / cap : -long(s) - 1; }

// Logits whose probabilities are far apart (top-k the same in float and double), or small integers (exact ties,
// equal in every precision).
Vec logits(long N, long E, bool ties, std::mt19937_64& rng) {
  Vec z(N * E);
  for (long i = 0; i < N; ++i) {
    std::vector<long> perm(E);
    for (long e = 0; e < E; ++e) perm[e] = e;
    std::shuffle(perm.begin(), perm.end(), rng);
    for (long e = 0; e < E; ++e) z[i * E + e] = ties ? double(long(rng() % 3) - 1) : 0.3 * double(perm[e]) - 2;
  }
  return z;
}

struct Route {
  Vec probs, gate;
  Ints slot;
  double aux = 0;
};
Route route_ref(const Vec& z, long N, long E, long k, long cap, bool renorm) {
  Route r{Vec(N * E), Vec(N * k), Ints(N * k)};
  Ints choice(N * k);
  Vec count(E, 0.0), pm(E, 0.0);
  for (long i = 0; i < N; ++i) {
    const double mx = *std::max_element(z.begin() + i * E, z.begin() + (i + 1) * E);
    double s = 0;
    for (long e = 0; e < E; ++e) s += std::exp(z[i * E + e] - mx);
    for (long e = 0; e < E; ++e) r.probs[i * E + e] = std::exp(z[i * E + e] - mx) / s, pm[e] += r.probs[i * E + e] / N;
    std::vector<long> order(E);
    for (long e = 0; e < E; ++e) order[e] = e;
    std::stable_sort(order.begin(), order.end(), [&](long a, long b) { return r.probs[i * E + a] > r.probs[i * E + b]; });
    double chosen = 0;
    for (long j = 0; j < k; ++j) chosen += r.probs[i * E + order[j]];
    for (long j = 0; j < k; ++j) {
      choice[i * k + j] = int32_t(order[j]);
      r.gate[i * k + j] = r.probs[i * E + order[j]] / (renorm ? chosen : 1.0);
      count[order[j]] += 1;
    }
  }
  Ints used(E, 0);
  for (long j = 0; j < k; ++j)
    for (long i = 0; i < N; ++i) {
      const int32_t e = choice[i * k + j];
      r.slot[i * k + j] = used[e] < cap ? int32_t(e * cap + used[e]++) : -e - 1;
    }
  for (long e = 0; e < E; ++e) r.aux += E * count[e] / double(N * k) * pm[e];
  return r;
}

// dlogits += the gradient through the gates (and their renormalisation) plus w x the aux loss's (f_e constant).
void route_bwd_ref(Vec& dl, const Vec& p, const Ints& slot, const Vec& dg, long N, long E, long k, long cap,
                   bool renorm, double w) {
  Vec count(E, 0.0);
  for (int32_t s : slot) count[expert_of(s, cap)] += 1;
  for (long i = 0; i < N; ++i) {
    Vec dp(E);
    for (long e = 0; e < E; ++e) dp[e] = w * E * count[e] / double(N * k) / N;
    double s = 0, dot = 0;
    for (long j = 0; j < k; ++j) s += p[i * E + expert_of(slot[i * k + j], cap)];
    for (long j = 0; j < k; ++j) dot += dg[i * k + j] * p[i * E + expert_of(slot[i * k + j], cap)];
    for (long j = 0; j < k; ++j)
      dp[expert_of(slot[i * k + j], cap)] += renorm ? (dg[i * k + j] - dot / s) / s : dg[i * k + j];
    double d2 = 0;
    for (long e = 0; e < E; ++e) d2 += dp[e] * p[i * E + e];
    for (long e = 0; e < E; ++e) dl[i * E + e] += p[i * E + e] * (dp[e] - d2);
  }
}

template <class T>
class KernelMoeRoute : public ::testing::Test {};
using RouteTypes = ::testing::Types<float, double>;
TYPED_TEST_SUITE(KernelMoeRoute, RouteTypes);

TYPED_TEST(KernelMoeRoute, RouteAndBackward) {
  using T = TypeParam;
  std::mt19937_64 rng(21);
  for (const MoeConfig& cf : moe_configs())
    for (bool ties : {false, true})
      for (bool renorm : {false, true}) {
        const auto [N, E, k, cap, C] = cf.s;
        SCOPED_TRACE(cf.str() + (ties ? ", ties" : "") + (renorm ? ", renorm" : ""));
        kt::ScheduleScope sc(cf.sched);
        const Vec z = kt::rounded<T>(logits(N, E, ties, rng));
        const Route want = route_ref(z, N, E, k, cap, renorm);
        Buf<T> bz(z), bp(Vec(N * E, 7.0)), bg(Vec(N * k, 7.0));
        Ints slot(N * k, 12345), choice(N * k);
        std::vector<double> stats(2 * E + 1);
        K::moe_route(cf.L, bp.data(), slot.data(), bg.data(), choice.data(), stats.data(), bz.data(), N, E, k, cap,
                     renorm);
        EXPECT_EQ(slot, want.slot);
        EXPECT_TRUE(kt::near<T>(bp.dbl(), want.probs, 2));
        EXPECT_TRUE(kt::near<T>(bg.dbl(), want.gate, 4));
        EXPECT_NEAR(stats[2 * E], want.aux, 10 * kt::tol<T>().rtol * want.aux);
        // Backward from the kernel's own (stored) probabilities and the reference's slots.
        const Vec p = bp.dbl(), dg = kt::rounded<T>(kt::randv(N * k, rng)), dl0 = kt::rounded<T>(kt::randv(N * E, rng));
        Vec dl = dl0;
        route_bwd_ref(dl, p, want.slot, dg, N, E, k, cap, renorm, 0.3);
        Buf<T> bdl(dl0), bdg(dg);
        std::vector<double> base(E);
        K::moe_route_bwd(cf.L, bdl.data(), base.data(), bp.data(), want.slot.data(), bdg.data(), N, E, k, cap, renorm,
                         K::acc_t<T>(0.3));
        EXPECT_TRUE(kt::near<T>(bdl.dbl(), dl, 4 * E));
      }
}

// Slots as the router makes them: distinct kept positions, the rest dropped (-(e + 1)).
Ints random_slots(long N, long E, long k, long cap, std::mt19937_64& rng) {
  std::vector<int32_t> free_pos(E * cap);
  for (long q = 0; q < E * cap; ++q) free_pos[q] = int32_t(q);
  std::shuffle(free_pos.begin(), free_pos.end(), rng);
  Ints slot(N * k);
  size_t used = 0;
  for (auto& s : slot) s = (rng() % 4 != 0 && used < free_pos.size()) ? free_pos[used++] : -int32_t(rng() % E) - 1;
  return slot;
}

template <class T>
class KernelMoe : public ::testing::Test {};
using Types = ::testing::Types<float, double, K::bf16>;
TYPED_TEST_SUITE(KernelMoe, Types);

TYPED_TEST(KernelMoe, DispatchCombine) {
  using T = TypeParam;
  std::mt19937_64 rng(22);
  for (const MoeConfig& cf : moe_configs()) {
    const auto [N, E, k, cap, C] = cf.s;
    SCOPED_TRACE(cf.str());
    kt::ScheduleScope sc(cf.sched);
    const long rows = E * cap;
    const Ints slot = random_slots(N, E, k, cap, rng);
    const Vec x = kt::rounded<T>(kt::randv(N * C, rng)), ein = kt::rounded<T>(kt::randv(rows * C, rng)),
              gate = kt::rounded<T>(kt::randv(N * k, rng, 0, 1)), dy = kt::rounded<T>(kt::randv(N * C, rng)),
              dx0 = kt::rounded<T>(kt::randv(N * C, rng)), dein0 = kt::rounded<T>(kt::randv(rows * C, rng)),
              dg0 = kt::rounded<T>(kt::randv(N * k, rng));
    Vec out(rows * C, 0.0), dx = dx0, y(N * C, 0.0), dein = dein0, dg = dg0;
    for (long q = 0; q < N * k; ++q) {
      const long i = q / k;
      if (slot[q] < 0) continue;
      double dot = 0;
      for (long c = 0; c < C; ++c) {
        out[slot[q] * C + c] = x[i * C + c];
        dx[i * C + c] += ein[slot[q] * C + c];  // dispatch backward of dout = ein
        y[i * C + c] += gate[q] * ein[slot[q] * C + c];
        dein[slot[q] * C + c] += gate[q] * dy[i * C + c];
        dot += dy[i * C + c] * ein[slot[q] * C + c];
      }
      dg[q] += dot;
    }
    Buf<T> bx(x), be(ein), bgate(gate), bdy(dy), bout(Vec(rows * C, 9.0)), bdx(dx0), by(Vec(N * C, 9.0)),
        bdein(dein0), bdg(dg0);
    K::moe_dispatch(cf.L, bout.data(), bx.data(), slot.data(), N, k, C, rows);
    EXPECT_TRUE(kt::near<T>(bout.dbl(), out));
    K::moe_dispatch_bwd(cf.L, bdx.data(), be.data(), slot.data(), N, k, C);
    EXPECT_TRUE(kt::near<T>(bdx.dbl(), dx, k));
    K::moe_combine(cf.L, by.data(), be.data(), slot.data(), bgate.data(), N, k, C);
    EXPECT_TRUE(kt::near<T>(by.dbl(), y, k));
    K::moe_combine_bwd(cf.L, bdein.data(), bdg.data(), bdy.data(), be.data(), slot.data(), bgate.data(), N, k, C);
    EXPECT_TRUE(kt::near<T>(bdein.dbl(), dein, 2));
    EXPECT_TRUE(kt::near<T>(bdg.dbl(), dg, 2 * std::sqrt(double(C))));
  }
}

}  // namespace
