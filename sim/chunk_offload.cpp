// chunk_offload: PatrickStar chunked offload in the step program. See chunk_offload.hpp.
// Tensors per layer (module order, per GPU after tensor parallelism): QKV, projection, fc1, fc2 weights
// (a MoE layer: its router, the shared experts' fc1 and fc2, then the local experts' fc1 weights as one tensor
// and their fc2 weights as one, as Megatron's GroupedMLP holds them, instead of fc1 / fc2), then the layer's
// small tensors (biases, norms) as one tensor; the embedding first and the head last on the stages that hold
// them. The executor's chunk store lists the same tensors (exec/runtime/offload/runtime_chunks.cpp).
#include "chunk_offload.hpp"

#include <algorithm>

#include "chunks.hpp"

namespace tp {

using detail::Run;

void list_chunk_tensors(const Scenario& sc, const CostModel& cm, const std::vector<long long>& local_layers,
                        bool has_embed, bool has_head, ChunkSimInput& in) {
  const Plan& p = sc.plan;
  const Transformer& M = sc.model;
  const double shard_tp = (double)p.tp;  // 1D: tp ranks; 2D: q * q
  const double h = (double)M.hidden, f = (double)M.ffn_hidden, kvd = (double)M.kv_heads * M.head_dim();
  const double f_in = M.activation == Activation::swiglu ? 2 * f : f;
  const double qw = (double)M.q_width(), fe = (double)M.expert_ffn(), fe_in = f_in / f * fe;
  const double fs = (double)M.moe.shared_ffn_hidden, fs_in = f_in / f * fs;
  const int head_part = 1 + (int)local_layers.size();
  auto tensor = [&](double elements, int part) {
    if (elements <= 0) return;
    in.tensor_elements.push_back(elements);
    in.tensor_part.push_back(part);
  };
  if (has_embed) tensor(cm.embed_params, 0);
  for (size_t i = 0; i < local_layers.size(); ++i) {
    const long long l = local_layers[i];
    const int part = 1 + (int)i;
    double qkv = h * (qw + 2 * kvd) / shard_tp, proj = qw * h / shard_tp;
    tensor(qkv, part);
    tensor(proj, part);
    double big = qkv + proj;
    double total = cm.layer_params;
    if (M.is_moe_layer(l)) {  // router, shared experts' fc1 / fc2, the local experts' fc1 / fc2 (grouped)
      total = cm.moe_params;
      const double local_experts = (double)(M.moe.experts / p.ep);
      const double router = h * (double)M.moe.experts, sh1 = h * fs_in / shard_tp, sh2 = fs * h / shard_tp;
      const double ex1 = local_experts * h * fe_in / shard_tp, ex2 = local_experts * fe * h / shard_tp;
      for (double x : {router, sh1, sh2, ex1, ex2}) tensor(x, part);  // (no shared experts: fs = 0, skipped)
      big += router + sh1 + sh2 + ex1 + ex2;
    } else {
      tensor(h * f_in / shard_tp, part);
      tensor(f * h / shard_tp, part);
      big += (h * f_in + f * h) / shard_tp;
    }
    tensor(std::max(0.0, total - big), part);  // biases and norms
  }
  if (has_head) tensor(cm.head_params, head_part);
}

ChunkPlan plan_chunk_offload(const Scenario& sc, Program& prog, detail::Builder& B, int r,
                             const std::vector<Run>& runs, const detail::Params& held) {
  (void)held;
  const Plan& p = sc.plan;
  const Transformer& M = sc.model;
  const CostModel& cm = prog.cm;
  const ElemBytes eb = elem_bytes(sc.training);
  const int s = prog.sim_stage[r];
  const StageLayout lay = stage_layout(p, M.layers);

  // Parts: 0 = embedding, 1 + i = the i-th local layer (ascending), last = head.
  std::vector<long long> local_layers;
  for (int c = 0; c < lay.v; ++c)
    for (long long l = lay.first_layer(s, c); l < lay.first_layer(s, c) + lay.chunk_layers(s, c); ++l)
      local_layers.push_back(l);
  std::sort(local_layers.begin(), local_layers.end());
  const bool has_embed = s == lay.stage_of(0), has_head = s == lay.stage_of(lay.num_model_chunks() - 1);
  auto part_of_layer = [&](long long l) {
    return 1 + (int)(std::lower_bound(local_layers.begin(), local_layers.end(), l) - local_layers.begin());
  };
  const int head_part = 1 + (int)local_layers.size();

  ChunkSimInput in;
  in.parts = head_part + 1;
  list_chunk_tensors(sc, cm, local_layers, has_embed, has_head, in);
  in.chunk_elements = p.offload.chunk_elements;
  in.world = p.data_ranks() > 1 ? p.data_ranks() : 1;
  in.rank = rank_coord(p, prog.sim_global[r]).dp;
  in.hbm_bytes = sc.cluster.gpu.hbm_bytes;
  in.gpu_memory_fraction = p.offload.gpu_memory_fraction;
  in.warmup_chunk_fraction = p.offload.warmup_chunk_fraction;
  in.hybrid_adam_margin = p.offload.hybrid_adam_margin;
  in.param_bytes = eb.e;
  in.os_bytes = eb.optimizer();
  in.prefetch_runs = p.offload.prefetch_runs;

  // Moments (one per run, then ADAM) and the non-model memory a warm-up step records at each: activations
  // stored so far plus the accessing piece's working set, plus pipeline buffers.
  double buffers = p.pp > 1 ? 4 * pipeline_send_bytes(sc, p.microbatch, p.tp) : 0;
  double stored = 0;
  size_t next_run = 0;
  const std::vector<int>& lane = prog.in.lane_order[r * kLanes + kLaneCompute];
  for (int t : lane) {
    const TaskInfo& ti = prog.info[t];
    if (ti.kind != TaskKind::fwd && ti.kind != TaskKind::bwd) continue;
    TaskCost tc = task_cost(cm, ti);
    if (next_run < runs.size() && runs[next_run].first == t) {
      const Run& ru = runs[next_run++];
      std::vector<int> parts;
      if (ru.embed && has_embed) parts.push_back(0);
      for (long long l = ru.lo; l < ru.hi; ++l) parts.push_back(part_of_layer(l));
      if (ru.head && has_head) parts.push_back(head_part);
      in.moments.push_back(parts);
      in.moment_is_adam.push_back(0);
      in.nonmodel_bytes.push_back(buffers + stored + std::max(tc.transient_bytes, tc.head_transient_bytes) +
                                  (ti.kind == TaskKind::fwd ? tc.stored_bytes : 0));
    }
    stored += ti.kind == TaskKind::fwd ? tc.stored_bytes : -tc.stored_bytes;
  }
  in.moments.push_back({});
  in.moment_is_adam.push_back(1);
  in.nonmodel_bytes.push_back(buffers);

  ChunkSimResult cr = simulate_chunks(in);

  // Moves happen synchronously when a run accesses its chunks: evictions (D2H) then loads (H2D), after the
  // previous run and before this one. A prefetch's evictions and loads (prefetch_runs) are queued then too, after
  // them, and run during this run on the D2H and H2D lanes (evictions first); the next run waits for them (the
  // executor's next access waits for the copy stream).
  auto pcie_task = [&](int lane_id, TaskKind kind, double bytes, int after, int before, int mb) {
    TaskInfo ti;
    ti.kind = kind;
    ti.mb = mb;
    ti.pcie_bytes = bytes;
    ti.optimizer_s = pcie_copy_s(bytes, sc.cluster.host);
    int id = B.add_task(r, lane_id, ti.optimizer_s, -1, ti);
    if (after >= 0) prog.in.edges.push_back({after, id});
    if (before >= 0) prog.in.edges.push_back({id, before});
    return id;
  };
  for (size_t k = 0; k < runs.size(); ++k) {
    int prev = k > 0 ? runs[k - 1].last : -1;
    int mb = prog.info[runs[k].first].mb;
    int d2h = -1, h2d = -1;
    if (cr.d2h_bytes[k] > 0) d2h = pcie_task(kLaneD2H, TaskKind::d2h, cr.d2h_bytes[k], prev, runs[k].first, mb);
    if (cr.h2d_bytes[k] > 0) {
      h2d = pcie_task(kLaneH2D, TaskKind::h2d, cr.h2d_bytes[k], prev, runs[k].first, mb);
      if (d2h >= 0) prog.in.edges.push_back({d2h, h2d});
    }
    if (cr.prefetch_h2d_bytes[k] > 0) {  // the next run waits for all of them, as the executor's next access does
      const int before = k + 1 < runs.size() ? runs[k + 1].first : -1;
      int out = -1;  // its evictions first (their slots take its loads)
      if (cr.prefetch_d2h_bytes[k] > 0) out = pcie_task(kLaneD2H, TaskKind::d2h, cr.prefetch_d2h_bytes[k], prev, before, mb);
      const int pf = pcie_task(kLaneH2D, TaskKind::h2d, cr.prefetch_h2d_bytes[k], prev, before, mb);
      for (int dep : {d2h, h2d, out})
        if (dep >= 0) prog.in.edges.push_back({dep, pf});
      if (out >= 0)
        for (int dep : {d2h, h2d})
          if (dep >= 0) prog.in.edges.push_back({dep, out});
    }
  }
  ChunkPlan out;
  int last_bwd = runs.empty() ? -1 : runs.back().last;
  size_t adam = runs.size();
  double adam_out = cr.adam_d2h_bytes + (adam < cr.d2h_bytes.size() ? cr.d2h_bytes[adam] : 0);
  if (adam_out > 0) out.adam_deps.push_back(pcie_task(kLaneD2H, TaskKind::d2h, adam_out, last_bwd, -1, 0));
  out.adam_h2d_bytes = cr.adam_h2d_bytes + (adam < cr.h2d_bytes.size() ? cr.h2d_bytes[adam] : 0);
  out.gpu_adam_params = cr.gpu_adam_elements;
  out.cpu_adam_params = cr.cpu_adam_elements;
  out.gpu_chunk_bytes = cr.peak_gpu_chunk_bytes;
  out.gpu_os_bytes = cr.gpu_os_bytes;
  out.comm_buffer_bytes = 0;  // a reservation inside the chunk budget; gathered payloads are in gpu_chunk_bytes
  out.host_bytes = cr.host_bytes;
  out.fits = cr.fits;
  out.why = cr.why;
  return out;
}

}  // namespace tp
