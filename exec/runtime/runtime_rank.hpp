// runtime_rank: one rank's training run (RankRun), shared by exec/runtime/runtime.cpp (setup), exec/runtime/runtime_step.cpp
// (the step loop) and exec/runtime/runtime_update.cpp (between the steps: ZeRO's unit collectives, the optimizer step,
// Pseudo-to-Real's slot sums and the checkpointed state). What follows is the runtime's design; each member is defined in one of
// those files.
//
// One rank's training step is driven by the shared schedule (schedule/pipeline: stage_layout, plan_order)
// exactly as the simulator costs it. See train.hpp for the supported plan keys.
// Invariants: a rank only computes and updates the parameter units its pipeline stage owns (its layers; the
// embedding on the first stage and, tied, on the last; the final norm on the last); every rank of a dp group
// holds the same units; sums over ranks are rank-ordered (exec/comm/comm.hpp), so a rerun is bit-identical.
// Units (embedding, each layer, head) are also the ZeRO sharding units: with ZeRO >= 1 dp rank d owns slice d of
// every unit (padded to a multiple of dp) — its optimizer state, and from ZeRO-2 its reduced gradient.
// ZeRO-2/3 reduce-scatter a layer's gradient when a backward run of it ends (every micro-batch with standard
// accumulation, once per step with layered accumulation); ZeRO-3 all-gathers a layer before each run of it.
// With dp > 1 (and no chunked offload) a layer's full gradient is a transient buffer from its backward run's
// start to that reduce-scatter (grad_acquire / grad_release); the rank keeps only its shards (gshard) and the
// ends' (embedding, head) full gradients, reduced in the optimizer step. Likewise ZeRO-3 parameters: a layer is
// held as this rank's slice (pslice; the optimizer, delink and checkpoints use it) and, from its all-gather to
// the run's end, as the gathered unit (uparam; exec/runtime/runtime_state.cpp); the ends stay full, gathered per step.
// Loss scale: every token of the global batch weighs 1 / (global_batch * seq_len) (the current phase's batch).
// Parameters and gradients are reached through per-view pointer tables (ptab / gtab; the model's p() / g() and
// the ZeRO copies use them): flat-buffer addresses, except under plan.offload "chunked", where the chunk store
// (exec/runtime/offload/chunk_store.hpp) points the views of device-resident chunks at its arena. Chunked offload: the store
// holds the views of the owned units (tensors in the simulator's order, exec/runtime/offload/runtime_chunks.cpp; one access
// part per unit); moment k of a step
// = run k of the rank's schedule (the runtime's runs: consecutive pieces on the same layer and pass), whose
// parts are the layer's unit plus the embedding for layer 0 and the head and the (tied) embedding for the last
// layer; the store makes them resident and pins them before the run's first use; the optimizer is the ADAM
// moment (CPU Adam on the flat buffers between host_phase_begin / host_phase_end).
// Optimizer offload (exec/runtime/offload/host_optimizer.hpp): no moments on the device; per own range, gradients down, host Adam,
// parameters up (in bf16 with ZeRO 0-2: the GEMM weights only as their bf16 copies, host_master). Granular offload (exec/runtime/offload/runtime_granular.hpp): an offloaded layer has no device storage between
// runs (cbase / gbase -1; P / Gd give its host copies, with zparam the rank's slice); each run points its views at
// the run's loaded copy (zparam: the slices gathered into uparam, like a ZeRO-3 layer's), its
// backward gradient is a transient buffer sent down at the run's end; the optimizer works on its host memory
// under the CPU backend.
// Memory (what `trainplan validate` measures against the simulator): activations are held as a trainer's
// autograd holds them. A layer's input is moved into its saved activations (no copy of the residual stream),
// the backward runs in place on one [N, C] gradient buffer, saved tensors are freed or overwritten by their
// own gradients after their last reader (gpt.cpp), the head's activations are freed after its backward, and a
// pipeline send's buffer is the sent activation itself, freed as soon as the send completes (reap_sends).
#pragma once
#include <algorithm>
#include <new>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <deque>
#include <map>
#include <optional>

