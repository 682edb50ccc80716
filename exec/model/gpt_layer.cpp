// gpt_layer: one transformer layer's forward and backward (Gpt::layer_fwd / layer_bwd), each a flat list of calls,
// llm.c style: LayerNorm, QKV, the attention core, the projection with the residual, then the MLP half (dense, or
// MoE with its shared experts); the backward the same pieces in reverse. Each technique sits in the piece it
// changes: tensor / sequence parallelism in the collectives at a piece's ends, context parallelism and flash in the
// attention core, bf16 storage in which buffers are written packed (LayerActs), fp8 in the casts (Gpt::f8q) and the
// GEMMs of two casts (gemm8, linear8).
// Invariants: the pieces run the same operations in the same order on the same buffers as one function would (the
// losses are bit-identical: scripts/exec_fingerprint.py); saved tensors are released as soon as their last reader
// is done, as an autograd engine frees them. Shapes per tp rank: see gpt.cpp's opening comment and LayerDims.
#include <stdexcept>

#include "exec/backends/ops.hpp"
#include "exec/model/fp8.hpp"
#include "exec/model/gpt.hpp"
#include "exec/model/moe.hpp"
#include "exec/model/sp_pieces.hpp"

namespace tp::exec {

namespace {

template <class T>
void release(Buf<T>& v) { Buf<T>().swap(v); }

// One layer's shapes on this rank: N tokens of the micro-batch, Nl of them in the residual stream here (SP: a row
// shard), C hidden, D head dim, Hl / Kl query / kv heads, Q = (Hl + 2 Kl) D QKV columns, F1 fc1 columns (GELU Fl,
// SwiGLU 2 Fl), Fl MLP columns.
struct LayerDims {
  long N, Nl, C, D, Hl, Kl, Q, F1, Fl;
};

template <class T>
LayerDims layer_dims(const Gpt<T>& g, long B, long Tn) {
  const GptShape& s = g.lay.s;
  const long N = B * Tn;
  return {N, g.sp ? N / g.tp->size() : N, (long)s.C, (long)s.D, (long)s.h_loc(), (long)s.hkv_loc(),
          (long)s.qkv_cols(), (long)s.fc1_cols(), (long)s.f_loc()};
}

// full [N, C], partial over tp, made complete: under SP reduce-scattered into this rank's rows at loc, else
// all-reduced in place (loc is full's data).
template <class T>
void reduce_over_tp(const Gpt<T>& g, Buf<T>& full, T* loc, const LayerDims& d) {
  if (g.sp) reduce_scatter_rows(g.tp, full.data(), loc, d.Nl, d.C);
  else if (g.tp) g.tp->all_reduce_sum(full.data(), d.N * d.C, dtype_of<T>());
}

// The dense MLP, or a MoE layer's shared experts (views w1, b1, w2, b2; F1 / Fl inner columns on this rank), of
// in [N, C] (the micro-batch's rows: under SP all-gathered from this rank's, ColIn): saves fc1 [N, F1] and act
// [N, Fl]; out [Nl, C] = this rank's rows of the output (SP: reduce-scattered, in pieces under tp_overlap; else
// all-reduced over tp) with the fc2 bias. pk (Gpt::pack_operands16, else null): the LayerActs holding act, which packs it for fc2 (pack_now).
// bwd16 (with pk: the dense MLP, whose backward reads act, and fc1 under GELU, packed): act stays packed for the
// backward (LayerActs::stay16); under GELU act and fc1 are written only as bf16, from one pass over fc1's T values
// (ops::gelu_fwd16, after the GEMM and its bias). res (may be null): a residual [Nl, C] added to out after the fc2
// bias.
template <class T>
void mlp_fwd(const Gpt<T>& g, int wl, int lin1, int w1, int b1, int w2, int b2, long F1, long Fl, const ColIn<T>& in,
             Buf<T>& fc1, Buf<T>& act, T* out, long N, long Nl, LayerActs<T>* pk, bool bwd16 = false,
             const T* res = nullptr) {
  const long C = (long)g.lay.s.C;
  const bool gelu16 = pk && bwd16 && g.lay.s.gelu;
  const T* bias1 = b1 >= 0 ? g.p(b1) : nullptr;
  Buf<T> qx, qw;  // fp8 casts of the GEMM operands (linears lin1 and lin1 + 1 of exec/model/fp8.hpp)
  const uint16_t* w1_16 = g.p16(w1);  // (bf16 storage of the weights; fp8 casts T weights)
  Q8<T> w1p;
  bool first = true;
  // fc1 = in w1 + b1 by blocks of rows (GELU without bf16 storage: act = gelu(fc1) in the same op); the buffers and the
  // weight's cast made at the first block (after a whole gather, as before it)
  col_in_rows(g, in, N, C, qx, wl, lin1, Fp8Operand::x, [&](Q8<T> x1, const uint16_t* in16, long r0, long rows) {
    if (first) {
      first = false;
      fc1.resize(N * F1);
      if (!gelu16) act.resize(N * Fl);
      w1p = w1_16 ? Q8<T>{} : g.f8q(qw, g.p(w1), C * F1, wl, lin1, Fp8Operand::w);
    }
    if (g.lay.s.gelu && !gelu16)
      linear8(act.data() + r0 * Fl, fc1.data() + r0 * F1, x1, in16, w1p, w1_16, bias1, rows, F1, C);
    else linear8(fc1.data() + r0 * F1, (T*)nullptr, x1, in16, w1p, w1_16, bias1, rows, F1, C);
  });
  const uint16_t* act16 = nullptr;
  if (gelu16) {  // (fc1 = in w1 + b1 in T, then act = gelu(fc1) and fc1 itself as bf16 only)
    Buf<T> pre;
    pre.swap(fc1);
    uint16_t* a16 = pk->out16(act, (size_t)(N * Fl));
    ops::gelu_fwd16(a16, pk->out16(fc1, (size_t)(N * F1)), pre.data(), N * F1);
    act16 = a16;
  } else if (!g.lay.s.gelu) {
    ops::swiglu_fwd(act.data(), fc1.data(), N, Fl);
  }
  if (pk && !act16) act16 = pk->pack_now(act, bwd16);
  const Q8<T> x2 = act16 ? Q8<T>{} : g.f8q(qx, act.data(), N * Fl, wl, lin1 + 1, Fp8Operand::x);
  const uint16_t* w2_16 = g.p16(w2);
  const Q8<T> w2p = w2_16 ? Q8<T>{} : g.f8q(qw, g.p(w2), Fl * C, wl, lin1 + 1, Fp8Operand::w);
  auto fc2_rows = [&](T* o, long r0, long rows) {  // rows [r0, r0 + rows) of act w2 into o
    gemm8(o, q8_at(x2, r0 * Fl), act16 ? act16 + r0 * Fl : nullptr, w2p, w2_16, rows, C, Fl, false, false, T(0));
  };
  if (g.sp && g.tp_overlap) {
    reduce_scatter_rows_pieces(g.tp, out, Nl, C, fc2_rows);
  } else if (g.sp) {
    Buf<T> z(N * C);  // [N, C] partial
    fc2_rows(z.data(), 0, N);
    reduce_scatter_rows(g.tp, z.data(), out, Nl, C);
  } else {
    fc2_rows(out, 0, N);
    if (g.tp) g.tp->all_reduce_sum(out, N * C, dtype_of<T>());
  }
  if (b2 >= 0) ops::add_bias(out, out, g.p(b2), Nl, C, res);
  else if (res) ops::add(out, out, res, Nl * C);
}

// dx [N, C] += LayerNorm's backward from dy over the layer's saved input x (a field of a, read packed while it is:
// layernorm_bwd16), with weight view w and bias view b (< 0: none); x's buffers are released after.
template <class T>
void ln_bwd_saved(const Gpt<T>& g, T* dx, int w, int b, const T* dy, LayerActs<T>& a, Buf<T>& x, const Buf<T>& mean,
                  const Buf<T>& rstd, long N) {
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
void mlp_bwd(const Gpt<T>& g, int wl, int lin1, int w1, int b1, int w2, int b2, long F1, long Fl, const T* in,
             Buf<T>* in_owner, Buf<T>& fc1, Buf<T>& act, const T* dout, Buf<T>& din, long N, long Nl,
             const uint16_t* in16 = nullptr, const uint16_t* act16 = nullptr, const uint16_t* fc1_16 = nullptr) {
  const long C = (long)g.lay.s.C;
  // (bf16: dout's copy, read by both GEMMs below; without SP from the bias gradient's pass)
  Buf<uint16_t> dz16 = g.sp ? Buf<uint16_t>() : g.bias_grad16(b2 >= 0 ? g.g(b2) : nullptr, dout, N, C);
  if (g.sp && b2 >= 0) ops::bias_bwd(g.g(b2), dout, Nl, C);
  Buf<T> qx, qw, qd;  // fp8 casts (the forward operands again with the same scales: the same values)
  const uint16_t* w2_16 = g.p16(w2), *w1_16 = g.p16(w1);
  T* dact;  // [N, Fl], over the used act
  if (g.sp && g.tp_overlap) {  // (dz gathered in pieces under fc2's gradient GEMMs)
    const Q8<T> ax = act16 ? Q8<T>{} : g.f8q(qx, act.data(), N * Fl, wl, lin1 + 1, Fp8Operand::x, false);
    const Q8<T> wq = w2_16 ? Q8<T>{} : g.f8q(qw, g.p(w2), Fl * C, wl, lin1 + 1, Fp8Operand::w, false);
    if (act16) act.resize(N * Fl);  // (packed: a buffer for the gradient, as the used act would have been)
    dact = act.data();
    row_linear_bwd_pieces(g, wl, lin1 + 1, g.g(w2), ax, act16, wq, w2_16, dout, dact, N, Fl, C, qd);
  } else {
    Buf<T> dz_full;  // [N, C] (SP: all-gathered)
    const T* dz = dout;
    if (g.sp) { dz_full.resize(N * C); gather_rows(g.tp, dout, dz_full.data(), Nl, C); dz = dz_full.data(); }
    const Q8<T> dzq = g.f8q(qd, dz, N * C, wl, lin1 + 1, Fp8Operand::dy);
    dz = dzq.p;
    if (g.sp) dz16 = g.grad16(dz, N * C);
    gemm8(g.g(w2), act16 ? Q8<T>{} : g.f8q(qx, act.data(), N * Fl, wl, lin1 + 1, Fp8Operand::x, false), act16, dzq,
          data16(dz16), Fl, C, N, true, false, T(1));
    if (act16) act.resize(N * Fl);  // (packed: a buffer for the gradient, as the used act would have been)
    dact = act.data();
    gemm8(dact, dzq, data16(dz16), w2_16 ? Q8<T>{} : g.f8q(qw, g.p(w2), Fl * C, wl, lin1 + 1, Fp8Operand::w, false),
          w2_16, N, Fl, C, false, true, T(0));
    release(dz_full);
    Buf<uint16_t>().swap(dz16);
  }
  Buf<uint16_t> d1_16;  // (bf16: the GEMMs' copy of fc1's gradient d1, made with the b1 gradient's pass)
  Q8<T> d1;  // [N, F1] (p null: only its copy exists)
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
    d1 = g.f8q(qd, fc1.data(), N * F1, wl, lin1, Fp8Operand::dy);
    if (!d1_16.empty()) release(fc1), d1 = Q8<T>{};  // (bf16: the GEMMs read d1's copy)
  }
  gemm8(g.g(w1), in16 ? Q8<T>{} : g.f8q(qx, in, N * C, wl, lin1, Fp8Operand::x, false), in16, d1, data16(d1_16), C, F1,
        N, true, false, T(1));
  if (in_owner) release(*in_owner);
  din.resize(N * C);
  gemm8(din.data(), d1, data16(d1_16), w1_16 ? Q8<T>{} : g.f8q(qw, g.p(w1), C * F1, wl, lin1, Fp8Operand::w, false),
        w1_16, N, C, F1, false, true, T(0));
  release(fc1);
}

// ---- forward ----------------------------------------------------------------------------------------------------

// Under SP, where `in` gathers a LayerNorm's rows [N, C] for a column-parallel GEMM and its weight gradient: into
// `saved` (the layer's saved field), or under bf16 storage into `full` (T, freed once packed) and, packed, into saved's
// bf16 copy (LayerActs::out16), which is what the weight gradient reads.
template <class T>
void gather_target(const Gpt<T>& g, LayerActs<T>& a, Buf<T>& saved, Buf<T>& full, const LayerDims& d, ColIn<T>& in) {
  if (g.pack_operands16) {
    full.resize(d.N * d.C);
    in.full = full.data(), in.full_owner = &full, in.full16 = a.out16(saved, (size_t)(d.N * d.C));
  } else {
    saved.resize(d.N * d.C);
    in.full = saved.data();
  }
}

// ln1 [Nl, C] of x_in on the shard, and the QKV input [N, C] it makes (ColIn): without SP ln1 itself in a.ln1 (bf16
// storage: written packed only, as the QKV GEMM and its weight gradient read it); under SP its rows in ln, to be
// all-gathered into a.ln1 (bf16 storage: into `full`, then packed into a.ln1's copy, which the weight gradient reads).
template <class T>
ColIn<T> ln1_fwd(const Gpt<T>& g, const LayerParams& W, const T* x_in, LayerActs<T>& a, Buf<T>& ln, Buf<T>& full,
                 const LayerDims& d) {
  const T* bias = g.lay.s.gelu ? g.p(W.ln1_b) : (const T*)nullptr;
  a.ln1_mean.resize(d.Nl); a.ln1_rstd.resize(d.Nl);
  ColIn<T> in;
  if (g.pack_operands16 && !g.sp) {
    uint16_t* y16 = a.out16(a.ln1, (size_t)(d.N * d.C));
    ops::layernorm_fwd16(y16, a.ln1_mean.data(), a.ln1_rstd.data(), x_in, g.p(W.ln1_w), bias, d.Nl, d.C, T(1e-5));
    in.x16 = y16;
    return in;
  }
  ln.resize(d.Nl * d.C);
  ops::layernorm_fwd(ln.data(), a.ln1_mean.data(), a.ln1_rstd.data(), x_in, g.p(W.ln1_w), bias, d.Nl, d.C, T(1e-5));
  if (!g.sp) {
    a.ln1 = std::move(ln);
    in.x = a.ln1.data();
    return in;
  }
  in.shard = ln.data(), in.shard_owner = &ln;
  gather_target(g, a, a.ln1, full, d, in);
  return in;
}

// The QKV GEMM [N, C] x [C, Q] (+ bias) of `in` (ln1_fwd's) into a.q, block by block of its rows as they are gathered:
// flash without cp keeps the whole [N, Q] output there (k and v stay empty), else q, k, v are copies [B, Tn, heads,
// D] of its columns. qx, qw: the fp8 casts' scratch, which the projection reuses.
template <class T>
void qkv_fwd(const Gpt<T>& g, int wl, const LayerParams& W, LayerActs<T>& a, const ColIn<T>& in, Buf<T>& qx,
             Buf<T>& qw, const LayerDims& d) {
  const long N = d.N, C = d.C, D = d.D, Hl = d.Hl, Kl = d.Kl, Q = d.Q;
  Buf<T> qkv;                                                              // [N, Q]
  const uint16_t* qkv16 = g.p16(W.qkv_w);  // (bf16 storage of the weights; fp8 casts T weights)
  const T* bias = g.lay.s.has_qkv_bias() ? g.p(W.qkv_b) : (const T*)nullptr;
  Q8<T> wq;
  col_in_rows(g, in, N, C, qx, wl, kFp8Qkv, Fp8Operand::x, [&](Q8<T> x, const uint16_t* x16, long r0, long rows) {
    if (qkv.empty()) {  // (at the first block: after a whole gather, as before it)
      qkv.resize(N * Q);
      wq = qkv16 ? Q8<T>{} : g.f8q(qw, g.p(W.qkv_w), C * Q, wl, kFp8Qkv, Fp8Operand::w);
    }
    linear8(qkv.data() + r0 * Q, (T*)nullptr, x, x16, wq, qkv16, bias, rows, Q, C);
  });
  if (g.qkv_in_place()) { a.q = std::move(qkv); return; }
  a.q.resize(N * Hl * D); a.k.resize(N * Kl * D); a.v.resize(N * Kl * D);
  ops::copy_rows(a.q.data(), Hl * D, qkv.data(), Q, N, Hl * D);
  ops::copy_rows(a.k.data(), Kl * D, qkv.data() + Hl * D, Q, N, Kl * D);
  ops::copy_rows(a.v.data(), Kl * D, qkv.data() + (Hl + Kl) * D, Q, N, Kl * D);
}

// The attention core over a.q (k, v) into a.attn [N, Hl D] and its statistics a.att ([B, Hl, Tn, Tn]; flash:
// [B, Hl, Tn, 2]; cp: its layout, exec/model/cp_attention.hpp). Returns the projection's bf16 operand (null: none):
// under bf16 storage with flash the QKV output is packed once and the attention output written packed, both read
// so by the backward (LayerActs::stay16); otherwise the output's copy (unfused: the projection's weight gradient reads
// it packed, its only reader; flash under cp reads it in T).
template <class T>
const uint16_t* attention_core_fwd(const Gpt<T>& g, LayerActs<T>& a, long B, long Tn, const LayerDims& d) {
  const long N = d.N, D = d.D, Hl = d.Hl, Kl = d.Kl, Q = d.Q;
  a.att.resize(g.cpx ? (size_t)g.cpx->att_elems(B, Hl) : (size_t)B * Hl * Tn * (g.flash ? 2 : Tn));
  if (g.qkv_in_place() && g.pack_operands16) {
    const uint16_t* qkv_16 = a.pack_now(a.q, true);
    uint16_t* out_16 = a.out16(a.attn, (size_t)(N * Hl * D));
    ops::flash_attention_fwd16(out_16, a.att.data(), qkv_16, qkv_16 + Hl * D, qkv_16 + (Hl + Kl) * D, B, Tn, Tn, Hl,
                               Kl, D, Q, Q);
    return out_16;
  }
  a.attn.resize(N * Hl * D);                                                    // [N, Hl D]
  if (g.cpx) cp_attention_fwd(*g.cpx, a.attn.data(), a.att.data(), a.q.data(), a.k.data(), a.v.data(), B, Hl, Kl, D);
  else if (g.flash)
    ops::flash_attention_fwd(a.attn.data(), a.att.data(), a.q.data(), a.q.data() + Hl * D, a.q.data() + (Hl + Kl) * D,
                             B, Tn, Tn, Hl, Kl, D, Q, Q);
  else ops::attention_fwd(a.attn.data(), a.att.data(), a.q.data(), a.k.data(), a.v.data(), B, Tn, Hl, Kl, D);
  return g.pack_operands16 ? a.pack_now(a.attn, !g.flash) : nullptr;
}

// The projection [N, Hl D] x [Hl D, C], reduced over tp (SP: reduce-scattered) into a.x_mid [Nl, C], plus its bias
// and the residual x_in. Frees the fp8 scratch. Under bf16 storage the LayerNorm backwards read x_in and x_mid
// packed (layernorm_bwd16; a full recompute unmarks x_in).
template <class T>
void proj_fwd(const Gpt<T>& g, int wl, const LayerParams& W, const T* x_in, LayerActs<T>& a, const uint16_t* attn16,
              Buf<T>& qx, Buf<T>& qw, const LayerDims& d) {
  const long N = d.N, Nl = d.Nl, C = d.C, HD = d.Hl * d.D;
  const uint16_t* proj16 = g.p16(W.proj_w);
  const bool pieces = g.sp && g.tp_overlap;  // (reduce-scattered in pieces under the GEMM)
  Buf<T> y(pieces ? 0 : N * C);                                           // [N, C] partial over tp
  const Q8<T> xq = attn16 ? Q8<T>{} : g.f8q(qx, a.attn.data(), N * HD, wl, kFp8Proj, Fp8Operand::x);
  const Q8<T> wq = proj16 ? Q8<T>{} : g.f8q(qw, g.p(W.proj_w), HD * C, wl, kFp8Proj, Fp8Operand::w);
  auto rows_of = [&](T* o, long r0, long rows) {  // rows [r0, r0 + rows) of attn proj_w into o
    gemm8(o, q8_at(xq, r0 * HD), attn16 ? attn16 + r0 * HD : nullptr, wq, proj16, rows, C, HD, false, false, T(0));
  };
  if (pieces) {
    a.x_mid.resize(Nl * C);                                                       // [Nl, C]
    reduce_scatter_rows_pieces(g.tp, a.x_mid.data(), Nl, C, rows_of);
    release(qx), release(qw);
  } else {
    rows_of(y.data(), 0, N);
    release(qx), release(qw);
    a.x_mid.resize(Nl * C);                                                       // [Nl, C]
    if (g.sp) reduce_scatter_rows(g.tp, y.data(), a.x_mid.data(), Nl, C);
    else {
      if (g.tp) g.tp->all_reduce_sum(y.data(), N * C, dtype_of<T>());
      a.x_mid = std::move(y);
    }
  }
  if (g.lay.s.has_proj_bias()) ops::add_bias(a.x_mid.data(), a.x_mid.data(), g.p(W.proj_b), Nl, C, x_in);
  else ops::add(a.x_mid.data(), a.x_mid.data(), x_in, Nl * C);
  if (g.pack_operands16) {
    a.stays_packed(a.x_in);
    a.stays_packed(a.x_mid);
  }
}

// ln2 [Nl, C] of a.x_mid into ln2; bf16 storage in a dense layer without SP: written packed only, into a.ln2 (fc1 and
// its weight gradient read it so), and its copy returned (null: ln2 holds it in T).
template <class T>
const uint16_t* ln2_fwd(const Gpt<T>& g, const LayerParams& W, LayerActs<T>& a, Buf<T>& ln2, const LayerDims& d) {
  const T* bias = g.lay.s.gelu ? g.p(W.ln2_b) : (const T*)nullptr;
  a.ln2_mean.resize(d.Nl); a.ln2_rstd.resize(d.Nl);
  if (g.pack_operands16 && !g.sp && W.router_w < 0) {
    uint16_t* y16 = a.out16(a.ln2, (size_t)(d.Nl * d.C));
    ops::layernorm_fwd16(y16, a.ln2_mean.data(), a.ln2_rstd.data(), a.x_mid.data(), g.p(W.ln2_w), bias, d.Nl, d.C,
                         T(1e-5));
    return y16;
  }
  ln2.resize(d.Nl * d.C);
  ops::layernorm_fwd(ln2.data(), a.ln2_mean.data(), a.ln2_rstd.data(), a.x_mid.data(), g.p(W.ln2_w), bias, d.Nl, d.C,
                     T(1e-5));
  return nullptr;
}

// A MoE layer's MLP half (exec/model/moe.hpp): routes this rank's rows of ln2 (SP: its shard, no gather); the shared
// experts are a dense MLP of every token (SP: of the gathered ln2). x_out [Nl, C] = experts + shared + x_mid.
template <class T>
void moe_block_fwd(const Gpt<T>& g, int wl, const LayerParams& W, LayerActs<T>& a, Buf<T>& ln2, T* x_out,
                   const LayerDims& d) {
  const long N = d.N, Nl = d.Nl, C = d.C;
  Buf<T> shared;  // the shared experts' output rows
  if (W.sh_w1 >= 0) {
    Buf<T> full;
    ColIn<T> in;
    if (g.sp) {
      full.resize(N * C);
      in.shard = ln2.data(), in.full = full.data();
    } else {
      in.x = ln2.data();
    }
    shared.resize(Nl * C);
    mlp_fwd(g, wl, kFp8ShFc1, W.sh_w1, W.sh_b1, W.sh_w2, W.sh_b2, (long)g.lay.s.fs1_cols(), (long)g.lay.s.fs_loc(), in,
            a.s_fc1, a.s_act, shared.data(), N, Nl, g.pack_operands16 ? &a : nullptr);
  }
  a.ln2 = std::move(ln2);
  moe_mlp_fwd(g, wl, W, a, x_out, Nl);
  if (!shared.empty()) ops::add(x_out, x_out, shared.data(), Nl * C);
  ops::add(x_out, x_out, a.x_mid.data(), Nl * C);
}

// A dense layer's MLP half: a.ln2 = ln2 (SP: all-gathered to [N, C]) unless ln2_16 says it is already there packed;
// x_out [Nl, C] = the MLP (mlp_fwd; bf16: act, and fc1 under GELU, written packed, read so by fc2 and the backward)
// + x_mid.
template <class T>
void dense_block_fwd(const Gpt<T>& g, int wl, const LayerParams& W, LayerActs<T>& a, Buf<T>& ln2,
                     const uint16_t* ln2_16, T* x_out, const LayerDims& d) {
  ColIn<T> in;  // (bf16 storage: only fc1 and its weight gradient read ln2, packed)
  Buf<T> full;  // SP with bf16 storage: ln2's gathered rows in T until packed
  if (ln2_16) {
    in.x16 = ln2_16;
  } else if (g.sp) {
    in.shard = ln2.data();
    gather_target(g, a, a.ln2, full, d, in);
  } else {
    a.ln2 = std::move(ln2);
    if (g.pack_operands16) in.x16 = a.pack_now(a.ln2, true);
    else in.x = a.ln2.data();
  }
  mlp_fwd(g, wl, kFp8Fc1, W.fc1_w, W.fc1_b, W.fc2_w, W.fc2_b, d.F1, d.Fl, in, a.fc1, a.act, x_out, d.N, d.Nl,
          g.pack_operands16 ? &a : nullptr, true, a.x_mid.data());  // (+ the residual)
}

// ---- backward ---------------------------------------------------------------------------------------------------

// A MoE layer's MLP half backward from dx [Nl, C] (d x_out): dln [N, C] (and dln_sh [Nl, C] under SP) sized for the
// ln2 gradient, and the complete gradient of this rank's rows written where the returned pointer says. The shared
// experts' input is re-gathered under SP (the forward's all-gather is not saved).
template <class T>
T* moe_block_bwd(const Gpt<T>& g, int wl, const LayerParams& W, LayerActs<T>& a, const T* dx, Buf<T>& dln,
                 Buf<T>& dln_sh, const LayerDims& d) {
  const long N = d.N, Nl = d.Nl, C = d.C;
  Buf<T> dshared;  // the shared experts' input gradient rows (complete)
  if (W.sh_w1 >= 0) {
    Buf<T> full, part;
    if (g.sp) { full.resize(N * C); gather_rows(g.tp, a.ln2.data(), full.data(), Nl, C); }
    mlp_bwd(g, wl, kFp8ShFc1, W.sh_w1, W.sh_b1, W.sh_w2, W.sh_b2, (long)g.lay.s.fs1_cols(), (long)g.lay.s.fs_loc(),
            g.sp ? full.data() : a.ln2.data(), g.sp ? &full : nullptr, a.s_fc1, a.s_act, dx, part, N, Nl);
    if (g.sp) { dshared.resize(Nl * C); reduce_scatter_rows(g.tp, part.data(), dshared.data(), Nl, C); }
    else { if (g.tp) g.tp->all_reduce_sum(part.data(), N * C, dtype_of<T>()); dshared = std::move(part); }
  }
  dln.resize(N * C);  // (the attention's below)
  if (g.sp) dln_sh.resize(Nl * C);
  T* dln_loc = g.sp ? dln_sh.data() : dln.data();
  moe_mlp_bwd(g, wl, W, a, dx, dln_loc, Nl);
  if (!dshared.empty()) ops::add(dln_loc, dln_loc, dshared.data(), Nl * C);
  return dln_loc;
}

// A dense layer's MLP half backward (z = act fc2_w (+ b), x_out = x_mid + z) from dx [Nl, C]: dln [N, C] = the ln2
// gradient, reduced over tp into the returned rows (SP: dln_sh).
template <class T>
T* dense_block_bwd(const Gpt<T>& g, int wl, const LayerParams& W, LayerActs<T>& a, const T* dx, Buf<T>& dln,
                   Buf<T>& dln_sh, const LayerDims& d) {
  mlp_bwd(g, wl, kFp8Fc1, W.fc1_w, W.fc1_b, W.fc2_w, W.fc2_b, d.F1, d.Fl, a.ln2.data(), &a.ln2, a.fc1, a.act, dx, dln,
          d.N, d.Nl, a.packed(a.ln2), a.packed(a.act), a.packed(a.fc1));
  a.release_packed(a.ln2);
  a.release_packed(a.act);
  a.release_packed(a.fc1);
  if (g.sp) dln_sh.resize(d.Nl * d.C);
  T* dln_loc = g.sp ? dln_sh.data() : dln.data();
  reduce_over_tp(g, dln, dln_loc, d);
  return dln_loc;
}

// The projection's backward (y = attn proj_w (+ b), x_mid = x_in + y) from dx [Nl, C] (d x_mid): its bias and
// weight gradients, and the attention output's gradient [N, Hl D], returned: flash writes it to dattn_own (the
// attention's backward reads the output too), else over the used a.attn. qx, qw, qd: the fp8 scratch, which the QKV
// GEMMs' backward reuses (qd emptied here).
template <class T>
T* proj_bwd(const Gpt<T>& g, int wl, const LayerParams& W, const T* dx, LayerActs<T>& a, Buf<T>& dattn_own,
            Buf<T>& qx, Buf<T>& qw, Buf<T>& qd, const LayerDims& d) {
  const long N = d.N, Nl = d.Nl, C = d.C, HD = d.Hl * d.D;
  const bool bias = g.lay.s.has_proj_bias();
  // (bf16: dx's copy, read by both GEMMs; without SP from the bias gradient's pass)
  Buf<uint16_t> dy16 = g.sp ? Buf<uint16_t>() : g.bias_grad16(bias ? g.g(W.proj_b) : nullptr, dx, N, C);
  if (g.sp && bias) ops::bias_bwd(g.g(W.proj_b), dx, Nl, C);
  const uint16_t* proj16 = g.p16(W.proj_w);
  if (g.sp && g.tp_overlap) {  // (dy gathered in pieces under the projection's gradient GEMMs)
    const uint16_t* attn16 = a.packed(a.attn);
    const Q8<T> ax = attn16 ? Q8<T>{} : g.f8q(qx, a.attn.data(), N * HD, wl, kFp8Proj, Fp8Operand::x, false);
    const Q8<T> wq = proj16 ? Q8<T>{} : g.f8q(qw, g.p(W.proj_w), HD * C, wl, kFp8Proj, Fp8Operand::w, false);
    if (g.flash) dattn_own.resize(N * HD);
    else if (attn16) a.attn.resize(N * HD);  // (unfused: the gradient's buffer, the packed output read until the end)
    T* dattn = g.flash ? dattn_own.data() : a.attn.data();
    row_linear_bwd_pieces(g, wl, kFp8Proj, g.g(W.proj_w), ax, attn16, wq, proj16, dx, dattn, N, HD, C, qd);
    if (attn16 && !g.flash) a.release_packed(a.attn);
    release(qd);
    return dattn;
  }
  Buf<T> dy_full;
  const T* dy = dx;
  if (g.sp) { dy_full.resize(N * C); gather_rows(g.tp, dx, dy_full.data(), Nl, C); dy = dy_full.data(); }
  const Q8<T> dyq = g.f8q(qd, dy, N * C, wl, kFp8Proj, Fp8Operand::dy);
  dy = dyq.p;
  if (g.sp) dy16 = g.grad16(dy, N * C);
  if (const uint16_t* attn16 = a.packed(a.attn)) {  // (unfused: packed until here, then the gradient's buffer)
    gemm16(g.g(W.proj_w), (const T*)nullptr, attn16, dy, data16(dy16), HD, C, N, true, false, T(1));
    if (!g.flash) {  // (flash reads it again: released after its backward)
      a.release_packed(a.attn);
      a.attn.resize(N * HD);
    }
  } else {
    gemm8(g.g(W.proj_w), g.f8q(qx, a.attn.data(), N * HD, wl, kFp8Proj, Fp8Operand::x, false), nullptr, dyq,
          data16(dy16), HD, C, N, true, false, T(1));
  }
  if (g.flash) dattn_own.resize(N * HD);
  T* dattn = g.flash ? dattn_own.data() : a.attn.data();                       // [N, Hl D], over the used attn
  gemm8(dattn, dyq, data16(dy16), proj16 ? Q8<T>{} : g.f8q(qw, g.p(W.proj_w), HD * C, wl, kFp8Proj, Fp8Operand::w, false),
        proj16, N, HD, C, false, true, T(0));
  Buf<uint16_t>().swap(dy16);
  release(qd);
  return dattn;
}

// The attention core's backward from dattn: returns dqkv [N, Q], the QKV output's gradient (flash without cp: q, k,
// v gradients straight into its columns). Releases the saved q, k, v, att, attn and dattn_own.
template <class T>
Buf<T> attention_core_bwd(const Gpt<T>& g, LayerActs<T>& a, T* dattn, Buf<T>& dattn_own, long B, long Tn,
                          const LayerDims& d) {
  const long N = d.N, D = d.D, Hl = d.Hl, Kl = d.Kl, Q = d.Q;
  Buf<T> dqkv(N * Q);                                                            // [N, Q]
  if (g.qkv_in_place()) {
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
    return dqkv;
  }
  Buf<T> dq(N * Hl * D), dk(N * Kl * D), dv(N * Kl * D);
  for (Buf<T>* b : {&dq, &dk, &dv}) ops::fill(b->data(), T(0), (long)b->size());
  if (g.cpx)
    cp_attention_bwd(*g.cpx, dq.data(), dk.data(), dv.data(), dattn, a.attn.data(), a.att.data(), a.q.data(),
                     a.k.data(), a.v.data(), B, Hl, Kl, D);
  else
    ops::attention_bwd(dq.data(), dk.data(), dv.data(), dattn, a.att.data(), a.q.data(), a.k.data(), a.v.data(), B,
                       Tn, Hl, Kl, D);
  for (Buf<T>* v : {&a.att, &a.attn, &a.q, &a.k, &a.v, &dattn_own}) release(*v);
  ops::copy_rows(dqkv.data(), Q, dq.data(), Hl * D, N, Hl * D);
  ops::copy_rows(dqkv.data() + Hl * D, Q, dk.data(), Kl * D, N, Kl * D);
  ops::copy_rows(dqkv.data() + (Hl + Kl) * D, Q, dv.data(), Kl * D, N, Kl * D);
  return dqkv;
}

// The QKV GEMM's backward from dqkv (consumed): its bias and weight gradients, and dln [N, C] = the ln1 gradient,
// partial over tp. Releases the saved ln1 and the fp8 scratch qx.
template <class T>
void qkv_bwd(const Gpt<T>& g, int wl, const LayerParams& W, LayerActs<T>& a, Buf<T>& dqkv, Buf<T>& dln, Buf<T>& qx,
             Buf<T>& qw, Buf<T>& qd, const LayerDims& d) {
  const long N = d.N, C = d.C, Q = d.Q;
  // (bf16: its copy, which the GEMMs read)
  const Buf<uint16_t> dq16 = g.bias_grad16(g.lay.s.has_qkv_bias() ? g.g(W.qkv_b) : nullptr, dqkv.data(), N, Q);
  Q8<T> dq8 = g.f8q(qd, dqkv.data(), N * Q, wl, kFp8Qkv, Fp8Operand::dy);
  if (!dq16.empty()) release(dqkv), dq8 = Q8<T>{};
  const uint16_t* ln1_16 = a.packed(a.ln1);
  gemm8(g.g(W.qkv_w), ln1_16 ? Q8<T>{} : g.f8q(qx, a.ln1.data(), N * C, wl, kFp8Qkv, Fp8Operand::x, false), ln1_16,
        dq8, data16(dq16), C, Q, N, true, false, T(1));
  release(a.ln1);
  a.release_packed(a.ln1);
  release(qx);
  const uint16_t* qkv16 = g.p16(W.qkv_w);
  gemm8(dln.data(), dq8, data16(dq16), qkv16 ? Q8<T>{} : g.f8q(qw, g.p(W.qkv_w), C * Q, wl, kFp8Qkv, Fp8Operand::w, false),
        qkv16, N, C, Q, false, true, T(0));
  release(dqkv);
}

}  // namespace

template <class T>
void Gpt<T>::layer_fwd(int wl, const T* x_in, T* x_out, LayerActs<T>& a, long B, long Tn) const {
  const LayerDims d = layer_dims(*this, B, Tn);
  const LayerParams& W = lay.params.layers[wl];
  if (a.x_in.data() != x_in) { a.x_in.resize(d.Nl * d.C); ops::copy(a.x_in.data(), x_in, d.Nl * d.C); }
  Buf<T> qx, qw;  // fp8 casts of the attention half's GEMM operands (exec/model/fp8.hpp)
  Buf<T> ln1, ln1_full;  // SP: ln1's rows here; with bf16 storage its gathered rows in T until packed
  qkv_fwd(*this, wl, W, a, ln1_fwd(*this, W, x_in, a, ln1, ln1_full, d), qx, qw, d);
  const uint16_t* attn16 = attention_core_fwd(*this, a, B, Tn, d);
  proj_fwd(*this, wl, W, x_in, a, attn16, qx, qw, d);
  Buf<T> ln2;
  const uint16_t* ln2_16 = ln2_fwd(*this, W, a, ln2, d);
  if (W.router_w >= 0) moe_block_fwd(*this, wl, W, a, ln2, x_out, d);
  else dense_block_fwd(*this, wl, W, a, ln2, ln2_16, x_out, d);
}

// Saved tensors are released (or overwritten by their own gradients) as soon as they are consumed; the residual-
// stream gradient lives in dx_in throughout (dx_out, then d x_mid, then d x_in), so dx_in may be dx_out (in place)
// and the layer takes no [N, C] buffer for it.
template <class T>
void Gpt<T>::layer_bwd(int wl, const T* dx_out, T* dx_in, LayerActs<T>& a, long B, long Tn) const {
  const LayerDims d = layer_dims(*this, B, Tn);
  const LayerParams& W = lay.params.layers[wl];
  const bool gl = lay.s.gelu;
  if (dx_in != dx_out) ops::copy(dx_in, dx_out, d.Nl * d.C);
  T* dx = dx_in;
  Buf<T> dln, dln_sh;  // the LayerNorms' input gradients [N, C], partial over tp; SP: their shards [Nl, C]
  T* dln_loc = W.router_w >= 0 ? moe_block_bwd(*this, wl, W, a, dx, dln, dln_sh, d)
                               : dense_block_bwd(*this, wl, W, a, dx, dln, dln_sh, d);
  ln_bwd_saved(*this, dx, W.ln2_w, gl ? W.ln2_b : -1, dln_loc, a, a.x_mid, a.ln2_mean, a.ln2_rstd, d.Nl);  // d x_mid
  Buf<T> qx, qw, qd, dattn_own;  // the fp8 scratch of the attention half's GEMMs; flash: the output's gradient
  T* dattn = proj_bwd(*this, wl, W, dx, a, dattn_own, qx, qw, qd, d);
  Buf<T> dqkv = attention_core_bwd(*this, a, dattn, dattn_own, B, Tn, d);
  qkv_bwd(*this, wl, W, a, dqkv, dln, qx, qw, qd, d);
  reduce_over_tp(*this, dln, dln_loc, d);
  ln_bwd_saved(*this, dx, W.ln1_w, gl ? W.ln1_b : -1, dln_loc, a, a.x_in, a.ln1_mean, a.ln1_rstd, d.Nl);  // d x_in
}

template void Gpt<float>::layer_fwd(int, const float*, float*, LayerActs<float>&, long, long) const;
template void Gpt<double>::layer_fwd(int, const double*, double*, LayerActs<double>&, long, long) const;
template void Gpt<float>::layer_bwd(int, const float*, float*, LayerActs<float>&, long, long) const;
template void Gpt<double>::layer_bwd(int, const double*, double*, LayerActs<double>&, long, long) const;

}  // namespace tp::exec
