// program_builder: internal to sim/program*.cpp — the Builder that turns collectives into engine shapes and
// tasks, with representative-mode multiplicities (sim/symmetry.hpp). Not part of the public interface.
#pragma once
#include <map>
#include <tuple>
#include <vector>

#include "program.hpp"
#include "step_formulas.hpp"
#include "schedule/pipeline.hpp"
#include "symmetry.hpp"

namespace tp {
namespace detail {

struct Builder {
  const Scenario& sc;
  const Plan& p;
  Program& prog;
  std::vector<int> sim_of_global;

  Builder(const Scenario& s, Program& pr) : sc(s), p(s.plan), prog(pr) {}

  int add_task(int sim, int lane, double dur, int coll, const TaskInfo& info) {
    int id = (int)prog.in.tasks.size();
    prog.in.tasks.push_back(EngineTask{sim, lane, dur, coll});
    prog.info.push_back(info);
    prog.in.lane_order[sim * kLanes + lane].push_back(id);
    return id;
  }

  // Representative flows (sent by simulated ranks) get their links and multiplicities from their copies'
  // loads (sim/symmetry.hpp) once all shapes exist.
  bool asymmetric = false;
  bool exhaustive_symmetry = false;
  struct PendingFlow { int shape, phase, index, src, dst; bool p2p, group_spans_dp; };
  std::vector<PendingFlow> pending;

  void finalize_multiplicities() {
    if (prog.full || pending.empty()) return;
    // Copies depend on routes, not sizes: shapes of one (kind, group) share them.
    std::map<std::tuple<int, int, int>, int> unique;  // (route shape, phase, src) -> RepFlow index
    std::vector<RepFlow> reps;
    std::vector<int> rep_of(pending.size());
    for (size_t i = 0; i < pending.size(); ++i) {
      const PendingFlow& pf = pending[i];
      auto key = std::make_tuple(route_shape[pf.shape], pf.phase, pf.src);
      auto it = unique.find(key);
      if (it == unique.end()) {
        RepFlow rf;
        rf.src = pf.src;
        rf.dst = pf.dst;
        rf.p2p = pf.p2p;
        rf.group_spans_dp = pf.group_spans_dp;
        rf.phase = &shape_phases[pf.shape][pf.phase].flows;
        rf.route = prog.in.shapes[pf.shape][pf.phase][pf.index].links;  // already bottleneck-capable only
        it = unique.emplace(key, (int)reps.size()).first;
        reps.push_back(std::move(rf));
      }
      rep_of[i] = it->second;
    }
    CopyLoads cl = copy_loads(p, *prog.topo, reps, exhaustive_symmetry);
    asymmetric = !cl.symmetric;
    for (size_t i = 0; i < pending.size(); ++i) {
      const PendingFlow& pf = pending[i];
      const CopyLoad& load = cl.loads[rep_of[i]];
      FlowSpec& fs = prog.in.shapes[pf.shape][pf.phase][pf.index];
      fs.links = load.links;
      fs.mult = load.mult;
      fs.latency_s += load.extra_latency_s;
    }
  }

  // Collective shapes cached by (kind, group, bytes): phases on the topology and their engine flows.
  // (kind, bytes, group). std::less<>: looked up with references, so a lookup copies no group (full mode looks
  // up per rank); the group compares last, so only an equal (kind, bytes) pays for comparing it.
  std::map<std::tuple<int, double, std::vector<int>>, int, std::less<>> shape_index;
  std::vector<std::vector<Phase>> shape_phases;
  std::map<std::pair<int, std::vector<int>>, int> route_shape_index;  // (kind, group) -> first shape with it
  std::vector<int> route_shape;                                       // shape -> that first shape

  std::map<std::pair<int, int>, int> p2p_shapes;  // (src, dst) -> shape; p2p sizes are fixed per run
  int p2p_shape(int src, int dst, double bytes) {
    auto key = std::make_pair(src, dst);
    auto it = p2p_shapes.find(key);
    if (it != p2p_shapes.end()) return it->second;
    int id = shape_for(Coll::p2p, {src, dst}, bytes);
    p2p_shapes[key] = id;
    return id;
  }

