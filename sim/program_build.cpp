// program_build: the step program of one plan — compute pieces from the shared schedule, pipeline sends,
// gradient reductions in buckets, ZeRO-3 gathers, offload copies and host work, optimizers. See program.hpp.
// Invariants: every task of a simulated rank is on one of its lanes in issue order; a compute piece covers a
// contiguous layer range of one model chunk for one micro-batch; a "run" is a maximal sequence of consecutive
// compute pieces on the same layers and pass (a layered-accumulation layer over all micro-batches, or one
// piece under standard accumulation): parameters are gathered / loaded once per run, gradients leave once
// per run. Nothing here is a formula switch between techniques: the costs follow from the tasks.
#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "chunk_offload.hpp"
#include "program_builder.hpp"

namespace tp {

using detail::Builder;
using detail::Params;
using detail::Run;

namespace {
struct Piece {
  long long lo = 0, hi = 0;
  bool head = false, embed = false;
};
}  // namespace

// The cost model of the scenario's plan with its TP / EP collectives timed on `topo`, over the groups of the
// representative (tp 0, dp 0, stage 0).
CostModel cost_model_on(const Scenario& sc, const Topology& topo) {
  const Plan& p = sc.plan;
  // Groups of the representative (tp 0, dp 0, stage 0) for collectives folded into compute ops.
  const int q = p.tp_q();
  std::vector<int> groups[4];
  std::vector<std::vector<int>> lines[4];  // 2D: all parallel rows / columns of the representative's grid
  for (int k = 0; k < p.tp; ++k) groups[(int)CommGroup::tp].push_back(rank_global(p, k, 0, 0));
  if (p.tp_mode == TpMode::d2) {  // the representative sits at grid position (0, 0)
    int b = 1;
    if (p.tp_grid_node_blocks) while ((b + 1) * (b + 1) <= sc.cluster.gpus_per_node) ++b;
    // Every row (column) of the grid runs its broadcast at the same time: they share nodes and NICs.
    std::vector<std::vector<int>> rows(q, std::vector<int>(q)), cols(q, std::vector<int>(q));
    for (int k = 0; k < p.tp; ++k) {
      GridPos gp = grid_pos(k, q, b);
      rows[gp.row][gp.col] = rank_global(p, k, 0, 0);
      cols[gp.col][gp.row] = rank_global(p, k, 0, 0);
    }
    groups[(int)CommGroup::tp_row] = rows[0];
    groups[(int)CommGroup::tp_col] = cols[0];
    lines[(int)CommGroup::tp_row] = rows;
    lines[(int)CommGroup::tp_col] = cols;
  }
  for (int d = 0; d < p.ep; ++d) groups[(int)CommGroup::ep].push_back(rank_global(p, 0, d, 0));
  std::map<std::tuple<int, double, int>, double> tp_cache;
  TpComm tpc;
  tpc.time_s = [&](Coll c, double bytes, CommGroup gk) {
    const std::vector<int>& grp = groups[(int)gk];
    if (grp.size() < 2) return 0.0;
    auto key = std::make_tuple((int)c, bytes, (int)gk);
    auto it = tp_cache.find(key);
    if (it != tp_cache.end()) return it->second;
    double t = lines[(int)gk].empty() ? collective_time_isolated_s(c, grp, bytes, topo, sc.cluster)
                                      : collective_time_concurrent_s(c, lines[(int)gk], bytes, topo, sc.cluster);
    tp_cache[key] = t;
    return t;
  };
  tpc.bytes = [&](Coll c, double bytes, CommGroup gk) {
    const std::vector<int>& grp = groups[(int)gk];
    if (grp.size() < 2) return TierBytes{};
    return collective_member_bytes(c, grp, bytes, topo);
  };
  return build_cost_model(sc, tpc);
}

Program build_program(const Scenario& sc, bool full_cluster, bool exhaustive_symmetry) {
  Program prog;
  prog.full = full_cluster;
  const Plan& p = sc.plan;
  const Transformer& M = sc.model;
  const int G = p.gpus();
  prog.topo = topology_for(sc.cluster, G);
  Builder B(sc, prog);
  B.exhaustive_symmetry = exhaustive_symmetry;

  prog.cm = cost_model_on(sc, *prog.topo);
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

  const long long L = M.layers;
  const StageLayout lay = stage_layout(p, L);
  const long long Lc = lay.layers_per_chunk();
  const int V = lay.v;
  const int m = (int)p.num_microbatches;
  const double e = precision_bytes(sc.training.precision);
  const double gbytes = precision_bytes(sc.training.grad_precision);
  const double n_tokens = (double)p.microbatch * sc.training.seq_len;
  const double p2p_bytes = e * n_tokens * M.hidden / p.tp;  // Megatron scatter-gather / Optimus [b/q, s, h/q]
  const double bucket_params = std::max(40e6, 1e6 * p.dp);
  const int edp = p.dp / p.ep;  // expert-data-parallel degree
  const bool zero2 = p.zero >= 2 && p.dp > 1;
  const bool zero3 = p.zero >= 3 && p.dp > 1;
  const OffloadKind okind = p.offload.kind;
  const bool per_layer = p.zero >= 2 || okind == OffloadKind::granular || okind == OffloadKind::chunked ||
                         p.grad_accumulation == GradAccumulation::layered;
  const bool shared = p.shared_layers > 0;
  std::vector<char> offloaded(L, 0);
  if (okind == OffloadKind::granular)
    for (int l : p.offload.layers) offloaded[l] = 1;
  const Host& host = sc.cluster.host;
  const int gpus_sharing_host = std::min(G, sc.cluster.gpus_per_node);
  auto pcie_s = [&](double bytes) { return bytes / host.pcie_bandwidth_bytes_per_s; };
  // CPU Adam: fp32 master, momentum, variance read and written, fp32 gradient read (4 reads + 3 writes of
  // 4 bytes) and the low-precision weight written back, at this GPU's share of the host memory bandwidth.
  auto host_adam_s = [&](double params) {
    return params * (28 + e) / (host.memory_bandwidth_bytes_per_s / gpus_sharing_host);
  };

  auto layer_params = [&](long long l) {
    Params pr;
    if (M.is_moe_layer(l)) { pr.dense = cm.moe_params - cm.moe_expert_params; pr.expert = cm.moe_expert_params; }
    else pr.dense = cm.layer_params;
    return pr;
  };
  auto piece_params = [&](long long lo, long long hi, bool embed, bool head) {
    Params pr;
    for (long long l = lo; l < hi; ++l) pr += layer_params(l);
    if (embed) pr.dense += cm.embed_params;
    if (head) pr.dense += cm.head_params;
    return pr;
  };
  // Offloaded (granular) parameters of a layer range: whole layers, or only their experts.
  auto offloaded_layer = [&](long long l) {
    Params x;
    if (!offloaded[l]) return x;
    x = layer_params(l);
    if (p.offload.experts_only) x.dense = 0;
    return x;
  };
  auto offloaded_params = [&](long long lo, long long hi) {
    Params x;
    for (long long l = lo; l < hi; ++l) x += offloaded_layer(l);
    return x;
  };
  // Shard of parameters a rank keeps when a ZeRO stage >= `stage` shards them.
  auto shard = [&](const Params& pr, int stage) {
    return p.zero >= stage ? pr.dense / p.dp + pr.expert / edp : pr.total();
  };

  {
    size_t per = per_layer ? (size_t)L / p.pp : (size_t)V;
    size_t est = (size_t)R * ((size_t)m * per * 4 + 64);
    prog.in.tasks.reserve(est);
    prog.info.reserve(est);
    prog.in.edges.reserve(est * 2);
  }

  // ---- pass 1: compute pieces and runs ----------------------------------------------------------------------
  std::vector<std::pair<int, int>> comp((size_t)R * V * m * 2, {-1, -1});
  auto comp_at = [&](int sim, int model_chunk, int mb, int pass) -> std::pair<int, int>& {
    return comp[(((size_t)sim * V + lay.local_chunk(model_chunk)) * m + mb) * 2 + pass];
  };
  std::vector<std::vector<WorkItem>> orders(R);
  std::vector<std::vector<Run>> runs(R);
  std::vector<Piece> pieces;  // of one work item (reused)
  for (int r = 0; r < R; ++r) {
    int s = prog.sim_stage[r];
    orders[r] = plan_order(p, L, s);
    runs[r].reserve(orders[r].size() * (per_layer ? (size_t)Lc : 1));
    const std::vector<WorkItem>& order = orders[r];
    std::vector<int> last_bwd_index(V, -1);
    for (int i = 0; i < (int)order.size(); ++i)
      if (order[i].pass == Pass::bwd) last_bwd_index[order[i].chunk] = i;
    for (int i = 0; i < (int)order.size(); ++i) {
      const WorkItem& w = order[i];
      int g = lay.model_chunk(s, w.chunk);
      Piece whole{lay.first_layer(s, w.chunk), lay.first_layer(s, w.chunk) + Lc, lay.has_head(s, w.chunk),
                  lay.has_embedding(s, w.chunk)};
      bool fwd = w.pass == Pass::fwd;
      bool final_item = !fwd && i == last_bwd_index[w.chunk];
      // Pieces: one per layer when parameters or gradients move per layer; the final backward of a chunk per
      // layer too when its gradients are reduced in buckets during the backward; otherwise the whole chunk.
      bool split = per_layer || (final_item && p.overlap_grad_reduce && !shared &&
                                 (p.dp > 1 || (M.tied_embeddings && p.pp > 1) || okind == OffloadKind::optimizer));
      pieces.clear();
      if (!split) {
        pieces.push_back(whole);
      } else {
        for (long long k = 0; k < Lc; ++k) {
          long long l = fwd ? whole.lo + k : whole.hi - 1 - k;
          pieces.push_back(Piece{l, l + 1, whole.head && l == whole.hi - 1, whole.embed && l == whole.lo});
        }
      }
      TaskInfo ti;
      ti.kind = fwd ? TaskKind::fwd : TaskKind::bwd;
      ti.model_chunk = g;
      ti.mb = w.microbatch;
      int first = -1, last = -1;
      for (size_t k = 0; k < pieces.size(); ++k) {
        TaskInfo pi = ti;
        pi.bucket = (int)k;
        pi.layer_lo = (int)pieces[k].lo;
        pi.layer_hi = (int)pieces[k].hi;
        pi.embed = pieces[k].embed;
        pi.head = pieces[k].head;
        int id = B.add_task(r, kLaneCompute, task_cost(cm, pi).duration_s, -1, pi);
        if (first < 0) first = id;
        last = id;
        std::vector<Run>& rs = runs[r];
        if (!rs.empty() && rs.back().lo == pieces[k].lo && rs.back().hi == pieces[k].hi && rs.back().pass == w.pass &&
            rs.back().last == id - 1) {
          rs.back().last = id;
          rs.back().final_grad = final_item;
        } else {
          rs.push_back(Run{pieces[k].lo, pieces[k].hi, w.pass, pieces[k].embed, pieces[k].head, id, id, final_item});
        }
      }
      comp_at(r, g, w.microbatch, fwd ? 0 : 1) = {first, last};
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
      if (g2 < 0 || g2 >= nchunks || lay.stage_of(g2) == s) continue;  // same rank: the lane order suffices
      int dst_global = rank_global(p, rc.tp, rc.dp, lay.stage_of(g2));
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
      prog.in.edges.push_back({comp_at(r, g, w.microbatch, fwd ? 0 : 1).second, id});
      if (dst_sim >= 0) prog.in.edges.push_back({id, comp_at(dst_sim, g2, w.microbatch, fwd ? 0 : 1).first});
    }
  }

  // ---- pass 3: per rank — parameter gathers and loads, gradient buckets, reductions, optimizers ------------
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
  auto edge = [&](int a, int b) { if (a >= 0 && b >= 0) prog.in.edges.push_back({a, b}); };
  auto hold = [&](int r, int from, bool from_start, int to, double bytes, MemCat cat) {
    if (bytes > 0) prog.holds.push_back(MemHold{r, from, to, from_start, bytes, cat});
  };
  const double master = e < 4 ? 4 : 0;

  for (int r = 0; r < R; ++r) {
    const int s = prog.sim_stage[r];
    const int me = prog.sim_global[r];
    const RankCoord rc = rank_coord(p, me);
    std::vector<int> dp_group, edp_group;
    for (int d = 0; d < p.dp; ++d) dp_group.push_back(rank_global(p, rc.tp, d, s));
    for (int d = rc.dp % p.ep; d < p.dp; d += p.ep) edp_group.push_back(rank_global(p, rc.tp, d, s));
    const int dp_members = full_cluster ? p.dp : 1;
    const int edp_members = full_cluster ? edp : 1;
    const std::vector<int>& lane = prog.in.lane_order[r * kLanes + kLaneCompute];
    const std::vector<Run>& rs = runs[r];

    // Parameters this rank holds (weight groups once under sharing).
    Params held, off;  // off: granular offload, parameters living in host memory
    std::set<long long> wgroups;
    for (int c = 0; c < V; ++c) {
      long long lo = lay.first_layer(s, c);
      for (long long l = lo; l < lo + Lc; ++l)
        if (wgroups.insert(weight_group(l, L, p.shared_layers)).second) { held += layer_params(l); off += offloaded_layer(l); }
    }
    if (s == lay.stage_of(0)) held.dense += cm.embed_params;
    if (s == lay.stage_of(nchunks - 1)) held.dense += cm.head_params;
    Params on_gpu = held;
    on_gpu.dense -= off.dense;
    on_gpu.expert -= off.expert;

    std::vector<int> opt_deps;       // what the GPU optimizer waits for
    std::vector<int> host_deps;      // what the host optimizer waits for
    int tag = 0;
    auto dp_collective = [&](Coll c, TaskKind kind, const Params& pr, double elem_bytes, int after, TaskInfo base,
                             std::vector<int>* out) {
      // Dense part over the dp group; experts over the expert-dp group (with the dense part when ep == 1).
      double dense = pr.dense + (p.ep == 1 ? pr.expert : 0), expert = p.ep == 1 ? 0 : pr.expert;
      int last = -1;
      auto one = [&](const std::vector<int>& grp, int members, double params, bool is_expert) {
        if (grp.size() < 2 || params <= 0) return;
        TaskInfo ti = base;
        ti.kind = kind;
        ti.expert = is_expert;
        double bytes = params * elem_bytes;
        ti.sent = B.sent_by(B.shape_for(c, grp, bytes, true), me);
        int coll = group_coll(grp, tag++, c, bytes, members, true);
        int id = B.add_task(r, kind == TaskKind::zero_gather ? kLaneZero : kLaneDp, 0, coll, ti);
        edge(after, id);
        if (out) out->push_back(id);
        last = id;
      };
      one(dp_group, dp_members, dense, false);
      one(edp_group, edp_members, expert, true);
      return last;
    };

    // -- ZeRO-3 gathers and granular loads, once per run, prefetched ------------------------------------------
    std::vector<int> run_gather(rs.size(), -1), run_load(rs.size(), -1);
    std::vector<int> off_runs;  // indices of runs with offloaded parameters
    for (size_t k = 0; k < rs.size(); ++k) {
      const Run& ru = rs[k];
      if (okind == OffloadKind::granular && offloaded_params(ru.lo, ru.hi).total() > 0) {
        Params op = offloaded_params(ru.lo, ru.hi);
        double bytes = (zero3 ? shard(op, 3) : op.total()) * e;
        TaskInfo ti;
        ti.kind = TaskKind::h2d;
        ti.layer_lo = (int)ru.lo; ti.layer_hi = (int)ru.hi;
        ti.mb = prog.info[ru.first].mb;
        ti.pcie_bytes = bytes;
        ti.optimizer_s = pcie_s(bytes);
        int id = B.add_task(r, kLaneH2D, ti.optimizer_s, -1, ti);
        size_t i = off_runs.size();
        if (i >= (size_t)p.offload.prefetch_layers + 1) edge(rs[off_runs[i - p.offload.prefetch_layers - 1]].last, id);
        edge(id, ru.first);
        hold(r, id, true, ru.last, zero3 ? 0 : bytes, MemCat::weights);
        run_load[k] = id;
        off_runs.push_back((int)k);
      }
      if (zero3) {
        Params pr = piece_params(ru.lo, ru.hi, ru.embed, ru.head);
        TaskInfo base;
        base.model_chunk = prog.info[ru.first].model_chunk;
        base.layer_lo = (int)ru.lo; base.layer_hi = (int)ru.hi;
        base.mb = prog.info[ru.first].mb;
        std::vector<int> ids;
        dp_collective(Coll::all_gather, TaskKind::zero_gather, pr, e, run_load[k], base, &ids);
        for (int id : ids) {
          if (k >= 2) edge(rs[k - 2].last, id);  // double buffer: the run before last has released its copy
          edge(id, ru.first);
        }
        if (!ids.empty()) {
          run_gather[k] = ids.front();
          hold(r, ids.front(), true, ru.last, okind == OffloadKind::chunked ? 0 : pr.total() * e, MemCat::weights);
        }
      }
    }

    // -- gradient buckets and their reductions -------------------------------------------------------------
    struct Bucket { Params pr; int first = -1, last = -1, chunk = 0, index = 0; };
    std::vector<Bucket> buckets;
    const bool want_buckets = p.dp > 1 || okind == OffloadKind::optimizer;
    if (want_buckets && (!p.overlap_grad_reduce || shared)) {
      int last = -1;
      for (int t : lane) if (prog.info[t].kind == TaskKind::bwd) last = t;
      Bucket b;
      b.pr = held;
      b.first = b.last = last;
      buckets.push_back(b);
    } else if (want_buckets) {
      Bucket cur;
      auto flush = [&]() {
        if (cur.last >= 0) { cur.index = (int)buckets.size(); buckets.push_back(cur); }
        cur = Bucket{};
      };
      size_t k = 0;
      for (int t : lane) {
        while (k < rs.size() && rs[k].last < t) ++k;
        const TaskInfo& ti = prog.info[t];
        if (ti.kind != TaskKind::bwd) { flush(); continue; }
        const Run& ru = rs[k];
        if (t != ru.last || !(zero2 || ru.final_grad)) continue;
        if (cur.first < 0) { cur.first = ru.first; cur.chunk = ti.model_chunk; }
        cur.pr += piece_params(ru.lo, ru.hi, ru.embed, ru.head);
        cur.last = t;
        if (cur.pr.total() >= bucket_params) flush();
      }
      flush();
    }
    std::vector<int> grad_ready;  // per bucket: the task after which its (reduced) gradients are final
    for (const Bucket& b : buckets) {
      TaskInfo base;
      base.model_chunk = b.chunk;
      base.bucket = b.index;
      int ready = b.last;
      if (p.dp > 1) {
        std::vector<int> ids;
        Coll c = p.zero >= 1 ? Coll::reduce_scatter : Coll::all_reduce;
        dp_collective(c, TaskKind::dp_reduce, b.pr, gbytes, b.last, base, &ids);
        for (int id : ids) { opt_deps.push_back(id); host_deps.push_back(id); ready = id; }
        if (zero2 && okind != OffloadKind::chunked)  // (chunked: gradients reuse the parameter chunks)
          for (int id : ids) hold(r, b.first, true, id, b.pr.total() * gbytes, MemCat::gradients);
      }
      grad_ready.push_back(ready);
      if (okind == OffloadKind::optimizer) {  // gradients (this rank's shard) to the host
        TaskInfo ti = base;
        ti.kind = TaskKind::d2h;
        ti.pcie_bytes = (p.zero >= 1 ? shard(b.pr, 1) : b.pr.total()) * e;
        ti.optimizer_s = pcie_s(ti.pcie_bytes);
        int id = B.add_task(r, kLaneD2H, ti.optimizer_s, -1, ti);
        edge(ready, id);
        host_deps.push_back(id);
      }
    }
    // Granular offload: the offloaded layers' gradients leave after every backward run.
    for (int k : off_runs) {
      const Run& ru = rs[k];
      if (ru.pass != Pass::bwd) continue;
      TaskInfo ti;
      ti.kind = TaskKind::d2h;
      ti.layer_lo = (int)ru.lo; ti.layer_hi = (int)ru.hi;
      ti.mb = prog.info[ru.last].mb;
      Params op = offloaded_params(ru.lo, ru.hi);
      ti.pcie_bytes = (zero2 ? shard(op, 2) : op.total()) * e;
      ti.optimizer_s = pcie_s(ti.pcie_bytes);
      int id = B.add_task(r, kLaneD2H, ti.optimizer_s, -1, ti);
      edge(ru.last, id);
      hold(r, ru.first, true, id, offloaded_params(ru.lo, ru.hi).total() * e, MemCat::gradients);
      host_deps.push_back(id);
    }

    // -- tied embedding across the first and last stage ------------------------------------------------------
    int first_stage = lay.stage_of(0), last_stage = lay.stage_of(nchunks - 1);
    if (M.tied_embeddings && p.pp > 1 && (s == first_stage || s == last_stage)) {
      std::vector<int> group = {rank_global(p, rc.tp, rc.dp, first_stage), rank_global(p, rc.tp, rc.dp, last_stage)};
      double bytes = M.vocab * (double)M.hidden / p.tp * gbytes;
      int members = (B.sim_of_global[group[0]] >= 0) + (B.sim_of_global[group[1]] >= 0);
      TaskInfo ti;
      ti.kind = TaskKind::embed_reduce;
      ti.sent = B.sent_by(B.shape_for(Coll::all_reduce, group, bytes), me);
      int coll = group_coll(group, -1, Coll::all_reduce, bytes, members, false);
      int id = B.add_task(r, kLaneDp, 0, coll, ti);
      int src = -1;
      for (int t : lane) {
        const TaskInfo& x = prog.info[t];
        if (x.kind == TaskKind::bwd && ((s == first_stage && x.embed) || (s == last_stage && x.head))) src = t;
      }
      if (src < 0) src = lane.back();
      edge(src, id);
      opt_deps.push_back(id);
    }

    // -- weight-shared (pseudo) layers whose group spans several stages: all-reduce across those stages --------
    if (shared && p.pp > 1) {
      std::map<std::vector<int>, int> sets;  // stage set -> number of weight groups shared by exactly it
      for (long long wg : wgroups) {
        std::set<int> st;
        long long per = L / p.shared_layers;
        for (long long l = wg * per; l < (wg + 1) * per; ++l) st.insert(lay.stage_of((int)(l / Lc)));
        if (st.size() > 1) sets[std::vector<int>(st.begin(), st.end())]++;
      }
      int last_bwd = -1;
      for (int t : lane) if (prog.info[t].kind == TaskKind::bwd) last_bwd = t;
      for (auto& [stages, count] : sets) {
        std::vector<int> group;
        for (int st : stages) group.push_back(rank_global(p, rc.tp, rc.dp, st));
        int members = 0;
        for (int g : group) members += B.sim_of_global[g] >= 0;
        double bytes = count * cm.layer_params * gbytes;
        TaskInfo ti;
        ti.kind = TaskKind::shared_reduce;
        ti.sent = B.sent_by(B.shape_for(Coll::all_reduce, group, bytes), me);
        int coll = group_coll(group, -2, Coll::all_reduce, bytes, members, false);
        int id = B.add_task(r, kLaneDp, 0, coll, ti);
        edge(last_bwd, id);
        opt_deps.push_back(id);
        host_deps.push_back(id);
      }
    }

    // -- chunked offload (PatrickStar): moves at access moments, hybrid Adam -----------------------------------
    ChunkPlan chunks;
    if (okind == OffloadKind::chunked) chunks = plan_chunk_offload(sc, prog, B, r, rs, held);

    // -- optimizers -------------------------------------------------------------------------------------------
    const Gpu& gpu = sc.cluster.gpu;
    RankStatic st;
    st.params = held.total();
    double gpu_opt_params = 0, host_opt_params = 0;
    switch (okind) {
      case OffloadKind::none: gpu_opt_params = shard(held, 1); break;
      case OffloadKind::optimizer: host_opt_params = shard(held, 1); break;
      case OffloadKind::granular:
        gpu_opt_params = shard(on_gpu, 1);
        host_opt_params = shard(off, 1);
        break;
      case OffloadKind::chunked:
        gpu_opt_params = chunks.gpu_adam_params;
        host_opt_params = chunks.cpu_adam_params;
        break;
    }
    int gpu_opt = -1;
    if (okind != OffloadKind::optimizer) {
      double traffic = gpu_opt_params * (2 * (master + 8) + gbytes + e);
      TaskInfo oi;
      oi.kind = TaskKind::optimizer;
      oi.optimizer_s = traffic / (gpu.hbm_bandwidth_bytes_per_s * gpu.memory_efficiency.at(traffic)) + gpu.kernel_overhead_s;
      gpu_opt = B.add_task(r, kLaneCompute, oi.optimizer_s, -1, oi);
      for (int d : opt_deps) edge(d, gpu_opt);
      if (okind == OffloadKind::chunked) for (int d : chunks.adam_deps) edge(d, gpu_opt);
    }
    int after_update = gpu_opt;
    if (host_opt_params > 0) {
      TaskInfo hi;
      hi.kind = TaskKind::host_adam;
      hi.optimizer_s = host_adam_s(host_opt_params);
      int ha = B.add_task(r, kLaneHost, hi.optimizer_s, -1, hi);
      for (int d : host_deps) edge(d, ha);
      for (int d : opt_deps) edge(d, ha);
      if (okind == OffloadKind::chunked) for (int d : chunks.adam_deps) edge(d, ha);
      if (host_deps.empty() && opt_deps.empty()) {
        for (int t : lane) if (prog.info[t].kind == TaskKind::bwd) edge(t, ha);
      }
      after_update = ha;
      double back = okind == OffloadKind::optimizer ? host_opt_params * e : (okind == OffloadKind::chunked ? chunks.adam_h2d_bytes : 0);
      if (back > 0) {  // updated low-precision weights back to the GPU
        TaskInfo ti;
        ti.kind = TaskKind::h2d;
        ti.pcie_bytes = back;
        ti.optimizer_s = pcie_s(back);
        int id = B.add_task(r, kLaneH2D, ti.optimizer_s, -1, ti);
        edge(ha, id);
        after_update = id;
      }
    }
    if (p.zero >= 1 && p.zero <= 2 && p.dp > 1) {  // ZeRO-1/2: every rank gathers the updated parameters
      TaskInfo gi;
      std::vector<int> ids;
      dp_collective(Coll::all_gather, TaskKind::dp_gather, held, e, after_update, gi, &ids);
      if (gpu_opt >= 0) for (int id : ids) edge(gpu_opt, id);
    }

    // -- static memory -----------------------------------------------------------------------------------------
    if (okind == OffloadKind::chunked) {
      st.weights_bytes = chunks.gpu_chunk_bytes;
      st.optimizer_bytes = chunks.gpu_os_bytes;
      st.gradients_bytes = 0;  // gradients reuse the fp16 parameter slots
      st.buffers_bytes = chunks.comm_buffer_bytes;
      st.host_bytes = chunks.host_bytes;
      if (!chunks.fits && prog.offload_note.empty()) prog.offload_note = chunks.why;
    } else {
      st.weights_bytes = (p.zero >= 3 ? shard(on_gpu, 3) : on_gpu.total()) * e;
      st.gradients_bytes = (p.zero >= 2 ? shard(on_gpu, 2) : on_gpu.total()) * gbytes;
      st.optimizer_bytes = okind == OffloadKind::optimizer ? 0 : gpu_opt_params * (master + 8);
      if (okind == OffloadKind::optimizer) st.host_bytes = host_opt_params * (master + 8 + 4);
      if (okind == OffloadKind::granular) st.host_bytes = off.total() * (e + 4) + host_opt_params * (master + 8);
    }
    st.buffers_bytes += (p.pp > 1 ? 4 * p2p_bytes : 0);  // send/recv buffers, both directions
    for (int ln : {kLaneH2D, kLaneD2H})
      for (int t : prog.in.lane_order[r * kLanes + ln]) st.pcie_bytes += prog.info[t].pcie_bytes;
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
