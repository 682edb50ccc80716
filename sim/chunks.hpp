// chunks: a pure, deterministic simulation of PatrickStar's chunk-based memory manager (seeds §4.2–4.5) for
// ONE data-parallel rank over training steps. It decides which fp16-param chunk moves (CPU<->GPU) happen at
// which "moment" of a step and how Adam is split between GPU and CPU. No time is modelled: the program
// builder (sim/program.cpp) turns the moves into PCIe tasks.
// Invariants: the result depends only on the input (ties are broken by the lowest chunk id); a tensor is never
// split across chunks; only the rank's local chunks ever move; chunks accessed at a moment (COMPUTE) are
// never evicted at that moment; the function never throws for memory shortage (it reports fits = false) and
// throws std::invalid_argument only for malformed input (size mismatches, part ids out of range).
//
// Conventions (all choices that seeds leaves open):
// - Layout. Tensors go into chunks of capacity `chunk_elements` in the given (module-construction) order; a
//   tensor that does not fit in the open chunk opens a new one. A tensor larger than `chunk_elements` gets a
//   chunk of its own whose capacity is its size; the next tensor opens a new chunk. The chunk list is padded
//   with empty dummy chunks to a multiple of `world`; group g = chunks [g*world, (g+1)*world); chunk c is local
//   to rank c % world. Chunk payloads are allocated whole: every byte figure uses the chunk CAPACITY (times
//   param_bytes or os_bytes), while element counts (local_param_elements, *_adam_elements) count real params.
// - Moments. Moment k accesses every group holding a tensor of any part in moments[k]: the rank's local
//   (non-dummy) chunk of the group must be on the GPU (an H2D move if it is on the CPU); the other world-1
//   payloads (and the rank's own payload when its chunk of the group is a dummy) are all-gathered into GPU
//   memory for the moment only ("transient" bytes, never moves). The ADAM moment accesses no fp16 chunk.
// - Per moment, in this order: mark the needed local chunks COMPUTE; evict (D2H) non-COMPUTE local GPU chunks
//   while  resident local bytes + needed bytes still on the CPU + max(0, transient - comm_buffer_bytes)
//   >  budget[k]  (the gathered payloads live in the all-gather buffer that the budget already reserves;
//   only a part spanning several groups spills over it; GPU optimizer state is already taken out of the
//   steady budgets); then move the needed chunks H2D in chunk order. If nothing more can be evicted, the
//   moment proceeds over budget (PatrickStar would try the allocation anyway).
// - Budgets (overall = gpu_memory_fraction * hbm_bytes, E = chunk_elements):
//   warm-up step: warmup_chunk_fraction * overall; its ADAM moment: overall - 16*E bytes.
//   steady steps: min(overall - nonmodel[k], overall - nonmodel[k+1]) - comm_buffer_bytes - gpu_os_bytes
//   (k+1 wraps to moment 0 of the next step); the ADAM moment: overall - 16*E - gpu_os_bytes bytes
//   (PatrickStar's `overall - 4 * chunk_size * 4`, a chunk size in elements used as bytes).
// - Eviction. Warm-up: equal priority, the lowest chunk id first. Steady: Belady — the candidate whose next
//   access after moment k in the warm-up trace is farthest (not again this step: total + first access; never
//   accessed: 2 * total), ties to the lowest chunk id. All chunks start on the CPU before the warm-up step;
//   the reported step is step 2 (warm-up = step 0), starting from the placement left by step 1.
// - A move copies the whole payload (PatrickStar's chunk_move), so an evicted chunk costs a D2H even if it was
//   only read. Worst case (a budget that holds only the COMPUTE chunks, an ADAM budget below one chunk): a
//   local chunk moves H2D at every access that does not directly follow an access of it, and D2H once after
//   each such stay. For moments fwd 0..P-1, bwd P-1..0, ADAM with one local chunk per part that is 2P-1
//   chunks each way per step: seeds §4.5's "params H2D twice" (2 * 2M/N) less the last part, whose chunk
//   stays from its forward to its backward; the D2H side is the same, not 2M/N (a move is a copy).
// - Prefetch (prefetch_runs = d > 0; the executor's copy stream): in steady steps, at moment k after its moves, the
//   chunks of moments k+1..k+d not on the GPU load in moment, then chunk order, each after Belady evictions (keys at
//   k) of chunks that neither moment k nor those moments access, while resident + it + the spill stays within
//   budget[k]; the first that cannot fit ends it (sim/chunk_policy.hpp chunk_prefetch). Its evictions and loads are
//   prefetch moves of moment k (D2H, then H2D, during the run: prefetch_d2h_bytes / prefetch_h2d_bytes), so
//   gpu_chunk_bytes[k] includes the loaded chunks and not the evicted ones. Warm-up steps and the ADAM moment never prefetch. PatrickStar moves
//   synchronously (d = 0, the default).
// - Hybrid Adam: margin = overall - max(nonmodel) - local fp16 chunk bytes; the FIRST local chunks in chunk
//   order get their optimizer state (os_bytes/element, capacity) on the GPU while the cumulative OS bytes stay
//   within max(0, margin) * hybrid_adam_margin (= floor(margin*ratio / (E*os_bytes)) chunks when all chunks
//   have capacity E). At ADAM, a CPU-Adam chunk whose fp16 chunk is on the GPU sends its fp16 grads D2H and
//   gets the updated fp16 params back H2D; symmetrically a GPU-Adam chunk whose fp16 chunk is on the CPU
//   gets grads H2D and sends params D2H. Both count in adam_h2d_bytes / adam_d2h_bytes, not in `moves`.
// - fits = false when, at some moment, the local COMPUTE chunks plus the transient payloads exceed
//   overall - nonmodel[k]; `why` names the first such moment and the excess.
// - host_bytes = peak (over the reported step, sampled at its start and after every moment) of CPU-resident
//   local fp16 chunk bytes + optimizer state of CPU-Adam chunks (capacity * os_bytes). Staging buffers of one
//   chunk (FP32ChunkReadBuffer) and the all-gather buffer are not counted.
// - GPU memory at moment k = nonmodel[k] + gpu_chunk_bytes[k] + gpu_os_bytes: comm_buffer_bytes is a
//   reservation inside the budget, not an extra allocation (the gathered payloads are in gpu_chunk_bytes).
#pragma once
#include <string>
#include <vector>

