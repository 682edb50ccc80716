// gpt2d: the executor's GPT with Optimus 2D tensor parallelism (SUMMA on a q x q grid, tp = q^2), the same
// model as exec/model/gpt.hpp (same parameter names, same initialisation, same numbers up to summation order) and the
// same piece API (embed / layer / head forward and backward), so the runtime composes it the same way.
//
// Grid: tp rank k sits at (r, c) = grid_pos(k, q, 1) = (k / q, k % q). `row` is the communicator of the q ranks
// of grid row r ordered by column (row->rank() == c); `col` is the q ranks of grid column c ordered by row
// (col->rank() == r). Null communicators are allowed only for q = 1.
//
// Activations of one micro-batch of B sequences x Tn tokens on rank (r, c): [B/q, Tn, C/q] = sequences
// [r B/q, (r+1) B/q) and hidden columns [c C/q, (c+1) C/q). The pieces take the FULL micro-batch tokens /
// targets [B, Tn] (every tp rank gets the same micro-batch) and select grid row r's sequences; every x / dx
// buffer passed between pieces is the LOCAL block [(B/q) Tn, C/q] (Gpt2dLayout::act_rows / act_cols).
//
// Parameters (flat buffer, module order and names as in GptLayout; matrices are the (r, c) block of the full
// [in, out] matrix, in / q rows by out / q columns):
//  - wte [Vb, C/q], Vb = ceil(V / q): vocabulary block r (rows [v_begin(r), + v_len(r)), V split as evenly as it
//    goes), hidden columns [c C/q, ..). Blocks shorter than Vb end in padding rows (SUMMA moves equal blocks):
//    zero, never looked up, their logits dropped before the softmax, so their gradient is zero and they stay
//    zero; they are no element of the full model (shard_params_2d writes zeros, gather_grads_2d skips them).
//  - qkv_w [C/q, (H + 2 Hkv) D / q]: the full QKV columns are permuted as [for each grid column c: Q heads
//    [c H/q, (c+1) H/q) | K heads [c Hkv/q, ..) | V heads [c Hkv/q, ..)] before blocking, so grid column c
//    owns whole heads and its local QKV output is exactly the 1D tp = q, tp_rank = c layout (H, Hkv % q == 0).
//  - proj_w [H D/q, C/q]: natural blocks (the attention output of grid column c is full columns
//    [c H D/q, ..), i.e. block column c of the [N, H D] attention output).
//  - fc1_w [C/q, F/q] (GELU) or [C/q, 2F/q] (SwiGLU: [gate cols c F/q.. | up cols c F/q..]); fc2_w [F/q, C/q].
//  - COLUMN-REPLICATED tensors (col_replicated[i]): biases (qkv_b, proj_b, fc1_b, fc2_b), LayerNorm weights
//    and biases (ln1_*, ln2_*, lnf_*) and the position table wpe [maxT, C/q] hold the [.. /q] slice of grid
//    column c and are stored on EVERY grid row, but only grid row 0's copy is the parameter: every use
//    broadcasts row 0's copy along the column (the copies on rows != 0 are never read), and their gradients are
//    reduce-summed along the column into row 0's gradient (rows != 0 never write them: they stay as zeroed).
//    => The optimizer may update every copy (harmless) or skip the non-owned ones; the gradient norm must count
//    a view only where Gpt2dLayout::owned(i) (every matrix everywhere, replicated ones on grid row 0).
//
// Loss: head_fwd returns the loss SUM over all B Tn tokens of the micro-batch on every rank (row all-reduces
// inside the cross-entropy, then a column all-reduce), like Gpt::head_fwd on a tp group. head_bwd's `scale`
// multiplies d(loss sum) as in Gpt.
// Communication: SUMMA products use Comm::broadcast / reduce_sum (rank-ordered sums), LayerNorm and
// cross-entropy use row all-reduces (the row max via all_gather), so every run gives the same bits.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "exec/comm/comm.hpp"
#include "exec/model/gpt.hpp"

namespace tp::exec {

struct Gpt2dLayout {
  GptShape s;           // the FULL model shape (s.tp = 1, s.tp_rank = 0); local sizes below
  int q = 1, tp_rank = 0, row = 0, col = 0;
  std::vector<ParamView> views;          // same names / order / decay flags as gpt_layout(s)
  std::vector<char> col_replicated;      // per view: a column slice kept on every grid row (row 0 owns it)
  long long total = 0;
  std::vector<long long> layer_begin, layer_end;  // per layer: [begin, end) in the flat buffer
  std::vector<long long> expert_begin;            // = layer_end (no MoE layers in 2D; GptLayout's meaning)
  long long embed_begin = 0, embed_end = 0, head_begin = 0, head_end = 0;
  ViewNames names;
  ModelParams params;  // the views by role
  const ParamView& view(const std::string& name) const { return views[view_index(name)]; }
  size_t view_index(const std::string& name) const { return names.find(name); }
  // True when view i is a parameter of this rank (count it in norms, checkpoints): not column-replicated,
  // or this rank is on grid row 0.
  bool owned(size_t i) const { return !col_replicated[i] || row == 0; }

