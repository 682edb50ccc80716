// ops_cpu: the CPU backend's element-wise and row-wise ops — bias, residual add/accumulate/scale,
// LayerNorm, GELU (tanh), SwiGLU, softmax cross-entropy, embeddings, AdamW, sum of squares. (The GEMM-shaped
// ops, matmul and attention, are in ops_gemm.cpp.) Plain loops the compiler vectorises; no Eigen needed.
// Invariants (exec/backends/ops.hpp): row-major contiguous buffers; forwards overwrite, backwards accumulate (+=);
// token ids and targets are int32 in range (not checked); double is the correctness oracle, so every formula
// is the exact derivative of its forward (checked by finite differences in tests/exec/test_ops.cpp).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "exec/backends/cpu/ops_cpu.hpp"
#include "exec/kernels/k_fp8.hpp"
#include "exec/prof/prof.hpp"

namespace tp::ops::cpu {

// y[N, C] = x[N, C] + b[C] (+ r[N, C], added after b); y may equal x or r.
template <class T>
void add_bias(T* y, const T* x, const T* b, long N, long C, const T* r) {
  exec::prof::Scope prof_scope(exec::prof::Cls::elementwise);
  for (long n = 0; n < N; ++n) {
    const T* xr = x + n * C;
    T* yr = y + n * C;
    if (r) {
      const T* rr = r + n * C;
      for (long c = 0; c < C; ++c) yr[c] = (xr[c] + b[c]) + rr[c];
    } else {
      for (long c = 0; c < C; ++c) yr[c] = xr[c] + b[c];
    }
  }
}

// db[C] += sum over rows of dy[N, C].
template <class T>
void bias_bwd(T* db, const T* dy, long N, long C, uint16_t* dy16) {
  {
    exec::prof::Scope prof_scope(exec::prof::Cls::elementwise);
    for (long n = 0; n < N; ++n) {
      const T* dr = dy + n * C;
      for (long c = 0; c < C; ++c) db[c] += dr[c];
    }
  }
  if (dy16) pack_bf16(dy16, dy, N * C);
}

template <class T>
void add(T* y, const T* a, const T* b, long n) {
  exec::prof::Scope prof_scope(exec::prof::Cls::elementwise);
  for (long i = 0; i < n; ++i) y[i] = a[i] + b[i];
}

template <class T>
void accumulate(T* y, const T* x, long n) {
  exec::prof::Scope prof_scope(exec::prof::Cls::elementwise);
  for (long i = 0; i < n; ++i) y[i] += x[i];
}

template <class T>
void scale(T* y, const T* x, T s, long n) {
  exec::prof::Scope prof_scope(exec::prof::Cls::elementwise);
  for (long i = 0; i < n; ++i) y[i] = s * x[i];
}

// y[N, C] = (x - mean) * rstd * w + b, mean[N] and rstd[N] saved; var is the biased (1/C) variance.
// b == null means no shift.
template <class T>
void layernorm_fwd(T* y, T* mean, T* rstd, const T* x, const T* w, const T* b, long N, long C, T eps) {
  exec::prof::Scope prof_scope(exec::prof::Cls::elementwise);
  for (long n = 0; n < N; ++n) {
    const T* xr = x + n * C;
    T* yr = y + n * C;
    T m = 0;
    for (long c = 0; c < C; ++c) m += xr[c];
    m /= T(C);
    T var = 0;
    for (long c = 0; c < C; ++c) {
      const T d = xr[c] - m;
      var += d * d;
    }
    var /= T(C);
    const T s = T(1) / std::sqrt(var + eps);
    if (b) {
      for (long c = 0; c < C; ++c) yr[c] = (xr[c] - m) * s * w[c] + b[c];
    } else {
      for (long c = 0; c < C; ++c) yr[c] = (xr[c] - m) * s * w[c];
    }
    mean[n] = m;
    rstd[n] = s;
  }
}
// Row blocks through a local buffer, then packed (exactly layernorm_fwd, then pack_bf16).
template <class T>
void layernorm_fwd16(uint16_t* y16, T* mean, T* rstd, const T* x, const T* w, const T* b, long N, long C, T eps) {
  const long rows = std::max(1L, 4096 / std::max(1L, C));
  std::vector<T> y(static_cast<size_t>(rows * C));
  for (long r0 = 0; r0 < N; r0 += rows) {
    const long n = std::min(rows, N - r0);
    layernorm_fwd(y.data(), mean + r0, rstd + r0, x + r0 * C, w, b, n, C, eps);
    pack_bf16(y16 + r0 * C, y.data(), n * C);
  }
}

// With xhat = (x - mean) * rstd and g = w ⊙ dy (per row):
//   dx += rstd * (g - mean(g) - xhat * mean(g ⊙ xhat)),  dw += xhat ⊙ dy,  db += dy.
// dw and db may be null (skipped).
template <class T>
void layernorm_bwd(T* dx, T* dw, T* db, const T* dy, const T* x, const T* w, const T* mean, const T* rstd, long N,
                   long C) {
  exec::prof::Scope prof_scope(exec::prof::Cls::elementwise);
  for (long n = 0; n < N; ++n) {
    const T* xr = x + n * C;
    const T* dyr = dy + n * C;
    T* dxr = dx + n * C;
    const T m = mean[n], s = rstd[n];
    T gmean = 0, gxmean = 0;
    for (long c = 0; c < C; ++c) {
      const T xhat = (xr[c] - m) * s;
      const T g = w[c] * dyr[c];
      gmean += g;
      gxmean += g * xhat;
    }
    gmean /= T(C);
    gxmean /= T(C);
    for (long c = 0; c < C; ++c) {
      const T xhat = (xr[c] - m) * s;
      const T g = w[c] * dyr[c];
      dxr[c] += s * (g - gmean - xhat * gxmean);
    }
    if (dw) {
      for (long c = 0; c < C; ++c) dw[c] += (xr[c] - m) * s * dyr[c];
    }
    if (db) {
      for (long c = 0; c < C; ++c) db[c] += dyr[c];
    }
  }
}

// x unpacked into a local buffer, then exactly layernorm_bwd.
template <class T>
void layernorm_bwd16(T* dx, T* dw, T* db, const T* dy, const uint16_t* x16, const T* w, const T* mean, const T* rstd,
                     long N, long C) {
  std::vector<T> x((size_t)(N * C));
  unpack_bf16(x.data(), x16, N * C);
  layernorm_bwd(dx, dw, db, dy, x.data(), w, mean, rstd, N, C);
}

namespace {
template <class T>
constexpr T kGeluS = T(0.7978845608028653558798921198687637);  // sqrt(2/pi)
template <class T>
constexpr T kGeluA = T(0.044715);

// tanh for the GELU: in float, Eigen's rational approximation (clamped at +-7.905; plain arithmetic, so the
// loop vectorises; |error| < 1e-6 against std::tanh); in double (the oracle path) std::tanh.
inline float gelu_tanh(float x) {
  const float c = 7.90531110763549805f;
  x = std::min(c, std::max(-c, x));
  const float x2 = x * x;
  float p = -2.76076847742355e-16f;
  p = p * x2 + 2.00018790482477e-13f;
  p = p * x2 + -8.60467152213735e-11f;
  p = p * x2 + 5.12229709037114e-08f;
  p = p * x2 + 1.48572235717979e-05f;
  p = p * x2 + 6.37261928875436e-04f;
  p = p * x2 + 4.89352455891786e-03f;
  p = p * x;
  float q = 1.19825839466702e-06f;
  q = q * x2 + 1.18534705686654e-04f;
  q = q * x2 + 2.26843463243900e-03f;
  q = q * x2 + 4.89352518554385e-03f;
  return p / q;
}
inline double gelu_tanh(double x) { return std::tanh(x); }
}  // namespace

// y = 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3).
template <class T>
void gelu_fwd(T* y, const T* x, long n) {
  exec::prof::Scope prof_scope(exec::prof::Cls::elementwise);
  for (long i = 0; i < n; ++i) {
    const T xi = x[i];
    const T u = kGeluS<T> * (xi + kGeluA<T> * xi * xi * xi);
    y[i] = T(0.5) * xi * (T(1) + gelu_tanh(u));
  }
}

// Tiles through a local buffer: exactly gelu_fwd, then pack_bf16 of y and of x.
template <class T>
void gelu_fwd16(uint16_t* y16, uint16_t* x16, const T* x, long n) {
  constexpr long kTile = 512;
  alignas(64) T y[kTile];
  for (long i0 = 0; i0 < n; i0 += kTile) {
    const long k = std::min(kTile, n - i0);
    gelu_fwd(y, x + i0, k);
    pack_bf16(y16 + i0, y, k);
    pack_bf16(x16 + i0, x + i0, k);
  }
}

// gelu'(x) = 0.5 (1 + tanh u) + 0.5 x (1 - tanh^2 u) sqrt(2/pi) (1 + 3 * 0.044715 x^2).
template <class T>
void gelu_bwd(T* dx, const T* x, const T* dy, long n) {
  exec::prof::Scope prof_scope(exec::prof::Cls::elementwise);
  for (long i = 0; i < n; ++i) {
    const T xi = x[i];
    const T u = kGeluS<T> * (xi + kGeluA<T> * xi * xi * xi);
    const T th = gelu_tanh(u);
    const T du = kGeluS<T> * (T(1) + T(3) * kGeluA<T> * xi * xi);
    dx[i] += (T(0.5) * (T(1) + th) + T(0.5) * xi * (T(1) - th * th) * du) * dy[i];
  }
}

// In tiles through a local buffer: the loop that computes has no store that may alias its inputs, so it
// vectorises without runtime alias checks (which would fall back to scalar code when dx is x or dy).
template <class T>
void gelu_bwd_set(T* dx, const T* x, const T* dy, long n) {
  exec::prof::Scope prof_scope(exec::prof::Cls::elementwise);
  constexpr long kTile = 512;
  alignas(64) T tile[kTile];
  for (long i0 = 0; i0 < n; i0 += kTile) {
    const long k = std::min(kTile, n - i0);
    const T* xs = x + i0;
    const T* dys = dy + i0;
    for (long i = 0; i < k; ++i) {
      const T xi = xs[i];
      const T u = kGeluS<T> * (xi + kGeluA<T> * xi * xi * xi);
      const T th = gelu_tanh(u);
      const T du = kGeluS<T> * (T(1) + T(3) * kGeluA<T> * xi * xi);
      tile[i] = (T(0.5) * (T(1) + th) + T(0.5) * xi * (T(1) - th * th) * du) * dys[i];
    }
    std::memcpy(dx + i0, tile, sizeof(T) * k);
  }
}
// Row tiles through local buffers: exactly gelu_bwd_set on x unpacked, pack_bf16, then bias_bwd (db's adds in row
// order).
template <class T>
void gelu_bwd_bias16(uint16_t* dx16, T* db, const uint16_t* x16, const T* dy, long N, long F) {
  constexpr long kTile = 512;
  alignas(64) T xs[kTile], dx[kTile];
  for (long n = 0; n < N; ++n)
    for (long c0 = 0; c0 < F; c0 += kTile) {
      const long k = std::min(kTile, F - c0), i0 = n * F + c0;
      unpack_bf16(xs, x16 + i0, k);
      gelu_bwd_set(dx, xs, dy + i0, k);
      pack_bf16(dx16 + i0, dx, k);
      if (db)
        for (long c = 0; c < k; ++c) db[c0 + c] += dx[c];
    }
}

// y[N, F] = silu(g) * u with g = gate_up[:, 0:F], u = gate_up[:, F:2F], silu(g) = g * sigmoid(g).
template <class T>
void swiglu_fwd(T* y, const T* gate_up, long N, long F) {
  exec::prof::Scope prof_scope(exec::prof::Cls::elementwise);
  for (long n = 0; n < N; ++n) {
    const T* g = gate_up + n * 2 * F;
    const T* u = g + F;
    T* yr = y + n * F;
    for (long f = 0; f < F; ++f) {
      const T sig = T(1) / (T(1) + std::exp(-g[f]));
      yr[f] = g[f] * sig * u[f];
    }
  }
}

// dg (+)= dy * u * sigmoid(g) (1 + g (1 - sigmoid(g))),  du (+)= dy * silu(g): accumulated, or overwritten
// (kSet; dgate_up may then alias gate_up: each element is read before it is written).
template <class T, bool kSet>
void swiglu_bwd_impl(T* dgate_up, const T* gate_up, const T* dy, long N, long F) {
  exec::prof::Scope prof_scope(exec::prof::Cls::elementwise);
  for (long n = 0; n < N; ++n) {
    const T* g = gate_up + n * 2 * F;
    const T* u = g + F;
    T* dg = dgate_up + n * 2 * F;
    T* du = dg + F;
    const T* dyr = dy + n * F;
    for (long f = 0; f < F; ++f) {
      const T gf = g[f], uf = u[f];
      const T sig = T(1) / (T(1) + std::exp(-gf));
      const T a = dyr[f] * uf * sig * (T(1) + gf * (T(1) - sig)), b = dyr[f] * gf * sig;
      if constexpr (kSet) { dg[f] = a; du[f] = b; } else { dg[f] += a; du[f] += b; }
    }
  }
}
template <class T>
void swiglu_bwd(T* dgate_up, const T* gate_up, const T* dy, long N, long F) { swiglu_bwd_impl<T, false>(dgate_up, gate_up, dy, N, F); }
template <class T>
void swiglu_bwd_set(T* dgate_up, const T* gate_up, const T* dy, long N, long F) { swiglu_bwd_impl<T, true>(dgate_up, gate_up, dy, N, F); }

// probs[N, V] = softmax(logits) per row (max subtracted); returns sum over rows of
// -log p[target] = log(sum exp(l - max)) - (l[target] - max), summed in double. probs may be logits.
template <class T>
T cross_entropy_fwd(T* probs, const T* logits, const int32_t* targets, long N, long V) {
  exec::prof::Scope prof_scope(exec::prof::Cls::elementwise);
  double loss = 0;
  for (long n = 0; n < N; ++n) {
    const T* lr = logits + n * V;
    T* pr = probs + n * V;
    T mx = lr[0];
    for (long j = 1; j < V; ++j) mx = lr[j] > mx ? lr[j] : mx;
    const T target_logit = lr[targets[n]];  // read before pr (which may be lr) is written
    T sum = 0;
    for (long j = 0; j < V; ++j) {
      pr[j] = std::exp(lr[j] - mx);
      sum += pr[j];
    }
    const T inv = T(1) / sum;
    for (long j = 0; j < V; ++j) pr[j] *= inv;
    loss += double(std::log(sum)) - double(target_logit - mx);
  }
  return T(loss);
}

template <class T>
void cross_entropy_fwd_to(T* probs, double* loss, const T* logits, const int32_t* targets, long N, long V) {
  loss[0] = double(cross_entropy_fwd(probs, logits, targets, N, V));
}

// dlogits[N, V] += scale * (probs - onehot(target)).
template <class T>
void cross_entropy_bwd(T* dlogits, const T* probs, const int32_t* targets, long N, long V, T scale) {
  exec::prof::Scope prof_scope(exec::prof::Cls::elementwise);
  for (long n = 0; n < N; ++n) {
    const T* pr = probs + n * V;
    T* dr = dlogits + n * V;
    for (long j = 0; j < V; ++j) dr[j] += scale * pr[j];
    dr[targets[n]] -= scale;
  }
}

// out[B, T, C] = wte[tokens[b, t], :] (+ wpe[t, :]).
template <class T>
void embedding_fwd(T* out, const int32_t* tokens, const T* wte, const T* wpe, long B, long Tn, long C) {
  exec::prof::Scope prof_scope(exec::prof::Cls::elementwise);
  for (long b = 0; b < B; ++b) {
    for (long t = 0; t < Tn; ++t) {
      T* o = out + (b * Tn + t) * C;
      const T* e = wte + long(tokens[b * Tn + t]) * C;
      if (wpe) {
        const T* p = wpe + t * C;
        for (long c = 0; c < C; ++c) o[c] = e[c] + p[c];
      } else {
        for (long c = 0; c < C; ++c) o[c] = e[c];
      }
    }
  }
}

// dwte[tokens[b, t], :] += dout[b, t, :] (repeated tokens add up); dwpe[t, :] += dout[b, t, :].
template <class T>
void embedding_bwd(T* dwte, T* dwpe, const T* dout, const int32_t* tokens, long B, long Tn, long C) {
  exec::prof::Scope prof_scope(exec::prof::Cls::elementwise);
  for (long b = 0; b < B; ++b) {
    for (long t = 0; t < Tn; ++t) {
      const T* d = dout + (b * Tn + t) * C;
      if (dwte) {
        T* e = dwte + long(tokens[b * Tn + t]) * C;
        for (long c = 0; c < C; ++c) e[c] += d[c];
      }
      if (dwpe) {
        T* p = dwpe + t * C;
        for (long c = 0; c < C; ++c) p[c] += d[c];
      }
    }
  }
}

// AdamW step t >= 1 on g' = gscale g (ops::scale's product): m = b1 m + (1-b1) g'; v = b2 v + (1-b2) g'^2;
// p -= lr (m / (1 - b1^t) / (sqrt(v / (1 - b2^t)) + eps) + wd p).
template <class T>
void adamw(T* p, const T* g, T* m, T* v, long n, T lr, T b1, T b2, T eps, T wd, long t, T gscale) {
  exec::prof::Scope prof_scope(exec::prof::Cls::optimizer);
  const T c1 = T(1.0 / (1.0 - std::pow(double(b1), double(t))));
  const T c2 = T(1.0 / (1.0 - std::pow(double(b2), double(t))));
  for (long i = 0; i < n; ++i) {
    const T gi = gscale * g[i];
    const T mi = b1 * m[i] + (T(1) - b1) * gi;
    const T vi = b2 * v[i] + (T(1) - b2) * gi * gi;
    m[i] = mi;
    v[i] = vi;
    p[i] -= lr * ((mi * c1) / (std::sqrt(vi * c2) + eps) + wd * p[i]);
  }
}

template <class T>
double sum_squares(const T* x, long n) {
  exec::prof::Scope prof_scope(exec::prof::Cls::optimizer);
  double s = 0;
  for (long i = 0; i < n; ++i) s += double(x[i]) * double(x[i]);
  return s;
}

// The multi-tensor forms: segment by segment, each exactly the single-segment op (the norm's sum in segment order).
template <class T>
void adamw_multi(T* const* p, const T* const* g, T* const* m, T* const* v, const long* n, const T* wd, long count, T lr,
                 T b1, T b2, T eps, long t, T gscale) {
  for (long s = 0; s < count; ++s)
    if (n[s] > 0) adamw(p[s], g[s], m[s], v[s], n[s], lr, b1, b2, eps, wd[s], t, gscale);
}
template <class T>
double sum_squares_multi(const T* const* x, const long* n, long count) {
  double s = 0;
  for (long k = 0; k < count; ++k)
    if (n[k] > 0) s += sum_squares(x[k], n[k]);
  return s;
}

// The kernels' rounding rule (exec/kernels/k_fp8.hpp), computed in T as the kernels compute in acc_t<T>.
template <class T>
void fp8_quantize(T* y, const T* x, long n, const T* scale_p, int format, T* amax) {
  exec::prof::Scope prof_scope(exec::prof::Cls::elementwise);
  const T scale = *scale_p;
  double m = 0;
  for (long i = 0; i < n; ++i) {
    const T v = x[i];
    m = std::max(m, std::abs(double(v)));  // (a NaN leaves m: std::max keeps its first argument)
    y[i] = kernels::fp8_round<T>(v * scale, format) / scale;
  }
  if (amax && m > double(*amax)) *amax = T(m);  // (m is a value of T)
}

#define TP_OPS_CPU_INSTANTIATE(T)                                                                           \
  template void add_bias<T>(T*, const T*, const T*, long, long, const T*);                                   \
  template void bias_bwd<T>(T*, const T*, long, long, uint16_t*);                                                  \
  template void add<T>(T*, const T*, const T*, long);                                                       \
  template void accumulate<T>(T*, const T*, long);                                                          \
  template void scale<T>(T*, const T*, T, long);                                                            \
  template void layernorm_fwd<T>(T*, T*, T*, const T*, const T*, const T*, long, long, T);                  \
  template void layernorm_fwd16<T>(uint16_t*, T*, T*, const T*, const T*, const T*, long, long, T);         \
  template void layernorm_bwd<T>(T*, T*, T*, const T*, const T*, const T*, const T*, const T*, long, long); \
  template void layernorm_bwd16<T>(T*, T*, T*, const T*, const uint16_t*, const T*, const T*, const T*, long, long); \
  template void gelu_fwd<T>(T*, const T*, long);                                                            \
  template void gelu_fwd16<T>(uint16_t*, uint16_t*, const T*, long);                                        \
  template void gelu_bwd<T>(T*, const T*, const T*, long);                                                  \
  template void swiglu_fwd<T>(T*, const T*, long, long);                                                    \
  template void swiglu_bwd<T>(T*, const T*, const T*, long, long);                                          \
  template void gelu_bwd_set<T>(T*, const T*, const T*, long);                                              \
  template void gelu_bwd_bias16<T>(uint16_t*, T*, const uint16_t*, const T*, long, long);                          \
  template void swiglu_bwd_set<T>(T*, const T*, const T*, long, long);                                      \
  template T cross_entropy_fwd<T>(T*, const T*, const int32_t*, long, long);                                \
  template void cross_entropy_fwd_to<T>(T*, double*, const T*, const int32_t*, long, long);                \
  template void cross_entropy_bwd<T>(T*, const T*, const int32_t*, long, long, T);                          \
  template void embedding_fwd<T>(T*, const int32_t*, const T*, const T*, long, long, long);                 \
  template void embedding_bwd<T>(T*, T*, const T*, const int32_t*, long, long, long);                       \
  template void adamw<T>(T*, const T*, T*, T*, long, T, T, T, T, T, long, T);                                  \
  template double sum_squares<T>(const T*, long);                                                           \
  template void adamw_multi<T>(T* const*, const T* const*, T* const*, T* const*, const long*, const T*, long, T, T, T, \
                               T, long, T);                                                                 \
  template double sum_squares_multi<T>(const T* const*, const long*, long);                                \
  template void fp8_quantize<T>(T*, const T*, long, const T*, int, T*);
TP_OPS_CPU_INSTANTIATE(float)
TP_OPS_CPU_INSTANTIATE(double)
#undef TP_OPS_CPU_INSTANTIATE

}  // namespace tp::ops::cpu