#include "exec/backends/backend.hpp"
#include "exec/io/checkpoint.hpp"
#include "sim/op_cost.hpp"
#include "exec/runtime/offload/chunk_store.hpp"
#include "exec/model/cp_attention.hpp"
#include "exec/io/data.hpp"
#include "exec/model/gpt.hpp"
#include "exec/model/gpt2d.hpp"
#include "exec/runtime/handover.hpp"
#include "exec/runtime/offload/host_optimizer.hpp"
#include "exec/runtime/offload/runtime_granular.hpp"
#include "exec/model/moe.hpp"
#include "exec/backends/ops.hpp"
#include "exec/prof/prof.hpp"
#include "exec/runtime/train.hpp"
#include "exec/model/fp8.hpp"
#include "exec/runtime/model_flat.hpp"
#include "exec/runtime/offload/offload_glue.hpp"
#include "exec/runtime/run_state.hpp"
#include "exec/runtime/step_graph.hpp"
#include "exec/runtime/trace_recorder.hpp"
#include "schedule/pipeline.hpp"

namespace tp::exec::detail {

// Pseudo-to-Real with a pseudo plan of another layout (exec/runtime/runtime_relayout.cpp, exec/runtime/handover.hpp): the
// handover of the model's state to the real phase's ranks, one window of the single-rank layout at a time.
template <class T>
struct Handover {
  Records<T> mine;        // this rank's copies of record from the pseudo phase (export_state)
  Comm* job = nullptr;    // every rank of the job takes part in each window's sum
  long long total = 0, window = default_handover_window;  // elements of the single-rank layout; per window
  std::vector<double> fp8_scale;  // precision fp8: the scales at the delink (every rank's, exec/model/fp8.hpp)
};

template <class T>
struct RankRun {
  const Scenario& sc;
  const Plan& p;
  const RunOptions& o;
  Comm& world;
  RankCoord rc;
  StageLayout lay;
  long long L = 0, m = 0, b = 0, Tn = 0, C = 0;
  // The current phase's global batch and micro-batches per rank (m): Pseudo-to-Real's pseudo phase may train
  // with its own batch (plan.delink.global_batch); enter_phase switches them.
  long long gb = 0;
  long long Tl = 0;  // tokens of a sequence on this rank: Tn / cp (context parallelism, exec/model/cp_attention.hpp)
  // training.precision "bf16": a layer's input and its saved activations are stored as bf16 between its forward and
  // backward (LayerActs::pack_bf16; the GEMMs take bf16 operands, Backend::set_bf16_gemm)
  bool bf16_acts() const { return sc.training.precision == Precision::bf16; }
  // Selective recompute drops each layer's probabilities after its forward and rebuilds them for its backward;
  // flash keeps only row statistics, so there is nothing to recompute (as Megatron-LM).
  bool recomputes_probs() const { return p.recompute == Recompute::selective && p.attention != Attention::flash; }
  // Full recompute of model layer l: every layer, or plan.recompute_layers' evenly spread share (models/plan.hpp
  // layer_recomputes, the simulator's formula); the others keep all their activations.
  bool recomputes_layer(long long l) const {
    return p.recompute == Recompute::full && layer_recomputes(p.recompute_layers, L, l);
  }
  std::unique_ptr<Comm> cpc;  // the cp group (cp > 1)
  std::unique_ptr<Comm> epc;  // the ep group (ep > 1, exec/model/moe.hpp)
  std::unique_ptr<Comm> edpc;  // the expert-data-parallel group (MoE with ep > 1): dp ranks holding my experts
  CpCtx cpx;
  int nchunks = 0, first_stage = 0, last_stage = 0;
  std::unique_ptr<Comm> tp, dp, pp, emb;
  // Pseudo-to-Real with pp > 1: a weight group (slot g, unit 1 + g) serves layers on several stages. Each stage
  // holding one of those layers holds the slot (a replica where the slot's layer is on another stage; only the
  // pseudo phase's run has them); slot_comm[g] joins the holders of my tp and data rank (null: not a holder, or the only
  // one), which add their gradients before the optimizer; slot_first_holder[g] counts it in the norm.
  std::vector<std::unique_ptr<Comm>> slot_comm;
  std::vector<int> slot_first_holder;
  void hold_weight_groups();
  Flat gl;
  Buf<T> params, grads;                              // backend memory (Buf: exec/model/gpt.hpp)
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
  // training.precision "bf16": the weights' bf16 copies the GEMMs read (exec/model/gpt.hpp; made at a view's first use in a
  // step, dropped with its released parameters). Not under chunked offload, whose device budget holds the T weights
  // only, nor under Optimus 2D, whose GEMMs read gathered weight blocks: their GEMMs round the T weights.
  std::unique_ptr<WeightCopies16> w16;
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
    if (host_master) {  // (host memory; i must lie in one of this rank's own ranges)
      const size_t k = own_at(u, i);
      return hopt.master.data() + own_off[k] + (i - own[k].first);
    }
    if (host_at(u, i)) return zparam && is_layer_unit(u) ? host_slice(own_at(u, i)) + (i - own[own_at(u, i)].first)
                                                         : gran.param_at(u, i);  // granular: host memory
    if (zparam && is_layer_unit(u)) {
      size_t k = own_at(u, i);  // its dense or expert slice
      return pslice.data() + own_off[k] + (i - own[k].first);
    }
    return params.data() + cbase[u] + (i - units[u].a);
  }
  T* Gd(long long i) {
    int u = unit_at(i);
    if (host_at(u, i) && zparam && is_layer_unit(u)) {  // zparam: the own slice's gradient on the host
      const size_t k = own_at(u, i);
      return gran.grad(u) + hoff[k] + (i - own[k].first);
    }
    return host_at(u, i) ? gran.grad_at(u, i) : grads.data() + gbase[u] + (i - units[u].a);
  }
  std::unique_ptr<ChunkStore<T>> store;              // plan.offload "chunked"
  Buf<uint16_t> host16;  // chunked offload's bf16 slots: the host's bf16 parameters (chunk_store.hpp)
  // Chunked offload in bf16 keeps its chunks in bf16 (chunk_store.hpp "bf16 slots"; PatrickStar's fp16 chunks, the
  // simulator's 2 bytes an element; ZeRO's all-gathers repack what they write, ChunkStore::rewritten), not under
  // Optimus 2D (its weight blocks); with Pseudo-to-Real each phase is a run of its own whose store starts from the
  // placed parameters, the pseudo phase's exporting them after evict_all and sync_os_to_host.
  // --no-bf16-weight-copies and 2D keep T chunks.
  bool chunk_bf16_slots() const {
    return p.offload.kind == OffloadKind::chunked && bf16_acts() && o.bf16_weight_copies && !model.two_d;
  }
  GranularHost<T> gran;   // plan.offload "granular": offloaded layers on the host (exec/runtime/offload/runtime_granular.hpp)
  // Per unit: [a, dev_end) lives on the device, [dev_end, b) on the host (granular: b when not offloaded, a for a
  // whole offloaded unit, x when only its experts are, target "experts").
  std::vector<long long> dev_end;
  std::vector<long long> hoff;  // zparam: per own range, its offset in its unit's host block (-1: on the device)
  size_t own_at(int u, long long i) const { return own_index(u) + (i >= units[u].x); }  // i's own range (zparam)
  T* host_slice(size_t k) { return gran.param(own_unit[k]) + hoff[k]; }
  T* slice_ptr(size_t k) { return hoff[k] >= 0 ? host_slice(k) : pslice.data() + own_off[k]; }  // zparam: own range k
  bool host_at(int u, long long i) const { return gran.is_off(u) && i >= dev_end[u]; }
  bool seg_on_host(int ui, int si) const { return gran.is_off(ui) && seg(ui, si).lo >= dev_end[ui]; }
  bool own_on_host(size_t k) const { return seg_on_host(own_unit[k], own_seg[k]); }
  // Own range k's gradients and optimizer state live in host memory the host Adam's threads work on: a granular
  // segment offloaded, or the chunk store's pinned host side (host_flat).
  bool state_on_host(size_t k) const { return own_on_host(k) || host_flat; }
  std::vector<int> own_unit;  // per own range: its unit
  std::vector<int> own_seg;   // per own range: its unit's segment (Seg: 0 dense, 1 experts)
  Fp8State f8;  // precision "fp8": the delayed-scaling state of the fp8 linear layers (exec/model/fp8.hpp; off otherwise)
  HostOptimizer<T> hopt;  // plan.offload "optimizer": master copy, moments and Adam on the host (exec/runtime/offload/host_optimizer.hpp)
  // Adam's moment i (1 or 2) of own range k starts at moments(k, i) + own_off[k]: the host optimizer's, a granular
  // segment's on the host, or the device state.
  T* moments(size_t k, int i) {
    if (hopt.on()) return i == 1 ? hopt.m1.data() : hopt.m2.data();
    if (own_on_host(k)) return i == 1 ? gran.m1.data() : gran.m2.data();
    return i == 1 ? m1.data() : m2.data();
  }
  // Optimizer offload with bf16 weight copies, ZeRO 0-2 or one data rank (ZeRO-Offload as DeepSpeed keeps it, and
  // as the simulator counts it: sim/step_formulas.hpp state_bytes, 2 bytes a weight on the device): the master copy
  // of the own ranges is the rank's record of its parameters (P points into it), and the device holds the GEMM
  // weights (the layers' and the tied table) only as their bf16 copies (WeightCopies16::hold, gemm_weight_views) and
  // every other view (norms, biases, positions: read as T) in `params` at vdev. Not sliced (ZeRO 0, or one data rank): upload_master writes
  // both from the master copy (the host step's HostOptimizer::upload, and pull_master, which pushes instead of
  // pulling). Sliced (ZeRO 1-2 over several data ranks, master_sliced): the host step writes the updated slices as
  // T into zslice, a device buffer of the optimizer phase only, and zero_gather_params all-gathers the units from it
  // (push_sliced_master). The results are those of the T parameters on the device: a bf16 copy is the same
  // rounding of the same values (tests/exec/test_run_bf16_weights.cpp).
  bool host_master = false, master_sliced = false;
  std::vector<long long> vdev;  // host_master: per view, its offset in `params` (-1: a bf16-only weight, or not held)
  Buf<T> zslice;                // sliced host_master: the own slices (optimizer state layout) between step and gather
  double upload_master(long long at, long long n, Stream s);
  void push_sliced_master();
  void pull_master() {    // the host master copy = the device parameters of the own ranges (host_master: the reverse)
    if (host_master && master_sliced) return push_sliced_master();
    for (size_t k = 0; hopt.on() && k < own.size(); ++k) {
      const long long n = own[k].second - own[k].first;
      if (host_master) upload_master(own_off[k], n, Stream{});
      else hopt.pull(P(own[k].first), own_off[k], n);
    }
  }
  long delink_step = -1;                             // the step at which the shared weights are delinked
  // Pseudo-to-Real (exec/runtime/runtime_relayout.cpp): the pseudo phase's run holds only the k weight-group slots
  // (the layer units 0..k-1, with pp > 1 also their replicas: hold_weight_groups), as M6-10T's pseudo model and the
  // simulator's pseudo phase do; at delink_step it writes every layer's copies of record from its group's slot into
  // *handoff (export_state) and ends there; the real phase's run starts at start_step from the handover *start (its
  // weights placed by setup through place_handed, its moments by import_moments) instead of the seed's model.
  Records<T>* handoff = nullptr;
  // The same, on one layout (the pseudo phase on the real plan): the pseudo run keeps its state in *keep
  // (export_local), the real run takes it from *local (place_local, import_local_moments): handover.hpp LocalState.
  LocalState<T>* keep = nullptr;
  LocalState<T>* local = nullptr;
  bool groups_only() const { return (handoff || keep) && sc.delink.on(); }  // the pseudo phase's run: slots 0..k-1 only
  Handover<T>* start = nullptr;  // (its parts released once placed)
  int start_step = 0;
  void export_local(LocalState<T>& out);
  void delink_fp8_scales();
  ParamSource<T> place_local();
  void import_local_moments();
  GptLayout single_rank_layout() const;
  std::vector<double> full_index(const GptLayout& full, size_t v) const;  // view v's elements -> their index in `full`
  // This rank's copies of record; while weights are shared (the pseudo phase at its delink), every layer of this
  // stage from its group's slot, and the fp8 scales delinked (each layer's from its group's).
  void export_state(Records<T>& rec);
  // The positions of flat ranges [first, second) one after the other (base[k]: range k's start) as runs of the
  // single-rank layout's elements (sorted, split at the handover's windows).
  std::vector<IndexRun> wanted(const std::vector<std::pair<long long, long long>>& ranges, std::vector<long long>& base) const;
  ParamSource<T> place_handed();  // setup: the weights' pass, for params_needed's ranges
  void import_moments();  // the moments' pass into the optimizer state, after setup
  // Whether view v's part from flat element a is this rank's copy of record (the gradient norm counts it, a
  // handoff writes it): tp-replicated views on tp rank 0 (2D: the grid position owning the view), the tied
  // embedding on its first stage. Without ZeRO every rank of a segment's group also holds it (see callers).
  bool record_copy(size_t v, long long a) const {
    if (replicated_view[v] && (model.two_d || rc.tp != 0)) return false;
    return !(gl.views[v].layer < 0 && a < units[0].b && rc.stage != first_stage);
  }
  bool host_flat = false;  // chunked offload, backend not host-accessible: flat buffers in pinned host memory
  int adam_threads = 1;    // the host Adam's threads (host_adam_threads of the run's backend): host-resident state

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
  // zgrad: a zeroed full gradient of unit ui, the views' gradients pointing into it (no-op if it exists);
  // granular without zgrad: of its host part [dev_end, b) only (the device part accumulates in `grads`).
  long long ugrad_from(int ui) const { return zgrad ? units[ui].a : dev_end[ui]; }
  void grad_acquire(int ui) {
    if ((!zgrad && !gran.is_off(ui)) || !is_layer_unit(ui) || !ugrad[ui].empty()) return;
    const long long a = ugrad_from(ui), b = units[ui].b;
    ugrad[ui].resize(b - a);
    ops::fill(ugrad[ui].data(), T(0), (long)(b - a));
    gl.each_view(a, b, [&](size_t v, long long lo, long long, long long at) { gtab[v] = ugrad[ui].data() + at - lo; });
  }
  void grad_release(int ui) {
    if ((!zgrad && !gran.is_off(ui)) || !is_layer_unit(ui)) return;
    Buf<T>().swap(ugrad[ui]);
    gl.each_view(ugrad_from(ui), units[ui].b, [&](size_t v, long long, long long, long long) { gtab[v] = nullptr; });
  }
  int stage_of_layer(long long l) const { return lay.stage_of_layer(l); }

