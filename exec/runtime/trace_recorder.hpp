// trace_recorder: the measured trace of one step that `trainplan run --trace` writes, in the simulator's lanes
// (tid) and op names (schedule/pipeline.hpp), with the resident memory after every piece. Internal to exec/runtime.
// Invariant: off (the default) it only runs the pieces; on, every span is one Chrome trace "X" slice.
#pragma once
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "exec/prof/rss.hpp"
#include "models/json_check.hpp"

namespace tp::exec::detail {

// Measured trace of one step with the simulator's lanes (tid) and op names (schedule/pipeline.hpp), plus the
// resident memory after every piece.
struct Recorder {
  bool on = false;
  std::chrono::steady_clock::time_point t0;
  struct Ev { std::string name; int tid; double a, b; };
  std::vector<Ev> ev;
  std::vector<std::pair<double, double>> mem;  // (t, resident bytes)
  double now() const { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); }
  template <class F>
  void span(const std::string& name, int tid, F&& f) {
    if (!on) { f(); return; }
    double a = now();
    f();
    ev.push_back({name, tid, a, now()});
  }
  void sample_memory() {
    if (!on) return;
    mem.push_back({now(), rss_bytes()});
  }
  // The recorded events as Chrome trace "X" slices and the memory counter, pid 2000 + rank ("run").
  json trace_events(int rank, int stage, int step) const;
};
enum TraceTid { kTidStep = 0, kTidCompute = 1, kTidPpFwd = 3, kTidPpBwd = 4, kTidDp = 5, kTidZero = 6 };

inline json Recorder::trace_events(int rank, int stage, int step) const {
  json out = json::array();
  int pid = 2000 + rank;
  char pname[64];
  std::snprintf(pname, sizeof pname, "rank %d — run (stage %d)", rank, stage);
  out.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", pid}, {"args", {{"name", pname}}}});
  out.push_back({{"name", "process_sort_index"}, {"ph", "M"}, {"pid", pid}, {"args", {{"sort_index", 2 * rank + 2}}}});
  const char* tnames[] = {"step", "compute", "tp", "pp.fwd", "pp.bwd", "dp", "zero"};
  for (int t = 0; t < 7; ++t)
    out.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", pid}, {"tid", t}, {"args", {{"name", tnames[t]}}}});
  double end = 0;
  for (const auto& e : ev) end = std::max(end, e.b);
  out.push_back({{"name", "step " + std::to_string(step)}, {"ph", "X"}, {"pid", pid}, {"tid", kTidStep}, {"ts", 0}, {"dur", end * 1e6}});
  for (const auto& e : ev)
    out.push_back({{"name", e.name}, {"ph", "X"}, {"pid", pid}, {"tid", e.tid}, {"ts", e.a * 1e6}, {"dur", (e.b - e.a) * 1e6}});
  for (const auto& [t, bytes] : mem)
    out.push_back({{"name", "memory"}, {"ph", "C"}, {"pid", pid}, {"ts", t * 1e6}, {"args", {{"bytes", bytes}}}});
  return out;
}

}  // namespace tp::exec::detail
