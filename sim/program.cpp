// program: building the engine's task graph from the shared schedule. See program.hpp.
#include "program.hpp"

#include "symmetry.hpp"

#include <algorithm>
#include <map>
#include <mutex>

namespace tp {

namespace {

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
  std::map<std::tuple<int, std::vector<int>, double>, int> shape_index;
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
    auto key = std::make_tuple((int)c, group, bytes);
    auto it = shape_index.find(key);
    if (it != shape_index.end()) return it->second;
    shape_phases.push_back(collective_phases(c, group, bytes, *prog.topo, sc.cluster));
    int id = (int)prog.in.shapes.size();
    route_shape.push_back(route_shape_index.emplace(std::make_pair((int)c, group), id).first->second);
    prog.in.shapes.push_back(make_shape(shape_phases.back(), id, c == Coll::p2p, group_spans_dp));
    shape_index[key] = id;
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

  TierBytes sent_by(int shape, int src) {
    const std::vector<Phase>& phases = shape_phases[shape];
    TierBytes tb;
    for (const Phase& ph : phases)
      for (const FlowReq& fr : ph.flows)
        if (fr.src == src) (prog.topo->node_of(fr.src) == prog.topo->node_of(fr.dst) ? tb.intra : tb.inter) += fr.payload;
    return tb;
  }

  int add_coll(int shape, int members) {
    prog.in.colls.push_back(EngineColl{shape, members});
    return (int)prog.in.colls.size() - 1;
  }
};

struct Piece {
  long long lo, hi;
  bool head, embed;
  double params;
};

}  // namespace

std::shared_ptr<const Topology> topology_for(const Cluster& c, int gpus) {
  static std::mutex mu;
  static std::vector<std::pair<std::string, std::shared_ptr<const Topology>>> cache;  // most recent last
  std::string key = cluster_to_json(c).dump() + "#" + std::to_string(gpus);
  std::lock_guard<std::mutex> lock(mu);
  for (size_t i = 0; i < cache.size(); ++i) {
    if (cache[i].first == key) {
      auto hit = cache[i];
      cache.erase(cache.begin() + i);
      cache.push_back(hit);
      return hit.second;
    }
  }
  auto topo = std::make_shared<const Topology>(build_topology(c, gpus));
  cache.push_back({key, topo});
  if (cache.size() > 4) cache.erase(cache.begin());
  return topo;
}

TaskCost task_cost(const CostModel& cm, const TaskInfo& ti) {
  TaskCost tc;
  if (ti.kind != TaskKind::fwd && ti.kind != TaskKind::bwd) return tc;
  bool fwd = ti.kind == TaskKind::fwd;
  const PassCost& lp = fwd ? cm.layer_fwd : cm.layer_bwd;
  double layers = (double)(ti.layer_hi - ti.layer_lo);
  auto add = [&](const PassCost& pc, double times) {
    tc.duration_s += times * pc.time_s;
    tc.compute_s += times * pc.compute_s;
    tc.recompute_s += times * pc.recompute_s;
    tc.tp_s += times * pc.tp_comm_s;
    tc.flops += times * pc.flops;
    tc.tp_bytes.intra += times * pc.tp_bytes.intra;
    tc.tp_bytes.inter += times * pc.tp_bytes.inter;
  };
  add(lp, layers);
  if (ti.embed) add(fwd ? cm.embed_fwd : cm.embed_bwd, 1);
  if (ti.head) add(fwd ? cm.head_fwd : cm.head_bwd, 1);
  tc.stored_bytes = layers * cm.layer_stored_bytes + (ti.embed ? cm.embed_stored_bytes : 0) +
                    (ti.head ? cm.head_stored_bytes : 0);
  tc.transient_bytes = cm.layer_transient_bytes;
  return tc;
}

