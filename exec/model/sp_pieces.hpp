// sp_pieces: sequence parallelism's collectives in pieces under their GEMMs (plan.tp_comm_overlap, Megatron-LM's
// --tp-comm-overlap, which runs them through Transformer Engine's userbuffers): the all-gather before a column-
// parallel GEMM arrives piece by piece while the GEMM runs on the rows already there, and the reduce-scatter after a
// row-parallel GEMM runs piece by piece while the GEMM makes the next piece. Here the pieces go through the
// communicator's non-blocking collectives (exec/comm/comm.hpp: on NCCL, its own stream) rather than userbuffers'
// rings; the simulator hides these collectives under the adjacent GEMMs (sim/op_cost.cpp add_fwd_tp).
// Invariants: every row reaches the same GEMM operand as with the whole collective, and every sum is the whole
// reduce-scatter's rank-ordered sum, so only the GEMMs' row splits differ (the last bits may, where a GEMM's blocking
// depends on its row count). At most two pieces are in flight; a piece's buffers are neither read nor written between
// its start and its wait (Comm's non-blocking contract), and every piece is waited for before a function returns.
#pragma once

#include <algorithm>

#include "exec/backends/ops.hpp"
#include "exec/model/fp8.hpp"
#include "exec/model/gpt.hpp"

