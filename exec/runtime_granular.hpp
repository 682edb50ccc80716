// runtime_granular: granular offload for the executor (plan.offload "granular", M6-10T, as the simulator costs
// it: sim/program_build_rank.cpp add_param_fetches / add_grad_reductions, sim/step_formulas.hpp state_bytes).
// The offloaded layers (plan.offload.layers, resolved from "fraction" by the scenario) that this rank holds keep
// their parameters, a full-unit gradient accumulator and their Adam moments (of the rank's own ZeRO slices) in
// pinned host memory. Each RUN of such a layer (the runtime's runs: consecutive pieces of one layer and pass)
// gets its own device copy, loaded host -> device `prefetch_layers` offloaded runs ahead: load i is issued when
// offloaded run i - prefetch - 1 ends (the simulator's edge), the first prefetch + 1 at the step's start; the
// copy is freed when its run ends. A backward run's gradient is a transient device buffer (the runtime's
// grad_acquire / grad_release) sent to the host at the run's end (after the dp reduce-scatter with ZeRO-2, as its
// own slice) and accumulated there. The host Adam (the CPU backend's op, on the host copies) updates them.
// Invariants: host buffers are laid out per offloaded unit at base[u] (parameters, gradients: whole units;
// moments: the own slices at the runtime's own_off); every copy goes through the backend and is counted.
#pragma once
#include <algorithm>
#include <map>
#include <vector>

#include "exec/backend.hpp"
#include "exec/gpt.hpp"
#include "exec/host_optimizer.hpp"
#include "exec/train.hpp"

namespace tp::exec {

template <class T>
struct GranularHost {
  std::vector<char> off;                 // per unit: its parameters live on the host
  std::vector<long long> base, len;      // per offloaded unit: its base in hp / hg, its length
  PinnedBuf<T> hp, hg, m1, m2;           // parameters, gradients (whole units); moments (own slices)
  std::vector<int> run_unit;             // per run of the rank's schedule: the offloaded unit it uses, or -1
  std::vector<int> off_runs;             // the runs with an offloaded unit, in order
  std::vector<int> off_index;            // per run: its index in off_runs (-1)
  int prefetch = 1;
  size_t next = 0;                       // the next offloaded run to load
  std::map<int, Buf<T>> loaded;          // run -> its device copy
  double h2d_bytes = 0, d2h_bytes = 0;   // this step's copies
  double loaded_bytes = 0, peak_loaded_bytes = 0;  // device copies held now / at most in this step

  bool on() const { return !base.empty(); }
  bool is_off(int u) const { return u >= 0 && u < (int)off.size() && off[u]; }
  // off_units: the offloaded units with their lengths; state: the moments' length (own slices).
  void init(const std::vector<char>& off_units, const std::vector<long long>& unit_len, long long state) {
    off = off_units;
    base.assign(off.size(), -1);
    len = unit_len;
    long long n = 0;
    for (size_t u = 0; u < off.size(); ++u)
      if (off[u]) { base[u] = n; n += len[u]; }
    hp = PinnedBuf<T>(n);
    hg = PinnedBuf<T>(n);
    m1 = PinnedBuf<T>(state);
    m2 = PinnedBuf<T>(state);
  }
  T* param(int u) { return hp.data() + base[u]; }
  T* grad(int u) { return hg.data() + base[u]; }
  double pinned_bytes() const { return sizeof(T) * (double)(hp.size() + hg.size() + m1.size() + m2.size()); }
  void set_runs(const std::vector<int>& units_of_runs, int prefetch_layers) {
    run_unit = units_of_runs;
    prefetch = std::max(1, prefetch_layers);
    off_runs.clear();
    off_index.assign(run_unit.size(), -1);
    for (size_t r = 0; r < run_unit.size(); ++r)
      if (run_unit[r] >= 0) { off_index[r] = (int)off_runs.size(); off_runs.push_back((int)r); }
  }
  // Step start: gradients zeroed, the first prefetch + 1 offloaded runs loaded.
  void begin_step() {
    std::fill(hg.data(), hg.data() + hg.size(), T(0));
    loaded.clear();
    loaded_bytes = 0;
    next = 0;
    load_through(prefetch);
  }
  void load_through(size_t i) {  // loads offloaded runs next .. i
    for (; next < off_runs.size() && next <= i; ++next) {
      const int r = off_runs[next], u = run_unit[r];
      Buf<T> d((size_t)len[u]);
      current_backend().copy(d.data(), param(u), sizeof(T) * (size_t)len[u], CopyKind::host_to_device, Stream{});
      h2d_bytes += sizeof(T) * (double)len[u];
      loaded[r] = std::move(d);
      loaded_bytes += sizeof(T) * (double)len[u];
      peak_loaded_bytes = std::max(peak_loaded_bytes, loaded_bytes);
    }
  }
  T* device_copy(int r) {  // run r's loaded parameters (loading through r if it was not prefetched)
    if (off_index[r] >= 0) load_through((size_t)off_index[r]);
    return loaded.at(r).data();
  }
  // Run r ended: its copy is freed and offloaded run (its index) + prefetch + 1 may load.
  void end_run(int r) {
    if (off_index[r] < 0) return;
    loaded_bytes -= sizeof(T) * (double)len[run_unit[r]];
    loaded.erase(r);
    load_through((size_t)off_index[r] + prefetch + 1);
  }
  // n gradient elements from the device into the host accumulator at dst (CPU add).
  void grad_to_host(T* dst, const T* dev, long long n) {
    if (n <= 0) return;
    std::vector<T> tmp((size_t)n);
    current_backend().copy(tmp.data(), dev, sizeof(T) * (size_t)n, CopyKind::device_to_host, Stream{});
    d2h_bytes += sizeof(T) * (double)n;
    cpu_backend().ops<T>().accumulate(dst, tmp.data(), (long)n);
  }
};

// One step's figures into the run's result (then the counters restart).
template <class T>
void record_granular_step(OffloadResult& f, GranularHost<T>& g) {
  f.on = true;
  f.kind = "granular";
  f.h2d_bytes.push_back(g.h2d_bytes);
  f.d2h_bytes.push_back(g.d2h_bytes);
  f.host_state_bytes = g.pinned_bytes();
  f.peak_loaded_bytes.push_back(g.peak_loaded_bytes);
  g.h2d_bytes = g.d2h_bytes = g.peak_loaded_bytes = 0;
}

}  // namespace tp::exec
