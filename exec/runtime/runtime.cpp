// runtime: `trainplan run` on one rank (RankRun, exec/runtime/runtime_rank.hpp, whose header gives the design): its
// setup (communicators, parameter units, ownership, offload stores); run_training picks the backend and the
// precision. The step loop is in exec/runtime/runtime_step.cpp, the updates between steps in exec/runtime/runtime_update.cpp.
#include "exec/runtime/runtime_rank.hpp"

#ifdef __GLIBC__
#include <malloc.h>
#endif

#include "exec/backends/cuda/cuda_loader.hpp"
#include "exec/comm/comm_classed.hpp"
#include "exec/comm/device_comm.hpp"
#include "exec/runtime/device_oom.hpp"  // run_training's message for a device out of memory (sim::simulate)

namespace tp::exec {
namespace detail {

// This rank's coordinates, sizes and communicators (tp, dp, pp, the tied embedding's, cp, ep and expert-dp).
template <class T>
void RankRun<T>::make_groups() {
  rc = rank_coord(p, world.rank());
  lay = stage_layout(p, sc.model.layers);
  L = sc.model.layers;
  m = p.num_microbatches;
  gb = sc.training.global_batch;
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
    cpx.flash = p.attention == Attention::flash;
  }
  if (p.ep > 1) {  // the ep group: ep consecutive dp ranks of this tp rank and stage (exec/model/moe.hpp); the
    // expert-dp group: the dp ranks of this tp rank and stage with my ep rank (they hold my experts)
    epc = world.split(5 * S + rc.tp + p.tp * (rc.dp / p.ep + p.dp * rc.stage), rc.dp % p.ep);
    edpc = world.split(6 * S + rc.tp + p.tp * (rc.dp % p.ep + p.ep * rc.stage), rc.dp / p.ep);
  }
}

template <class T>
void RankRun<T>::setup() {
  make_groups();
  init_model<T>(sc, rc.tp, *tp, model, gl, replicated_view, grid_row, grid_col, p.ep > 1 ? rc.dp % p.ep : 0);
  model.d1.ep = epc.get();
  model.d1.pack_operands16 = bf16_acts();  // (bf16: every GEMM operand packed once, where it is made)
  model.d1.bf16_lookup = model.d2.bf16_lookup = bf16_acts();  // (bf16: the lookup reads wte's bf16 values)
  f8 = Fp8State::for_scenario(sc);
  if (f8.on()) {
    if (start && !start->fp8_scale.empty()) f8.scale = start->fp8_scale;  // Pseudo-to-Real's handover
    if (local && !local->fp8_scale.empty()) f8.scale = local->fp8_scale;
    model.d1.fp8 = model.d2.fp8 = &f8;
  }
  // (model.d1.moe_aux_weight: per phase, RankRun::enter_phase)
  const long long state = plan_units();
  dp_started.assign(units.size(), 0);
  prefetched.assign(units.size(), 0);
  gather_pending.assign(units.size(), {});
  // Chunked offload on a backend that is not host-accessible: the store's host side (flat parameters and
  // gradients, the optimizer state) is pinned host memory, which the host Adam reads and the ops may also take.
  host_flat = p.offload.kind == OffloadKind::chunked && !current_backend().host_accessible;
  adam_threads = host_adam_threads(current_backend(), world.size());
  // (ZeRO-3 keeps its layers as fp32 slices on the device; a delink's one-layout handover reads whole units)
  master_sliced = p.zero >= 1 && p.data_ranks() > 1;
  host_master = p.offload.kind == OffloadKind::optimizer && plan_keeps_bf16_weight_copies(sc) && o.bf16_weight_copies &&
                !model.two_d && !(p.zero >= 3 && p.data_ranks() > 1) && !(master_sliced && sc.delink.on());
  {
    std::optional<BackendScope> pinned;
    if (host_flat) {  // (a Buf keeps the allocator of its construction: fresh ones take the pinned scope's)
      pinned.emplace(pinned_variant(current_backend()));
      for (Buf<T>* b : {&params, &grads, &m1, &m2, &gshard}) *b = Buf<T>();
    }
    // The seed's model, or Pseudo-to-Real's handed weights (the handover's weights' pass: RankRun::place_handed).
    place_parameters(start ? place_handed() : local ? place_local() : seeded_params<T>(sc, model, gl, o.seed), state);
    if (local) std::vector<T>().swap(local->w);  // (placed: freed before the gradients and the optimizer state)
    place_gradients_and_state(state);
  }  // (the chunk store's arena below is device memory)
  if (p.offload.kind == OffloadKind::chunked) make_chunk_store();
}

// Units (embedding, layers, head) and which this rank holds; per owned unit one own range per segment (ZeRO:
// this data rank's slice) with its offset in the optimizer state; granular offload's host side. Returns the
// optimizer state's length on the device.
template <class T>
long long RankRun<T>::plan_units() {
  units.resize(L + 2);
  units[0] = Unit{gl.embed_begin, gl.embed_end, 0, rc.stage == first_stage || (sc.model.tied_embeddings && rc.stage == last_stage)};
  for (long long l = 0; l < L; ++l)  // (the pseudo phase's run: only the k weight-group slots)
    units[unit_of_layer(l)] = Unit{gl.layer_begin[l], gl.layer_end[l], 0,
                                   stage_of_layer(l) == rc.stage && !(groups_only() && l >= sc.delink.unique_layers),
                                   gl.expert_begin[l]};
  units[L + 1] = Unit{gl.head_begin, gl.head_end, 0, rc.stage == last_stage};
  units[0].x = units[0].b;
  units[L + 1].x = units[L + 1].b;
  hold_weight_groups();
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
  return state;
}

// The rank holds only its stage's units: a compact buffer of the owned units in layout order; flat (layout)
// offsets map to it through cbase (P / Gd). Views of other stages' units get no storage. zparam: the owned
// layers are only their slices (pslice, by own range; granular: on the host). `src` gives the initial
// parameters of a flat range (params_needed's ranges or parts of them) in host memory.
template <class T>
void RankRun<T>::place_parameters(const ParamSource<T>& src, long long state) {
  std::vector<T> tmp;
  auto put = [&](T* dst, long long a, long long z) {  // flat [a, z) into backend memory at dst
    tmp.resize((size_t)(z - a));
    src(a, z, tmp.data());
    upload(dst, tmp.data(), z - a);
  };
  long long n = 0;
  cbase.assign(units.size(), -1);
  for (size_t ui = 0; ui < units.size(); ++ui)
    if (units[ui].owned && !(zparam && is_layer_unit((int)ui)) && dev_end[ui] > units[ui].a) {  // [a, dev_end)
      cbase[ui] = n;
      n += dev_end[ui] - units[ui].a;
    }
  if (host_master) {
    place_host_master(src, state);
    return;
  }
  zeros(params, n);
  for (size_t ui = 0; ui < units.size(); ++ui) {
    if (cbase[ui] >= 0) put(params.data() + cbase[ui], units[ui].a, dev_end[ui]);
    if (gran.is_off((int)ui) && !(zparam && is_layer_unit((int)ui))) src(dev_end[ui], units[ui].b, gran.param((int)ui));
  }
  for (size_t k = 0; k < own.size(); ++k)  // zparam: the own slices on the host
    if (hoff[k] >= 0) src(own[k].first, own[k].second, host_slice(k));
  if (zparam) zeros(pslice, state);
  for (size_t ui = 0; zparam && ui < units.size(); ++ui)
    for (int si = 0; units[ui].owned && is_layer_unit((int)ui) && si < nseg((int)ui); ++si) {
      size_t k = own_index((int)ui) + si;
      if (hoff[k] >= 0) continue;  // on the host
      put(pslice.data() + own_off[k], own[k].first, own[k].second);
    }
  uparam.resize(units.size());
}

// host_master (runtime_rank.hpp): the own ranges' parameters into the host optimizer's master copy, and the device
// storage of the views read as T. The device copies are written by pull_master once the bf16 copies exist
// (place_gradients_and_state).
template <class T>
void RankRun<T>::place_host_master(const ParamSource<T>& src, long long state) {
  hopt.init(state, adam_threads);
  if (!master_sliced) hopt.stage16 = PinnedBuf<uint16_t>(state);
  for (size_t k = 0; k < own.size(); ++k)
    if (own[k].second > own[k].first) src(own[k].first, own[k].second, hopt.master.data() + own_off[k]);
  const std::vector<char> gemm = gemm_weight_views(model.d1.lay);
  vdev.assign(gl.views.size(), -1);
  long long nd = 0;
  for (size_t v = 0; v < gl.views.size(); ++v)
    if (cbase[unit_at(gl.views[v].offset)] >= 0 && !gemm[v]) vdev[v] = nd, nd += gl.views[v].count;
  zeros(params, nd);
  uparam.resize(units.size());
}

// Not sliced: state [at, at + n) of the master copy (host_master) to the device on stream s, a bf16-only weight's
// elements packed on the host into stage16 and copied into its held bf16 copy, every other view's copied as T into
// `params`. Returns the bytes queued.
template <class T>
double RankRun<T>::upload_master(long long at, long long n, Stream s) {
  const Backend& be = current_backend();
  double bytes = 0;
  for (size_t k = 0; k < own.size(); ++k) {
    const long long o0 = own_off[k], lo = std::max(at, o0), hi = std::min(at + n, o0 + (own[k].second - own[k].first));
    if (lo >= hi) continue;
    const long long a = own[k].first + (lo - o0);
    gl.each_view(a, a + (hi - lo), [&](size_t v, long long vlo, long long vhi, long long off) {
      const long long m = lo + off, len = vhi - vlo;  // master [m, m + len)
      const T* src = hopt.master.data() + m;
      if (vdev[v] >= 0) {
        be.copy(params.data() + vdev[v] + vlo, src, sizeof(T) * (size_t)len, CopyKind::host_to_device, s);
        bytes += (double)(sizeof(T) * (size_t)len);
        return;
      }
      uint16_t* st = hopt.stage16.data() + m;
      host_pack_bf16(st, src, (long)len, adam_threads);
      be.copy(w16->copy[v].data() + vlo, st, sizeof(uint16_t) * (size_t)len, CopyKind::host_to_device, s);
      bytes += (double)(sizeof(uint16_t) * (size_t)len);
    });
  }
  return bytes;
}

// Sliced (ZeRO 1-2 over several data ranks): the device holds every view of its units, and each rank's master
// holds its slices. The master's slices go up as T into zslice (pull_master; the host step writes them there
// itself), the units' slices are all-gathered from it (all_gather_unit: the views read as T copied, the bf16-only
// ones packed on the device into their copies), and zslice is freed.
template <class T>
void RankRun<T>::push_sliced_master() {
  zeros(zslice, (long long)hopt.master.size());
  for (size_t k = 0; k < own.size(); ++k)
    if (own[k].second > own[k].first) upload(zslice.data() + own_off[k], hopt.master.data() + own_off[k], own[k].second - own[k].first);
  for (int ui = 0; ui < (int)units.size(); ++ui)
    if (units[ui].owned) all_gather_unit(ui);
  Buf<T>().swap(zslice);
}

// The flat ranges place_parameters takes: each owned unit whole, a zparam layer's own slices (ascending).
template <class T>
std::vector<std::pair<long long, long long>> RankRun<T>::params_needed() const {
  std::vector<std::pair<long long, long long>> r;
  for (size_t ui = 0; ui < units.size(); ++ui) {
    if (!units[ui].owned) continue;
    if (!(zparam && is_layer_unit((int)ui))) { r.push_back({units[ui].a, units[ui].b}); continue; }
    for (int si = 0; si < nseg((int)ui); ++si) {
      const size_t k = own_index((int)ui) + si;
      if (own[k].second > own[k].first) r.push_back(own[k]);
    }
  }
  return r;
}

// Gradients (compact like the parameters; zgrad: layers only while their run is reduced), the views' pointer
// tables, the optimizer state (device, or the host optimizer's) and ZeRO-2/3's reduced shards.
template <class T>
void RankRun<T>::place_gradients_and_state(long long state) {
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
    const long long vd = host_master ? vdev[ptab.size()] : 0;  // (host_master: -1 for a bf16-only weight, no T copy)
    ptab.push_back(!held || vd < 0 ? nullptr : host_master ? params.data() + vd : P(v.offset));
    gtab.push_back(held && gbase[u] >= 0 ? Gd(v.offset) : nullptr);
  }
  model.d1.ptab = model.d2.ptab = ptab.data();
  model.d1.gtab = model.d2.gtab = gtab.data();
  if (plan_keeps_bf16_weight_copies(sc) && o.bf16_weight_copies) {
    w16 = std::make_unique<WeightCopies16>(gl.views.size());
    model.d1.w16 = w16.get();
    for (size_t v = 0; host_master && v < gl.views.size(); ++v)  // the bf16-only weights' one device copy
      if (vdev[v] < 0 && cbase[unit_at(gl.views[v].offset)] >= 0) w16->hold(v, gl.views[v].count);
  }
  const bool opt_off = p.offload.kind == OffloadKind::optimizer;
  zeros(m1, opt_off ? 0 : state);  // optimizer offload: the state is on the host (hopt)
  zeros(m2, opt_off ? 0 : state);
  if (opt_off) {
    if (!host_master) hopt.init(state, adam_threads);  // (host_master: since place_parameters, holding the weights)
    if (host_master && !master_sliced)
      hopt.upload = [this](long long at, long long n, Stream s) { return upload_master(at, n, s); };
    pull_master();
  }
  if (p.zero >= 2) zeros(gshard, state);
}

