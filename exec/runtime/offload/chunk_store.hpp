// exec/runtime/offload/: the runtime's offload stores: chunks (this file, runtime_chunks.cpp), optimizer offload
// (host_optimizer.hpp) and granular offload (runtime_granular).
// chunk_store: PatrickStar chunk-based offload for the executor (plan.offload {"kind": "chunked"}), the same
// policy as the simulator's chunk manager (sim/chunks.hpp), applied to real memory.
//
// Memory. The HOST POOL is the rank's flat parameter and gradient buffers themselves (plain host arrays,
// exec/model/gpt.hpp). The DEVICE POOL is one arena allocated once, of min(budget, all chunk slots) bytes (a budget
// larger than every chunk never needs more; backend memory from the current backend's alloc, on the CPU backend
// its own heap block). A chunk resident on
// the device lives in one arena SLOT of its capacity: its parameters (state P), or, once its parameters are not
// used again in the step, its gradients (state G). That is PatrickStar's gradient reuse of the fp16 param
// chunk (the executor's elements are fp32 / fp64): at the release of a chunk's last access of the warm-up
// trace (the backward of its earliest layer, which accumulated its gradient into the flat buffer; on a GPU
// that is autograd's temporary), the chunk's gradients are copied into its slot (grad_reuse_bytes, not a
// move) and the host keeps the master parameters. Until then the gradients accumulate in the flat buffer. A
// move is a real memcpy of the slot's content (P: parameters, G: gradients) between the flat buffers and the
// slot (counted in bytes actually copied and timed); a G chunk accessed again (only without an optimizer
// phase) goes back to the host and reloads its parameters. Slots are placed first-fit; when the free bytes
// suffice but no hole does, the arena is compacted (resident slots slide down; not a move).
// bf16 slots (training.precision "bf16", given a ChunkBf16): as PatrickStar's fp16 chunks and the simulator's
// (param_bytes 2), a slot holds its chunk's parameters as bf16, 2 bytes an element, and the host keeps them so too in
// host16 (PatrickStar's CPU-side fp16 chunks) beside the master parameters: a move copies the bf16 chunk each way,
// the GEMMs read a resident chunk's weights from its slot (the external copies of exec/model/gpt.hpp WeightCopies16,
// the p16 table), and the views the ops read as T (norms, biases, positions: a small fraction) from a device mirror
// of them kept whole, rewritten with host16 (mirror_bytes, in the device peak). The gradients stay in the host's flat
// buffer (no gradient reuse: a bf16 slot cannot hold the T gradients); the optimizer phase packs every updated
// parameter into host16 (host_pack_bf16) and copies the resident chunks' up (adam_h2d_bytes); ZeRO's all-gathers,
// which write the T parameters, repack what they wrote (rewritten). The same values as the GEMMs' own copies (the
// same rounding), so a run gives the results of the plan without offload. Hybrid Adam (enable_hybrid_adam, PatrickStar's
// and the simulator's rule, sim/chunk_policy.hpp hybrid_adam_chunks): at the end of the warm-up step, the first chunks
// whose optimizer state (bf16 slots: the fp32 master and two moments, 3 T an element; T slots: the two moments, 2 T,
// the parameters being their own master, as the simulator's fp32 optimizer state) fits in budget - the warm-up's
// peak non-model bytes - every chunk's bytes, times the margin ratio, get that state on the device (copied up from
// the host once; os_bytes, counted in the device peak and taken out of the steady and ADAM budgets), and their Adam
// runs there (device_adam: the gradients, which stay on the host or come down from a G slot at the ADAM moment, staged
// up per piece, with T slots the parameters too; the updated master, or parameters, copied down to the host's
// parameters, which the fp32 reads, the bf16 packing and the resident slots' refresh use). The state is the rank's own (OsPiece): with one
// data rank every element of the chunk (a chunk's state is its capacity, as the simulator counts it), with ZeRO-3
// over several data ranks this rank's slices of its views (a chunk's state is their elements: every chunk of the
// executor is the rank's, each holding 1 / dp of its own state, where the simulator deals whole chunks to the
// ranks). Their moments on the host are stale until sync_os_to_host (the runtime calls it before it reads them: a
// checkpoint).
// Pointer tables. Every tensor (parameter view) of the store has an entry in the caller's per-view tables
// (params and grads): the address of its AUTHORITATIVE copy — the arena slot for the content the slot holds
// (P: the parameters, G: the gradients), the flat buffer otherwise. The model (Gpt / Gpt2d::p, g) and the runtime's ZeRO copies read and write through them.
//
// Policy (sim/chunks.hpp conventions, world = 1):
// - Layout: layout_chunks over the tensors in the given order (a tensor is never split; a larger tensor gets a
//   chunk of its own sized to it); bytes of a chunk = capacity x sizeof(T) (slots are allocated whole). A
//   tensor flagged `joined` is packed with the tensors before it as ONE simulator tensor (never split from
//   them): the runtime lists each layer's QKV, projection, fc1, fc2 weights, then its small views joined, the
//   embedding's and the head's views joined, exactly the simulator's list (sim/chunk_offload.cpp), so both
//   sides have the same chunks. layout() is that simulator-level layout; chunk_of(t) maps a store tensor.
// - Moments: access(k, parts) at moment k of a step (the runtime: one per run, in order), then host_phase_begin
//   (k = the ADAM moment). The FIRST step (and the first after reset_trace) is the warm-up: it records which
//   moments touch each chunk.
// - Per access, in this order: unpin the previous moment's chunks, pin (COMPUTE) the chunks of `parts`; evict
//   (D2H) unpinned resident chunks while resident + incoming bytes > budget[k]; load (H2D) the needed chunks in
//   chunk order. Budgets: warm-up steps warmup_fraction x budget; later steps, as PatrickStar and the
//   simulator, budget - max(nonmodel[k], nonmodel[k+1]) (k+1 wraps to moment 0), where nonmodel[k] is the
//   warm-up step's non-model device memory during moment k: the peak of the tracked heap (prof::track_heap,
//   as `trainplan validate` runs) above its level at the step's start (activations and scratch; the host
//   pools and the arena are live before the step); 0 when the heap is not tracked, so a plain run keeps the
//   whole budget. The ADAM moment: budget - 16 x chunk_elements bytes in every step (the simulator's
//   `overall - 16 E`, PatrickStar's `overall - 4 * chunk_size * 4`). If nothing more can be evicted the loads
//   proceed: the runtime checks beforehand that every moment's chunks fit the budget (fits_error), so the
//   arena always holds them.
// - Prefetch (set_prefetch(d > 0), plan.offload.prefetch_runs; steady steps): at the end of access(k) the chunks of
//   the next d moments that are not resident load on the store's copy stream while moment k's run computes, after
//   Belady evictions of chunks that neither moment k nor those moments touch, within moment k's budget, the
//   simulator's rule (sim/chunk_policy.hpp chunk_prefetch, sim/chunks.hpp "Prefetch"). The copies start after the
//   work queued on the compute stream so far (no slot is overwritten under a kernel still reading it); a prefetched
//   chunk counts as resident at once (its slot, the moment's memory), but the pointer tables name its slot only at
//   the next access, where the compute stream first waits for the copies (settle). The prefetch's evictions go first
//   on the same stream (their slots free at once for its loads, which the stream orders after them; a compaction in
//   between first makes the compute stream wait for them): nothing reads or writes an evicted chunk's data before
//   the next access (a run touches its own chunks only), and host code that writes what a copy may still read or
//   reads what one may still write (the optimizer phase, refresh_copies, rewritten, evict_all) waits for the copy
//   stream first. The warm-up step and the ADAM moment never prefetch; prefetch_h2d_bytes / prefetch_d2h_bytes
//   count its loads and evictions (also in h2d_bytes / d2h_bytes and the moves).
// - Victim: warm-up, the lowest chunk id; later, Belady on the warm-up trace: the chunk whose next access
//   after moment k is farthest (not again this step: T + its first access; never accessed: 2T, T = moments
//   per step including ADAM), ties to the lowest chunk id.
// - Adam is CPU Adam for every chunk with T slots (optimizer state stays in host arrays; bf16 slots: hybrid Adam, above):
//   host_phase_begin evicts to the ADAM budget, copies the gradients of the resident G chunks D2H and points every
//   table entry at the flat buffers; the optimizer then works on the flat buffers; host_phase_end copies the
//   updated parameters of the resident chunks H2D and points the tables back at the arena. These copies count
//   as adam_{d2h,h2d}_bytes (the simulator's "CPU-Adam chunk whose fp16 chunk is on the GPU"), not as moves.
//   Parameters on the host stay valid for everything the optimizer reads: only the optimizer and ZeRO-3
//   all-gathers write parameters, and an all-gather rewrites this rank's own slice with the same values.
// Device memory (ChunkStepStats::peak_device_bytes, what `validate` compares with the simulator's peak): per
// moment, the resident slot bytes after its loads plus its non-model bytes (above); the optimizer phase counts
// its slots only (CPU Adam's temporaries are host memory).
// Invariants (tested in tests/exec/test_chunk_store.cpp): resident bytes never exceed the arena (and, after
// an access, the moment's budget unless only pinned chunks are resident); a pinned chunk is never evicted;
// every moved byte is counted; the results of a run do not depend on the budget (copies are exact).
#pragma once
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "exec/backends/backend.hpp"
#include "exec/runtime/offload/copy_streams.hpp"
#include "sim/chunks.hpp"

