// Flat::each_run (exec/runtime/model_flat.hpp): the optimizer's norm, clip and Adam step run once per run of adjacent
// parameter views with one key (a skipped view, another weight decay or a gap ends a run), over any flat range.
#include <gtest/gtest.h>

#include <tuple>
#include <vector>

#include "exec/runtime/model_flat.hpp"

namespace {

using ViewRun = std::tuple<long long, long long, long>;  // at, n, key

tp::exec::detail::Flat flat(const std::vector<std::tuple<long long, long long, bool>>& views) {
  tp::exec::detail::Flat f;
  for (auto [off, n, decay] : views) {
    tp::exec::ParamView v;
    v.offset = off, v.count = n, v.decay = decay;
    f.views.push_back(v);
    f.view_end.push_back(off + n);
    f.total = off + n;
  }
  return f;
}

std::vector<ViewRun> runs(const tp::exec::detail::Flat& f, long long a, long long z, size_t skip) {
  std::vector<ViewRun> out;
  f.each_run(
      a, z, [&](size_t v, long long) -> long { return v == skip ? -1 : f.views[v].decay ? 1 : 0; },
      [&](long long at, long long n, long key) { out.emplace_back(at, n, key); });
  return out;
}

}  // namespace

TEST(FlatRuns, AdjacentViewsWithOneKeyMakeOneRun) {
  // views: [0,4) decay, [4,6) no decay, [6,10) decay, [10,12) decay, [12,15) skipped, [15,20) decay
  const auto f = flat({{0, 4, true}, {4, 2, false}, {6, 4, true}, {10, 2, true}, {12, 3, true}, {15, 5, true}});
  EXPECT_EQ(runs(f, 0, 20, 4), (std::vector<ViewRun>{{0, 4, 1}, {4, 2, 0}, {6, 6, 1}, {15, 5, 1}}));
  // A range cutting views: offsets are relative to its start.
  EXPECT_EQ(runs(f, 2, 17, 4), (std::vector<ViewRun>{{0, 2, 1}, {2, 2, 0}, {4, 6, 1}, {13, 2, 1}}));
  // Nothing skipped: the skipped view joins its neighbours.
  EXPECT_EQ(runs(f, 0, 20, 99), (std::vector<ViewRun>{{0, 4, 1}, {4, 2, 0}, {6, 14, 1}}));
  // The last view skipped: the run before it is still given.
  EXPECT_EQ(runs(f, 6, 20, 5), (std::vector<ViewRun>{{0, 9, 1}}));
  EXPECT_TRUE(runs(f, 12, 15, 4).empty());
}

TEST(FlatRuns, AGapBetweenViewsEndsARun) {
  const auto f = flat({{0, 3, true}, {5, 2, true}});  // elements 3 and 4 belong to no view
  EXPECT_EQ(runs(f, 0, 7, 99), (std::vector<ViewRun>{{0, 3, 1}, {5, 2, 1}}));
}
