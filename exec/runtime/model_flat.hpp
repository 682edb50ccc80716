// model_flat: the rank's model for the runtime: the model pieces of either tensor-parallel mode behind one call
// site (Net: 1D Megatron or 2D Optimus), their flat parameter layout (Flat: views, unit ranges, runs of adjacent
// views), the ZeRO / MoE parameter unit, and the initial model (init_model, seeded_params). Internal to exec/runtime.
// Invariant: a Flat's views are ascending and disjoint; each_view / each_run visit a range in flat order.
#pragma once
#include <algorithm>
#include <functional>
#include <memory>
#include <vector>

#include "exec/backends/backend.hpp"
#include "exec/backends/ops.hpp"
#include "exec/model/gpt.hpp"
#include "exec/model/gpt2d.hpp"
#include "models/scenario.hpp"

namespace tp::exec::detail {

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
  // loss_to: the 1D model writes the loss sum to that double of device memory and returns 0 (a captured step).
  T head_fwd(const T* x, const int32_t* t, HeadActs<T>& a, long B, long Tn, double* loss_to = nullptr) {
    return two_d ? d2.head_fwd(x, t, a, B, Tn) : d1.head_fwd(x, t, a, B, Tn, loss_to);
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

// Host data (the initial parameters) into backend memory: a host-to-device copy (a memcpy on the CPU).
template <class T>
void upload(T* dst, const T* src, long long n) {
  current_backend().copy(dst, src, sizeof(T) * (size_t)n, CopyKind::host_to_device, Stream{});
}

// v = n zeroed elements of backend memory.
template <class T>
void zeros(Buf<T>& v, long long n) {
  v.resize((size_t)n);
  ops::fill(v.data(), T(0), (long)n);
}

// The flat parameter layout of either mode (views and unit ranges). The range copies go through ops:: (the
// tables point at backend memory).
struct Flat {
  std::vector<ParamView> views;
  long long total = 0, embed_begin = 0, embed_end = 0, head_begin = 0, head_end = 0;
  std::vector<long long> layer_begin, layer_end;
  std::vector<long long> view_end;  // per view: end offset in the flat buffer (ascending)
  std::vector<long long> expert_begin;  // per layer: its local experts are [expert_begin, layer_end) (exec/model/moe.hpp)
  template <class Lay>
  static Flat of(const Lay& l) {
    Flat f{l.views, l.total, l.embed_begin, l.embed_end, l.head_begin, l.head_end, l.layer_begin, l.layer_end, {}, l.expert_begin};
    for (const ParamView& v : f.views) f.view_end.push_back(v.offset + v.count);
    return f;
  }
  // The flat range [a, z) through per-view pointer tables (each view's current copy): f(view, lo, hi, at) for
  // the view's elements [lo, hi) that are flat elements [a + at, a + at + hi - lo).
  template <class F>
  void each_view(long long a, long long z, F&& f) const {
    size_t v = std::upper_bound(view_end.begin(), view_end.end(), a) - view_end.begin();
    for (; v < views.size() && views[v].offset < z; ++v) {
      const long long off = views[v].offset, lo = std::max(a, off), hi = std::min(z, off + views[v].count);
      if (lo < hi) f(v, lo - off, hi - off, lo - a);
    }
  }
  // The maximal runs of consecutive, adjacent views of [a, z) that key(view, at) gives one key >= 0 (a negative
  // key skips the view), each as f(at, n, key) over flat elements [a + at, a + at + n): one op per run instead of
  // one per view (a GPT-2 step has 148 views) where the op is element-wise and its operands are linear in the flat
  // index.
  template <class K, class F>
  void each_run(long long a, long long z, K&& key, F&& f) const {
    long long ra = 0, rn = 0;
    long rk = -1;
    each_view(a, z, [&](size_t v, long long lo, long long hi, long long at) {
      const long k = key(v, at);
      if (rn > 0 && (k != rk || ra + rn != at)) f(ra, rn, rk), rn = 0;
      if (k < 0) return;
      if (rn == 0) ra = at, rk = k;
      rn += hi - lo;
    });
    if (rn > 0) f(ra, rn, rk);
  }
  template <class T>
  void read_range(const std::vector<T*>& tab, long long a, long long z, T* dst) const {
    each_view(a, z, [&](size_t v, long long lo, long long hi, long long at) { ops::copy(dst + at, tab[v] + lo, (long)(hi - lo)); });
  }
  template <class T>
  void write_range(const std::vector<T*>& tab, long long a, long long z, const T* src) const {
    each_view(a, z, [&](size_t v, long long lo, long long hi, long long at) { ops::copy(tab[v] + lo, src + at, (long)(hi - lo)); });
  }
  template <class T>
  void zero_range(const std::vector<T*>& tab, long long a, long long z) const {
    each_view(a, z, [&](size_t v, long long lo, long long hi, long long) { ops::fill(tab[v] + lo, T(0), (long)(hi - lo)); });
  }
};

// A parameter unit (embedding, a layer, head): also the ZeRO sharding unit.
// A MoE layer's unit has two segments: [a, x) dense, reduced and ZeRO-sliced over the dp group, and [x, b) its
// local experts, over the expert-data-parallel group (the dp / ep ranks holding the same experts; Megatron-LM).
struct Unit {
  long long a = 0, b = 0;  // [a, b) in the flat buffer
  long long slice = 0;     // ZeRO slice length of [a, x) (padded length / dp; the length without ZeRO)
  bool owned = false;      // this stage holds it
  long long x = 0;         // where its experts begin (b: none)
  long long eslice = 0;    // ZeRO slice length of [x, b) (padded length / (dp / ep); the length without ZeRO)
};

// The model pieces and flat layout of tp rank `tp_rank` (1D, or 2D with its grid row / column communicators
// split off `tp`) and which views are replicated across tp ranks.
template <class T>
void init_model(const Scenario& sc, int tp_rank, Comm& tp, Net<T>& model, Flat& gl, std::vector<char>& replicated_view,
                std::unique_ptr<Comm>& grid_row, std::unique_ptr<Comm>& grid_col,
                int ep_rank = 0);  // (the local experts of ep_rank)
// The initial parameters of the rank's flat range [a, z) into host memory at dst.
template <class T>
using ParamSource = std::function<void(long long a, long long z, T* dst)>;
// The seed's model: each view's full tensor (init_full_view, its own random stream), then the rank's shard of it
// (shard_view / shard_view_2d), so a rank never holds more than one view of the full model; the values are
// init_full_params sharded by shard_params. Valid while model and gl are.
template <class T>
ParamSource<T> seeded_params(const Scenario& sc, const Net<T>& model, const Flat& gl, uint64_t seed);
// The single-rank index (layout `full`) of each element of the shard's view v (-1: none, a 2D block's padding
// rows): the view's shard of the identity (the shard functions move values only, and write 0 where there is no
// full element). Memory: the view's size, never the model's.
std::vector<double> view_full_index(const GptLayout& full, const GptLayout& shard, const ParamView& v);
std::vector<double> view_full_index(const GptLayout& full, const Gpt2dLayout& shard, const ParamView& v);

}  // namespace tp::exec::detail
