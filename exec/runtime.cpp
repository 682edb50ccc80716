// runtime: one rank's training step, driven by the shared schedule (schedule/pipeline: stage_layout, plan_order)
// exactly as the simulator costs it. See train.hpp for the supported plan keys.
// Invariants: a rank only computes and updates the parameter units its pipeline stage owns (its layers; the
// embedding on the first stage and, tied, on the last; the final norm on the last); every rank of a dp group
// holds the same units; sums over ranks are rank-ordered (exec/comm.hpp), so a rerun is bit-identical.
// Units (embedding, each layer, head) are also the ZeRO sharding units: with ZeRO >= 1 dp rank d owns slice d of
// every unit (padded to a multiple of dp) — its optimizer state, and from ZeRO-2 its reduced gradient.
// ZeRO-2/3 reduce-scatter a layer's gradient when a backward run of it ends (every micro-batch with standard
// accumulation, once per step with layered accumulation); ZeRO-3 all-gathers a layer before each run of it.
// With dp > 1 (and no chunked offload) a layer's full gradient is a transient buffer from its backward run's
// start to that reduce-scatter (grad_acquire / grad_release); the rank keeps only its shards (gshard) and the
// ends' (embedding, head) full gradients, reduced in the optimizer step. Likewise ZeRO-3 parameters: a layer is
// held as this rank's slice (pslice; the optimizer, delink and checkpoints use it) and, from its all-gather to
// the run's end, as the gathered unit (uparam; exec/runtime_state.cpp); the ends stay full, gathered per step.
// Loss scale: every token of the global batch weighs 1 / (global_batch * seq_len).
// Parameters and gradients are reached through per-view pointer tables (ptab / gtab; the model's p() / g() and
// the ZeRO copies use them): flat-buffer addresses, except under plan.offload "chunked", where the chunk store
// (exec/chunk_store.hpp) points the views of device-resident chunks at its arena. Chunked offload: the store
// holds the views of the owned units (tensors in the simulator's order, exec/runtime_chunks.cpp; one access
// part per unit); moment k of a step
// = run k of the rank's schedule (the runtime's runs: consecutive pieces on the same layer and pass), whose
// parts are the layer's unit plus the embedding for layer 0 and the head and the (tied) embedding for the last
// layer; the store makes them resident and pins them before the run's first use; the optimizer is the ADAM
// moment (CPU Adam on the flat buffers between host_phase_begin / host_phase_end).
// Optimizer offload (exec/host_optimizer.hpp): no moments on the device; per own range, gradients down, host Adam,
// parameters up. Granular offload (exec/runtime_granular.hpp): an offloaded layer has no device storage between
// runs (cbase / gbase -1; P / Gd give its host copies, with zparam the rank's slice); each run points its views at
// the run's loaded copy (zparam: the slices gathered into uparam, like a ZeRO-3 layer's), its
// backward gradient is a transient buffer sent down at the run's end; the optimizer works on its host memory
// under the CPU backend.
// Memory (what `trainplan validate` measures against the simulator): activations are held as a trainer's
// autograd holds them. A layer's input is moved into its saved activations (no copy of the residual stream),
// the backward runs in place on one [N, C] gradient buffer, saved tensors are freed or overwritten by their
// own gradients after their last reader (gpt.cpp), the head's activations are freed after its backward, and a
// pipeline send's buffer is the sent activation itself, freed as soon as the send completes (reap_sends).
#include <algorithm>
#include <new>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <deque>
#include <map>
#include <optional>
#ifdef __GLIBC__
#include <malloc.h>
#endif

#include "exec/backend.hpp"
#include "exec/checkpoint.hpp"
#include "sim/op_cost.hpp"
#include "exec/chunk_store.hpp"
#include "exec/cp_attention.hpp"
#include "exec/data.hpp"
#include "exec/gpt.hpp"
#include "exec/gpt2d.hpp"
#include "exec/host_optimizer.hpp"
#include "exec/runtime_granular.hpp"
#include "exec/moe.hpp"
#include "exec/ops.hpp"
#include "exec/prof.hpp"
#include "exec/train.hpp"
#include "exec/device_oom.hpp"
#include "exec/runtime_parts.hpp"
#include "schedule/pipeline.hpp"