  void setup();  // exec/runtime/runtime.cpp: the groups, the units and own ranges, parameters, gradients, state, stores
  void make_groups();
  long long plan_units();
  void place_parameters(const ParamSource<T>& src, long long state);
  void place_host_master(const ParamSource<T>& src, long long state);
  std::vector<std::pair<long long, long long>> params_needed() const;
  void place_gradients_and_state(long long state);
  void make_chunk_store();
  void sp_reduce_layer(int l, long long lo, long long hi);  // the layer's replicated views in flat [lo, hi)
  // ZeRO >= 2: unit ui's gradients reduce-scattered over dp into this rank's shard. async (a layer's backward,
  // device segments): each segment's reduce-scatter is started (dp_pending, at most kGradBucketsInFlight) and its
  // slice is added to the shard when it completes (dp_wait_oldest), in the order they started; else at once.
  void reduce_scatter_unit(int ui, bool async = false);
  void all_gather_unit(int ui);
  // zparam: layer ui gathered into uparam[ui] ([dense slices x dp | expert slices x dp / ep]), the views pointing
  // into it; each segment's own slice from pslice, or from `loaded` (granular: the run's copy of the host block).
  // async (the prefetch a run ahead): the all-gathers started (gather_pending[ui]), waited for by wait_gather(ui)
  // before the layer runs.
  void gather_layer(int ui, const T* loaded, bool async = false);
  std::vector<std::vector<std::pair<Comm*, CommRequest>>> gather_pending;  // per unit: its started all-gathers
  void wait_gather(int ui) {
    if (gather_pending.empty()) return;
    for (auto& [c, r] : gather_pending[(size_t)ui]) c->wait(r);
    gather_pending[(size_t)ui].clear();
  }
  // plan.overlap_param_gather (ZeRO 1-2, every parameter on the device: defer_param_gather): the updated parameters'
  // all-gathers are started after the optimizer (zero_gather_params), unit by unit in the order the next step first
  // reads them (the embedding and head, then the layers), at most kParamGathersInFlight at a time (each unit's goes
  // through a staging buffer, its slices being padded); a unit's is finished (waited for, written into the
  // parameters) before its first read: a piece of its layer (piece_params), the ends at the step's start, and all of
  // them before anything else reads the parameters (finish_param_gathers: the optimizer, a checkpoint, a delink's
  // hand-over, the run's end). Megatron-LM's forward pre-hooks; the simulator's add_param_gathers_under_fwd.
  static constexpr int kParamGathersInFlight = 2;
  struct ParamGather {
    Comm* c;
    CommRequest req;
    Buf<T> mine, all;
    long long lo, hi;
  };
  std::vector<std::vector<ParamGather>> param_pending;  // per unit: its started all-gathers
  // The units whose gathers are not finished, in order; the first param_next of them are started (in flight).
  std::vector<int> param_queue;
  size_t param_next = 0;
  bool defer_param_gather() const;
  // Segment sg's all-gather of the rank's slice of the parameters (all_gather_unit's device path): started (async) or
  // done; param_gather_write waits for it and writes the gathered segment into the parameters.
  ParamGather param_gather_start(const Seg& sg, bool async);
  void param_gather_write(ParamGather& g);
  void start_param_gathers(int upto);  // started in order up to unit `upto` (-1: as the bound allows)
  void finish_param_gather(int ui);
  void finish_param_gathers();
  void param_release(int ui) {  // zparam: the gathered unit is freed at its run's end (granular: its views unset)
    if (!(zparam || gran.is_off(ui)) || !is_layer_unit(ui)) return;
    wait_gather(ui);  // (a prefetched unit is used, and waited for, before its release; this keeps it so)
    Buf<T>().swap(uparam[ui]);
    gl.each_view(zparam ? units[ui].a : dev_end[ui], units[ui].b, [&](size_t v, long long, long long, long long) {
      ptab[v] = nullptr;
      if (w16) w16->drop(v);
    });
  }
  size_t own_index(int ui) const {  // the own range of unit ui's first segment (the next ones follow)
    size_t k = 0;
    for (int i = 0; i < ui; ++i) k += units[i].owned ? nseg(i) : 0;
    return k;
  }

