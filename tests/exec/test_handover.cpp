// test_handover: the windowed exchange of Pseudo-to-Real over two layouts (exec/runtime/handover.hpp) on one rank:
// index runs split at window boundaries and sorted, copies of record added in any order reaching the right
// flat positions through windows of any size, positions without an element left 0, and an element written
// twice or not at all stopping the handover with a logic_error that names it. Over several ranks the exchange
// runs in every RunRelayout test (tests/exec/test_run_relayout.cpp, with small windows in one of them).
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <stdexcept>
#include <string>

#include "exec/comm/comm.hpp"
#include "exec/runtime/handover.hpp"

using namespace tp::exec;
using namespace tp::exec::detail;

namespace {
// The runs of idx (from position 0), windowed and sorted, as the runtime builds them.
std::vector<IndexRun> index_runs(const std::vector<double>& idx, long long window) {
  std::vector<IndexRun> runs;
  append_runs(runs, idx.data(), (long long)idx.size(), 0);
  return split_and_sort(std::move(runs), window);
}
}  // namespace

TEST(Handover, IndexRunsAreSplitAtWindowBoundariesAndSorted) {
  // positions 0..6 hold elements 5 6 7 8, none, 0 1 (two runs; the first crosses the window boundary at 8)
  const std::vector<double> idx = {5, 6, 7, 8, -1, 0, 1};
  const std::vector<IndexRun> r = index_runs(idx, 4);
  ASSERT_EQ(r.size(), 3u);
  auto expect_run = [&](const IndexRun& x, long long full, long long at, long long n) {
    EXPECT_EQ(x.full, full);
    EXPECT_EQ(x.at, at);
    EXPECT_EQ(x.n, n);
  };
  expect_run(r[0], 0, 5, 2);
  expect_run(r[1], 5, 0, 3);  // 5..7 in window [4, 8)
  expect_run(r[2], 8, 3, 1);  // 8 in window [8, 12)
  // A descending index breaks runs (each element its own run), and sorting restores the order.
  const std::vector<IndexRun> d = index_runs({3, 2, 1, 0}, 100);
  ASSERT_EQ(d.size(), 4u);
  for (int i = 0; i < 4; ++i) expect_run(d[i], i, 3 - i, 1);
}

namespace {
// A flat layout of `flat` positions over a single-rank layout of `total` elements: a random permutation of the
// elements at the first `total` positions, the rest without an element (-1).
std::vector<double> shuffled_layout(long long total, long long flat, unsigned seed) {
  std::vector<double> idx((size_t)flat, -1.0);
  std::vector<long long> perm((size_t)total);
  std::iota(perm.begin(), perm.end(), 0LL);
  std::mt19937 g(seed);
  // shuffle blocks of 5 to keep some runs longer than one element
  for (long long i = 0; i + 5 <= total; i += 5)
    if (g() % 2) std::reverse(perm.begin() + i, perm.begin() + i + 5);
  std::shuffle(perm.begin(), perm.begin() + total / 2, g);
  for (long long i = 0; i < total; ++i) idx[(size_t)i] = (double)perm[(size_t)i];
  std::shuffle(idx.begin(), idx.end(), g);
  return idx;
}
}  // namespace

TEST(Handover, EveryWindowSizePlacesEveryElement) {
  std::unique_ptr<Comm> one = make_local_comm();
  const long long total = 103;
  for (long long window : {1LL, 7LL, 64LL, 103LL, 4096LL}) {
    Records<double> rec;  // written in another order than the one wanted
    const std::vector<double> from = shuffled_layout(total, total, 11);
    for (size_t i = 0; i < from.size(); ++i) {
      const long long g = (long long)from[i];
      rec.add(g, 1000.0 + g, 2000.0 + g, 3000.0 + g);
    }
    rec.finish(window);
    const std::vector<double> want = shuffled_layout(total, total + 9, 23);  // 9 padding positions
    Placed<double> got;
    for (HandoverPart part : {HandoverPart::weights, HandoverPart::moments})
      exchange_state(rec, index_runs(want, window), (long long)want.size(), total, window, *one, part, &got);
    ASSERT_EQ(got.w.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) {
      const double g = want[i];
      EXPECT_EQ(got.w[i], g < 0 ? 0.0 : 1000.0 + g) << "window " << window << ", position " << i;
      EXPECT_EQ(got.m1[i], g < 0 ? 0.0 : 2000.0 + g);
      EXPECT_EQ(got.m2[i], g < 0 ? 0.0 : 3000.0 + g);
    }
  }
}

TEST(Handover, AnElementWrittenTwiceOrNotAtAllIsALogicError) {
  std::unique_ptr<Comm> one = make_local_comm();
  auto expect_error = [&](Records<float>& rec, const std::string& what) {
    rec.finish(8);
    try {
      exchange_state<float>(rec, {}, 0, 20, 8, *one, HandoverPart::weights, nullptr);
      ADD_FAILURE() << "no error for " << what;
    } catch (const std::logic_error& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  Records<float> twice;
  for (long long g = 0; g < 20; ++g) twice.add(g, 1, 1, 1);
  twice.add(13, 1, 1, 1);
  expect_error(twice, "element 13 of the single-rank layout was written by 2 ranks");
  Records<float> missing;
  for (long long g = 0; g < 20; ++g)
    if (g != 17) missing.add(g, 1, 1, 1);
  expect_error(missing, "element 17 of the single-rank layout was written by 0 ranks");
}
