// pipeline: the shared schedule — which compute work each pipeline rank does, in which order.
// This is the single source of truth for both interpreters: sim/ costs these items, exec/ runs them.
// Orders follow Megatron-LM exactly: forward_backward_pipelining_without_interleaving (1F1B) and
// forward_backward_pipelining_with_interleaving (interleaved 1F1B, microbatch group size = pp);
// GPipe is all forwards then all backwards. Layered gradient accumulation (Lamy-Poirier's LGA) is
// breadth-first: each local chunk runs forward for every micro-batch in increasing chunk order, then backward
// for every micro-batch in decreasing chunk order. The modular schedule (MPP) is a looping layout of
// one-layer chunks: breadth-first with layered accumulation, Megatron's interleaved order with standard.
// Layout: pipeline rank s holds local chunks c = 0..v-1 of Lc = layers / (pp * v) layers each. Looping
// (interleaved, modular): local chunk c is global model chunk c*pp + s. Contiguous (layered accumulation on
// gpipe / 1f1b stages, v = layers / pp one-layer chunks): local chunk c is global chunk s*v + c. Global model
// chunk g owns layers [g * Lc, (g + 1) * Lc).
// Uneven stages (plan.stage_layers, Megatron-LM's --decoder-first/last-pipeline-num-layers): stage s holds n_s
// layers in v chunks of n_s / v layers each (validation makes v divide every n_s); global model chunks keep the
// looping order above and own consecutive layer ranges, so chunk g owns [chunk_lo[g], chunk_lo[g + 1]) with
// chunk_lo the prefix sums of the chunk sizes in global chunk order — Megatron's get_transformer_layer_offset
// (megatron/core/transformer/transformer_layer.py). Even layouts keep chunk_lo empty and the closed forms.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "models/plan.hpp"

namespace tp {

enum class Pass : uint8_t { fwd = 0, bwd = 1 };

struct WorkItem {
  Pass pass;
  int chunk;       // local model chunk on this rank, 0..v-1
  int microbatch;  // 0..m-1
};

struct StageLayout {
  int pp = 1, v = 1;
  long long layers = 1;
  bool looping = true;  // global chunk = c * pp + s (else s * v + c)
  // Uneven stages: first layer of every global model chunk, pp * v + 1 entries (the last = layers); empty = even.
  std::vector<long long> chunk_lo;
  bool even() const { return chunk_lo.empty(); }
  // Layers of every chunk of an even layout (uneven: of the largest chunk).
  long long layers_per_chunk() const { return even() ? layers / ((long long)pp * v) : largest_chunk(); }
  long long largest_chunk() const;
  int model_chunk(int stage, int chunk) const { return looping ? chunk * pp + stage : stage * v + chunk; }
  int stage_of(int model_chunk) const { return looping ? model_chunk % pp : model_chunk / v; }
  int local_chunk(int model_chunk) const { return looping ? model_chunk / pp : model_chunk % v; }
  long long first_layer(int stage, int chunk) const {
    int g = model_chunk(stage, chunk);
    return even() ? g * layers_per_chunk() : chunk_lo[g];
  }
  long long chunk_layers(int stage, int chunk) const {
    int g = model_chunk(stage, chunk);
    return even() ? layers_per_chunk() : chunk_lo[g + 1] - chunk_lo[g];
  }
  long long stage_layers(int stage) const;     // layers held by pipeline rank `stage` (all its chunks)
  int chunk_of_layer(long long layer) const;   // the global model chunk owning `layer`
  int stage_of_layer(long long layer) const { return stage_of(chunk_of_layer(layer)); }
  int num_model_chunks() const { return pp * v; }
  bool has_embedding(int stage, int chunk) const { return model_chunk(stage, chunk) == 0; }
  bool has_head(int stage, int chunk) const { return model_chunk(stage, chunk) == pp * v - 1; }
};

// The layout a plan runs: its chunks and whether they loop (see the file comment).
StageLayout stage_layout(const Plan& p, long long layers);

// Ordered compute work of pipeline rank `stage` for one optimizer step of plan `p` with its
// num_microbatches (dispatches on schedule and grad_accumulation). Chunks index stage_layout(p)'s chunks.
std::vector<WorkItem> plan_order(const Plan& p, long long layers, int stage);

// Ordered compute work of pipeline rank `stage` for one optimizer step with m micro-batches.
std::vector<WorkItem> pipeline_order(Schedule s, int pp, int v, int m, int stage);
// Breadth-first (layered accumulation) order over v local chunks.
std::vector<WorkItem> breadth_first_order(int v, int m);

// Number of forward items the rank runs before its first backward (Megatron's warm-up count).
int warmup_items(Schedule s, int pp, int v, int m, int stage);

// Canonical op names shared by the simulator's and the executor's traces (one place builds them all).
//   chunk pass:  "C03.fwd.mb5"            chunk_op_name(3, fwd, 5)   (global model chunk 3, micro-batch 5)
//   part:        "L07", "embed", "head"   part_name(7)               (a layer, or the two ends)
//   part pass:   "L07.fwd.mb3"            part_op_name("L07", "fwd", "", 3)
//   op:          "L07.fwd.qkv.mb3"        part_op_name("L07", "fwd", "qkv", 3)
//   p2p:         "pp.send.s2-s3.fwd.mb3"  p2p_op_name(2, 3, fwd, 3)
std::string chunk_op_name(int model_chunk, Pass p, int mb);
std::string part_name(long long layer);
std::string part_op_name(const std::string& part, const char* pass, const std::string& op, int mb);
std::string p2p_op_name(int from_stage, int to_stage, Pass p, int mb);

}  // namespace tp
