// Tests of the pipeline's grouped exchanges (schedule/exchange.hpp): every schedule the planner and the executor
// run (GPipe, 1F1B, interleaved, modular, layered accumulation on contiguous and looping stages, uneven stages)
// finishes under NCCL's rendezvous semantics and matches every pair in issue order; the same traffic one operation
// at a time deadlocks 1F1B (docs/cuda.md's worked example), and the interleaved schedule's per-item groups deadlock
// until a receive is posted earlier, so the check can fail.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "schedule/exchange.hpp"

using namespace tp;

namespace {

std::vector<std::vector<Exchange>> per_item(const Plan& p, long long layers) {
  const StageLayout lay = stage_layout(p, layers);
  std::vector<std::vector<Exchange>> st;
  for (int s = 0; s < p.pp; ++s) st.push_back(item_exchanges(lay, plan_order(p, layers, s), s));
  return st;
}
std::vector<std::vector<Exchange>> all_stages(const Plan& p, long long layers) { return plan_exchanges(p, layers); }

Plan pipeline(Schedule s, int pp, int v, int m, GradAccumulation ga = GradAccumulation::standard) {
  Plan p;
  p.schedule = s;
  p.pp = pp;
  p.virtual_stages = v;
  p.num_microbatches = m;
  p.grad_accumulation = ga;
  return p;
}

// The same traffic one operation at a time, in the executor's former order (item k-1's send, then item k's
// receive): what mapping MPI-style isend / recv one to one onto NCCL gives.
std::vector<Exchange> one_by_one(const std::vector<Exchange>& grouped) {
  std::vector<Exchange> out;
  for (const Exchange& e : grouped)
    for (const P2pStep& s : e) out.push_back({s});
  return out;
}

std::string ops(const Exchange& e) {
  std::string s;
  for (const P2pStep& x : e) s += (s.empty() ? "" : ", ") + describe(x);
  return s;
}

}  // namespace

TEST(Exchange, OneFOneBGroupsAsMegatron) {
  // pp 2, m 4, stage 0: F0 F1 B0 F2 B1 F3 B2 B3. Megatron's 1F1B: after the warm-up forward, each steady forward's
  // send goes with the next backward's receive (send_forward_recv_backward).
  const Plan p = pipeline(Schedule::one_f_one_b, 2, 1, 4);
  const auto st = all_stages(p, 4);
  EXPECT_EQ(st, per_item(p, 4));  // (1F1B needs no receive moved)
  ASSERT_EQ(st[0].size(), 9u);
  EXPECT_EQ(ops(st[0][0]), "");
  EXPECT_EQ(ops(st[0][1]), "send f C01.fwd.mb0 to s1");
  EXPECT_EQ(ops(st[0][2]), "send f C01.fwd.mb1 to s1, recv b C00.bwd.mb0 from s1");
  EXPECT_EQ(ops(st[0][3]), "");  // (B0's output is the embedding's gradient)
  EXPECT_EQ(ops(st[0][8]), "");
  // Stage 1: F0 B0 F1 B1 ...: receive each forward's input, send each backward's gradient with the next receive.
  EXPECT_EQ(ops(st[1][0]), "recv f C01.fwd.mb0 from s0");
  EXPECT_EQ(ops(st[1][2]), "send b C00.bwd.mb0 to s0, recv f C01.fwd.mb1 from s0");
  EXPECT_EQ(ops(st[1][8]), "send b C00.bwd.mb3 to s0");
  EXPECT_EQ(rendezvous_check(st), "");
}

TEST(Exchange, OneByOneDeadlocks1F1B) {
  // The executor's former order mapped onto NCCL: stage 0's send f1 waits for a receive queued behind stage 1's
  // send b0, which waits for stage 0's receive b0, queued behind send f1.
  const auto st = per_item(pipeline(Schedule::one_f_one_b, 2, 1, 4), 4);
  const std::string r = rendezvous_check({one_by_one(st[0]), one_by_one(st[1])});
  EXPECT_NE(r.find("deadlock"), std::string::npos) << r;
  EXPECT_NE(r.find("stage 0 in exchange 1 waits to send f C01.fwd.mb1 to s1"), std::string::npos) << r;
  EXPECT_NE(r.find("send b C00.bwd.mb0 to s0"), std::string::npos) << r;
}