namespace tp::exec {

// One tensor of the store: a view [offset, offset + count) of the flat buffers, its access part and its index
// in the pointer tables; `joined`: packed with the previous tensor as one simulator tensor (same part).
struct ChunkTensor {
  long long offset = 0, count = 0;
  int part = 0;
  int view = 0;
  bool joined = false;
};

// What one step moved (bytes actually copied; seconds measured around the memcpys).
struct ChunkStepStats {
  double h2d_bytes = 0, d2h_bytes = 0, h2d_s = 0, d2h_s = 0;
  long long h2d_moves = 0, d2h_moves = 0;
  double adam_h2d_bytes = 0, adam_d2h_bytes = 0;  // CPU Adam: grads of resident chunks out, params back
  long long compactions = 0;
  double peak_resident_bytes = 0;  // peak arena bytes held by resident chunk slots (capacity-based)
  double grad_reuse_bytes = 0;     // gradients placed into their chunk's parameter slot after its last use
  // Device memory as the simulator counts it (needs prof::track_heap, else the non-model part is 0): per
  // moment, the resident slots plus the tracked heap's growth above the step's start (activations, scratch).
  double peak_nonmodel_bytes = 0, peak_device_bytes = 0;
  double os_device_bytes = 0;      // hybrid Adam: optimizer state on the device
  double prefetch_h2d_bytes = 0;   // loads of the prefetch (on the copy stream; also in h2d_bytes)
  double prefetch_d2h_bytes = 0;   // the prefetch's evictions (on the copy stream; also in d2h_bytes)
};

// bf16 slots (above): the host's bf16 parameters (host16, the flat buffers' length), the per-view table of the
// resident bf16 copies (p16), which views the model reads only as bf16 (read16, per view; the others go to the
// mirror), and the threads of the host packing.
struct ChunkBf16 {
  uint16_t* host16 = nullptr;
  std::vector<const uint16_t*>* p16 = nullptr;
  std::vector<char> read16;
  int threads = 1;
};

struct ChunkMoveLog {
  int step = 0, moment = 0, chunk = 0;
  bool to_device = false;
  bool prefetch = false;  // a load of moment `moment`'s prefetch
};

template <class T>
class ChunkStore {
 public:
  // tensors in packing order (see Layout); parts = number of access parts (tensor.part < parts); the flat host buffers and
  // the per-view pointer tables (entries of the store's tensors are set to the host addresses here).
  // bf16: the bf16 slots' host side and tables (null: T slots).
  ChunkStore(const std::vector<ChunkTensor>& tensors, int parts, long long chunk_elements, double budget_bytes,
             double warmup_fraction, T* host_params, T* host_grads, std::vector<T*>& ptab, std::vector<T*>& gtab,
             const ChunkBf16* bf16 = nullptr);

