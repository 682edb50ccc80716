// ops_moe: the CPU backend's mixture-of-experts ops (router, dispatch, combine; contracts in exec/backends/ops.hpp).
// Plain loops in a fixed order (token, then choice), so results are bit-reproducible and identical on every
// rank that routes the same tokens. The router's capacity rule and the load-balancing loss are documented
// once, at ops::moe_route.
#include <cmath>
#include <cstdint>
#include <vector>

#include "exec/backends/cpu/ops_cpu.hpp"

namespace tp::ops::cpu {

namespace {
long expert_of(int32_t slot, long cap) { return slot >= 0 ? slot / cap : -(long)slot - 1; }
}  // namespace

template <class T>
double moe_route(T* probs, int32_t* slot, T* gate, const T* logits, long N, long E, long k, long cap, int renorm) {
  std::vector<long> choice((size_t)(N * k));
  std::vector<double> mean_p((size_t)E, 0.0), count((size_t)E, 0.0);
  for (long i = 0; i < N; ++i) {
    const T* z = logits + i * E;
    T* p = probs + i * E;
    T mx = z[0];
    for (long e = 1; e < E; ++e) mx = z[e] > mx ? z[e] : mx;
    T sum = 0;
    for (long e = 0; e < E; ++e) { p[e] = std::exp(z[e] - mx); sum += p[e]; }
    for (long e = 0; e < E; ++e) { p[e] /= sum; mean_p[e] += (double)p[e]; }
    T chosen = 0;
    for (long j = 0; j < k; ++j) {  // j-th largest probability; ties go to the lower expert index
      long best = -1;
      for (long e = 0; e < E; ++e) {
        bool taken = false;
        for (long l = 0; l < j; ++l) taken = taken || choice[i * k + l] == e;
        if (!taken && (best < 0 || p[e] > p[best])) best = e;
      }
      choice[i * k + j] = best;
      gate[i * k + j] = p[best];
      chosen += p[best];
      count[best] += 1;
    }
    if (renorm)
      for (long j = 0; j < k; ++j) gate[i * k + j] /= chosen;
  }
  // Capacity: first choices of every token (in token order) before any second choice (GShard's priority).
  std::vector<long> fill((size_t)E, 0);
  for (long j = 0; j < k; ++j)
    for (long i = 0; i < N; ++i) {
      long e = choice[i * k + j];
      slot[i * k + j] = fill[e] < cap ? (int32_t)(e * cap + fill[e]++) : (int32_t)(-e - 1);
    }
  double aux = 0;
  for (long e = 0; e < E; ++e) aux += (count[e] / (double)(N * k)) * (mean_p[e] / (double)N);
  return aux * (double)E;
}

template <class T>
void moe_route_bwd(T* dlogits, const T* probs, const int32_t* slot, const T* dgate, long N, long E, long k, long cap,
                   int renorm, T aux_weight) {
  std::vector<double> count((size_t)E, 0.0);
  for (long i = 0; i < N * k; ++i) count[expert_of(slot[i], cap)] += 1;
  std::vector<T> dp((size_t)E);
  for (long i = 0; i < N; ++i) {
    const T* p = probs + i * E;
    // d aux / d p[i, e] = weight * E * f_e / N, f_e = count_e / (N k).
    for (long e = 0; e < E; ++e) dp[e] = aux_weight * T((double)E * count[e] / ((double)(N * k) * (double)N));
    if (renorm) {
      T s = 0, dot = 0;
      for (long j = 0; j < k; ++j) s += p[expert_of(slot[i * k + j], cap)];
      for (long j = 0; j < k; ++j) dot += dgate[i * k + j] * p[expert_of(slot[i * k + j], cap)] / s;
      for (long j = 0; j < k; ++j) dp[expert_of(slot[i * k + j], cap)] += (dgate[i * k + j] - dot) / s;
    } else {
      for (long j = 0; j < k; ++j) dp[expert_of(slot[i * k + j], cap)] += dgate[i * k + j];
    }
    T dot = 0;
    for (long e = 0; e < E; ++e) dot += dp[e] * p[e];
    for (long e = 0; e < E; ++e) dlogits[i * E + e] += p[e] * (dp[e] - dot);
  }
}

template <class T>
void moe_dispatch(T* out, const T* x, const int32_t* slot, long N, long k, long C, long rows) {
  for (long r = 0; r < rows * C; ++r) out[r] = T(0);
  for (long i = 0; i < N; ++i)
    for (long j = 0; j < k; ++j) {
      int32_t s = slot[i * k + j];
      if (s < 0) continue;
      for (long c = 0; c < C; ++c) out[(long)s * C + c] = x[i * C + c];
    }
}

template <class T>
void moe_dispatch_bwd(T* dx, const T* dout, const int32_t* slot, long N, long k, long C) {
  for (long i = 0; i < N; ++i)
    for (long j = 0; j < k; ++j) {
      int32_t s = slot[i * k + j];
      if (s < 0) continue;
      for (long c = 0; c < C; ++c) dx[i * C + c] += dout[(long)s * C + c];
    }
}

template <class T>
void moe_combine(T* y, const T* ein, const int32_t* slot, const T* gate, long N, long k, long C) {
  for (long i = 0; i < N; ++i) {
    T* yi = y + i * C;
    for (long c = 0; c < C; ++c) yi[c] = T(0);
    for (long j = 0; j < k; ++j) {
      int32_t s = slot[i * k + j];
      if (s < 0) continue;  // dropped: the token's residual stream carries it
      for (long c = 0; c < C; ++c) yi[c] += gate[i * k + j] * ein[(long)s * C + c];
    }
  }
}

template <class T>
void moe_combine_bwd(T* dein, T* dgate, const T* dy, const T* ein, const int32_t* slot, const T* gate, long N, long k,
                     long C) {
  for (long i = 0; i < N; ++i)
    for (long j = 0; j < k; ++j) {
      int32_t s = slot[i * k + j];
      if (s < 0) continue;
      T dot = 0;
      for (long c = 0; c < C; ++c) {
        dot += dy[i * C + c] * ein[(long)s * C + c];
        dein[(long)s * C + c] += gate[i * k + j] * dy[i * C + c];
      }
      dgate[i * k + j] += dot;
    }
}

#define TP_MOE_INSTANTIATE(T)                                                                                   \
  template double moe_route<T>(T*, int32_t*, T*, const T*, long, long, long, long, int);                       \
  template void moe_route_bwd<T>(T*, const T*, const int32_t*, const T*, long, long, long, long, int, T);        \
  template void moe_dispatch<T>(T*, const T*, const int32_t*, long, long, long, long);                           \
  template void moe_dispatch_bwd<T>(T*, const T*, const int32_t*, long, long, long);                             \
  template void moe_combine<T>(T*, const T*, const int32_t*, const T*, long, long, long);                        \
  template void moe_combine_bwd<T>(T*, T*, const T*, const T*, const int32_t*, const T*, long, long, long);
TP_MOE_INSTANTIATE(float)
TP_MOE_INSTANTIATE(double)
#undef TP_MOE_INSTANTIATE

}  // namespace tp::ops::cpu