// Chunked offload: the store over the owned units' views in the simulator's order (part = unit).
template <class T>
void RankRun<T>::make_chunk_store() {
  std::vector<std::pair<long long, long long>> spans;
  for (const Unit& u : units) spans.push_back({u.a, u.b});
  std::vector<ChunkTensor> ts = chunk_tensors(gl, spans, cbase);
  double budget = o.device_budget_bytes > 0 ? o.device_budget_bytes
                                            : p.offload.gpu_memory_fraction * sc.cluster.gpu.hbm_bytes;
  // bf16: the chunks in bf16 (chunk_store.hpp), the GEMMs reading them as the weights' external copies
  ChunkBf16 b16;
  if (chunk_bf16_slots()) {
    if (!w16) model.d1.w16 = (w16 = std::make_unique<WeightCopies16>(gl.views.size())).get();
    {
      std::optional<BackendScope> pinned;  // (the host side of a device's chunks: pinned, as the flat buffers)
      if (host_flat) pinned.emplace(pinned_variant(current_backend()));
      host16 = Buf<uint16_t>(params.size());
    }
    b16 = ChunkBf16{host16.data(), &w16->at, gemm_weight_views(model.d1.lay), adam_threads};
  }
  store = std::make_unique<ChunkStore<T>>(ts, (int)units.size(), p.offload.chunk_elements, budget,
                                          p.offload.warmup_chunk_fraction, params.data(), grads.data(), ptab, gtab,
                                          b16.host16 ? &b16 : nullptr);
  store->set_prefetch(p.offload.prefetch_runs);
  store->set_host_rewrites(chunk_bf16_slots() && p.zero >= 3 && p.data_ranks() > 1);  // (all_gather_unit: rewritten)
  // Hybrid Adam over this rank's own state: per own range, its part of each view (one data rank: the whole views;
  // ZeRO-3 over several: this rank's slices), with the gradient and moments adam_update would take
  std::vector<typename ChunkStore<T>::OsPiece> pieces;
  for (size_t k = 0; k < own.size(); ++k)
    gl.each_view(own[k].first, own[k].second, [&](size_t v, long long lo, long long hi, long long at) {
      pieces.push_back({(int)v, lo, hi - lo, own_grad(k, own[k].first + at), moments(k, 1) + own_off[k] + at,
                        moments(k, 2) + own_off[k] + at});
    });
  store->enable_hybrid_adam(std::move(pieces), p.offload.hybrid_adam_margin);
}

