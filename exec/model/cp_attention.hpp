// cp_attention: context parallelism in the executor (Megatron-LM --context-parallel-size with
// --cp-comm-type all_gather), the semantics the simulator costs (sim/op_cost.cpp, models/plan.hpp).
// A sequence of T tokens is cut into 2 cp chunks of Lc = T / (2 cp) tokens; cp rank r holds chunks r and
// 2 cp - 1 - r (causal load balancing), as its local sequence of Tl = T / cp rows [chunk r | chunk 2cp-1-r].
// Everything per token (embedding, LayerNorm, MLP, the LM head and its loss) runs on the local rows unchanged;
// learned positions are looked up by GLOBAL position. Attention: the K and V of the local rows (this tp rank's
// kv heads) are all-gathered over the cp group and put back in global order; each local query chunk c attends
// the keys of positions [0, (c + 1) Lc) with the causal mask of global positions (ops::attention_fwd_kv,
// mask aligned bottom-right). The backward gathers K and V again (nothing of the gathered sequence is kept
// between forward and backward, as the simulator costs it) and reduce-scatters dK, dV back to their owners.
// Collectives are the communicator's rank-ordered ones (exec/comm/comm.hpp): reruns are bit-identical.
// Where it differs from the simulator's wording: the simulator costs the exchange as an all-gather over cp
// (a ring all-gather's bytes, overlapped with the attention); the executor issues one blocking all-gather
// (the same bytes, no overlap on the CPU).
// Invariants: T % (2 cp) == 0 (checked by check_runnable); buffers are the backend's (exec/model/gpt.hpp Buf), so
// tensor memory is touched only through ops:: (the collectives take them as host memory, exec/comm/comm.hpp).
#pragma once
#include <cstdint>
#include <vector>

#include "exec/comm/comm.hpp"

namespace tp::exec {

struct CpCtx {
  Comm* cp = nullptr;  // the cp group (cp ranks of one data-parallel replica, ordered by cp rank)
  int size = 1, rank = 0;
  long T = 0;          // the global sequence length
  bool flash = false;  // plan.attention "flash": the attention saves row statistics, not probabilities
  long Lc() const { return T / (2 * size); }
  long Tl() const { return T / size; }
  // The global chunk of local half h (0: rows [0, Lc), 1: rows [Lc, 2 Lc)).
  long chunk(int h) const { return h == 0 ? rank : 2L * size - 1 - rank; }
  // The global position of local row t of a sequence.
  long global_pos(long t) const { return chunk(t < Lc() ? 0 : 1) * Lc() + t % Lc(); }
  // Elements of the saved attention state of B sequences with Hl local query heads: the probabilities, or under
  // flash each local query row's two statistics.
  long att_elems(long B, long Hl) const { return flash ? B * Hl * Tl() * 2 : B * Hl * Lc() * Lc() * (2L * size + 1); }
};

// This cp rank's tokens of B full sequences: local[b, t] = full[b, global_pos(t)] (host arrays, [B, T] -> [B, Tl]).
void cp_select_tokens(const CpCtx& c, const int32_t* full, int32_t* local, long B);

// x[rows, C] += wpe[global position of each row]; the rows are local rows [row0, row0 + rows) of the
// flattened [B, Tl] (a sequence-parallel shard when row0 > 0). positions_bwd: dwpe[...] += dx[rows, C].
template <class T>
void cp_add_positions(const CpCtx& c, T* x, const T* wpe, long rows, long C, long row0);
template <class T>
void cp_positions_bwd(const CpCtx& c, T* dwpe, const T* dx, long rows, long C, long row0);

// out [B, Tl, Hl, D] and att (att_elems(B, Hl)) from the local q [B, Tl, Hl, D] and the local k, v
// [B, Tl, Kl, D]: the causal attention of the local queries over the whole sequence's keys (ops::attention_fwd_kv,
// or ops::flash_attention_fwd when c.flash).
template <class T>
void cp_attention_fwd(const CpCtx& c, T* out, T* att, const T* q, const T* k, const T* v, long B, long Hl, long Kl,
                      long D);
// dq, dk, dv (local shapes) += the gradients; dk, dv collect every cp rank's contribution to this rank's keys.
// out: the forward's output (read under flash only; may be null otherwise).
template <class T>
void cp_attention_bwd(const CpCtx& c, T* dq, T* dk, T* dv, const T* dout, const T* out, const T* att, const T* q,
                      const T* k, const T* v, long B, long Hl, long Kl, long D);

}  // namespace tp::exec
