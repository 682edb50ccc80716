// k_moe: the mixture-of-experts kernels — router (softmax, top-k, gates, capacity slots, load-balancing loss),
// its backward, dispatch into capacity-padded expert rows, combine of the experts' outputs, and their
// backwards. Contracts are exec/backends/ops.hpp's moe_* (the CPU reference is exec/backends/cpu/ops_moe.cpp); forwards overwrite,
// backwards accumulate. The router keeps the reference's order of operations and decisions exactly: softmax
// per token in the storage type's arithmetic, the j-th choice the largest remaining probability (ties to the
// lower expert index), gates renormalised over the chosen ones when asked; capacity taken by all first choices
// in token order, then all second choices, ... (GShard); a dropped copy's slot is -(e + 1).
// Invariants: no atomics, no race: every output element has one writing thread (one thread per token for the
// router, one per expert for the capacity scan, one per (token, column) or (slot row, column) for the rest), and
// every sum runs in a fixed order, so results are identical run to run. The few decisions that are sequential
// over tokens (capacity, per-expert counts) run one thread per expert in one block, O(N k) each.
#pragma once
#include <cstdint>

#include "exec/kernels/k_elementwise.hpp"
#include "exec/kernels/k_rows.hpp"

namespace tp::kernels {

// The expert of a slot value: e for a kept copy (e cap + position), e for a dropped one (-(e + 1)).
TP_HD TP_INLINE long moe_expert_of(int32_t slot, long cap) { return slot >= 0 ? long(slot) / cap : -long(slot) - 1; }

// Router, step 1, one thread per token i: probs[i, :] = softmax(logits[i, :]); choice[i, j] = the j-th largest
// probability's expert (ties: lower index); gate[i, j] = its probability, / the chosen ones' sum when renorm.
template <class T>
struct MoeRouteTokens {
  static constexpr const char* kName = "moe_route_tokens";
  using A = acc_t<T>;
  T* probs;
  T* gate;
  int32_t* choice;
  const T* logits;
  long N, E, k;
  int renorm;
  template <class Ctx>
  TP_HD void operator()(Ctx& c) const {
    TP_GRID_LOOP(c, i, N) {
      const T* z = logits + i * E;
      T* p = probs + i * E;
      A mx = ld(z[0]);
      for (long e = 1; e < E; ++e) mx = A(ld(z[e])) > mx ? A(ld(z[e])) : mx;
      A sum = 0;
      for (long e = 0; e < E; ++e) {
        p[e] = st<T>(k_exp(A(ld(z[e])) - mx));
        sum += ld(p[e]);
      }
      for (long e = 0; e < E; ++e) p[e] = st<T>(ld(p[e]) / sum);
      int32_t* ch = choice + i * k;
      T* g = gate + i * k;
      A chosen = 0;
      for (long j = 0; j < k; ++j) {
        long best = -1;
        for (long e = 0; e < E; ++e) {
          bool taken = false;
          for (long l = 0; l < j; ++l) taken = taken || ch[l] == e;
          if (!taken && (best < 0 || ld(p[e]) > ld(p[best]))) best = e;
        }
        ch[j] = int32_t(best);
        g[j] = p[best];
        chosen += ld(p[best]);
      }
      if (renorm)
        for (long j = 0; j < k; ++j) g[j] = st<T>(ld(g[j]) / chosen);
    }
  }
};

// Router, step 2, one block, one thread per expert e (strided): scans the choices j-major, then in token order,
// giving e's copies the positions 0 .. cap - 1 and dropping the rest; stats[e] = e's copies (before dropping),
// stats[E + e] = sum over tokens of probs[:, e] (token order, double). After the block's sync thread 0 writes
// stats[2E] = E sum_e (count_e / (N k)) (P_e / N), the load-balancing loss, in expert order.
template <class T>
struct MoeCapacity {
  static constexpr const char* kName = "moe_capacity";
  int32_t* slot;
  double* stats;
  const int32_t* choice;
  const T* probs;
  long N, E, k, cap;
  template <class Ctx>
  TP_HD void operator()(Ctx& c) const {
    for (long e = long(c.tid()); e < E; e += long(c.bdim())) {
      long fill = 0, count = 0;
      for (long j = 0; j < k; ++j)
        for (long i = 0; i < N; ++i) {
          if (choice[i * k + j] != e) continue;
          slot[i * k + j] = fill < cap ? int32_t(e * cap + fill++) : int32_t(-e - 1);
          ++count;
        }
      double mp = 0;
      for (long i = 0; i < N; ++i) mp += double(ld(probs[i * E + e]));
      stats[e] = double(count);
      stats[E + e] = mp;
    }
    c.sync();  // every expert's stats written -> read by thread 0
    if (c.tid() == 0) {
      double aux = 0;
      for (long e = 0; e < E; ++e) aux += (stats[e] / double(N * k)) * (stats[E + e] / double(N));
      stats[2 * E] = aux * double(E);
    }
  }
};

// Router backward, step 1, one block, one thread per expert: base[e] = E count_e / (N k N), count_e the copies
// routed to e (kept or dropped): the load-balancing loss's gradient per unit weight (f_e held constant).
struct MoeAuxGrad {
  static constexpr const char* kName = "moe_aux_grad";
  double* base;
  const int32_t* slot;
  long N, E, k, cap;
  template <class Ctx>
  TP_HD void operator()(Ctx& c) const {
    for (long e = long(c.tid()); e < E; e += long(c.bdim())) {
      long count = 0;
      for (long q = 0; q < N * k; ++q) count += moe_expert_of(slot[q], cap) == e ? 1 : 0;
      base[e] = double(E) * double(count) / (double(N * k) * double(N));
    }
  }
};

// Router backward, step 2, one thread per token: dp[e] = aux_weight base[e] + the gate gradient of the copy
// routed to e (through the renormalisation when renorm); dlogits[i, e] += p[e] (dp[e] - sum_e' dp[e'] p[e']).
// A token's choices are distinct experts, so dp[e] has at most one gate term; it is recomputed where needed
// (no per-thread array: the kernels keep to registers).
template <class T>
struct MoeRouteBwd {
  static constexpr const char* kName = "moe_route_bwd";
  using A = acc_t<T>;
  T* dlogits;
  const double* base;
  const T* probs;
  const int32_t* slot;
  const T* dgate;
  long N, E, k, cap;
  int renorm;
  A aux_weight;
  TP_HD A dp(long e, const int32_t* s, const T* dg, A sum, A dot) const {
    A d = aux_weight * A(base[e]);
    for (long j = 0; j < k; ++j)
      if (moe_expert_of(s[j], cap) == e) d += renorm ? (A(ld(dg[j])) - dot) / sum : A(ld(dg[j]));
    return d;
  }
  template <class Ctx>
  TP_HD void operator()(Ctx& c) const {
    TP_GRID_LOOP(c, i, N) {
      const T* p = probs + i * E;
      const int32_t* s = slot + i * k;
      const T* dg = dgate + i * k;
      A sum = 0, dot = 0;
      if (renorm) {
        for (long j = 0; j < k; ++j) sum += ld(p[moe_expert_of(s[j], cap)]);
        for (long j = 0; j < k; ++j) dot += A(ld(dg[j])) * A(ld(p[moe_expert_of(s[j], cap)])) / sum;
      }
      A dot2 = 0;
      for (long e = 0; e < E; ++e) dot2 += dp(e, s, dg, sum, dot) * A(ld(p[e]));
      T* dl = dlogits + i * E;
      for (long e = 0; e < E; ++e) dl[e] = st<T>(A(ld(dl[e])) + A(ld(p[e])) * (dp(e, s, dg, sum, dot) - dot2));
    }
  }
};

// Dispatch, after out is zeroed: out[slot[i, j], :] = x[i, :] for the kept copies, one thread per (copy, column)
// (kept slots are distinct, so each output element has at most one writer).
template <class T>
struct MoeScatter {
  static constexpr const char* kName = "moe_scatter";
  T* out;
  const T* x;
  const int32_t* slot;
  long N, k, C;
  template <class Ctx>
  TP_HD void operator()(Ctx& c) const {
    TP_GRID_LOOP(c, q, N * k * C) {
      const long copy = q / C, col = q % C;
      const int32_t s = slot[copy];
      if (s >= 0) out[long(s) * C + col] = x[(copy / k) * C + col];
    }
  }
};

// dx[i, c] += dout[slot[i, j], c] over the kept copies in choice order, one thread per (token, column).
template <class T>
struct MoeGatherAdd {
  static constexpr const char* kName = "moe_dispatch_bwd";
  using A = acc_t<T>;
  T* dx;
  const T* dout;
  const int32_t* slot;
  long N, k, C;
  template <class Ctx>
  TP_HD void operator()(Ctx& c) const {
    TP_GRID_LOOP(c, q, N * C) {
      const long i = q / C, col = q % C;
      A acc = ld(dx[q]);
      for (long j = 0; j < k; ++j) {
        const int32_t s = slot[i * k + j];
        if (s >= 0) acc += ld(dout[long(s) * C + col]);
      }
      dx[q] = st<T>(acc);
    }
  }
};

// y[i, c] = sum over the kept copies, in choice order, of gate[i, j] ein[slot[i, j], c] (0 when all dropped).
template <class T>
struct MoeCombine {
  static constexpr const char* kName = "moe_combine";
  using A = acc_t<T>;
  T* y;
  const T* ein;
  const int32_t* slot;
  const T* gate;
  long N, k, C;
  template <class Ctx>
  TP_HD void operator()(Ctx& c) const {
    TP_GRID_LOOP(c, q, N * C) {
      const long i = q / C, col = q % C;
      A acc = 0;
      for (long j = 0; j < k; ++j) {
        const int32_t s = slot[i * k + j];
        if (s >= 0) acc += A(ld(gate[i * k + j])) * A(ld(ein[long(s) * C + col]));
      }
      y[q] = st<T>(acc);
    }
  }
};

// Combine backward, one block per copy (i, j) (row loop over the N k copies; a dropped copy's block skips it
// as a whole): dein[slot, :] += gate[i, j] dy[i, :] (that row belongs to this copy alone) and
// dgate[i, j] += dy[i, :] . ein[slot, :] (a block reduction).
template <class T>
struct MoeCombineBwd {
  static constexpr const char* kName = "moe_combine_bwd";
  using A = acc_t<T>;
  T* dein;
  T* dgate;
  const T* dy;
  const T* ein;
  const int32_t* slot;
  const T* gate;
  long N, k, C;
  template <class Ctx>
  TP_HD void operator()(Ctx& c) const {
    A* slots = c.template shared<A>();
    TP_ROW_LOOP(c, r, N * k) {
      const int32_t s = slot[r];
      if (s < 0) continue;  // depends on the row only: the whole block skips it
      const T* dyr = dy + (r / k) * C;
      const T* er = ein + long(s) * C;
      T* dr = dein + long(s) * C;
      const A g = ld(gate[r]);
      A d = 0;
      TP_COL_LOOP(c, col, C) {
        d += A(ld(dyr[col])) * A(ld(er[col]));
        dr[col] = st<T>(A(ld(dr[col])) + g * A(ld(dyr[col])));
      }
      d = block_sum(c, d, slots);
      if (c.tid() == 0) dgate[r] = st<T>(A(ld(dgate[r])) + d);
    }
  }
};

// ---- op functions ----

// Scratch the router needs: choice [N k] int32 and stats [2 E + 1] doubles. After moe_route, stats[2E] (device
// memory) holds the load-balancing loss; the caller reads it back.
template <class L, class T>
void moe_route(const L& launch, T* probs, int32_t* slot, T* gate, int32_t* choice, double* stats, const T* logits,
               long N, long E, long k, long cap, int renorm) {
  launch(MoeRouteTokens<T>{probs, gate, choice, logits, N, E, k, renorm}, flat_dim(launch, N));
  launch(MoeCapacity<T>{slot, stats, choice, probs, N, E, k, cap}, Dim{1, launch.block, 0});
}
// base: scratch of E doubles.
template <class L, class T>
void moe_route_bwd(const L& launch, T* dlogits, double* base, const T* probs, const int32_t* slot, const T* dgate,
                   long N, long E, long k, long cap, int renorm, acc_t<T> aux_weight) {
  launch(MoeAuxGrad{base, slot, N, E, k, cap}, Dim{1, launch.block, 0});
  launch(MoeRouteBwd<T>{dlogits, base, probs, slot, dgate, N, E, k, cap, renorm, aux_weight}, flat_dim(launch, N));
}
template <class L, class T>
void moe_dispatch(const L& launch, T* out, const T* x, const int32_t* slot, long N, long k, long C, long rows) {
  fill(launch, out, acc_t<T>(0), rows * C);
  launch(MoeScatter<T>{out, x, slot, N, k, C}, flat_dim(launch, N * k * C));
}
template <class L, class T>
void moe_dispatch_bwd(const L& launch, T* dx, const T* dout, const int32_t* slot, long N, long k, long C) {
  launch(MoeGatherAdd<T>{dx, dout, slot, N, k, C}, flat_dim(launch, N * C));
}
template <class L, class T>
void moe_combine(const L& launch, T* y, const T* ein, const int32_t* slot, const T* gate, long N, long k, long C) {
  launch(MoeCombine<T>{y, ein, slot, gate, N, k, C}, flat_dim(launch, N * C));
}
template <class L, class T>
void moe_combine_bwd(const L& launch, T* dein, T* dgate, const T* dy, const T* ein, const int32_t* slot, const T* gate,
                     long N, long k, long C) {
  launch(MoeCombineBwd<T>{dein, dgate, dy, ein, slot, gate, N, k, C}, row_dim(launch, N * k, sizeof(acc_t<T>)));
}

}  // namespace tp::kernels