TEST(Exchange, InterleavedPostsTheNextGradientsReceiveWithTheForward) {
  // pp 2, v 2, m 4: per-item groups deadlock in the steady state (both stages send a gradient while the other's
  // receive of it waits a group later); plan_exchanges posts that receive with the group before, as Megatron's
  // send_forward_backward_recv_forward_backward does.
  const Plan p = pipeline(Schedule::interleaved, 2, 2, 4);
  const auto items = per_item(p, 4);
  EXPECT_NE(rendezvous_check(items).find("deadlock: stage 0 in exchange 6 waits to send b C01.bwd.mb0 to s1"),
            std::string::npos) << rendezvous_check(items);
  const auto st = all_stages(p, 4);
  EXPECT_EQ(rendezvous_check(st), "");
  // Stage 1's order: C01.f0 C01.f1 C03.f0 C03.b0 C03.f1 C03.b1 C01.f2 C01.b0 ...: its group before C01.f2 also
  // receives C01's first gradient, which stage 0 sends while it waits for stage 1's.
  int moved = 0;
  for (int s = 0; s < 2; ++s)
    for (size_t k = 0; k < st[s].size(); ++k) {
      int recvs = 0;
      for (const P2pStep& x : st[s][k]) recvs += !x.send;
      moved += recvs > 1;
    }
  EXPECT_GT(moved, 0);
  EXPECT_EQ(ops(st[1][6]), "send b C02.bwd.mb1 to s0, recv f C01.fwd.mb2 from s0, recv b C01.bwd.mb0 from s0");
}

TEST(Exchange, MismatchedOrderIsCaught) {
  auto st = per_item(pipeline(Schedule::gpipe, 2, 1, 3), 4);
  // Stage 1 receives micro-batches 0 and 1 the other way round: NCCL would put mb 1's data into mb 0's input.
  std::swap(st[1][0][0].microbatch, st[1][1][0].microbatch);
  const std::string r = rendezvous_check(st);
  EXPECT_NE(r.find("meets stage 1's recv f C01.fwd.mb1"), std::string::npos) << r;
  // A send without its receive (stage 1's third forward receives nothing).
  st = per_item(pipeline(Schedule::gpipe, 2, 1, 3), 4);
  ASSERT_EQ(ops(st[1][2]), "recv f C01.fwd.mb2 from s0");
  st[1][2].clear();
  EXPECT_NE(rendezvous_check(st).find("stage 0: send f C01.fwd.mb2 to s1 has no counterpart"), std::string::npos)
      << rendezvous_check(st);
}

TEST(Exchange, EverySchedulePassesTheRendezvousCheck) {
  int checked = 0;
  for (int pp : {2, 3, 4, 8})
    for (int m : {1, 2, 3, 4, 7, 8, 16}) {
      for (Schedule s : {Schedule::gpipe, Schedule::one_f_one_b}) {
        EXPECT_EQ(rendezvous_check(all_stages(pipeline(s, pp, 1, m), 2L * pp)), "") << int(s) << " pp " << pp << " m " << m;
        // Layered accumulation on contiguous stages: one-layer chunks, breadth-first.
        EXPECT_EQ(rendezvous_check(all_stages(pipeline(s, pp, 1, m, GradAccumulation::layered), 3L * pp)), "")
            << "layered " << int(s) << " pp " << pp << " m " << m;
        checked += 2;
      }
      for (int v : {2, 3, 4}) {
        if (m % pp == 0) {  // Megatron's interleaved schedule needs whole micro-batch groups
          EXPECT_EQ(rendezvous_check(all_stages(pipeline(Schedule::interleaved, pp, v, m), 1L * pp * v)), "")
              << "interleaved pp " << pp << " v " << v << " m " << m;
          EXPECT_EQ(rendezvous_check(all_stages(pipeline(Schedule::modular, pp, v, m), 1L * pp * v)), "")
              << "modular pp " << pp << " v " << v << " m " << m;
          checked += 2;
        }
        EXPECT_EQ(rendezvous_check(all_stages(pipeline(Schedule::modular, pp, v, m, GradAccumulation::layered), 1L * pp * v)), "")
            << "modular layered pp " << pp << " v " << v << " m " << m;
        ++checked;
      }
    }
  EXPECT_EQ(checked, 256);
}

TEST(Exchange, UnevenStagesPass) {
  Plan p = pipeline(Schedule::interleaved, 4, 2, 8);
  p.stage_layers = {4, 8, 8, 4};  // (per stage, split over its v chunks)
  EXPECT_EQ(rendezvous_check(all_stages(p, 24)), "");
  p = pipeline(Schedule::one_f_one_b, 4, 1, 6);
  p.stage_layers = {5, 7, 7, 5};
  EXPECT_EQ(rendezvous_check(all_stages(p, 24)), "");
}
