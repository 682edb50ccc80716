// test_run_overlap: plan.overlap_grad_reduce in the executor (Megatron's --overlap-grad-reduce; exec/runtime/
// runtime_update.cpp dp_reduce_unit): with ZeRO 0 and 1 a layer's data-parallel reduction starts when the step's
// last backward of the layer ends, through the communicator's non-blocking collectives (exec/comm/comm.hpp), and
// the step's end waits for them. The sums are the same sums in the same rank order, so every plan's float32
// losses and gradient norms are bit-identical with and without overlap; the trace (`run --trace`: one step) shows
// one reduction per layer in the dp lane, last layer first, each ended before the step's optimizer begins, and
// none without overlap. ZeRO-3's parameter gathers run a run ahead (RankRun::prefetch_next_run). plan.tp_comm_overlap
// runs sequence parallelism's collectives in pieces under the GEMMs (exec/model/sp_pieces.hpp); overlap_param_gather
// finishes each unit's updated-parameter all-gather at its first read in the next step.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "exec/oracle_run.hpp"
#include "exec/runtime/train.hpp"
#include "models/json_check.hpp"
#include "models/scenario.hpp"

using tp::json;
using namespace oracle;

namespace {

json with_overlap(json plan, bool on) {
  plan["overlap_grad_reduce"] = on;
  return plan;
}

}  // namespace

TEST(RunOverlap, GradReduceDuringTheBackwardIsBitIdentical) {
  if (!have_mpi()) GTEST_SKIP() << "built without MPI";
  const std::vector<std::pair<std::string, json>> plans = {
      {"dp2", {{"dp", 2}}},
      {"dp2_zero1", {{"dp", 2}, {"zero", 1}}},
      {"dp2_tp2_sp_zero1", {{"dp", 2}, {"tp", 2}, {"sequence_parallel", true}, {"zero", 1}}},
      {"dp2_pp2", {{"dp", 2}, {"pp", 2}}},
      {"cp2_flash", {{"cp", 2}, {"attention", "flash"}}},
  };
  for (const auto& [name, plan] : plans) {
    json on = run(scenario("ov_on_" + name, with_overlap(plan, true), 8, 16), 3, false);
    json off = run(scenario("ov_off_" + name, with_overlap(plan, false), 8, 16), 3, false);
    ASSERT_FALSE(on.is_null()) << name;
    ASSERT_FALSE(off.is_null()) << name;
    EXPECT_EQ(on["losses"], off["losses"]) << name;
    EXPECT_EQ(on["grad_norm"], off["grad_norm"]) << name;
  }
}

TEST(RunOverlap, TraceShowsOneReductionPerLayerBeforeTheOptimizer) {
  if (!have_mpi()) GTEST_SKIP() << "built without MPI";
  for (bool on : {true, false}) {
    const std::string f = scenario(on ? "ov_trace_on" : "ov_trace_off", with_overlap({{"dp", 2}}, on));
    json r = run(f, 2, false, nullptr, "--trace " + f + ".trace.json");
    ASSERT_FALSE(r.is_null());
    std::ifstream in(f + ".trace.json");
    const json ev = json::parse(in)["traceEvents"];
    // Per rank (pid): the optimizer spans' starts, and the dp reductions' names and ends.
    std::map<int, std::vector<double>> opt_start;
    std::map<int, std::vector<std::pair<std::string, double>>> reduce_end;
    for (const json& e : ev) {
      if (e.value("ph", "") != "X") continue;
      const std::string name = e["name"].get<std::string>();
      const int pid = e["pid"].get<int>();
      if (name == "dp+optimizer") opt_start[pid].push_back(e["ts"].get<double>());
      if (name.rfind("dp.allreduce.L", 0) == 0)
        reduce_end[pid].push_back({name, e["ts"].get<double>() + e["dur"].get<double>()});
    }
    ASSERT_EQ(opt_start.size(), 2u) << "two ranks, each with its optimizer span";
    for (const auto& [pid, starts] : opt_start) {
      ASSERT_EQ(starts.size(), 1u) << pid;
      const auto& red = reduce_end[pid];
      if (!on) {
        EXPECT_TRUE(red.empty()) << pid;
        continue;
      }
      const int layers = 4;  // scenarios/exec/tiny-gpt.json
      ASSERT_EQ(red.size(), size_t(layers)) << pid;
      for (size_t i = 0; i < red.size(); ++i) {  // the backward runs the layers last to first
        EXPECT_EQ(red[i].first, "dp.allreduce.L0" + std::to_string(layers - 1 - int(i))) << pid;
        EXPECT_LE(red[i].second, starts[0]) << pid << " " << red[i].first;
      }
    }
  }
}

