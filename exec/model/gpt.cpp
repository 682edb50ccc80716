// gpt: the per-piece forward and backward (embedding, one layer, the head). See gpt.hpp; the layout, initialisation
// and sharding are in gpt_layout.cpp, bf16 storage in gpt_bf16.cpp.
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

static Dtype dt(float) { return Dtype::f32; }
static Dtype dt(double) { return Dtype::f64; }

// Sequence-parallel row shards: rank r of `tp` holds rows [r n/t, (r+1) n/t) of an [n, C] tensor.
template <class T>
static void gather_rows(Comm* tp, const T* shard, T* full, long rows_loc, long C) {
  tp->all_gather(shard, full, rows_loc * C, dt(T{}));
}
template <class T>
static void reduce_scatter_rows(Comm* tp, const T* full, T* shard, long rows_loc, long C) {
  tp->reduce_scatter_sum(full, shard, rows_loc * C, dt(T{}));
}

// The dense MLP, or a MoE layer's shared experts (views w1, b1, w2, b2; F1 / Fl inner columns on this rank), of
// in [N, C] (the micro-batch's rows: under SP all-gathered; in16: given as its bf16 copy instead): saves fc1 [N, F1]
// and act [N, Fl]; out [Nl, C] = this rank's rows of the output (SP: reduce-scattered, else all-reduced over tp) with
// the fc2 bias. pk (Gpt::pack_operands16, else null): the LayerActs holding act, which packs it for fc2 (pack_now).
// bwd16 (with pk: the dense MLP, whose backward reads act, and fc1 under GELU, packed): act stays packed for the
// backward (LayerActs::stay16); under GELU act and fc1 are written only as bf16, from one pass over fc1's T values
// (ops::gelu_fwd16, after the GEMM and its bias). res (may be null): a residual [Nl, C] added to out after the fc2
// bias.
template <class T>
static void mlp_fwd(const Gpt<T>& g, int wl, int lin1, int w1, int b1, int w2, int b2, long F1, long Fl, const T* in,
                    const uint16_t* in16, Buf<T>& fc1, Buf<T>& act, T* out, long N, long Nl, LayerActs<T>* pk,
                    bool bwd16 = false, const T* res = nullptr) {
  const long C = (long)g.lay.s.C;
  fc1.resize(N * F1);
  const bool gelu16 = pk && bwd16 && g.lay.s.gelu;
  if (!gelu16) act.resize(N * Fl);
  const T* bias1 = b1 >= 0 ? g.p(b1) : nullptr;
  Buf<T> qx, qw;  // fp8 casts of the GEMM operands (linears lin1 and lin1 + 1 of exec/model/fp8.hpp)
  const T* x1 = in16 ? nullptr : g.f8(qx, in, N * C, wl, lin1, Fp8Operand::x);
  const uint16_t* w1_16 = g.p16(w1);  // (bf16 storage of the weights; fp8 casts T weights)
  const T* w1p = w1_16 ? nullptr : g.f8(qw, g.p(w1), C * F1, wl, lin1, Fp8Operand::w);
  const uint16_t* act16 = nullptr;
  if (gelu16) {  // (fc1 = in w1 + b1 in T, then act = gelu(fc1) and fc1 itself as bf16 only)
    ops::linear_fwd(fc1.data(), (T*)nullptr, x1, in16, w1p, w1_16, bias1, N, F1, C);
    Buf<T> pre;
    pre.swap(fc1);
    uint16_t* a16 = pk->out16(act, (size_t)(N * Fl));
    ops::gelu_fwd16(a16, pk->out16(fc1, (size_t)(N * F1)), pre.data(), N * F1);
    act16 = a16;
  } else if (g.lay.s.gelu) {
    ops::linear_fwd(act.data(), fc1.data(), x1, in16, w1p, w1_16, bias1, N, F1, C);  // fc1 = in w1 + b1, act = gelu(fc1)
  } else {
    ops::linear_fwd(fc1.data(), (T*)nullptr, x1, in16, w1p, w1_16, bias1, N, F1, C);
    ops::swiglu_fwd(act.data(), fc1.data(), N, Fl);
  }
  if (pk && !act16) act16 = pk->pack_now(act, bwd16);
  const T* x2 = act16 ? nullptr : g.f8(qx, act.data(), N * Fl, wl, lin1 + 1, Fp8Operand::x);
  const uint16_t* w2_16 = g.p16(w2);
  const T* w2p = w2_16 ? nullptr : g.f8(qw, g.p(w2), Fl * C, wl, lin1 + 1, Fp8Operand::w);
  if (g.sp) {
    Buf<T> z(N * C);  // [N, C] partial
    gemm16(z.data(), x2, act16, w2p, w2_16, N, C, Fl, false, false, T(0));
    reduce_scatter_rows(g.tp, z.data(), out, Nl, C);
  } else {
    gemm16(out, x2, act16, w2p, w2_16, N, C, Fl, false, false, T(0));
    if (g.tp) g.tp->all_reduce_sum(out, N * C, dt(T{}));
  }
  if (b2 >= 0) ops::add_bias(out, out, g.p(b2), Nl, C, res);
  else if (res) ops::add(out, out, res, Nl * C);
}