namespace tp::exec {

std::vector<uint16_t> load_run_tokens(const std::string& path, long long vocab);

namespace {

using detail::Flat;
using detail::Net;
using detail::Recorder;
using namespace detail;

template <class T>
Dtype dtype_of() { return sizeof(T) == 8 ? Dtype::f64 : Dtype::f32; }

template <class T>
struct RankRun {
  const Scenario& sc;
  const Plan& p;
  const RunOptions& o;
  Comm& world;
  RankCoord rc;
  StageLayout lay;
  long long L = 0, m = 0, b = 0, Tn = 0, C = 0;
  long long Tl = 0;  // tokens of a sequence on this rank: Tn / cp (context parallelism, exec/cp_attention.hpp)
  std::unique_ptr<Comm> cpc;  // the cp group (cp > 1)
  std::unique_ptr<Comm> epc;  // the ep group (ep > 1, exec/moe.hpp)
  std::unique_ptr<Comm> edpc;  // the expert-data-parallel group (MoE with ep > 1): dp ranks holding my experts
  CpCtx cpx;
  int nchunks = 0, first_stage = 0, last_stage = 0;
  std::unique_ptr<Comm> tp, dp, pp, emb;
  Flat gl;
  Buf<T> params, grads;                              // backend memory (Buf: exec/gpt.hpp)
  Net<T> model;
  std::unique_ptr<Comm> grid_row, grid_col;  // 2D: my grid row / column inside the tp group
  std::vector<Unit> units;  // 0 embed, 1 + l layer l, L + 1 head
  std::vector<std::pair<long long, long long>> own;  // owned [a, b) ranges (ZeRO slices when zero >= 1)
  std::vector<long long> own_off;                    // offset of each own range in the optimizer state
  Buf<T> m1, m2, gshard;                             // optimizer state and (zero >= 2) reduced gradient, by own range
  std::vector<char> replicated_view;                 // view is replicated across tp ranks
  Recorder rec;
  int shared = 0;                                    // Pseudo-to-Real: > 0 while k weight groups are shared
  std::vector<T*> ptab, gtab;                        // per view: where its params / grads are now
  std::vector<long long> cbase;                      // per unit: its base in the compact parameters (-1: not held)
  std::vector<long long> gbase;                      // per unit: its base in `grads` (-1: not held, or transient)
  // ZeRO >= 2 with dp > 1 (no chunked offload): a layer's full gradient exists only from the start of its
  // backward run to the reduce-scatter at the run's end (ugrad[unit]); `grads` holds the ends (embedding, head),
  // reduced in the optimizer step. Between runs a rank keeps only its reduced shards (gshard).
  bool zgrad = false;
  std::vector<Buf<T>> ugrad;
  bool zparam = false;  // ZeRO-3 with dp > 1, no chunked offload: layers as slices (pslice) + gathered (uparam)
  Buf<T> pslice;
  std::vector<Buf<T>> uparam;
  // The unit holding flat (layout) element i, and the compact addresses of element i of a held unit.
  int unit_at(long long i) const {
    int lo = 0, hi = (int)units.size() - 1;
    while (lo < hi) { int mid = (lo + hi + 1) / 2; if (units[mid].a <= i) lo = mid; else hi = mid - 1; }
    return lo;
  }
  T* P(long long i) {  // (zparam layers: i must lie in this rank's slice)
    int u = unit_at(i);
    if (gran.is_off(u)) return gran.param_at(u, i);  // granular: host memory (zparam: this rank's slice)
    if (zparam && is_layer_unit(u)) {
      size_t k = own_index(u) + (i >= units[u].x);  // its dense or expert slice
      return pslice.data() + own_off[k] + (i - own[k].first);
    }
    return params.data() + cbase[u] + (i - units[u].a);
  }
  T* Gd(long long i) {
    int u = unit_at(i);
    return gran.is_off(u) ? gran.grad_at(u, i) : grads.data() + gbase[u] + (i - units[u].a);
  }
  std::unique_ptr<ChunkStore<T>> store;              // plan.offload "chunked"
  GranularHost<T> gran;   // plan.offload "granular": offloaded layers on the host (exec/runtime_granular.hpp)
  std::vector<int> own_unit;  // per own range: its unit
  std::vector<int> own_seg;   // per own range: its unit's segment (Seg: 0 dense, 1 experts)
  HostOptimizer<T> hopt;  // plan.offload "optimizer": master copy, moments and Adam on the host (exec/host_optimizer.hpp)
  void pull_master() {    // the host master copy = the device parameters of the own ranges
    for (size_t k = 0; hopt.on() && k < own.size(); ++k) hopt.pull(P(own[k].first), own_off[k], own[k].second - own[k].first);
  }
  long delink_step = -1;                             // the step at which the shared weights are delinked
  bool host_flat = false;  // chunked offload, backend not host-accessible: flat buffers in pinned host memory

