// StageLayout with uneven pipeline stages (plan.stage_layers) against Megatron-LM's closed forms for the first
// layer of each stage and virtual chunk (megatron/core/transformer/transformer_layer.py,
// get_transformer_layer_offset): without virtual stages, stage s > 0 starts at first + (s - 1) x middle; with v
// virtual stages, chunk c of stage s starts at c x L / v + (s > 0 ? first / v + (s - 1) x middle / v : 0).
// Also: even layouts keep the closed forms, and the schedule's order does not depend on the split.
#include <gtest/gtest.h>

#include "schedule/pipeline.hpp"

using namespace tp;

namespace {

Plan uneven_plan(int pp, int first, int mid, int last, int v = 1) {
  Plan p;
  p.pp = pp;
  p.virtual_stages = v;
  p.schedule = v > 1 ? Schedule::interleaved : Schedule::one_f_one_b;
  p.num_microbatches = 2 * pp;
  p.stage_layers.assign(pp, mid);
  p.stage_layers.front() = first;
  p.stage_layers.back() = last;
  return p;
}

// Megatron's offset of (stage, virtual chunk) for first / last-stage counts around an even middle.
long long megatron_offset(long long L, int pp, int first, int last, int v, int s, int c) {
  long long mid = (L - first - last) / (pp - 2);
  long long round = L / v;  // layers of one virtual chunk index over all stages
  return c * round + (s == 0 ? 0 : first / v + (s - 1) * (mid / v));
}

void check_megatron(long long L, int pp, int first, int last, int v) {
  SCOPED_TRACE(std::to_string(L) + " layers over " + std::to_string(pp) + " stages, v " + std::to_string(v));
  long long mid = (L - first - last) / (pp - 2);
  StageLayout lay = stage_layout(uneven_plan(pp, first, (int)mid, last, v), L);
  ASSERT_FALSE(lay.even());
  std::vector<int> owner(L, -1);
  for (int s = 0; s < pp; ++s) {
    long long n = s == 0 ? first : s == pp - 1 ? last : mid;
    EXPECT_EQ(lay.stage_layers(s), n);
    for (int c = 0; c < v; ++c) {
      EXPECT_EQ(lay.first_layer(s, c), megatron_offset(L, pp, first, last, v, s, c)) << "stage " << s << " chunk " << c;
      EXPECT_EQ(lay.chunk_layers(s, c), n / v);
      for (long long l = lay.first_layer(s, c); l < lay.first_layer(s, c) + lay.chunk_layers(s, c); ++l) {
        ASSERT_EQ(owner[l], -1) << "layer " << l << " on two chunks";
        owner[l] = lay.model_chunk(s, c);
        EXPECT_EQ(lay.chunk_of_layer(l), lay.model_chunk(s, c));
        EXPECT_EQ(lay.stage_of_layer(l), s);
      }
    }
  }
  for (long long l = 0; l < L; ++l) EXPECT_GE(owner[l], 0) << "layer " << l << " on no chunk";
  EXPECT_TRUE(lay.has_embedding(0, 0));
  EXPECT_TRUE(lay.has_head(pp - 1, v - 1));
}

}  // namespace

TEST(StageLayoutUneven, MatchesMegatronFirstLastOffsets) {
  check_megatron(126, 16, 7, 7, 1);  // Llama 3 405B
  check_megatron(70, 12, 5, 5, 1);
  check_megatron(61, 8, 4, 3, 1);    // first != last: 4 + 6 x 9 + 3
  check_megatron(36, 4, 6, 6, 2);    // virtual stages: chunks of 3 / 6 / 6 / 3 layers
  check_megatron(132, 8, 12, 12, 3);  // 12 + 6 x 18 + 12, chunks of 4 / 6 / 4 layers
}

TEST(StageLayoutUneven, EvenLayoutsKeepTheClosedForms) {
  Plan p;
  p.pp = 4;
  p.virtual_stages = 2;
  p.schedule = Schedule::interleaved;
  StageLayout lay = stage_layout(p, 24);
  EXPECT_TRUE(lay.even());
  for (int s = 0; s < 4; ++s)
    for (int c = 0; c < 2; ++c) {
      EXPECT_EQ(lay.first_layer(s, c), (c * 4 + s) * 3);
      EXPECT_EQ(lay.chunk_layers(s, c), 3);
    }
  for (long long l = 0; l < 24; ++l) EXPECT_EQ(lay.chunk_of_layer(l), (int)(l / 3));
}

TEST(StageLayoutUneven, TheOrderDoesNotDependOnTheSplit) {
  for (Schedule s : {Schedule::gpipe, Schedule::one_f_one_b, Schedule::interleaved}) {
    int v = s == Schedule::interleaved ? 2 : 1;
    Plan even = uneven_plan(4, 6, 6, 6, v), uneven = uneven_plan(4, 4, 8, 4, v);
    even.stage_layers.clear();
    even.schedule = uneven.schedule = s;
    for (int st = 0; st < 4; ++st) {
      auto a = plan_order(even, 24, st), b = plan_order(uneven, 24, st);
      ASSERT_EQ(a.size(), b.size());
      for (size_t i = 0; i < a.size(); ++i) {
        EXPECT_EQ(a[i].pass, b[i].pass);
        EXPECT_EQ(a[i].chunk, b[i].chunk);
        EXPECT_EQ(a[i].microbatch, b[i].microbatch);
      }
    }
  }
}
