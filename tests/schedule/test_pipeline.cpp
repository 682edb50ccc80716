// Tests of the shared pipeline schedule: Megatron-LM's exact 1F1B and interleaved orders, GPipe, and the
// invariants every order must keep (each micro-batch's forward and backward once per chunk, backward after
// forward, warm-up counts).
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "schedule/pipeline.hpp"

using namespace tp;

static std::string render(const std::vector<WorkItem>& v) {
  std::string s;
  for (auto& w : v) {
    s += w.pass == Pass::fwd ? 'F' : 'B';
    s += std::to_string(w.chunk);
    s += '.';
    s += std::to_string(w.microbatch);
    s += ' ';
  }
  return s;
}

TEST(Pipeline, OneFOneBWarmupAndOrder) {
  // p = 4, m = 6: stage s runs p - s - 1 forwards before its first backward.
  EXPECT_EQ(render(pipeline_order(Schedule::one_f_one_b, 4, 1, 6, 0)),
            "F0.0 F0.1 F0.2 F0.3 B0.0 F0.4 B0.1 F0.5 B0.2 B0.3 B0.4 B0.5 ");
  EXPECT_EQ(render(pipeline_order(Schedule::one_f_one_b, 4, 1, 6, 3)),
            "F0.0 B0.0 F0.1 B0.1 F0.2 B0.2 F0.3 B0.3 F0.4 B0.4 F0.5 B0.5 ");
  for (int s = 0; s < 4; ++s) EXPECT_EQ(warmup_items(Schedule::one_f_one_b, 4, 1, 6, s), 3 - s);
  // Fewer micro-batches than stages: warm-up is capped at m.
  EXPECT_EQ(warmup_items(Schedule::one_f_one_b, 8, 1, 2, 0), 2);
}

TEST(Pipeline, InterleavedMatchesMegatron) {
  // p = 2, v = 2, m = 4, worked by hand from Megatron-LM's forward_backward_pipelining_with_interleaving
  // (warm-up = (p - rank - 1) * 2 + (v - 1) * p; chunk of virtual micro-batch k = (k mod p*v) / p, reversed in
  // the backward; micro-batch = (k / (p*v)) * p + k mod p).
  EXPECT_EQ(render(pipeline_order(Schedule::interleaved, 2, 2, 4, 0)),
            "F0.0 F0.1 F1.0 F1.1 F0.2 B1.0 F0.3 B1.1 F1.2 B0.0 F1.3 B0.1 B1.2 B1.3 B0.2 B0.3 ");
  EXPECT_EQ(render(pipeline_order(Schedule::interleaved, 2, 2, 4, 1)),
            "F0.0 F0.1 F1.0 B1.0 F1.1 B1.1 F0.2 B0.0 F0.3 B0.1 F1.2 B1.2 F1.3 B1.3 B0.2 B0.3 ");
  // m == p: Megatron runs everything as warm-up.
  EXPECT_EQ(warmup_items(Schedule::interleaved, 4, 2, 4, 0), 8);
}

TEST(Pipeline, GPipeIsAllForwardsThenAllBackwards) {
  EXPECT_EQ(render(pipeline_order(Schedule::gpipe, 3, 1, 3, 1)), "F0.0 F0.1 F0.2 B0.0 B0.1 B0.2 ");
}

TEST(Pipeline, EveryOrderRunsEachItemOnceBackwardAfterForward) {
  struct Case { Schedule s; int p, v, m; };
  for (Case c : {Case{Schedule::gpipe, 4, 1, 7}, Case{Schedule::one_f_one_b, 8, 1, 3}, Case{Schedule::one_f_one_b, 4, 1, 16},
                 Case{Schedule::interleaved, 4, 3, 8}, Case{Schedule::interleaved, 8, 2, 16}, Case{Schedule::interleaved, 3, 4, 9}}) {
    for (int s = 0; s < c.p; ++s) {
      auto order = pipeline_order(c.s, c.p, c.v, c.m, s);
      ASSERT_EQ((int)order.size(), 2 * c.m * c.v);
      std::map<std::pair<int, int>, int> fwd_at, bwd_at;
      for (int i = 0; i < (int)order.size(); ++i) {
        auto key = std::make_pair(order[i].chunk, order[i].microbatch);
        auto& slot = order[i].pass == Pass::fwd ? fwd_at : bwd_at;
        EXPECT_EQ(slot.count(key), 0u) << "duplicate item at stage " << s;
        slot[key] = i;
      }
      EXPECT_EQ((int)fwd_at.size(), c.m * c.v);
      for (auto& [key, i] : bwd_at) EXPECT_LT(fwd_at.at(key), i);
    }
  }
}