  RankRun(const Scenario& s, const RunOptions& opt, Comm& w) : sc(s), p(s.plan), o(opt), world(w) {}

  // Segment s of unit ui (Unit): 0 = [a, x) over the dp group, 1 = the experts [x, b) over the expert-dp group.
  struct Seg { long long lo, hi, slice; Comm* c; int n, r; };
  int nseg(int ui) const { return units[ui].x < units[ui].b ? 2 : 1; }
  Seg seg(int ui, int s) const {
    const Unit& u = units[ui];
    if (s == 0) return {u.a, u.x, u.slice, dp.get(), p.data_ranks(), rc.dp};
    if (!edpc) return {u.x, u.b, u.eslice, dp.get(), p.data_ranks(), rc.dp};  // ep = 1: the dp group
    return {u.x, u.b, u.eslice, edpc.get(), edpc->size(), edpc->rank()};
  }
  int unit_of_layer(long long l) const { return 1 + (int)l; }
  bool is_layer_unit(int ui) const { return ui >= 1 && ui <= (int)L; }
  // zgrad: a zeroed full gradient of unit ui, the views' gradients pointing into it (no-op if it exists).
  void grad_acquire(int ui) {
    if ((!zgrad && !gran.is_off(ui)) || !is_layer_unit(ui) || !ugrad[ui].empty()) return;
    const Unit& u = units[ui];
    ugrad[ui].resize(u.b - u.a);
    ops::fill(ugrad[ui].data(), T(0), (long)(u.b - u.a));
    gl.each_view(u.a, u.b, [&](size_t v, long long lo, long long, long long at) { gtab[v] = ugrad[ui].data() + at - lo; });
  }
  void grad_release(int ui) {
    if ((!zgrad && !gran.is_off(ui)) || !is_layer_unit(ui)) return;
    Buf<T>().swap(ugrad[ui]);
    gl.each_view(units[ui].a, units[ui].b, [&](size_t v, long long, long long, long long) { gtab[v] = nullptr; });
  }
  int stage_of_layer(long long l) const { return lay.stage_of_layer(l); }

