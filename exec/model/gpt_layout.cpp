// gpt_layout: the GPT's parameter layout per tp / ep rank (GptShape, views in module order, per-layer ranges), the
// deterministic GPT-2 initialisation of the full parameters and the tp / ep shard of each view. See gpt.hpp.
// Invariant: every rank derives its shard from the same full tensors, so any plan starts from the single-rank weights.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "exec/model/gpt.hpp"

namespace tp::exec {

GptShape gpt_shape(const Transformer& m, long long seq_len, int tp, int tp_rank) {
  GptShape s;
  s.layers = m.layers;
  s.C = m.hidden;
  s.H = m.heads;
  s.Hkv = m.kv_heads;
  s.D = m.head_dim();
  s.F = m.ffn_hidden;
  s.V = m.vocab;
  s.maxT = seq_len;
  s.gelu = m.activation == Activation::gelu;
  s.qkv_bias = m.qkv_bias;
  s.proj_bias = m.proj_bias;
  s.mlp_bias = m.mlp_bias;
  s.tp = tp;
  s.tp_rank = tp_rank;
  s.experts = m.moe.experts;
  s.top_k = m.moe.top_k;
  s.Fe = m.expert_ffn();
  s.moe_every = m.moe.every;
  s.capacity_factor = m.moe.capacity_factor;
  s.Fs = m.moe.experts > 0 ? m.moe.shared_ffn_hidden : 0;
  return s;
}

void ViewNames::build(const std::vector<ParamView>& views) {
  index.clear();
  for (size_t i = 0; i < views.size(); ++i) index.emplace(views[i].name, i);
}

ModelParams model_params(const ViewNames& names, long long layers) {
  auto at = [&](const std::string& n) {
    auto it = names.index.find(n);
    return it == names.index.end() ? -1 : (int)it->second;
  };
  ModelParams m;
  m.wte = at("wte");
  m.wpe = at("wpe");
  m.lnf_w = at("lnf_w");
  m.lnf_b = at("lnf_b");
  for (long long l = 0; l < layers; ++l) {
    char pre[16];
    std::snprintf(pre, sizeof pre, "L%02lld.", l);
    const std::string P = pre;
    m.layers.push_back({at(P + "ln1_w"), at(P + "ln1_b"), at(P + "qkv_w"), at(P + "qkv_b"), at(P + "proj_w"),
                        at(P + "proj_b"), at(P + "ln2_w"), at(P + "ln2_b"), at(P + "fc1_w"), at(P + "fc1_b"),
                        at(P + "fc2_w"), at(P + "fc2_b"), at(P + "router_w"), at(P + "ex_w1"), at(P + "ex_b1"),
                        at(P + "ex_w2"), at(P + "ex_b2"), at(P + "sh_fc1_w"), at(P + "sh_fc1_b"), at(P + "sh_fc2_w"),
                        at(P + "sh_fc2_b")});
  }
  return m;
}

size_t ViewNames::find(const std::string& name) const {
  auto it = index.find(name);
  if (it == index.end()) throw std::logic_error("gpt: no parameter " + name);
  return it->second;
}

std::vector<char> gemm_weight_views(const GptLayout& lay) {
  std::vector<char> r(lay.views.size(), 0);
  r[(size_t)lay.params.wte] = 1;  // (the tied LM head's weight; the bf16 lookup reads its copy too)
  for (const LayerParams& W : lay.params.layers)
    for (int v : {W.qkv_w, W.proj_w, W.fc1_w, W.fc2_w, W.ex_w1, W.ex_w2, W.sh_w1, W.sh_w2})
      if (v >= 0) r[(size_t)v] = 1;
  return r;
}

GptLayout gpt_layout(const GptShape& s) {
  GptLayout L;
  L.s = s;
  auto add = [&](const std::string& name, long long count, int layer, bool decay, long long cols) {
    L.views.push_back(ParamView{name, L.total, count, layer, decay, count / cols, cols});
    L.total += count;
  };
  L.embed_begin = 0;
  add("wte", s.v_loc() * s.C, -1, true, s.C);
  if (s.gelu) add("wpe", s.maxT * s.C, -1, true, s.C);
  L.embed_end = L.total;
  for (long long l = 0; l < s.layers; ++l) {
    char pre[16];
    std::snprintf(pre, sizeof pre, "L%02lld.", l);
    std::string p = pre;
    int li = (int)l;
    L.layer_begin.push_back(L.total);
    add(p + "ln1_w", s.C, li, false, s.C);
    if (s.gelu) add(p + "ln1_b", s.C, li, false, s.C);
    add(p + "qkv_w", s.C * s.qkv_cols(), li, true, s.qkv_cols());
    if (s.has_qkv_bias()) add(p + "qkv_b", s.qkv_cols(), li, false, s.qkv_cols());
    add(p + "proj_w", s.h_loc() * s.D * s.C, li, true, s.C);
    if (s.has_proj_bias()) add(p + "proj_b", s.C, li, false, s.C);
    add(p + "ln2_w", s.C, li, false, s.C);
    if (s.gelu) add(p + "ln2_b", s.C, li, false, s.C);
    if (s.is_moe(l)) {  // the router, then this ep rank's El experts (exec/model/moe.hpp), last in the layer
      add(p + "router_w", s.C * s.experts, li, true, s.experts);
      if (s.Fs > 0) {  // shared experts: a dense MLP of Fs inner columns (dense part: reduced over dp)
        add(p + "sh_fc1_w", s.C * s.fs1_cols(), li, true, s.fs1_cols());
        if (s.has_mlp_bias()) add(p + "sh_fc1_b", s.fs1_cols(), li, false, s.fs1_cols());
        add(p + "sh_fc2_w", s.fs_loc() * s.C, li, true, s.C);
        if (s.has_mlp_bias()) add(p + "sh_fc2_b", s.C, li, false, s.C);
      }
      L.expert_begin.push_back(L.total);
      add(p + "ex_w1", s.el() * s.C * s.fe1_cols(), li, true, s.fe1_cols());
      if (s.has_mlp_bias()) add(p + "ex_b1", s.el() * s.fe1_cols(), li, false, s.fe1_cols());
      add(p + "ex_w2", s.el() * s.fe_loc() * s.C, li, true, s.C);
      if (s.has_mlp_bias()) add(p + "ex_b2", s.el() * s.C, li, false, s.C);
      L.layer_end.push_back(L.total);
      continue;
    }
    add(p + "fc1_w", s.C * s.fc1_cols(), li, true, s.fc1_cols());
    if (s.has_mlp_bias()) add(p + "fc1_b", s.fc1_cols(), li, false, s.fc1_cols());
    add(p + "fc2_w", s.f_loc() * s.C, li, true, s.C);
    if (s.has_mlp_bias()) add(p + "fc2_b", s.C, li, false, s.C);
    L.layer_end.push_back(L.total);
    L.expert_begin.push_back(L.total);
  }
  L.head_begin = L.total;
  add("lnf_w", s.C, -1, false, s.C);
  if (s.gelu) add("lnf_b", s.C, -1, false, s.C);
  L.head_end = L.total;
  L.names.build(L.views);
  L.params = model_params(L.names, s.layers);
  return L;
}

// splitmix64 stream + Box-Muller: the same numbers on every platform and rank.
namespace {
struct Rng {
  uint64_t x;
  uint64_t next() {
    uint64_t z = (x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  double uniform() { return ((next() >> 11) + 0.5) * (1.0 / 9007199254740992.0); }
  double normal() {
    double u1 = uniform(), u2 = uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }
};
bool ends_with(const std::string& s, const char* suf) {
  size_t n = std::strlen(suf);
  return s.size() >= n && s.compare(s.size() - n, n, suf) == 0;
}
}  // namespace

template <class T>
void init_full_view(const GptShape& full, const ParamView& v, uint64_t seed, T* dst) {
  const double resid_scale = 1.0 / std::sqrt(2.0 * (double)full.layers);
  Rng rng{seed * 0x100000001B3ull + std::hash<std::string>{}(v.name)};  // (each view its own stream)
  bool norm_w = ends_with(v.name, "ln1_w") || ends_with(v.name, "ln2_w") || v.name == "lnf_w";
  bool bias = ends_with(v.name, "_b");
  double sd = 0.02 * ((ends_with(v.name, "proj_w") || ends_with(v.name, "fc2_w") || ends_with(v.name, "ex_w2")) ? resid_scale : 1.0);
  for (long long i = 0; i < v.count; ++i) dst[i] = norm_w ? T(1) : bias ? T(0) : T(sd * rng.normal());
}

template <class T>
std::vector<T> init_full_params(const GptShape& full, uint64_t seed) {
  GptLayout L = gpt_layout(full);
  std::vector<T> p(L.total, T(0));
  for (const ParamView& v : L.views) init_full_view(full, v, seed, p.data() + v.offset);
  return p;
}

template <class T>
void shard_view(const GptShape& s, const ParamView& v, const ParamView& fv, const T* full_view, T* dst) {
  const long long r = s.tp_rank, D = s.D, C = s.C;
  // Column map of a sharded [rows, cols] matrix: local column j -> full column.
  auto qkv_col = [&](long long j) {
    long long hq = s.h_loc() * D, hk = s.hkv_loc() * D;
    if (j < hq) return r * hq + j;
    if (j < hq + hk) return s.H * D + r * hk + (j - hq);
    return s.H * D + s.Hkv * D + r * hk + (j - hq - hk);
  };
  auto fc1_col = [&](long long j, bool shared) {  // (shared experts: their inner size Fs)
    const long long fl = shared ? s.fs_loc() : s.f_loc(), F = shared ? s.Fs : s.F;
    if (j < fl) return r * fl + j;
    return F + r * fl + (j - fl);  // SwiGLU up half
  };
  const T* src = full_view;
  if (ends_with(v.name, "ex_w1") || ends_with(v.name, "ex_b1") || ends_with(v.name, "ex_w2") ||
      ends_with(v.name, "ex_b2"))  // the local experts: full experts [ep_rank El, ..) (fv.count / E each)
    src += s.ep_rank * s.el() * (fv.count / s.experts);
  const bool sh = v.name.find("sh_fc") != std::string::npos;  // shared experts: fc1 / fc2 of inner size Fs
  if (ends_with(v.name, "qkv_w") || ends_with(v.name, "fc1_w")) {
    long long cols = ends_with(v.name, "qkv_w") ? s.qkv_cols() : sh ? s.fs1_cols() : s.fc1_cols();
    long long full_cols = fv.count / C;
    for (long long i = 0; i < C; ++i)
      for (long long j = 0; j < cols; ++j)
        dst[i * cols + j] = src[i * full_cols + (ends_with(v.name, "qkv_w") ? qkv_col(j) : fc1_col(j, sh))];
  } else if (ends_with(v.name, "qkv_b") || ends_with(v.name, "fc1_b")) {
    for (long long j = 0; j < v.count; ++j) dst[j] = src[ends_with(v.name, "qkv_b") ? qkv_col(j) : fc1_col(j, sh)];
  } else if (ends_with(v.name, "ex_w1") || ends_with(v.name, "ex_b1")) {  // per expert: fc1's column split
    const long long cl = s.fe1_cols(), cfull = cl * s.tp, fl = s.fe_loc(), per = ends_with(v.name, "ex_w1") ? C : 1;
    for (long long i = 0; i < s.el() * per; ++i)
      for (long long j = 0; j < cl; ++j)
        dst[i * cl + j] = src[i * cfull + (j < fl ? r * fl + j : s.Fe + r * fl + (j - fl))];
  } else if (ends_with(v.name, "ex_w2")) {  // per expert: fc2's block of rows
    const long long fl = s.fe_loc();
    for (long long e = 0; e < s.el(); ++e)
      std::memcpy(dst + e * fl * C, src + (e * s.Fe + r * fl) * C, sizeof(T) * fl * C);
  } else if (v.name == "wte") {  // vocabulary rows [v_begin, v_begin + v_loc)
    std::memcpy(dst, src + s.v_begin() * C, sizeof(T) * v.count);
  } else if (ends_with(v.name, "proj_w") || ends_with(v.name, "fc2_w")) {
    long long rows = v.count / C, row0 = r * rows;  // row-parallel: a block of rows
    std::memcpy(dst, src + row0 * C, sizeof(T) * rows * C);
  } else {
    std::memcpy(dst, src, sizeof(T) * v.count);  // replicated
  }
}

template <class T>
std::vector<T> shard_params(const GptLayout& full, const std::vector<T>& fp, const GptLayout& sh) {
  std::vector<T> out(sh.total);
  for (const ParamView& v : sh.views) {
    const ParamView& fv = full.view(v.name);
    shard_view(sh.s, v, fv, fp.data() + fv.offset, out.data() + v.offset);
  }
  return out;
}

template std::vector<float> init_full_params<float>(const GptShape&, uint64_t);
template void init_full_view<float>(const GptShape&, const ParamView&, uint64_t, float*);
template void init_full_view<double>(const GptShape&, const ParamView&, uint64_t, double*);
template std::vector<double> init_full_params<double>(const GptShape&, uint64_t);
template void shard_view<float>(const GptShape&, const ParamView&, const ParamView&, const float*, float*);
template void shard_view<double>(const GptShape&, const ParamView&, const ParamView&, const double*, double*);
template std::vector<float> shard_params<float>(const GptLayout&, const std::vector<float>&, const GptLayout&);
template std::vector<double> shard_params<double>(const GptLayout&, const std::vector<double>&, const GptLayout&);

}  // namespace tp::exec