TEST(Pipeline, StageLayoutAndNames) {
  StageLayout lay;  // 16 layers, p = 4, v = 2: chunks of 2 layers
  lay.pp = 4; lay.v = 2; lay.layers = 16;
  EXPECT_EQ(lay.layers_per_chunk(), 2);
  EXPECT_EQ(lay.model_chunk(1, 1), 5);
  EXPECT_EQ(lay.first_layer(1, 1), 10);
  EXPECT_TRUE(lay.has_embedding(0, 0));
  EXPECT_TRUE(lay.has_head(3, 1));
  EXPECT_FALSE(lay.has_head(3, 0));
  EXPECT_EQ(chunk_op_name(3, Pass::bwd, 5), "C03.bwd.mb5");
  EXPECT_EQ(part_op_name(part_name(7), "fwd", "qkv", 3), "L07.fwd.qkv.mb3");
  EXPECT_EQ(part_op_name(part_name(7), "fwd", "", 3), "L07.fwd.mb3");
  EXPECT_EQ(part_op_name("head", "bwd", "lm_head.dgrad", 0), "head.bwd.lm_head.dgrad.mb0");
  EXPECT_EQ(p2p_op_name(2, 3, Pass::fwd, 3), "pp.send.s2-s3.fwd.mb3");
}

// Layered gradient accumulation: breadth-first, chunks ascending forward then descending backward.
TEST(Pipeline, BreadthFirstOrder) {
  EXPECT_EQ(render(breadth_first_order(2, 3)), "F0.0 F0.1 F0.2 F1.0 F1.1 F1.2 B1.0 B1.1 B1.2 B0.0 B0.1 B0.2 ");
}

TEST(Pipeline, ModularAndLayeredLayouts) {
  Plan p;
  p.pp = 4;
  p.num_microbatches = 8;
  // Modular: looping one-layer chunks, layer l on stage l mod pp.
  p.schedule = Schedule::modular;
  p.virtual_stages = 4;  // 16 layers / 4 stages
  StageLayout mod = stage_layout(p, 16);
  EXPECT_TRUE(mod.looping);
  EXPECT_EQ(mod.layers_per_chunk(), 1);
  for (long long l = 0; l < 16; ++l) EXPECT_EQ(mod.stage_of((int)l), (int)(l % 4));
  // Standard accumulation runs Megatron's interleaved order on it.
  for (int s = 0; s < 4; ++s)
    EXPECT_EQ(render(plan_order(p, 16, s)), render(pipeline_order(Schedule::interleaved, 4, 4, 8, s)));
  // Layered accumulation: breadth-first over the 4 local one-layer chunks.
  p.grad_accumulation = GradAccumulation::layered;
  EXPECT_EQ(render(plan_order(p, 16, 2)), render(breadth_first_order(4, 8)));
  // Layered on contiguous (gpipe) stages: one-layer chunks, stage s holds layers [4s, 4s + 4).
  p.schedule = Schedule::gpipe;
  p.virtual_stages = 1;
  StageLayout con = stage_layout(p, 16);
  EXPECT_FALSE(con.looping);
  EXPECT_EQ(con.v, 4);
  EXPECT_EQ(con.first_layer(1, 0), 4);
  EXPECT_EQ(con.first_layer(1, 3), 7);
  EXPECT_EQ(con.stage_of(7), 1);
  EXPECT_EQ(con.local_chunk(7), 3);
  EXPECT_TRUE(con.has_head(3, 3));
  EXPECT_TRUE(con.has_embedding(0, 0));
  EXPECT_EQ(render(plan_order(p, 16, 1)), render(breadth_first_order(4, 8)));
  // Every (chunk, micro-batch) runs exactly once per pass.
  auto order = plan_order(p, 16, 0);
  EXPECT_EQ(order.size(), (size_t)2 * 4 * 8);
}

// 2D grid placement: rows (k / q, k % q) or Optimus' node blocks (each node's b x b GPUs one block).
TEST(Pipeline, GridPositions) {
  // q = 4, rows
  EXPECT_EQ(grid_pos(5, 4, 1).row, 1);
  EXPECT_EQ(grid_pos(5, 4, 1).col, 1);
  // q = 4, 2 x 2 blocks of 4 consecutive ranks: ranks 0-3 -> rows 0-1, cols 0-1; ranks 4-7 -> cols 2-3.
  int want_row[16] = {0, 0, 1, 1, 0, 0, 1, 1, 2, 2, 3, 3, 2, 2, 3, 3};
  int want_col[16] = {0, 1, 0, 1, 2, 3, 2, 3, 0, 1, 0, 1, 2, 3, 2, 3};
  std::map<std::pair<int, int>, int> seen;
  for (int k = 0; k < 16; ++k) {
    GridPos g = grid_pos(k, 4, 2);
    EXPECT_EQ(g.row, want_row[k]) << k;
    EXPECT_EQ(g.col, want_col[k]) << k;
    seen[{g.row, g.col}]++;
  }
  EXPECT_EQ(seen.size(), 16u);  // a bijection onto the grid
}
