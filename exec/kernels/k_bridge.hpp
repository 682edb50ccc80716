// k_bridge: the kernels a backend needs beyond part 2's set to implement every entry of exec/backends/ops.hpp's table —
// the strided row copy, the column-split LayerNorm steps of 2D tensor parallelism, the vocabulary-parallel
// cross-entropy steps in exec/backends/ops.hpp's form (CeForm), the sharded embedding and the positions, and a one-block
// sum of per-row values. Written like every kernel (TP_HD functors over a context, docs/kernels.md), so the
// CUDA library can instantiate them too; the emu backend (backend_emu*.cpp) launches them on the emulator.
// Invariants: no atomics; each output element is written by one thread; row kernels loop rows by block
// (TP_ROW_LOOP), so every thread of a block reaches every sync; where an output may alias an input, every
// thread reads what it needs before the block's sync and writes only its own elements after it.
#pragma once
#include "exec/kernels/k_elementwise.hpp"
#include "exec/kernels/k_fp8.hpp"
#include "exec/kernels/k_reduce.hpp"
#include "exec/kernels/k_rows.hpp"

namespace tp::kernels {

// dst[r * ds + c] = src[r * ss + c] for r < rows, c < cols.
template <class T>
struct CopyRows {
  static constexpr const char* kName = "copy_rows";
  T* dst;
  const T* src;
  long ds, ss, rows, cols;
  template <class Ctx>
  TP_HD void operator()(Ctx& c) const {
    TP_GRID_LOOP(c, i, rows * cols) dst[(i / cols) * ds + i % cols] = src[(i / cols) * ss + i % cols];
  }
};

// Attention's head layout: heads-major [B, H, Tn, D] from (kToHeads) or back to (else) the model's
// [B, Tn, H, D], so a GEMM per head sees a contiguous [Tn, D] matrix.
template <class T, bool kToHeads>
struct PermuteHeads {
  static constexpr const char* kName = kToHeads ? "permute_to_heads" : "permute_from_heads";
  T* dst;
  const T* src;
  long B, Tn, H, D;
  template <class Ctx>
  TP_HD void operator()(Ctx& c) const {
    TP_GRID_LOOP(c, i, B * Tn * H * D) {  // i indexes [B, H, Tn, D]
      const long d = i % D, t = (i / D) % Tn, h = (i / (D * Tn)) % H, b = i / (D * Tn * H);
      const long j = ((b * Tn + t) * H + h) * D + d;
      if (kToHeads) dst[i] = src[j];
      else dst[j] = src[i];
    }
  }
};

// Row sums, or (kSq) squared deviations from mean = sum / C: sum[n] = sum_j x[n, j]; kSq: mean[n] = in[n] / C,
// out[n] = sum_j (x[n, j] - mean[n])^2 (out may be in).
template <class T, bool kSq>
struct LnShardRow {
  static constexpr const char* kName = kSq ? "ln_shard_sqdev" : "ln_shard_sum";
  using A = acc_t<T>;
  T* out;
  T* mean;
  const T* in;
  const T* x;
  long N, Cl, C;
  template <class Ctx>
  TP_HD void operator()(Ctx& c) const {
    A* slots = c.template shared<A>();
    TP_ROW_LOOP(c, r, N) {
      const A m = kSq ? A(ld(in[r])) / A(C) : A(0);  // read by every thread before the syncs below
      A s = 0;
      TP_COL_LOOP(c, j, Cl) {
        const A d = ld(x[r * Cl + j]) - m;
        s += kSq ? d * d : d;
      }
      s = block_sum(c, s, slots);
      if (c.tid() == 0) {
        out[r] = st<T>(s);
        if (kSq) mean[r] = st<T>(m);
      }
    }
  }
};

// rstd[n] = 1 / sqrt(sqdev[n] / C + eps); y = (x - mean) rstd w (+ b).
template <class T>
struct LnShardApply {
  static constexpr const char* kName = "ln_shard_apply";
  using A = acc_t<T>;
  T* y;
  T* rstd;
  const T* x;
  const T* mean;
  const T* sqdev;
  const T* w;
  const T* b;
  long N, Cl, C;
  A eps;
  template <class Ctx>
  TP_HD void operator()(Ctx& c) const {
    TP_GRID_LOOP(c, i, N * Cl) {
      const long n = i / Cl, j = i % Cl;
      const A r = A(1) / k_sqrt(ld(sqdev[n]) / A(C) + eps);
      if (j == 0) rstd[n] = st<T>(r);
      const A o = (ld(x[i]) - ld(mean[n])) * r * ld(w[j]);
      y[i] = st<T>(b ? o + ld(b[j]) : o);
    }
  }
};

// sums[n] = sum_j w dy, sums[N + n] = sum_j w dy xhat over the shard's columns.
template <class T>
struct LnShardBwdSums {
  static constexpr const char* kName = "ln_shard_bwd_sums";
  using A = acc_t<T>;
  T* sums;
  const T* dy;
  const T* x;
  const T* w;
  const T* mean;
  const T* rstd;
  long N, Cl;
  template <class Ctx>
  TP_HD void operator()(Ctx& c) const {
    A* slots = c.template shared<A>();
    TP_ROW_LOOP(c, r, N) {
      const A m = ld(mean[r]), rs = ld(rstd[r]);
      A a = 0, b = 0;
      TP_COL_LOOP(c, j, Cl) {
        const A g = ld(w[j]) * ld(dy[r * Cl + j]);
        a += g;
        b += g * (ld(x[r * Cl + j]) - m) * rs;
      }
      a = block_sum(c, a, slots);
      b = block_sum(c, b, slots);
      if (c.tid() == 0) {
        sums[r] = st<T>(a);
        sums[N + r] = st<T>(b);
      }
    }
  }
};

// dx += rstd (w dy - sums[n] / C - xhat sums[N + n] / C) (dw, db: ColumnSums in k_reduce.hpp).
template <class T>
struct LnShardBwdDx {
  static constexpr const char* kName = "ln_shard_bwd_dx";
  using A = acc_t<T>;
  T* dx;
  const T* dy;
  const T* x;
  const T* w;
  const T* mean;
  const T* rstd;
  const T* sums;
  long N, Cl, C;
  template <class Ctx>
  TP_HD void operator()(Ctx& c) const {
    TP_GRID_LOOP(c, i, N * Cl) {
      const long n = i / Cl, j = i % Cl;
      const A r = ld(rstd[n]), xh = (ld(x[i]) - ld(mean[n])) * r;
      const A gm = ld(sums[n]) / A(C), gxm = ld(sums[N + n]) / A(C);
      dx[i] = st<T>(ld(dx[i]) + r * (ld(w[j]) * ld(dy[i]) - gm - xh * gxm));
    }
  }
};

// mx[n] = max(mx[n], parts[p * N + n]) for p in order.
template <class T>
struct MaxCombine {
  static constexpr const char* kName = "max_combine";
  T* mx;
  const T* parts;
  long N, P;
  template <class Ctx>
  TP_HD void operator()(Ctx& c) const {
    TP_GRID_LOOP(c, n, N) {
      T m = mx[n];
      for (long p = 0; p < P; ++p) m = parts[p * N + n] > m ? parts[p * N + n] : m;
      mx[n] = m;
    }
  }
};

// Vocabulary shard [v0, v0 + V) of rows [N, V]: probs = exp(l - mx) (probs may be logits), sum_exp[n] = row sum,
// target[n] = the target logit (shifted: minus mx) when in the shard, else 0.
template <class T>
struct CeShardExp {
  static constexpr const char* kName = "ce_shard_exp";
  using A = acc_t<T>;
  T* probs;
  T* sum_exp;
  T* target;
  const T* logits;
  const T* mx;
  const int32_t* targets;
  long N, V, v0;
  bool shifted;
  template <class Ctx>
  TP_HD void operator()(Ctx& c) const {
    A* slots = c.template shared<A>();
    TP_ROW_LOOP(c, r, N) {
      const long t = long(targets[r]) - v0;
      const A m = ld(mx[r]);
      A tv = 0;
      if (c.tid() == 0 && t >= 0 && t < V) tv = shifted ? ld(logits[r * V + t]) - m : A(ld(logits[r * V + t]));
      c.sync();  // the target logit is read before any thread overwrites the row (probs may be logits)
      A s = 0;
      TP_COL_LOOP(c, j, V) {
        const A e = k_exp(ld(logits[r * V + j]) - m);
        probs[r * V + j] = st<T>(e);
        s += e;
      }
      s = block_sum(c, s, slots);
      if (c.tid() == 0) {
        sum_exp[r] = st<T>(s);
        target[r] = st<T>(tv);
      }
    }
  }
};

// probs /= sum_exp (shifted: *= 1 / sum_exp); loss[n] = log(sum) + mx - target (shifted: log(sum) - target).
template <class T>
struct CeShardFinish {
  static constexpr const char* kName = "ce_shard_finish";
  using A = acc_t<T>;
  T* probs;
  double* loss;
  const T* sum_exp;
  const T* target;
  const T* mx;
  long N, V;
  bool shifted;
  template <class Ctx>
  TP_HD void operator()(Ctx& c) const {
    TP_ROW_LOOP(c, r, N) {
      const A s = ld(sum_exp[r]), inv = A(1) / s;
      TP_COL_LOOP(c, j, V) probs[r * V + j] = st<T>(shifted ? ld(probs[r * V + j]) * inv : ld(probs[r * V + j]) / s);
      if (c.tid() == 0)
        loss[r] = shifted ? double(k_log(s)) - double(ld(target[r]))
                          : double(k_log(s)) + double(ld(mx[r])) - double(ld(target[r]));
    }
  }
};

// dlogits[n, targets[n] - v0] -= scale for targets in the shard.
template <class T>
struct CeShardTargetGrad {
  static constexpr const char* kName = "ce_shard_target_grad";
  T* dlogits;
  const int32_t* targets;
  long N, V, v0;
  acc_t<T> scale;
  template <class Ctx>
  TP_HD void operator()(Ctx& c) const {
    TP_GRID_LOOP(c, n, N) {
      const long t = long(targets[n]) - v0;
      if (t >= 0 && t < V) dlogits[n * V + t] = st<T>(ld(dlogits[n * V + t]) - scale);
    }
  }
};

// ops::ce_grad16: scale x probs, minus scale at the target, packed (CeShardTargetGrad's and Scale's arithmetic,
// then PackBf16's rounding). One block per row.
template <class T>
struct CeGrad16 {
  static constexpr const char* kName = "ce_grad16";
  bf16* dl16;
  const T* probs;
  const int32_t* targets;
  long N, V, v0;
  acc_t<T> scale;
  template <class Ctx>
  TP_HD void operator()(Ctx& c) const {
    TP_ROW_LOOP(c, r, N) {
      const long t = long(targets[r]) - v0;
      TP_COL_LOOP(c, j, V) {
        T v = st<T>(scale * ld(probs[r * V + j]));
        if (j == t) v = st<T>(ld(v) - scale);
        dl16[r * V + j] = bf16_of(ld(v));
      }
    }
  }
};

// out[n, :] = wte_shard[tokens[n] - v0, :] for tokens in the shard; other rows untouched. W: T, or bf16 (the
// shard's bf16 copy, ops::embedding_shard_fwd16: its values, exact in T).
template <class T, class W = T>
struct EmbeddingShardFwd {
  static constexpr const char* kName = std::is_same_v<W, T> ? "embedding_shard_fwd" : "embedding_shard_fwd16";
  T* out;
  const int32_t* tokens;
  const W* wte;
  long N, C, v0, Vl;
  template <class Ctx>
  TP_HD void operator()(Ctx& c) const {
    TP_GRID_LOOP(c, i, N * C) {
      const long t = long(tokens[i / C]) - v0;
      if (t >= 0 && t < Vl) out[i] = st<T>(ld(wte[t * C + i % C]));
    }
  }
};

// x[i, :] += wpe[(row0 + i) % Tn, :].
template <class T>
struct AddPositions {
  static constexpr const char* kName = "add_positions";
  T* x;
  const T* wpe;
  long rows, C, Tn, row0;
  template <class Ctx>
  TP_HD void operator()(Ctx& c) const {
    TP_GRID_LOOP(c, i, rows * C) x[i] = st<T>(ld(x[i]) + ld(wpe[((row0 + i / C) % Tn) * C + i % C]));
  }
};

// dwpe[p, :] += dx[i, :] over the rows i < rows with (row0 + i) % Tn == p, in row order (one thread per
// element of dwpe, no atomics).
template <class T>
struct PositionsBwd {
  static constexpr const char* kName = "positions_bwd";
  using A = acc_t<T>;
  T* dwpe;
  const T* dx;
  long rows, C, Tn, row0;
  template <class Ctx>
  TP_HD void operator()(Ctx& c) const {
    TP_GRID_LOOP(c, e, Tn * C) {
      const long p = e / C, col = e % C;
      A s = ld(dwpe[e]);
      for (long i = ((p - row0) % Tn + Tn) % Tn; i < rows; i += Tn) s += ld(dx[i * C + col]);
      dwpe[e] = st<T>(s);
    }
  }
};

// out[0] = sum of in[0, n) in double (one block).
template <class V>
struct SumToDouble {
  static constexpr const char* kName = "sum_rows";
  double* out;
  const V* in;
  long n;
  template <class Ctx>
  TP_HD void operator()(Ctx& c) const {
    double s = 0;
    for (long i = c.tid(); i < n; i += c.bdim()) s += double(ld(in[i]));
    s = block_sum(c, s, c.template shared<double>());
    if (c.tid() == 0) out[0] = s;
  }
};

}  // namespace tp::kernels