// ZeRO-3's parameter all-gathers a run ahead (RankRun::prefetch_next_run): in the trace, each layer run that follows a
// run of another layer had its gather before that run's compute began; the losses stay the single-rank ones.
TEST(RunOverlap, ZeroThreeGathersTheNextRunsLayerAhead) {
  if (!have_mpi()) GTEST_SKIP() << "built without MPI";
  const std::string f = scenario("ov_zero3", {{"dp", 2}, {"zero", 3}});
  json r = run(f, 2, false, nullptr, "--trace " + f + ".trace.json");
  ASSERT_FALSE(r.is_null());
  std::ifstream in(f + ".trace.json");
  struct Ev { double t0; bool gather; std::string layer; };
  std::vector<Ev> evs;  // rank 0's gathers and layer computes, in time order
  const json trace = json::parse(in);
  for (const json& e : trace["traceEvents"]) {
    if (e.value("ph", "") != "X" || e["pid"].get<int>() != 2000) continue;
    const std::string name = e["name"].get<std::string>();
    const int tid = e["tid"].get<int>();
    if (tid == 6 && name.rfind("zero.allgather.L", 0) == 0) evs.push_back({e["ts"].get<double>(), true, name.substr(15, 3)});
    if (tid == 1 && name.size() > 3 && name[0] == 'L') evs.push_back({e["ts"].get<double>(), false, name.substr(0, 3)});
  }
  std::sort(evs.begin(), evs.end(), [](const Ev& a, const Ev& b) { return a.t0 < b.t0; });
  int checked = 0;
  for (size_t i = 0; i < evs.size(); ++i) {
    if (evs[i].gather) continue;
    size_t prev = i, g = i;  // the compute before this one, and this layer's last gather before it
    while (prev-- > 0 && evs[prev].gather) {}
    while (g-- > 0 && !(evs[g].gather && evs[g].layer == evs[i].layer)) {}
    if (prev >= i || g >= i || evs[prev].layer == evs[i].layer) continue;
    EXPECT_LT(evs[g].t0, evs[prev].t0) << evs[i].layer << " gathered after the run before it began";
    ++checked;
  }
  EXPECT_GE(checked, 4);
}

// plan.tp_comm_overlap (exec/model/sp_pieces.hpp): sequence parallelism's all-gathers and reduce-scatters in pieces
// under their GEMMs (QKV and fc1 with their input's gather, the projection and fc2 with their output's reduce-scatter,
// and in the backward the two row-parallel linears' output-gradient gathers under their gradient GEMMs). The same
// rows reach the same GEMMs and the sums stay rank-ordered, so every plan trains like one rank (float64, 1e-9):
// tp 2 and 4 (pieces of uneven rows), flash with its selective recompute, SwiGLU, and with dp, pp, ZeRO-3 and full
// recompute. A block handed on before its piece arrived, or a row in the wrong place, would miss.
TEST(RunOverlap, TpCommOverlapInPiecesMatchesSingleRankFloat64) {
  if (!have_mpi()) GTEST_SKIP() << "built without MPI";
  const int steps = 3;
  const json sp = {{"sequence_parallel", true}, {"tp_comm_overlap", true}};
  auto with = [&](json plan) {
    for (auto it = sp.begin(); it != sp.end(); ++it) plan[it.key()] = it.value();
    return plan;
  };
  json ref = run(scenario("tpo_ref", json::object()), steps, true);
  json ref_swiglu = run(scenario("tpo_ref_swiglu", json::object(), 8, 0, {{"activation", "swiglu"}}), steps, true);
  json ref24 = run(scenario("tpo_ref_seq24", json::object(), 8, 24), steps, true);
  ASSERT_FALSE(ref.is_null());
  ASSERT_FALSE(ref_swiglu.is_null());
  ASSERT_FALSE(ref24.is_null());
  struct Case { const char* name; json plan; json model; const json* want; long long seq = 0; };
  const std::vector<Case> cases = {
      {"tpo_tp2", with({{"tp", 2}}), json::object(), &ref},
      // 6 rows a rank: gathered in pieces of 3 and 3, reduce-scattered in pieces of 1, 2, 1, 2
      {"tpo_tp4_seq24_mb1", with({{"tp", 4}, {"microbatch", 1}}), json::object(), &ref24, 24},
      {"tpo_tp2_flash_selective", with({{"tp", 2}, {"attention", "flash"}, {"recompute", "selective"}}), json::object(), &ref},
      {"tpo_tp2_swiglu", with({{"tp", 2}}), {{"activation", "swiglu"}}, &ref_swiglu},
      {"tpo_dp2_tp2_pp2_zero3_full", with({{"dp", 2}, {"tp", 2}, {"pp", 2}, {"zero", 3}, {"recompute", "full"}}),
       json::object(), &ref},
  };
  for (const Case& c : cases) {
    const std::string f = scenario(c.name, c.plan, 8, c.seq, c.model);
    json got = run(f, steps, true);
    ASSERT_FALSE(got.is_null()) << c.name << "\n" << log_text(f);
    expect_close(got, *c.want, "losses", 1e-9, c.name);
    expect_close(got, *c.want, "grad_norm", 1e-9, c.name);
  }
}

