// ops: the small op interface every executor backend implements (CPU: Eigen in exec/backends/cpu/; emu and CUDA later).
// The model, the schedules, ZeRO, offload and delinking are written against these functions only, so no
// Eigen (or CUDA) type appears outside a backend, and they never read or write tensor memory themselves.
// Each function dispatches through the calling thread's current backend (exec/backends/backend.hpp; exec/backends/ops.cpp).
// Conventions: buffers are contiguous, row-major, of T = float or double (both instantiated); shapes are in
// the comments ([B, T, C] = batch, time, channels); N = B * T rows. Forward functions overwrite their
// outputs. Backward functions ACCUMULATE (+=) into every gradient they write (parameter gradients are summed
// over micro-batches; an activation gradient may receive several contributions), so callers zero them first.
// Token ids are int32.
#pragma once
#include <cstdint>

namespace tp::ops {

// C[M, N] = alpha * op(A) · op(B) + beta * C, op(X) = X or Xᵀ. A is [M, K] (or [K, M] when trans_a),
// B is [K, N] (or [N, K] when trans_b).
template <class T>
void matmul(T* C, const T* A, const T* B, long M, long N, long K, bool trans_a, bool trans_b, T alpha, T beta);

// matmul with either operand (or both) held as bf16 instead: A16 / B16, laid out as A / B would be, given in place
// of A / B (for each operand exactly one of the two pointers is non-null). The packed operands are pack_bf16's
// storage: a saved activation kept packed into the backward's weight-gradient GEMM, a weight's bf16 copy (bf16
// storage of the weights). Exactly matmul on their bf16 values, unpacked (with bf16 GEMM operands on they are
// already rounded and a T operand is rounded as usual). A GPU backend gives the packed copies to the bf16 GEMM.
template <class T>
void matmul16(T* C, const T* A, const uint16_t* A16, const T* B, const uint16_t* B16, long M, long N, long K,
              bool trans_a, bool trans_b, T alpha, T beta);

// A linear layer's forward, as one op so a GPU backend can fuse it into the GEMM (cuBLASLt's bias and GELU
// epilogues): with pre == null, y[M, N] = x[M, K] · w[K, N] + b[N]; with pre != null, pre = x · w + b and
// y = gelu(pre) (gelu_fwd's tanh form). b may be null (no bias). Exactly matmul (matmul16 when x16, the input's bf16
// copy, is given instead of x, or w16, the weight's, instead of w: exactly one of x, x16 and one of w, w16 is
// non-null), then add_bias, then gelu_fwd. y and pre alias nothing else.
template <class T>
void linear_fwd(T* y, T* pre, const T* x, const uint16_t* x16, const T* w, const uint16_t* w16, const T* b, long M,
                long N, long K);

// y[N, C] = x[N, C] + b[C] broadcast over rows (bias add, in place allowed: y == x); r (may be null; y may be r):
// a residual [N, C] added after the bias in the same pass, exactly add_bias then add(y, y, r).
template <class T>
void add_bias(T* y, const T* x, const T* b, long N, long C, const T* r = nullptr);
// db[C] += sum over rows of dy[N, C]; dy16 (may be null): dy packed too (pack_bf16's rounding: the copy the
// GEMMs read under bf16 storage), from the same read of dy.
template <class T>
void bias_bwd(T* db, const T* dy, long N, long C, uint16_t* dy16 = nullptr);

// y[n] = a[n] + b[n] (residual; in place allowed).
template <class T>
void add(T* y, const T* a, const T* b, long n);
// y[n] += x[n]
template <class T>
void accumulate(T* y, const T* x, long n);
// y[n] = s * x[n]
template <class T>
void scale(T* y, const T* x, T s, long n);
// y[n] = value
template <class T>
void fill(T* y, T value, long n);
// dst[n] = src[n] (device to device; no overlap).
template <class T>
void copy(T* dst, const T* src, long n);
// Strided 2D copy: dst[r * dst_stride + c] = src[r * src_stride + c] for r < rows, c < cols (no overlap);
// e.g. the q / k / v column blocks of a [N, Q] QKV output.
template <class T>
void copy_rows(T* dst, long dst_stride, const T* src, long src_stride, long rows, long cols);

// bf16 storage of a tensor (training.precision "bf16": the saved activations between the forward and the backward,
// exec/model/gpt.hpp LayerActs::pack_bf16). pack: y[n] = the bf16 bits of x[n] rounded to nearest even (exec/kernels/k_fp8.hpp
// bf16_round, from x's own type: a double is not rounded through float first), the rule the bf16 GEMM operands use,
// so a packed GEMM operand rounds to the same value again. unpack: y[n] = the bf16 value x[n], exact in T.
template <class T>
void pack_bf16(uint16_t* y, const T* x, long n);
template <class T>
void unpack_bf16(T* y, const uint16_t* x, long n);

// LayerNorm over the last dim: y = (x - mean) * rstd * w + b; x, y [N, C]; w, b [C]; mean, rstd [N] saved.
template <class T>
void layernorm_fwd(T* y, T* mean, T* rstd, const T* x, const T* w, const T* b, long N, long C, T eps);
// The same with y written only as bf16 (pack_bf16 of layernorm_fwd's y: a GEMM input under bf16 storage, never
// needed in T).
template <class T>
void layernorm_fwd16(uint16_t* y16, T* mean, T* rstd, const T* x, const T* w, const T* b, long N, long C, T eps);
// dx[N, C] += ..., dw[C] += ..., db[C] += ... (b may be null for RMS-style callers that pass b = null).
template <class T>
void layernorm_bwd(T* dx, T* dw, T* db, const T* dy, const T* x, const T* w, const T* mean, const T* rstd, long N,
                   long C);
// The same with x given as its bf16 copy (pack_bf16's storage: a saved input held packed), exactly layernorm_bwd on x
// unpacked.
template <class T>
void layernorm_bwd16(T* dx, T* dw, T* db, const T* dy, const uint16_t* x16, const T* w, const T* mean, const T* rstd,
                     long N, long C);

// LayerNorm over rows split by columns across ranks (2D tensor parallelism): each rank holds Cl of the row's
// C columns; the row sums go through a collective between the steps. x, y, dx, dy [N, Cl]; w, b, dw, db [Cl].
// sum[n] = sum of x[n, :] (this rank's columns, in column order).
template <class T>
void ln_shard_sum(T* sum, const T* x, long N, long Cl);
// mean[n] = sum[n] / C (sum: the all-reduced row sums), then sqdev[n] = sum over this rank's columns of
// (x - mean)^2. sqdev may be sum (in place).
template <class T>
void ln_shard_sqdev(T* sqdev, T* mean, const T* sum, const T* x, long N, long Cl, long C);
// rstd[n] = 1 / sqrt(sqdev[n] / C + eps) (sqdev all-reduced); y = (x - mean) * rstd * w + b (b may be null).
template <class T>
void ln_shard_apply(T* y, T* rstd, const T* x, const T* mean, const T* sqdev, const T* w, const T* b, long N,
                    long Cl, long C, T eps);
// sums[2N] = [sum of w dy | sum of w dy xhat] per row over this rank's columns (xhat = (x - mean) * rstd).
template <class T>
void ln_shard_bwd_sums(T* sums, const T* dy, const T* x, const T* w, const T* mean, const T* rstd, long N, long Cl);
// With the all-reduced sums: dx += rstd (w dy - sums[n] / C - xhat sums[N + n] / C); dw += xhat dy; db += dy
// (db may be null). dw and db are this rank's partial sums over its rows.
template <class T>
void ln_shard_bwd_apply(T* dx, T* dw, T* db, const T* dy, const T* x, const T* w, const T* mean, const T* rstd,
                        const T* sums, long N, long Cl, long C);

// GELU, tanh approximation (GPT-2): y = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
template <class T>
void gelu_fwd(T* y, const T* x, long n);
// The same written only as bf16 (bf16 storage's dense MLP): y16 = pack_bf16(gelu_fwd(x)) and x16 =
// pack_bf16(x), from one read of x (the T-valued y is not stored).
template <class T>
void gelu_fwd16(uint16_t* y16, uint16_t* x16, const T* x, long n);
template <class T>
void gelu_bwd(T* dx, const T* x, const T* dy, long n);  // dx += gelu'(x) * dy
// dx = gelu'(x) * dy, OVERWRITING dx (the one exception to the accumulate rule); dx may be x or dy, so the
// gradient can replace a saved tensor in place instead of taking a buffer of its own.
template <class T>
void gelu_bwd_set(T* dx, const T* x, const T* dy, long n);
// The same over [N, F] with x held as bf16 (pack_bf16's storage: the saved fc1 under bf16 storage, read packed),
// the gradient written only packed, as the GEMMs read it: dx16 = pack_bf16(gelu_bwd_set's dx on x unpacked), and db
// (may be null) += bias_bwd's column sums of that dx, from one pass (the T-valued dx is not stored).
template <class T>
void gelu_bwd_bias16(uint16_t* dx16, T* db, const uint16_t* x16, const T* dy, long N, long F);

// SwiGLU: gate_up [N, 2F] holds gate in columns [0, F) and up in [F, 2F); y [N, F] = silu(gate) * up.
template <class T>
void swiglu_fwd(T* y, const T* gate_up, long N, long F);
template <class T>
void swiglu_bwd(T* dgate_up, const T* gate_up, const T* dy, long N, long F);  // dgate_up [N, 2F] +=
// As swiglu_bwd but OVERWRITING dgate_up, which may be gate_up (in place over the saved input).
template <class T>
void swiglu_bwd_set(T* dgate_up, const T* gate_up, const T* dy, long N, long F);

// Causal self-attention core with grouped-query heads (H query heads, Hkv key/value heads, H % Hkv == 0,
// query head h uses kv head h / (H / Hkv)). q [B, T, H, D], k and v [B, T, Hkv, D] (strided views are not
// supported: pass contiguous copies). out [B, T, H, D]. att [B, H, T, T] saves the softmax probabilities
// (entries above the diagonal are 0). Scale 1/sqrt(D).
template <class T>
void attention_fwd(T* out, T* att, const T* q, const T* k, const T* v, long B, long Tn, long H, long Hkv, long D);
// dq, dk, dv += gradients (same shapes as q, k, v). `att` from the forward.
template <class T>
void attention_bwd(T* dq, T* dk, T* dv, const T* dout, const T* att, const T* q, const T* k, const T* v, long B,
                   long Tn, long H, long Hkv, long D);
// Rectangular causal attention (context parallelism, exec/model/cp_attention.hpp): Tq query rows attend Tk >= Tq keys,
// the mask aligned bottom-right (query i attends keys j <= i + Tk - Tq: the queries are the last Tq positions of
// the key sequence). q, out [B, Tq, H, D]; k, v [B, Tk, Hkv, D]; att [B, H, Tq, Tk]. Tq == Tk is attention_fwd.
template <class T>
void attention_fwd_kv(T* out, T* att, const T* q, const T* k, const T* v, long B, long Tq, long Tk, long H, long Hkv,
                      long D);
// dq [B, Tq, H, D], dk and dv [B, Tk, Hkv, D] += gradients. `att` from attention_fwd_kv.
template <class T>
void attention_bwd_kv(T* dq, T* dk, T* dv, const T* dout, const T* att, const T* q, const T* k, const T* v, long B,
                      long Tq, long Tk, long H, long Hkv, long D);

// Fused ("flash") causal attention over Tq <= Tk keys, the mask bottom-right as attention_fwd_kv's, which never
// keeps the [Tq, Tk] probabilities. q (and dq) hold one row of H*D per token with row stride ldq >= H*D; k, v (and
// dk, dv) rows of Hkv*D with stride ldkv >= Hkv*D, so the model passes its fused QKV output [N, Q] in place (ldq =
// ldkv = Q) instead of copies; out, dout: [B, Tq, H, D]. out as attention_fwd_kv's; stats [B, H, Tq, 2] saves each query
// row's softmax statistics (max of the scaled scores, then 1 / sum of exp(score - max)), from which the backward
// recomputes P = exp(score - max) / sum. With bf16 GEMM operands (exec/backends/backend.hpp) the same operands are rounded
// as in attention_fwd_kv (q, k; the normalised P and v), so the two ops compute the same function (to rounding).
template <class T>
void flash_attention_fwd(T* out, T* stats, const T* q, const T* k, const T* v, long B, long Tq, long Tk, long H,
                         long Hkv, long D, long ldq, long ldkv);
// dq [B, Tq, H, D], dk and dv [B, Tk, Hkv, D] += gradients, with out and stats from flash_attention_fwd and
// FlashAttention-2's row term rowsum(dout ⊙ out) in place of rowsum(P ⊙ dP) (equal in exact arithmetic):
// dS = P ⊙ (dP − rowsum(dout ⊙ out)), computed in the working precision (bf16 rounds dout, v for dP; P, dout for
// dV; dS, k for dQ; dS, q for dK, as attention_bwd_kv). dout may not alias out.
template <class T>
void flash_attention_bwd(T* dq, T* dk, T* dv, const T* dout, const T* out, const T* stats, const T* q, const T* k,
                         const T* v, long B, long Tq, long Tk, long H, long Hkv, long D, long ldq, long ldkv);
// The two with q, k, v and out held as bf16 (pack_bf16's storage, the same layouts and strides): training.precision
// "bf16" packs the fused QKV output once and keeps the attention output packed, both read so by the backward.
// Exactly the T ops on their values unpacked, with out packed, except that the backward OVERWRITES dq, dk and dv
// (their H D and Hkv D columns of each row) with the gradients, as the T op accumulating into zeros would
// (exec/backends/cpu/flash16.hpp), so the model's gradient buffer needs no fill; a GPU backend's kernels read and write
// bf16 directly (half the bytes, no unpacking).
template <class T>
void flash_attention_fwd16(uint16_t* out, T* stats, const uint16_t* q, const uint16_t* k, const uint16_t* v, long B,
                           long Tq, long Tk, long H, long Hkv, long D, long ldq, long ldkv);
template <class T>
void flash_attention_bwd16(T* dq, T* dk, T* dv, const T* dout, const uint16_t* out, const T* stats, const uint16_t* q,
                           const uint16_t* k, const uint16_t* v, long B, long Tq, long Tk, long H, long Hkv, long D,
                           long ldq, long ldkv);

// Softmax cross-entropy over the last dim, one target per row. logits [N, V]; probs [N, V] saved; returns the
// SUM of -log p[target] over rows (callers divide by the token count). probs may be logits (in place).
template <class T>
T cross_entropy_fwd(T* probs, const T* logits, const int32_t* targets, long N, long V);
// dlogits[N, V] += scale * (probs - onehot(target)).
template <class T>
void cross_entropy_bwd(T* dlogits, const T* probs, const int32_t* targets, long N, long V, T scale);

// Vocabulary-parallel cross-entropy (Megatron), in steps around the ranks' collectives; logits and probs
// [N, V] are this rank's vocabulary shard [v0, v0 + V) of the rows.
// mx[n] = max of x[n, :] (x [N, V]).
template <class T>
void row_max(T* mx, const T* x, long N, long V);
// mx[n] = max(mx[n], parts[p * N + n]) for p = 0 .. P-1 in order (parts: the all-gathered shard maxima).
template <class T>
void max_combine(T* mx, const T* parts, long N, long P);
// How the shard partials form the loss (both kept so the 1D and 2D models keep their exact results):
//  raw_target_divide: target[n] = the raw target logit; loss += log(sum) + max - target; p = e / sum.
//  shifted_target_reciprocal: target[n] = target logit - max; loss += log(sum) - target; p = e * (1 / sum).
enum class CeForm { raw_target_divide = 0, shifted_target_reciprocal = 1 };
// probs[n, j] = exp(logits[n, j] - mx[n]) (probs may be logits: in place); sum_exp[n] = sum over j of it;
// target[n] = the target's logit (form above) when targets[n] lies in [v0, v0 + V), else 0.
template <class T>
void ce_shard_exp(T* probs, T* sum_exp, T* target, const T* logits, const T* mx, const int32_t* targets, long N,
                  long V, long v0, CeForm form);
// With the all-reduced sum_exp and target: normalises probs[N, V] and returns the loss SUM over the N rows
// (in double).
template <class T>
double ce_shard_finish(T* probs, const T* sum_exp, const T* target, const T* mx, long N, long V, CeForm form);
// dlogits[n, targets[n] - v0] -= scale where the target lies in this shard (the one-hot part of the
// cross-entropy gradient; the probability part is ops::scale of the saved probs).
template <class T>
void ce_shard_target_grad(T* dlogits, const int32_t* targets, long N, long V, long v0, T scale);

// Embedding: out[B, T, C] = wte[tokens[b, t]] (+ wpe[t] when wpe is not null; wpe [maxT, C]).
template <class T>
void embedding_fwd(T* out, const int32_t* tokens, const T* wte, const T* wpe, long B, long Tn, long C);
// dwte[V, C] += scatter of dout rows; dwpe[maxT, C] += sum over batch (when not null).
template <class T>
void embedding_bwd(T* dwte, T* dwpe, const T* dout, const int32_t* tokens, long B, long Tn, long C);

// Vocabulary-parallel embedding: rows n of out[N, C] whose token lies in this shard [v0, v0 + Vl) get
// wte_shard[tokens[n] - v0, :] (overwritten); other rows are left as they are.
template <class T>
void embedding_shard_fwd(T* out, const int32_t* tokens, const T* wte_shard, long N, long C, long v0, long Vl);
// dwte_shard[tokens[n] - v0, :] += dout[n, :] for the rows whose token lies in the shard.
template <class T>
void embedding_shard_bwd(T* dwte_shard, const T* dout, const int32_t* tokens, long N, long C, long v0, long Vl);
// Positions of rows [row0, row0 + rows) of flattened [B, Tn] sequences: x[i, :] += wpe[(row0 + i) % Tn, :].
template <class T>
void add_positions(T* x, const T* wpe, long rows, long C, long Tn, long row0);
// dwpe[(row0 + i) % Tn, :] += dx[i, :] for i < rows.
template <class T>
void positions_bwd(T* dwpe, const T* dx, long rows, long C, long Tn, long row0);

// AdamW (decoupled weight decay), one step t >= 1 with bias correction, on the gradient gscale g (the global-norm
// clip's factor, 1 without clipping; g itself is not written): with g' = gscale g (rounded as ops::scale rounds it),
// m = b1 m + (1-b1) g'; v = b2 v + (1-b2) g'^2; p -= lr (m_hat / (sqrt(v_hat) + eps) + wd p).
template <class T>
void adamw(T* p, const T* g, T* m, T* v, long n, T lr, T b1, T b2, T eps, T wd, long t, T gscale);

// Sum of squares (for gradient-norm clipping), accumulated in double.
template <class T>
double sum_squares(const T* x, long n);

// fp8 cast of a linear layer's GEMM operand, emulated in T (exec/model/fp8.hpp): y[n] = fp8(x[n] * scale) / scale, fp8
// being E4M3 (format 0) or E5M2 (format 1), rounded to nearest even and saturated to the format's max
// (exec/kernels/k_fp8.hpp fp8_round). Returns max |x| (before scaling), in double. y may be x (in place).
template <class T>
double fp8_quantize(T* y, const T* x, long n, T scale, int format);

// Mixture of experts (exec/model/moe.hpp). Router of N tokens over E experts, top-k, capacity `cap` tokens per expert:
// probs[N, E] = softmax(logits[N, E]) (rows); each token's k largest probabilities (ties: lower expert index)
// are its choices; gate[N, k] = those probabilities, divided by their sum when `renorm`. Capacity: the first
// choices of all tokens in token order, then the second choices, ... take the free positions of their expert;
// slot[N, k] = e * cap + position, or -(e + 1) when expert e was full (the copy is dropped). Returns the
// load-balancing loss (Switch / GShard) E * sum_e f_e P_e, f_e = choices of e / (N k) (before dropping),
// P_e = mean over tokens of probs[:, e] (1 when perfectly balanced).
template <class T>
double moe_route(T* probs, int32_t* slot, T* gate, const T* logits, long N, long E, long k, long cap, int renorm);
// dlogits[N, E] += gradient from dgate[N, k] (the gates' gradients) plus aux_weight x the gradient of the
// load-balancing loss (f_e held constant, as in Switch).
template <class T>
void moe_route_bwd(T* dlogits, const T* probs, const int32_t* slot, const T* dgate, long N, long E, long k, long cap,
                   int renorm, T aux_weight);
// out[rows, C] = 0, then out[slot[i, j], :] = x[i, :] for every kept copy (the capacity-padded expert inputs).
template <class T>
void moe_dispatch(T* out, const T* x, const int32_t* slot, long N, long k, long C, long rows);
// dx[i, :] += dout[slot[i, j], :] over the kept copies.
template <class T>
void moe_dispatch_bwd(T* dx, const T* dout, const int32_t* slot, long N, long k, long C);
// y[i, :] = sum over the kept copies of gate[i, j] ein[slot[i, j], :] (overwritten; 0 for a token all dropped).
template <class T>
void moe_combine(T* y, const T* ein, const int32_t* slot, const T* gate, long N, long k, long C);
// dein[slot[i, j], :] += gate[i, j] dy[i, :]; dgate[i, j] += dy[i, :] . ein[slot[i, j], :] (kept copies).
template <class T>
void moe_combine_bwd(T* dein, T* dgate, const T* dy, const T* ein, const int32_t* slot, const T* gate, long N, long k,
                     long C);

}  // namespace tp::ops
