// program_build_rank: pass 3 of build_program, one function per concern of one simulated rank — parameter
// fetches (ZeRO-3 gathers, granular loads), gradient buckets and their reductions, the tied embedding and
// shared-layer reductions, the optimizers (GPU and host Adam) and static memory. See program_build_ctx.hpp.
// Invariants: parameters are gathered / loaded once per run and gradients leave once per run; every size
// and time formula comes from step_formulas (shared with the planner's analytic pass).
#include <algorithm>
#include <map>
#include <set>

#include "program_build_ctx.hpp"

namespace tp::detail {

RankCtx make_rank_ctx(BuildCtx& x, int r) {
  const Plan& p = x.p;
  RankCtx rk;
  rk.r = r;
  rk.s = x.prog.sim_stage[r];
  rk.me = x.prog.sim_global[r];
  rk.rc = rank_coord(p, rk.me);
  rk.dp_key = {rk.rc.tp, rk.s, -1};
  rk.edp_key = {rk.rc.tp, rk.s, rk.rc.dp % p.ep};
  rk.dp_group = &x.dp_group(rk.rc.tp, rk.s, -1);
  rk.edp_group = &x.dp_group(rk.rc.tp, rk.s, rk.rc.dp % p.ep);
  rk.dp_members = x.prog.full ? p.data_ranks() : 1;
  rk.edp_members = x.prog.full ? x.edp : 1;
  rk.lane = &x.prog.in.lane_order[r * kLanes + kLaneCompute];
  rk.rs = &x.runs[r];
  // Parameters this rank holds (weight groups once under sharing).
  for (int c = 0; c < x.V; ++c) {
    long long lo = x.lay.first_layer(rk.s, c);
    for (long long l = lo; l < lo + x.lay.chunk_layers(rk.s, c); ++l)
      if (rk.wgroups.insert(weight_group(l, x.L, p.shared_layers)).second) {
        rk.held += x.layer_params(l);
        rk.off += x.offloaded_layer(l);
        if (!x.offloaded[l]) rk.fp8_weight_bytes += x.layer_fp8_weight_bytes(l);
      }
  }
  if (rk.s == x.lay.stage_of(0)) rk.held.dense += x.cm.embed_params;
  if (rk.s == x.lay.stage_of(x.nchunks - 1)) rk.held.dense += x.cm.head_params;
  rk.on_gpu = rk.held - rk.off;
  return rk;
}

int dp_collective(BuildCtx& x, RankCtx& rk, Coll c, TaskKind kind, const Params& pr, double elem_bytes, int after,
                  TaskInfo base, std::vector<int>* out) {
  // Dense part over the dp group; experts over the expert-dp group (with the dense part when ep == 1).
  const Plan& p = x.p;
  double dense = pr.dense + (p.ep == 1 ? pr.expert : 0), expert = p.ep == 1 ? 0 : pr.expert;
  int last = -1;
  auto one = [&](const std::vector<int>& grp, const BuildCtx::GroupKey& key, int members, double params, bool is_expert) {
    if (grp.size() < 2 || params <= 0) return;
    TaskInfo ti = base;
    ti.kind = kind;
    ti.expert = is_expert;
    double bytes = params * elem_bytes;
    auto sk = std::make_tuple(key, (int)c, bytes);  // memoised by the group's key (BuildCtx::dp_shape_memo)
    auto si = x.dp_shape_memo.find(sk);
    if (si == x.dp_shape_memo.end()) si = x.dp_shape_memo.emplace(sk, x.B.shape_for(c, grp, bytes, true)).first;
    ti.sent = x.B.sent_by(si->second, rk.me);
    auto ck = std::make_pair(key, rk.tag++);
    auto ci = x.dp_coll_memo.find(ck);
    if (ci == x.dp_coll_memo.end()) ci = x.dp_coll_memo.emplace(ck, x.group_coll(grp, ck.second, c, bytes, members, true)).first;
    int coll = ci->second;
    int id = x.B.add_task(rk.r, kind == TaskKind::zero_gather ? kLaneZero : kLaneDp, 0, coll, ti);
    x.edge(after, id);
    if (out) out->push_back(id);
    last = id;
  };
  one(*rk.dp_group, rk.dp_key, rk.dp_members, dense, false);
  one(*rk.edp_group, rk.edp_key, rk.edp_members, expert, true);
  return last;
}

void add_param_fetches(BuildCtx& x, RankCtx& rk) {
  const Plan& p = x.p;
  const std::vector<Run>& rs = *rk.rs;
  const int r = rk.r;
  std::vector<int> run_load(rs.size(), -1);
  for (size_t k = 0; k < rs.size(); ++k) {
    const Run& ru = rs[k];
    if (x.okind == OffloadKind::granular && x.offloaded_params(ru.lo, ru.hi).total() > 0) {
      Params op = x.offloaded_params(ru.lo, ru.hi);
      double bytes = (x.zero3 ? x.shard(op, 3) : op.total()) * x.eb.e;
      TaskInfo ti;
      ti.kind = TaskKind::h2d;
      ti.layer_lo = (int)ru.lo; ti.layer_hi = (int)ru.hi;
      ti.mb = x.prog.info[ru.first].mb;
      ti.pcie_bytes = bytes;
      ti.optimizer_s = pcie_copy_s(bytes, x.sc.cluster.host);
      int id = x.B.add_task(r, kLaneH2D, ti.optimizer_s, -1, ti);
      size_t i = rk.off_runs.size();
      if (i >= (size_t)p.offload.prefetch_layers + 1) x.edge(rs[rk.off_runs[i - p.offload.prefetch_layers - 1]].last, id);
      x.edge(id, ru.first);
      x.hold(r, id, true, ru.last, x.zero3 ? 0 : bytes, MemCat::weights);
      run_load[k] = id;
      rk.off_runs.push_back((int)k);
    }
    if (x.zero3) {
      Params pr = x.piece_params(ru.lo, ru.hi, ru.embed, ru.head);
      TaskInfo base;
      base.model_chunk = x.prog.info[ru.first].model_chunk;
      base.layer_lo = (int)ru.lo; base.layer_hi = (int)ru.hi;
      base.mb = x.prog.info[ru.first].mb;
      std::vector<int> ids;
      dp_collective(x, rk, Coll::all_gather, TaskKind::zero_gather, pr, x.eb.e, run_load[k], base, &ids);
      for (int id : ids) {
        if (k >= 2) x.edge(rs[k - 2].last, id);  // double buffer: the run before last has released its copy
        x.edge(id, ru.first);
      }
      double fp8 = 0;  // the gathered layers' fp8 copies (fp8 training) live as long as the gathered weights
      for (long long l = ru.lo; l < ru.hi; ++l) fp8 += x.layer_fp8_weight_bytes(l);
      // Held at once: the run, or the framework's share of its live-parameter bound (DeepSpeed's sub-modules).
      const double held = zero3_buffer_params(x.sc.framework, pr.total());
      const double share = pr.total() > 0 ? held / pr.total() : 1.0;
      if (!ids.empty())
        x.hold(r, ids.front(), true, ru.last, x.okind == OffloadKind::chunked ? 0 : held * x.eb.e + fp8 * share, MemCat::weights);
    }
  }
}

// overlap_param_gather (ZeRO-1/2): the updated parameters of the previous step are all-gathered in buckets
// (bucket_params, in forward order) at the start of the step, each before the first forward of its layers,
// so they run under the forward (Megatron's forward pre-hooks). In the steady state this is the gather that
// follows the previous step's optimizer. Called before the gradient reductions: the dp lane runs in order.
void add_param_gathers_under_fwd(BuildCtx& x, RankCtx& rk) {
  if (!x.gather_under_fwd) return;
  const std::vector<Run>& rs = *rk.rs;
  // What is already gathered (later micro-batches reuse it): layers, and the embedding and head. A later
  // micro-batch's forward runs the whole chunk as one run; only what no earlier run gathered is added.
  std::set<long long> seen_layers;
  bool seen_embed = false, seen_head = false;
  Params cur;
  std::vector<int> users;  // first forward tasks of the current bucket's layers
  auto flush = [&]() {
    if (users.empty()) return;
    TaskInfo gi;
    gi.bucket = rk.tag;
    std::vector<int> ids;
    dp_collective(x, rk, Coll::all_gather, TaskKind::dp_gather, cur, x.eb.e, -1, gi, &ids);
    for (int id : ids)
      for (int u : users) x.edge(id, u);
    cur = Params{};
    users.clear();
  };
  for (const Run& ru : rs) {
    if (ru.pass != Pass::fwd) continue;
    const bool embed = ru.embed && !seen_embed, head = ru.head && !seen_head;
    seen_embed |= ru.embed;
    seen_head |= ru.head;
    Params add = x.piece_params(ru.lo, ru.lo, embed, head);  // the ends alone (no layers)
    for (long long l = ru.lo; l < ru.hi; ++l)
      if (seen_layers.insert(l).second) add += x.piece_params(l, l + 1, false, false);
    if (add.total() <= 0) continue;
    cur += add;
    users.push_back(ru.first);
    if (cur.total() >= x.bucket_params) flush();
  }
  flush();
}

namespace {
struct Bucket { Params pr; int first = -1, last = -1, chunk = 0, index = 0; };

// Gradient buckets in backward order: a bucket closes at bucket_params (Megatron), at a forward, or at the
// end; without overlap (or with shared weights) one bucket of everything after the last backward.
std::vector<Bucket> grad_buckets(BuildCtx& x, RankCtx& rk) {
  const Plan& p = x.p;
  std::vector<Bucket> buckets;
  const std::vector<int>& lane = *rk.lane;
  const std::vector<Run>& rs = *rk.rs;
  if (!(p.data_ranks() > 1 || x.okind == OffloadKind::optimizer)) return buckets;
  if (!x.overlap_grad_reduce || x.shared) {
    int last = -1;
    for (int t : lane) if (x.prog.info[t].kind == TaskKind::bwd) last = t;
    Bucket b;
    b.pr = rk.held;
    b.first = b.last = last;
    buckets.push_back(b);
    return buckets;
  }
  Bucket cur;
  auto flush = [&]() {
    if (cur.last >= 0) { cur.index = (int)buckets.size(); buckets.push_back(cur); }
    cur = Bucket{};
  };
  size_t k = 0;
  for (int t : lane) {
    while (k < rs.size() && rs[k].last < t) ++k;
    const TaskInfo& ti = x.prog.info[t];
    if (ti.kind != TaskKind::bwd) { flush(); continue; }
    const Run& ru = rs[k];
    if (t != ru.last || !(x.zero2 || ru.final_grad)) continue;
    if (cur.first < 0) { cur.first = ru.first; cur.chunk = ti.model_chunk; }
    cur.pr += x.piece_params(ru.lo, ru.hi, ru.embed, ru.head);
    cur.last = t;
    if (cur.pr.total() >= x.bucket_params) flush();
  }
  flush();
  return buckets;
}
}  // namespace

void add_grad_reductions(BuildCtx& x, RankCtx& rk) {
  const Plan& p = x.p;
  const int r = rk.r;
  const Host& host = x.sc.cluster.host;
  // ZeRO-2/3: at most kGradBucketsInFlight unreduced buckets. A bucket's backward waits until the reduction of
  // the bucket kGradBucketsInFlight before it has ended (DeepSpeed's two ipg buffers: the backward hook syncs the
  // reduction stream before reusing one), so the unreduced gradients never pile up behind a slow reduction.
  std::vector<std::vector<int>> reduce_ids;
  for (const Bucket& b : grad_buckets(x, rk)) {
    TaskInfo base;
    base.model_chunk = b.chunk;
    base.bucket = b.index;
    int ready = b.last;
    if (p.data_ranks() > 1) {
      std::vector<int> ids;
      Coll c = p.zero >= 1 ? Coll::reduce_scatter : Coll::all_reduce;
      dp_collective(x, rk, c, TaskKind::dp_reduce, b.pr, x.eb.g, b.last, base, &ids);
      for (int id : ids) { rk.opt_deps.push_back(id); rk.host_deps.push_back(id); ready = id; }
      if (x.zero2 && x.okind != OffloadKind::chunked) {  // (chunked: gradients reuse the parameter chunks)
        // Each reduction frees its own part (dp_collective's order: the dense part over the dp group, then the
        // experts over the expert-dp group when ep > 1), not the whole bucket once per collective.
        std::vector<double> part;
        const double dense = b.pr.dense + (p.ep == 1 ? b.pr.expert : 0), expert = p.ep == 1 ? 0 : b.pr.expert;
        if (rk.dp_group->size() >= 2 && dense > 0) part.push_back(dense);
        if (rk.edp_group->size() >= 2 && expert > 0) part.push_back(expert);
        if (part.size() != ids.size()) part.assign(ids.size(), b.pr.total() / std::max<size_t>(1, ids.size()));
        // A bucket bigger than the framework's streams out as it is produced: at most the framework's bucket.
        const double total = b.pr.total();
        const double kept = total > 0 ? grad_bucket_hold_params(x.sc.framework, p.data_ranks(), total) / total : 0;
        for (size_t i = 0; i < ids.size(); ++i) x.hold(r, b.first, true, ids[i], part[i] * kept * x.eb.g, MemCat::gradients);
        if (reduce_ids.size() >= (size_t)kGradBucketsInFlight)
          for (int id : reduce_ids[reduce_ids.size() - kGradBucketsInFlight]) x.edge(id, b.first);
        reduce_ids.push_back(ids);
      }
    }
    if (x.okind == OffloadKind::optimizer) {  // gradients (this rank's shard) to the host
      TaskInfo ti = base;
      ti.kind = TaskKind::d2h;
      ti.pcie_bytes = (p.zero >= 1 ? x.shard(b.pr, 1) : b.pr.total()) * x.eb.e;
      ti.optimizer_s = pcie_copy_s(ti.pcie_bytes, host);
      int id = x.B.add_task(r, kLaneD2H, ti.optimizer_s, -1, ti);
      x.edge(ready, id);
      rk.host_deps.push_back(id);
    }
  }
  // Granular offload: the offloaded layers' gradients leave after every backward run.
  for (int k : rk.off_runs) {
    const Run& ru = (*rk.rs)[k];
    if (ru.pass != Pass::bwd) continue;
    TaskInfo ti;
    ti.kind = TaskKind::d2h;
    ti.layer_lo = (int)ru.lo; ti.layer_hi = (int)ru.hi;
    ti.mb = x.prog.info[ru.last].mb;
    Params op = x.offloaded_params(ru.lo, ru.hi);
    ti.pcie_bytes = (x.zero2 ? x.shard(op, 2) : op.total()) * x.eb.e;
    ti.optimizer_s = pcie_copy_s(ti.pcie_bytes, host);
    int id = x.B.add_task(r, kLaneD2H, ti.optimizer_s, -1, ti);
    x.edge(ru.last, id);
    // What is copied (ZeRO-2: this rank's reduced slice; the whole gradient is the bucket's hold until its
    // reduce-scatter ends), not the whole gradient a second time.
    x.hold(r, ru.first, true, id, ti.pcie_bytes, MemCat::gradients);
    rk.host_deps.push_back(id);
  }
}

void add_tied_embedding_reduce(BuildCtx& x, RankCtx& rk) {
  const Plan& p = x.p;
  int first_stage = x.lay.stage_of(0), last_stage = x.lay.stage_of(x.nchunks - 1);
  if (!(x.M.tied_embeddings && p.pp > 1 && (rk.s == first_stage || rk.s == last_stage))) return;
  std::vector<int> group = {rank_global(p, rk.rc.tp, rk.rc.dp, first_stage), rank_global(p, rk.rc.tp, rk.rc.dp, last_stage)};
  double bytes = x.M.vocab * (double)x.M.hidden / p.tp * x.eb.g;
  int members = (x.B.sim_of_global[group[0]] >= 0) + (x.B.sim_of_global[group[1]] >= 0);
  TaskInfo ti;
  ti.kind = TaskKind::embed_reduce;
  ti.sent = x.B.sent_by(x.B.shape_for(Coll::all_reduce, group, bytes), rk.me);
  int coll = x.group_coll(group, -1, Coll::all_reduce, bytes, members, false);
  int id = x.B.add_task(rk.r, kLaneDp, 0, coll, ti);
  int src = -1;
  for (int t : *rk.lane) {
    const TaskInfo& ti2 = x.prog.info[t];
    if (ti2.kind == TaskKind::bwd && ((rk.s == first_stage && ti2.embed) || (rk.s == last_stage && ti2.head))) src = t;
  }
  if (src < 0) src = rk.lane->back();
  x.edge(src, id);
  rk.opt_deps.push_back(id);
}

void add_shared_layer_reduce(BuildCtx& x, RankCtx& rk) {
  const Plan& p = x.p;
  if (!(x.shared && p.pp > 1)) return;
  std::map<std::vector<int>, int> sets;  // stage set -> number of weight groups shared by exactly it
  for (long long wg : rk.wgroups) {
    std::set<int> st;
    long long per = x.L / p.shared_layers;
    for (long long l = wg * per; l < (wg + 1) * per; ++l) st.insert(x.lay.stage_of_layer(l));
    if (st.size() > 1) sets[std::vector<int>(st.begin(), st.end())]++;
  }
  int last_bwd = -1;
  for (int t : *rk.lane) if (x.prog.info[t].kind == TaskKind::bwd) last_bwd = t;
  for (auto& [stages, count] : sets) {
    std::vector<int> group;
    for (int st : stages) group.push_back(rank_global(p, rk.rc.tp, rk.rc.dp, st));
    int members = 0;
    for (int g : group) members += x.B.sim_of_global[g] >= 0;
    double bytes = count * x.cm.layer_params * x.eb.g;
    TaskInfo ti;
    ti.kind = TaskKind::shared_reduce;
    ti.sent = x.B.sent_by(x.B.shape_for(Coll::all_reduce, group, bytes), rk.me);
    int coll = x.group_coll(group, -2, Coll::all_reduce, bytes, members, false);
    int id = x.B.add_task(rk.r, kLaneDp, 0, coll, ti);
    x.edge(last_bwd, id);
    rk.opt_deps.push_back(id);
    rk.host_deps.push_back(id);
  }
}

namespace {
OptimizerSplit rank_optimizer_split(const BuildCtx& x, const RankCtx& rk, const ChunkPlan& chunks) {
  if (x.okind == OffloadKind::chunked) return OptimizerSplit{chunks.gpu_adam_params, chunks.cpu_adam_params};
  return optimizer_split(rk.held, rk.off, x.okind, x.p.zero, x.p.data_ranks(), x.edp);
}
}  // namespace

void add_optimizers(BuildCtx& x, RankCtx& rk, const ChunkPlan& chunks) {
  const Plan& p = x.p;
  const int r = rk.r;
  const OptimizerSplit os = rank_optimizer_split(x, rk, chunks);
  const Host& host = x.sc.cluster.host;
  int gpu_opt = -1;
  if (x.okind != OffloadKind::optimizer) {
    TaskInfo oi;
    oi.kind = TaskKind::optimizer;
    oi.optimizer_s = gpu_adam_s(os.gpu_params, x.sc.cluster.gpu, x.eb);
    if (os.gpu_params <= 0) oi.optimizer_s = x.sc.cluster.gpu.kernel_overhead_s;  // one (empty) launch
    gpu_opt = x.B.add_task(r, kLaneCompute, oi.optimizer_s, -1, oi);
    for (int d : rk.opt_deps) x.edge(d, gpu_opt);
    if (x.okind == OffloadKind::chunked) for (int d : chunks.adam_deps) x.edge(d, gpu_opt);
  }
  int after_update = gpu_opt;
  if (os.host_params > 0) {
    TaskInfo hi;
    hi.kind = TaskKind::host_adam;
    hi.optimizer_s = host_adam_s(os.host_params, host, x.gpus_sharing_host, x.eb);
    int ha = x.B.add_task(r, kLaneHost, hi.optimizer_s, -1, hi);
    for (int d : rk.host_deps) x.edge(d, ha);
    for (int d : rk.opt_deps) x.edge(d, ha);
    if (x.okind == OffloadKind::chunked) for (int d : chunks.adam_deps) x.edge(d, ha);
    if (rk.host_deps.empty() && rk.opt_deps.empty()) {
      for (int t : *rk.lane) if (x.prog.info[t].kind == TaskKind::bwd) x.edge(t, ha);
    }
    after_update = ha;
    double back = x.okind == OffloadKind::optimizer ? os.host_params * x.eb.e
                                                     : (x.okind == OffloadKind::chunked ? chunks.adam_h2d_bytes : 0);
    if (back > 0) {  // updated low-precision weights back to the GPU
      TaskInfo ti;
      ti.kind = TaskKind::h2d;
      ti.pcie_bytes = back;
      ti.optimizer_s = pcie_copy_s(back, host);
      int id = x.B.add_task(r, kLaneH2D, ti.optimizer_s, -1, ti);
      x.edge(ha, id);
      after_update = id;
    }
  }
  if (framework_step_overhead_s(x.sc.framework) > 0) {  // the framework's fixed cost per step (its fit)
    TaskInfo fi;
    fi.kind = TaskKind::optimizer;
    fi.optimizer_s = framework_step_overhead_s(x.sc.framework);
    const int id = x.B.add_task(r, kLaneCompute, fi.optimizer_s, -1, fi);
    if (after_update >= 0) x.edge(after_update, id);
    for (int d : rk.opt_deps) x.edge(d, id);
  }
  if (p.zero >= 1 && p.zero <= 2 && p.data_ranks() > 1 && !x.gather_under_fwd) {  // ZeRO-1/2: every rank gathers the updated parameters
    TaskInfo gi;
    std::vector<int> ids;
    dp_collective(x, rk, Coll::all_gather, TaskKind::dp_gather, rk.held, x.eb.e, after_update, gi, &ids);
    if (gpu_opt >= 0) for (int id : ids) x.edge(gpu_opt, id);
  }
}

RankStatic rank_static(BuildCtx& x, RankCtx& rk, const ChunkPlan& chunks) {
  const Plan& p = x.p;
  RankStatic st;
  st.params = rk.held.total();
  if (x.okind == OffloadKind::chunked) {
    st.weights_bytes = chunks.gpu_chunk_bytes;
    st.optimizer_bytes = chunks.gpu_os_bytes;
    st.gradients_bytes = 0;  // gradients reuse the fp16 parameter slots
    st.buffers_bytes = chunks.comm_buffer_bytes;
    st.host_bytes = chunks.host_bytes;
    if (!chunks.fits && x.prog.offload_note.empty()) x.prog.offload_note = chunks.why;
  } else {
    StateBytes sb = state_bytes(rk.held, rk.off, x.okind, p.zero, p.data_ranks(), x.edp, x.eb);
    st.weights_bytes = sb.weights + (x.zero3 ? 0 : rk.fp8_weight_bytes);  // ZeRO-3: with the gathered layer
    st.gradients_bytes = sb.gradients;
    st.optimizer_bytes = sb.optimizer;
    st.host_bytes = sb.host;
  }
  st.buffers_bytes += pipeline_buffer_bytes(p.pp, x.p2p_bytes);
  for (int ln : {kLaneH2D, kLaneD2H})
    for (int t : x.prog.in.lane_order[rk.r * kLanes + ln]) st.pcie_bytes += x.prog.info[t].pcie_bytes;
  return st;
}

}  // namespace tp::detail