  const ChunkLayout& layout() const { return lay_; }  // over the simulator-level tensors (joined runs as one)
  int chunk_of(int tensor) const { return chunk_of_[tensor]; }
  int chunks() const { return (int)cap_.size(); }
  double chunk_bytes(int c) const { return (double)cap_[c] * es_; }
  double budget_bytes() const { return budget_; }
  double arena_bytes() const { return (double)arena_elems_ * es_; }
  bool bf16_slots() const { return h16_ != nullptr; }
  void refresh_copies();             // bf16 slots: host16 and the mirror from the host parameters (after they changed;
                                     // no-op with T slots)
  double mirror_bytes() const { return mirror_bytes_; }
  // bf16 slots: elements [lo, hi) of view v were rewritten through the pointer table (a ZeRO all-gather): a
  // bf16-read view's new values packed into host16 and, resident, into its slot (device ops, stream-ordered); a
  // T-read view was written in the mirror, which is what the ops read.
  void rewritten(int view, long long lo, long long hi);
  // Hybrid Adam (above) over the rank's own optimizer state, as pieces: view `view`'s elements [lo, lo + n)
  // (view-local), with their gradient and Adam moments in host memory (one data rank: the whole views, the flat
  // buffers' layout; ZeRO-3 over several: this rank's slices, the runtime's own ranges). A view has one piece at most.
  struct OsPiece {
    int view = 0;
    long long lo = 0, n = 0;
    const T* grad = nullptr;
    T *m1 = nullptr, *m2 = nullptr;
  };
  void enable_hybrid_adam(std::vector<OsPiece> pieces, double margin_ratio);
  bool os_on_device(int view) const;  // the view's optimizer state is on the device (its Adam is device_adam's)
  // adamw(view, master, grads, m1, m2, n) on device memory for every tensor whose state is on the device, queued:
  // each piece's gradients (T slots: and parameters) go up on the copy stream after the compute stream's work so
  // far, its Adam runs on the compute stream after them, its updated master (or parameters) go down on the copy
  // stream after that (the one stream orders the stage's reuse). It returns at once, so the host's Adam of the other
  // chunks runs meanwhile (the simulator's optimizer and host_adam tasks side by side); device_adam_wait makes the
  // host's parameters final (host_phase_end calls it too).
  void device_adam(const std::function<void(int, T*, const T*, T*, T*, long)>& adamw);
  void device_adam_wait();
  void sync_os_to_host();             // the device moments to the host's
  double os_bytes() const { return os_bytes_; }
  double bytes_of_parts(const std::vector<int>& parts) const;  // slot bytes of the chunks these parts touch
  std::vector<int> chunks_of(const std::vector<int>& parts) const;  // sorted, unique
  bool warmup() const { return warm_; }
  void set_prefetch(int runs) { prefetch_ = runs > 0 ? runs : 0; }  // (Prefetch above; 0: off)
  // The runtime rewrites the accessed chunks' host copies during their run (rewritten: ZeRO-3's all-gathers over
  // several data ranks, bf16 slots): access first waits for the previous prefetch on the host, so that the one it
  // queues overlaps the run rather than the rewrite waiting for it.
  void set_host_rewrites(bool on) { host_rewrites_ = on; }