// Pseudo-to-Real with pp > 1 (see slot_comm): this stage also holds the weight groups its layers use, and the
// holders of each group get a communicator (world.split is collective: every rank takes part for every group).
template <class T>
void RankRun<T>::hold_weight_groups() {
  if (!sc.delink.on() || p.pp == 1) return;
  const int k = sc.delink.unique_layers;
  slot_comm.resize(k);
  slot_first_holder.assign(k, -1);
  for (int g = 0; g < k; ++g) {
    std::vector<char> holds(p.pp, 0);
    for (long long l = 0; l < L; ++l)
      if (weight_group(l, L, k) == g) holds[stage_of_layer(l)] = 1;
    int holders = 0;
    for (int st = 0; st < p.pp; ++st) {
      holders += holds[st];
      if (holds[st] && slot_first_holder[g] < 0) slot_first_holder[g] = st;
    }
    Unit& u = units[unit_of_layer(g)];
    if (holds[rc.stage]) u.owned = true;  // (a replica when the slot's layer is on another stage)
    const bool joins = holds[rc.stage] && holders > 1;
    const int color = joins ? 7 * (1 << 20) + (g * p.data_ranks() + rc.dp) * p.tp + rc.tp : -1;
    slot_comm[g] = world.split(color, rc.stage);
  }
}

