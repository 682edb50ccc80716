// The simulator's pipeline sends against the shared schedule's exchange groups (schedule/exchange.hpp): under
// GPipe and 1F1B every send of item k-1's output ends before its sender's item k starts (the group is waited for)
// and starts only after its receiver finished the item before the one it feeds (the receive is posted); the
// interleaved schedule keeps its sends overlapped (some sender's next item starts before its send ends).
#include <gtest/gtest.h>

#include <map>
#include <tuple>

#include "schedule/exchange.hpp"
#include "sim/engine.hpp"
#include "sim/program.hpp"
#include "sim_test_util.hpp"

using namespace tp;
using namespace tp::testutil;

namespace {

struct Timed {
  std::map<std::tuple<int, int, int, int>, std::pair<double, double>> item;  // (stage, chunk, mb, pass) -> span
  std::map<std::tuple<int, int, int, int>, std::pair<double, double>> send;  // (sender stage, chunk, mb, pass)
};

// Every simulated rank's compute items and pipeline sends with their engine times.
Timed run(const Scenario& sc) {
  Program prog = build_program(sc, false);
  EngineOutput out = engine_run(prog.in);
  EXPECT_FALSE(out.deadlock);
  Timed t;
  const int lanes = prog.in.lanes;
  for (size_t rl = 0; rl < prog.in.lane_order.size(); ++rl) {
    const int stage = prog.sim_stage[rl / (size_t)lanes];
    for (int id : prog.in.lane_order[rl]) {
      const TaskInfo& ti = prog.info[(size_t)id];
      const bool comp = ti.kind == TaskKind::fwd || ti.kind == TaskKind::bwd;
      const bool p2p = ti.kind == TaskKind::p2p_fwd || ti.kind == TaskKind::p2p_bwd;
      if (!comp && !p2p) continue;
      const int pass = ti.kind == TaskKind::fwd || ti.kind == TaskKind::p2p_fwd ? 0 : 1;
      auto& span = (comp ? t.item : t.send)[{stage, ti.model_chunk, ti.mb, pass}];
      if (span.first == 0 && span.second == 0) span = {out.start_s[(size_t)id], out.end_s[(size_t)id]};
      span.first = std::min(span.first, out.start_s[(size_t)id]);
      span.second = std::max(span.second, out.end_s[(size_t)id]);
    }
  }
  return t;
}

Scenario pipeline_scenario(const char* schedule, int v) {
  json plan = plan_json(1, 1, 4, v, schedule);
  return make_scenario(gpt_model(8, 2048, 16), finite_links_cluster(), 8, plan);
}

// Counts (blocking violations, posted violations) of the exchange rule over every stage's groups.
std::pair<int, int> violations(const Scenario& sc, int* sends_checked) {
  const Timed t = run(sc);
  const StageLayout lay = stage_layout(sc.plan, sc.model.layers);
  int blocked = 0, posted = 0;
  *sends_checked = 0;
  for (int s = 0; s < sc.plan.pp; ++s) {
    const std::vector<WorkItem> order = plan_order(sc.plan, sc.model.layers, s);
    const std::vector<Exchange> ex = item_exchanges(lay, order, s);
    auto item = [&](size_t k) {
      const WorkItem& w = order[k];
      return t.item.at({s, lay.model_chunk(s, w.chunk), w.microbatch, w.pass == Pass::fwd ? 0 : 1});
    };
    for (size_t k = 0; k < ex.size(); ++k)
      for (const P2pStep& op : ex[k]) {
        const int pass = op.pass == Pass::fwd ? 0 : 1;
        const int from_chunk = op.pass == Pass::fwd ? op.model_chunk - 1 : op.model_chunk + 1;
        if (op.send) {  // item k-1's output: its send ends before item k starts
          const auto& snd = t.send.at({s, from_chunk, op.microbatch, pass});
          ++*sends_checked;
          if (k < order.size() && item(k).first < snd.second - 1e-12) ++blocked;
        } else if (k > 0) {  // posted after item k-1: the send starts after it ends
          const auto& snd = t.send.at({op.peer, from_chunk, op.microbatch, pass});
          if (snd.first < item(k - 1).second - 1e-12) ++posted;
        }
      }
  }
  return {blocked, posted};
}

}  // namespace

TEST(PipelineExchanges, OneFOneBAndGpipeSendsBlockTheirGroups) {
  for (const char* schedule : {"1f1b", "gpipe"}) {
    int sends = 0;
    const auto [blocked, posted] = violations(pipeline_scenario(schedule, 1), &sends);
    EXPECT_EQ(sends, 3 * 8 * 2) << schedule;  // 3 stage boundaries x 8 micro-batches x both passes
    EXPECT_EQ(blocked, 0) << schedule;
    EXPECT_EQ(posted, 0) << schedule;
  }
}

TEST(PipelineExchanges, InterleavedSendsStayOverlapped) {
  int sends = 0;
  const auto [blocked, posted] = violations(pipeline_scenario("interleaved", 2), &sends);
  EXPECT_GT(sends, 0);
  EXPECT_GT(blocked + posted, 0);  // (overlap_p2p_comm: a sender runs on while its send is in flight)
}
