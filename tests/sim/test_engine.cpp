// Event-engine semantics on hand-built task graphs: lane order, dependencies, collectives that wait for all
// members, phases in sequence, link sharing between concurrent flows, and deadlock detection.
#include <gtest/gtest.h>

#include "sim/engine.hpp"

using namespace tp;

namespace {
EngineInput two_ranks() {
  EngineInput in;
  in.ranks = 2;
  in.lanes = 2;
  in.lane_order.assign(4, {});
  in.link_capacity_bytes_per_s = {100.0, 100.0};
  return in;
}
int add(EngineInput& in, int rank, int lane, double dur, int coll = -1) {
  in.tasks.push_back({rank, lane, dur, coll});
  int id = (int)in.tasks.size() - 1;
  in.lane_order[rank * in.lanes + lane].push_back(id);
  return id;
}
}  // namespace

TEST(Engine, LanesRunInOrderAndRespectDependencies) {
  EngineInput in = two_ranks();
  int a = add(in, 0, 0, 1.0);
  int b = add(in, 0, 0, 2.0);
  int c = add(in, 1, 0, 0.5);
  in.edges.push_back({b, c});  // c waits for b although its lane is free
  engine_finalize(in);
  EngineOutput out = engine_run(in);
  EXPECT_DOUBLE_EQ(out.start_s[a], 0);
  EXPECT_DOUBLE_EQ(out.start_s[b], 1.0);
  EXPECT_DOUBLE_EQ(out.start_s[c], 3.0);
  EXPECT_DOUBLE_EQ(out.makespan_s, 3.5);
  EXPECT_FALSE(out.deadlock);
}

TEST(Engine, CollectiveWaitsForAllMembersThenRunsPhases) {
  EngineInput in = two_ranks();
  // Two phases: 200 bytes on link 0, then 100 bytes on link 1 with 0.5 s latency.
  FlowSpec f1{{0}, {1.0}, 200.0, 0.0}, f2{{1}, {1.0}, 100.0, 0.5};
  in.shapes.push_back({{f1}, {f2}});
  in.colls.push_back({0, 2});
  int w = add(in, 0, 0, 3.0);
  int m0 = add(in, 0, 1, 0, 0);
  int m1 = add(in, 1, 1, 0, 0);
  in.edges.push_back({w, m0});
  engine_finalize(in);
  EngineOutput out = engine_run(in);
  EXPECT_DOUBLE_EQ(out.start_s[m1], 0);         // arrived early
  EXPECT_DOUBLE_EQ(out.transfer_s[m1], 3.0);    // transfer starts when the last member arrives
  EXPECT_DOUBLE_EQ(out.end_s[m0], 3.0 + 2.0 + 1.0 + 0.5);
  EXPECT_DOUBLE_EQ(out.end_s[m1], out.end_s[m0]);
}

TEST(Engine, ConcurrentFlowsShareALink) {
  EngineInput in = two_ranks();
  FlowSpec f{{0}, {1.0}, 100.0, 0.0};
  in.shapes.push_back({{f}});
  in.colls.push_back({0, 1});
  in.colls.push_back({0, 1});
  int x = add(in, 0, 1, 0, 0);
  int y = add(in, 1, 1, 0, 1);
  engine_finalize(in);
  EngineOutput out = engine_run(in);
  EXPECT_DOUBLE_EQ(out.end_s[x], 2.0);  // 100 bytes each at 50 bytes/s
  EXPECT_DOUBLE_EQ(out.end_s[y], 2.0);
  EXPECT_DOUBLE_EQ(out.link_bytes[0], 200.0);
}

TEST(Engine, DeadlockIsDetectedNotHung) {
  EngineInput in = two_ranks();
  int a = add(in, 0, 0, 1.0);
  int b = add(in, 1, 0, 1.0);
  in.edges.push_back({a, b});
  in.edges.push_back({b, a});
  engine_finalize(in);
  EXPECT_TRUE(engine_run(in).deadlock);
}

// NCCL beside the GEMMs: a compute task on a slowed lane runs at 1 / (1 + s) while its rank has a collective in
// transfer, and at full speed before and after; the work left carries over. Rank 1's compute, whose rank has no
// transfer, is not slowed; neither is a lane that is not marked.
TEST(Engine, ComputeSlowsWhileItsRankHasACollectiveInTransfer) {
  EngineInput in = two_ranks();
  in.compute_slowdown = 0.25;
  in.lane_slowed = {1, 0};  // lane 0 computes, lane 1 communicates
  FlowSpec f{{0}, {1.0}, 400.0, 0.0};  // 4 s on link 0
  in.shapes.push_back({{f}});
  in.colls.push_back({0, 1});
  const int pre = add(in, 0, 1, 1.0);     // lane 1 of rank 0: waits 1 s (not a collective, not slowed)
  const int c = add(in, 0, 1, 0, 0);      // then the 4 s transfer: t = 1 .. 5
  const int gemm = add(in, 0, 0, 10.0);   // rank 0 computes from 0: 1 s full, 4 s at 0.8, then the rest
  const int other = add(in, 1, 0, 10.0);  // rank 1 computes, no transfer of its own
  engine_finalize(in);
  EngineOutput out = engine_run(in);
  EXPECT_DOUBLE_EQ(out.end_s[pre], 1.0);
  EXPECT_DOUBLE_EQ(out.end_s[c], 5.0);
  EXPECT_NEAR(out.end_s[gemm], 1.0 + 4.0 + (10.0 - 1.0 - 4.0 / 1.25), 1e-12);  // 10.8
  EXPECT_DOUBLE_EQ(out.end_s[other], 10.0);
  EXPECT_NEAR(out.makespan_s, 10.8, 1e-12);
  in.compute_slowdown = 0;  // off: the compute ends at 10
  EXPECT_DOUBLE_EQ(engine_run(in).end_s[gemm], 10.0);
}
