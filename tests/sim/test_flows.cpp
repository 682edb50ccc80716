// Tests for sim/flows: single-link rates and finish times, fair sharing and speed-up after a completion,
// weighted multiplicities, the classic 3-link max-min example, component independence, latency-only flows,
// tie-breaking, and link byte totals.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "sim/flows.hpp"

namespace tp {
namespace {

FlowSpec spec(std::vector<int> links, double bytes, double latency_s = 0, std::vector<double> mult = {}) {
  FlowSpec f;
  if (mult.empty()) mult.assign(links.size(), 1.0);
  f.links = std::move(links);
  f.mult = std::move(mult);
  f.bytes = bytes;
  f.latency_s = latency_s;
  return f;
}

TEST(FlowNet, EmptyNetHasNoCompletion) {
  FlowNet net({100.0});
  auto [t, id] = net.next_completion();
  EXPECT_EQ(id, -1);
  EXPECT_TRUE(std::isinf(t));
  EXPECT_EQ(net.active(), 0);
}

TEST(FlowNet, SingleFlowGetsFullCapacity) {
  FlowNet net({100.0});
  int a = net.add(spec({0}, 500, 0.25), 1.0);
  EXPECT_DOUBLE_EQ(net.rate(a), 100.0);
  auto [t, id] = net.next_completion();
  EXPECT_EQ(id, a);
  EXPECT_DOUBLE_EQ(t, 1.0 + 5.0 + 0.25);
  net.complete(a, t);
  EXPECT_EQ(net.active(), 0);
  EXPECT_EQ(net.next_completion().second, -1);
  EXPECT_DOUBLE_EQ(net.link_bytes()[0], 500.0);
}

TEST(FlowNet, TwoFlowsShareThenSurvivorSpeedsUp) {
  FlowNet net({100.0});
  int a = net.add(spec({0}, 100), 0.0);
  int b = net.add(spec({0}, 300), 0.0);
  EXPECT_DOUBLE_EQ(net.rate(a), 50.0);
  EXPECT_DOUBLE_EQ(net.rate(b), 50.0);
  auto [t1, id1] = net.next_completion();
  EXPECT_EQ(id1, a);
  EXPECT_DOUBLE_EQ(t1, 2.0);
  net.complete(a, t1);
  EXPECT_DOUBLE_EQ(net.rate(b), 100.0);  // 200 bytes left at full speed
  auto [t2, id2] = net.next_completion();
  EXPECT_EQ(id2, b);
  EXPECT_DOUBLE_EQ(t2, 4.0);
  net.complete(b, t2);
  EXPECT_DOUBLE_EQ(net.link_bytes()[0], 400.0);
}

TEST(FlowNet, LateArrivalSharesFromItsStart) {
  FlowNet net({100.0});
  int a = net.add(spec({0}, 400), 0.0);   // alone for 1 s: 100 bytes sent
  int b = net.add(spec({0}, 100), 1.0);   // then 50/50
  EXPECT_DOUBLE_EQ(net.rate(a), 50.0);
  auto [t1, id1] = net.next_completion();
  EXPECT_EQ(id1, b);
  EXPECT_DOUBLE_EQ(t1, 3.0);
  net.complete(b, t1);                   // a has 200 left at t = 3
  auto [t2, id2] = net.next_completion();
  EXPECT_EQ(id2, a);
  EXPECT_DOUBLE_EQ(t2, 5.0);
}

TEST(FlowNet, LatencyIsAddedOnceAfterTheLastByte) {
  // Bandwidth is re-divided at completions: a holds its share until it completes at 2.5.
  FlowNet net({100.0});
  int a = net.add(spec({0}, 100, 0.5), 0.0);
  int b = net.add(spec({0}, 300, 0.5), 0.0);
  auto [t1, id1] = net.next_completion();
  EXPECT_EQ(id1, a);
  EXPECT_DOUBLE_EQ(t1, 2.5);
  net.complete(a, t1);
  // b sent 50 * 2.5 = 125 bytes, 175 left at 100 B/s, then 0.5 s latency.
  EXPECT_DOUBLE_EQ(net.next_completion().first, 2.5 + 1.75 + 0.5);
  EXPECT_EQ(net.next_completion().second, b);
}

TEST(FlowNet, WeightedMultiplicity) {
  FlowNet net({100.0});
  int a = net.add(spec({0}, 50, 0, {4.0}), 0.0);
  EXPECT_DOUBLE_EQ(net.rate(a), 25.0);
  EXPECT_DOUBLE_EQ(net.next_completion().first, 2.0);
  // A second flow of multiplicity 1: 4r + r = 100 -> both at 20.
  int b = net.add(spec({0}, 1000), 0.0);
  EXPECT_DOUBLE_EQ(net.rate(a), 20.0);
  EXPECT_DOUBLE_EQ(net.rate(b), 20.0);
  net.complete(a, net.next_completion().first);  // at 2.5
  net.complete(b, net.next_completion().first);
  EXPECT_DOUBLE_EQ(net.link_bytes()[0], 4 * 50.0 + 1000.0);
}

TEST(FlowNet, ClassicMaxMin) {
  // Links: L0 cap 10, L1 cap 4, L2 cap 100. Long flow f0 on L0+L1, f1 on L0, f2 on L1+L2.
  // L1 saturates first at 2 each (f0, f2 frozen); f1 takes the rest of L0: 10 - 2 = 8.
  FlowNet net({10.0, 4.0, 100.0});
  int f0 = net.add(spec({0, 1}, 1000), 0.0);
  int f1 = net.add(spec({0}, 1000), 0.0);
  int f2 = net.add(spec({1, 2}, 1000), 0.0);
  EXPECT_DOUBLE_EQ(net.rate(f0), 2.0);
  EXPECT_DOUBLE_EQ(net.rate(f1), 8.0);
  EXPECT_DOUBLE_EQ(net.rate(f2), 2.0);
  EXPECT_EQ(net.next_completion().second, f1);
  EXPECT_DOUBLE_EQ(net.next_completion().first, 125.0);
  // After f1 leaves, L1 is still the bottleneck: f0 and f2 stay at 2.
  net.complete(f1, 125.0);
  EXPECT_DOUBLE_EQ(net.rate(f0), 2.0);
  EXPECT_DOUBLE_EQ(net.rate(f2), 2.0);
}

TEST(FlowNet, ComponentsAreIndependent) {
  FlowNet net({100.0, 10.0});
  int a = net.add(spec({0}, 1000), 0.0);
  auto before = net.next_completion();
  int b = net.add(spec({1}, 5), 1.0);
  EXPECT_DOUBLE_EQ(net.rate(a), 100.0);
  EXPECT_DOUBLE_EQ(net.rate(b), 10.0);
  EXPECT_EQ(net.next_completion().second, b);
  EXPECT_DOUBLE_EQ(net.next_completion().first, 1.5);
  net.complete(b, 1.5);
  EXPECT_EQ(net.next_completion(), before);  // a's finish time never moved
}

TEST(FlowNet, ZeroByteAndLinklessFlowsTakeOnlyLatency) {
  FlowNet net({100.0});
  int a = net.add(spec({0}, 1000), 0.0);
  int z = net.add(spec({0}, 0, 0.125), 1.0);
  int n = net.add(spec({}, 1e9, 0.0625), 1.0);
  EXPECT_DOUBLE_EQ(net.rate(a), 100.0);
  EXPECT_DOUBLE_EQ(net.rate(z), 0.0);
  EXPECT_EQ(net.next_completion(), std::make_pair(1.0625, n));
  net.complete(n, 1.0625);
  EXPECT_EQ(net.next_completion(), std::make_pair(1.125, z));
  net.complete(z, 1.125);
  EXPECT_EQ(net.next_completion(), std::make_pair(10.0, a));
}

TEST(FlowNet, TiesBreakBySmallerId) {
  FlowNet net({100.0, 100.0});
  int a = net.add(spec({0}, 100), 0.0);
  int b = net.add(spec({1}, 100), 0.0);
  EXPECT_EQ(net.next_completion(), std::make_pair(1.0, a));
  net.complete(a, 1.0);
  EXPECT_EQ(net.next_completion(), std::make_pair(1.0, b));
}

TEST(FlowNet, LinkBytesCountEveryLinkAndCopy) {
  FlowNet net({10.0, 20.0, 30.0});
  net.add(spec({0, 1}, 100, 0, {1.0, 2.0}), 0.0);
  net.add(spec({1, 2}, 60), 0.0);
  net.add(spec({2}, 30), 0.0);
  // Partial bytes are settled when the component changes; totals are exact once all complete.
  while (net.active() > 0) {
    auto [t, id] = net.next_completion();
    ASSERT_GE(id, 0);
    net.complete(id, t);
  }
  EXPECT_NEAR(net.link_bytes()[0], 100.0, 1e-9);
  EXPECT_NEAR(net.link_bytes()[1], 200.0 + 60.0, 1e-9);
  EXPECT_NEAR(net.link_bytes()[2], 60.0 + 30.0, 1e-9);
}

TEST(FlowNet, RejectsBadSpecs) {
  FlowNet net({1.0});
  EXPECT_THROW(net.add(spec({1}, 10), 0.0), std::invalid_argument);
  EXPECT_THROW(net.add(spec({0}, 10, 0, {0.0}), 0.0), std::invalid_argument);
  EXPECT_THROW(net.complete(7, 0.0), std::invalid_argument);
}

// Max-min certificate: no link is over capacity and every sending flow has a bottleneck link that is
// saturated and on which no flow has a higher rate.
void expect_max_min(const FlowNet& net, const std::vector<double>& cap, const std::vector<FlowSpec>& specs,
                    const std::vector<int>& alive) {
  std::vector<double> load(cap.size(), 0.0), max_rate(cap.size(), 0.0);
  for (int id : alive)
    for (size_t i = 0; i < specs[id].links.size(); ++i) {
      load[specs[id].links[i]] += specs[id].mult[i] * net.rate(id);
      max_rate[specs[id].links[i]] = std::max(max_rate[specs[id].links[i]], net.rate(id));
    }
  for (size_t l = 0; l < cap.size(); ++l) EXPECT_LE(load[l], cap[l] * (1 + 1e-9)) << "link " << l;
  for (int id : alive) {
    if (net.rate(id) == 0) continue;  // done sending, waiting out its latency
    bool bottleneck = false;
    for (int l : specs[id].links)
      bottleneck |= load[l] >= cap[l] * (1 - 1e-9) && net.rate(id) >= max_rate[l] * (1 - 1e-9);
    EXPECT_TRUE(bottleneck) << "flow " << id << " has no bottleneck";
  }
}

TEST(FlowNet, ManyFlowsStayMaxMinFairAndConserveBytes) {
  const int n_links = 20;
  std::vector<double> cap(n_links);
  for (int l = 0; l < n_links; ++l) cap[l] = 10.0 + l;
  FlowNet net(cap);
  std::vector<FlowSpec> specs;
  std::vector<int> alive;
  std::vector<double> expect_bytes(n_links, 0.0);
  double last_t = 0;
  auto complete_until = [&](double until) {
    while (true) {
      auto [t, id] = net.next_completion();
      if (id < 0 || t > until) return;
      ASSERT_GE(t, last_t - 1e-12);
      last_t = t;
      net.complete(id, t);
      alive.erase(std::find(alive.begin(), alive.end(), id));
      expect_max_min(net, cap, specs, alive);
    }
  };
  for (int i = 0; i < 200; ++i) {
    const double now = i * 0.5;
    complete_until(now);
    const int first = (i * 7) % n_links, len = 1 + i % 4;
    std::vector<int> links;
    std::vector<double> mult;
    for (int k = 0; k < len && first + k < n_links; ++k) {
      links.push_back(first + k);
      mult.push_back(1.0 + (i + k) % 3);
    }
    const double bytes = 10.0 + (i * 13) % 50;
    for (size_t k = 0; k < links.size(); ++k) expect_bytes[links[k]] += mult[k] * bytes;
    specs.push_back(spec(links, bytes, 1e-3, mult));
    const int id = net.add(specs.back(), now);
    ASSERT_EQ(id, i);
    last_t = now;
    alive.push_back(id);
    expect_max_min(net, cap, specs, alive);
  }
  EXPECT_GT(net.active(), 3);  // the test really exercises sharing
  complete_until(std::numeric_limits<double>::infinity());
  EXPECT_EQ(net.active(), 0);
  for (int l = 0; l < n_links; ++l)
    EXPECT_NEAR(net.link_bytes()[l], expect_bytes[l], 1e-9 * expect_bytes[l] + 1e-9) << "link " << l;
}

}  // namespace
}  // namespace tp
