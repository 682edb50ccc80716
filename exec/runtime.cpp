// runtime: `trainplan run` on one rank (RankRun, exec/runtime_rank.hpp, whose header gives the design): its
// setup (communicators, parameter units, ownership, offload stores) and the step loop driven by the shared
// schedule (schedule/pipeline: stage_layout, plan_order) exactly as the simulator costs it; run_training picks
// the backend and the precision. The updates between steps are in exec/runtime_update.cpp.
#include "exec/runtime_rank.hpp"

#ifdef __GLIBC__
#include <malloc.h>
#endif

namespace tp::exec {

std::vector<uint16_t> load_run_tokens(const std::string& path, long long vocab);

namespace detail {

template <class T>
void RankRun<T>::setup() {
  rc = rank_coord(p, world.rank());
  lay = stage_layout(p, sc.model.layers);
  L = sc.model.layers;
  m = p.num_microbatches;
  b = p.microbatch;
  Tn = sc.training.seq_len;
  Tl = Tn / p.cp;
  C = sc.model.hidden;
  nchunks = lay.num_model_chunks();
  first_stage = lay.stage_of(0);
  last_stage = lay.stage_of(nchunks - 1);
  const int S = 1 << 20;
  tp = prof::classed(world.split(rc.dp + p.data_ranks() * rc.stage, rc.tp), prof::Cls::tp_comm);
  dp = world.split(S + rc.tp + p.tp * rc.stage, rc.dp);
  pp = prof::classed(world.split(2 * S + rc.tp + p.tp * rc.dp, rc.stage), prof::Cls::pp_comm);
  bool in_emb = p.pp > 1 && sc.model.tied_embeddings && (rc.stage == first_stage || rc.stage == last_stage);
  emb = world.split(in_emb ? 3 * S + rc.tp + p.tp * rc.dp : -1, rc.stage);
  if (p.cp > 1) {  // the cp group: data ranks [cp * dp_rank, +cp) of this tp rank and stage (models/plan.hpp)
    cpc = world.split(4 * S + rc.tp + p.tp * (rc.dp / p.cp + p.dp * rc.stage), rc.dp % p.cp);
    cpx = CpCtx{cpc.get(), p.cp, rc.dp % p.cp, (long)Tn};
  }
  if (p.ep > 1) {  // the ep group: ep consecutive dp ranks of this tp rank and stage (exec/moe.hpp); the
    // expert-dp group: the dp ranks of this tp rank and stage with my ep rank (they hold my experts)
    epc = world.split(5 * S + rc.tp + p.tp * (rc.dp / p.ep + p.dp * rc.stage), rc.dp % p.ep);
    edpc = world.split(6 * S + rc.tp + p.tp * (rc.dp % p.ep + p.ep * rc.stage), rc.dp / p.ep);
  }

  std::vector<T> init = init_model<T>(sc, rc.tp, *tp, o.seed, model, gl, replicated_view, grid_row, grid_col,
                                      p.ep > 1 ? rc.dp % p.ep : 0);
  model.d1.ep = epc.get();
  model.d1.moe_aux_weight = sc.model.moe.aux_loss_coeff * (double)b / (double)sc.training.global_batch;  // per micro-batch
  // Units and ownership.
  units.resize(L + 2);
  units[0] = Unit{gl.embed_begin, gl.embed_end, 0, rc.stage == first_stage || (sc.model.tied_embeddings && rc.stage == last_stage)};
  for (long long l = 0; l < L; ++l)
    units[unit_of_layer(l)] = Unit{gl.layer_begin[l], gl.layer_end[l], 0, stage_of_layer(l) == rc.stage, gl.expert_begin[l]};
  units[L + 1] = Unit{gl.head_begin, gl.head_end, 0, rc.stage == last_stage};
  units[0].x = units[0].b;
  units[L + 1].x = units[L + 1].b;
  long long state = 0, hstate = 0;  // the moments' length on the device / host (granular offload)
  std::vector<char> goff(units.size(), 0);
  std::vector<long long> hlen, horigin;  // granular: per unit, its host length and flat start (zparam: the slice)
  zparam = p.zero >= 3 && p.data_ranks() > 1 && p.offload.kind != OffloadKind::chunked;
  // Granular: the offloaded units (target "experts": the MoE layers, only their experts go to the host).
  const bool experts_only = p.offload.experts_only;
  if (p.offload.kind == OffloadKind::granular)
    for (int l : p.offload.layers) {
      const Unit& u = units[unit_of_layer(l)];
      goff[unit_of_layer(l)] = u.owned && (!experts_only || u.x < u.b);
    }
  for (Unit& u : units) {
    const int ui = int(&u - units.data());
    u.slice = p.zero >= 1 ? (u.x - u.a + p.data_ranks() - 1) / p.data_ranks() : u.x - u.a;
    const int en = seg(ui, 1).n;
    u.eslice = p.zero >= 1 ? (u.b - u.x + en - 1) / en : u.b - u.x;
    dev_end.push_back(!goff[ui] ? u.b : experts_only ? u.x : u.a);
    // granular host side: [dev_end, b) (experts only: the expert segment); zparam: the rank's slices of the
    // segments on the host, one after the other (hoff)
    const bool sliced = zparam && is_layer_unit(ui);
    long long hl = sliced ? 0 : u.b - dev_end.back();
    for (int si = 0; u.owned && si < nseg(ui); ++si) {  // an own range per segment
      const Seg sg = seg(ui, si);
      const bool host = goff[ui] && sg.lo >= dev_end[ui];
      long long a = p.zero >= 1 ? sg.lo + sg.r * sg.slice : sg.lo;
      long long z = p.zero >= 1 ? std::min(sg.hi, a + sg.slice) : sg.hi;
      own.push_back({a, std::max(a, z)});
      own_unit.push_back(ui);
      own_seg.push_back(si);
      hoff.push_back(host && sliced ? hl : -1);
      if (host && sliced) hl += sg.slice;
      long long& at = host ? hstate : state;
      own_off.push_back(at);
      at += sg.slice;  // padded: every own range gets its full slice
    }
    hlen.push_back(hl);
    horigin.push_back(sliced ? -1 : dev_end.back());  // (zparam: own ranges through hoff)
  }
  if (p.offload.kind == OffloadKind::granular) gran.init(goff, hlen, horigin, hstate);
  // The rank holds only its stage's units: a compact buffer of the owned units in layout order; flat
  // (layout) offsets map to it through cbase (P / Gd below). Views of other stages' units get no storage.
  // zparam: the owned layers are only their slices (pslice, by own range; granular: on the host).
  // Chunked offload on a backend that is not host-accessible: the store's host side (flat parameters and
  // gradients, the optimizer state) is pinned host memory, which the host Adam reads and the ops may also take.
  host_flat = p.offload.kind == OffloadKind::chunked && !current_backend().host_accessible;
  std::optional<BackendScope> pinned;
  if (host_flat) {  // (a Buf keeps the allocator of its construction: fresh ones take the pinned scope's)
    pinned.emplace(pinned_variant(current_backend()));
    for (Buf<T>* b : {&params, &grads, &m1, &m2, &gshard}) *b = Buf<T>();
  }
  {
    std::vector<T> all = std::move(init);  // host data, uploaded unit by unit
    long long n = 0;
    cbase.assign(units.size(), -1);
    for (size_t ui = 0; ui < units.size(); ++ui)
      if (units[ui].owned && !(zparam && is_layer_unit((int)ui)) && dev_end[ui] > units[ui].a) {  // [a, dev_end)
        cbase[ui] = n;
        n += dev_end[ui] - units[ui].a;
      }
    zeros(params, n);
    for (size_t ui = 0; ui < units.size(); ++ui) {
      if (cbase[ui] >= 0) upload(params.data() + cbase[ui], all.data() + units[ui].a, dev_end[ui] - units[ui].a);
      if (gran.is_off((int)ui) && !(zparam && is_layer_unit((int)ui)))
        std::copy(all.data() + dev_end[ui], all.data() + units[ui].b, gran.param((int)ui));
    }
    for (size_t k = 0; k < own.size(); ++k)  // zparam: the own slices on the host
      if (hoff[k] >= 0) std::copy(all.data() + own[k].first, all.data() + own[k].second, host_slice(k));
    if (zparam) zeros(pslice, state);
    for (size_t ui = 0; zparam && ui < units.size(); ++ui)
      for (int si = 0; units[ui].owned && is_layer_unit((int)ui) && si < nseg((int)ui); ++si) {
        size_t k = own_index((int)ui) + si;
        if (hoff[k] >= 0) continue;  // on the host
        upload(pslice.data() + own_off[k], all.data() + own[k].first, own[k].second - own[k].first);
      }
    uparam.resize(units.size());
  }
  zgrad = p.zero >= 2 && p.data_ranks() > 1 && p.offload.kind != OffloadKind::chunked;
  {
    long long n = 0;
    gbase.assign(units.size(), -1);
    for (size_t ui = 0; ui < units.size(); ++ui)
      if (units[ui].owned && !(zgrad && is_layer_unit((int)ui)) && dev_end[ui] > units[ui].a) {
        gbase[ui] = n;
        n += dev_end[ui] - units[ui].a;
      }
    zeros(grads, n);
    ugrad.resize(units.size());
  }
  if (p.cp > 1) model.d1.cpx = &cpx;
  model.d1.params = model.d2.params = params.data();
  model.d1.grads = model.d2.grads = grads.data();
  for (const ParamView& v : gl.views) {
    const int u = unit_at(v.offset);  // (granular: null until a run loads its unit's host part)
    bool held = cbase[u] >= 0 && v.offset < dev_end[u];
    ptab.push_back(held ? P(v.offset) : nullptr);
    gtab.push_back(held && gbase[u] >= 0 ? Gd(v.offset) : nullptr);
  }
  model.d1.ptab = model.d2.ptab = ptab.data();
  model.d1.gtab = model.d2.gtab = gtab.data();
  const bool opt_off = p.offload.kind == OffloadKind::optimizer;
  zeros(m1, opt_off ? 0 : state);  // optimizer offload: the state is on the host (hopt)
  zeros(m2, opt_off ? 0 : state);
  if (opt_off) {
    hopt.init(state);
    pull_master();
  }
  if (p.zero >= 2) zeros(gshard, state);
  pinned.reset();  // (the chunk store's arena below is device memory)
  if (p.offload.kind == OffloadKind::chunked) {  // the owned units' views in the simulator's order, part = unit
    std::vector<std::pair<long long, long long>> spans;
    for (const Unit& u : units) spans.push_back({u.a, u.b});
    std::vector<ChunkTensor> ts = chunk_tensors(gl, spans, cbase);
    double budget = o.device_budget_bytes > 0 ? o.device_budget_bytes
                                              : p.offload.gpu_memory_fraction * sc.cluster.gpu.hbm_bytes;
    store = std::make_unique<ChunkStore<T>>(ts, (int)units.size(), p.offload.chunk_elements, budget,
                                            p.offload.warmup_chunk_fraction, params.data(), grads.data(), ptab, gtab);
  }
}


template <class T>
RunResult RankRun<T>::run() {
  setup();
  if (sc.delink.on()) {
    shared = sc.delink.unique_layers;
    delink_step = o.delink_step >= 0 ? o.delink_step
                                     : std::lround(sc.delink.tokens / ((double)sc.training.global_batch * (double)Tn));
    delink_step = std::max(1L, delink_step);  // at or past the last step: the run stays in the pseudo phase
  }
  std::vector<uint16_t> tokens = load_run_tokens(o.data, sc.model.vocab);
  const long long N = b * Tl;  // this rank's tokens of a micro-batch
  // Elements of the residual stream between pieces: SP row shard, 2D [B/q Tn, C/q] block, else [N, C].
  const long long X = model.two_d ? model.d2.lay.act_rows(b, Tl) * model.d2.lay.act_cols() : (model.sp ? N / p.tp : N) * C;
  const T scale = T(1.0 / ((double)sc.training.global_batch * (double)Tn));
  const int warmup = o.warmup_steps >= 0 ? o.warmup_steps : std::max(1, o.steps / 10);
  std::vector<WorkItem> order = plan_order(p, L, rc.stage);
  // Pieces in execution order; runs (the chunk store's moments): consecutive pieces on the same layer and pass.
  const std::vector<Piece> pieces = order_pieces(order, lay, rc.stage);
  std::vector<int> run_of_piece, run_layer;
  split_runs(pieces, run_of_piece, run_layer);
  auto run_parts = [&](int r) {  // the units run r touches (the head reads the tied wte: the embedding too)
    const long long l = run_layer[r];
    std::vector<int> parts = {unit_of_layer(weight_group(l, L, shared))};
    if (l == 0) parts.push_back(0);
    if (l == L - 1) { parts.push_back((int)L + 1); parts.push_back(0); }
    return parts;
  };
  if (store) check_runs_fit<T>(*store, run_layer, run_parts, (long long)p.offload.chunk_elements);
  int cur_run = -1;
  auto enter = [&](size_t k) {  // before the first use of piece k's parameters: its run's chunks resident, pinned
    if (!store || run_of_piece[k] == cur_run) return;
    cur_run = run_of_piece[k];
    store->access(cur_run, run_parts(cur_run));
  };
  std::vector<LayerActs<T>> acts((size_t)L * m);
  std::vector<HeadActs<T>> head(m);
  std::map<std::pair<int, int>, Buf<T>> local;  // (chunk boundary key, mb) -> activation / gradient
  // Token ids and targets per micro-batch: read on the host (host_in, host_tgt), used by the ops from backend
  // memory (in, tgt: an upload per step).
  std::vector<int32_t> host_in(b * Tn), host_tgt(b * Tn);  // whole sequences (cp: this rank's rows selected)
  std::vector<Buf<int32_t>> in(m), tgt(m);
  for (long long j = 0; j < m; ++j) { in[j].resize(N); tgt[j].resize(N); }
  std::deque<Buf<T>> sendbufs;  // the buffers of outstanding pipeline sends, oldest first
  auto reap = [&] {             // free the buffers of completed sends
    if (sendbufs.empty()) return;
    for (int k = pp->reap_sends(); k > 0 && !sendbufs.empty(); --k) sendbufs.pop_front();
  };
  RunResult res;
  double tok_after_first = 0, time_after_first = 0;
  auto tag = [&](Pass ps, int g, long long j) { return ((ps == Pass::fwd ? 0 : 1) * nchunks + g) * (int)m + (int)j; };

  // Rank 0's iteration line with Megatron-LM's fields, every log_every steps whatever stderr is (log tools
  // read it); between them, on a terminal, the interactive progress line.
  const int log_every = o.log_every >= 0 ? o.log_every : (o.steps <= 20 ? 1 : 10);
  const long long gb = sc.training.global_batch;
  const double model_flops = megatron_flops_per_iteration(sc.model, gb, Tn, false);
  auto log_iteration = [&](int step, double dt, double loss) {
    const double tps = (double)gb * Tn / dt;
    if (log_every > 0 && ((step + 1) % log_every == 0 || step + 1 == o.steps)) {
      std::fprintf(stderr,
                   "%s iteration %8d/%8d | consumed samples: %12lld | elapsed time per iteration (ms): %.1f | "
                   "throughput per GPU (TFLOP/s/GPU): %.4f | tokens per second: %.0f | learning rate: %.6E | "
                   "global batch size: %5lld | lm loss: %.6E | grad norm: %.4f | peak memory (MB): %.1f |\n",
                   o.progress ? "\r" : "", step + 1, o.steps, (long long)(step + 1) * gb, dt * 1e3,
                   model_flops / dt / world.size() / 1e12, tps, learning_rate(o, step, warmup), gb, loss,
                   res.grad_norm.empty() ? 0.0 : res.grad_norm.back(), peak_memory_of(current_backend()) / 1e6);
    } else if (o.progress) {
      std::fprintf(stderr, "\rstep %d/%d  loss %.4f  %.0f tokens/s  ETA %.0f s   ", step + 1, o.steps, loss, tps,
                   dt * (o.steps - step - 1));
      if (step + 1 == o.steps) std::fprintf(stderr, "\n");
    }
    std::fflush(stderr);
  };
  int first = 0;
  if (o.resume && !o.checkpoint_dir.empty()) {
    std::vector<std::string> skipped;
    auto at = latest_complete(o.checkpoint_dir, world.size(), &skipped);
    if (world.rank() == 0)
      for (const std::string& s : skipped) std::fprintf(stderr, "skipped checkpoint %s\n", s.c_str());
    if (!at && !skipped.empty() && !o.resume_or_start)
      throw InputError({o.checkpoint_dir + ": --resume found only incomplete or corrupt checkpoints (listed above); "
                        "not restarting from step 0 (use --resume-or-start to allow it)"});
    if (at) {
      first = (int)load_checkpoint(*at);
      res.last_checkpoint = checkpoint_step_dir(o.checkpoint_dir, *at);
      if (world.rank() == 0 && first >= o.steps)
        std::fprintf(stderr, "nothing to do: the checkpoint at step %d is at or past --steps %d (%s)\n", first, o.steps,
                     res.last_checkpoint.c_str());
      else if (world.rank() == 0)
        std::fprintf(stderr, "resumed from step %d: %s\n", first, res.last_checkpoint.c_str());
    } else if (world.rank() == 0) {
      std::fprintf(stderr, "no complete checkpoint in %s: starting at step 0\n", o.checkpoint_dir.c_str());
    }
  }
  res.first_step = first;
  for (int step = first; step < o.steps; ++step) {
    if (store) store->begin_step();
    if (step == delink_step) delink();
    auto t0 = std::chrono::steady_clock::now();
    prof::step_begin(step);
    rec.on = !o.trace.empty() && step == o.steps - 1;  // the last step, like the simulator's one step
    rec.t0 = t0;
    ops::fill(grads.data(), T(0), (long)grads.size());
    if (store) store->zero_resident_grads();
    cur_run = -1;
    if (p.zero >= 2) ops::fill(gshard.data(), T(0), (long)gshard.size());
    if (gran.on()) gran.begin_step(run_layer, shared, p.offload.prefetch_layers);  // (the runs change at a delink)
    for (long long j = 0; j < m; ++j) {
      fill_micro_batch(tokens, BatchSpec{(int)Tn, (int)b, o.seed}, step, (long)((rc.dp / p.cp * m + j) * b),
                       host_in.data(), host_tgt.data());
      if (p.cp > 1) {  // in place: a local row's global position is never before it
        cp_select_tokens(cpx, host_in.data(), host_in.data(), (long)b);
        cp_select_tokens(cpx, host_tgt.data(), host_tgt.data(), (long)b);
      }
      upload(in[j].data(), host_in.data(), N);
      upload(tgt[j].data(), host_tgt.data(), N);
    }
    if (p.zero >= 3) {  // the ends once per step; layers before each run below
      if (units[0].owned) all_gather_unit(0);
      if (units[L + 1].owned) all_gather_unit((int)L + 1);
    }
    double loss = 0;
    // The residual stream between pieces, one buffer: a layer's input is moved into its saved activations
    // (a.x_in, no copy) and its output is a fresh buffer; the last output moves into the head's saved input,
    // to the next stage's send or to `local`. The backward's gradient stays in x (layers run in place).
    Buf<T> x;
    size_t pc = 0;
    for (int i = 0; i < (int)order.size(); ++i) {
      const WorkItem& w = order[i];
      const int g = lay.model_chunk(rc.stage, w.chunk);
      const long long j = w.microbatch;
      const bool fwd = w.pass == Pass::fwd;
      reap();
      enter(pc);
      // Input of the item.
      const bool from_local = fwd ? g != 0 && lay.stage_of(g - 1) == rc.stage
                                  : g != nchunks - 1 && lay.stage_of(g + 1) == rc.stage;
      if (!from_local) x.resize(X);  // (a buffer from `local` replaces x below)
      if (fwd) {
        if (g == 0) rec.span(part_op_name("embed", "fwd", "", (int)j), kTidCompute, [&] { model.embed_fwd(x.data(), in[j].data(), b, Tl); });
        else if (lay.stage_of(g - 1) == rc.stage) { x = std::move(local[{g, (int)j}]); local.erase({g, (int)j}); }
        else rec.span(p2p_op_name(lay.stage_of(g - 1), rc.stage, Pass::fwd, (int)j), kTidPpFwd,
                      [&] { pp->recv(x.data(), X, dtype_of<T>(), lay.stage_of(g - 1), tag(Pass::fwd, g, j)); });
      } else {
        if (g == nchunks - 1) {
          rec.span(part_op_name("head", "bwd", "", (int)j), kTidCompute, [&] { model.head_bwd(x.data(), tgt[j].data(), head[j], b, Tl, scale); });
          head[j] = HeadActs<T>{};  // its saved tensors are dead
        } else if (lay.stage_of(g + 1) == rc.stage) { x = std::move(local[{-1 - g, (int)j}]); local.erase({-1 - g, (int)j}); }
        else rec.span(p2p_op_name(lay.stage_of(g + 1), rc.stage, Pass::bwd, (int)j), kTidPpBwd,
                      [&] { pp->recv(x.data(), X, dtype_of<T>(), lay.stage_of(g + 1), tag(Pass::bwd, g, j)); });
      }
      // Its layers.
      for (long long k = 0; k < lay.chunk_layers(rc.stage, w.chunk); ++k, ++pc) {
        const Piece& pz = pieces[pc];
        const int l = pz.layer;
        bool run_start = pc == 0 || pieces[pc - 1].layer != l || pieces[pc - 1].pass != pz.pass;
        bool run_end = pc + 1 == pieces.size() || pieces[pc + 1].layer != l || pieces[pc + 1].pass != pz.pass;
        const int wl = (int)weight_group(l, L, shared);  // the weight slot position l uses
        enter(pc);
        if (p.zero >= 3 && run_start && !gran.is_off(unit_of_layer(wl))) {  // (granular: gathered as loaded)
          char zn[64];
          std::snprintf(zn, sizeof zn, "zero.allgather.L%02d-L%02d.mb%d", l, l, (int)j);
          rec.span(zn, kTidZero, [&] { all_gather_unit(unit_of_layer(wl)); });
        }
        if (run_start && gran.is_off(unit_of_layer(wl))) {  // granular: the run's loaded copy (zparam: gathered)
          const int u = unit_of_layer(wl);
          T* d = gran.device_copy(run_of_piece[pc]);
          if (zparam) {  // the loaded slices and the device's (experts only: the dense part) gathered, the copy freed
            gather_layer(u, d);
            gran.drop(run_of_piece[pc]);
          } else {
            gl.each_view(dev_end[u], units[u].b, [&](size_t v, long long lo, long long, long long at) { ptab[v] = d + at - lo; });
          }
        }
        const double piece_t0 = rec.on ? rec.now() : 0;
        LayerActs<T>& a = acts[(size_t)l * m + j];
        if (fwd) {
          a.x_in = std::move(x);  // saved as the layer's input (layer_fwd reads it in place)
          Buf<T> y(X);
          model.layer_fwd(wl, a.x_in.data(), y.data(), a, b, Tl);
          x = std::move(y);
          if (p.recompute == Recompute::full) a.clear_all_but_input();
          if (p.recompute == Recompute::selective) { a.att.clear(); a.att.shrink_to_fit(); }
        } else {
          if (p.recompute == Recompute::full) {
            // The saved input is read in place; the recomputed output is not needed.
            Buf<T> y(X);
            model.layer_fwd(wl, a.x_in.data(), y.data(), a, b, Tl);
          } else if (p.recompute == Recompute::selective) {  // rebuild the attention probabilities
            long Bl, Hl, Kl, Dh;
            model.attn_dims(b, Bl, Hl, Kl, Dh);
            Buf<T> out(a.attn.size());
            if (p.cp > 1) {
              a.att.resize((size_t)cpx.att_elems(Bl, Hl));
              cp_attention_fwd(cpx, out.data(), a.att.data(), a.q.data(), a.k.data(), a.v.data(), Bl, Hl, Kl, Dh);
            } else {
              a.att.resize((size_t)Bl * Hl * Tn * Tn);
              ops::attention_fwd(out.data(), a.att.data(), a.q.data(), a.k.data(), a.v.data(), Bl, Tn, Hl, Kl, Dh);
            }
          }
          grad_acquire(unit_of_layer(wl));
          model.layer_bwd(wl, x.data(), x.data(), a, b, Tl);  // in place: x becomes the input gradient
          a = LayerActs<T>{};
          if (p.zero >= 2 && p.data_ranks() > 1 && run_end) {
            if (model.sp) sp_reduce_layer(wl, units[unit_of_layer(wl)].a, units[unit_of_layer(wl)].b);
            reduce_scatter_unit(unit_of_layer(wl));
          } else if (run_end && gran.is_off(unit_of_layer(wl))) {  // granular: the run's gradient to the host
            const int ui = unit_of_layer(wl);
            if (model.sp) sp_reduce_layer(wl, dev_end[ui], units[ui].b);  // (the device part: at the step's end)
            gran.grad_to_host(gran.grad(ui), ugrad[ui].data(), units[ui].b - dev_end[ui]);
            grad_release(ui);
          }
        }
        if (run_end) param_release(unit_of_layer(wl));
        if (run_end && gran.is_off(unit_of_layer(wl))) gran.end_run(run_of_piece[pc]);  // the next loads
        if (rec.on) {
          rec.ev.push_back({part_op_name(part_name(l), fwd ? "fwd" : "bwd", "", (int)j), kTidCompute, piece_t0, rec.now()});
          rec.sample_memory();
        }
      }
      // Output of the item.
      if (fwd) {
        if (g == nchunks - 1) {
          if (!model.sp) head[j].x_in = std::move(x);  // the head saves its input (SP: the gathered rows)
          const T* hx = model.sp ? x.data() : head[j].x_in.data();
          rec.span(part_op_name("head", "fwd", "", (int)j), kTidCompute, [&] { loss += (double)model.head_fwd(hx, tgt[j].data(), head[j], b, Tl); });
          Buf<T>().swap(x);
        } else if (lay.stage_of(g + 1) == rc.stage) local[{g + 1, (int)j}] = std::move(x);
        else { sendbufs.push_back(std::move(x)); pp->isend(sendbufs.back().data(), X, dtype_of<T>(), lay.stage_of(g + 1), tag(Pass::fwd, g + 1, j)); }
      } else {
        if (g == 0) rec.span(part_op_name("embed", "bwd", "", (int)j), kTidCompute, [&] { model.embed_bwd(x.data(), in[j].data(), b, Tl); });
        else if (lay.stage_of(g - 1) == rc.stage) local[{-1 - (g - 1), (int)j}] = std::move(x);
        else { sendbufs.push_back(std::move(x)); pp->isend(sendbufs.back().data(), X, dtype_of<T>(), lay.stage_of(g - 1), tag(Pass::bwd, g - 1, j)); }
      }
    }
    pp->wait_sends();
    sendbufs.clear();
    rec.span("dp+optimizer", kTidDp, [&] {
      if (store) store->host_phase_begin((int)run_layer.size());  // the ADAM moment
      std::optional<BackendScope> host;  // (the CPU's Adam on the pinned flat buffers)
      if (host_flat) host.emplace(cpu_backend());
      optimizer_step(step, warmup, res);
      host.reset();  // (the store moves the parameters up through the device backend)
      if (store) store->host_phase_end();
    });
    if (hopt.on()) record_offload_step(res.offload, "optimizer", hopt.h2d_bytes, hopt.d2h_bytes, hopt.pinned_bytes(), nullptr);
    if (gran.on())
      record_offload_step(res.offload, "granular", gran.h2d_bytes, gran.d2h_bytes, gran.pinned_bytes(),
                          &gran.peak_loaded_bytes);
    if (store) record_chunk_step(res.offload, store->end_step());
    double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    prof::step_end(step);
    // Mean loss over the global batch: the last stage's tp rank 0 of every dp rank contributes.
    double contrib = (rc.stage == last_stage && rc.tp == 0) ? loss : 0.0;
    world.all_reduce_sum(&contrib, 1, Dtype::f64);
    double mean_loss = contrib / ((double)sc.training.global_batch * (double)Tn);
    res.losses.push_back(mean_loss);
    res.step_time_s.push_back(dt);
    if (step > first) { tok_after_first += (double)sc.training.global_batch * Tn; time_after_first += dt; }
    // A signal on any rank stops every rank after this step (the flag is summed over the world).
    double stop = pending_stop_signal();
    world.all_reduce_sum(&stop, 1, Dtype::f64);
    const bool stopping = stop > 0 && step + 1 < o.steps;
    const bool ckpt = !o.checkpoint_dir.empty() &&
                      ((o.checkpoint_every > 0 && (step + 1) % o.checkpoint_every == 0) || (stopping && o.checkpoint_every > 0));
    if (ckpt) {
      save_checkpoint(step + 1);
      res.last_checkpoint = checkpoint_step_dir(o.checkpoint_dir, step + 1);
      if (world.rank() == 0) prune_checkpoints(o.checkpoint_dir, o.keep_checkpoints, step + 1);
    }
    if (world.rank() == 0) log_iteration(step, dt, mean_loss);
    if (stopping) {
      res.stop_signal = pending_stop_signal() ? pending_stop_signal() : 15;  // another rank's (mpirun forwards TERM)
      break;
    }
  }
  res.delink_step = delink_step;
  if (store) finish_offload(res.offload, *store, (long long)p.offload.chunk_elements);
  if (!o.trace.empty()) res.trace = rec.trace_events(world.rank(), rc.stage, o.steps - 1);
  // (a resume from a checkpoint at or past --steps ran no step: nothing to measure)
  res.tokens_per_s = time_after_first > 0 ? tok_after_first / time_after_first
                     : res.step_time_s.empty() ? 0.0
                                               : (double)sc.training.global_batch * Tn / std::max(1e-12, res.step_time_s.back());
  const double mine[2] = {peak_memory_of(current_backend()), peak_rss_bytes()};
  std::vector<double> gathered(2 * (size_t)world.size());
  world.all_gather(mine, gathered.data(), 2, Dtype::f64);
  res.peak_memory_bytes.assign(world.size(), 0);
  res.peak_host_memory_bytes.assign(world.size(), 0);
  for (int r = 0; r < world.size(); ++r)
    res.peak_memory_bytes[r] = gathered[2 * r], res.peak_host_memory_bytes[r] = gathered[2 * r + 1];
  double held[2] = {(double)(params.size() + pslice.size() + gran.hp.size()),
                    (double)(hopt.on() ? hopt.m1.size() : m1.size() + gran.m1.size())};
  std::vector<double> all_held(2 * world.size());
  world.all_gather(held, all_held.data(), 2, Dtype::f64);
  for (int r = 0; r < world.size(); ++r) {
    res.param_elements.push_back(all_held[2 * r]);
    res.moment_elements.push_back(all_held[2 * r + 1]);
  }
  return res;
}

}  // namespace detail

using detail::RankRun;

RunResult run_training(const Scenario& sc, const RunOptions& o, Comm& world) {
#ifdef __GLIBC__
  // Keep freed memory in the process (the CPU analogue of a GPU framework's caching allocator): every
  // micro-batch allocates and frees the same activation sizes, and handing them back to the OS (heap trim,
  // munmap of blocks over the mmap threshold) would page-fault them in again each time. 32 MiB is glibc's
  // largest mmap threshold; blocks above it (none in the validate models) are still mapped per allocation.
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
#endif
  std::string why;
  const Backend* backend = find_backend(o.backend, why);
  if (!backend) throw InputError({why});
  if (sc.plan.cp > 1 && !(o.fp64 ? backend->f64.attention_fwd_kv != nullptr : backend->f32.attention_fwd_kv != nullptr))
    throw InputError({std::string("$.plan.cp: context parallelism needs the attention_fwd_kv op, which backend ") +
                      backend->name + " does not have yet (use --backend cpu or emu)"});
  BackendScope on_backend(*backend);  // every ops:: call of this rank's run goes to it
  // Device memory the host cannot read: every collective and send stages device buffers through pinned host
  // memory (exec/comm_staged.cpp). The CPU backend passes tensors to the communicator as they are.
  std::unique_ptr<Comm> staged = backend->host_accessible ? nullptr : staged_comm(world, *backend);
  Comm& comm = staged ? *staged : world;
  try {
    if (o.fp64) { RankRun<double> r(sc, o, comm); return r.run(); }
    RankRun<float> r(sc, o, comm);
    return r.run();
  } catch (const std::bad_alloc&) {
    if (!backend->peak_device_bytes) throw;  // host memory: the process's own failure
    throw InputError({device_oom_message(sc, *backend)});
  }
}

}  // namespace tp::exec
