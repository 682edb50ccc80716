// runtime_parts: internal to exec/runtime.cpp — the measured-trace recorder (the simulator's lanes and op
// names), the dispatch of model pieces to the 1D or 2D GPT, and the flat parameter layout of either.
#pragma once
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "exec/gpt.hpp"
#include "exec/gpt2d.hpp"

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
    long pages = 0, resident = 0;
    if (FILE* fp = std::fopen("/proc/self/statm", "r")) {
      if (std::fscanf(fp, "%ld %ld", &pages, &resident) != 2) resident = 0;
      std::fclose(fp);
    }
    mem.push_back({now(), (double)resident * 4096.0});
  }
};
enum TraceTid { kTidStep = 0, kTidCompute = 1, kTidPpFwd = 3, kTidPpBwd = 4, kTidDp = 5, kTidZero = 6 };

// The model pieces of either tensor-parallel mode behind one call site (1D Megatron or 2D Optimus).
template <class T>
struct Net {
  Gpt<T> d1;
  Gpt2d<T> d2;
  bool two_d = false, sp = false;
  void embed_fwd(T* x, const int32_t* t, long B, long Tn) { two_d ? d2.embed_fwd(x, t, B, Tn) : d1.embed_fwd(x, t, B, Tn); }
  void embed_bwd(const T* dx, const int32_t* t, long B, long Tn) { two_d ? d2.embed_bwd(dx, t, B, Tn) : d1.embed_bwd(dx, t, B, Tn); }
  void layer_fwd(int wl, const T* x, T* y, LayerActs<T>& a, long B, long Tn) {
    two_d ? d2.layer_fwd(wl, x, y, a, B, Tn) : d1.layer_fwd(wl, x, y, a, B, Tn);
  }
  void layer_bwd(int wl, const T* dy, T* dx, LayerActs<T>& a, long B, long Tn) {
    two_d ? d2.layer_bwd(wl, dy, dx, a, B, Tn) : d1.layer_bwd(wl, dy, dx, a, B, Tn);
  }
  T head_fwd(const T* x, const int32_t* t, HeadActs<T>& a, long B, long Tn) {
    return two_d ? d2.head_fwd(x, t, a, B, Tn) : d1.head_fwd(x, t, a, B, Tn);
  }
  void head_bwd(T* dx, const int32_t* t, HeadActs<T>& a, long B, long Tn, T scale) {
    two_d ? d2.head_bwd(dx, t, a, B, Tn, scale) : d1.head_bwd(dx, t, a, B, Tn, scale);
  }
  // Local attention dims for a micro-batch of B sequences: sequences, query heads, kv heads, head dim.
  void attn_dims(long B, long& Bl, long& Hl, long& Kl, long& D) const {
    if (two_d) { Bl = B / d2.lay.q; Hl = d2.lay.h_loc(); Kl = d2.lay.hkv_loc(); D = d2.lay.s.D; }
    else { Bl = B; Hl = d1.lay.s.h_loc(); Kl = d1.lay.s.hkv_loc(); D = d1.lay.s.D; }
  }
};

// The flat parameter layout of either mode (views and unit ranges).
struct Flat {
  std::vector<ParamView> views;
  long long total = 0, embed_begin = 0, embed_end = 0, head_begin = 0, head_end = 0;
  std::vector<long long> layer_begin, layer_end;
  template <class Lay>
  static Flat of(const Lay& l) {
    return Flat{l.views, l.total, l.embed_begin, l.embed_end, l.head_begin, l.head_end, l.layer_begin, l.layer_end};
  }
};

}  // namespace tp::exec::detail