namespace tp::exec {

// Piece j of k covers rows [off(j), off(j + 1)) of every rank's Nl-row shard: as even as can be with its bounds on
// multiples of `align` rows, never empty (k <= Nl).
struct SpPieces {
  long Nl = 0;
  int k = 1;
  long align = 1;
  long off(int j) const {
    if (j >= k) return Nl;
    const long o = Nl * j / k;
    return o - o % align;
  }
  long rows(int j) const { return off(j + 1) - off(j); }
  long max_rows() const {
    long m = 0;
    for (int j = 0; j < k; ++j) m = std::max(m, rows(j));
    return m;
  }
};
// Pieces per collective: Transformer Engine's defaults in Megatron-LM's overlap configuration are a ring of tp chunks
// for the all-gathers (here two pieces after this rank's own rows, which need no wait) and 4 pipelined splits for the
// reduce-scatters.
constexpr int kSpGatherPieces = 2, kSpScatterPieces = 4;
// Bounds on multiples of 16 rows where every piece keeps 16 or more: cuBLASLt's fp8 GEMMs want row counts that are
// multiples of 16 (exec/kernels/cuda/gemm_lt.cpp), so a shard of a multiple of 16 rows keeps every piece on them.
inline SpPieces sp_pieces(long Nl, int want) {
  const int k = (int)std::max(1L, std::min<long>(want, Nl));
  return {Nl, k, Nl >= 16L * k ? 16L : 1L};
}

// full [N, C] (N = Nl tp) = the tp ranks' shards [Nl, C] all-gathered, and ready(row0, rows) called once for each
// block of full's rows after it has arrived, every row in one block. Whole: one all-gather, then ready(0, N). In
// pieces: this rank's own rows first (copied, no wait), then each piece's rows of the other ranks as its all-gather
// completes, while the next piece's is in flight.
template <class T, class F>
void gather_rows_then(Comm* tp, bool pieces, const T* shard, T* full, long Nl, long C, F&& ready) {
  const int t = tp->size(), me = tp->rank();
  if (!pieces) {
    gather_rows(tp, shard, full, Nl, C);
    ready(0L, Nl * t);
    return;
  }
  const SpPieces sp = sp_pieces(Nl, kSpGatherPieces);
  Buf<T> stage[2];  // [t, rows(j), C] each: the pieces' gathered rows, rank by rank
  CommRequest req[2];
  auto start = [&](int j) {
    Buf<T>& s = stage[j % 2];
    if (s.empty()) s.resize((size_t)(t * sp.max_rows() * C));
    req[j % 2] = tp->iall_gather(shard + sp.off(j) * C, s.data(), sp.rows(j) * C, dtype_of<T>());
  };
  start(0);
  if (sp.k > 1) start(1);
  ops::copy(full + me * Nl * C, shard, Nl * C);
  ready(me * Nl, Nl);
  for (int j = 0; j < sp.k; ++j) {
    tp->wait(req[j % 2]);
    const long r = sp.rows(j);  // (every rank's rows of the piece, this rank's again: the same values)
    ops::copy_rows(full + sp.off(j) * C, Nl * C, stage[j % 2].data(), r * C, t, r * C);
    if (j + 2 < sp.k) start(j + 2);
    for (int q = 0; q < t; ++q)
      if (q != me) ready(q * Nl + sp.off(j), r);
  }
}

// shard [Nl, C] = this rank's rows of an [N, C] product summed over tp in pieces, where gemm(out, row0, rows) writes
// rows [row0, row0 + rows) of this rank's partial product into out [rows, C]: each piece's rows of every rank go into a
// staging buffer, whose reduce-scatter then runs while the next piece's GEMMs do. (The whole form, one GEMM and one
// reduce_scatter_rows, stays at the call sites, which order their buffers around it.)
template <class T, class F>
void reduce_scatter_rows_pieces(Comm* tp, T* shard, long Nl, long C, F&& gemm) {
  const int t = tp->size();
  const SpPieces sp = sp_pieces(Nl, kSpScatterPieces);
  Buf<T> stage[2];  // [t, rows(j), C] each: a piece's partial rows, rank by rank
  CommRequest req[2];
  for (int j = 0; j < sp.k; ++j) {
    Buf<T>& s = stage[j % 2];
    if (j >= 2) tp->wait(req[j % 2]);  // (piece j - 2's reduce-scatter is done with the buffer)
    if (s.empty()) s.resize((size_t)(t * sp.max_rows() * C));
    const long r = sp.rows(j);
    for (int q = 0; q < t; ++q) gemm(s.data() + q * r * C, q * Nl + sp.off(j), r);
    req[j % 2] = tp->ireduce_scatter_sum(s.data(), shard + sp.off(j) * C, r * C, dtype_of<T>());
  }
  for (int j = std::max(0, sp.k - 2); j < sp.k; ++j) tp->wait(req[j % 2]);
}

// A column-parallel GEMM's input [N, K]: given whole (x, or its bf16 copy x16); or, under SP with `shard` set, this
// rank's rows [N / tp, K] all-gathered into `full` and, where `full16` is set, packed there (bf16) block by block.
// The owners, where given, are released once nothing reads them any more (the whole path: the shard once gathered,
// full once packed, so that its memory is what one gather and one pack would take; in pieces: at the end).
template <class T>
struct ColIn {
  const T* x = nullptr;
  const uint16_t* x16 = nullptr;
  const T* shard = nullptr;
  T* full = nullptr;
  uint16_t* full16 = nullptr;
  Buf<T>* shard_owner = nullptr;
  Buf<T>* full_owner = nullptr;
};

// f(x, x16, row0, rows) for each block of the input's rows once it is ready (gather_rows_then: whole, one block; under
// g.tp_overlap, block by block as the pieces arrive), x / x16 pointing at row0: packed (full16) and, under fp8 where
// not packed, cast (operand `op` of linear `lin` of weight group wl, into qx at the rows' place: one cast's values
// and amax) block by block.
template <class T, class F>
void col_in_rows(const Gpt<T>& g, const ColIn<T>& in, long N, long K, Buf<T>& qx, int wl, int lin, Fp8Operand op,
                 F&& f) {
  auto block = [&](long r0, long rows) {
    const T* base = in.shard ? in.full : in.x;
    const T* x = base ? base + r0 * K : nullptr;
    const uint16_t* x16 = in.x16 ? in.x16 + r0 * K : nullptr;
    if (in.full16) {
      ops::pack_bf16(in.full16 + r0 * K, x, rows * K);
      x16 = in.full16 + r0 * K;
      if (rows == N && in.full_owner) Buf<T>().swap(*in.full_owner);
    }
    f(x16 ? Q8<T>{} : g.f8q_at(qx, N * K, x, r0 * K, rows * K, wl, lin, op), x16, r0, rows);
  };
  if (!in.shard) return block(0L, N);
  gather_rows_then(g.tp, g.tp_overlap, in.shard, in.full, N / g.tp->size(), K, [&](long r0, long rows) {
    if (rows == N && in.shard_owner) Buf<T>().swap(*in.shard_owner);
    block(r0, rows);
  });
  if (in.shard_owner) Buf<T>().swap(*in.shard_owner);
  if (in.full16 && in.full_owner) Buf<T>().swap(*in.full_owner);
}

// The backward of a row-parallel linear y = x w (x [N, K], w [K, C]) under SP in pieces, from this rank's rows
// dy_loc [Nl, C] of its output gradient: dy all-gathered block by block (col_in_rows: cast as operand dy of linear
// `lin` under fp8, packed under bf16 storage), and for each block of rows as it arrives the weight gradient's share
// dw += x[rows]^T dy[rows] and the input gradient's rows dx[rows] = dy[rows] w^T. x / x16: the saved input (fp8: its
// cast); dx may be x's own buffer (each block's rows are read before they are written).
template <class T>
void row_linear_bwd_pieces(const Gpt<T>& g, int wl, int lin, T* dw, Q8<T> x, const uint16_t* x16, Q8<T> w,
                           const uint16_t* w16, const T* dy_loc, T* dx, long N, long K, long C, Buf<T>& qd) {
  Buf<T> full((size_t)(N * C));
  Buf<uint16_t> full16;
  if (g.pack_operands16) full16.resize((size_t)(N * C));
  ColIn<T> in;
  in.shard = dy_loc, in.full = full.data(), in.full16 = full16.empty() ? nullptr : full16.data();
  col_in_rows(g, in, N, C, qd, wl, lin, Fp8Operand::dy, [&](Q8<T> dy, const uint16_t* dy16, long r0, long rows) {
    gemm8(dw, q8_at(x, r0 * K), x16 ? x16 + r0 * K : nullptr, dy, dy16, K, C, rows, true, false, T(1));
    gemm8(dx + r0 * K, dy, dy16, w, w16, rows, K, C, false, true, T(0));
  });
}

}  // namespace tp::exec