  long long c_loc() const { return s.C / q; }
  long long h_loc() const { return s.H / q; }
  long long hkv_loc() const { return s.Hkv / q; }
  long long f_loc() const { return s.F / q; }
  long long v_blk() const { return (s.V + q - 1) / q; }  // rows of every wte block, padding included
  long long v_begin(long long i) const { return i * (s.V / q) + std::min<long long>(i, s.V % q); }  // block i's rows
  long long v_len(long long i) const { return s.V / q + (i < s.V % q ? 1 : 0); }
  long long qkv_cols() const { return (h_loc() + 2 * hkv_loc()) * s.D; }
  long long fc1_cols() const { return (s.gelu ? 1 : 2) * f_loc(); }
  // Local activation block of a micro-batch of B sequences (B % q == 0): act_rows x act_cols.
  long long act_rows(long long B, long long Tn) const { return B / q * Tn; }
  long long act_cols() const { return c_loc(); }
};
// Layout of tp rank `tp_rank` (grid (tp_rank / q, tp_rank % q)) for the full shape `full` (full.tp must be 1).
// Throws std::invalid_argument unless q >= 1 divides C, H, Hkv and F, and V >= q.
Gpt2dLayout gpt2d_layout(const GptShape& full, int q, int tp_rank);

// This rank's blocks of full (tp = 1, layout `full`) tensors: parameters from init_full_params (so a 2D run
// starts from the single-rank weights), or any full gradient. Column-replicated slices are filled on every row.
template <class T>
std::vector<T> shard_params_2d(const GptLayout& full, const std::vector<T>& full_params, const Gpt2dLayout& lay);
// One view of it: view v of `lay` from its full view's elements (src: the full view's first element).
template <class T>
void shard_view_2d(const Gpt2dLayout& lay, const ParamView& v, const T* src, T* dst);
// Inverse: the full (layout `full`) tensor assembled from every tp rank's owned blocks of `local` (lay.total
// elements), returned on every rank of `tp` (the q^2 ranks of the grid; an all-reduce of disjoint blocks, so it
// is exact). Collective over `tp`.
template <class T>
std::vector<T> gather_grads_2d(const GptLayout& full, const Gpt2dLayout& lay, const T* local, Comm& tp);

template <class T>
struct Gpt2d : ParamTables<T> {
  Gpt2dLayout lay;
  bool flash = false;       // plan.attention "flash": as Gpt::flash (LayerActs::att holds the row statistics)
  Fp8State* fp8 = nullptr;  // precision fp8: the SUMMA operands of the four linears cast (exec/model/fp8.hpp)
  Comm* row = nullptr;  // grid row r, ordered by column (size q)
  Comm* col = nullptr;  // grid column c, ordered by row (size q)

  T* p(const std::string& name) const { return this->param_of(lay, name); }
  T* g(const std::string& name) const { return this->grad_of(lay, name); }
  T* p(int view) const { return this->param_at(lay, view); }
  T* g(int view) const { return this->grad_at(lay, view); }

  // x[(B/q) Tn, C/q] = this rank's block of the embedding of tokens [B, Tn] (the full micro-batch).
  void embed_fwd(T* x, const int32_t* tokens, long B, long Tn) const;
  void embed_bwd(const T* dx, const int32_t* tokens, long B, long Tn) const;
  // One block on local blocks x_in, x_out [(B/q) Tn, C/q]; weights of layer `wl`. Activations in `a` are local.
  void layer_fwd(int wl, const T* x_in, T* x_out, LayerActs<T>& a, long B, long Tn) const;
  // dx_in (local block, overwritten) from dx_out (dx_in may be dx_out: in place); accumulates weight gradients.
  void layer_bwd(int wl, const T* dx_out, T* dx_in, LayerActs<T>& a, long B, long Tn) const;
  // Final norm, tied head, cross-entropy over targets [B, Tn] (full micro-batch): the loss SUM over all B Tn
  // tokens, the same on every rank of the grid.
  T head_fwd(const T* x, const int32_t* targets, HeadActs<T>& a, long B, long Tn) const;
  // dx (local block, overwritten) from the loss sum scaled by `scale`.
  void head_bwd(T* dx, const int32_t* targets, HeadActs<T>& a, long B, long Tn, T scale) const;
};

}  // namespace tp::exec
