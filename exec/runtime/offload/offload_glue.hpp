// offload_glue: what the runtime's offload paths share (exec/runtime/offload/runtime_chunks.cpp,
// runtime_granular.cpp): the rank's pieces and the chunk store's runs (its moments), the store's tensors in the
// simulator's order, the device-budget check, and the per-step offload figures of the run's result.
// Internal to exec/runtime.
#pragma once
#include <functional>
#include <utility>
#include <vector>

#include "exec/runtime/model_flat.hpp"
#include "exec/runtime/offload/chunk_store.hpp"
#include "exec/runtime/train.hpp"
#include "schedule/pipeline.hpp"

namespace tp::exec::detail {

// One layer's forward or backward inside work item `item` of the rank's order.
struct Piece { int item, layer; Pass pass; };

// Chunk-store glue (exec/runtime/offload/runtime_chunks.cpp). The pieces of the rank's work items in execution order (a
// forward item's layers ascending, a backward's descending), and its runs (the store's moments: consecutive
// pieces on the same layer and pass): run_of_piece per piece, run_layer per run.
std::vector<Piece> order_pieces(const std::vector<WorkItem>& order, const StageLayout& lay, int stage);
void split_runs(const std::vector<Piece>& pieces, std::vector<int>& run_of_piece, std::vector<int>& run_layer);
// The store's tensors of the held units (units[u] = its flat
// [a, b), cbase[u] = its base in the compact buffers, -1 when not held) in the simulator's order: per unit,
// the QKV, projection, fc1, fc2 weights, then the unit's other views joined as one tensor; part = unit.
std::vector<ChunkTensor> chunk_tensors(const Flat& gl, const std::vector<std::pair<long long, long long>>& units,
                                       const std::vector<long long>& cbase);
// Throws InputError when some run's chunks (run_parts(r)) exceed the device budget.
template <class T>
void check_runs_fit(const ChunkStore<T>& store, const std::vector<int>& run_layer,
                    const std::function<std::vector<int>(int)>& run_parts, long long chunk_elements);
void record_chunk_step(OffloadResult& f, const ChunkStepStats& cs);  // appends one step's figures
template <class T>
void finish_offload(OffloadResult& f, const ChunkStore<T>& store, long long chunk_elements);  // the run's

// One step's figures of optimizer or granular offload (host_optimizer.hpp, runtime_granular.hpp) into the run's
// result: the step's copies (and, for granular, the peak of loaded layers), then the counters restart.
inline void record_offload_step(OffloadResult& f, const char* kind, double& h2d_bytes, double& d2h_bytes,
                                double host_state_bytes, double* peak_loaded_bytes) {
  f.on = true;
  f.kind = kind;
  f.h2d_bytes.push_back(h2d_bytes);
  f.d2h_bytes.push_back(d2h_bytes);
  f.host_state_bytes = host_state_bytes;
  h2d_bytes = d2h_bytes = 0;
  if (peak_loaded_bytes) f.peak_loaded_bytes.push_back(*peak_loaded_bytes), *peak_loaded_bytes = 0;
}

}  // namespace tp::exec::detail
