// The planner's thread pools carry a worker's exception to the caller (issue 44, item 1): before, an exception
// in a confirmation worker or in the estimate's progress loop ended the process with std::terminate (SIGABRT,
// exit 134 from `plan` and `report`). Each test throws from inside a pool with several threads and expects
// the exception on the calling thread, every thread joined.
#include <gtest/gtest.h>

#include <atomic>
#include <stdexcept>

#include "planner/search.hpp"
#include "planner/workers.hpp"
#include "planner_test_util.hpp"

using namespace tp;

namespace {

Scenario small_search() {
  return testutil::search_scenario(testutil::search_json("gpt3-350m", "selene", {{"max_gpus", 16}, {"top_k", 3}}));
}

}  // namespace

TEST(PlanWorkers, FirstExceptionReachesTheCaller) {
  Workers w;
  std::atomic<int> ran{0};
  EXPECT_THROW(w.run(4, [&](int k) {
    ++ran;
    if (k == 2) throw std::runtime_error("worker 2");
  }), std::runtime_error);
  EXPECT_TRUE(w.failed());
  EXPECT_EQ(ran.load(), 4);
}

TEST(PlanWorkers, ProgressLoopExceptionReachesTheCaller) {
  Workers w;
  EXPECT_THROW(w.run(2, [&](int) {}, [] { throw std::runtime_error("progress"); }), std::runtime_error);
}

// The confirmation's simulations run on worker threads; the progress callback is called from them.
TEST(PlanWorkers, ConfirmationWorkerThrowIsCarriedOutOfPlanSearch) {
  PlanOptions o;
  o.threads = 4;
  o.progress = [](double frac, double) {
    if (frac > kProgressEstimateShare && frac < 1) throw std::runtime_error("thrown in a confirmation worker");
  };
  try {
    plan_search(small_search(), o);
    ADD_FAILURE() << "no exception";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "thrown in a confirmation worker");
  }
}

// The estimate's progress loop runs on the calling thread while a worker estimates on a thread of its own (its
// first call, when the estimate outlasts the loop's first check; else the first confirmation worker's).
TEST(PlanWorkers, ProgressThrowIsCarriedOutOfPlanSearch) {
  PlanOptions o;
  o.threads = 3;
  o.progress = [](double, double) { throw std::runtime_error("thrown from progress"); };
  EXPECT_THROW(plan_search(small_search(), o), std::runtime_error);
}
