// gpt2d: the per-piece forward / backward of the Optimus 2D GPT (SUMMA kernels, row-parallel LayerNorm,
// vocabulary-blocked embedding and cross-entropy). Layout and conventions: gpt2d.hpp; block maps:
// gpt2d_layout.cpp.
// Local shapes on rank (r, c): Nl = (B/q) Tn rows; Cl = C/q; Hl = H/q, Kl = Hkv/q heads; Qc = (Hl + 2 Kl) D;
// Fl = F/q; F1 = Fl (GELU) or 2 Fl (SwiGLU: [gate | up]); Vl = V/q.
// SUMMA (A, B blocked over the grid, A(r, i) on rank (r, i), B(i, c) on rank (i, c)):
//   ab:  C(r, c)  = sum_i A(r, i) B(i, c)      broadcast A(r, i) along the row and B(i, c) along the column;
//   abt: C(r, i)  = sum_c A(r, c) B(i, c)^T    broadcast B(i, c) along the column, reduce along the row to (r, i);
//   atb: C(i, c) += sum_r A(r, i)^T B(r, c)    broadcast A(r, i) along the row, reduce along the column to (i, c).
// The row statistics (LayerNorm mean / variance, cross-entropy max / sum of exponentials) are ops over the
// local slice (ln_shard_*, row_max, ce_shard_*) around row collectives. Every tensor access goes through ops::
// (exec/backends/backend.hpp); buffers handed to a collective are backend memory (host memory on the CPU backend).
#include "gpt2d.hpp"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <stdexcept>

#include "exec/model/fp8.hpp"
#include "exec/backends/ops.hpp"

