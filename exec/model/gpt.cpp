// gpt: the per-piece forward and backward of the embedding and the head, and the saved activations' bookkeeping.
// See gpt.hpp; one layer's forward and backward are in gpt_layer.cpp, the layout, initialisation and sharding in
// gpt_layout.cpp, bf16 storage in gpt_bf16.cpp.
// Shapes per tp rank: N = B * Tn tokens; C hidden; Hl = H / tp query heads, Kl = Hkv / tp kv heads, head dim D;
// Fl = F / tp MLP columns; QKV columns [Q (Hl D) | K (Kl D) | V (Kl D)]; fc1 columns [Fl] (GELU) or
// [gate Fl | up Fl] (SwiGLU).
#include "gpt.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <stdexcept>

#include "exec/model/fp8.hpp"
#include "exec/model/moe.hpp"
#include "exec/backends/ops.hpp"

namespace tp::exec {

template <class T>
void LayerActs<T>::clear_all_but_input() {
  for (auto* v : {&ln1, &ln1_mean, &ln1_rstd, &q, &k, &v, &att, &attn, &x_mid, &ln2, &ln2_mean, &ln2_rstd, &fc1, &act,
                  &m_probs, &m_gate, &m_xe, &m_ye, &s_fc1, &s_act}) {
    v->clear();
    v->shrink_to_fit();
  }
  Buf<int32_t>().swap(m_slot);
  for (size_t i = 1; i < b16.size(); ++i) Buf<uint16_t>().swap(b16[i]);  // (packed copies but x_in's: index 0)
  stay16 = 0;
}

template <class T>
size_t LayerActs<T>::bytes() const {
  size_t n = 0, n16 = 0;
  for (auto* v : {&x_in, &ln1, &ln1_mean, &ln1_rstd, &q, &k, &v, &att, &attn, &x_mid, &ln2, &ln2_mean, &ln2_rstd, &fc1, &act,
                  &m_probs, &m_gate, &m_xe, &m_ye, &s_fc1, &s_act})
    n += v->size();
  for (const Buf<uint16_t>& h : b16) n16 += h.size();
  return n * sizeof(T) + n16 * sizeof(uint16_t) + m_slot.size() * sizeof(int32_t);
}

template <class T>
Q8<T> Gpt<T>::f8q(Buf<T>& tmp, const T* x, long n, int wl, int lin, Fp8Operand op, bool record) const {
  return fp8_operand(fp8, tmp, x, n, wl, lin, op, record);
}

template <class T>
Q8<T> Gpt<T>::f8q_at(Buf<T>& tmp, long total, const T* x, long off, long n, int wl, int lin, Fp8Operand op,
                     bool record) const {
  return fp8_operand_at(fp8, tmp, total, x, off, n, wl, lin, op, record);
}

template <class T>
void Gpt<T>::embed_fwd(T* x, const int32_t* tokens, long B, long Tn) const {
  const GptShape& s = lay.s;
  const long C = s.C, N = B * Tn;
  if (!tp && !this->bf16_lookup) {
    ops::embedding_fwd(x, tokens, p(lay.params.wte), s.gelu && !cpx ? p(lay.params.wpe) : (const T*)nullptr, B, Tn, C);
    if (s.gelu && cpx) cp_add_positions(*cpx, x, p(lay.params.wpe), N, C, 0);
    return;
  }
  // bf16: wte's bf16 values (ParamTables::bf16_lookup), read from its copy or rounded once looked up (the same
  // values), then the positions added in T.
  const uint16_t* w16 = this->bf16_lookup ? p16(lay.params.wte) : nullptr;
  const long long v0 = s.v_begin(), vl = s.v_loc();
  auto lookup = [&](T* out) {
    if (w16) ops::embedding_shard_fwd16(out, tokens, w16, N, C, (long)v0, (long)vl);
    else ops::embedding_shard_fwd(out, tokens, p(lay.params.wte), N, C, (long)v0, (long)vl);
  };
  long nl = N, r0 = 0;
  if (!tp) {
    lookup(x);
  } else {
    // Vocabulary-parallel lookup: rows of tokens outside this rank's shard are zero; the ranks' partial sums are
    // all-reduced (SP: reduce-scattered to row shards); the replicated positions are added afterwards.
    Buf<T> part(N * C);                                                            // [N, C]
    ops::fill(part.data(), T(0), N * C);
    lookup(part.data());
    nl = sp ? N / tp->size() : N, r0 = sp ? tp->rank() * nl : 0;
    if (sp) reduce_scatter_rows(tp, part.data(), x, nl, C);
    else { tp->all_reduce_sum(part.data(), N * C, dtype_of<T>()); ops::copy(x, part.data(), N * C); }
  }
  if (this->bf16_lookup && !w16) round_bf16(x, nl * C);  // (the sum of one row and zeros: exact)
  if (s.gelu && cpx) cp_add_positions(*cpx, x, p(lay.params.wpe), nl, C, r0);
  else if (s.gelu) ops::add_positions(x, p(lay.params.wpe), nl, C, Tn, r0);
}

template <class T>
void Gpt<T>::embed_bwd(const T* dx, const int32_t* tokens, long B, long Tn) const {
  const GptShape& s = lay.s;
  const long C = s.C, N = B * Tn;
  if (!tp) {
    ops::embedding_bwd(g(lay.params.wte), s.gelu && !cpx ? g(lay.params.wpe) : (T*)nullptr, dx, tokens, B, Tn, C);
    if (s.gelu && cpx) cp_positions_bwd(*cpx, g(lay.params.wpe), dx, N, C, 0);
    return;
  }
  Buf<T> full;                                                                     // [N, C] (SP: gathered)
  if (sp) { full.resize(N * C); gather_rows(tp, dx, full.data(), N / tp->size(), C); dx = full.data(); }
  ops::embedding_shard_bwd(g(lay.params.wte), dx, tokens, N, C, (long)s.v_begin(), (long)s.v_loc());
  if (s.gelu && cpx) cp_positions_bwd(*cpx, g(lay.params.wpe), dx, N, C, 0);
  else if (s.gelu) ops::positions_bwd(g(lay.params.wpe), dx, N, C, Tn, 0);
}

template <class T>
T Gpt<T>::head_fwd(const T* x, const int32_t* targets, HeadActs<T>& a, long B, long Tn, double* loss_to) const {
  const GptShape& s = lay.s;
  const long N = B * Tn, C = s.C, Vl = (long)s.v_loc();
  if (sp) { a.x_in.resize(N * C); gather_rows(tp, x, a.x_in.data(), N / tp->size(), C); x = a.x_in.data(); }
  else if (a.x_in.data() != x) { a.x_in.resize(N * C); ops::copy(a.x_in.data(), x, N * C); }  // (or moved x there)
  a.lnf.resize(N * C); a.lnf_mean.resize(N); a.lnf_rstd.resize(N);
  ops::layernorm_fwd(a.lnf.data(), a.lnf_mean.data(), a.lnf_rstd.data(), x, p(lay.params.lnf_w),
                     s.gelu ? p(lay.params.lnf_b) : (const T*)nullptr, N, C, T(1e-5));
  // The logits become the saved probabilities in place (one [N, V/t] buffer, as in Megatron's cross-entropy).
  a.probs.resize(N * Vl);                                                         // [N, V/t]
  T* logits = a.probs.data();
  gemm16(logits, a.lnf.data(), nullptr, p(lay.params.wte), p16(lay.params.wte), N, Vl, C, false, true, T(0));
  if (!tp && loss_to) {  // (a captured step: no read-back; the caller reads T(*loss_to) after the step)
    ops::cross_entropy_fwd_to(logits, loss_to, logits, targets, N, Vl);
    return T(0);
  }
  if (!tp) return ops::cross_entropy_fwd(logits, logits, targets, N, Vl);
  // Vocabulary-parallel cross-entropy: global row max (all-gather of the shards' maxima), sum of exponentials
  // and target logit (all-reduced); probabilities of this shard saved for the backward.
  // mx, all and sums go to the collectives: host memory (exec/comm/comm.hpp's rule; a device backend stages them).
  const int t = tp->size();
  const long v0 = (long)s.v_begin();
  Buf<T> mx(N), all(N * t), sums(2 * N);  // sums = [sum exp | target logit]
  ops::row_max(mx.data(), logits, N, Vl);
  tp->all_gather(mx.data(), all.data(), N, dtype_of<T>());
  ops::max_combine(mx.data(), all.data(), N, t);
  ops::ce_shard_exp(logits, sums.data(), sums.data() + N, logits, mx.data(), targets, N, Vl, v0,
                    ops::CeForm::raw_target_divide);  // logits in, exponentials out
  tp->all_reduce_sum(sums.data(), 2 * N, dtype_of<T>());
  return T(ops::ce_shard_finish(logits, sums.data(), sums.data() + N, mx.data(), N, Vl, ops::CeForm::raw_target_divide));
}

template <class T>
void Gpt<T>::head_bwd(T* dx, const int32_t* targets, HeadActs<T>& a, long B, long Tn, T scale) const {
  const GptShape& s = lay.s;
  const long N = B * Tn, C = s.C, Vl = (long)s.v_loc();
  // dlogits = scale * (p - onehot) on this vocabulary shard, in place over the saved probabilities (as
  // Megatron's vocab-parallel cross-entropy does); each saved tensor is released after its last reader.
  auto release = [](Buf<T>& v) { Buf<T>().swap(v); };
  T* dlogits = a.probs.data();                                                   // [N, V/t]
  const long v0 = tp ? (long)s.v_begin() : 0L;
  Buf<uint16_t> dl16;  // bf16 storage: the GEMMs read only the packed gradient (half the bytes), made in one pass
  if (pack_operands16 && N * Vl > 0) {
    dl16.resize((size_t)(N * Vl));
    ops::ce_grad16(dl16.data(), dlogits, targets, N, Vl, v0, scale);
    release(a.probs), dlogits = nullptr;
  } else {
    ops::scale(dlogits, dlogits, scale, N * Vl);
    ops::ce_shard_target_grad(dlogits, targets, N, Vl, v0, scale);
  }
  gemm16(g(lay.params.wte), dlogits, data16(dl16), a.lnf.data(), nullptr, Vl, C, N, true, false, T(1));
  release(a.lnf);
  Buf<T> dlnf(N * C), dfull(sp ? N * C : 0);
  T* dfp = sp ? dfull.data() : dx;  // without SP the gradient goes straight to dx
  ops::fill(dfp, T(0), N * C);
  gemm16(dlnf.data(), dlogits, data16(dl16), p(lay.params.wte), p16(lay.params.wte), N, C, Vl, false, false, T(0));
  release(a.probs);
  if (tp) tp->all_reduce_sum(dlnf.data(), N * C, dtype_of<T>());  // partial over the vocabulary shards
  ops::layernorm_bwd(dfp, g(lay.params.lnf_w), s.gelu ? g(lay.params.lnf_b) : (T*)nullptr, dlnf.data(), a.x_in.data(), p(lay.params.lnf_w),
                     a.lnf_mean.data(), a.lnf_rstd.data(), N, C);
  if (sp) {  // this rank's rows of the input gradient
    long nl = N / tp->size();
    ops::copy(dx, dfull.data() + tp->rank() * nl * C, nl * C);
  }
  for (Buf<T>* v : {&a.x_in, &a.lnf_mean, &a.lnf_rstd}) release(*v);
}

template struct LayerActs<float>;
template struct LayerActs<double>;
template struct Gpt<float>;
template struct Gpt<double>;

}  // namespace tp::exec