Program build_program(const Scenario& sc, bool full_cluster, bool exhaustive_symmetry) {
  Program prog;
  prog.full = full_cluster;
  const Plan& p = sc.plan;
  const int G = p.gpus();
  prog.topo = topology_for(sc.cluster, G);
  Builder B(sc, prog);
  B.exhaustive_symmetry = exhaustive_symmetry;

  // TP collectives of the representative's group, cached by (kind, bytes).
  std::vector<int> tp_group;
  for (int k = 0; k < p.tp; ++k) tp_group.push_back(rank_global(p, k, 0, 0));
  std::map<std::pair<int, double>, double> tp_cache;
  TpComm tpc;
  tpc.time_s = [&](Coll c, double bytes, CommGroup) {
    auto key = std::make_pair((int)c, bytes);
    auto it = tp_cache.find(key);
    if (it != tp_cache.end()) return it->second;
    double t = collective_time_isolated_s(c, tp_group, bytes, *prog.topo, sc.cluster);
    tp_cache[key] = t;
    return t;
  };
  tpc.bytes = [&](Coll c, double bytes, CommGroup) { return collective_member_bytes(c, tp_group, bytes, *prog.topo); };
  prog.cm = build_cost_model(sc, tpc);
  const CostModel& cm = prog.cm;

  // Simulated ranks.
  B.sim_of_global.assign(G, -1);
  if (full_cluster) {
    for (int g = 0; g < G; ++g) prog.sim_global.push_back(g);
  } else {
    for (int s = 0; s < p.pp; ++s) prog.sim_global.push_back(rank_global(p, 0, 0, s));
  }
  const int R = (int)prog.sim_global.size();
  for (int r = 0; r < R; ++r) {
    B.sim_of_global[prog.sim_global[r]] = r;
    prog.sim_stage.push_back(rank_coord(p, prog.sim_global[r]).stage);
  }
  prog.in.ranks = R;
  prog.in.lanes = kLanes;
  prog.in.lane_order.assign((size_t)R * kLanes, {});

  StageLayout lay{p.pp, p.virtual_stages, sc.model.layers};
  const long long Lc = lay.layers_per_chunk();
  const int m = (int)p.num_microbatches;
  const double e = precision_bytes(sc.training.precision);
  const double gbytes = precision_bytes(sc.training.grad_precision);
  const double n_tokens = (double)p.microbatch * sc.training.seq_len;
  const double p2p_bytes = e * n_tokens * sc.model.hidden / p.tp;  // Megatron scatter-gather: 1/t per rank
  const double bucket_params = std::max(40e6, 1e6 * p.dp);

  {
    size_t est = (size_t)R * ((size_t)m * p.virtual_stages * 4 + 64);
    prog.in.tasks.reserve(est);
    prog.info.reserve(est);
    prog.in.edges.reserve(est * 2);
    prog.in.colls.reserve(est / 2);
  }

  // ---- pass 1: compute tasks ------------------------------------------------------------------------------
  // (sim rank, local chunk, mb, pass) -> (first task, last task) of that compute item
  const int V = p.virtual_stages;
  std::vector<std::pair<int, int>> comp((size_t)R * V * m * 2, {-1, -1});
  auto comp_at = [&](int sim, int model_chunk, int mb, int pass) -> std::pair<int, int>& {
    return comp[(((size_t)sim * V + model_chunk / p.pp) * m + mb) * 2 + pass];
  };
  std::vector<std::vector<std::pair<int, Piece>>> final_pieces(R);  // per rank: last-bwd pieces (task, piece)
  std::vector<std::vector<WorkItem>> orders(R);
  for (int r = 0; r < R; ++r) {
    int s = prog.sim_stage[r];
    orders[r] = pipeline_order(p.schedule, p.pp, p.virtual_stages, m, s);
    const std::vector<WorkItem>& order = orders[r];
    std::vector<int> last_bwd_index(p.virtual_stages, -1);
    for (int i = 0; i < (int)order.size(); ++i)
      if (order[i].pass == Pass::bwd) last_bwd_index[order[i].chunk] = i;
    for (int i = 0; i < (int)order.size(); ++i) {
      const WorkItem& w = order[i];
      int g = lay.model_chunk(s, w.chunk);
      Piece whole{lay.first_layer(s, w.chunk), lay.first_layer(s, w.chunk) + Lc, lay.has_head(s, w.chunk),
                  lay.has_embedding(s, w.chunk), 0};
      TaskInfo ti;
      ti.model_chunk = g;
      ti.mb = w.microbatch;
      if (w.pass == Pass::fwd) {
        ti.kind = TaskKind::fwd;
        ti.layer_lo = (int)whole.lo; ti.layer_hi = (int)whole.hi; ti.embed = whole.embed; ti.head = whole.head;
        int id = B.add_task(r, kLaneCompute, task_cost(cm, ti).duration_s, -1, ti);
        comp_at(r, g, w.microbatch, 0) = {id, id};
        continue;
      }
      // Backward. The chunk's final backward is split into DP buckets so reductions overlap the rest.
      std::vector<Piece> pieces;
      bool split = p.overlap_grad_reduce && i == last_bwd_index[w.chunk] &&
                   (p.dp > 1 || (sc.model.tied_embeddings && p.pp > 1));
      if (!split) {
        pieces.push_back(whole);
      } else {
        Piece cur{whole.hi, whole.hi, whole.head, false, whole.head ? cm.head_params : 0};
        for (long long l = whole.hi - 1; l >= whole.lo; --l) {
          cur.lo = l;
          cur.params += cm.layer_params;
          if (cur.params >= bucket_params && l > whole.lo) {
            pieces.push_back(cur);
            cur = Piece{l, l, false, false, 0};
          }
        }
        cur.embed = whole.embed;
        if (whole.embed) cur.params += cm.embed_params;
        pieces.push_back(cur);
      }
      int first = -1, last = -1;
      for (size_t k = 0; k < pieces.size(); ++k) {
        TaskInfo pi = ti;
        pi.kind = TaskKind::bwd;
        pi.bucket = (int)k;
        pi.layer_lo = (int)pieces[k].lo; pi.layer_hi = (int)pieces[k].hi;
        pi.embed = pieces[k].embed; pi.head = pieces[k].head;
        int id = B.add_task(r, kLaneCompute, task_cost(cm, pi).duration_s, -1, pi);
        if (first < 0) first = id;
        last = id;
        if (split) final_pieces[r].push_back({id, pieces[k]});
      }
      comp_at(r, g, w.microbatch, 1) = {first, last};
    }
  }

  // Without overlap (Megatron before --overlap-grad-reduce) each rank reduces all its gradients in one bucket
  // after its last backward.
  if (!p.overlap_grad_reduce) {
    for (int r = 0; r < R; ++r) {
      int s = prog.sim_stage[r];
      int last = -1;
      for (int t : prog.in.lane_order[r * kLanes + kLaneCompute])
        if (prog.info[t].kind == TaskKind::bwd) last = t;
      double params = (double)Lc * p.virtual_stages * cm.layer_params + (s == 0 ? cm.embed_params : 0) +
                      (s == p.pp - 1 ? cm.head_params : 0);
      final_pieces[r].push_back({last, Piece{0, 0, s == p.pp - 1, s == 0, params}});
    }
  }

  // ---- pass 2: pipeline point-to-point sends -----------------------------------------------------------------
  const int nchunks = lay.num_model_chunks();
  for (int r = 0; r < R; ++r) {
    int s = prog.sim_stage[r];
    RankCoord rc = rank_coord(p, prog.sim_global[r]);
    for (const WorkItem& w : orders[r]) {
      int g = lay.model_chunk(s, w.chunk);
      bool fwd = w.pass == Pass::fwd;
      int g2 = fwd ? g + 1 : g - 1;
      if (g2 < 0 || g2 >= nchunks) continue;
      int dst_global = rank_global(p, rc.tp, rc.dp, g2 % p.pp);
      int dst_sim = B.sim_of_global[dst_global];
      int shape = B.p2p_shape(prog.sim_global[r], dst_global, p2p_bytes);
      TaskInfo ti;
      ti.kind = fwd ? TaskKind::p2p_fwd : TaskKind::p2p_bwd;
      ti.model_chunk = g;
      ti.mb = w.microbatch;
      ti.peer = dst_global;
      ti.sent = B.sent_by(shape, prog.sim_global[r]);
      int coll = B.add_coll(shape, 1);
      int id = B.add_task(r, fwd ? kLanePpFwd : kLanePpBwd, 0, coll, ti);
      auto src_item = comp_at(r, g, w.microbatch, fwd ? 0 : 1);
      prog.in.edges.push_back({src_item.second, id});
      if (dst_sim >= 0) {
        auto dst_item = comp_at(dst_sim, g2, w.microbatch, fwd ? 0 : 1);
        prog.in.edges.push_back({id, dst_item.first});
      }
    }
  }

  // ---- pass 3: data-parallel reductions, tied-embedding reduction, optimizer, ZeRO-1 gather ---------------
  std::map<std::vector<int>, int> shared_colls;  // full mode: one collective instance per (group, tag)
  auto group_coll = [&](const std::vector<int>& group, int tag, Coll c, double bytes, int members, bool spans_dp) {
    std::vector<int> key = group;
    key.push_back(tag);
    auto it = shared_colls.find(key);
    if (it != shared_colls.end()) return it->second;
    int id = B.add_coll(B.shape_for(c, group, bytes, spans_dp), members);
    shared_colls[key] = id;
    return id;
  };
  for (int r = 0; r < R; ++r) {
    int s = prog.sim_stage[r];
    RankCoord rc = rank_coord(p, prog.sim_global[r]);
    std::vector<int> dp_group;
    for (int d = 0; d < p.dp; ++d) dp_group.push_back(rank_global(p, rc.tp, d, s));
    int dp_members = full_cluster ? p.dp : 1;
    RankStatic st;
    for (int c = 0; c < p.virtual_stages; ++c) st.params += (double)Lc * cm.layer_params;
    if (s == 0) st.params += cm.embed_params;
    if (s == p.pp - 1) st.params += cm.head_params;
    std::vector<int> opt_deps;
    int tag = 0;
    if (p.dp > 1) {
      Coll c = p.zero >= 1 ? Coll::reduce_scatter : Coll::all_reduce;
      for (auto& [task, pc] : final_pieces[r]) {
        TaskInfo ti = prog.info[task];
        ti.kind = TaskKind::dp_reduce;
        double bytes = pc.params * gbytes;
        ti.sent = B.sent_by(B.shape_for(c, dp_group, bytes, true), prog.sim_global[r]);
        int coll = group_coll(dp_group, tag++, c, bytes, dp_members, true);
        int id = B.add_task(r, kLaneDp, 0, coll, ti);
        prog.in.edges.push_back({task, id});
        opt_deps.push_back(id);
      }
    }
    if (sc.model.tied_embeddings && p.pp > 1 && (s == 0 || s == p.pp - 1)) {
      std::vector<int> group = {rank_global(p, rc.tp, rc.dp, 0), rank_global(p, rc.tp, rc.dp, p.pp - 1)};
      double bytes = sc.model.vocab * (double)sc.model.hidden / p.tp * gbytes;
      int members = (B.sim_of_global[group[0]] >= 0) + (B.sim_of_global[group[1]] >= 0);
      TaskInfo ti;
      ti.kind = TaskKind::embed_reduce;
      ti.sent = B.sent_by(B.shape_for(Coll::all_reduce, group, bytes), prog.sim_global[r]);
      int coll = group_coll(group, -1, Coll::all_reduce, bytes, members, false);
      int id = B.add_task(r, kLaneDp, 0, coll, ti);
      int src = -1;
      for (auto& [task, pc] : final_pieces[r])
        if ((s == 0 && pc.embed) || (s == p.pp - 1 && pc.head)) src = task;
      if (src < 0) src = prog.in.lane_order[r * kLanes + kLaneCompute].back();
      prog.in.edges.push_back({src, id});
      opt_deps.push_back(id);
    }
    // Optimizer (Adam) on this rank's shard: bandwidth-bound over master weights, moments, gradients, weights.
    const Gpu& gpu = sc.cluster.gpu;
    double shard = st.params / (p.zero >= 1 ? p.dp : 1);
    double master = e < 4 ? 4 : 0;
    double traffic = shard * (2 * (master + 8) + gbytes + e);
    TaskInfo oi;
    oi.kind = TaskKind::optimizer;
    oi.optimizer_s = traffic / (gpu.hbm_bandwidth_bytes_per_s * gpu.memory_efficiency.at(traffic)) + gpu.kernel_overhead_s;
    int opt = B.add_task(r, kLaneCompute, oi.optimizer_s, -1, oi);
    for (int d : opt_deps) prog.in.edges.push_back({d, opt});
    if (p.zero >= 1 && p.dp > 1) {
      TaskInfo gi;
      gi.kind = TaskKind::dp_gather;
      double bytes = st.params * e;
      gi.sent = B.sent_by(B.shape_for(Coll::all_gather, dp_group, bytes, true), prog.sim_global[r]);
      int coll = group_coll(dp_group, 1000000, Coll::all_gather, bytes, dp_members, true);
      int id = B.add_task(r, kLaneDp, 0, coll, gi);
      prog.in.edges.push_back({opt, id});
    }
    // Static memory: weights, gradients (main-grad buffer), optimizer state (sharded by ZeRO-1).
    st.weights_bytes = st.params * e;
    st.gradients_bytes = st.params * gbytes;
    st.optimizer_bytes = st.params * (master + 8) / (p.zero >= 1 ? p.dp : 1);
    st.buffers_bytes = (p.pp > 1 ? 4 * p2p_bytes : 0);  // send/recv buffers, both directions
    prog.statics.push_back(st);
  }
  B.finalize_multiplicities();
  prog.symmetric = !B.asymmetric;
  // The engine sees only the links some flow uses, renumbered densely (its cost then follows the simulated
  // ranks, not the cluster): engine link i is topology link prog.engine_links[i].
  {
    std::vector<int> local(prog.topo->links.size(), -1);
    for (CollShape& shape : prog.in.shapes)
      for (auto& phase : shape)
        for (FlowSpec& fs : phase)
          for (int& l : fs.links) {
            if (local[l] < 0) {
              local[l] = (int)prog.engine_links.size();
              prog.engine_links.push_back(l);
              prog.in.link_capacity_bytes_per_s.push_back(prog.topo->links[l].capacity_bytes_per_s);
            }
            l = local[l];
          }
  }
  engine_finalize(prog.in);
  return prog;
}

}  // namespace tp