  void begin_step();                 // resets the step's stats
  void access(int moment, const std::vector<int>& parts);
  void release();                    // unpins the current moment's chunks
  void zero_resident_grads();        // the gradient halves of resident slots (the flat grads are the caller's)
  void host_phase_begin(int moment); // the ADAM moment (see above)
  void host_phase_end();
  void evict_all();                  // every resident chunk back to the host (e.g. before the runtime rewrites them)
  void reset_trace();                // the next step is a warm-up again (the access pattern changed)
  ChunkStepStats end_step();         // closes the step (a warm-up step fixes the trace) and returns its stats

  // Introspection for tests.
  bool resident(int c) const { return slot_[c] >= 0; }
  bool pinned(int c) const { return pinned_[c] != 0; }
  double resident_bytes() const { return resident_bytes_; }
  const std::vector<std::vector<int>>& trace() const { return trace_; }
  bool keep_log = false;
  std::vector<ChunkMoveLog> log;

 private:
  void evict(int c, int moment, bool on_copy_stream = false);  // (on the copy stream: a prefetch's victim)
  void load(int c, int moment);
  long long place(long long elems);  // slot offset in the arena, -1 if no hole fits
  void compact();
  void point(int c, bool at_arena);
  void evict_to(double budget, int moment);
  double moment_budget(int moment) const;
  void close_window(bool device_side);
  void prefetch(int moment);
  void settle();                                  // the compute stream waits for the prefetch; tables to its slots
  void quiesce();                                 // settle, and the host waits for the copy stream