  // `group_spans_dp`: the group is a data-parallel group (its members are each other's dp translates).
  int shape_for(Coll c, const std::vector<int>& group, double bytes, bool group_spans_dp = false) {
    auto it = shape_index.find(std::forward_as_tuple((int)c, bytes, group));
    if (it != shape_index.end()) return it->second;
    shape_phases.push_back(collective_phases(c, group, bytes, *prog.topo, sc.cluster));
    int id = (int)prog.in.shapes.size();
    route_shape.push_back(route_shape_index.emplace(std::make_pair((int)c, group), id).first->second);
    prog.in.shapes.push_back(make_shape(shape_phases.back(), id, c == Coll::p2p, group_spans_dp));
    shape_index.emplace(std::make_tuple((int)c, bytes, group), id);
    return id;
  }

  // Converts collective phases into engine flows (only flows sent by simulated ranks). In representative
  // mode the links and multiplicities are set later by finalize_multiplicities().
  CollShape make_shape(const std::vector<Phase>& phases, int shape_id, bool p2p, bool group_spans_dp) {
    CollShape ec;
    for (const Phase& ph : phases) {
      std::vector<FlowSpec> flows;
      for (const FlowReq& fr : ph.flows) {
        if (sim_of_global[fr.src] < 0) continue;
        FlowSpec fs;
        fs.bytes = fr.bytes;
        fs.latency_s = ph.latency_s;
        for (int l : prog.topo->route(fr.src, fr.dst)) {
          if (!prog.topo->can_bottleneck(l)) continue;
          fs.links.push_back(l);
          fs.mult.push_back(1.0);
        }
        if (!prog.full) pending.push_back({shape_id, (int)ec.size(), (int)flows.size(), fr.src, fr.dst, p2p, group_spans_dp});
        flows.push_back(std::move(fs));
      }
      ec.push_back(std::move(flows));
    }
    return ec;
  }

  // Bytes `src` sends in a shape, per tier. Full mode asks once per rank and shape: there the shape's senders
  // are indexed once (a scan per rank would cost O(group) each); representative mode scans.
  std::vector<std::map<int, TierBytes>> sent_index;
  TierBytes sent_by(int shape, int src) {
    auto add = [&](TierBytes& tb, const FlowReq& fr) {
      (prog.topo->node_of(fr.src) == prog.topo->node_of(fr.dst) ? tb.intra : tb.inter) += fr.payload;
    };
    if (!prog.full) {
      TierBytes tb;
      for (const Phase& ph : shape_phases[shape])
        for (const FlowReq& fr : ph.flows)
          if (fr.src == src) add(tb, fr);
      return tb;
    }
    if (sent_index.size() <= (size_t)shape) sent_index.resize(shape_phases.size());
    std::map<int, TierBytes>& idx = sent_index[shape];
    if (idx.empty())
      for (const Phase& ph : shape_phases[shape])
        for (const FlowReq& fr : ph.flows) add(idx[fr.src], fr);
    auto it = idx.find(src);
    return it == idx.end() ? TierBytes{} : it->second;
  }

  int add_coll(int shape, int members) {
    prog.in.colls.push_back(EngineColl{shape, members});
    return (int)prog.in.colls.size() - 1;
  }
};

// A maximal sequence of consecutive compute pieces on the same layers and pass (see program_build.cpp).
struct Run {
  long long lo = 0, hi = 0;
  Pass pass = Pass::fwd;
  bool embed = false, head = false;
  int first = -1, last = -1;  // first / last compute task
  bool final_grad = false;    // bwd run that completes its layers' gradients for this step (zero < 2)
};

// Parameters per GPU of a piece (dense / experts, sim/step_formulas.hpp). Weight-shared (pseudo) layers count
// once per weight group.
using Params = tp::Params;

}  // namespace detail
}  // namespace tp
