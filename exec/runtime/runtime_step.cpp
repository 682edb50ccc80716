// runtime_step: RankRun's step loop (exec/runtime/runtime_rank.hpp gives the design), driven by the shared schedule
// (schedule/pipeline: stage_layout, plan_order) exactly as the simulator costs it: per step the batch upload, the
// work items in order (each one's input, its layers as pieces, its output), then the optimizer, the loss and
// the checkpoint. Invariant: pieces run in the schedule's order, and a run's parameters (chunks, ZeRO-3
// gathers, granular loads) are in place before its first piece and released after its last.
#include "exec/runtime/runtime_loop.hpp"

#include <cstdio>
#include <stdexcept>
#include <ctime>

namespace tp::exec {

// The pseudo phase's steps: its tokens over its own batch (--delink-step overrides); at or past the last step
// the run stays in the pseudo phase.
long delink_step_of(const Scenario& sc, const RunOptions& o) {
  const double pseudo_gb = (double)(sc.delink.global_batch > 0 ? sc.delink.global_batch : sc.training.global_batch);
  const long at = o.delink_step >= 0 ? o.delink_step : std::lround(sc.delink.tokens / (pseudo_gb * (double)sc.training.seq_len));
  return std::max(1L, at);
}

std::vector<uint16_t> load_run_tokens(const std::string& path, long long vocab);

namespace detail {

template <class T>
std::vector<int> RankRun<T>::run_parts(const Loop& lp, int r) const {
  const long long l = lp.run_layer[r];  // the units run r touches (the head reads the tied wte: the embedding too)
  std::vector<int> parts = {unit_of_layer(weight_group(l, L, shared))};
  if (l == 0) parts.push_back(0);
  if (l == L - 1) { parts.push_back((int)L + 1); parts.push_back(0); }
  return parts;
}

template <class T>
void RankRun<T>::prepare_loop(Loop& lp) {
  if (sc.delink.on()) {
    shared = sc.delink.unique_layers;
    delink_step = delink_step_of(sc, o);
  }
  lp.tokens = load_run_tokens(o.data, sc.model.vocab);
  lp.N = b * Tl;
  // Elements of the residual stream between pieces: SP row shard, 2D [B/q Tn, C/q] block, else [N, C].
  lp.X = model.two_d ? model.d2.lay.act_rows(b, Tl) * model.d2.lay.act_cols() : (model.sp ? lp.N / p.tp : lp.N) * C;
  lp.warmup = o.warmup_steps >= 0 ? o.warmup_steps : std::max(1, o.steps / 10);
}

// The phase's batch (Pseudo-to-Real: the pseudo phase's plan.delink.global_batch, else the training batch): its
// micro-batches per rank, the schedule's pieces and runs, the buffers per micro-batch and the loss weights.
template <class T>
void RankRun<T>::enter_phase(Loop& lp, bool pseudo) {
  gb = pseudo && sc.delink.global_batch > 0 ? sc.delink.global_batch : sc.training.global_batch;
  m = gb / ((long long)p.dp * b);  // (as Plan::num_microbatches; the scenario checks that the pseudo batch divides)
  Plan phase = p;
  phase.num_microbatches = m;
  lp.order = plan_order(phase, L, rc.stage);
  lp.exchanges = p.pp > 1 ? plan_exchanges(phase, L)[(size_t)rc.stage] : std::vector<Exchange>(lp.order.size() + 1);
  lp.pieces = order_pieces(lp.order, lay, rc.stage);
  split_runs(lp.pieces, lp.run_of_piece, lp.run_layer);
  lp.last_bwd_piece.assign(units.size(), lp.pieces.size());
  for (size_t pc = 0; pc < lp.pieces.size(); ++pc)
    if (lp.pieces[pc].pass == Pass::bwd) lp.last_bwd_piece[unit_of_layer(weight_group(lp.pieces[pc].layer, L, shared))] = pc;
  if (store)
    check_runs_fit<T>(*store, lp.run_layer, [&](int r) { return run_parts(lp, r); }, (long long)p.offload.chunk_elements);
  lp.acts.clear();
  lp.acts.resize((size_t)L * m);
  lp.head.clear();
  lp.head.resize(m);
  lp.host_in.resize(b * Tn);
  lp.host_tgt.resize(b * Tn);
  lp.in.resize(m);
  lp.tgt.resize(m);
  for (long long j = 0; j < m; ++j) { lp.in[j].resize(lp.N); lp.tgt[j].resize(lp.N); }
  lp.scale = T(1.0 / ((double)gb * (double)Tn));
  model.d1.moe_aux_weight = sc.model.moe.aux_loss_coeff * (double)b / (double)gb;  // per micro-batch
}

// Before the first use of piece k's parameters: its run's chunks resident and pinned (chunked offload).
template <class T>
void RankRun<T>::enter(Loop& lp, size_t k) {
  if (!store || lp.run_of_piece[k] == lp.cur_run) return;
  lp.cur_run = lp.run_of_piece[k];
  store->access(lp.cur_run, run_parts(lp, lp.cur_run));
}

// Frees the buffers of completed pipeline sends.
template <class T>
void RankRun<T>::reap(Loop& lp) {
  if (lp.sendbufs.empty()) return;
  for (int k = pp->reap_sends(); k > 0 && !lp.sendbufs.empty(); --k) lp.sendbufs.pop_front();
}

template <class T>
int RankRun<T>::tag(Pass ps, int g, long long j) const {
  return ((ps == Pass::fwd ? 0 : 1) * nchunks + g) * (int)m + (int)j;
}

// Rank 0's iteration line with Megatron-LM's fields, every log_every steps whatever stderr is (log tools read
// it); between them, on a terminal, the interactive progress line. As Megatron-LM, the line opens with the wall
// clock and its time per iteration (and the throughputs from it) is the mean over the steps since the last line,
// not the last step's. --metrics: the same numbers as one JSON line (exec/runtime/train.hpp RunOptions::metrics).
template <class T>
void RankRun<T>::log_iteration(Loop& lp, int step, double dt, double loss) const {
  const int log_every = o.log_every >= 0 ? o.log_every : (o.steps <= 20 ? 1 : 10);
  if (log_every > 0 && ((step + 1) % log_every == 0 || step + 1 == o.steps)) {
    const std::vector<double>& ts = lp.res.step_time_s;  // this run's steps (after a resume: from its first)
    const size_t n = std::min(ts.size(), (size_t)std::max(1, step + 1 - lp.last_logged));
    double sum_s = 0;
    for (size_t i = ts.size() - n; i < ts.size(); ++i) sum_s += ts[i];
    const double mean_s = n > 0 ? sum_s / (double)n : dt;
    lp.last_logged = step + 1;
    const double model_flops = megatron_flops_per_iteration(sc.model, gb, Tn, false);
    const double tflops = model_flops / mean_s / world.size() / 1e12, tokens_s = (double)gb * Tn / mean_s;
    const double lr = learning_rate(o, step, lp.warmup), peak_mb = peak_memory_of(current_backend()) / 1e6;
    const double gnorm = lp.res.grad_norm.empty() ? 0.0 : lp.res.grad_norm.back();
    char stamp[32];
    const std::time_t now = std::time(nullptr);
    std::strftime(stamp, sizeof stamp, "%Y-%m-%d %H:%M:%S", std::localtime(&now));
    std::fprintf(stderr,
                 "%s [%s] iteration %8d/%8d | consumed samples: %12lld | elapsed time per iteration (ms): %.1f | "
                 "throughput per GPU (TFLOP/s/GPU): %.4f | tokens per second: %.0f | learning rate: %.6E | "
                 "global batch size: %5lld | lm loss: %.6E | grad norm: %.4f | peak memory (MB): %.1f |\n",
                 o.progress ? "\r" : "", stamp, step + 1, o.steps, (long long)(step + 1) * gb, mean_s * 1e3, tflops,
                 tokens_s, lr, gb, loss, gnorm, peak_mb);
    if (o.metrics) {
      const json line = {{"step", step + 1}, {"consumed_samples", (long long)(step + 1) * gb}, {"loss", loss},
                         {"grad_norm", gnorm}, {"learning_rate", lr}, {"iteration_time_s", mean_s},
                         {"iterations_averaged", (long long)n}, {"tokens_per_s", tokens_s}, {"tflops_per_gpu", tflops},
                         {"peak_memory_bytes", peak_mb * 1e6}, {"timestamp", stamp}, {"unix_time_s", (long long)now}};
      std::fprintf(o.metrics, "%s\n", line.dump().c_str());
      std::fflush(o.metrics);
    }
  } else if (o.progress) {
    std::fprintf(stderr, "\rstep %d/%d  loss %.4f  %.0f tokens/s  ETA %.0f s   ", step + 1, o.steps, loss,
                 (double)gb * Tn / dt, dt * (o.steps - step - 1));
    if (step + 1 == o.steps) std::fprintf(stderr, "\n");
  }
  std::fflush(stderr);
}

// --resume: the step after the latest complete checkpoint (0 without one).
template <class T>
int RankRun<T>::resume(RunResult& res) {
  if (!o.resume || o.checkpoint_dir.empty()) return 0;
  int first = 0;
  std::vector<std::string> skipped;
  int other_world = 0;
  auto at = latest_complete(o.checkpoint_dir, world.size(), &skipped, &other_world);
  if (world.rank() == 0)
    for (const std::string& s : skipped) std::fprintf(stderr, "skipped checkpoint %s\n", s.c_str());
  if (!at && other_world > 0 && !o.resume_or_start)  // complete checkpoints, of another job size: say so
    throw InputError({o.checkpoint_dir + ": --resume found complete checkpoints written by a job of " +
                      std::to_string(other_world) + " ranks; this job has " + std::to_string(world.size()) +
                      " (run it with " + std::to_string(other_world) + " ranks, or use --resume-or-start to start at step 0)"});
  if (!at && !skipped.empty() && !o.resume_or_start)
    throw InputError({o.checkpoint_dir + ": --resume found only incomplete or corrupt checkpoints (listed above); "
                      "not restarting from step 0 (use --resume-or-start to allow it)"});
  if (at) {
    first = (int)load_checkpoint(*at);
    if (store) store->refresh_copies();  // (bf16 chunks: their host copy and the mirror of the loaded parameters)
    res.last_checkpoint = checkpoint_step_dir(o.checkpoint_dir, *at);
    if (world.rank() == 0 && first >= o.steps)
      std::fprintf(stderr, "nothing to do: the checkpoint at step %d is at or past --steps %d (%s)\n", first, o.steps,
                   res.last_checkpoint.c_str());
    else if (world.rank() == 0)
      std::fprintf(stderr, "resumed from step %d: %s\n", first, res.last_checkpoint.c_str());
  } else if (world.rank() == 0) {
    std::fprintf(stderr, "no complete checkpoint in %s: starting at step 0\n", o.checkpoint_dir.c_str());
  }
  return first;
}

// The step's start: gradients zeroed, the micro-batches' tokens uploaded, ZeRO-3's ends gathered.
template <class T>
void RankRun<T>::begin_step(Loop& lp, int step) {
  ops::fill(grads.data(), T(0), (long)grads.size());
  if (store) store->zero_resident_grads();
  lp.cur_run = -1;
  if (p.zero >= 2) ops::fill(gshard.data(), T(0), (long)gshard.size());
  if (w16) w16->next_step();  // (the optimizer, a delink or a resume changed the weights: every copy is stale)
  if (gran.on()) gran.begin_step(lp.run_layer, shared, p.offload.prefetch_layers);  // (the runs change at a delink)
  for (long long j = 0; j < m; ++j) {
    fill_micro_batch(lp.tokens, BatchSpec{(int)Tn, (int)b, o.seed}, step, (long)((rc.dp / p.cp * m + j) * b),
                     lp.host_in.data(), lp.host_tgt.data());
    if (p.cp > 1) {  // in place: a local row's global position is never before it
      cp_select_tokens(cpx, lp.host_in.data(), lp.host_in.data(), (long)b);
      cp_select_tokens(cpx, lp.host_tgt.data(), lp.host_tgt.data(), (long)b);
    }
    upload(lp.in[j].data(), lp.host_in.data(), lp.N);
    upload(lp.tgt[j].data(), lp.host_tgt.data(), lp.N);
  }
  if (p.zero >= 3) {  // the ends once per step; layers before each run below
    if (units[0].owned) all_gather_unit(0);
    if (units[L + 1].owned) all_gather_unit((int)L + 1);
  }
  finish_param_gather(0);  // overlap_param_gather: the ends' updated parameters (the layers' in piece_params)
  finish_param_gather((int)L + 1);
}

// Exchange k of the shared schedule (schedule/exchange.hpp), before work item k: the previous item's output
// (lp.outbox) sent and the inputs it receives (this item's, or a later one's posted early) put in lp.received, as
// one group (NCCL's rendezvous cannot deadlock it).
template <class T>
void RankRun<T>::exchange_at(Loop& lp, size_t k) {
  const Exchange& e = lp.exchanges[k];
  if (e.empty()) return;
  std::vector<P2pOp> ops;
  const P2pStep* named = &e.front();  // the trace names the first receive, else the send
  for (const P2pStep& st : e) {
    const int tg = tag(st.pass, st.model_chunk, st.microbatch);
    if (st.send) {
      if (lp.outbox.empty()) throw std::logic_error("pipeline exchange " + std::to_string(k) + ": " + describe(st) + " has no output");
      lp.sendbufs.push_back(std::move(lp.outbox));
      lp.outbox = Buf<T>();
      ops.push_back({true, lp.sendbufs.back().data(), lp.X, dtype_of<T>(), st.peer, tg});
    } else {
      Buf<T>& r = lp.received[{(int)st.pass, st.model_chunk, st.microbatch}];  // (map nodes do not move)
      r.resize(lp.X);
      ops.push_back({false, r.data(), lp.X, dtype_of<T>(), st.peer, tg});
      if (named->send) named = &st;
    }
  }
  const int from = named->send ? rc.stage : named->peer, to = named->send ? named->peer : rc.stage;
  rec.span(p2p_op_name(from, to, named->pass, named->microbatch), named->pass == Pass::fwd ? kTidPpFwd : kTidPpBwd,
           [&] { pp->exchange(ops); });
}

// The input of work item k (w: micro-batch j, model chunk g) into x, after its exchange: the embedding, a local
// chunk's output, or what an exchange received; backward: the head's gradient, a local chunk's, or received.
template <class T>
void RankRun<T>::item_input(Loop& lp, size_t k, const WorkItem& w, int g, long long j, Buf<T>& x) {
  const bool fwd = w.pass == Pass::fwd;
  exchange_at(lp, k);
  const bool local = fwd ? g != 0 && lay.stage_of(g - 1) == rc.stage : g != nchunks - 1 && lay.stage_of(g + 1) == rc.stage;
  if (fwd && g == 0) {
    x.resize(lp.X);
    rec.span(part_op_name("embed", "fwd", "", (int)j), kTidCompute, [&] { model.embed_fwd(x.data(), lp.in[j].data(), b, Tl); });
  } else if (!fwd && g == nchunks - 1) {
    x.resize(lp.X);
    rec.span(part_op_name("head", "bwd", "", (int)j), kTidCompute,
             [&] { model.head_bwd(x.data(), lp.tgt[j].data(), lp.head[j], b, Tl, lp.scale); });
    lp.head[j] = HeadActs<T>{};  // its saved tensors are dead
  } else if (local) {
    const std::pair<int, int> key{fwd ? g : -1 - g, (int)j};
    x = std::move(lp.local[key]);
    lp.local.erase(key);
  } else {
    auto it = lp.received.find({(int)w.pass, g, (int)j});
    if (it == lp.received.end()) throw std::logic_error("pipeline exchanges: " + chunk_op_name(g, w.pass, (int)j) + "'s input was never received");
    x = std::move(it->second);
    lp.received.erase(it);
  }
}

// The output of work item w: forward, the head's loss, a local chunk's input, or the outbox (the next exchange
// sends it); backward, the embedding's gradient, a local chunk's, or the outbox. Returns the head's loss (0 otherwise).
template <class T>
double RankRun<T>::item_output(Loop& lp, const WorkItem& w, int g, long long j, Buf<T>& x, double* loss_to) {
  double loss = 0;
  if (w.pass == Pass::fwd) {
    if (g == nchunks - 1) {
      if (!model.sp) lp.head[j].x_in = std::move(x);  // the head saves its input (SP: the gathered rows)
      const T* hx = model.sp ? x.data() : lp.head[j].x_in.data();
      rec.span(part_op_name("head", "fwd", "", (int)j), kTidCompute,
               [&] { loss = (double)model.head_fwd(hx, lp.tgt[j].data(), lp.head[j], b, Tl, loss_to); });
      Buf<T>().swap(x);
    } else if (lay.stage_of(g + 1) == rc.stage) lp.local[{g + 1, (int)j}] = std::move(x);
    else lp.outbox = std::move(x);  // (sent by the next exchange)
  } else {
    if (g == 0) rec.span(part_op_name("embed", "bwd", "", (int)j), kTidCompute, [&] { model.embed_bwd(x.data(), lp.in[j].data(), b, Tl); });
    else if (lay.stage_of(g - 1) == rc.stage) lp.local[{-1 - (g - 1), (int)j}] = std::move(x);
    else lp.outbox = std::move(x);  // (sent by the next exchange)
  }
  return loss;
}

// ZeRO-3 (zparam): the next run's layer gathered a run ahead, at this run's start (DeepSpeed's and FSDP's prefetch;
// the simulator's two gathered runs, sim/program_build_rank.cpp): the all-gathers are started (non-blocking, so a
// device communicator runs them on its stream under this run's compute) and waited for when the next run starts
// (piece_params). Not across steps (the optimizer updates the slices in between), not for the layer of this run,
// offloaded (granular: gathered as loaded) or chunked layers.
template <class T>
void RankRun<T>::prefetch_next_run(Loop& lp, size_t pc) {
  if (!zparam || store) return;
  size_t q = pc;
  while (q < lp.pieces.size() && lp.run_of_piece[q] == lp.run_of_piece[pc]) ++q;
  if (q == lp.pieces.size()) return;
  const Piece& nx = lp.pieces[q];
  const int u = unit_of_layer(weight_group(nx.layer, L, shared));
  if (u == unit_of_layer(weight_group(lp.pieces[pc].layer, L, shared)) || gran.is_off(u) || !uparam[u].empty()) return;
  char zn[64];
  std::snprintf(zn, sizeof zn, "zero.allgather.L%02d-L%02d.mb%d", nx.layer, nx.layer, lp.order[(size_t)nx.item].microbatch);
  rec.span(zn, kTidZero, [&] { gather_layer(u, nullptr, true); });  // (zparam, a layer unit: all_gather_unit's way)
  prefetched[u] = 1;
}

// Before piece pc's layer runs: ZeRO-3's all-gather at its run's start, or granular offload's loaded copy.
template <class T>
void RankRun<T>::piece_params(Loop& lp, size_t pc, long long j, bool run_start) {
  const int l = lp.pieces[pc].layer;
  const int wl = (int)weight_group(l, L, shared);  // the weight slot position l uses
  finish_param_gather(unit_of_layer(wl));  // (overlap_param_gather: its updated parameters, at its first read)
  if (p.zero >= 3 && run_start && !gran.is_off(unit_of_layer(wl))) {  // (granular: gathered as loaded)
    const int u = unit_of_layer(wl);
    if (!(zparam && prefetched[u])) {
      char zn[64];
      std::snprintf(zn, sizeof zn, "zero.allgather.L%02d-L%02d.mb%d", l, l, (int)j);
      rec.span(zn, kTidZero, [&] { all_gather_unit(u); });
    }
    if (zparam && prefetched[u]) wait_gather(u);  // (the prefetch's all-gathers: complete before the layer reads them)
    if (zparam) prefetched[u] = 0;
    prefetch_next_run(lp, pc);
  }
  if (run_start && gran.is_off(unit_of_layer(wl))) {  // granular: the run's loaded copy (zparam: gathered)
    const int u = unit_of_layer(wl);
    T* d = gran.device_copy(lp.run_of_piece[pc]);
    if (zparam) {  // the loaded slices and the device's (experts only: the dense part) gathered, the copy freed
      gather_layer(u, d);
      gran.drop(lp.run_of_piece[pc]);
    } else {
      gl.each_view(dev_end[u], units[u].b, [&](size_t v, long long lo, long long, long long at) { ptab[v] = d + at - lo; });
    }
  }
}

// The backward of piece pc's layer (after its recomputation, as the plan says), in place on x, and at its run's
// end the gradient's reduce-scatter (ZeRO >= 2) or, under granular offload, its copy to the host.
template <class T>
void RankRun<T>::piece_backward(Loop& lp, size_t pc, LayerActs<T>& a, Buf<T>& x, bool run_end) {
  const int wl = (int)weight_group(lp.pieces[pc].layer, L, shared);
  const bool flash = p.attention == Attention::flash;
  const bool full = recomputes_layer(lp.pieces[pc].layer);
  if (bf16_acts()) a.unpack_bf16(flash);  // (what the forward marked stays packed: LayerActs::stay16)
  if (full) {
    // The saved input is read in place; the recomputed output is not needed.
    Buf<T> y(lp.X);
    model.layer_fwd(wl, a.x_in.data(), y.data(), a, b, Tl);
  } else if (recomputes_probs()) {  // rebuild the probabilities
    long Bl, Hl, Kl, Dh;
    model.attn_dims(b, Bl, Hl, Kl, Dh);
    Buf<T> out((size_t)(Bl * Tl * Hl * Dh));  // (the attention output: attn may be held packed)
    if (!a.attn.empty() && a.attn.size() != out.size()) throw std::logic_error("selective recompute: attention output size");
    if (p.cp > 1) {
      a.att.resize((size_t)cpx.att_elems(Bl, Hl));
      cp_attention_fwd(cpx, out.data(), a.att.data(), a.q.data(), a.k.data(), a.v.data(), Bl, Hl, Kl, Dh);
    } else {
      a.att.resize((size_t)Bl * Hl * Tn * Tn);
      ops::attention_fwd(out.data(), a.att.data(), a.q.data(), a.k.data(), a.v.data(), Bl, Tn, Hl, Kl, Dh);
    }
  }
  // bf16: what was recomputed is rounded as the forward's saved tensors were, so recompute changes no result (full:
  // every saved tensor again; selective: only the rebuilt probabilities)
  if (bf16_acts() && full) {
    a.pack_bf16(flash);
    a.unpack_bf16(flash);
  } else if (bf16_acts() && recomputes_probs()) {
    round_bf16(a.att);
  }
  grad_acquire(unit_of_layer(wl));
  model.layer_bwd(wl, x.data(), x.data(), a, b, Tl);  // in place: x becomes the input gradient
  a = LayerActs<T>{};
  if (p.zero >= 2 && p.data_ranks() > 1 && run_end) {
    if (model.sp) sp_reduce_layer(wl, units[unit_of_layer(wl)].a, units[unit_of_layer(wl)].b);
    // (non-blocking, unless optimizer offload sends the unit's reduced slices down after its last backward, or the
    // shard lives in chunks that move or in host memory)
    reduce_scatter_unit(unit_of_layer(wl), !grads_down_early(unit_of_layer(wl)) && !store && !host_flat);
    if (pc == lp.last_bwd_piece[unit_of_layer(wl)] && grads_down_early(unit_of_layer(wl)))
      send_grads_down(unit_of_layer(wl));  // optimizer offload: this rank's reduced slices, final now
  } else if (run_end && gran.is_off(unit_of_layer(wl))) {  // granular: the run's gradient to the host
    const int ui = unit_of_layer(wl);
    if (model.sp) sp_reduce_layer(wl, dev_end[ui], units[ui].b);  // (the device part: at the step's end)
    gran.grad_to_host(gran.grad(ui), ugrad[ui].data(), units[ui].b - dev_end[ui]);
    grad_release(ui);
  } else if (pc == lp.last_bwd_piece[unit_of_layer(wl)] && grads_down_early(unit_of_layer(wl))) {
    send_grads_down(unit_of_layer(wl));  // optimizer offload: the unit's final gradients to the host now
  } else if (pc == lp.last_bwd_piece[unit_of_layer(wl)] && overlaps_dp_reduce(unit_of_layer(wl))) {
    // the unit's gradient is complete: its data-parallel reduction starts (plan.overlap_grad_reduce)
    const int ui = unit_of_layer(wl);
    if (model.sp) sp_reduce_layer(wl, units[ui].a, dev_end[ui]);  // (first, as at the step's end)
    char name[48];
    std::snprintf(name, sizeof name, "%s.L%02d", p.zero >= 1 ? "dp.reducescatter" : "dp.allreduce", wl);
    rec.span(name, kTidDp, [&] { dp_reduce_unit(ui, grads_down_after_reduce(ui)); });
    dp_started[ui] = 1;
  }
}

// Piece pc (one layer of work item w, micro-batch j): forward (its input moved into the saved activations, x
// its output) or backward (x in place becomes the input gradient), with the run's parameter and gradient moves.
template <class T>
void RankRun<T>::run_piece(Loop& lp, const WorkItem& w, size_t pc, long long j, Buf<T>& x) {
  const Piece& pz = lp.pieces[pc];
  const int l = pz.layer;
  const bool fwd = w.pass == Pass::fwd;
  const bool run_start = pc == 0 || lp.pieces[pc - 1].layer != l || lp.pieces[pc - 1].pass != pz.pass;
  const bool run_end = pc + 1 == lp.pieces.size() || lp.pieces[pc + 1].layer != l || lp.pieces[pc + 1].pass != pz.pass;
  const int wl = (int)weight_group(l, L, shared);  // the weight slot position l uses
  enter(lp, pc);
  piece_params(lp, pc, j, run_start);
  const double piece_t0 = rec.on ? rec.now() : 0;
  LayerActs<T>& a = lp.acts[(size_t)l * m + j];
  if (fwd) {
    a.x_in = std::move(x);  // saved as the layer's input (layer_fwd reads it in place)
    if (bf16_acts()) a.round_input();  // the layer computes from the input it saves (bf16), packed once
    Buf<T> y(lp.X);
    model.layer_fwd(wl, a.x_in.data(), y.data(), a, b, Tl);
    x = std::move(y);
    if (recomputes_layer(l)) a.clear_all_but_input();
    if (recomputes_probs()) { a.att.clear(); a.att.shrink_to_fit(); }
    if (bf16_acts()) a.pack_bf16(p.attention == Attention::flash);
  } else {
    piece_backward(lp, pc, a, x, run_end);
  }
  if (run_end) param_release(unit_of_layer(wl));
  if (run_end && gran.is_off(unit_of_layer(wl))) gran.end_run(lp.run_of_piece[pc]);  // the next loads
  if (rec.on) {
    rec.ev.push_back({part_op_name(part_name(l), fwd ? "fwd" : "bwd", "", (int)j), kTidCompute, piece_t0, rec.now()});
    rec.sample_memory();
  }
}

// The step's end: the sends drained, the optimizer (the chunk store's ADAM moment), the offload figures, the
// mean loss over the global batch, a checkpoint and the log line. Returns true when a signal stops the run.
template <class T>
bool RankRun<T>::end_step(Loop& lp, int step, int first, double loss, std::chrono::steady_clock::time_point t0) {
  RunResult& res = lp.res;
  pp->wait_sends();
  lp.sendbufs.clear();
  for (size_t u = 0; u < gather_pending.size(); ++u) wait_gather((int)u);  // (none: each prefetch was used)
  finish_param_gathers();  // (none: each was read)
  gran.finish_grads();  // granular: the gradients sent down arrived and added, before the norm and the host Adam
  rec.span("dp+optimizer", kTidDp, [&] {
    if (store) store->host_phase_begin((int)lp.run_layer.size());  // the ADAM moment
    std::optional<BackendScope> host;  // (the CPU's Adam on the pinned flat buffers)
    if (host_flat) host.emplace(cpu_backend());
    optimizer_step(step, lp.warmup, res);
    host.reset();  // (the store moves the parameters up through the device backend)
    if (store) store->host_phase_end();
  });
  if (hopt.on()) {
    record_offload_step(res.offload, "optimizer", hopt.h2d_bytes, hopt.d2h_bytes, hopt.pinned_bytes(), nullptr);
    res.offload.early_d2h_bytes.push_back(std::exchange(hopt.early_d2h_bytes, 0.0));
  }
  if (gran.on())
    record_offload_step(res.offload, "granular", gran.h2d_bytes, gran.d2h_bytes, gran.pinned_bytes(),
                        &gran.peak_loaded_bytes);
  if (store) record_chunk_step(res.offload, store->end_step());
  f8.end_step(world);  // precision fp8: the step's amax over the ranks -> the next step's scales
  if (lp.timer.on()) res.device_step_time_s.push_back(lp.timer.stop_s());  // (before the host clock's end)
  double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  prof::step_end(step);
  // Mean loss over the global batch: the last stage's tp rank 0 of every dp rank contributes.
  double contrib = (rc.stage == last_stage && rc.tp == 0) ? loss : 0.0;
  world.all_reduce_sum(&contrib, 1, Dtype::f64);
  double mean_loss = contrib / ((double)gb * (double)Tn);
  res.losses.push_back(mean_loss);
  res.step_time_s.push_back(dt);
  if (step > first) { lp.tok_after_first += (double)gb * Tn; lp.time_after_first += dt; }
  // A signal on any rank stops every rank after this step (the flag is summed over the world).
  double stop = pending_stop_signal();
  world.all_reduce_sum(&stop, 1, Dtype::f64);
  const bool stopping = stop > 0 && step + 1 < o.steps;
  const bool ckpt = !o.checkpoint_dir.empty() &&
                    ((o.checkpoint_every > 0 && (step + 1) % o.checkpoint_every == 0) || (stopping && o.checkpoint_every > 0));
  if (ckpt) {
    finish_param_gathers();  // (overlap_param_gather: the updated parameters in place before they are saved)
    save_checkpoint(step + 1);
    res.last_checkpoint = checkpoint_step_dir(o.checkpoint_dir, step + 1);
    if (world.rank() == 0) prune_checkpoints(o.checkpoint_dir, o.keep_checkpoints, step + 1);
  }
  if (world.rank() == 0) log_iteration(lp, step, dt, mean_loss);
  if (stopping) res.stop_signal = pending_stop_signal() ? pending_stop_signal() : 15;  // another rank's (mpirun forwards TERM)
  return stopping;
}

// After the last step: the offload summary, the trace, throughput, and every rank's peak memory and held
// elements.
template <class T>
void RankRun<T>::finish_run(Loop& lp) {
  RunResult& res = lp.res;
  res.delink_step = delink_step;
  if (store) finish_offload(res.offload, *store, (long long)p.offload.chunk_elements);
  if (!o.trace.empty()) res.trace = rec.trace_events(world.rank(), rc.stage, o.steps - 1);
  // (a resume from a checkpoint at or past --steps ran no step: nothing to measure)
  res.tokens_per_s = lp.time_after_first > 0 ? lp.tok_after_first / lp.time_after_first
                     : res.step_time_s.empty() ? 0.0
                                               : (double)gb * Tn / std::max(1e-12, res.step_time_s.back());
  const double mine[2] = {peak_memory_of(current_backend()), peak_rss_bytes()};
  std::vector<double> gathered(2 * (size_t)world.size());
  world.all_gather(mine, gathered.data(), 2, Dtype::f64);
  res.peak_memory_bytes.assign(world.size(), 0);
  res.peak_host_memory_bytes.assign(world.size(), 0);
  for (int r = 0; r < world.size(); ++r)
    res.peak_memory_bytes[r] = gathered[2 * r], res.peak_host_memory_bytes[r] = gathered[2 * r + 1];
  size_t par = host_master ? 0 : params.size();  // (host_master: the units' elements, as bf16 copies or T views)
  for (size_t ui = 0; host_master && ui < units.size(); ++ui) par += cbase[ui] >= 0 ? size_t(dev_end[ui] - units[ui].a) : 0;
  double held[2] = {(double)(par + pslice.size() + gran.hp.size()),
                    (double)(hopt.on() ? hopt.m1.size() : m1.size() + gran.m1.size())};
  std::vector<double> all_held(2 * world.size());
  world.all_gather(held, all_held.data(), 2, Dtype::f64);
  for (int r = 0; r < world.size(); ++r) {
    res.param_elements.push_back(all_held[2 * r]);
    res.moment_elements.push_back(all_held[2 * r + 1]);
  }
}

template <class T>
RunResult RankRun<T>::run() {
  setup();
  Loop lp;
  prepare_loop(lp);
  if (start) import_moments();  // (its weights, and the host optimizer's master copy, are in place since setup)
  if (local) {                   // (one layout: the pseudo run's kept state, released once taken)
    import_local_moments();
    *local = LocalState<T>();
  }
  const int first = start || local ? start_step : resume(lp.res);
  lp.res.first_step = first;
  enter_phase(lp, shared > 0);  // (a checkpoint after the delink resumes in the real phase)
  prepare_graph(lp, first);
  for (int step = first; step < o.steps; ++step) {
    if (store) store->begin_step();
    if (step == delink_step) {  // the pseudo phase's run ends here; the real phase runs as its own run
      finish_param_gathers();
      if (handoff) export_state(*handoff);  // (exec/runtime/runtime_relayout.cpp)
      else if (keep) export_local(*keep);
      else throw std::logic_error("delink without a handover (exec/runtime/runtime_relayout.cpp)");
      break;
    }
    auto t0 = std::chrono::steady_clock::now();
    prof::step_begin(step);
    rec.on = !o.trace.empty() && step == o.steps - 1;  // the last step, like the simulator's one step
    rec.t0 = t0;
    lp.timer.start();
    begin_step(lp, step);
    const double loss = step_work(lp, step);
    if (end_step(lp, step, first, loss, t0)) break;
  }
  lp.graph.drop();
  finish_param_gathers();  // (the last step's updated parameters, before anything reads them)
  finish_run(lp);
  return lp.res;
}

#define TP_RUNTIME_STEP_INSTANTIATE(T)                                                            \
  template RunResult RankRun<T>::run();                                                           \
  template void RankRun<T>::reap(Loop&);                                                          \
  template void RankRun<T>::enter(Loop&, size_t);                                                 \
  template void RankRun<T>::item_input(Loop&, size_t, const WorkItem&, int, long long, Buf<T>&);              \
  template void RankRun<T>::exchange_at(Loop&, size_t);          \
  template void RankRun<T>::run_piece(Loop&, const WorkItem&, size_t, long long, Buf<T>&);        \
  template double RankRun<T>::item_output(Loop&, const WorkItem&, int, long long, Buf<T>&, double*);
TP_RUNTIME_STEP_INSTANTIATE(float)
TP_RUNTIME_STEP_INSTANTIATE(double)
#undef TP_RUNTIME_STEP_INSTANTIATE

}  // namespace detail
}  // namespace tp::exec
