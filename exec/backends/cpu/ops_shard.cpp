// ops_shard: the CPU backend's data-movement and sharded-statistics ops — fill, copy, strided row copy, bf16 pack,
// vocabulary-parallel embedding and positions, the steps of the vocabulary-parallel cross-entropy, and the
// column-split LayerNorm of 2D tensor parallelism (exec/backends/ops.hpp has the contracts).
// Invariants: these loops were the model's and runtime's own host loops before the backend existed; they keep
// the exact arithmetic (same expressions, same order, and this file is compiled with -ffp-contract=off, see
// exec/CMakeLists.txt), so a run on the CPU backend is bit-identical to the executor before the split.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "exec/backends/cpu/ops_cpu.hpp"
#include "exec/kernels/k_fp8.hpp"
#include "exec/prof/prof.hpp"

namespace tp::ops::cpu {

using exec::prof::Cls;
using exec::prof::Scope;

template <class T>
void fill(T* y, T value, long n) {
  Scope prof_scope(Cls::elementwise);
  for (long i = 0; i < n; ++i) y[i] = value;
}

template <class T>
void copy(T* dst, const T* src, long n) {
  Scope prof_scope(Cls::elementwise);
  if (n > 0) std::memcpy(dst, src, sizeof(T) * (size_t)n);
}

template <class T>
void copy_rows(T* dst, long dst_stride, const T* src, long src_stride, long rows, long cols) {
  Scope prof_scope(Cls::elementwise);
  for (long r = 0; r < rows; ++r) std::memcpy(dst + r * dst_stride, src + r * src_stride, sizeof(T) * (size_t)cols);
}

template <class T>
void pack_bf16(uint16_t* y, const T* x, long n) {
  Scope prof_scope(Cls::elementwise);
  for (long i = 0; i < n; ++i) {
    const float r = (float)kernels::bf16_round(x[i]);  // a bf16 value: exact in float
    uint32_t u;
    std::memcpy(&u, &r, 4);
    y[i] = uint16_t(u >> 16);
  }
}

template <class T>
void unpack_bf16(T* y, const uint16_t* x, long n) {
  Scope prof_scope(Cls::elementwise);
  for (long i = 0; i < n; ++i) {
    const uint32_t u = uint32_t(x[i]) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    y[i] = T(f);
  }
}

template <class T>
void ln_shard_sum(T* sum, const T* x, long N, long Cl) {
  Scope prof_scope(Cls::elementwise);
  for (long n = 0; n < N; ++n) {
    T m = 0;
    for (long j = 0; j < Cl; ++j) m += x[n * Cl + j];
    sum[n] = m;
  }
}

template <class T>
void ln_shard_sqdev(T* sqdev, T* mean, const T* sum, const T* x, long N, long Cl, long C) {
  Scope prof_scope(Cls::elementwise);
  for (long n = 0; n < N; ++n) {
    const T m = sum[n] / T(C);
    mean[n] = m;
    T v = 0;
    for (long j = 0; j < Cl; ++j) {
      const T d = x[n * Cl + j] - m;
      v += d * d;
    }
    sqdev[n] = v;
  }
}

template <class T>
void ln_shard_apply(T* y, T* rstd, const T* x, const T* mean, const T* sqdev, const T* w, const T* b, long N,
                    long Cl, long C, T eps) {
  Scope prof_scope(Cls::elementwise);
  for (long n = 0; n < N; ++n) {
    const T m = mean[n], r = T(1) / std::sqrt(sqdev[n] / T(C) + eps);
    rstd[n] = r;
    for (long j = 0; j < Cl; ++j) y[n * Cl + j] = (x[n * Cl + j] - m) * r * w[j] + (b ? b[j] : T(0));
  }
}

template <class T>
void ln_shard_bwd_sums(T* sums, const T* dy, const T* x, const T* w, const T* mean, const T* rstd, long N, long Cl) {
  Scope prof_scope(Cls::elementwise);
  for (long n = 0; n < N; ++n) {
    T a = 0, b2 = 0;
    for (long j = 0; j < Cl; ++j) {
      const T xh = (x[n * Cl + j] - mean[n]) * rstd[n], gj = w[j] * dy[n * Cl + j];
      a += gj;
      b2 += gj * xh;
    }
    sums[n] = a;
    sums[N + n] = b2;
  }
}

template <class T>
void ln_shard_bwd_apply(T* dx, T* dw, T* db, const T* dy, const T* x, const T* w, const T* mean, const T* rstd,
                        const T* sums, long N, long Cl, long C) {
  Scope prof_scope(Cls::elementwise);
  for (long n = 0; n < N; ++n) {
    const T gm = sums[n] / T(C), gxm = sums[N + n] / T(C), r = rstd[n];
    for (long j = 0; j < Cl; ++j) {
      const T xh = (x[n * Cl + j] - mean[n]) * r, dyj = dy[n * Cl + j];
      dx[n * Cl + j] += r * (w[j] * dyj - gm - xh * gxm);
      dw[j] += xh * dyj;
      if (db) db[j] += dyj;
    }
  }
}

template <class T>
void row_max(T* mx, const T* x, long N, long V) {
  Scope prof_scope(Cls::elementwise);
  for (long n = 0; n < N; ++n) {
    const T* r = x + n * V;
    T m = r[0];
    for (long j = 1; j < V; ++j) m = r[j] > m ? r[j] : m;
    mx[n] = m;
  }
}

template <class T>
void max_combine(T* mx, const T* parts, long N, long P) {
  Scope prof_scope(Cls::elementwise);
  for (long n = 0; n < N; ++n)
    for (long p = 0; p < P; ++p) mx[n] = parts[p * N + n] > mx[n] ? parts[p * N + n] : mx[n];
}

template <class T>
void ce_shard_exp(T* probs, T* sum_exp, T* target, const T* logits, const T* mx, const int32_t* targets, long N,
                  long V, long v0, CeForm form) {
  Scope prof_scope(Cls::elementwise);
  for (long n = 0; n < N; ++n) {
    const T* lr = logits + n * V;
    T* pr = probs + n * V;
    const long t = (long)targets[n] - v0;
    T tv = 0;  // read before pr (which may be lr) is written
    if (t >= 0 && t < V) tv = form == CeForm::raw_target_divide ? lr[t] : lr[t] - mx[n];
    T acc = 0;
    for (long j = 0; j < V; ++j) {
      pr[j] = std::exp(lr[j] - mx[n]);
      acc += pr[j];
    }
    sum_exp[n] = acc;
    target[n] = tv;
  }
}

template <class T>
double ce_shard_finish(T* probs, const T* sum_exp, const T* target, const T* mx, long N, long V, CeForm form) {
  Scope prof_scope(Cls::elementwise);
  double loss = 0;
  for (long n = 0; n < N; ++n) {
    T* pr = probs + n * V;
    if (form == CeForm::raw_target_divide) {
      for (long j = 0; j < V; ++j) pr[j] /= sum_exp[n];
      loss += (double)std::log(sum_exp[n]) + (double)mx[n] - (double)target[n];
    } else {
      const T inv = T(1) / sum_exp[n];
      for (long j = 0; j < V; ++j) pr[j] *= inv;
      loss += double(std::log(sum_exp[n])) - double(target[n]);
    }
  }
  return loss;
}

template <class T>
void ce_shard_target_grad(T* dlogits, const int32_t* targets, long N, long V, long v0, T scale) {
  Scope prof_scope(Cls::elementwise);
  for (long n = 0; n < N; ++n) {
    const long t = (long)targets[n] - v0;
    if (t >= 0 && t < V) dlogits[n * V + t] -= scale;
  }
}

// Row by row through a local buffer: exactly scale, ce_shard_target_grad, then pack_bf16.
template <class T>
void ce_grad16(uint16_t* dl16, const T* probs, const int32_t* targets, long N, long V, long v0, T scale) {
  Scope prof_scope(Cls::elementwise);
  std::vector<T> row((size_t)std::max(0L, V));
  for (long n = 0; n < N; ++n) {
    cpu::scale(row.data(), probs + n * V, scale, V);
    ce_shard_target_grad(row.data(), targets + n, 1, V, v0, scale);
    pack_bf16(dl16 + n * V, row.data(), V);
  }
}

template <class T>
void embedding_shard_fwd(T* out, const int32_t* tokens, const T* wte_shard, long N, long C, long v0, long Vl) {
  Scope prof_scope(Cls::elementwise);
  for (long n = 0; n < N; ++n) {
    const long t = (long)tokens[n] - v0;
    if (t >= 0 && t < Vl) std::memcpy(out + n * C, wte_shard + t * C, sizeof(T) * (size_t)C);
  }
}

template <class T>
void embedding_shard_fwd16(T* out, const int32_t* tokens, const uint16_t* wte16_shard, long N, long C, long v0, long Vl) {
  Scope prof_scope(Cls::elementwise);
  for (long n = 0; n < N; ++n) {
    const long t = (long)tokens[n] - v0;
    if (t >= 0 && t < Vl) unpack_bf16(out + n * C, wte16_shard + t * C, C);
  }
}

template <class T>
void embedding_shard_bwd(T* dwte_shard, const T* dout, const int32_t* tokens, long N, long C, long v0, long Vl) {
  Scope prof_scope(Cls::elementwise);
  for (long n = 0; n < N; ++n) {
    const long t = (long)tokens[n] - v0;
    if (t < 0 || t >= Vl) continue;
    T* e = dwte_shard + t * C;
    const T* d = dout + n * C;
    for (long c = 0; c < C; ++c) e[c] += d[c];
  }
}

template <class T>
void add_positions(T* x, const T* wpe, long rows, long C, long Tn, long row0) {
  Scope prof_scope(Cls::elementwise);
  for (long i = 0; i < rows; ++i) {
    T* xr = x + i * C;
    const T* pr = wpe + ((row0 + i) % Tn) * C;
    for (long c = 0; c < C; ++c) xr[c] = xr[c] + pr[c];
  }
}

template <class T>
void positions_bwd(T* dwpe, const T* dx, long rows, long C, long Tn, long row0) {
  Scope prof_scope(Cls::elementwise);
  for (long i = 0; i < rows; ++i) {
    T* pr = dwpe + ((row0 + i) % Tn) * C;
    const T* d = dx + i * C;
    for (long c = 0; c < C; ++c) pr[c] += d[c];
  }
}

#define TP_OPS_SHARD_INSTANTIATE(T)                                                                          \
  template void fill<T>(T*, T, long);                                                                        \
  template void copy<T>(T*, const T*, long);                                                                 \
  template void copy_rows<T>(T*, long, const T*, long, long, long);                                          \
  template void pack_bf16<T>(uint16_t*, const T*, long);                                                     \
  template void unpack_bf16<T>(T*, const uint16_t*, long);                                                   \
  template void ln_shard_sum<T>(T*, const T*, long, long);                                                   \
  template void ln_shard_sqdev<T>(T*, T*, const T*, const T*, long, long, long);                             \
  template void ln_shard_apply<T>(T*, T*, const T*, const T*, const T*, const T*, const T*, long, long, long, T); \
  template void ln_shard_bwd_sums<T>(T*, const T*, const T*, const T*, const T*, const T*, long, long);      \
  template void ln_shard_bwd_apply<T>(T*, T*, T*, const T*, const T*, const T*, const T*, const T*, const T*, \
                                      long, long, long);                                                     \
  template void row_max<T>(T*, const T*, long, long);                                                        \
  template void max_combine<T>(T*, const T*, long, long);                                                    \
  template void ce_shard_exp<T>(T*, T*, T*, const T*, const T*, const int32_t*, long, long, long, CeForm);   \
  template double ce_shard_finish<T>(T*, const T*, const T*, const T*, long, long, CeForm);                  \
  template void ce_shard_target_grad<T>(T*, const int32_t*, long, long, long, T);                            \
  template void ce_grad16<T>(uint16_t*, const T*, const int32_t*, long, long, long, T);                      \
  template void embedding_shard_fwd<T>(T*, const int32_t*, const T*, long, long, long, long);                \
  template void embedding_shard_fwd16<T>(T*, const int32_t*, const uint16_t*, long, long, long, long);       \
  template void embedding_shard_bwd<T>(T*, const T*, const int32_t*, long, long, long, long);                \
  template void add_positions<T>(T*, const T*, long, long, long, long);                                      \
  template void positions_bwd<T>(T*, const T*, long, long, long, long);
TP_OPS_SHARD_INSTANTIATE(float)
TP_OPS_SHARD_INSTANTIATE(double)
#undef TP_OPS_SHARD_INSTANTIATE

}  // namespace tp::ops::cpu
