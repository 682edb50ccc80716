// runtime_granular: granular offload for the executor (plan.offload "granular", M6-10T, as the simulator costs
// it: sim/program_build_rank.cpp add_param_fetches / add_grad_reductions, sim/step_formulas.hpp state_bytes).
// The offloaded layers (plan.offload.layers, resolved from "fraction" by the scenario) that this rank holds keep
// their parameters, a gradient accumulator and their Adam moments (of the rank's own ZeRO slices) in pinned host
// memory: the unit's host part, the whole unit or with target "experts" (M6-10T) only its expert segment, the
// rest of the layer staying on the device (RankRun::dev_end). With ZeRO 0-2 the host holds that part, [origin,
// b); with ZeRO-3 over dp > 1 only the rank's padded slices of its segments, one after the other (RankRun::hoff;
// origin unused). Each RUN of such a layer (the runtime's runs: consecutive pieces of one layer and pass) gets
// its own device copy of the host block, loaded host -> device `prefetch_layers` offloaded runs ahead: load i is
// issued when offloaded run i - prefetch - 1 ends (the simulator's edge), the first prefetch + 1 at the step's
// start. ZeRO 0-2: the copy is the layer's host part and is freed when its run ends. ZeRO-3: the copy holds the
// slices, all-gathered per segment (its group) on the device into the run's full layer (RankRun::gather_layer,
// with the device-resident slices of the other segments; the runtime's uparam, freed at the run's end) and freed
// right after the gather (drop), as the simulator holds only the gathered layer. A backward run's gradient is a
// transient device buffer (the runtime's grad_acquire / grad_release) sent to the host at the run's end (after
// the reduce-scatter with ZeRO >= 2, as its own slices) and accumulated there. The host Adam (the CPU
// backend's op, on the host copies) updates them.
// Copies are asynchronous, on copy streams (copy_streams.hpp), as optimizer and chunked offload's: a load is queued
// on the h2d stream after the compute stream's work so far, and the compute stream waits for it only when its run
// starts (device_copy), so a prefetched load runs under the runs before it; a gradient goes down on the d2h stream
// into a pinned staging buffer (the compute stream waits for that copy before what follows it, so the freed device
// buffer is not reused under it, but the host does not), and is added into the host gradients once it has arrived:
// when more than kGradsInFlight are pending, and all of them at finish_grads (the step's end, before the norm and
// the host Adam), in the order they were sent. (On a host-accessible backend, whose copies are synchronous, the
// gradient is added at once, without staging.)
// Runs are keyed by the weight SLOT they use (Pseudo-to-Real's weight groups: position l uses slot
// weight_group(l)); begin_step recomputes them each step (they change at a delink). Context parallelism and 2D tensor parallelism
// change nothing here: the units are the rank's parameter units whatever their layout.
// Invariants: host buffers are laid out per offloaded unit at base[u] (parameters, gradients: len[u] elements
// from origin[u]; moments: the own slices at the runtime's own_off); every copy goes through the backend and is
// counted; loaded_bytes is the device copies held now.
#pragma once
#include <deque>
#include <map>
#include <vector>

#include "exec/backends/backend.hpp"
#include "exec/comm/comm.hpp"
#include "exec/model/gpt.hpp"
#include "exec/runtime/offload/copy_streams.hpp"
#include "exec/runtime/offload/host_optimizer.hpp"
#include "exec/runtime/train.hpp"

namespace tp::exec {

template <class T>
struct GranularHost {
  std::vector<char> off;                      // per unit: its parameters live on the host
  std::vector<long long> base, len, origin;   // per unit: its base in hp / hg, its host length, its flat start
  PinnedBuf<T> hp, hg, m1, m2;                // parameters, gradients (len[u] each); moments (own slices)
  std::vector<int> run_unit;                  // per run of the rank's schedule: the offloaded unit it uses, or -1
  std::vector<int> off_runs;                  // the runs with an offloaded unit, in order
  std::vector<int> off_index;                 // per run: its index in off_runs (-1)
  int prefetch = 1;
  size_t next = 0;                            // the next offloaded run to load
  std::map<int, Buf<T>> loaded;               // run -> its device copy
  std::map<int, Event> ready;                 // run -> the event after its load (until the compute stream waits)
  struct GradDown {                           // a gradient on its way down: n elements added into dst once arrived
    T* dst;
    long long n;
    PinnedBuf<T> staged;
  };
  std::deque<GradDown> grads_down;            // in the order they were sent
  std::vector<PinnedBuf<T>> spare;            // staging buffers to reuse (pinned allocations are slow)
  static constexpr size_t kGradsInFlight = 2;
  CopyStreams cs;
  double h2d_bytes = 0, d2h_bytes = 0;        // this step's copies
  double loaded_bytes = 0, peak_loaded_bytes = 0;  // device copies held now / at most in this step

  bool on() const { return !base.empty(); }
  bool is_off(int u) const { return u >= 0 && u < (int)off.size() && off[u]; }
  // off_units: the offloaded units; host_len / unit_origin: per unit, the host length and the flat index of its
  // first host element; state: the moments' length (own slices).
  void init(const std::vector<char>& off_units, const std::vector<long long>& host_len,
            const std::vector<long long>& unit_origin, long long state);
  T* param(int u) { return hp.data() + base[u]; }
  T* grad(int u) { return hg.data() + base[u]; }
  T* param_at(int u, long long i) { return param(u) + (i - origin[u]); }  // flat element i of unit u
  T* grad_at(int u, long long i) { return grad(u) + (i - origin[u]); }
  double pinned_bytes() const { return sizeof(T) * (double)(hp.size() + hg.size() + m1.size() + m2.size()); }
  // Step start: the runs that use an offloaded weight slot (run r runs layer run_layer[r], which uses slot
  // weight_group(layer, layers, shared), unit 1 + slot), gradients zeroed, the first prefetch + 1 runs loaded.
  void begin_step(const std::vector<int>& run_layer, int shared, int prefetch_layers);
  void load_through(size_t i);     // loads offloaded runs next .. i
  T* device_copy(int r);           // run r's loaded copy (loading through r if it was not prefetched)
  void drop(int r);                // run r's copy freed early (ZeRO-3: once gathered)
  void end_run(int r);             // run r ended: its copy freed, offloaded run (its index) + prefetch + 1 may load
  void grad_to_host(T* dst, const T* dev, long long n);  // n gradient elements added into the host at dst (queued)
  void finish_grads();             // every gradient sent down added into the host (the step's end)
  ~GranularHost();
  // ZeRO 1-2 after the update: the updated slices [a, z) of one segment of unit u (this rank's; `slice` long on
  // every member of the segment's group c) gathered into the host parameters' elements [lo, lo + len).
  void host_all_gather(Comm& c, int u, long long slice, long long a, long long z, long long lo, long long len);
  // Pseudo-to-Real: n elements from src to dst, each in host (on_host) or device memory (not step traffic).
  static void move(T* dst, bool dst_host, const T* src, bool src_host, long long n);
};



}  // namespace tp::exec