namespace tp {

struct ChunkSimInput {
  // Parameter tensors in module-construction order, each with the access part (0..parts-1) that uses it
  // (e.g. part 0 = embedding, part 1+l = layer l, last = head).
  std::vector<double> tensor_elements;
  std::vector<int> tensor_part;
  int parts = 0;
  long long chunk_elements = 64LL << 20;
  int world = 1;  // data-parallel ranks: groups of `world` consecutive chunks, chunk c local to rank c % world
  int rank = 0;   // which rank we simulate
  // One training step as a sequence of moments: moments[k] = the parts accessed (COMPUTE) at moment k
  // (pre-forward or pre-backward of parts); the ADAM moment is flagged in moment_is_adam (its parts ignored).
  std::vector<std::vector<int>> moments;
  std::vector<char> moment_is_adam;     // same size as moments
  std::vector<double> nonmodel_bytes;   // GPU non-model memory at each moment (warm-up record); same size
  double hbm_bytes = 0;                 // device memory
  double gpu_memory_fraction = 0.8;     // overall_gpu_mem = fraction * hbm
  double warmup_chunk_fraction = 0.1;   // warm-up cap on GPU chunk memory = this * overall
  double hybrid_adam_margin = 0.8;      // margin_use_ratio
  double param_bytes = 2;               // fp16 param per element; the fp16 grad reuses this slot
  double os_bytes = 12;                 // fp32 master + momentum + variance per element
  int prefetch_runs = 0;                // steady steps: the next runs' chunks load during moment k (see Prefetch)
};

// One chunk move of the reported step (bytes = chunk capacity * param_bytes).
struct ChunkMove {
  int moment = 0;
  int chunk = 0;
  bool to_gpu = false;
  double bytes = 0;
  bool prefetch = false;  // a move of the prefetch at `moment` (a load for a later moment, or its victim; copy stream)
};

// Adam work of one local chunk, in chunk order.
struct AdamChunk {
  int chunk = 0;
  double elements = 0;        // real parameters in the chunk
  bool os_on_gpu = false;     // GPU Adam (its optimizer state lives on the GPU)
  bool param_on_gpu = false;  // where its fp16 param/grad chunk is at the ADAM moment
};

struct ChunkSimResult {
  int chunks = 0, local_chunks = 0;  // real (non-dummy) fp16-param chunks in total / local to this rank
  int padded_chunks = 0;             // chunks including dummy padding (a multiple of world)
  double local_param_elements = 0;   // real parameters in the local chunks
  double local_fp16_bytes = 0;       // sum of local chunk capacities * param_bytes
  std::vector<ChunkMove> moves;      // moves of the reported steady step, in order (a moment's D2H first)
  std::vector<double> h2d_bytes, d2h_bytes;   // per moment of the reported step (sum of its moves, before its run)
  std::vector<double> prefetch_h2d_bytes;     // per moment: the prefetch's loads, during its run
  std::vector<double> prefetch_d2h_bytes;     // per moment: the prefetch's evictions, during its run, before its loads
  std::vector<double> gpu_chunk_bytes;  // per moment: local GPU chunks + transient payloads, after the moves
  std::vector<double> budget_bytes;     // per moment: steady chunkable budget (see conventions)
  double peak_gpu_chunk_bytes = 0;
  double comm_buffer_bytes = 0;  // world * chunk_elements * param_bytes when world > 1, else 0
  int os_chunks_on_gpu = 0;      // hybrid Adam: optimizer-state chunks on the GPU
  double gpu_os_bytes = 0;       // their bytes (capacity * os_bytes), resident on the GPU all step
  double gpu_adam_elements = 0, cpu_adam_elements = 0;
  double adam_d2h_bytes = 0, adam_h2d_bytes = 0;  // ADAM-moment copies between fp16 and OS chunk devices
  std::vector<AdamChunk> adam_chunks;             // per local chunk
  double host_bytes = 0;  // peak CPU fp16 chunks + CPU optimizer state (see conventions)
  bool fits = true;       // false when some moment's COMPUTE chunks alone exceed overall - nonmodel[k]
  int unfit_moment = -1;  // first such moment
  std::string why;        // when !fits: which moment and by how much
};

// Layout only (module order, no splitting, padded groups of `world`).
struct ChunkLayout {
  std::vector<int> chunk_of_tensor;
  std::vector<double> chunk_elements;        // capacity of each chunk (dummies: chunk_elements)
  std::vector<double> used_elements;         // real parameters in each chunk (dummies: 0)
  std::vector<char> is_dummy;
  std::vector<std::vector<int>> parts_of_chunk;  // sorted, unique; empty for dummies
};
ChunkLayout layout_chunks(const ChunkSimInput& in);

// Warm-up step, steady step 1, steady step 2; reports step 2 (see the conventions above).
ChunkSimResult simulate_chunks(const ChunkSimInput& in);

}  // namespace tp