template void RankRun<float>::setup();
template void RankRun<double>::setup();
template std::vector<std::pair<long long, long long>> RankRun<float>::params_needed() const;
template std::vector<std::pair<long long, long long>> RankRun<double>::params_needed() const;

}  // namespace detail

using detail::RankRun;

// --comm nccl: NCCL's table on cuda, its stand-in on emu-device (exec/comm/device_comm.hpp device_comm_ops).
static const DeviceCommOps& nccl_ops_for(const Backend& be) {
  std::string why;
  const DeviceCommOps* ops = device_comm_ops(be, why);
  if (!ops) throw InputError({why});
  return *ops;
}

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
  const int cp = std::max(sc.plan.cp, sc.delink.on() && sc.delink.plan ? sc.delink.plan->cp : 1);
  if (cp > 1 && !(o.fp64 ? backend->f64.attention_fwd_kv != nullptr : backend->f32.attention_fwd_kv != nullptr))
    throw InputError({std::string("$.plan.cp: context parallelism needs the attention_fwd_kv op, which backend ") +
                      backend->name + " does not have yet (use --backend cpu or emu)"});
  BackendScope on_backend(*backend);  // every ops:: call of this rank's run goes to it
  // training.precision "bf16": every GEMM of this rank's run takes bf16 operands (Backend::set_bf16_gemm)
  Bf16GemmScope bf16_gemms(*backend, sc.training.precision == Precision::bf16);
  // Device memory the host cannot read: every collective and send stages device buffers through pinned host
  // memory (exec/comm/comm_staged.cpp). The CPU backend passes tensors to the communicator as they are.
  std::unique_ptr<Comm> staged = backend->host_accessible ? nullptr : staged_comm(world, *backend);
  // --comm nccl: device tensors' collectives on the GPU (exec/comm/device_comm.hpp), the rest as above.
  if (o.comm == "nccl") {
    staged = device_comm(world, *backend, nccl_ops_for(*backend));  // (DeviceCommRefused: every rank, the caller's)
  }
  Comm& comm = staged ? *staged : world;
  try {
    if (detail::pseudo_plan_differs(sc))  // Pseudo-to-Real over two layouts (exec/runtime/runtime_relayout.cpp)
      return o.fp64 ? detail::run_two_layouts<double>(sc, o, comm) : detail::run_two_layouts<float>(sc, o, comm);
    if (sc.delink.on())  // on one layout: the pseudo phase's run, then the real phase's on the same ranks
      return o.fp64 ? detail::run_one_layout<double>(sc, o, comm) : detail::run_one_layout<float>(sc, o, comm);
    if (o.fp64) { RankRun<double> r(sc, o, comm); return r.run(); }
    RankRun<float> r(sc, o, comm);
    return r.run();
  } catch (const std::bad_alloc&) {
    if (!backend->peak_device_bytes) throw;  // host memory: the process's own failure
    throw InputError({device_oom_message(sc, *backend)});
  }
}

}  // namespace tp::exec