  // The step loop (exec/runtime/runtime_step.cpp): run() drives it; Loop holds its state between the pieces below.
  struct Loop;
  RunResult run();
  void prepare_loop(Loop& lp);
  void enter_phase(Loop& lp, bool pseudo);
  int resume(RunResult& res);
  void begin_step(Loop& lp, int step);
  void exchange_at(Loop& lp, size_t k);
  void item_input(Loop& lp, size_t k, const WorkItem& w, int g, long long j, Buf<T>& x);
  void run_piece(Loop& lp, const WorkItem& w, size_t pc, long long j, Buf<T>& x);
  void piece_params(Loop& lp, size_t pc, long long j, bool run_start);
  void prefetch_next_run(Loop& lp, size_t pc);
  std::vector<char> prefetched;  // zparam: per layer unit, gathered a run ahead (prefetch_next_run)
  void piece_backward(Loop& lp, size_t pc, LayerActs<T>& a, Buf<T>& x, bool run_end);
  double item_output(Loop& lp, const WorkItem& w, int g, long long j, Buf<T>& x, double* loss_to = nullptr);
  // The step's work items (forward, backward of every micro-batch); with a graph (exec/runtime/step_graph.hpp)
  // capturing, the losses go to its device slots. Returns the loss sum (0 while capturing).
  double step_items(Loop& lp, bool capturing);
  double step_work(Loop& lp, int step);       // step_items eagerly, captured, or the captured graph replayed
  void clear_step_state(Loop& lp);            // after an abandoned capture: the step's host state as at its start
  std::string graph_blocker() const;          // why this rank's steps cannot be captured ("" when they can)
  void prepare_graph(Loop& lp, int first);
  bool end_step(Loop& lp, int step, int first, double loss, std::chrono::steady_clock::time_point t0);
  void finish_run(Loop& lp);
  std::vector<int> run_parts(const Loop& lp, int r) const;
  void enter(Loop& lp, size_t k);
  void reap(Loop& lp);
  int tag(Pass ps, int g, long long j) const;
  void log_iteration(Loop& lp, int step, double dt, double loss) const;
  std::vector<TensorView> state_tensors(int32_t* meta);
  void save_checkpoint(long next_step);
  long load_checkpoint(long step);
  // The optimizer step (exec/runtime/runtime_update.cpp): its jobs in the order optimizer_step calls them.
  void optimizer_step(int step, int warmup, RunResult& res);
  void sp_reduce_grads();
  void tied_embedding_grads();
  void dp_reduce_grads();          // the data-parallel reduction, by ZeRO stage:
  void dp_all_reduce_grads();      //   ZeRO 0
  void dp_reduce_scatter_grads();  //   ZeRO >= 1, dp > 1
  void dp1_shard_grads();          //   ZeRO >= 2, dp == 1
  // ZeRO 0 and 1 with plan.overlap_grad_reduce (Megatron's --overlap-grad-reduce): a layer unit's reduction starts
  // when the step's last backward of the unit ends (piece_backward), not at the step's end; the step's end waits
  // for them (dp_wait_reduces) and reduces the rest. Device-resident units of plans without shared weight groups
  // (granular offload, chunked offload and the pseudo phase's groups keep the step-end path).
  bool overlaps_dp_reduce(int ui) const {
    return p.overlap_grad_reduce && p.zero <= 1 && p.data_ranks() > 1 && is_layer_unit(ui) && units[ui].owned &&
           shared == 0 && !store && !host_flat && !gran.is_off(ui);
  }
  // Optimizer offload: a layer unit's gradients (this rank's own ranges) are final when the step's last backward of
  // the unit ends, with one data rank, no tensor parallelism and ZeRO <= 1, or, with ZeRO >= 2 over several data
  // ranks (no 2D grid), once that backward's reduce-scatter into the rank's slices has ended (it is blocking, and
  // the sequence-parallel sums come before it). They go to the host then, on the host optimizer's copy stream,
  // under the rest of the backward (DeepSpeed's ZeRO-Offload and the simulator's d2h tasks, each after its bucket's
  // reduction); otherwise the step's end reduces, sums or shards them first and they go down in the optimizer step.
  bool grads_down_early(int ui) const {
    const bool alone = p.data_ranks() == 1 && p.tp == 1 && p.zero <= 1;
    const bool sliced = p.zero >= 2 && p.data_ranks() > 1 && !model.two_d;
    return hopt.on() && (alone || sliced) && is_layer_unit(ui) && units[ui].owned && shared == 0 && !store &&
           !host_flat && !gran.is_off(ui);
  }
  // ...and with ZeRO 0-1 over several data ranks, under overlap_grad_reduce: each segment once its reduction started
  // during the backward completes (dp_wait_oldest), final then (the sequence-parallel sums come before it).
  bool grads_down_after_reduce(int ui) const { return hopt.on() && overlaps_dp_reduce(ui) && !model.two_d; }
  void send_own_down(size_t k) {  // own range k's gradients to the host optimizer now
    if (own[k].second > own[k].first) hopt.grads_down(own_grad(k, own[k].first), own_off[k], own[k].second - own[k].first);
  }
  void send_grads_down(int ui) {  // (grads_down_early's copies of unit ui's own ranges)
    for (int si = 0; si < nseg(ui); ++si) send_own_down(own_index(ui) + si);
  }
  // Starts unit ui's reduction (ZeRO 0: all-reduce; 1: reduce-scatter of its slices); down: each segment's own range
  // goes to the host optimizer (grads_down) once its reduction completes.
  void dp_reduce_unit(int ui, bool down = false);
  void dp_wait_reduces();       // completes every started reduction (ZeRO 1: this rank's slices into the gradients)
  void dp_wait_oldest();        // completes the oldest started one
  std::vector<char> dp_started;  // per unit: its reduction started during this step's backward
  struct DpPending {  // a started reduction; ZeRO 1: out's first z - a elements are gradients [a, z)
    Comm* c;
    CommRequest req;
    Buf<T> in, out;
    long long a, z;
    long long down = -1;  // optimizer offload: the own range whose gradients go to the host once it completes
    long long shard = -1;  // ZeRO >= 2: the own range whose shard slice out is added to once it completes
  };
  std::vector<DpPending> dp_pending;
  void delink_slot_sums();
  double grad_norm();
  void adam_update(int step, int warmup, double norm);
  void zero_gather_params();
  // Gradient element i of own range k (ZeRO >= 2: in the rank's shard; granular on the host: in the flat buffer).
  T* own_grad(size_t k, long long i) {
    return p.zero >= 2 && !own_on_host(k) ? gshard.data() + own_off[k] + (i - own[k].first) : Gd(i);
  }
  // In the pseudo phase a group's replicas count in the norm on its first holder stage only (replicas exist only
  // there: the real phase is a run of its own, exec/runtime/runtime_relayout.cpp).
  bool own_other_replica(size_t k) const {
    const int ui = own_unit[k];
    return shared > 0 && !slot_first_holder.empty() && is_layer_unit(ui) && ui - 1 < shared &&
           rc.stage != slot_first_holder[ui - 1];
  }
  // Work on an offloaded segment's host memory runs on the CPU backend.
  static const Backend& backend_for(bool host) { return host ? cpu_backend() : current_backend(); }
};

// Pseudo-to-Real as two runs (exec/runtime/runtime_relayout.cpp): the pseudo phase's, then the real phase's.
// plan.delink.plan of another layout: the state handed over through the single-rank layout, window by window;
// else (one layout): each rank's own state, kept in host memory between its two runs.
bool pseudo_plan_differs(const Scenario& sc);
template <class T>
RunResult run_two_layouts(const Scenario& sc, const RunOptions& o, Comm& world);
template <class T>
RunResult run_one_layout(const Scenario& sc, const RunOptions& o, Comm& world);

}  // namespace tp::exec::detail