  void setup() {
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
    model.d1.moe_aux_weight = kMoeAuxCoef * (double)b / (double)sc.training.global_batch;  // per micro-batch
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
    if (p.offload.kind == OffloadKind::granular)
      for (int l : p.offload.layers) goff[unit_of_layer(l)] = units[unit_of_layer(l)].owned;
    for (Unit& u : units) {
      const int ui = int(&u - units.data());
      u.slice = p.zero >= 1 ? (u.x - u.a + p.data_ranks() - 1) / p.data_ranks() : u.x - u.a;
      const int en = seg(ui, 1).n;
      u.eslice = p.zero >= 1 ? (u.b - u.x + en - 1) / en : u.b - u.x;
      // granular host side (offloaded units have no experts: one segment over dp); zparam: the rank's slice
      const bool sliced = zparam && is_layer_unit(ui);
      hlen.push_back(sliced ? u.slice : u.b - u.a);
      horigin.push_back(sliced ? (p.zero >= 1 ? u.a + rc.dp * u.slice : u.a) : u.a);
      if (!u.owned) continue;
      for (int si = 0; si < nseg(ui); ++si) {  // an own range per segment
        const Seg sg = seg(ui, si);
        long long a = p.zero >= 1 ? sg.lo + sg.r * sg.slice : sg.lo;
        long long z = p.zero >= 1 ? std::min(sg.hi, a + sg.slice) : sg.hi;
        own.push_back({a, std::max(a, z)});
        own_unit.push_back(ui);
        own_seg.push_back(si);
        long long& at = goff[ui] ? hstate : state;
        own_off.push_back(at);
        at += sg.slice;  // padded: every own range gets its full slice
      }
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
        if (units[ui].owned && !(zparam && is_layer_unit((int)ui)) && !gran.is_off((int)ui)) { cbase[ui] = n; n += units[ui].b - units[ui].a; }
      zeros(params, n);
      for (size_t ui = 0; ui < units.size(); ++ui)
        if (cbase[ui] >= 0) upload(params.data() + cbase[ui], all.data() + units[ui].a, units[ui].b - units[ui].a);
        else if (gran.is_off((int)ui))
          std::copy(all.data() + gran.origin[ui], all.data() + std::min(units[ui].b, gran.origin[ui] + gran.len[ui]), gran.param((int)ui));
      if (zparam) zeros(pslice, state);
      for (size_t ui = 0; zparam && ui < units.size(); ++ui)
        for (int si = 0; units[ui].owned && is_layer_unit((int)ui) && !gran.is_off((int)ui) && si < nseg((int)ui); ++si) {
          size_t k = own_index((int)ui) + si;
          upload(pslice.data() + own_off[k], all.data() + own[k].first, own[k].second - own[k].first);
        }
      uparam.resize(units.size());
    }
    zgrad = p.zero >= 2 && p.data_ranks() > 1 && p.offload.kind != OffloadKind::chunked;
    {
      long long n = 0;
      gbase.assign(units.size(), -1);
      for (size_t ui = 0; ui < units.size(); ++ui)
        if (units[ui].owned && !(zgrad && is_layer_unit((int)ui)) && !gran.is_off((int)ui)) { gbase[ui] = n; n += units[ui].b - units[ui].a; }
      zeros(grads, n);
      ugrad.resize(units.size());
    }
    if (p.cp > 1) model.d1.cpx = &cpx;
    model.d1.params = model.d2.params = params.data();
    model.d1.grads = model.d2.grads = grads.data();
    for (const ParamView& v : gl.views) {
      bool held = cbase[unit_at(v.offset)] >= 0;  // (granular: null until a run loads its unit)
      ptab.push_back(held ? P(v.offset) : nullptr);
      gtab.push_back(held && gbase[unit_at(v.offset)] >= 0 ? Gd(v.offset) : nullptr);
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

  void sp_reduce_layer(int l) {
    for (size_t v = 0; v < gl.views.size(); ++v)
      if (gl.views[v].layer == l && replicated_view[v])
        tp->all_reduce_sum(gtab[v], gl.views[v].count, dtype_of<T>());
  }

  // Gradient reduce-scatter of one unit over dp into this rank's slice (ZeRO >= 2), accumulated.
  void reduce_scatter_unit(int ui) {
    const Unit& u = units[ui];
    for (int si = 0; si < nseg(ui); ++si) {  // each segment over its group
      const Seg sg = seg(ui, si);
      long long len = sg.hi - sg.lo;
      Buf<T> in(sg.slice * sg.n), out(sg.slice);  // comm buffers: host memory (exec/comm.hpp)
      ops::fill(in.data() + len, T(0), (long)(sg.slice * sg.n - len));  // the padding; the views fill [0, len)
      gl.read_range(gtab, sg.lo, sg.hi, in.data());
      sg.c->reduce_scatter_sum(in.data(), out.data(), sg.slice, dtype_of<T>());
      size_t k = own_index(ui) + si;
      if (gran.is_off(ui)) gran.grad_to_host(Gd(own[k].first), out.data(), own[k].second - own[k].first);  // own slice down
      else ops::accumulate(gshard.data() + own_off[k], out.data(), (long)sg.slice);
    }
    if (zgrad && is_layer_unit(ui)) grad_release(ui);  // the next run starts from a fresh zeroed buffer
    else gl.zero_range(gtab, u.a, u.b);
  }
  // All-gather of one unit's slices over dp into the full parameter buffer (ZeRO-1/2 after the update, ZeRO-3
  // before a run).
  void all_gather_unit(int ui) {
    const Unit& u = units[ui];
    if (zparam && is_layer_unit(ui)) {  // straight into a fresh gathered unit, the views pointing into it
      if (nseg(ui) == 1) gather_unit(*dp, pslice.data() + own_off[own_index(ui)], u.slice, uparam[ui]);
      else {  // [dense slices (slice x dp) | expert slices (eslice x dp / ep)]
        const Seg s0 = seg(ui, 0), s1 = seg(ui, 1);
        uparam[ui].resize((size_t)(s0.slice * s0.n + s1.slice * s1.n));
        s0.c->all_gather(pslice.data() + own_off[own_index(ui)], uparam[ui].data(), s0.slice, dtype_of<T>());
        s1.c->all_gather(pslice.data() + own_off[own_index(ui) + 1], uparam[ui].data() + s0.slice * s0.n, s1.slice, dtype_of<T>());
      }
      T* base = uparam[ui].data();
      gl.each_view(u.a, u.x, [&](size_t v, long long lo, long long, long long at) { ptab[v] = base + at - lo; });
      T* ebase = base + u.slice * seg(ui, 0).n;
      gl.each_view(u.x, u.b, [&](size_t v, long long lo, long long, long long at) { ptab[v] = ebase + at - lo; });
      return;
    }
    if (gran.is_off(ui)) {  // granular (ZeRO 1-2): the updated slices gathered on the host, into the host parameters
      long long a = u.a + rc.dp * u.slice;
      gran.host_all_gather(*dp, ui, u.slice, a, std::min(u.b, a + u.slice), u.b - u.a);
      return;
    }
    for (int si = 0; si < nseg(ui); ++si) {
      const Seg sg = seg(ui, si);
      Buf<T> mine(sg.slice), all(sg.slice * sg.n);
      ops::fill(mine.data(), T(0), (long)sg.slice);
      long long a = sg.lo + sg.r * sg.slice, z = std::min(sg.hi, a + sg.slice);
      if (z > a) gl.read_range(ptab, a, z, mine.data());
      sg.c->all_gather(mine.data(), all.data(), sg.slice, dtype_of<T>());
      gl.write_range(ptab, sg.lo, sg.hi, all.data());
    }
  }
  void param_release(int ui) {  // zparam: the gathered unit is freed at its run's end (granular: its views unset)
    if (!(zparam || gran.is_off(ui)) || !is_layer_unit(ui)) return;
    Buf<T>().swap(uparam[ui]);
    gl.each_view(units[ui].a, units[ui].b, [&](size_t v, long long, long long, long long) { ptab[v] = nullptr; });
  }
  size_t own_index(int ui) const {  // the own range of unit ui's first segment (the next ones follow)
    size_t k = 0;
    for (int i = 0; i < ui; ++i) k += units[i].owned ? nseg(i) : 0;
    return k;
  }

  RunResult run() {
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
            T* d = gran.attach(run_of_piece[pc], zparam ? dp.get() : nullptr, units[u].slice, uparam[u]);
            gl.each_view(units[u].a, units[u].b, [&](size_t v, long long lo, long long, long long at) { ptab[v] = d + at - lo; });
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
              if (model.sp) sp_reduce_layer(wl);
              reduce_scatter_unit(unit_of_layer(wl));
            } else if (run_end && gran.is_off(unit_of_layer(wl))) {  // granular: the run's gradient to the host
              const int ui = unit_of_layer(wl);
              if (model.sp) sp_reduce_layer(wl);
              gran.grad_to_host(gran.grad(ui), ugrad[ui].data(), units[ui].b - units[ui].a);
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

  // Checkpoints (exec/runtime_state.cpp): the compact parameters, the layers' slices (zparam), the optimizer state.
  std::vector<TensorView> state_tensors(int32_t* meta) {
    Dtype d = dtype_of<T>();
    T* mom1 = hopt.on() ? hopt.m1.data() : m1.data();  // optimizer offload: the host's moments
    T* mom2 = hopt.on() ? hopt.m2.data() : m2.data();
    const long nm = hopt.on() ? (long)hopt.m1.size() : (long)m1.size();
    std::vector<TensorView> t = {{"params", d, params.data(), (long)params.size()}, {"m1", d, mom1, nm},
                                 {"m2", d, mom2, nm}, {"meta", Dtype::i32, meta, 2}};
    if (zparam) t.push_back({"pslice", d, pslice.data(), (long)pslice.size()});
    if (gran.on())  // granular: the host parameters and moments
      for (auto [name, b] : {std::pair{"gparams", &gran.hp}, std::pair{"gm1", &gran.m1}, std::pair{"gm2", &gran.m2}})
        t.push_back({name, d, b->data(), (long)b->size()});
    return t;
  }
  void save_checkpoint(long next_step) {
    int32_t meta[2] = {shared, (int32_t)delink_step};
    save_rank_checkpoint(sc, o, world, next_step, state_tensors(meta));
  }
  long load_checkpoint(long step) {
    int32_t meta[2];
    load_rank_checkpoint(sc, o, world.rank(), step, state_tensors(meta));
    shared = meta[0];
    delink_step = meta[1];
    pull_master();
    return step;
  }

  // Pseudo-to-Real: every layer slot gets its weight group's weights and optimizer state (the network function
  // is unchanged at this instant), then the layers train independently. Slots are units of equal size, so a
  // ZeRO slice of slot l is the same slice of its group's slot.
  void delink() {
    if (store) {  // the weights move between slots on the host; the access pattern changes
      store->evict_all();
      store->reset_trace();
    }
    for (long long l = L - 1; l >= 0; --l) {
      long long wg = weight_group(l, L, shared);
      if (wg == l) continue;
      const Unit &src = units[unit_of_layer(wg)], &dst = units[unit_of_layer(l)];
      size_t ks = own_index(unit_of_layer(wg)), kd = own_index(unit_of_layer(l));
      const int us = unit_of_layer(wg), ud = unit_of_layer(l);
      const bool hs = gran.is_off(us), hd = gran.is_off(ud);  // granular: host memory
      if (!zparam) GranularHost<T>::move(P(dst.a), hd, P(src.a), hs, src.b - src.a);
      if (src.owned && dst.owned) {
        if (zparam)  // the slices (granular: on the host)
          GranularHost<T>::move(hd ? gran.param(ud) : pslice.data() + own_off[kd], hd,
                                hs ? gran.param(us) : pslice.data() + own_off[ks], hs, src.slice);
        if (hopt.on()) {
          hopt.copy_moments(own_off[kd], own_off[ks], src.slice);
        } else {
          for (auto [dev, host] : {std::pair{&m1, &gran.m1}, std::pair{&m2, &gran.m2}})
            GranularHost<T>::move((hd ? host->data() : dev->data()) + own_off[kd], hd,
                                  (hs ? host->data() : dev->data()) + own_off[ks], hs, src.slice);
        }
      }
    }
    pull_master();  // the slots' new weights into the host master copy
    shared = 0;
  }

  void optimizer_step(int step, int warmup, RunResult& res) {
    // Sequence parallelism: the layers' LayerNorm and row-parallel bias gradients are partial per tp rank
    // (with ZeRO >= 2 and dp > 1 this happened before each layer's reduce-scatter).
    if (model.sp && !(p.zero >= 2 && p.data_ranks() > 1))
      for (long long l = 0; l < L; ++l)  // (granular: the offloaded layers' were reduced before going down)
        if (units[unit_of_layer(l)].owned && !gran.is_off(unit_of_layer(l))) sp_reduce_layer((int)l);
    // Tied embedding: the first and last stage add their copies' gradients.
    if (units[0].owned && p.pp > 1 && sc.model.tied_embeddings && first_stage != last_stage && emb)
      emb->all_reduce_sum(Gd(units[0].a), units[0].b - units[0].a, dtype_of<T>());
    // Data parallel: all-reduce (ZeRO 0), reduce-scatter of each owned unit (ZeRO 1; ZeRO >= 2 reduced the layers
    // during the backward and reduces the ends here).
    auto G = [&](size_t k, long long i) -> T* {  // gradient element i of own range k (granular: on the host)
      return p.zero >= 2 && !gran.is_off(own_unit[k]) ? gshard.data() + own_off[k] + (i - own[k].first) : Gd(i);
    };
    // Work on an offloaded unit's host memory runs on the CPU backend.
    auto on_host = [&](int ui) -> const Backend& { return gran.is_off(ui) ? cpu_backend() : current_backend(); };
    if (p.zero == 0) {
      for (int ui = 0; ui < (int)units.size(); ++ui)
        for (int si = 0; units[ui].owned && si < nseg(ui); ++si) {  // each segment over its group
          const Seg sg = seg(ui, si);
          if (sg.n > 1) sg.c->all_reduce_sum(Gd(sg.lo), sg.hi - sg.lo, dtype_of<T>());
        }
    } else if (p.data_ranks() > 1) {
      for (int ui = 0; ui < (int)units.size(); ++ui) {
        if (!units[ui].owned) continue;
        if (p.zero >= 2 && ui != 0 && ui != (int)L + 1) continue;  // layers already reduced
        if (p.zero >= 2) { reduce_scatter_unit(ui); continue; }
        BackendScope where(on_host(ui));
        for (int si = 0; si < nseg(ui); ++si) {
          const Seg sg = seg(ui, si);
          Buf<T> inb(sg.slice * sg.n), out(sg.slice);
          ops::copy(inb.data(), Gd(sg.lo), (long)(sg.hi - sg.lo));
          ops::fill(inb.data() + (sg.hi - sg.lo), T(0), (long)(sg.slice * sg.n - (sg.hi - sg.lo)));  // the padding
          sg.c->reduce_scatter_sum(inb.data(), out.data(), sg.slice, dtype_of<T>());
          long long a = sg.lo + sg.r * sg.slice, z = std::min(sg.hi, a + sg.slice);
          if (z > a) ops::copy(Gd(a), out.data(), (long)(z - a));
        }
      }
    } else if (p.zero >= 2) {  // dp == 1: the "slice" is the whole unit
      for (size_t k = 0; k < own.size(); ++k)
        if (own[k].second > own[k].first && !gran.is_off(own_unit[k])) ops::accumulate(G(k, own[k].first), Gd(own[k].first), (long)(own[k].second - own[k].first));
    }
    // Global gradient norm: each parameter once (tp-replicated on tp rank 0, the tied embedding on its first stage).
    double sq2[2] = {0, 0};  // dense, experts (without ZeRO each is held by its group's every rank)
    for (size_t k = 0; k < own.size(); ++k) {
      double& sq = sq2[own_seg[k]];
      BackendScope where(on_host(own_unit[k]));
      for (size_t v = 0; v < gl.views.size(); ++v) {
        const ParamView& pv = gl.views[v];
        long long a = std::max(own[k].first, pv.offset), z = std::min(own[k].second, pv.offset + pv.count);
        if (a >= z) continue;
        if (replicated_view[v] && (model.two_d || rc.tp != 0)) continue;  // 2D: rows != 0 hold unused copies
        if (pv.layer < 0 && a < units[0].b && rc.stage != first_stage) continue;  // tied copy on the last stage
        sq += ops::sum_squares(G(k, a), (long)(z - a));
      }
    }
    world.all_reduce_sum(sq2, 2, Dtype::f64);  // over every rank: each parameter counted on exactly one
    if (p.zero == 0) {  // ...except that without ZeRO every rank of a segment's group holds it
      sq2[0] /= p.data_ranks();
      sq2[1] /= edpc ? edpc->size() : p.data_ranks();
    }
    double norm = std::sqrt(sq2[0] + sq2[1]);
    res.grad_norm.push_back(norm);
    T clip = norm > o.grad_clip && o.grad_clip > 0 ? T(o.grad_clip / norm) : T(1);
    double lr = learning_rate(o, step, warmup);
    for (size_t k = 0; k < own.size(); ++k) {
      BackendScope where(on_host(own_unit[k]));
      T* M1 = gran.is_off(own_unit[k]) ? gran.m1.data() : m1.data();
      T* M2 = gran.is_off(own_unit[k]) ? gran.m2.data() : m2.data();
      for (const ParamView& pv : gl.views) {
        long long a = std::max(own[k].first, pv.offset), z = std::min(own[k].second, pv.offset + pv.count);
        if (a >= z) continue;
        if (shared > 0 && pv.layer >= shared) continue;  // pseudo phase: slots beyond the k groups are unused
        if (model.two_d && replicated_view[&pv - gl.views.data()]) continue;  // 2D: not this grid row's parameter
        T* g = G(k, a);
        if (clip != T(1)) ops::scale(g, g, clip, (long)(z - a));
        long long so = own_off[k] + (a - own[k].first);
        const T wd = T(pv.decay ? o.weight_decay : 0);
        if (hopt.on()) hopt.step(P(a), g, so, z - a, T(lr), T(o.beta1), T(o.beta2), T(o.eps), wd, (long)step + 1);
        else ops::adamw(P(a), g, M1 + so, M2 + so, (long)(z - a), T(lr), T(o.beta1), T(o.beta2), T(o.eps),
                        wd, (long)step + 1);
      }
    }
    if (p.zero >= 1 && p.zero <= 2 && p.data_ranks() > 1)
      for (int ui = 0; ui < (int)units.size(); ++ui)
        if (units[ui].owned) all_gather_unit(ui);
  }
};

}  // namespace

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