namespace tp::exec {

namespace {

bool multi(const Comm* cm) { return cm && cm->size() > 1; }

template <class T>
void bcast(Comm* cm, T* buf, long n, int root) {
  if (multi(cm)) cm->broadcast(buf, n, dtype_of<T>(), root);
}
template <class T>
void reduce_to(Comm* cm, const T* in, T* out, long n, int root) {  // out (on root) = sum over cm of in
  if (multi(cm)) cm->reduce_sum(in, out, n, dtype_of<T>(), root);
  else ops::copy(out, in, n);
}
template <class T>
void all_reduce(Comm* cm, T* buf, long n) {
  if (multi(cm)) cm->all_reduce_sum(buf, n, dtype_of<T>());
}

// The grid as seen by one rank.
struct Grid {
  Comm *row, *col;
  int q, r, c;
};

// The operands are Q8s (gpt.hpp): a block broadcast keeps its cast's scale, so two fp8 casts multiply through
// matmul_fp8 (gemm8), anything else through matmul.
// out[M, N] = sum_i A(r, i) · B(i, c); A local [M, K], B local [K, N] (overwrites out).
template <class T>
void summa_ab(const Grid& g, T* out, Q8<T> A, Q8<T> B, long M, long N, long K) {
  Buf<T> a(M * K), b(K * N);
  for (int i = 0; i < g.q; ++i) {
    if (g.c == i) ops::copy(a.data(), A.p, M * K);
    bcast(g.row, a.data(), M * K, i);
    if (g.r == i) ops::copy(b.data(), B.p, K * N);
    bcast(g.col, b.data(), K * N, i);
    gemm8(out, Q8<T>{a.data(), A.scale, A.format}, nullptr, Q8<T>{b.data(), B.scale, B.format}, nullptr, M, N, K, false,
          false, i == 0 ? T(0) : T(1));
  }
}

// out[M, K] += sum_c A(r, c) · B(i, c)^T on rank (r, i); A local [M, N], B local [K, N].
template <class T>
void summa_abt(const Grid& g, T* out, Q8<T> A, Q8<T> B, long M, long N, long K) {
  Buf<T> b(K * N), part(M * K), red(M * K);
  for (int i = 0; i < g.q; ++i) {
    if (g.r == i) ops::copy(b.data(), B.p, K * N);
    bcast(g.col, b.data(), K * N, i);
    gemm8(part.data(), A, nullptr, Q8<T>{b.data(), B.scale, B.format}, nullptr, M, K, N, false, true, T(0));
    reduce_to(g.row, part.data(), red.data(), M * K, i);
    if (g.c == i) ops::accumulate(out, red.data(), M * K);
  }
}

// out[K, N] += sum_r A(r, i)^T · B(r, c) on rank (i, c); A local [M, K], B local [M, N].
template <class T>
void summa_atb(const Grid& g, T* out, Q8<T> A, Q8<T> B, long M, long N, long K) {
  Buf<T> a(M * K), part(K * N), red(K * N);
  for (int i = 0; i < g.q; ++i) {
    if (g.c == i) ops::copy(a.data(), A.p, M * K);
    bcast(g.row, a.data(), M * K, i);
    gemm8(part.data(), Q8<T>{a.data(), A.scale, A.format}, nullptr, B, nullptr, K, N, M, true, false, T(0));
    reduce_to(g.col, part.data(), red.data(), K * N, i);
    if (g.r == i) ops::accumulate(out, red.data(), K * N);
  }
}

// A column-replicated parameter slice as used: grid row 0's copy, broadcast along the column.
template <class T>
Buf<T> from_row0(const Grid& g, const T* param, long n) {
  Buf<T> v(n);
  if (g.r == 0) ops::copy(v.data(), param, n);
  bcast(g.col, v.data(), n, 0);
  return v;
}
// grad (row 0 only) += sum over the column of partial.
template <class T>
void grad_to_row0(const Grid& g, T* grad, const T* partial, long n) {
  Buf<T> red(n);
  reduce_to(g.col, partial, red.data(), n, 0);
  if (g.r == 0) ops::accumulate(grad, red.data(), n);
}

// LayerNorm over the full row of C = q Cl columns; x, y [N, Cl] local; w, b [Cl] (b may be null).
template <class T>
void ln2d_fwd(const Grid& g, T* y, T* mean, T* rstd, const T* x, const T* w, const T* b, long N, long Cl, long C) {
  Buf<T> s(N);
  ops::ln_shard_sum(s.data(), x, N, Cl);
  all_reduce(g.row, s.data(), N);
  ops::ln_shard_sqdev(s.data(), mean, s.data(), x, N, Cl, C);  // in place: the sums become the squared deviations
  all_reduce(g.row, s.data(), N);
  ops::ln_shard_apply(y, rstd, x, mean, s.data(), w, b, N, Cl, C, T(1e-5));
}

// dx += ..., dw, db += this rank's partial sums over its rows (db may be null). See ops::layernorm_bwd.
template <class T>
void ln2d_bwd(const Grid& g, T* dx, T* dw, T* db, const T* dy, const T* x, const T* w, const T* mean, const T* rstd,
              long N, long Cl, long C) {
  Buf<T> s(2 * N);  // [sum w dy | sum w dy xhat] per row
  ops::ln_shard_bwd_sums(s.data(), dy, x, w, mean, rstd, N, Cl);
  all_reduce(g.row, s.data(), 2 * N);
  ops::ln_shard_bwd_apply(dx, dw, db, dy, x, w, mean, rstd, s.data(), N, Cl, C);
}

}  // namespace

#define TP_GPT2D_GRID                                                                                        \
  const Grid G{row, col, lay.q, lay.row, lay.col};                                                          \
  if (B % lay.q != 0)                                                                                        \
    throw std::invalid_argument("gpt2d: micro-batch " + std::to_string(B) + " is not divisible by q = " +   \
                                std::to_string(lay.q));                                                     \
  const long Nl = (long)lay.act_rows(B, Tn), Cl = (long)lay.c_loc(), C = (long)lay.s.C;                     \
  (void)C;

template <class T>
void Gpt2d<T>::embed_fwd(T* x, const int32_t* tokens, long B, long Tn) const {
  TP_GPT2D_GRID
  const long Vb = (long)lay.v_blk();
  const int32_t* tok = tokens + (long)lay.row * Nl;  // grid row r's sequences
  Buf<T> blk(Vb * Cl);
  for (int i = 0; i < G.q; ++i) {  // vocabulary block of grid row i, broadcast along the column
    if (G.r == i) ops::copy(blk.data(), p(lay.params.wte), Vb * Cl);
    bcast(G.col, blk.data(), Vb * Cl, i);
    ops::embedding_shard_fwd(x, tok, blk.data(), Nl, Cl, (long)lay.v_begin(i), (long)lay.v_len(i));
  }
  if (this->bf16_lookup) round_bf16(x, Nl * Cl);  // wte's bf16 values (ParamTables::bf16_lookup; no copies in 2D)
  if (lay.s.gelu) ops::add_positions(x, from_row0(G, p(lay.params.wpe), Tn * Cl).data(), Nl, Cl, Tn, 0);
}

template <class T>
void Gpt2d<T>::embed_bwd(const T* dx, const int32_t* tokens, long B, long Tn) const {
  TP_GPT2D_GRID
  const long Vb = (long)lay.v_blk();
  const int32_t* tok = tokens + (long)lay.row * Nl;
  Buf<T> part(Vb * Cl), red(Vb * Cl);
  for (int i = 0; i < G.q; ++i) {  // gradient rows of vocabulary block i, reduced to grid row i
    ops::fill(part.data(), T(0), Vb * Cl);
    ops::embedding_shard_bwd(part.data(), dx, tok, Nl, Cl, (long)lay.v_begin(i), (long)lay.v_len(i));
    reduce_to(G.col, part.data(), red.data(), Vb * Cl, i);
    if (G.r == i) ops::accumulate(g(lay.params.wte), red.data(), Vb * Cl);
  }
  if (lay.s.gelu) {
    Buf<T> dwpe(Tn * Cl);
    ops::fill(dwpe.data(), T(0), Tn * Cl);
    ops::positions_bwd(dwpe.data(), dx, Nl, Cl, Tn, 0);
    grad_to_row0(G, g(lay.params.wpe), dwpe.data(), Tn * Cl);
  }
}

template <class T>
void Gpt2d<T>::layer_fwd(int wl, const T* x_in, T* x_out, LayerActs<T>& a, long B, long Tn) const {
  TP_GPT2D_GRID
  const long D = lay.s.D, Hl = lay.h_loc(), Kl = lay.hkv_loc(), Q = lay.qkv_cols(), F1 = lay.fc1_cols(),
             Fl = lay.f_loc();
  const LayerParams& W = lay.params.layers[wl];
  const bool gl = lay.s.gelu;
  Buf<T> w, b;
  if (a.x_in.data() != x_in) { a.x_in.resize(Nl * Cl); ops::copy(a.x_in.data(), x_in, Nl * Cl); }
  // ln1
  a.ln1.resize(Nl * Cl); a.ln1_mean.resize(Nl); a.ln1_rstd.resize(Nl);
  w = from_row0(G, p(W.ln1_w), Cl);
  if (gl) b = from_row0(G, p(W.ln1_b), Cl);
  ln2d_fwd(G, a.ln1.data(), a.ln1_mean.data(), a.ln1_rstd.data(), x_in, w.data(), gl ? b.data() : (const T*)nullptr,
           Nl, Cl, C);
  // fp8 (exec/model/fp8.hpp): each SUMMA operand block cast before the broadcasts (element-wise with the slot's scale,
  // so the blocks are those of the cast full tensor).
  Buf<T> qx, qw;
  auto f8 = [&](Buf<T>& tmp, const T* x, long n, int lin, Fp8Operand op) { return fp8_operand(fp8, tmp, x, n, wl, lin, op); };
  // QKV: this grid column's heads [Q Hl D | K Kl D | V Kl D].
  Buf<T> qkv(Nl * Q);
  summa_ab(G, qkv.data(), f8(qx, a.ln1.data(), Nl * Cl, kFp8Qkv, Fp8Operand::x),
           f8(qw, p(W.qkv_w), Cl * Q, kFp8Qkv, Fp8Operand::w), Nl, Q, Cl);
  if (lay.s.has_qkv_bias()) ops::add_bias(qkv.data(), qkv.data(), from_row0(G, p(W.qkv_b), Q).data(), Nl, Q);
  a.q.resize(Nl * Hl * D); a.k.resize(Nl * Kl * D); a.v.resize(Nl * Kl * D);
  ops::copy_rows(a.q.data(), Hl * D, qkv.data(), Q, Nl, Hl * D);
  ops::copy_rows(a.k.data(), Kl * D, qkv.data() + Hl * D, Q, Nl, Kl * D);
  ops::copy_rows(a.v.data(), Kl * D, qkv.data() + (Hl + Kl) * D, Q, Nl, Kl * D);
  // Attention core: local (B/q sequences, this column's heads).
  const long Bl = B / G.q;
  a.att.resize((size_t)Bl * Hl * Tn * (flash ? 2 : Tn));
  a.attn.resize(Nl * Hl * D);
  if (flash)
    ops::flash_attention_fwd(a.attn.data(), a.att.data(), a.q.data(), a.k.data(), a.v.data(), Bl, Tn, Tn, Hl, Kl, D,
                             Hl * D, Kl * D);
  else ops::attention_fwd(a.attn.data(), a.att.data(), a.q.data(), a.k.data(), a.v.data(), Bl, Tn, Hl, Kl, D);
  // Projection: attn block (r, c) is block column c of the [N, H D] attention output.
  a.x_mid.resize(Nl * Cl);
  summa_ab(G, a.x_mid.data(), f8(qx, a.attn.data(), Nl * Hl * D, kFp8Proj, Fp8Operand::x),
           f8(qw, p(W.proj_w), Hl * D * Cl, kFp8Proj, Fp8Operand::w), Nl, Cl, Hl * D);
  if (lay.s.has_proj_bias())  // (+ the residual)
    ops::add_bias(a.x_mid.data(), a.x_mid.data(), from_row0(G, p(W.proj_b), Cl).data(), Nl, Cl, x_in);
  else ops::add(a.x_mid.data(), a.x_mid.data(), x_in, Nl * Cl);
  // ln2, MLP
  a.ln2.resize(Nl * Cl); a.ln2_mean.resize(Nl); a.ln2_rstd.resize(Nl);
  w = from_row0(G, p(W.ln2_w), Cl);
  if (gl) b = from_row0(G, p(W.ln2_b), Cl);
  ln2d_fwd(G, a.ln2.data(), a.ln2_mean.data(), a.ln2_rstd.data(), a.x_mid.data(), w.data(),
           gl ? b.data() : (const T*)nullptr, Nl, Cl, C);
  a.fc1.resize(Nl * F1);
  summa_ab(G, a.fc1.data(), f8(qx, a.ln2.data(), Nl * Cl, kFp8Fc1, Fp8Operand::x),
           f8(qw, p(W.fc1_w), Cl * F1, kFp8Fc1, Fp8Operand::w), Nl, F1, Cl);
  if (lay.s.has_mlp_bias()) ops::add_bias(a.fc1.data(), a.fc1.data(), from_row0(G, p(W.fc1_b), F1).data(), Nl, F1);
  a.act.resize(Nl * Fl);
  if (gl) ops::gelu_fwd(a.act.data(), a.fc1.data(), Nl * Fl);
  else ops::swiglu_fwd(a.act.data(), a.fc1.data(), Nl, Fl);
  summa_ab(G, x_out, f8(qx, a.act.data(), Nl * Fl, kFp8Fc2, Fp8Operand::x), f8(qw, p(W.fc2_w), Fl * Cl, kFp8Fc2, Fp8Operand::w),
           Nl, Cl, Fl);
  if (lay.s.has_mlp_bias()) ops::add_bias(x_out, x_out, from_row0(G, p(W.fc2_b), Cl).data(), Nl, Cl, a.x_mid.data());
  else ops::add(x_out, x_out, a.x_mid.data(), Nl * Cl);
}

template <class T>
void Gpt2d<T>::layer_bwd(int wl, const T* dx_out, T* dx_in, LayerActs<T>& a, long B, long Tn) const {
  TP_GPT2D_GRID
  const long D = lay.s.D, Hl = lay.h_loc(), Kl = lay.hkv_loc(), Q = lay.qkv_cols(), F1 = lay.fc1_cols(),
             Fl = lay.f_loc();
  const LayerParams& W = lay.params.layers[wl];
  const bool gl = lay.s.gelu;
  Buf<T> part;
  auto zeros = [](long n) { Buf<T> z(n); ops::fill(z.data(), T(0), n); return z; };
  auto bias_grad = [&](int view, const T* dy, long cols) {  // row-0 bias gradient
    part = zeros(cols);
    ops::bias_bwd(part.data(), dy, Nl, cols);
    grad_to_row0(G, g(view), part.data(), cols);
  };
  auto ln_bwd = [&](int w_view, int b_view, T* dx, const T* dy, const T* x, const T* mean, const T* rstd) {
    Buf<T> w = from_row0(G, p(w_view), Cl), dw = zeros(Cl), db = zeros(Cl);
    ln2d_bwd(G, dx, dw.data(), gl ? db.data() : (T*)nullptr, dy, x, w.data(), mean, rstd, Nl, Cl, C);
    grad_to_row0(G, g(w_view), dw.data(), Cl);
    if (gl) grad_to_row0(G, g(b_view), db.data(), Cl);
  };
  // fp8 (exec/model/fp8.hpp): the output gradients cast (E5M2), the forward operands cast again with the same scales.
  Buf<T> qx, qw, qd;
  auto f8 = [&](Buf<T>& tmp, const T* x, long n, int lin, Fp8Operand op) {
    return fp8_operand(fp8, tmp, x, n, wl, lin, op, op == Fp8Operand::dy);
  };
  // MLP: x_out = x_mid + act fc2_w (+ b).
  Buf<T> dx_mid(Nl * Cl);
  ops::copy(dx_mid.data(), dx_out, Nl * Cl);
  if (lay.s.has_mlp_bias()) bias_grad(W.fc2_b, dx_out, Cl);
  Buf<T> dact = zeros(Nl * Fl);
  const Q8<T> d2 = f8(qd, dx_out, Nl * Cl, kFp8Fc2, Fp8Operand::dy);
  summa_abt(G, dact.data(), d2, f8(qw, p(W.fc2_w), Fl * Cl, kFp8Fc2, Fp8Operand::w), Nl, Cl, Fl);
  summa_atb(G, g(W.fc2_w), f8(qx, a.act.data(), Nl * Fl, kFp8Fc2, Fp8Operand::x), d2, Nl, Cl, Fl);
  Buf<T> dfc1 = zeros(Nl * F1);
  if (gl) ops::gelu_bwd(dfc1.data(), a.fc1.data(), dact.data(), Nl * Fl);
  else ops::swiglu_bwd(dfc1.data(), a.fc1.data(), dact.data(), Nl, Fl);
  if (lay.s.has_mlp_bias()) bias_grad(W.fc1_b, dfc1.data(), F1);
  const Q8<T> d1 = f8(qd, dfc1.data(), Nl * F1, kFp8Fc1, Fp8Operand::dy);
  summa_atb(G, g(W.fc1_w), f8(qx, a.ln2.data(), Nl * Cl, kFp8Fc1, Fp8Operand::x), d1, Nl, F1, Cl);
  Buf<T> dln = zeros(Nl * Cl);
  summa_abt(G, dln.data(), d1, f8(qw, p(W.fc1_w), Cl * F1, kFp8Fc1, Fp8Operand::w), Nl, F1, Cl);
  ln_bwd(W.ln2_w, W.ln2_b, dx_mid.data(), dln.data(), a.x_mid.data(), a.ln2_mean.data(), a.ln2_rstd.data());
  // Attention: x_mid = x_in + attn proj_w (+ b).
  if (lay.s.has_proj_bias()) bias_grad(W.proj_b, dx_mid.data(), Cl);
  Buf<T> dattn = zeros(Nl * Hl * D);
  const Q8<T> dp = f8(qd, dx_mid.data(), Nl * Cl, kFp8Proj, Fp8Operand::dy);
  summa_abt(G, dattn.data(), dp, f8(qw, p(W.proj_w), Hl * D * Cl, kFp8Proj, Fp8Operand::w), Nl, Cl, Hl * D);
  summa_atb(G, g(W.proj_w), f8(qx, a.attn.data(), Nl * Hl * D, kFp8Proj, Fp8Operand::x), dp, Nl, Cl, Hl * D);
  Buf<T> dq = zeros(Nl * Hl * D), dk = zeros(Nl * Kl * D), dv = zeros(Nl * Kl * D);
  if (flash)
    ops::flash_attention_bwd(dq.data(), dk.data(), dv.data(), dattn.data(), a.attn.data(), a.att.data(), a.q.data(),
                             a.k.data(), a.v.data(), B / G.q, Tn, Tn, Hl, Kl, D, Hl * D, Kl * D);
  else
    ops::attention_bwd(dq.data(), dk.data(), dv.data(), dattn.data(), a.att.data(), a.q.data(), a.k.data(),
                       a.v.data(), B / G.q, Tn, Hl, Kl, D);
  Buf<T> dqkv(Nl * Q);
  ops::copy_rows(dqkv.data(), Q, dq.data(), Hl * D, Nl, Hl * D);
  ops::copy_rows(dqkv.data() + Hl * D, Q, dk.data(), Kl * D, Nl, Kl * D);
  ops::copy_rows(dqkv.data() + (Hl + Kl) * D, Q, dv.data(), Kl * D, Nl, Kl * D);
  if (lay.s.has_qkv_bias()) bias_grad(W.qkv_b, dqkv.data(), Q);
  const Q8<T> dq8 = f8(qd, dqkv.data(), Nl * Q, kFp8Qkv, Fp8Operand::dy);
  summa_atb(G, g(W.qkv_w), f8(qx, a.ln1.data(), Nl * Cl, kFp8Qkv, Fp8Operand::x), dq8, Nl, Q, Cl);
  ops::fill(dln.data(), T(0), Nl * Cl);
  summa_abt(G, dln.data(), dq8, f8(qw, p(W.qkv_w), Cl * Q, kFp8Qkv, Fp8Operand::w), Nl, Q, Cl);
  ops::copy(dx_in, dx_mid.data(), Nl * Cl);
  ln_bwd(W.ln1_w, W.ln1_b, dx_in, dln.data(), a.x_in.data(), a.ln1_mean.data(), a.ln1_rstd.data());
}

template <class T>
T Gpt2d<T>::head_fwd(const T* x, const int32_t* targets, HeadActs<T>& a, long B, long Tn) const {
  TP_GPT2D_GRID
  const long Vb = (long)lay.v_blk(), Vl = (long)lay.v_len(G.c), q = G.q;  // block c: Vl real classes of Vb rows
  const bool gl = lay.s.gelu;
  if (a.x_in.data() != x) { a.x_in.resize(Nl * Cl); ops::copy(a.x_in.data(), x, Nl * Cl); }  // (or moved x there)
  a.lnf.resize(Nl * Cl); a.lnf_mean.resize(Nl); a.lnf_rstd.resize(Nl);
  Buf<T> w = from_row0(G, p(lay.params.lnf_w), Cl), b;
  if (gl) b = from_row0(G, p(lay.params.lnf_b), Cl);
  ln2d_fwd(G, a.lnf.data(), a.lnf_mean.data(), a.lnf_rstd.data(), x, w.data(), gl ? b.data() : (const T*)nullptr, Nl,
           Cl, C);
  // logits (r, c) [Nl, Vb] = vocabulary block c: sum over hidden blocks k of lnf(r, k) wte(c, k)^T; a shorter
  // block's padding columns are dropped before the softmax.
  Buf<T> logits(Nl * Vb);
  ops::fill(logits.data(), T(0), Nl * Vb);
  summa_abt(G, logits.data(), Q8<T>{a.lnf.data()}, Q8<T>{p(lay.params.wte)}, Nl, Cl, Vb);
  if (Vl < Vb) {
    Buf<T> real(Nl * Vl);
    ops::copy_rows(real.data(), Vl, logits.data(), Vb, Nl, Vl);
    logits.swap(real);
  }
  // Cross-entropy with the row max (all-gather), sum of exponentials and target logit (all-reduce).
  const int32_t* tgt = targets + (long)G.r * Nl;
  const long v0 = (long)lay.v_begin(G.c);
  Buf<T> mx(Nl), mxs(Nl * q);
  ops::row_max(mx.data(), logits.data(), Nl, Vl);
  if (multi(G.row)) G.row->all_gather(mx.data(), mxs.data(), Nl, dtype_of<T>());
  else ops::copy(mxs.data(), mx.data(), Nl);
  ops::max_combine(mx.data(), mxs.data(), Nl, q);
  Buf<T> s(2 * Nl);  // [sum exp | target logit - max]
  a.probs.resize(Nl * Vl);
  ops::ce_shard_exp(a.probs.data(), s.data(), s.data() + Nl, logits.data(), mx.data(), tgt, Nl, Vl, v0,
                    ops::CeForm::shifted_target_reciprocal);
  all_reduce(G.row, s.data(), 2 * Nl);
  double loss = ops::ce_shard_finish(a.probs.data(), s.data(), s.data() + Nl, mx.data(), Nl, Vl,
                                     ops::CeForm::shifted_target_reciprocal);
  if (multi(G.col)) G.col->all_reduce_sum(&loss, 1, Dtype::f64);  // grid rows hold different sequences
  return T(loss);
}

template <class T>
void Gpt2d<T>::head_bwd(T* dx, const int32_t* targets, HeadActs<T>& a, long B, long Tn, T scale) const {
  TP_GPT2D_GRID
  const long Vb = (long)lay.v_blk(), Vl = (long)lay.v_len(G.c);
  const bool gl = lay.s.gelu;
  const int32_t* tgt = targets + (long)G.r * Nl;
  const long v0 = (long)lay.v_begin(G.c);
  Buf<T> dlogits(Nl * Vl);
  ops::scale(dlogits.data(), a.probs.data(), scale, Nl * Vl);
  ops::ce_shard_target_grad(dlogits.data(), tgt, Nl, Vl, v0, scale);
  if (Vl < Vb) {  // the padding columns' gradient: zero
    Buf<T> padded(Nl * Vb);
    ops::fill(padded.data(), T(0), Nl * Vb);
    ops::copy_rows(padded.data(), Vb, dlogits.data(), Vl, Nl, Vl);
    dlogits.swap(padded);
  }
  // logits = lnf wte^T: dwte = dlogits^T lnf (SUMMA atb), dlnf = dlogits wte (SUMMA ab).
  summa_atb(G, g(lay.params.wte), Q8<T>{dlogits.data()}, Q8<T>{a.lnf.data()}, Nl, Cl, Vb);
  Buf<T> dlnf(Nl * Cl);
  summa_ab(G, dlnf.data(), Q8<T>{dlogits.data()}, Q8<T>{p(lay.params.wte)}, Nl, Cl, Vb);
  ops::fill(dx, T(0), Nl * Cl);
  Buf<T> w = from_row0(G, p(lay.params.lnf_w), Cl), dw(Cl), db(Cl);
  ops::fill(dw.data(), T(0), Cl);
  ops::fill(db.data(), T(0), Cl);
  ln2d_bwd(G, dx, dw.data(), gl ? db.data() : (T*)nullptr, dlnf.data(), a.x_in.data(), w.data(), a.lnf_mean.data(),
           a.lnf_rstd.data(), Nl, Cl, C);
  grad_to_row0(G, g(lay.params.lnf_w), dw.data(), Cl);
  if (gl) grad_to_row0(G, g(lay.params.lnf_b), db.data(), Cl);
}

#undef TP_GPT2D_GRID

template struct Gpt2d<float>;
template struct Gpt2d<double>;

}  // namespace tp::exec
