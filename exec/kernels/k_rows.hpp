// k_rows: the row-wise kernels — LayerNorm forward and its input gradient one warp per row (warp shuffles, no block
// sync: a transformer's rows of 10^3 columns are too short to pay a block's syncs), the others one block per row
// (grid-stride over rows), block reductions through warp shuffles and shared memory: softmax forward / backward (optionally
// causal, for attention probabilities), and softmax cross-entropy: fused for one vocabulary, and in pieces
// (shard max, exp-sum with the target logit, normalise) for a vocabulary split over ranks, where v0 is the
// first vocabulary id of the shard. Contracts as exec/backends/ops.hpp: LayerNorm statistics in acc_t<T> (fp32 for
// bf16); probs may alias logits (every thread reads its elements before the block's last sync and writes
// only its own elements after it); backwards accumulate unless kSet.
// Invariant: the row loop's bounds depend on the block index only (the warp row loop's on the warp's index), so
// every thread of a block reaches every sync (every lane of a warp every shuffle) the same number of times.
#pragma once
#include "exec/kernels/kcommon.hpp"

namespace tp::kernels {

#define TP_ROW_LOOP(c, r, N) for (long r = long((c).bid()); r < long(N); r += long((c).gdim()))
#define TP_COL_LOOP(c, j, n) for (long j = long((c).tid()); j < long(n); j += long((c).bdim()))
// One warp per row: warp w of the grid takes rows w, w + warps, ...; its lanes take columns lane, lane + 32, ...
#define TP_WARP_ROW_LOOP(c, r, N)                                                                 \
  for (long r = long((c).bid()) * long((c).bdim() / kWarp) + long((c).tid() / kWarp); r < long(N); \
       r += long((c).gdim()) * long((c).bdim() / kWarp))
#define TP_LANE_LOOP(c, j, n) for (long j = long((c).tid() % kWarp); j < long(n); j += long(kWarp))

// y = (x - mean) rstd w (+ b); mean, rstd [N] saved; biased variance, two passes over the row.
template <class T, class Y = T>
struct LayerNormFwd {
  static constexpr const char* kName = "layernorm_fwd";
  using A = acc_t<T>;
  Y* y;  // (Y: T, or bf16 with T = float: layernorm_fwd16)
  A* mean;
  A* rstd;
  const T* x;
  const T* w;
  const T* b;  // may be null
  long N, C;
  A eps;
  template <class Ctx>
  TP_HD void operator()(Ctx& c) const {
    TP_WARP_ROW_LOOP(c, r, N) {
      const T* xr = x + r * C;
      A s = 0;
      TP_LANE_LOOP(c, j, C) s += ld(xr[j]);
      const A m = warp_sum(c, s) / A(C);
      A v = 0;
      TP_LANE_LOOP(c, j, C) {
        const A d = ld(xr[j]) - m;
        v += d * d;
      }
      const A rs = A(1) / k_sqrt(warp_sum(c, v) / A(C) + eps);
      Y* yr = y + r * C;
      TP_LANE_LOOP(c, j, C) {
        const A o = (ld(xr[j]) - m) * rs * ld(w[j]);
        yr[j] = st<Y>(ld(st<T>(b ? o + ld(b[j]) : o)));  // (Y bf16: the T value rounded, as pack_bf16 rounds it)
      }
      if (c.tid() % kWarp == 0) {
        mean[r] = m;
        rstd[r] = rs;
      }
    }
  }
};

// dx += rstd (g - mean(g) - xhat mean(g xhat)), g = w dy, xhat = (x - mean) rstd; x stored as X (T, or bf16:
// layernorm_bwd16). (dw, db: k_reduce.hpp.)
template <class T, class X = T>
struct LayerNormBwdDx {
  static constexpr const char* kName = "layernorm_bwd_dx";
  using A = acc_t<T>;
  T* dx;
  const T* dy;
  const X* x;
  const T* w;
  const A* mean;
  const A* rstd;
  long N, C;
  template <class Ctx>
  TP_HD void operator()(Ctx& c) const {
    TP_WARP_ROW_LOOP(c, r, N) {
      const X* xr = x + r * C;
      const T* dyr = dy + r * C;
      const A m = mean[r], rs = rstd[r];
      A sg = 0, sgx = 0;
      TP_LANE_LOOP(c, j, C) {
        const A g = ld(w[j]) * ld(dyr[j]);
        sg += g;
        sgx += g * (A(ld(xr[j])) - m) * rs;
      }
      const A gm = warp_sum(c, sg) / A(C);
      const A gxm = warp_sum(c, sgx) / A(C);
      T* dxr = dx + r * C;
      TP_LANE_LOOP(c, j, C) {
        const A g = ld(w[j]) * ld(dyr[j]);
        const A xh = (A(ld(xr[j])) - m) * rs;
        dxr[j] = st<T>(ld(dxr[j]) + rs * (g - gm - xh * gxm));
      }
    }
  }
};

// Valid length of row r of a softmax over rows of length L: causal rows of attention scores [.., Q, L] (Q query
// rows over L keys, Q <= L, the mask aligned bottom-right as context parallelism needs; Q = L for ordinary
// causal attention) see keys [0, r % Q + L - Q]; others the whole row.
TP_HD TP_INLINE long softmax_len(long r, long L, bool causal, long Q) { return causal ? r % Q + (L - Q) + 1 : L; }

// Rows of at most kSoftmaxHold x blockDim entries are read once into registers (each thread keeps its columns
// tid, tid + blockDim, ... in the same order the loops below visit them, so the sums are the same); longer rows
// take the loops that read the row again for each pass.
inline constexpr int kSoftmaxHold = 8;

// y[R, L] = softmax(scale x) per row (entries past a causal row's length are 0); y may be x. With y16 set, also
// y16 = y rounded to bf16 (the stored value's, as a later cast of y would give: the CUDA backend's bf16 GEMM
// operand for P, made in the same pass). The copy is a separate instantiation (kEmit), holding at most 4 entries
// per thread, so the plain kernel's registers are as before (ptxas: no spills in either).
template <class T, bool kEmit = false>
struct SoftmaxFwd {
  static constexpr const char* kName = kEmit ? "softmax_fwd (with a bf16 copy)" : "softmax_fwd";
  static constexpr int kHold = kEmit ? 4 : kSoftmaxHold;
  using A = acc_t<T>;
  T* y;
  const T* x;
  long R, L;
  A scale;
  bool causal;
  long Q;  // query rows per causal block (causal only)
  bf16* y16 = nullptr;
  template <class Ctx>
  TP_HD void operator()(Ctx& c) const {
    A* slots = c.template shared<A>();
    TP_ROW_LOOP(c, r, R) {
      const T* xr = x + r * L;
      const long n = softmax_len(r, L, causal, Q);
      const long b = long(c.bdim()), t = long(c.tid());
      if (n <= kHold * b) {
        A v[kHold];
        A mx = k_neg_inf<A>();
        TP_UNROLL for (int k = 0; k < kHold; ++k) {
          const long j = t + k * b;
          v[k] = j < n ? scale * ld(xr[j]) : k_neg_inf<A>();
          mx = k_max(mx, v[k]);
        }
        mx = block_max(c, mx, slots);
        A s = 0;
        TP_UNROLL for (int k = 0; k < kHold; ++k) {
          v[k] = t + k * b < n ? k_exp(v[k] - mx) : A(0);
          s += v[k];
        }
        const A inv = A(1) / block_sum(c, s, slots);
        T* yr = y + r * L;
        TP_UNROLL for (int k = 0; k < kHold; ++k) {
          const long j = t + k * b;
          if (j < L) put(yr, r * L + j, j, st<T>(v[k] * inv));  // 0 past n
        }
        for (long j = t + kHold * b; j < L; j += b) put(yr, r * L + j, j, st<T>(A(0)));
        continue;
      }
      A mx = k_neg_inf<A>();
      TP_COL_LOOP(c, j, n) mx = k_max(mx, scale * ld(xr[j]));
      mx = block_max(c, mx, slots);
      A s = 0;
      TP_COL_LOOP(c, j, n) s += k_exp(scale * ld(xr[j]) - mx);
      const A inv = A(1) / block_sum(c, s, slots);
      T* yr = y + r * L;
      TP_COL_LOOP(c, j, L) put(yr, r * L + j, j, st<T>(j < n ? k_exp(scale * ld(xr[j]) - mx) * inv : A(0)));
    }
  }
  // yr[j] = v, and its bf16 copy at y16[i] when asked for
  TP_HD TP_INLINE void put(T* yr, long i, long j, T v) const {
    yr[j] = v;
    if constexpr (kEmit) y16[i] = to_bf16(float(ld(v)));
  }
};

// dx (+)= scale y (dy - sum(y dy)) per row; kSet overwrites (dx may be dy). With dx16 / y16 set, also the bf16
// copies of the stored dx and of y (the CUDA backend's bf16 GEMM operands dS and P, made in the same pass).
template <class T, bool kSet, bool kEmit = false>
struct SoftmaxBwd {
  static constexpr const char* kName = kEmit ? "softmax_bwd (with bf16 copies)" : kSet ? "softmax_bwd_set" : "softmax_bwd";
  static constexpr int kHold = kEmit ? 4 : kSoftmaxHold;
  using A = acc_t<T>;
  T* dx;
  const T* y;
  const T* dy;
  long R, L;
  A scale;
  bf16* dx16 = nullptr;
  bf16* y16 = nullptr;
  TP_HD TP_INLINE void put(T* dxr, long i, long j, T g, T yv) const {
    dxr[j] = g;
    if constexpr (kEmit) {
      dx16[i] = to_bf16(float(ld(g)));
      y16[i] = to_bf16(float(ld(yv)));
    }
  }
  template <class Ctx>
  TP_HD void operator()(Ctx& c) const {
    A* slots = c.template shared<A>();
    TP_ROW_LOOP(c, r, R) {
      const T* yr = y + r * L;
      const T* dyr = dy + r * L;
      const long b = long(c.bdim()), t = long(c.tid());
      if (L <= kHold * b) {
        A yv[kHold], dv[kHold];
        A s = 0;
        TP_UNROLL for (int k = 0; k < kHold; ++k) {
          const long j = t + k * b;
          yv[k] = j < L ? A(ld(yr[j])) : A(0);
          dv[k] = j < L ? A(ld(dyr[j])) : A(0);
          s += yv[k] * dv[k];
        }
        const A dot = block_sum(c, s, slots);
        T* dxr = dx + r * L;
        TP_UNROLL for (int k = 0; k < kHold; ++k) {
          const long j = t + k * b;
          if (j < L) {
            const A g = scale * yv[k] * (dv[k] - dot);
            put(dxr, r * L + j, j, st<T>(kSet ? g : ld(dxr[j]) + g), st<T>(yv[k]));
          }
        }
        continue;
      }
      A s = 0;
      TP_COL_LOOP(c, j, L) s += ld(yr[j]) * ld(dyr[j]);
      const A dot = block_sum(c, s, slots);
      T* dxr = dx + r * L;
      TP_COL_LOOP(c, j, L) {
        const A g = scale * ld(yr[j]) * (ld(dyr[j]) - dot);
        put(dxr, r * L + j, j, st<T>(kSet ? g : ld(dxr[j]) + g), yr[j]);
      }
    }
  }
};

// Softmax cross-entropy over one whole vocabulary [N, V]: probs = softmax(logits) (probs may be logits),
// loss[r] = log(sum exp(l - max)) - (l[target] - max). The row is read twice: once for its maximum and sum
// together (each thread's running maximum, its sum rescaled when the maximum grows: the online softmax), once to
// write the probabilities; wide rows take whole 1,024-thread blocks (cross_entropy_fwd), so fewer rows are in
// flight and the second read finds more of its row in L2.
template <class T>
struct CrossEntropyFwd {
  static constexpr const char* kName = "cross_entropy_fwd";
  using A = acc_t<T>;
  T* probs;
  A* loss;
  const T* logits;
  const int32_t* targets;
  long N, V;
  template <class Ctx>
  TP_HD void operator()(Ctx& c) const {
    A* slots = c.template shared<A>();
    TP_ROW_LOOP(c, r, N) {
      const T* lr = logits + r * V;
      const A tl = ld(lr[targets[r]]);  // every thread reads it before the syncs below (probs may be logits)
      A m = k_neg_inf<A>(), s = 0;
      TP_COL_LOOP(c, j, V) {
        const A x = ld(lr[j]);
        if (x > m) s = s * k_exp(m - x) + A(1), m = x;  // (first column: 0 * 0 + 1)
        else if (m > k_neg_inf<A>()) s += k_exp(x - m);
      }
      const A mx = block_max(c, m, slots);
      s = block_sum(c, m > k_neg_inf<A>() ? s * k_exp(m - mx) : A(0), slots);
      const A inv = A(1) / s;
      T* pr = probs + r * V;
      TP_COL_LOOP(c, j, V) pr[j] = st<T>(k_exp(ld(lr[j]) - mx) * inv);
      if (c.tid() == 0) loss[r] = k_log(s) - (tl - mx);
    }
  }
};

// Vocabulary-parallel pieces, logits [N, Vl] of the shard starting at vocabulary id v0:
// 1. row maxima of the shard (the caller takes the maximum over shards);
template <class T>
struct CeShardMax {
  static constexpr const char* kName = "ce_shard_max";
  using A = acc_t<T>;
  A* mx;
  const T* logits;
  long N, Vl;
  template <class Ctx>
  TP_HD void operator()(Ctx& c) const {
    A* slots = c.template shared<A>();
    TP_ROW_LOOP(c, r, N) {
      A m = k_neg_inf<A>();
      TP_COL_LOOP(c, j, Vl) m = k_max(m, A(ld(logits[r * Vl + j])));
      m = block_max(c, m, slots);
      if (c.tid() == 0) mx[r] = m;
    }
  }
};
// 2. given the global maxima: sums[r] = sum over the shard of exp(l - mx[r]), tl[r] = the target's logit when
//    the target is in the shard, else 0 (the caller sums both over shards);
template <class T>
struct CeShardExpSum {
  static constexpr const char* kName = "ce_shard_expsum";
  using A = acc_t<T>;
  A* sums;
  A* tl;
  const T* logits;
  const A* mx;
  const int32_t* targets;
  long N, Vl, v0;
  template <class Ctx>
  TP_HD void operator()(Ctx& c) const {
    A* slots = c.template shared<A>();
    TP_ROW_LOOP(c, r, N) {
      A s = 0;
      TP_COL_LOOP(c, j, Vl) s += k_exp(ld(logits[r * Vl + j]) - mx[r]);
      s = block_sum(c, s, slots);
      if (c.tid() == 0) {
        const long t = long(targets[r]) - v0;
        sums[r] = s;
        tl[r] = (t >= 0 && t < Vl) ? A(ld(logits[r * Vl + t])) : A(0);
      }
    }
  }
};
// 3. probs = exp(l - mx) / sums (probs may be logits; element-wise). The loss of row r is
//    log(sums[r]) + mx[r] - tl[r].
template <class T>
struct CeShardNormalize {
  static constexpr const char* kName = "ce_shard_normalize";
  using A = acc_t<T>;
  T* probs;
  const T* logits;
  const A* mx;
  const A* sums;
  long N, Vl;
  template <class Ctx>
  TP_HD void operator()(Ctx& c) const {
    TP_ROW_LOOP(c, r, N) {
      const A inv = A(1) / sums[r];
      TP_COL_LOOP(c, j, Vl) probs[r * Vl + j] = st<T>(k_exp(ld(logits[r * Vl + j]) - mx[r]) * inv);
    }
  }
};

// dlogits (+)= scale (probs - onehot(target - v0)) on a shard [N, Vl]; kSet overwrites (dlogits may be probs).
template <class T, bool kSet>
struct CrossEntropyBwd {
  static constexpr const char* kName = kSet ? "cross_entropy_bwd_set" : "cross_entropy_bwd";
  using A = acc_t<T>;
  T* dlogits;
  const T* probs;
  const int32_t* targets;
  long N, Vl, v0;
  A scale;
  template <class Ctx>
  TP_HD void operator()(Ctx& c) const {
    TP_ROW_LOOP(c, r, N) {
      const long t = long(targets[r]) - v0;
      TP_COL_LOOP(c, j, Vl) {
        const long i = r * Vl + j;
        const A g = scale * (ld(probs[i]) - (j == t ? A(1) : A(0)));
        dlogits[i] = st<T>(kSet ? g : ld(dlogits[i]) + g);
      }
    }
  }
};

// ---- op functions ----

template <class L>
TP_INLINE Dim row_dim(const L& launch, long rows, unsigned elem_bytes) {
  return Dim{blocks_for(rows, 1, launch.max_grid), launch.block, kReduceSlots * elem_bytes};
}
template <class L>
TP_INLINE Dim warp_row_dim(const L& launch, long rows) {  // TP_WARP_ROW_LOOP's kernels: a warp per row, no shared memory
  return Dim{blocks_for(rows, launch.block / kWarp, launch.max_grid), launch.block, 0};
}
template <class L, class T>
void layernorm_fwd(const L& launch, T* y, acc_t<T>* mean, acc_t<T>* rstd, const T* x, const T* w, const T* b,
                   long N, long C, acc_t<T> eps) {
  launch(LayerNormFwd<T>{y, mean, rstd, x, w, b, N, C, eps}, warp_row_dim(launch, N));
}
// y written as bf16 (fp32 storage: layernorm_fwd16).
template <class L>
void layernorm_fwd16(const L& launch, bf16* y, float* mean, float* rstd, const float* x, const float* w, const float* b,
                     long N, long C, float eps) {
  launch(LayerNormFwd<float, bf16>{y, mean, rstd, x, w, b, N, C, eps}, warp_row_dim(launch, N));
}
template <class L, class T, class X>
void layernorm_bwd_dx(const L& launch, T* dx, const T* dy, const X* x, const T* w, const acc_t<T>* mean,
                      const acc_t<T>* rstd, long N, long C) {
  launch(LayerNormBwdDx<T, X>{dx, dy, x, w, mean, rstd, N, C}, warp_row_dim(launch, N));
}
// y16 / dx16: optional bf16 copies of the outputs (SoftmaxFwd, SoftmaxBwd), [R, Lr] like them.
template <class L, class T>
void softmax_fwd(const L& launch, T* y, const T* x, long R, long Lr, acc_t<T> scale, bool causal, bf16* y16 = nullptr) {
  if (y16) launch(SoftmaxFwd<T, true>{y, x, R, Lr, scale, causal, Lr, y16}, row_dim(launch, R, sizeof(acc_t<T>)));
  else launch(SoftmaxFwd<T>{y, x, R, Lr, scale, causal, Lr}, row_dim(launch, R, sizeof(acc_t<T>)));
}
// Causal softmax over rectangular blocks of Q query rows by Lr keys (rows r of block r / Q), mask bottom-right.
template <class L, class T>
void softmax_fwd_rect(const L& launch, T* y, const T* x, long R, long Lr, long Q, acc_t<T> scale, bf16* y16 = nullptr) {
  if (y16) launch(SoftmaxFwd<T, true>{y, x, R, Lr, scale, true, Q, y16}, row_dim(launch, R, sizeof(acc_t<T>)));
  else launch(SoftmaxFwd<T>{y, x, R, Lr, scale, true, Q}, row_dim(launch, R, sizeof(acc_t<T>)));
}
// dx16 and y16: both or neither.
template <bool kSet, class L, class T>
void softmax_bwd(const L& launch, T* dx, const T* y, const T* dy, long R, long Lr, acc_t<T> scale,
                 bf16* dx16 = nullptr, bf16* y16 = nullptr) {
  if (dx16 && y16)
    launch(SoftmaxBwd<T, kSet, true>{dx, y, dy, R, Lr, scale, dx16, y16}, row_dim(launch, R, sizeof(acc_t<T>)));
  else launch(SoftmaxBwd<T, kSet>{dx, y, dy, R, Lr, scale}, row_dim(launch, R, sizeof(acc_t<T>)));
}
template <class L, class T>
void cross_entropy_fwd(const L& launch, T* probs, acc_t<T>* loss, const T* logits, const int32_t* targets, long N,
                       long V) {
  Dim d = row_dim(launch, N, sizeof(acc_t<T>));
  if (V >= 64L * d.block) d.block = 1024;  // (a wide row: a vocabulary of tens of thousands)
  launch(CrossEntropyFwd<T>{probs, loss, logits, targets, N, V}, d);
}
template <class L, class T>
void ce_shard_max(const L& launch, acc_t<T>* mx, const T* logits, long N, long Vl) {
  launch(CeShardMax<T>{mx, logits, N, Vl}, row_dim(launch, N, sizeof(acc_t<T>)));
}
template <class L, class T>
void ce_shard_expsum(const L& launch, acc_t<T>* sums, acc_t<T>* tl, const T* logits, const acc_t<T>* mx,
                     const int32_t* targets, long N, long Vl, long v0) {
  launch(CeShardExpSum<T>{sums, tl, logits, mx, targets, N, Vl, v0}, row_dim(launch, N, sizeof(acc_t<T>)));
}
template <class L, class T>
void ce_shard_normalize(const L& launch, T* probs, const T* logits, const acc_t<T>* mx, const acc_t<T>* sums, long N,
                        long Vl) {
  launch(CeShardNormalize<T>{probs, logits, mx, sums, N, Vl}, Dim{blocks_for(N, 1, launch.max_grid), launch.block, 0});
}
template <bool kSet, class L, class T>
void cross_entropy_bwd(const L& launch, T* dlogits, const T* probs, const int32_t* targets, long N, long Vl, long v0,
                       acc_t<T> scale) {
  launch(CrossEntropyBwd<T, kSet>{dlogits, probs, targets, N, Vl, v0, scale},
         Dim{blocks_for(N, 1, launch.max_grid), launch.block, 0});
}

}  // namespace tp::kernels