// plan.overlap_param_gather (ZeRO 1-2; RankRun::zero_gather_params): the updated parameters' all-gathers started
// after the optimizer and finished before each unit's first read in the next step (its layer's piece, the ends at the
// step's start), and before a checkpoint, a delink's hand-over or the run's end. The same gathers, so the float32 losses
// and gradient norms are bit-identical with and without it: ZeRO 1 and 2, with tp + SP, pp interleaved, MoE's expert
// segments; a checkpoint taken right after the optimizer resumes bit for bit, and a delink hands over the updated
// weights. A unit read before its gather finished would train on stale weights.
TEST(RunOverlap, ParamGatherUnderTheForwardIsBitIdentical) {
  if (!have_mpi()) GTEST_SKIP() << "built without MPI";
  const std::vector<std::tuple<std::string, json, json>> plans = {
      {"dp2_zero1", {{"dp", 2}, {"zero", 1}, {"overlap_grad_reduce", true}}, json::object()},
      {"dp2_zero2_pp2_interleaved", {{"dp", 2}, {"zero", 2}, {"pp", 2}, {"schedule", "interleaved"}, {"virtual_stages", 2}},
       json::object()},
      {"dp2_tp2_sp_zero1", {{"dp", 2}, {"tp", 2}, {"sequence_parallel", true}, {"zero", 1}}, json::object()},
      {"moe_dp2_ep2_zero1", {{"dp", 2}, {"ep", 2}, {"zero", 1}},
       {{"experts", 4}, {"top_k", 2}, {"capacity_factor", 1.0}, {"every", 2}, {"ffn_hidden", 128}}},
      {"dp2_zero1_delink", {{"dp", 2}, {"zero", 1}, {"delink", {{"unique_layers", 2}, {"tokens", 768}}}}, json::object()},
  };
  for (const auto& [name, plan, moe] : plans) {
    json on_plan = plan, model = json::object();
    on_plan["overlap_param_gather"] = true;
    if (!moe.empty()) model["moe"] = moe;
    const std::string extra = name.find("delink") != std::string::npos ? "--delink-step 2" : "";
    json on = run(scenario("opg_on_" + name, on_plan, 8, 0, model), 4, false, nullptr, extra);
    json off = run(scenario("opg_off_" + name, plan, 8, 0, model), 4, false, nullptr, extra);
    ASSERT_FALSE(on.is_null()) << name << "\n" << log_text(tmpdir() + "/opg_on_" + name + ".json");
    ASSERT_FALSE(off.is_null()) << name;
    EXPECT_EQ(on["losses"], off["losses"]) << name;
    EXPECT_EQ(on["grad_norm"], off["grad_norm"]) << name;
  }
  const std::string f = scenario("opg_ckpt", {{"dp", 2}, {"zero", 1}, {"overlap_param_gather", true}});
  json e32 = run(scenario("opg_ckpt_ref", {{"dp", 2}, {"zero", 1}}), 3, false);
  ASSERT_FALSE(e32.is_null());
  expect_resume_bit_identical(f, 3, e32, "", "opg_ckpt_dir");
}

// The overlap the simulator costs but `trainplan run` does not (the parameter all-gather under the next forward, with
// offload): run says so in a note naming the key, once; tp_comm_overlap, which run does in pieces, and
// overlap_param_gather without offload have none.
TEST(RunOverlap, OverlapsTheExecutorDoesNotRunAreNoted) {
  auto notes_of = [](const std::string& name, const json& plan) {
    return tp::exec::run_notes(tp::load_scenario(scenario(name, plan)), false);
  };
  auto count = [](const std::vector<std::string>& notes, const std::string& key) {
    return std::count_if(notes.begin(), notes.end(), [&](const std::string& n) { return n.rfind(key, 0) == 0; });
  };
  const json both = {{"tp", 2}, {"sequence_parallel", true}, {"tp_comm_overlap", true}, {"dp", 2}, {"zero", 1},
                     {"overlap_param_gather", true}};
  const std::vector<std::string> run_both = notes_of("notes_tp_overlap", both);
  EXPECT_EQ(count(run_both, "$.plan.tp_comm_overlap"), 0);
  EXPECT_EQ(count(run_both, "$.plan.overlap_param_gather"), 0);
  json offload = both;
  offload["offload"] = {{"kind", "optimizer"}};
  EXPECT_EQ(count(notes_of("notes_opg_offload", offload), "$.plan.overlap_param_gather: with offload run all-gathers"), 1);
  EXPECT_TRUE(notes_of("notes_plain", {{"tp", 2}}).empty());
  // Under --comm mpi the collectives complete inside their calls: one note says the overlaps run without overlap.
  const tp::Scenario sc = tp::load_scenario(scenario("notes_tp_overlap_mpi", both));
  EXPECT_EQ(count(tp::exec::run_notes(sc, false, "mpi"), "--comm mpi: run's collectives complete inside their calls"), 1);
  EXPECT_EQ(count(tp::exec::run_notes(sc, false, "nccl"), "--comm"), 0);
}
