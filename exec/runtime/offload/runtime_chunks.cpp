// runtime_chunks: the runtime's glue to the chunk store (plan.offload "chunked"; exec/runtime/offload/chunk_store.hpp),
// declared in offload_glue.hpp: the pieces and runs of the rank's schedule (runs are the store's moments),
// the store's tensor list, the check that every run's chunks fit the budget,
// and the per-step / per-run offload figures of RunResult.
// Invariants: the tensor list is the simulator's (sim/chunk_offload.cpp list_chunk_tensors) for the same units:
// per owned unit in unit order, a layer's QKV, projection, fc1 and fc2 weights (a MoE layer: QKV, projection,
// router, shared experts' fc1 and fc2, the local experts' fc1 and fc2 views, exec/model/gpt.cpp's view order; each
// one tensor, in that order), then the layer's other views (norms, biases) joined as one tensor; the embedding's views (wte, wpe) joined as one, the head's
// (the final norm) likewise. So the store's chunks, and the chunks resident at each moment, are the
// simulator's. The order only places views in chunks: the pointer tables name every view's copy, so the
// model computes on the same values in the same order whatever the order (results are bit-identical).
#include <cstdio>
#include <string>

#include "exec/runtime/offload/offload_glue.hpp"

namespace tp::exec::detail {

namespace {
bool big_matrix(const std::string& name) {  // the simulator's per-layer tensors of their own
  for (const char* s : {"qkv_w", "proj_w", "fc1_w", "fc2_w", "router_w", "sh_fc1_w", "sh_fc2_w", "ex_w1", "ex_w2"}) {
    const std::string suf = std::string(".") + s;
    if (name.size() > suf.size() && name.compare(name.size() - suf.size(), suf.size(), suf) == 0) return true;
  }
  return false;
}
}  // namespace

std::vector<Piece> order_pieces(const std::vector<WorkItem>& order, const StageLayout& lay, int stage) {
  std::vector<Piece> pieces;
  for (int i = 0; i < (int)order.size(); ++i) {
    const long long lo = lay.first_layer(stage, order[i].chunk), Lc = lay.chunk_layers(stage, order[i].chunk);
    for (long long k = 0; k < Lc; ++k) {
      long long l = order[i].pass == Pass::fwd ? lo + k : lo + Lc - 1 - k;
      pieces.push_back(Piece{i, (int)l, order[i].pass});
    }
  }
  return pieces;
}

void split_runs(const std::vector<Piece>& pieces, std::vector<int>& run_of_piece, std::vector<int>& run_layer) {
  run_of_piece.assign(pieces.size(), 0);
  run_layer.clear();
  for (size_t k = 0; k < pieces.size(); ++k) {
    if (k == 0 || pieces[k - 1].layer != pieces[k].layer || pieces[k - 1].pass != pieces[k].pass)
      run_layer.push_back(pieces[k].layer);
    run_of_piece[k] = (int)run_layer.size() - 1;
  }
}

std::vector<ChunkTensor> chunk_tensors(const Flat& gl, const std::vector<std::pair<long long, long long>>& units,
                                       const std::vector<long long>& cbase) {
  std::vector<ChunkTensor> ts;
  for (int ui = 0; ui < (int)units.size(); ++ui) {
    if (cbase[ui] < 0) continue;
    const auto [a, z] = units[ui];
    auto add = [&](size_t v, bool joined) {
      ts.push_back(ChunkTensor{cbase[ui] + (gl.views[v].offset - a), gl.views[v].count, ui, (int)v, joined});
    };
    for (size_t v = 0; v < gl.views.size(); ++v)  // the big matrices first, each a tensor
      if (gl.views[v].offset >= a && gl.views[v].offset < z && big_matrix(gl.views[v].name)) add(v, false);
    bool first = true;  // then the unit's other views as one
    for (size_t v = 0; v < gl.views.size(); ++v)
      if (gl.views[v].offset >= a && gl.views[v].offset < z && !big_matrix(gl.views[v].name)) {
        add(v, !first);
        first = false;
      }
  }
  return ts;
}

template <class T>
void check_runs_fit(const ChunkStore<T>& store, const std::vector<int>& run_layer,
                    const std::function<std::vector<int>(int)>& run_parts, long long chunk_elements) {
  for (int r = 0; r < (int)run_layer.size(); ++r) {
    const double need = store.bytes_of_parts(run_parts(r));
    if (need <= store.budget_bytes()) continue;
    char msg[400];
    std::snprintf(msg, sizeof msg,
                  "$.plan.offload: the chunks of layer %d's run (with chunk_elements %lld) need %.0f bytes, more "
                  "than the device budget of %.0f bytes (--device-budget)",
                  run_layer[r], chunk_elements, need, store.budget_bytes());
    throw InputError({msg});
  }
}

void record_chunk_step(OffloadResult& f, const ChunkStepStats& cs) {
  f.h2d_bytes.push_back(cs.h2d_bytes);
  f.d2h_bytes.push_back(cs.d2h_bytes);
  f.h2d_s.push_back(cs.h2d_s);
  f.d2h_s.push_back(cs.d2h_s);
  f.h2d_moves.push_back((double)cs.h2d_moves);
  f.d2h_moves.push_back((double)cs.d2h_moves);
  f.adam_h2d_bytes.push_back(cs.adam_h2d_bytes);
  f.adam_d2h_bytes.push_back(cs.adam_d2h_bytes);
  f.peak_arena_bytes.push_back(cs.peak_resident_bytes);
  f.peak_arena_bytes_max = std::max(f.peak_arena_bytes_max, cs.peak_resident_bytes);
  f.peak_device_bytes.push_back(cs.peak_device_bytes);
  f.peak_device_bytes_max = std::max(f.peak_device_bytes_max, cs.peak_device_bytes);
  f.os_device_bytes.push_back(cs.os_device_bytes);
  f.prefetch_h2d_bytes.push_back(cs.prefetch_h2d_bytes);
  f.prefetch_d2h_bytes.push_back(cs.prefetch_d2h_bytes);
}

template <class T>
void finish_offload(OffloadResult& f, const ChunkStore<T>& store, long long chunk_elements) {
  f.on = true;
  f.budget_bytes = store.budget_bytes();
  f.arena_bytes = store.arena_bytes();
  f.chunk_elements = chunk_elements;
  f.chunks = store.chunks();
  for (int c = 0; c < store.chunks(); ++c) f.chunk_bytes += store.chunk_bytes(c);
}

template void check_runs_fit(const ChunkStore<float>&, const std::vector<int>&,
                             const std::function<std::vector<int>(int)>&, long long);
template void check_runs_fit(const ChunkStore<double>&, const std::vector<int>&,
                             const std::function<std::vector<int>(int)>&, long long);
template void finish_offload(OffloadResult&, const ChunkStore<float>&, long long);
template void finish_offload(OffloadResult&, const ChunkStore<double>&, long long);

}  // namespace tp::exec::detail
