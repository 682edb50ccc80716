// program_build: the step program of one plan — compute pieces from the shared schedule, pipeline sends,
// gradient reductions in buckets, ZeRO-3 gathers, offload copies and host work, optimizers. See program.hpp.
// This file: the build's context, compute pieces and runs (pass 1), pipeline sends (pass 2) and the driver;
// the per-rank concerns (pass 3) are in program_build_rank.cpp, the shared formulas in step_formulas.cpp.
// Invariants: every task of a simulated rank is on one of its lanes in issue order; a compute piece covers a
// contiguous layer range of one model chunk for one micro-batch; a "run" is a maximal sequence of consecutive
// compute pieces on the same layers and pass (a layered-accumulation layer over all micro-batches, or one
// piece under standard accumulation): parameters are gathered / loaded once per run, gradients leave once
// per run. Nothing here is a formula switch between techniques: the costs follow from the tasks.
#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "program_build_ctx.hpp"
#include "schedule/exchange.hpp"

namespace tp {

using detail::BuildCtx;
using detail::Builder;
using detail::RankCtx;
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
  std::vector<int> groups[kCommGroups];
  std::vector<std::vector<int>> lines[kCommGroups];  // 2D: all parallel rows / columns of the representative's grid
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
  for (int c = 0; c < p.cp; ++c) groups[(int)CommGroup::cp].push_back(rank_global(p, 0, c, 0));  // data ranks 0..cp-1
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

namespace detail {

BuildCtx::BuildCtx(const Scenario& s, Program& pr, Builder& b)
    : sc(s), p(s.plan), M(s.model), prog(pr), B(b), cm(pr.cm), lay(stage_layout(s.plan, s.model.layers)) {
  L = M.layers;
  Lc = lay.layers_per_chunk();
  V = lay.v;
  m = (int)p.num_microbatches;
  nchunks = lay.num_model_chunks();
  eb = elem_bytes(sc.training);
  p2p_bytes = pipeline_send_bytes(sc, p.microbatch, p.tp);  // Megatron scatter-gather / Optimus [b/q, s, h/q]
  bucket_params = framework_bucket_params(s.framework, p.data_ranks());
  overlap_grad_reduce = framework_overlaps_grad_reduce(s.framework, p);
  edp = p.data_ranks() / p.ep;
  zero2 = p.zero >= 2 && p.data_ranks() > 1;
  zero3 = p.zero >= 3 && p.data_ranks() > 1;
  okind = p.offload.kind;
  per_layer = per_layer_pieces(p);
  shared = p.shared_layers > 0;
  gather_under_fwd = p.overlap_param_gather && (p.zero == 1 || p.zero == 2) && p.data_ranks() > 1 && !shared &&
                     okind != OffloadKind::chunked;
  offloaded.assign(L, 0);
  if (okind == OffloadKind::granular)
    for (int l : p.offload.layers) offloaded[l] = 1;
  gpus_sharing_host = std::min(p.gpus(), sc.cluster.gpus_per_node);
}

Params BuildCtx::layer_params(long long l) const {
  Params pr;
  if (M.is_moe_layer(l)) { pr.dense = cm.moe_params - cm.moe_expert_params; pr.expert = cm.moe_expert_params; }
  else pr.dense = cm.layer_params;
  return pr;
}

Params BuildCtx::piece_params(long long lo, long long hi, bool embed, bool head) const {
  Params pr;
  for (long long l = lo; l < hi; ++l) pr += layer_params(l);
  if (embed) pr.dense += cm.embed_params;
  if (head) pr.dense += cm.head_params;
  return pr;
}

Params BuildCtx::offloaded_layer(long long l) const {
  Params x;
  if (!offloaded[l]) return x;
  x = layer_params(l);
  if (p.offload.experts_only) x.dense = 0;
  return x;
}

Params BuildCtx::offloaded_params(long long lo, long long hi) const {
  Params x;
  for (long long l = lo; l < hi; ++l) x += offloaded_layer(l);
  return x;
}

int BuildCtx::group_coll(const std::vector<int>& group, int tag, Coll c, double bytes, int members, bool spans_dp) {
  auto it = shared_colls.find(std::forward_as_tuple(tag, group));
  if (it != shared_colls.end()) return it->second;
  int id = B.add_coll(B.shape_for(c, group, bytes, spans_dp), members);
  shared_colls.emplace(std::make_tuple(tag, group), id);
  return id;
}

const std::vector<int>& BuildCtx::dp_group(int tp_rank, int stage, int residue) {
  std::vector<int>& g = dp_groups[std::make_tuple(tp_rank, stage, residue)];
  if (g.empty())
    for (int d = residue < 0 ? 0 : residue; d < p.data_ranks(); d += residue < 0 ? 1 : p.ep)
      g.push_back(rank_global(p, tp_rank, d, stage));
  return g;
}

}  // namespace detail

namespace {

// Pass 1: compute pieces from the shared schedule, grouped into runs.
void add_compute_pieces(BuildCtx& x) {
  const Plan& p = x.p;
  Program& prog = x.prog;
  const int R = x.R, V = x.V, m = x.m;
  const long long L = x.L;
  const StageLayout& lay = x.lay;
  x.comp.assign((size_t)R * V * m * 2, {-1, -1});
  x.orders.assign(R, {});
  x.runs.assign(R, {});
  std::vector<Piece> pieces;  // of one work item (reused)
  for (int r = 0; r < R; ++r) {
    int s = prog.sim_stage[r];
    x.orders[r] = plan_order(p, L, s);
    x.runs[r].reserve(x.orders[r].size() * (x.per_layer ? (size_t)x.Lc : 1));
    const std::vector<WorkItem>& order = x.orders[r];
    std::vector<int> last_bwd_index(V, -1), first_fwd_index(V, -1);
    for (int i = 0; i < (int)order.size(); ++i) {
      if (order[i].pass == Pass::bwd) last_bwd_index[order[i].chunk] = i;
      else if (first_fwd_index[order[i].chunk] < 0) first_fwd_index[order[i].chunk] = i;
    }
    for (int i = 0; i < (int)order.size(); ++i) {
      const WorkItem& w = order[i];
      int g = lay.model_chunk(s, w.chunk);
      const long long lo = lay.first_layer(s, w.chunk), Lc = lay.chunk_layers(s, w.chunk);  // uneven: per stage
      Piece whole{lo, lo + Lc, lay.has_head(s, w.chunk), lay.has_embedding(s, w.chunk)};
      bool fwd = w.pass == Pass::fwd;
      bool final_item = !fwd && i == last_bwd_index[w.chunk];
      // Pieces: one per layer when parameters or gradients move per layer; the final backward of a chunk per
      // layer too when its gradients are reduced in buckets during the backward, and the first forward when
      // the parameter all-gathers run under it; otherwise the whole chunk.
      bool first_fwd = fwd && i == first_fwd_index[w.chunk];
      bool split = x.per_layer || (first_fwd && x.gather_under_fwd) ||
                   (final_item && x.overlap_grad_reduce && !x.shared &&
                    (p.data_ranks() > 1 || (x.M.tied_embeddings && p.pp > 1) || x.okind == OffloadKind::optimizer));
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
        int id = x.B.add_task(r, kLaneCompute, task_cost(x.cm, pi).duration_s, -1, pi);
        if (first < 0) first = id;
        last = id;
        std::vector<Run>& rs = x.runs[r];
        if (!rs.empty() && rs.back().lo == pieces[k].lo && rs.back().hi == pieces[k].hi && rs.back().pass == w.pass &&
            rs.back().last == id - 1) {
          rs.back().last = id;
          rs.back().final_grad = final_item;
        } else {
          rs.push_back(Run{pieces[k].lo, pieces[k].hi, w.pass, pieces[k].embed, pieces[k].head, id, id, final_item});
        }
      }
      x.comp_at(r, g, w.microbatch, fwd ? 0 : 1) = {first, last};
    }
  }
}

// Pass 2: pipeline point-to-point sends between consecutive model chunks on different stages. Where exchanges block
// compute (schedule/exchange.hpp exchanges_block_compute: item_exchanges' groups waited for) a send also starts only
// once its receiver has finished the item before the one it feeds (the receive is posted), and the sender's next
// item waits for it.
void add_pipeline_sends(BuildCtx& x) {
  const Plan& p = x.p;
  Program& prog = x.prog;
  const StageLayout& lay = x.lay;
  const bool blocking = exchanges_block_compute(p);
  // (sim rank, model chunk, mb, pass) -> the item's index in its rank's order
  std::vector<int> index_of(blocking ? x.comp.size() : 0, -1);
  for (int r = 0; blocking && r < x.R; ++r)
    for (size_t k = 0; k < x.orders[r].size(); ++k) {
      const WorkItem& w = x.orders[r][k];
      index_of[x.comp_index(r, lay.model_chunk(prog.sim_stage[r], w.chunk), w.microbatch, w.pass == Pass::fwd ? 0 : 1)] = (int)k;
    }
  auto item_task = [&](int r, size_t k, bool last) {  // the first or last compute task of rank r's item k
    const WorkItem& w = x.orders[r][k];
    const auto& c = x.comp_at(r, lay.model_chunk(prog.sim_stage[r], w.chunk), w.microbatch, w.pass == Pass::fwd ? 0 : 1);
    return last ? c.second : c.first;
  };
  for (int r = 0; r < x.R; ++r) {
    int s = prog.sim_stage[r];
    RankCoord rc = rank_coord(p, prog.sim_global[r]);
    for (size_t k = 0; k < x.orders[r].size(); ++k) {
      const WorkItem& w = x.orders[r][k];
      int g = lay.model_chunk(s, w.chunk);
      bool fwd = w.pass == Pass::fwd;
      int g2 = fwd ? g + 1 : g - 1;
      if (g2 < 0 || g2 >= x.nchunks || lay.stage_of(g2) == s) continue;  // same rank: the lane order suffices
      int dst_global = rank_global(p, rc.tp, rc.dp, lay.stage_of(g2));
      int dst_sim = x.B.sim_of_global[dst_global];
      int shape = x.B.p2p_shape(prog.sim_global[r], dst_global, x.p2p_bytes);
      TaskInfo ti;
      ti.kind = fwd ? TaskKind::p2p_fwd : TaskKind::p2p_bwd;
      ti.model_chunk = g;
      ti.mb = w.microbatch;
      ti.peer = dst_global;
      ti.sent = x.B.sent_by(shape, prog.sim_global[r]);
      int coll = x.B.add_coll(shape, 1);
      int id = x.B.add_task(r, fwd ? kLanePpFwd : kLanePpBwd, 0, coll, ti);
      prog.in.edges.push_back({x.comp_at(r, g, w.microbatch, fwd ? 0 : 1).second, id});
      if (dst_sim >= 0) prog.in.edges.push_back({id, x.comp_at(dst_sim, g2, w.microbatch, fwd ? 0 : 1).first});
      if (!blocking) continue;
      if (k + 1 < x.orders[r].size()) x.edge(id, item_task(r, k + 1, false));  // the sender's group is waited for
      const int at = dst_sim >= 0 ? index_of[x.comp_index(dst_sim, g2, w.microbatch, fwd ? 0 : 1)] : -1;
      if (at > 0) x.edge(item_task(dst_sim, (size_t)at - 1, true), id);  // the receive is posted after its item
    }
  }
}

// The engine sees only the links some flow uses, renumbered densely (its cost then follows the simulated
// ranks, not the cluster): engine link i is topology link prog.engine_links[i].
void renumber_links(Program& prog) {
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

}  // namespace

bool per_layer_pieces(const Plan& p) {
  return p.zero >= 2 || p.offload.kind == OffloadKind::granular || p.offload.kind == OffloadKind::chunked ||
         p.grad_accumulation == GradAccumulation::layered;
}

double program_tasks_estimate(const Scenario& sc, bool full_cluster) {
  const Plan& p = sc.plan;
  double per = per_layer_pieces(p) ? (double)sc.model.layers / p.pp : std::max(1, p.virtual_stages);
  double ranks = full_cluster ? (double)p.gpus() : (double)p.pp;
  return ranks * ((double)p.num_microbatches * per * 4 + 64);  // as build_program reserves
}

double program_bytes_estimate(const Scenario& sc, bool full_cluster) {
  constexpr double kBytesPerGpu = 1500, kBytesPerTask = 300, kBase = 64e6;
  return kBase + kBytesPerGpu * sc.plan.gpus() + kBytesPerTask * program_tasks_estimate(sc, full_cluster);
}

Program build_program(const Scenario& sc, bool full_cluster, bool exhaustive_symmetry) {
  Program prog;
  prog.full = full_cluster;
  const Plan& p = sc.plan;
  const int G = p.gpus();
  prog.topo = topology_for(sc.cluster, G);
  Builder B(sc, prog);
  B.exhaustive_symmetry = exhaustive_symmetry;
  prog.cm = cost_model_on(sc, *prog.topo);

  // Simulated ranks: every rank, or one per pipeline stage (tp 0, dp 0).
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
  prog.in.compute_slowdown = sc.cluster.gpu.compute_slowdown_under_comm;  // NCCL beside the GEMMs (sim/engine)
  prog.in.lane_slowed.assign(kLanes, 0);
  prog.in.lane_slowed[kLaneCompute] = 1;
  // Data-parallel reductions and ZeRO gathers run NCCL collectives on many channels; pipeline sends are NCCL
  // point-to-point on a channel or two per peer, whose SMs are left out.
  prog.in.lane_interferes.assign(kLanes, 0);
  prog.in.lane_interferes[kLaneDp] = prog.in.lane_interferes[kLaneZero] = 1;
  prog.in.lane_order.assign((size_t)R * kLanes, {});

  BuildCtx x(sc, prog, B);
  x.R = R;
  {
    size_t est = (size_t)program_tasks_estimate(sc, full_cluster);
    prog.in.tasks.reserve(est);
    prog.info.reserve(est);
    prog.in.edges.reserve(est * 2);
  }
  add_compute_pieces(x);
  add_pipeline_sends(x);
  // Pass 3, per rank: parameter gathers and loads, gradient buckets, reductions, optimizers, static memory.
  for (int r = 0; r < R; ++r) {
    RankCtx rk = detail::make_rank_ctx(x, r);
    detail::add_param_fetches(x, rk);
    detail::add_param_gathers_under_fwd(x, rk);
    detail::add_grad_reductions(x, rk);
    detail::add_tied_embedding_reduce(x, rk);
    detail::add_shared_layer_reduce(x, rk);
    ChunkPlan chunks;
    if (x.okind == OffloadKind::chunked) chunks = plan_chunk_offload(sc, prog, B, r, *rk.rs, rk.held);
    detail::add_optimizers(x, rk, chunks);
    prog.statics.push_back(detail::rank_static(x, rk, chunks));
  }
  B.finalize_multiplicities();
  prog.symmetric = !B.asymmetric;
  renumber_links(prog);
  engine_finalize(prog.in);
  return prog;
}

}  // namespace tp
