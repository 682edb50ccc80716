// k_shard_ops: the sharded ops of exec/backends/ops.hpp bridged onto the kernels of k_bridge.hpp once, for every
// backend that launches kernels (the runner, k_runner.hpp): the column-split LayerNorm steps of 2D tensor
// parallelism, the vocabulary-parallel cross-entropy steps (CeForm), the sharded embedding and the positions. The
// emu backend runs them on the CPU block emulator (exec/backends/emu/backend_emu.cpp's table), the CUDA library on
// the GPU (exec/kernels/cuda/kernels.cu).
// Form is ops::CeForm (exec/backends/ops.hpp, above this layer: taken as a template parameter). NAME_op takes the
// runner, then exactly the op's arguments.
// Invariants: every argument is checked (R::check) before any kernel; ce_shard_finish's scratch is the total
// [1] then the per-row losses [N] (doubles), the total read back.
#pragma once
#include <cstddef>
#include <cstdint>

#include "exec/kernels/k_bridge.hpp"
#include "exec/kernels/k_runner.hpp"

namespace tp::kernels {

// The rows-per-block grid of a row kernel over n rows (accumulating in acc_t<T>).
template <class R, class T>
Dim shard_rows(const R& r, long n) {
  return row_dim(r.launch(), n, sizeof(acc_t<T>));
}

template <class R, class T>
void ln_shard_sum_op(const R& r, T* sum, const T* x, long N, long Cl) {
  const char* op = "ln_shard_sum";
  r.run(op, {{"rows", N}, {"cols", Cl}}, [&] {
    r.check(op, "sum", sum, bytes_of<T>(N));
    r.check(op, "x", x, bytes_of<T>(N * Cl));
    if (N > 0) r.launch()(LnShardRow<T, false>{sum, nullptr, nullptr, x, N, Cl, 1}, shard_rows<R, T>(r, N));
  });
}

template <class R, class T>
void ln_shard_sqdev_op(const R& r, T* sqdev, T* mean, const T* sum, const T* x, long N, long Cl, long C) {
  const char* op = "ln_shard_sqdev";
  r.run(op, {{"rows", N}, {"cols", Cl}}, [&] {
    r.check(op, "sqdev", sqdev, bytes_of<T>(N));
    r.check(op, "mean", mean, bytes_of<T>(N));
    r.check(op, "sum", sum, bytes_of<T>(N));
    r.check(op, "x", x, bytes_of<T>(N * Cl));
    if (N > 0) r.launch()(LnShardRow<T, true>{sqdev, mean, sum, x, N, Cl, C}, shard_rows<R, T>(r, N));
  });
}

template <class R, class T>
void ln_shard_apply_op(const R& r, T* y, T* rstd, const T* x, const T* mean, const T* sqdev, const T* w, const T* b,
                       long N, long Cl, long C, T eps) {
  const char* op = "ln_shard_apply";
  r.run(op, {{"rows", N}, {"cols", Cl}}, [&] {
    r.check(op, "y", y, bytes_of<T>(N * Cl));
    r.check(op, "rstd", rstd, bytes_of<T>(N));
    r.check(op, "x", x, bytes_of<T>(N * Cl));
    r.check(op, "mean", mean, bytes_of<T>(N));
    r.check(op, "sqdev", sqdev, bytes_of<T>(N));
    r.check(op, "w", w, bytes_of<T>(Cl));
    check_opt(r, op, "b", b, bytes_of<T>(Cl));
    if (N * Cl > 0)
      r.launch()(LnShardApply<T>{y, rstd, x, mean, sqdev, w, b, N, Cl, C, eps}, flat_dim(r.launch(), N * Cl));
  });
}

template <class R, class T>
void ln_shard_bwd_sums_op(const R& r, T* sums, const T* dy, const T* x, const T* w, const T* mean, const T* rstd,
                          long N, long Cl) {
  const char* op = "ln_shard_bwd_sums";
  r.run(op, {{"rows", N}, {"cols", Cl}}, [&] {
    r.check(op, "sums", sums, bytes_of<T>(2 * N));
    r.check(op, "dy", dy, bytes_of<T>(N * Cl));
    r.check(op, "x", x, bytes_of<T>(N * Cl));
    r.check(op, "w", w, bytes_of<T>(Cl));
    r.check(op, "mean", mean, bytes_of<T>(N));
    r.check(op, "rstd", rstd, bytes_of<T>(N));
    if (N > 0) r.launch()(LnShardBwdSums<T>{sums, dy, x, w, mean, rstd, N, Cl}, shard_rows<R, T>(r, N));
  });
}

template <class R, class T>
void ln_shard_bwd_apply_op(const R& r, T* dx, T* dw, T* db, const T* dy, const T* x, const T* w, const T* mean,
                           const T* rstd, const T* sums, long N, long Cl, long C) {
  const char* op = "ln_shard_bwd_apply";
  r.run(op, {{"rows", N}, {"cols", Cl}}, [&] {
    r.check(op, "dx", dx, bytes_of<T>(N * Cl));
    r.check(op, "dw", dw, bytes_of<T>(Cl));
    check_opt(r, op, "db", db, bytes_of<T>(Cl));
    r.check(op, "dy", dy, bytes_of<T>(N * Cl));
    r.check(op, "x", x, bytes_of<T>(N * Cl));
    r.check(op, "w", w, bytes_of<T>(Cl));
    r.check(op, "mean", mean, bytes_of<T>(N));
    r.check(op, "rstd", rstd, bytes_of<T>(N));
    r.check(op, "sums", sums, bytes_of<T>(2 * N));
    if (N <= 0 || Cl <= 0) return;
    r.launch()(LnShardBwdDx<T>{dx, dy, x, w, mean, rstd, sums, N, Cl, C}, flat_dim(r.launch(), N * Cl));
    layernorm_bwd_wb(r.launch(), dw, db, dy, x, mean, rstd, N, Cl, column_scratch_of<T>(r, N, Cl));
  });
}

template <class R, class T>
void max_combine_op(const R& r, T* mx, const T* parts, long N, long P) {
  const char* op = "max_combine";
  r.run(op, {{"rows", N}, {"cols", P}}, [&] {
    r.check(op, "mx", mx, bytes_of<T>(N));
    r.check(op, "parts", parts, bytes_of<T>(N * P));
    if (N > 0) r.launch()(MaxCombine<T>{mx, parts, N, P}, flat_dim(r.launch(), N));
  });
}

template <class R, class T, class Form>
void ce_shard_exp_op(const R& r, T* probs, T* sum_exp, T* target, const T* logits, const T* mx, const int32_t* targets,
                     long N, long V, long v0, Form form) {
  const char* op = "ce_shard_exp";
  r.run(op, {{"rows", N}, {"cols", V}}, [&] {
    r.check(op, "probs", probs, bytes_of<T>(N * V));
    r.check(op, "sum_exp", sum_exp, bytes_of<T>(N));
    r.check(op, "target", target, bytes_of<T>(N));
    r.check(op, "logits", logits, bytes_of<T>(N * V));
    r.check(op, "mx", mx, bytes_of<T>(N));
    r.check(op, "targets", targets, bytes_of<int32_t>(N));
    if (N > 0)
      r.launch()(CeShardExp<T>{probs, sum_exp, target, logits, mx, targets, N, V, v0,
                               form == Form::shifted_target_reciprocal},
                 shard_rows<R, T>(r, N));
  });
}

// Per-row losses from the kernel, summed in double by one block, the total read back.
template <class R, class T, class Form>
double ce_shard_finish_op(const R& r, T* probs, const T* sum_exp, const T* target, const T* mx, long N, long V,
                          Form form) {
  const char* op = "ce_shard_finish";
  double total = 0;
  r.run(op, {{"rows", N}, {"cols", V}}, [&] {
    r.check(op, "probs", probs, bytes_of<T>(N * V));
    r.check(op, "sum_exp", sum_exp, bytes_of<T>(N));
    r.check(op, "target", target, bytes_of<T>(N));
    r.check(op, "mx", mx, bytes_of<T>(N));
    if (N <= 0) return;
    double* loss = static_cast<double*>(r.scratch(sizeof(double) * (size_t(N) + 1)));
    const auto& l = r.launch();
    l(CeShardFinish<T>{probs, loss + 1, sum_exp, target, mx, N, V, form == Form::shifted_target_reciprocal},
      Dim{blocks_for(N, 1, l.max_grid), l.block, 0});
    l(SumToDouble<double>{loss, loss + 1, N}, Dim{1, l.block, kReduceSlots * 8});
    total = r.read_back(loss);
  });
  return total;
}

template <class R, class T>
void ce_shard_target_grad_op(const R& r, T* dlogits, const int32_t* targets, long N, long V, long v0, T scale) {
  const char* op = "ce_shard_target_grad";
  r.run(op, {{"rows", N}, {"cols", V}}, [&] {
    r.check(op, "dlogits", dlogits, bytes_of<T>(N * V));
    r.check(op, "targets", targets, bytes_of<int32_t>(N));
    if (N > 0) r.launch()(CeShardTargetGrad<T>{dlogits, targets, N, V, v0, scale}, flat_dim(r.launch(), N));
  });
}

template <class R, class T>
void ce_grad16_op(const R& r, uint16_t* dl16, const T* probs, const int32_t* targets, long N, long V, long v0, T scale) {
  const char* op = "ce_grad16";
  r.run(op, {{"rows", N}, {"cols", V}}, [&] {
    r.check(op, "dl16", dl16, bytes_of<uint16_t>(N * V));
    r.check(op, "probs", probs, bytes_of<T>(N * V));
    r.check(op, "targets", targets, bytes_of<int32_t>(N));
    if (N * V > 0)
      r.launch()(CeGrad16<T>{reinterpret_cast<bf16*>(dl16), probs, targets, N, V, v0, scale},
                 Dim{blocks_for(N, 1, r.launch().max_grid), r.launch().block, 0});
  });
}

template <class R, class T>
void embedding_shard_fwd_op(const R& r, T* out, const int32_t* tokens, const T* wte, long N, long C, long v0, long Vl) {
  const char* op = "embedding_shard_fwd";
  r.run(op, {{"rows", N}, {"cols", C}}, [&] {
    r.check(op, "out", out, bytes_of<T>(N * C));
    r.check(op, "tokens", tokens, bytes_of<int32_t>(N));
    r.check(op, "wte_shard", wte, bytes_of<T>(Vl * C));
    if (N * C > 0) r.launch()(EmbeddingShardFwd<T>{out, tokens, wte, N, C, v0, Vl}, flat_dim(r.launch(), N * C));
  });
}

template <class R, class T>
void embedding_shard_fwd16_op(const R& r, T* out, const int32_t* tokens, const uint16_t* wte16, long N, long C, long v0,
                              long Vl) {
  const char* op = "embedding_shard_fwd16";
  r.run(op, {{"rows", N}, {"cols", C}}, [&] {
    r.check(op, "out", out, bytes_of<T>(N * C));
    r.check(op, "tokens", tokens, bytes_of<int32_t>(N));
    r.check(op, "wte16_shard", wte16, bytes_of<uint16_t>(Vl * C));
    if (N * C > 0)
      r.launch()(EmbeddingShardFwd<T, bf16>{out, tokens, reinterpret_cast<const bf16*>(wte16), N, C, v0, Vl},
                 flat_dim(r.launch(), N * C));
  });
}

template <class R, class T>
void add_positions_op(const R& r, T* x, const T* wpe, long rows, long C, long Tn, long row0) {
  const char* op = "add_positions";
  r.run(op, {{"rows", rows}, {"cols", C}}, [&] {
    r.check(op, "x", x, bytes_of<T>(rows * C));
    r.check(op, "wpe", wpe, bytes_of<T>(Tn * C));
    if (rows * C > 0) r.launch()(AddPositions<T>{x, wpe, rows, C, Tn, row0}, flat_dim(r.launch(), rows * C));
  });
}

template <class R, class T>
void positions_bwd_op(const R& r, T* dwpe, const T* dx, long rows, long C, long Tn, long row0) {
  const char* op = "positions_bwd";
  r.run(op, {{"rows", rows}, {"cols", C}}, [&] {
    r.check(op, "dwpe", dwpe, bytes_of<T>(Tn * C));
    r.check(op, "dx", dx, bytes_of<T>(rows * C));
    if (rows * C > 0) r.launch()(PositionsBwd<T>{dwpe, dx, rows, C, Tn, row0}, flat_dim(r.launch(), Tn * C));
  });
}

}  // namespace tp::kernels