// dx [N, C] += LayerNorm's backward from dy over the layer's saved input x (a field of a, read packed while it is:
// layernorm_bwd16), with weight view w and bias view b (< 0: none); x's buffers are released after.
template <class T>
static void ln_bwd_saved(const Gpt<T>& g, T* dx, int w, int b, const T* dy, LayerActs<T>& a, Buf<T>& x,
                         const Buf<T>& mean, const Buf<T>& rstd, long N) {
  const long C = (long)g.lay.s.C;
  T* db = b >= 0 ? g.g(b) : nullptr;
  if (const uint16_t* x16 = a.packed(x))
    ops::layernorm_bwd16(dx, g.g(w), db, dy, x16, g.p(w), mean.data(), rstd.data(), N, C);
  else
    ops::layernorm_bwd(dx, g.g(w), db, dy, x.data(), g.p(w), mean.data(), rstd.data(), N, C);
  Buf<T>().swap(x);
  a.release_packed(x);
}

// Backward of mlp_fwd from dout [Nl, C] (read only): accumulates the weight gradients (b2's over this rank's rows)
// and sets din [N, C] (resized) = the input gradient, partial over tp (the caller reduces it). Consumes fc1 and
// act, and `in_owner` (the buffer of `in`, if given) once its last reader is done. in16 / act16 (may be null): in
// and act still packed as bf16 (LayerActs::packed), read by the weight-gradient GEMMs as they are (in, act unused);
// fc1_16 (GELU only; may be null): fc1 still packed, read so by the GELU backward (fc1 unused: the gradient goes over
// the used act).
template <class T>
static void mlp_bwd(const Gpt<T>& g, int wl, int lin1, int w1, int b1, int w2, int b2, long F1, long Fl, const T* in,
                    Buf<T>* in_owner, Buf<T>& fc1, Buf<T>& act, const T* dout, Buf<T>& din, long N, long Nl,
                    const uint16_t* in16 = nullptr, const uint16_t* act16 = nullptr, const uint16_t* fc1_16 = nullptr) {
  const long C = (long)g.lay.s.C;
  auto release = [](Buf<T>& v) { Buf<T>().swap(v); };
  // (bf16: dout's copy, read by both GEMMs below; without SP from the bias gradient's pass)
  Buf<uint16_t> dz16 = g.sp ? Buf<uint16_t>() : g.bias_grad16(b2 >= 0 ? g.g(b2) : nullptr, dout, N, C);
  if (g.sp && b2 >= 0) ops::bias_bwd(g.g(b2), dout, Nl, C);
  Buf<T> dz_full;  // [N, C] (SP: all-gathered)
  const T* dz = dout;
  if (g.sp) { dz_full.resize(N * C); gather_rows(g.tp, dout, dz_full.data(), Nl, C); dz = dz_full.data(); }
  Buf<T> qx, qw, qd;  // fp8 casts (the forward operands again with the same scales: the same values)
  dz = g.f8(qd, dz, N * C, wl, lin1 + 1, Fp8Operand::dy);
  if (g.sp) dz16 = g.grad16(dz, N * C);
  gemm16(g.g(w2), act16 ? nullptr : g.f8(qx, act.data(), N * Fl, wl, lin1 + 1, Fp8Operand::x, false), act16, dz,
         data16(dz16), Fl, C, N, true, false, T(1));
  if (act16) act.resize(N * Fl);  // (packed: a buffer for the gradient, as the used act would have been)
  T* dact = act.data();  // [N, Fl], over the used act
  const uint16_t* w2_16 = g.p16(w2), *w1_16 = g.p16(w1);
  gemm16(dact, dz, data16(dz16), w2_16 ? nullptr : g.f8(qw, g.p(w2), Fl * C, wl, lin1 + 1, Fp8Operand::w, false), w2_16,
         N, Fl, C, false, true, T(0));
  release(dz_full);
  Buf<uint16_t>().swap(dz16);
  Buf<uint16_t> d1_16;  // (bf16: the GEMMs' copy of fc1's gradient d1, made with the b1 gradient's pass)
  const T* d1 = nullptr;  // [N, F1] (null: only its copy exists)
  if (fc1_16) {  // (fc1 packed, so pack_operands16 is on: the GELU backward writes the gradient only as the copy)
    if (!g.lay.s.gelu) throw std::logic_error("mlp_bwd: a packed fc1 without GELU");
    d1_16.resize((size_t)(N * Fl));
    ops::gelu_bwd_bias16(d1_16.data(), b1 >= 0 ? g.g(b1) : nullptr, fc1_16, dact, N, Fl);
    release(act);
  } else {
    if (g.lay.s.gelu) ops::gelu_bwd_set(fc1.data(), fc1.data(), dact, N * Fl);
    else ops::swiglu_bwd_set(fc1.data(), fc1.data(), dact, N, Fl);
    release(act);
    d1_16 = g.bias_grad16(b1 >= 0 ? g.g(b1) : nullptr, fc1.data(), N, F1);  // [N, F1], over the used fc1
    d1 = g.f8(qd, fc1.data(), N * F1, wl, lin1, Fp8Operand::dy);
    if (!d1_16.empty()) release(fc1), d1 = nullptr;  // (bf16: the GEMMs read d1's copy)
  }
  gemm16(g.g(w1), in16 ? nullptr : g.f8(qx, in, N * C, wl, lin1, Fp8Operand::x, false), in16, d1, data16(d1_16), C, F1,
         N, true, false, T(1));
  if (in_owner) release(*in_owner);
  din.resize(N * C);
  gemm16(din.data(), d1, data16(d1_16), w1_16 ? nullptr : g.f8(qw, g.p(w1), C * F1, wl, lin1, Fp8Operand::w, false),
         w1_16, N, C, F1, false, true, T(0));
  release(fc1);
}

