// ops: the small op interface every executor backend implements (CPU: Eigen in exec/cpu/; CUDA later).
// The model, the schedules, ZeRO, offload and delinking are written against these functions only, so no
// Eigen (or CUDA) type appears outside a backend.
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

// y[N, C] = x[N, C] + b[C] broadcast over rows (bias add, in place allowed: y == x).
template <class T>
void add_bias(T* y, const T* x, const T* b, long N, long C);
// db[C] += sum over rows of dy[N, C].
template <class T>
void bias_bwd(T* db, const T* dy, long N, long C);

// y[n] = a[n] + b[n] (residual; in place allowed).
template <class T>
void add(T* y, const T* a, const T* b, long n);
// y[n] += x[n]
template <class T>
void accumulate(T* y, const T* x, long n);
// y[n] = s * x[n]
template <class T>
void scale(T* y, const T* x, T s, long n);

// LayerNorm over the last dim: y = (x - mean) * rstd * w + b; x, y [N, C]; w, b [C]; mean, rstd [N] saved.
template <class T>
void layernorm_fwd(T* y, T* mean, T* rstd, const T* x, const T* w, const T* b, long N, long C, T eps);
// dx[N, C] += ..., dw[C] += ..., db[C] += ... (b may be null for RMS-style callers that pass b = null).
template <class T>
void layernorm_bwd(T* dx, T* dw, T* db, const T* dy, const T* x, const T* w, const T* mean, const T* rstd, long N,
                   long C);

// GELU, tanh approximation (GPT-2): y = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
template <class T>
void gelu_fwd(T* y, const T* x, long n);
template <class T>
void gelu_bwd(T* dx, const T* x, const T* dy, long n);  // dx += gelu'(x) * dy
// dx = gelu'(x) * dy, OVERWRITING dx (the one exception to the accumulate rule); dx may be x or dy, so the
// gradient can replace a saved tensor in place instead of taking a buffer of its own.
template <class T>
void gelu_bwd_set(T* dx, const T* x, const T* dy, long n);

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

// Softmax cross-entropy over the last dim, one target per row. logits [N, V]; probs [N, V] saved; returns the
// SUM of -log p[target] over rows (callers divide by the token count). probs may be logits (in place).
template <class T>
T cross_entropy_fwd(T* probs, const T* logits, const int32_t* targets, long N, long V);
// dlogits[N, V] += scale * (probs - onehot(target)).
template <class T>
void cross_entropy_bwd(T* dlogits, const T* probs, const int32_t* targets, long N, long V, T scale);

// Embedding: out[B, T, C] = wte[tokens[b, t]] (+ wpe[t] when wpe is not null; wpe [maxT, C]).
template <class T>
void embedding_fwd(T* out, const int32_t* tokens, const T* wte, const T* wpe, long B, long Tn, long C);
// dwte[V, C] += scatter of dout rows; dwpe[maxT, C] += sum over batch (when not null).
template <class T>
void embedding_bwd(T* dwte, T* dwpe, const T* dout, const int32_t* tokens, long B, long Tn, long C);

// AdamW (decoupled weight decay), one step t >= 1 with bias correction:
// m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2; p -= lr (m_hat / (sqrt(v_hat) + eps) + wd p).
template <class T>
void adamw(T* p, const T* g, T* m, T* v, long n, T lr, T b1, T b2, T eps, T wd, long t);

// Sum of squares (for gradient-norm clipping), accumulated in double.
template <class T>
double sum_squares(const T* x, long n);

}  // namespace tp::ops
