// gpt2d_layout: the 2D (Optimus) parameter layout, and the maps between a rank's blocks and the full (tp = 1)
// tensors (shard_params_2d, gather_grads_2d). See gpt2d.hpp.
// Every local tensor is a [rows, cols] matrix (1-D tensors: rows = 1) whose element (i, j) is element
// (frow(i), fcol(j)) of the full tensor viewed as [full_rows, full_cols] (frow -1: a padding row of a shorter wte
// block, no full element); the maps below are the only place that knows the blocking and the QKV / SwiGLU
// column permutations.
#include "gpt2d.hpp"

#include <cstdio>
#include <cstring>
#include <functional>
#include <stdexcept>

namespace tp::exec {

namespace {

bool ends_with(const std::string& s, const char* suf) {
  size_t n = std::strlen(suf);
  return s.size() >= n && s.compare(s.size() - n, n, suf) == 0;
}

struct BlockMap {
  long long rows = 1, cols = 0, full_cols = 0;
  std::function<long long(long long)> frow, fcol;
};

BlockMap block_map(const Gpt2dLayout& L, const std::string& name) {
  const GptShape& s = L.s;
  const long long r = L.row, c = L.col, D = s.D, Cl = L.c_loc();
  BlockMap m;
  auto rows_block = [&](long long rows) {  // rows [r rows, (r+1) rows)
    m.rows = rows;
    m.frow = [r, rows](long long i) { return r * rows + i; };
  };
  auto vec = [&]() {
    m.rows = 1;
    m.frow = [](long long) { return 0LL; };
  };
  auto hidden_cols = [&]() {  // columns [c C/q, (c+1) C/q) of a C-wide tensor
    m.cols = Cl;
    m.full_cols = s.C;
    m.fcol = [c, Cl](long long j) { return c * Cl + j; };
  };
  auto qkv_cols = [&]() {
    const long long hq = L.h_loc() * D, hk = L.hkv_loc() * D, H = s.H, Hkv = s.Hkv;
    m.cols = L.qkv_cols();
    m.full_cols = (s.H + 2 * s.Hkv) * D;
    m.fcol = [=](long long j) {
      if (j < hq) return c * hq + j;
      if (j < hq + hk) return H * D + c * hk + (j - hq);
      return H * D + Hkv * D + c * hk + (j - hq - hk);
    };
  };
  auto fc1_cols = [&]() {
    const long long fl = L.f_loc(), F = s.F;
    m.cols = L.fc1_cols();
    m.full_cols = (s.gelu ? 1 : 2) * s.F;
    m.fcol = [=](long long j) { return j < fl ? c * fl + j : F + c * fl + (j - fl); };  // SwiGLU: up half
  };
  if (name == "wte") {  // vocabulary block r, padded to v_blk rows
    const long long v0 = L.v_begin(r), len = L.v_len(r);
    m.rows = L.v_blk();
    m.frow = [v0, len](long long i) { return i < len ? v0 + i : -1LL; };
    hidden_cols();
  } else if (name == "wpe") {
    m.rows = s.maxT;
    m.frow = [](long long i) { return i; };
    hidden_cols();
  } else if (ends_with(name, "qkv_w")) {
    rows_block(Cl);
    qkv_cols();
  } else if (ends_with(name, "qkv_b")) {
    vec();
    qkv_cols();
  } else if (ends_with(name, "proj_w")) {
    rows_block(L.h_loc() * D);
    hidden_cols();
  } else if (ends_with(name, "fc1_w")) {
    rows_block(Cl);
    fc1_cols();
  } else if (ends_with(name, "fc1_b")) {
    vec();
    fc1_cols();
  } else if (ends_with(name, "fc2_w")) {
    rows_block(L.f_loc());
    hidden_cols();
  } else {  // ln*_w, ln*_b, proj_b, fc2_b, lnf_*: C-wide vectors
    vec();
    hidden_cols();
  }
  return m;
}

}  // namespace

Gpt2dLayout gpt2d_layout(const GptShape& full, int q, int tp_rank) {
  if (q < 1 || tp_rank < 0 || tp_rank >= q * q)
    throw std::invalid_argument("gpt2d: bad grid q = " + std::to_string(q) + ", tp rank " + std::to_string(tp_rank));
  if (full.tp != 1) throw std::invalid_argument("gpt2d: the shape must be the full (tp = 1) shape");
  auto need = [&](long long v, const char* what) {
    if (v % q != 0)
      throw std::invalid_argument(std::string("gpt2d: ") + what + " = " + std::to_string(v) +
                                  " is not divisible by the grid side q = " + std::to_string(q));
  };
  need(full.C, "hidden");
  need(full.H, "heads");
  need(full.Hkv, "kv_heads");
  need(full.F, "ffn_hidden");
  if (full.V < q)
    throw std::invalid_argument("gpt2d: vocab = " + std::to_string(full.V) + " has fewer rows than the grid side q = " +
                                std::to_string(q));
  Gpt2dLayout L;
  L.s = full;
  L.q = q;
  L.tp_rank = tp_rank;
  L.row = tp_rank / q;
  L.col = tp_rank % q;
  // Same order, names and decay flags as gpt_layout; sizes are the local blocks.
  GptLayout ref = gpt_layout(full);
  for (const ParamView& v : ref.views) {
    BlockMap m = block_map(L, v.name);
    ParamView w = v;
    w.offset = L.total;
    w.count = m.rows * m.cols;
    w.rows = m.rows;
    w.cols = m.cols;
    L.views.push_back(w);
    L.total += w.count;
    const bool matrix = v.name == "wte" || ends_with(v.name, "qkv_w") || ends_with(v.name, "proj_w") ||
                        ends_with(v.name, "fc1_w") || ends_with(v.name, "fc2_w");
    L.col_replicated.push_back(matrix ? 0 : 1);
  }
  auto off = [&](long long full_off) {  // full offset of a range boundary -> local offset
    for (size_t i = 0; i < ref.views.size(); ++i)
      if (ref.views[i].offset == full_off) return L.views[i].offset;
    return L.total;
  };
  L.embed_begin = off(ref.embed_begin);
  L.embed_end = off(ref.embed_end);
  for (size_t l = 0; l < ref.layer_begin.size(); ++l) {
    L.layer_begin.push_back(off(ref.layer_begin[l]));
    L.layer_end.push_back(off(ref.layer_end[l]));
  }
  L.expert_begin = L.layer_end;
  L.head_begin = off(ref.head_begin);
  L.head_end = off(ref.head_end);
  L.names.build(L.views);
  L.params = model_params(L.names, (long long)L.layer_begin.size());
  return L;
}

template <class T>
void shard_view_2d(const Gpt2dLayout& lay, const ParamView& v, const T* src, T* dst) {
  BlockMap m = block_map(lay, v.name);
  for (long long i = 0; i < m.rows; ++i) {
    const long long fr = m.frow(i);
    for (long long j = 0; j < m.cols; ++j) dst[i * m.cols + j] = fr < 0 ? T(0) : src[fr * m.full_cols + m.fcol(j)];
  }
}

template <class T>
std::vector<T> shard_params_2d(const GptLayout& full, const std::vector<T>& fp, const Gpt2dLayout& lay) {
  std::vector<T> out(lay.total);
  for (const ParamView& v : lay.views) shard_view_2d(lay, v, fp.data() + full.view(v.name).offset, out.data() + v.offset);
  return out;
}

template <class T>
std::vector<T> gather_grads_2d(const GptLayout& full, const Gpt2dLayout& lay, const T* local, Comm& tp) {
  std::vector<T> out(full.total, T(0));
  for (size_t k = 0; k < lay.views.size(); ++k) {
    if (!lay.owned(k)) continue;
    const ParamView& v = lay.views[k];
    const ParamView& fv = full.view(v.name);
    BlockMap m = block_map(lay, v.name);
    const T* src = local + v.offset;
    T* dst = out.data() + fv.offset;
    for (long long i = 0; i < m.rows; ++i) {
      const long long fr = m.frow(i);
      if (fr < 0) continue;  // padding
      for (long long j = 0; j < m.cols; ++j) dst[fr * m.full_cols + m.fcol(j)] = src[i * m.cols + j];
    }
  }
  tp.all_reduce_sum(out.data(), (long)out.size(), sizeof(T) == 8 ? Dtype::f64 : Dtype::f32);
  return out;
}

template void shard_view_2d<float>(const Gpt2dLayout&, const ParamView&, const float*, float*);
template void shard_view_2d<double>(const Gpt2dLayout&, const ParamView&, const double*, double*);
template std::vector<float> shard_params_2d<float>(const GptLayout&, const std::vector<float>&, const Gpt2dLayout&);
template std::vector<double> shard_params_2d<double>(const GptLayout&, const std::vector<double>&,
                                                     const Gpt2dLayout&);
template std::vector<float> gather_grads_2d<float>(const GptLayout&, const Gpt2dLayout&, const float*, Comm&);
template std::vector<double> gather_grads_2d<double>(const GptLayout&, const Gpt2dLayout&, const double*, Comm&);

}  // namespace tp::exec