template <class T>
const T* Gpt<T>::f8(Buf<T>& tmp, const T* x, long n, int wl, int lin, Fp8Operand op, bool record) const {
  return fp8_operand(fp8, tmp, x, n, wl, lin, op, record);
}

template <class T>
void Gpt<T>::embed_fwd(T* x, const int32_t* tokens, long B, long Tn) const {
  const GptShape& s = lay.s;
  const long C = s.C, N = B * Tn;
  if (!tp) {
    ops::embedding_fwd(x, tokens, p(lay.params.wte), s.gelu && !cpx ? p(lay.params.wpe) : (const T*)nullptr, B, Tn, C);
    if (s.gelu && cpx) cp_add_positions(*cpx, x, p(lay.params.wpe), N, C, 0);
    return;
  }
  // Vocabulary-parallel lookup: rows of tokens outside this rank's shard are zero; the ranks' partial sums are
  // all-reduced (SP: reduce-scattered to row shards); the replicated positions are added afterwards.
  const long long v0 = s.v_begin(), vl = s.v_loc();
  Buf<T> part(N * C);                                                              // [N, C]
  ops::fill(part.data(), T(0), N * C);
  ops::embedding_shard_fwd(part.data(), tokens, p(lay.params.wte), N, C, (long)v0, (long)vl);
  const long nl = sp ? N / tp->size() : N, r0 = sp ? tp->rank() * nl : 0;
  if (sp) reduce_scatter_rows(tp, part.data(), x, nl, C);
  else { tp->all_reduce_sum(part.data(), N * C, dt(T{})); ops::copy(x, part.data(), N * C); }
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
void Gpt<T>::layer_fwd(int wl, const T* x_in, T* x_out, LayerActs<T>& a, long B, long Tn) const {
  const GptShape& s = lay.s;
  const long N = B * Tn, C = s.C, D = s.D, Hl = s.h_loc(), Kl = s.hkv_loc(), Q = s.qkv_cols(), F1 = s.fc1_cols(),
             Fl = s.f_loc();
  const long Nl = sp ? N / tp->size() : N;  // rows of the residual stream on this rank
  const LayerParams& W = lay.params.layers[wl];
  const bool gl = s.gelu;
  if (a.x_in.data() != x_in) { a.x_in.resize(Nl * C); ops::copy(a.x_in.data(), x_in, Nl * C); }
  // ln1 [Nl, C] on the shard; the QKV input is the full [N, C] (all-gathered under SP). bf16 storage without SP:
  // written packed only (the QKV GEMM and its weight gradient read it so).
  a.ln1_mean.resize(Nl); a.ln1_rstd.resize(Nl);
  const uint16_t* ln1_16 = nullptr;
  if (pack_operands16 && !sp) {
    uint16_t* y16 = a.out16(a.ln1, (size_t)(N * C));
    ops::layernorm_fwd16(y16, a.ln1_mean.data(), a.ln1_rstd.data(), x_in, p(W.ln1_w),
                         gl ? p(W.ln1_b) : (const T*)nullptr, Nl, C, T(1e-5));
    ln1_16 = y16;
  } else {
    Buf<T> ln(Nl * C);
    ops::layernorm_fwd(ln.data(), a.ln1_mean.data(), a.ln1_rstd.data(), x_in, p(W.ln1_w),
                       gl ? p(W.ln1_b) : (const T*)nullptr, Nl, C, T(1e-5));
    if (sp) { a.ln1.resize(N * C); gather_rows(tp, ln.data(), a.ln1.data(), Nl, C); }
    else a.ln1 = std::move(ln);
    if (pack_operands16) ln1_16 = a.pack_now(a.ln1, true);  // (the QKV weight gradient reads it packed too)
  }
  Buf<T> qkv(N * Q);                                                       // [N, Q]
  Buf<T> qx, qw;                                                           // fp8 casts (exec/model/fp8.hpp)
  const uint16_t* qkv16 = p16(W.qkv_w);  // (bf16 storage of the weights; fp8 casts T weights)
  ops::linear_fwd(qkv.data(), (T*)nullptr, ln1_16 ? nullptr : f8(qx, a.ln1.data(), N * C, wl, kFp8Qkv, Fp8Operand::x),
                  ln1_16, qkv16 ? nullptr : f8(qw, p(W.qkv_w), C * Q, wl, kFp8Qkv, Fp8Operand::w), qkv16,
                  s.has_qkv_bias() ? p(W.qkv_b) : (const T*)nullptr, N, Q, C);
  if (qkv_in_place()) {  // a.q keeps the whole [N, Q] output (k and v stay empty)
    a.q = std::move(qkv);
  } else {
    a.q.resize(N * Hl * D); a.k.resize(N * Kl * D); a.v.resize(N * Kl * D);       // [B, Tn, heads, D]
    ops::copy_rows(a.q.data(), Hl * D, qkv.data(), Q, N, Hl * D);
    ops::copy_rows(a.k.data(), Kl * D, qkv.data() + Hl * D, Q, N, Kl * D);
    ops::copy_rows(a.v.data(), Kl * D, qkv.data() + (Hl + Kl) * D, Q, N, Kl * D);
    Buf<T>().swap(qkv);  // dead: q, k, v hold its columns
  }
  // [B, Hl, Tn, Tn] (flash: [B, Hl, Tn, 2]); cp: its layout
  a.att.resize(cpx ? (size_t)cpx->att_elems(B, Hl) : (size_t)B * Hl * Tn * (flash ? 2 : Tn));
  const uint16_t* attn16 = nullptr;  // (bf16 storage: the attention output's copy, the projection's operand)
  if (qkv_in_place() && pack_operands16) {
    // bf16 storage under flash: the QKV output packed once and the attention output written packed, both read so
    // by the backward (LayerActs::stay16); the values of packing the T ones
    const uint16_t* qkv_16 = a.pack_now(a.q, true);
    uint16_t* out_16 = a.out16(a.attn, (size_t)(N * Hl * D));
    ops::flash_attention_fwd16(out_16, a.att.data(), qkv_16, qkv_16 + Hl * D, qkv_16 + (Hl + Kl) * D, B, Tn, Tn, Hl,
                               Kl, D, Q, Q);
    attn16 = out_16;
  } else {
    a.attn.resize(N * Hl * D);                                                    // [N, Hl D]
    if (cpx) cp_attention_fwd(*cpx, a.attn.data(), a.att.data(), a.q.data(), a.k.data(), a.v.data(), B, Hl, Kl, D);
    else if (flash)
      ops::flash_attention_fwd(a.attn.data(), a.att.data(), a.q.data(), a.q.data() + Hl * D,
                               a.q.data() + (Hl + Kl) * D, B, Tn, Tn, Hl, Kl, D, Q, Q);
    else ops::attention_fwd(a.attn.data(), a.att.data(), a.q.data(), a.k.data(), a.v.data(), B, Tn, Hl, Kl, D);
    // (unfused: the projection's weight gradient reads it packed, the only reader; flash under CP reads it in T)
    if (pack_operands16) attn16 = a.pack_now(a.attn, !flash);
  }
  Buf<T> y(N * C);                                                        // [N, C] partial over tp
  const uint16_t* proj16 = p16(W.proj_w);
  gemm16(y.data(), attn16 ? nullptr : f8(qx, a.attn.data(), N * Hl * D, wl, kFp8Proj, Fp8Operand::x), attn16,
         proj16 ? nullptr : f8(qw, p(W.proj_w), Hl * D * C, wl, kFp8Proj, Fp8Operand::w), proj16, N, C, Hl * D, false,
         false, T(0));
  Buf<T>().swap(qx), Buf<T>().swap(qw);
  a.x_mid.resize(Nl * C);                                                         // [Nl, C]
  if (sp) reduce_scatter_rows(tp, y.data(), a.x_mid.data(), Nl, C);
  else {
    if (tp) tp->all_reduce_sum(y.data(), N * C, dt(T{}));
    a.x_mid = std::move(y);
  }
  if (s.has_proj_bias()) ops::add_bias(a.x_mid.data(), a.x_mid.data(), p(W.proj_b), Nl, C, x_in);  // (+ the residual)
  else ops::add(a.x_mid.data(), a.x_mid.data(), x_in, Nl * C);
  if (pack_operands16) {  // (LayerNorm's backwards read both packed: layernorm_bwd16; a full recompute unmarks x_in)
    a.stays_packed(a.x_in);
    a.stays_packed(a.x_mid);
  }
  a.ln2_mean.resize(Nl); a.ln2_rstd.resize(Nl);
  // bf16 storage in a dense layer without SP: ln2 written packed only (fc1 and its weight gradient read it so)
  const bool ln2_packed = pack_operands16 && !sp && W.router_w < 0;
  const uint16_t* ln2_16 = nullptr;
  Buf<T> ln2;
  if (ln2_packed) {
    uint16_t* y16 = a.out16(a.ln2, (size_t)(Nl * C));
    ops::layernorm_fwd16(y16, a.ln2_mean.data(), a.ln2_rstd.data(), a.x_mid.data(), p(W.ln2_w),
                         gl ? p(W.ln2_b) : (const T*)nullptr, Nl, C, T(1e-5));
    ln2_16 = y16;
  } else {
    ln2.resize(Nl * C);
    ops::layernorm_fwd(ln2.data(), a.ln2_mean.data(), a.ln2_rstd.data(), a.x_mid.data(), p(W.ln2_w),
                       gl ? p(W.ln2_b) : (const T*)nullptr, Nl, C, T(1e-5));
  }
  if (W.router_w >= 0) {  // a MoE layer (exec/model/moe.hpp): routes this rank's rows (SP: its shard, no gather)
    Buf<T> shared;        // the shared experts' output rows: a dense MLP of every token (SP: of the gathered ln2)
    if (W.sh_w1 >= 0) {
      Buf<T> full;
      if (sp) { full.resize(N * C); gather_rows(tp, ln2.data(), full.data(), Nl, C); }
      shared.resize(Nl * C);
      mlp_fwd(*this, wl, kFp8ShFc1, W.sh_w1, W.sh_b1, W.sh_w2, W.sh_b2, (long)s.fs1_cols(), (long)s.fs_loc(),
              sp ? full.data() : ln2.data(), nullptr, a.s_fc1, a.s_act, shared.data(), N, Nl,
              pack_operands16 ? &a : nullptr);
    }
    a.ln2 = std::move(ln2);
    moe_mlp_fwd(*this, wl, W, a, x_out, Nl);
    if (!shared.empty()) ops::add(x_out, x_out, shared.data(), Nl * C);
    ops::add(x_out, x_out, a.x_mid.data(), Nl * C);
    return;
  }
  if (!ln2_packed) {
    if (sp) { a.ln2.resize(N * C); gather_rows(tp, ln2.data(), a.ln2.data(), Nl, C); }
    else a.ln2 = std::move(ln2);
    if (pack_operands16) ln2_16 = a.pack_now(a.ln2, true);  // (a dense layer: only fc1 and its weight gradient read it)
  }
  // (bf16: act, and fc1 under GELU, written packed, read so by fc2 and the backward: matmul16, gelu_bwd_bias16)
  mlp_fwd(*this, wl, kFp8Fc1, W.fc1_w, W.fc1_b, W.fc2_w, W.fc2_b, F1, Fl, a.ln2.data(), ln2_16, a.fc1, a.act, x_out, N,
          Nl, pack_operands16 ? &a : nullptr, true, a.x_mid.data());  // (+ the residual)
}

template <class T>
void Gpt<T>::layer_bwd(int wl, const T* dx_out, T* dx_in, LayerActs<T>& a, long B, long Tn) const {
  const GptShape& s = lay.s;
  const long N = B * Tn, C = s.C, D = s.D, Hl = s.h_loc(), Kl = s.hkv_loc(), Q = s.qkv_cols(), F1 = s.fc1_cols(),
             Fl = s.f_loc();
  const long Nl = sp ? N / tp->size() : N;
  const LayerParams& W = lay.params.layers[wl];
  const bool gl = s.gelu;
  // Saved tensors are released (or overwritten by their own gradients) as soon as they are consumed, as an
  // autograd engine frees saved tensors; the residual-stream gradient lives in dx_in throughout (dx_out, then
  // d x_mid, then d x_in), so dx_in may be dx_out (in place) and the layer takes no [N, C] buffer for it.
  auto release = [](Buf<T>& v) { Buf<T>().swap(v); };
  if (dx_in != dx_out) ops::copy(dx_in, dx_out, Nl * C);
  T* dx = dx_in;
  Buf<T> dln, dln_sh;                                                            // [N, C] partial; SP: [Nl, C]
  T* dln_loc = nullptr;
  if (W.router_w >= 0) {  // a MoE layer (exec/model/moe.hpp): the gradient of this rank's rows, complete
    Buf<T> dshared;        // the shared experts' input gradient rows (complete)
    if (W.sh_w1 >= 0) {    // (their input re-gathered under SP, as the forward's all-gather is not saved)
      Buf<T> full, part;
      if (sp) { full.resize(N * C); gather_rows(tp, a.ln2.data(), full.data(), Nl, C); }
      mlp_bwd(*this, wl, kFp8ShFc1, W.sh_w1, W.sh_b1, W.sh_w2, W.sh_b2, (long)s.fs1_cols(), (long)s.fs_loc(),
              sp ? full.data() : a.ln2.data(), sp ? &full : nullptr, a.s_fc1, a.s_act, dx, part, N, Nl);
      if (sp) { dshared.resize(Nl * C); reduce_scatter_rows(tp, part.data(), dshared.data(), Nl, C); }
      else { if (tp) tp->all_reduce_sum(part.data(), N * C, dt(T{})); dshared = std::move(part); }
    }
    dln.resize(N * C);     // (the attention's below)
    if (sp) dln_sh.resize(Nl * C);
    dln_loc = sp ? dln_sh.data() : dln.data();
    moe_mlp_bwd(*this, wl, W, a, dx, dln_loc, Nl);
    if (!dshared.empty()) ops::add(dln_loc, dln_loc, dshared.data(), Nl * C);
  } else {
    // MLP: z = act fc2_w (+ b), x_out = x_mid + z. dx_out is read (as dx) before the first write to dx below.
    mlp_bwd(*this, wl, kFp8Fc1, W.fc1_w, W.fc1_b, W.fc2_w, W.fc2_b, F1, Fl, a.ln2.data(), &a.ln2, a.fc1, a.act, dx, dln, N, Nl,
            a.packed(a.ln2), a.packed(a.act), a.packed(a.fc1));
    a.release_packed(a.ln2);
    a.release_packed(a.act);
    a.release_packed(a.fc1);
    if (sp) dln_sh.resize(Nl * C);
    dln_loc = sp ? dln_sh.data() : dln.data();
    if (sp) reduce_scatter_rows(tp, dln.data(), dln_loc, Nl, C);
    else if (tp) tp->all_reduce_sum(dln.data(), N * C, dt(T{}));
  }
  ln_bwd_saved(*this, dx, W.ln2_w, gl ? W.ln2_b : -1, dln_loc, a, a.x_mid, a.ln2_mean, a.ln2_rstd, Nl);  // d x_mid
  // Attention: y = attn proj_w (+ b), x_mid = x_in + y.
  // (bf16: dx's copy, read by both GEMMs; without SP from the bias gradient's pass)
  Buf<uint16_t> dy16 = sp ? Buf<uint16_t>() : bias_grad16(s.has_proj_bias() ? g(W.proj_b) : nullptr, dx, N, C);
  if (sp && s.has_proj_bias()) ops::bias_bwd(g(W.proj_b), dx, Nl, C);
  Buf<T> dy_full;
  const T* dy = dx;
  if (sp) { dy_full.resize(N * C); gather_rows(tp, dx, dy_full.data(), Nl, C); dy = dy_full.data(); }
  Buf<T> qx, qw, qd;                                                             // fp8 casts (exec/model/fp8.hpp)
  dy = f8(qd, dy, N * C, wl, kFp8Proj, Fp8Operand::dy);
  if (sp) dy16 = grad16(dy, N * C);
  if (const uint16_t* attn16 = a.packed(a.attn)) {  // (unfused: packed until here, then the gradient's buffer)
    gemm16(g(W.proj_w), (const T*)nullptr, attn16, dy, data16(dy16), Hl * D, C, N, true, false, T(1));
    if (!flash) {  // (flash reads it again: released after its backward)
      a.release_packed(a.attn);
      a.attn.resize(N * Hl * D);
    }
  } else {
    gemm16(g(W.proj_w), f8(qx, a.attn.data(), N * Hl * D, wl, kFp8Proj, Fp8Operand::x, false), nullptr, dy, data16(dy16),
           Hl * D, C, N, true, false, T(1));
  }
  Buf<T> dattn_own;  // flash: the backward reads the output too, so its gradient takes a buffer of its own
  if (flash) dattn_own.resize(N * Hl * D);
  T* dattn = flash ? dattn_own.data() : a.attn.data();                           // [N, Hl D], over the used attn
  const uint16_t* proj16 = p16(W.proj_w);
  gemm16(dattn, dy, data16(dy16), proj16 ? nullptr : f8(qw, p(W.proj_w), Hl * D * C, wl, kFp8Proj, Fp8Operand::w, false),
         proj16, N, Hl * D, C, false, true, T(0));
  Buf<uint16_t>().swap(dy16);
  Buf<T>().swap(qd);
  release(dy_full);
  Buf<T> dqkv(N * Q);                                                            // [N, Q]
  if (qkv_in_place()) {  // q, k, v in a.q ([N, Q]); their gradients straight into dqkv's columns
    T* dq = dqkv.data();
    if (const uint16_t* qkv16 = a.packed(a.q)) {  // (bf16 storage: q and attn as the forward packed them; overwrites)
      const uint16_t* out16 = a.packed(a.attn);
      if (!out16) throw std::logic_error("layer_bwd: the packed QKV without the packed attention output");
      ops::flash_attention_bwd16(dq, dq + Hl * D, dq + (Hl + Kl) * D, dattn, out16, a.att.data(), qkv16,
                                 qkv16 + Hl * D, qkv16 + (Hl + Kl) * D, B, Tn, Tn, Hl, Kl, D, Q, Q);
      a.release_packed(a.q);
      a.release_packed(a.attn);
    } else {
      const T* qkv = a.q.data();
      ops::fill(dq, T(0), N * Q);
      ops::flash_attention_bwd(dq, dq + Hl * D, dq + (Hl + Kl) * D, dattn, a.attn.data(), a.att.data(), qkv,
                               qkv + Hl * D, qkv + (Hl + Kl) * D, B, Tn, Tn, Hl, Kl, D, Q, Q);
    }
    for (Buf<T>* v : {&a.att, &a.attn, &a.q, &dattn_own}) release(*v);
  } else {
    Buf<T> dq(N * Hl * D), dk(N * Kl * D), dv(N * Kl * D);
    for (Buf<T>* d : {&dq, &dk, &dv}) ops::fill(d->data(), T(0), (long)d->size());
    if (cpx)
      cp_attention_bwd(*cpx, dq.data(), dk.data(), dv.data(), dattn, a.attn.data(), a.att.data(), a.q.data(),
                       a.k.data(), a.v.data(), B, Hl, Kl, D);
    else
      ops::attention_bwd(dq.data(), dk.data(), dv.data(), dattn, a.att.data(), a.q.data(), a.k.data(), a.v.data(), B,
                         Tn, Hl, Kl, D);
    for (Buf<T>* v : {&a.att, &a.attn, &a.q, &a.k, &a.v, &dattn_own}) release(*v);
    ops::copy_rows(dqkv.data(), Q, dq.data(), Hl * D, N, Hl * D);
    ops::copy_rows(dqkv.data() + Hl * D, Q, dk.data(), Kl * D, N, Kl * D);
    ops::copy_rows(dqkv.data() + (Hl + Kl) * D, Q, dv.data(), Kl * D, N, Kl * D);
  }
  const Buf<uint16_t> dq16 = bias_grad16(s.has_qkv_bias() ? g(W.qkv_b) : nullptr, dqkv.data(), N, Q);  // (bf16: its copy)
  const T* dq8 = f8(qd, dqkv.data(), N * Q, wl, kFp8Qkv, Fp8Operand::dy);
  if (!dq16.empty()) release(dqkv), dq8 = nullptr;  // (bf16: the GEMMs read its copy)
  const uint16_t* ln1_16 = a.packed(a.ln1);
  gemm16(g(W.qkv_w), ln1_16 ? nullptr : f8(qx, a.ln1.data(), N * C, wl, kFp8Qkv, Fp8Operand::x, false), ln1_16, dq8,
         data16(dq16), C, Q, N, true, false, T(1));
  release(a.ln1);
  a.release_packed(a.ln1);
  release(qx);
  const uint16_t* qkv16 = p16(W.qkv_w);
  gemm16(dln.data(), dq8, data16(dq16), qkv16 ? nullptr : f8(qw, p(W.qkv_w), C * Q, wl, kFp8Qkv, Fp8Operand::w, false),
         qkv16, N, C, Q, false, true, T(0));
  release(dqkv);
  if (sp) reduce_scatter_rows(tp, dln.data(), dln_loc, Nl, C);
  else if (tp) tp->all_reduce_sum(dln.data(), N * C, dt(T{}));
  ln_bwd_saved(*this, dx, W.ln1_w, gl ? W.ln1_b : -1, dln_loc, a, a.x_in, a.ln1_mean, a.ln1_rstd, Nl);  // d x_in
}

template <class T>
T Gpt<T>::head_fwd(const T* x, const int32_t* targets, HeadActs<T>& a, long B, long Tn) const {
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
  if (!tp) return ops::cross_entropy_fwd(logits, logits, targets, N, Vl);
  // Vocabulary-parallel cross-entropy: global row max (all-gather of the shards' maxima), sum of exponentials
  // and target logit (all-reduced); probabilities of this shard saved for the backward.
  // mx, all and sums go to the collectives: host memory (exec/comm/comm.hpp's rule; a device backend stages them).
  const int t = tp->size();
  const long v0 = (long)s.v_begin();
  Buf<T> mx(N), all(N * t), sums(2 * N);  // sums = [sum exp | target logit]
  ops::row_max(mx.data(), logits, N, Vl);
  tp->all_gather(mx.data(), all.data(), N, dt(T{}));
  ops::max_combine(mx.data(), all.data(), N, t);
  ops::ce_shard_exp(logits, sums.data(), sums.data() + N, logits, mx.data(), targets, N, Vl, v0,
                    ops::CeForm::raw_target_divide);  // logits in, exponentials out
  tp->all_reduce_sum(sums.data(), 2 * N, dt(T{}));
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
  ops::scale(dlogits, dlogits, scale, N * Vl);
  ops::ce_shard_target_grad(dlogits, targets, N, Vl, tp ? (long)s.v_begin() : 0L, scale);
  const Buf<uint16_t> dl16 = grad16(dlogits, N * Vl);
  if (!dl16.empty()) release(a.probs), dlogits = nullptr;  // (bf16: the GEMMs read the copy, half the bytes)
  gemm16(g(lay.params.wte), dlogits, data16(dl16), a.lnf.data(), nullptr, Vl, C, N, true, false, T(1));
  release(a.lnf);
  Buf<T> dlnf(N * C), dfull(sp ? N * C : 0);
  T* dfp = sp ? dfull.data() : dx;  // without SP the gradient goes straight to dx
  ops::fill(dfp, T(0), N * C);
  gemm16(dlnf.data(), dlogits, data16(dl16), p(lay.params.wte), p16(lay.params.wte), N, C, Vl, false, false, T(0));
  release(a.probs);
  if (tp) tp->all_reduce_sum(dlnf.data(), N * C, dt(T{}));  // partial over the vocabulary shards
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
