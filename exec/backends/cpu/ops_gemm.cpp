// ops_gemm: the CPU backend's GEMM-shaped ops on Eigen — matmul and causal grouped-query attention (forward
// and backward; saving the probabilities, or flash: head by head, recomputed in the backward). Every product
// goes through Eigen's blocked GEMM (Map + noalias), never a naive loop.
// Invariants: buffers are row-major and contiguous as exec/backends/ops.hpp says; outputs do not alias inputs;
// forwards overwrite, backwards accumulate (+=); with beta == 0 matmul never reads C (it may hold NaN).
// Eigen types stay inside this file. With bf16 GEMM operands on (set_bf16_gemm), each product's two operands
// are rounded copies (kernels::bf16_round), attention's P included, exactly as the CUDA backend casts each
// cuBLASLt operand; off, the code path and its results are the fp32 / fp64 ones, unchanged.
#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "exec/backends/cpu/flash16.hpp"
#include "exec/backends/cpu/ops_cpu.hpp"
#include "exec/kernels/k_fp8.hpp"
#include "exec/prof/prof.hpp"

namespace tp::ops::cpu {
namespace {

template <class T>
using RowMat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <class T>
using Mat = Eigen::Map<RowMat<T>>;  // contiguous [rows, cols]
template <class T>
using CMat = Eigen::Map<const RowMat<T>>;
template <class T>
using SMat = Eigen::Map<RowMat<T>, 0, Eigen::OuterStride<>>;  // [rows, cols] with a row stride
template <class T>
using CSMat = Eigen::Map<const RowMat<T>, 0, Eigen::OuterStride<>>;

thread_local bool t_bf16 = false;

// buf = m with every element rounded to bf16; returns buf (a dense copy of a map, a transpose or a block).
template <class T, class M>
const RowMat<T>& rounded(RowMat<T>& buf, const M& m) {
  buf = m;
  T* p = buf.data();
  for (long i = 0, n = (long)buf.size(); i < n; ++i) p[i] = kernels::bf16_round(p[i]);
  return buf;
}

// buf = op(X) from X's bf16 copy x16 (X stored [rows, cols]; op(X) = Xᵀ when trans), in one pass: the values are
// bf16 already, so they need no rounding; the same matrix as rounded() makes from X's T values.
template <class T>
const RowMat<T>& unpacked(RowMat<T>& buf, const uint16_t* x16, long rows, long cols, bool trans) {
  auto val = [x16](long i) {
    const uint32_t u = uint32_t(x16[i]) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return T(f);
  };
  buf.resize(trans ? cols : rows, trans ? rows : cols);
  T* p = buf.data();
  if (!trans) {
    for (long i = 0; i < rows * cols; ++i) p[i] = val(i);
  } else {
    for (long i = 0; i < rows; ++i)
      for (long j = 0; j < cols; ++j) p[j * rows + i] = val(i * cols + j);
  }
  return buf;
}

// op(X) as a dense operand of bf16 values: X's T values rounded, or (X16 given) X's bf16 copy unpacked; X is stored
// [rows, cols], op(X) = Xᵀ when trans.
template <class T>
const RowMat<T>& bf16_operand(RowMat<T>& buf, const T* X, const uint16_t* X16, long rows, long cols, bool trans) {
  if (X16) return unpacked(buf, X16, rows, cols, trans);
  return trans ? rounded(buf, CMat<T>(X, rows, cols).transpose()) : rounded(buf, CMat<T>(X, rows, cols));
}

// C = alpha * a · b + beta * C, with a and b already op()-ed Eigen expressions (maps or their transposes).
template <class T, class CM, class LA, class LB>
void gemm_into(CM&& C, const LA& a, const LB& b, T alpha, T beta) {
  if (beta == T(0)) {
    C.noalias() = alpha * a * b;  // overwrites: C is never read (GEMM path zeroes first, lazy path assigns)
  } else {
    if (beta != T(1)) C *= beta;
    C.noalias() += alpha * a * b;
  }
}

// Row reductions of the attention softmax and its backward. Float: 16 interleaved partial results, combined
// pairwise, so the loops vectorise and the order of the additions depends on n only (never on the row's
// address): reruns stay bit-identical. Double (the oracle path): plain sequential loops.
inline float row_max(const float* x, long n) {  // n >= 1; max is exact in any order
  float acc[16];
  for (int l = 0; l < 16; ++l) acc[l] = x[0];
  long j = 0;
  for (; j + 16 <= n; j += 16)
    for (int l = 0; l < 16; ++l) acc[l] = x[j + l] > acc[l] ? x[j + l] : acc[l];
  for (; j < n; ++j) acc[0] = x[j] > acc[0] ? x[j] : acc[0];
  for (int w = 8; w >= 1; w /= 2)
    for (int l = 0; l < w; ++l) acc[l] = acc[l + w] > acc[l] ? acc[l + w] : acc[l];
  return acc[0];
}
inline double row_max(const double* x, long n) {
  double mx = x[0];
  for (long j = 1; j < n; ++j) mx = x[j] > mx ? x[j] : mx;
  return mx;
}
inline float lane_combine(float* acc) {
  for (int w = 8; w >= 1; w /= 2)
    for (int l = 0; l < w; ++l) acc[l] += acc[l + w];
  return acc[0];
}
// sum_j a[j] * b[j]
inline float row_dot(const float* a, const float* b, long n) {
  float acc[16] = {};
  long j = 0;
  for (; j + 16 <= n; j += 16)
    for (int l = 0; l < 16; ++l) acc[l] += a[j + l] * b[j + l];
  for (; j < n; ++j) acc[j & 15] += a[j] * b[j];
  return lane_combine(acc);
}
inline double row_dot(const double* a, const double* b, long n) {
  double dot = 0;
  for (long j = 0; j < n; ++j) dot += a[j] * b[j];
  return dot;
}

// Softmax of row[0..n) in place: row[j] = exp(row[j] - max) / sum. Float: Eigen's vectorised exp (a few ulp
// from std::exp), computed in an aligned scratch so that the split between vector and scalar code (and so the
// result) does not depend on the row's address; the sum as row_dot's lanes. Double: std::exp, sequential sum.
// st (may be null) receives the row's statistics: st[0] = max, st[1] = 1 / sum.
inline void softmax_row(float* row, long n, float* st = nullptr) {
  const float mx = row_max(row, n);
  thread_local Eigen::ArrayXf buf;
  if (buf.size() < n) buf.resize(n);
  float* b = buf.data();
  Eigen::Map<Eigen::ArrayXf, Eigen::Aligned16>(b, n) = (Eigen::Map<const Eigen::ArrayXf>(row, n) - mx).exp();
  float acc[16] = {};
  long j = 0;
  for (; j + 16 <= n; j += 16)
    for (int l = 0; l < 16; ++l) acc[l] += b[j + l];
  for (; j < n; ++j) acc[j & 15] += b[j];
  const float inv = 1.f / lane_combine(acc);
  for (j = 0; j < n; ++j) row[j] = b[j] * inv;
  if (st) st[0] = mx, st[1] = inv;
}
inline void softmax_row(double* row, long n, double* st = nullptr) {
  const double mx = row_max(row, n);
  double sum = 0;
  for (long j = 0; j < n; ++j) {
    row[j] = std::exp(row[j] - mx);
    sum += row[j];
  }
  const double inv = 1.0 / sum;
  for (long j = 0; j < n; ++j) row[j] *= inv;
  if (st) st[0] = mx, st[1] = inv;
}

// C[M, N] = alpha op(A) op(B) + beta C on bf16 operands (bf16_operand: A16 / B16, when given, instead of A / B),
// the one product of matmul and matmul16 under bf16 GEMM operands. M, N, K > 0.
template <class T>
void bf16_product(T* C, const T* A, const uint16_t* A16, const T* B, const uint16_t* B16, long M, long N, long K,
                  bool trans_a, bool trans_b, T alpha, T beta) {
  thread_local RowMat<T> ra, rb;
  gemm_into(Mat<T>(C, M, N), bf16_operand(ra, A, A16, trans_a ? K : M, trans_a ? M : K, trans_a),
            bf16_operand(rb, B, B16, trans_b ? N : K, trans_b ? K : N, trans_b), alpha, beta);
}

}  // namespace

bool set_bf16_gemm(bool on) {
  const bool prev = t_bf16;
  t_bf16 = on;
  return prev;
}
bool bf16_gemm() { return t_bf16; }

// C[M, N] = alpha * op(A)[M, K] · op(B)[K, N] + beta * C.
template <class T>
void matmul(T* C, const T* A, const T* B, long M, long N, long K, bool trans_a, bool trans_b, T alpha, T beta) {
  exec::prof::Scope prof_scope(exec::prof::Cls::gemm);
  if (M <= 0 || N <= 0) return;
  Mat<T> c(C, M, N);
  if (K <= 0) {  // empty sum: C = beta * C (and never read C when beta == 0)
    if (beta == T(0)) c.setZero();
    else c *= beta;
    return;
  }
  if (t_bf16) {  // op(A) and op(B) as rounded dense copies, then the same product
    bf16_product(C, A, nullptr, B, nullptr, M, N, K, trans_a, trans_b, alpha, beta);
    return;
  }
  // A is stored [M, K] or, transposed, [K, M]; B is [K, N] or [N, K]. Eigen folds the transposes and alpha
  // into its GEMM kernel call (no temporaries).
  if (!trans_a && !trans_b) gemm_into(c, CMat<T>(A, M, K), CMat<T>(B, K, N), alpha, beta);
  else if (!trans_a && trans_b) gemm_into(c, CMat<T>(A, M, K), CMat<T>(B, N, K).transpose(), alpha, beta);
  else if (trans_a && !trans_b) gemm_into(c, CMat<T>(A, K, M).transpose(), CMat<T>(B, K, N), alpha, beta);
  else gemm_into(c, CMat<T>(A, K, M).transpose(), CMat<T>(B, N, K).transpose(), alpha, beta);
}

template <class T>
void matmul16(T* C, const T* A, const uint16_t* A16, const T* B, const uint16_t* B16, long M, long N, long K,
              bool trans_a, bool trans_b, T alpha, T beta) {
  if (t_bf16 && M > 0 && N > 0 && K > 0) {  // matmul's bf16 product, a packed operand unpacked in one pass
    exec::prof::Scope prof_scope(exec::prof::Cls::gemm);
    bf16_product(C, A, A16, B, B16, M, N, K, trans_a, trans_b, alpha, beta);
    return;
  }
  thread_local std::vector<T> a, b;  // the packed operands unpacked
  if (A16) {
    a.resize(size_t(std::max(0L, M * K)));
    unpack_bf16(a.data(), A16, M * K);
    A = a.data();
  }
  if (B16) {
    b.resize(size_t(std::max(0L, K * N)));
    unpack_bf16(b.data(), B16, K * N);
    B = b.data();
  }
  matmul(C, A, B, M, N, K, trans_a, trans_b, alpha, beta);
}

// The CPU has no fp8 GEMM: the casts' values through matmul (the op's contract).
template <class T>
void matmul_fp8(T* C, const T* A, const T*, int, const T* B, const T*, int, long M, long N, long K, bool trans_a,
                bool trans_b, T alpha, T beta) {
  matmul(C, A, B, M, N, K, trans_a, trans_b, alpha, beta);
}

// One head's probabilities and output: S = scale · Q Kᵀ written into P [Tq, Tk], the causal softmax row by row
// over keys 0..t + Tk - Tq (the mask aligned bottom-right; entries past it set to 0; st [Tq, 2] receives each
// row's max and 1 / sum when not null), then O = P V unless O is null. Q, O: [Tq, D] with row stride H*D; K, V:
// [Tk, D] with row stride Hkv*D. attention_fwd_kv and both flash ops compute P through this one function, so the
// flash backward's recomputed P is bit-identical to its forward's (same buffer) and attention_fwd_kv's equals it to
// rounding (Eigen's summation order may follow a buffer's alignment).
template <class T>
void head_attention(T* P, T* st, SMat<T>* O, const CSMat<T>& Q, const CSMat<T>& Kt, const CSMat<T>& V, long Tq,
                    long Tk, long D) {
  const long off = Tk - Tq;
  const T sc = T(1) / std::sqrt(T(D));
  Mat<T> Pm(P, Tq, Tk);
  thread_local RowMat<T> rq, rk, rv, rp;  // bf16 operands: rounded copies
  if (t_bf16) Pm.noalias() = sc * rounded(rq, Q) * rounded(rk, Kt).transpose();
  else Pm.noalias() = sc * Q * Kt.transpose();
  for (long t = 0; t < Tq; ++t) {
    T* row = P + t * Tk;
    softmax_row(row, t + off + 1, st ? st + 2 * t : nullptr);
    for (long j = t + off + 1; j < Tk; ++j) row[j] = T(0);
  }
  if (!O) return;
  // P is zero past the mask, so the full product is the causal one
  if (t_bf16) O->noalias() = rounded(rp, Pm) * rounded(rv, V);
  else O->noalias() = Pm * V;
}

// Attention forward, per (b, h): head_attention with P = att[b, h].
template <class T>
void attention_fwd_kv(T* out, T* att, const T* q, const T* k, const T* v, long B, long Tq, long Tk, long H, long Hkv,
                      long D) {
  exec::prof::Scope prof_scope(exec::prof::Cls::attention);
  const long group = H / Hkv;
  for (long b = 0; b < B; ++b) {
    for (long h = 0; h < H; ++h) {
      const long kh = h / group;
      CSMat<T> Q(q + (b * Tq * H + h) * D, Tq, D, Eigen::OuterStride<>(H * D));
      CSMat<T> Kt(k + (b * Tk * Hkv + kh) * D, Tk, D, Eigen::OuterStride<>(Hkv * D));
      CSMat<T> V(v + (b * Tk * Hkv + kh) * D, Tk, D, Eigen::OuterStride<>(Hkv * D));
      SMat<T> O(out + (b * Tq * H + h) * D, Tq, D, Eigen::OuterStride<>(H * D));
      head_attention(att + (b * H + h) * Tq * Tk, (T*)nullptr, &O, Q, Kt, V, Tq, Tk, D);
    }
  }
}
template <class T>
void attention_fwd(T* out, T* att, const T* q, const T* k, const T* v, long B, long Tn, long H, long Hkv, long D) {
  attention_fwd_kv(out, att, q, k, v, B, Tn, Tn, H, Hkv, D);
}

// One head's backward from its probabilities P [Tq, Tk] (shapes and strides as head_attention):
//   dV += Pᵀ dO;  dP = dO Vᵀ;  dS = P ⊙ (dP − r);  dQ += scale · dS K;  dK += scale · dSᵀ Q,
// r[t] = rowsum(dP ⊙ P) (delta null: attention_bwd_kv) or delta[t] (the flash backward's rowsum(dO ⊙ O)).
// dsbuf is the [Tq, Tk] scratch for dP, then dS in place.
template <class T>
void head_attention_bwd(SMat<T>& dQ, SMat<T>& dK, SMat<T>& dV, const T* P, const T* delta, T* dsbuf, const CSMat<T>& dO,
                        const CSMat<T>& Q, const CSMat<T>& Kt, const CSMat<T>& V, long Tq, long Tk, long D) {
  const long off = Tk - Tq;
  const T sc = T(1) / std::sqrt(T(D));
  Mat<T> dS(dsbuf, Tq, Tk);
  CMat<T> Pm(P, Tq, Tk);
  thread_local RowMat<T> rp, ro, rv, rs, rk, rq;  // bf16 operands: rounded copies
  if (t_bf16) {
    dV.noalias() += rounded(rp, Pm.transpose()) * rounded(ro, dO);
    dS.noalias() = ro * rounded(rv, V).transpose();
  } else {
    dV.noalias() += Pm.transpose() * dO;
    dS.noalias() = dO * V.transpose();
  }
  for (long t = 0; t < Tq; ++t) {
    const T* pr = P + t * Tk;
    T* dr = dsbuf + t * Tk;
    const T dot = delta ? delta[t] : row_dot(pr, dr, t + off + 1);
    for (long j = 0; j <= t + off; ++j) dr[j] = pr[j] * (dr[j] - dot);
    for (long j = t + off + 1; j < Tk; ++j) dr[j] = T(0);
  }
  if (t_bf16) {
    rounded(rs, dS);
    dQ.noalias() += sc * rs * rounded(rk, Kt);
    dK.noalias() += sc * rs.transpose() * rounded(rq, Q);
  } else {
    dQ.noalias() += sc * dS * Kt;
    dK.noalias() += sc * dS.transpose() * Q;
  }
}

// The views of head h of sequence b: q-side [Tq, D] with row stride H*D, kv-side [Tk, D] with stride Hkv*D.
struct HeadAt {
  long qo, ko;
  Eigen::OuterStride<> qs, ks;
  HeadAt(long b, long h, long Tq, long Tk, long H, long Hkv, long D)
      : qo((b * Tq * H + h) * D), ko((b * Tk * Hkv + h / (H / Hkv)) * D), qs(H * D), ks(Hkv * D) {}
};

// Attention backward, per (b, h) with P = att[b, h]. dK and dV of a kv head collect the sum over the query heads
// sharing it.
template <class T>
void attention_bwd_kv(T* dq, T* dk, T* dv, const T* dout, const T* att, const T* q, const T* k, const T* v, long B,
                      long Tq, long Tk, long H, long Hkv, long D) {
  exec::prof::Scope prof_scope(exec::prof::Cls::attention);
  std::vector<T> scratch(static_cast<size_t>(Tq * Tk));  // dP, then dS in place: [Tq, Tk]
  for (long b = 0; b < B; ++b) {
    for (long h = 0; h < H; ++h) {
      const HeadAt a(b, h, Tq, Tk, H, Hkv, D);
      CSMat<T> Q(q + a.qo, Tq, D, a.qs), dO(dout + a.qo, Tq, D, a.qs);
      CSMat<T> Kt(k + a.ko, Tk, D, a.ks), V(v + a.ko, Tk, D, a.ks);
      SMat<T> dQ(dq + a.qo, Tq, D, a.qs), dK(dk + a.ko, Tk, D, a.ks), dV(dv + a.ko, Tk, D, a.ks);
      head_attention_bwd(dQ, dK, dV, att + (b * H + h) * Tq * Tk, (const T*)nullptr, scratch.data(), dO, Q, Kt, V, Tq,
                         Tk, D);
    }
  }
}

// Flash attention (exec/backends/ops.hpp) on the CPU: head by head, the probabilities of one head in a [Tq, Tk] scratch
// (head_attention), never all of them; the backward recomputes them the same way (bit-identical), so the
// forward is attention_fwd_kv's and the backward differs from attention_bwd_kv only by its row term (and rounding).
template <class T>
void flash_attention_fwd(T* out, T* stats, const T* q, const T* k, const T* v, long B, long Tq, long Tk, long H,
                         long Hkv, long D, long ldq, long ldkv) {
  exec::prof::Scope prof_scope(exec::prof::Cls::attention);
  thread_local std::vector<T> P;
  P.resize(static_cast<size_t>(Tq * Tk));
  const Eigen::OuterStride<> qs(ldq), ks(ldkv), os(H * D);
  for (long b = 0; b < B; ++b)
    for (long h = 0; h < H; ++h) {
      const long kh = h / (H / Hkv);
      CSMat<T> Q(q + b * Tq * ldq + h * D, Tq, D, qs);
      CSMat<T> Kt(k + b * Tk * ldkv + kh * D, Tk, D, ks), V(v + b * Tk * ldkv + kh * D, Tk, D, ks);
      SMat<T> O(out + (b * Tq * H + h) * D, Tq, D, os);
      head_attention(P.data(), stats + (b * H + h) * Tq * 2, &O, Q, Kt, V, Tq, Tk, D);
    }
}
template <class T>
void flash_attention_bwd(T* dq, T* dk, T* dv, const T* dout, const T* out, const T*, const T* q, const T* k,
                         const T* v, long B, long Tq, long Tk, long H, long Hkv, long D, long ldq, long ldkv) {
  exec::prof::Scope prof_scope(exec::prof::Cls::attention);
  thread_local std::vector<T> P, dS, delta;
  P.resize(static_cast<size_t>(Tq * Tk)), dS.resize(P.size()), delta.resize(static_cast<size_t>(Tq));
  const Eigen::OuterStride<> qs(ldq), ks(ldkv), os(H * D);
  for (long b = 0; b < B; ++b)
    for (long h = 0; h < H; ++h) {
      const long kh = h / (H / Hkv), qo = b * Tq * ldq + h * D, ko = b * Tk * ldkv + kh * D, oo = (b * Tq * H + h) * D;
      CSMat<T> Q(q + qo, Tq, D, qs), dO(dout + oo, Tq, D, os);
      CSMat<T> Kt(k + ko, Tk, D, ks), V(v + ko, Tk, D, ks);
      SMat<T> dQ(dq + qo, Tq, D, qs), dK(dk + ko, Tk, D, ks), dV(dv + ko, Tk, D, ks);
      head_attention(P.data(), (T*)nullptr, (SMat<T>*)nullptr, Q, Kt, V, Tq, Tk, D);
      for (long t = 0; t < Tq; ++t) delta[t] = row_dot(dout + oo + t * H * D, out + oo + t * H * D, D);
      head_attention_bwd(dQ, dK, dV, P.data(), delta.data(), dS.data(), dO, Q, Kt, V, Tq, Tk, D);
    }
}

// The bf16-stored variants: exec/backends/cpu/flash16.hpp's definition.
template <class T>
void flash_attention_fwd16(uint16_t* out, T* stats, const uint16_t* q, const uint16_t* k, const uint16_t* v, long B,
                           long Tq, long Tk, long H, long Hkv, long D, long ldq, long ldkv) {
  flash16_fwd_unpacked<T>(&unpack_bf16<T>, &pack_bf16<T>, &flash_attention_fwd<T>, out, stats, q, k, v, B, Tq, Tk, H,
                          Hkv, D, ldq, ldkv);
}
template <class T>
void flash_attention_bwd16(T* dq, T* dk, T* dv, const T* dout, const uint16_t* out, const T* stats, const uint16_t* q,
                           const uint16_t* k, const uint16_t* v, long B, long Tq, long Tk, long H, long Hkv, long D,
                           long ldq, long ldkv) {
  flash16_bwd_unpacked<T>(&unpack_bf16<T>, &flash_attention_bwd<T>, dq, dk, dv, dout, out, stats, q, k, v, B, Tq, Tk,
                          H, Hkv, D, ldq, ldkv);
}

template <class T>
void attention_bwd(T* dq, T* dk, T* dv, const T* dout, const T* att, const T* q, const T* k, const T* v, long B,
                   long Tn, long H, long Hkv, long D) {
  attention_bwd_kv(dq, dk, dv, dout, att, q, k, v, B, Tn, Tn, H, Hkv, D);
}

// ops::linear_fwd as its three ops (the CPU fuses nothing): matmul (matmul16 for packed operands), add_bias, gelu_fwd.
template <class T>
void linear_fwd(T* y, T* pre, const T* x, const uint16_t* x16, const T* w, const uint16_t* w16, const T* b, long M,
                long N, long K) {
  T* z = pre ? pre : y;
  if (x16 || w16) matmul16(z, x, x16, w, w16, M, N, K, false, false, T(1), T(0));
  else matmul(z, x, w, M, N, K, false, false, T(1), T(0));
  if (b) add_bias(z, z, b, M, N, static_cast<const T*>(nullptr));
  if (pre) gelu_fwd(y, pre, M * N);
}

#define TP_OPS_GEMM_INSTANTIATE(T)                                                                              \
  template void matmul<T>(T*, const T*, const T*, long, long, long, bool, bool, T, T);                         \
  template void matmul_fp8<T>(T*, const T*, const T*, int, const T*, const T*, int, long, long, long, bool, bool, T, T);    \
  template void matmul16<T>(T*, const T*, const uint16_t*, const T*, const uint16_t*, long, long, long, bool, bool,  \
                            T, T);                                                                              \
  template void linear_fwd<T>(T*, T*, const T*, const uint16_t*, const T*, const uint16_t*, const T*, long, long,  \
                              long);                                                                            \
  template void attention_fwd<T>(T*, T*, const T*, const T*, const T*, long, long, long, long, long);          \
  template void attention_bwd<T>(T*, T*, T*, const T*, const T*, const T*, const T*, const T*, long, long, long, \
                                 long, long);                                                                 \
  template void attention_fwd_kv<T>(T*, T*, const T*, const T*, const T*, long, long, long, long, long, long); \
  template void attention_bwd_kv<T>(T*, T*, T*, const T*, const T*, const T*, const T*, const T*, long, long,  \
                                    long, long, long, long);                                                  \
  template void flash_attention_fwd<T>(T*, T*, const T*, const T*, const T*, long, long, long, long, long, long, \
                                       long, long);                                                              \
  template void flash_attention_bwd<T>(T*, T*, T*, const T*, const T*, const T*, const T*, const T*, const T*, long, \
                                       long, long, long, long, long, long, long);                                  \
  template void flash_attention_fwd16<T>(uint16_t*, T*, const uint16_t*, const uint16_t*, const uint16_t*, long, long, \
                                         long, long, long, long, long, long);                                        \
  template void flash_attention_bwd16<T>(T*, T*, T*, const T*, const uint16_t*, const T*, const uint16_t*,           \
                                         const uint16_t*, const uint16_t*, long, long, long, long, long, long, long,  \
                                         long);
TP_OPS_GEMM_INSTANTIATE(float)
TP_OPS_GEMM_INSTANTIATE(double)
#undef TP_OPS_GEMM_INSTANTIATE

}  // namespace tp::ops::cpu