  std::vector<ChunkTensor> tensors_;
  ChunkLayout lay_;
  std::vector<long long> cap_;                    // capacity per chunk (elements)
  std::vector<std::vector<int>> tensors_of_;      // per chunk, in order
  std::vector<long long> toff_;                   // per tensor: offset inside its chunk
  std::vector<int> chunk_of_;                     // per tensor: its chunk
  std::vector<std::vector<int>> chunks_of_part_;  // per part, sorted
  long long E_ = 0;
  double budget_ = 0, warm_fraction_ = 1;
  T *hp_ = nullptr, *hg_ = nullptr;
  std::vector<T*>&pt_, &gt_;
  uint16_t* h16_ = nullptr;                       // bf16 slots: the host's bf16 parameters (else null)
  std::vector<const uint16_t*>* p16_ = nullptr;   // bf16 slots: per view, its resident bf16 copy
  int threads_ = 1;
  std::vector<long long> moff_;                   // bf16 slots: per tensor, its offset in the mirror (T), -1: none
  size_t es_ = sizeof(T);                         // bytes of a slot element: sizeof(T), or 2 (bf16 slots)
  struct ArenaFree {  // the arena is backend memory (ops run on it), freed by the backend that allocated it
    const Backend* be = nullptr;
    void operator()(char* p) const;
  };
  std::unique_ptr<char, ArenaFree> arena_, mirror_;  // (mirror: bf16 slots' T-read views, whole)
  double mirror_bytes_ = 0;
  long long arena_elems_ = 0;                     // slot elements (es_ bytes each)
  char* at(long long off) const { return arena_.get() + off * (long long)es_; }
  bool hybrid_ = false;                           // hybrid Adam enabled
  std::vector<OsPiece> pieces_;                   // hybrid Adam: the rank's own state
  std::vector<std::vector<int>> pieces_of_;       // per chunk: its pieces, in chunk order
  std::vector<long long> poff_;                   // per piece: its offset in its chunk's state region
  std::vector<long long> os_len_;                 // per chunk: its state region's elements (a whole chunk: its capacity)
  double hy_ratio_ = 0;
  std::unique_ptr<char, ArenaFree> os_;           // hybrid Adam: per device chunk [master | m1 | m2], cap T each
  std::unique_ptr<char, ArenaFree> adam_stage_;   // device_adam's stage until device_adam_wait
  std::vector<long long> os_at_;                  // per chunk: its state's offset in os_ (T elements), -1: host
  T* host_param(const OsPiece& q) const { return hp_ + tensors_[tensor_of_view_[q.view]].offset + q.lo; }
  double os_bytes_ = 0;
  std::vector<int> tensor_of_view_;               // per view of the tables: its tensor, -1
  void place_os();
  // The parts of the device state an element: bf16 slots [master | m1 | m2]; T slots [m1 | m2] (the parameters are the
  // master, staged up for the Adam: the simulator's fp32 optimizer state, 8 bytes an element).
  int os_parts() const { return h16_ ? 3 : 2; }
  T* os_ptr(int c, int which, int piece) const {   // which 0: master (bf16 slots), 1: m1, 2: m2
    return reinterpret_cast<T*>(os_.get()) + os_at_[c] + (which - (3 - os_parts())) * os_len_[c] + poff_[piece];
  }
  std::vector<long long> slot_;                   // per chunk: slot offset (elements) or -1
  std::vector<char> gslot_;                       // per resident chunk: its slot holds the gradients
  std::map<long long, int> slots_;                // offset -> chunk
  std::vector<char> pinned_;
  std::vector<int> pinned_list_;
  double resident_bytes_ = 0;
  bool warm_ = true, host_phase_ = false;
  int steps_ = 0, moments_ = 0, max_moment_ = -1;
  std::vector<std::vector<int>> trace_;           // per chunk: moments of the warm-up step that accessed it
  std::vector<double> nonmodel_;                  // per moment: the warm-up step's peak non-model bytes
  double heap_base_ = 0, win_resident_ = 0;       // window (one moment): heap at step start, peak resident
  int win_moment_ = -1, cur_moment_ = -1;
  int prefetch_ = 0;                              // moments ahead (0: off)
  std::vector<std::vector<int>> at_moment_;       // steady steps: per moment, its chunks (sorted; from the trace)
  std::vector<int> inflight_;                     // prefetched chunks not yet settled
  std::vector<char> inflight_flag_;               // per chunk
  bool host_rewrites_ = false;                    // (set_host_rewrites)
  std::vector<char> on_copy_stream_;              // per chunk: a copy since the last quiesce moved its data
  CopyStreams cs_;                                // the prefetch's: its evictions and loads in order on cs_.h2d
  ChunkStepStats st_;
};

}  // namespace tp::exec
