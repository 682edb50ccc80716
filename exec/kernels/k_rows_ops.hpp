// k_rows_ops: the row and column ops of exec/backends/ops.def (bias add and its column sums, LayerNorm, softmax
// cross-entropy, the row maxima, the embeddings) bridged onto the kernels of k_elementwise.hpp, k_rows.hpp and
// k_reduce.hpp once, for every backend that launches kernels (emu with g++ on the CPU block emulator, CUDA with
// nvcc; the runner: k_runner.hpp). NAME_op takes the runner, then exactly the op's arguments.
// Invariants: every argument is checked (R::check) before any kernel; an empty op launches nothing; the LayerNorm
// backward is two kernels (dx by rows, dw / db by columns, docs/kernels.md); column sums use the runner's scratch.
#pragma once
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "exec/kernels/k_bridge.hpp"
#include "exec/kernels/k_fused.hpp"
#include "exec/kernels/k_runner.hpp"

namespace tp::kernels {

template <class R, class T>
void add_bias_op(const R& r, T* y, const T* x, const T* b, long N, long C, const T* res) {
  r.run("add_bias", {{"N", N}, {"C", C}, {"residual", res != nullptr}}, [&] {
    r.check("add_bias", "y", y, bytes_of<T>(N * C));
    r.check("add_bias", "x", x, bytes_of<T>(N * C));
    r.check("add_bias", "b", b, bytes_of<T>(C));
    check_opt(r, "add_bias", "r", res, bytes_of<T>(N * C));
    if (N * C > 0) add_bias(r.launch(), y, x, b, N, C, res);
  });
}
template <class R, class T>
void bias_bwd_op(const R& r, T* db, const T* dy, long N, long C, uint16_t* dy16) {
  r.run(dy16 ? "bias_bwd16" : "bias_bwd", {{"N", N}, {"C", C}}, [&] {
    r.check("bias_bwd", "db", db, bytes_of<T>(C));
    r.check("bias_bwd", "dy", dy, bytes_of<T>(N * C));
    check_opt(r, "bias_bwd", "dy16", dy16, bytes_of<uint16_t>(N * C));
    if (N <= 0 || C <= 0) return;
    acc_t<T>* scratch = column_scratch_of<T>(r, N, C);
    if (dy16) bias_bwd16(r.launch(), db, reinterpret_cast<bf16*>(dy16), dy, N, C, scratch);
    else bias_bwd(r.launch(), db, dy, N, C, scratch);
  });
}

// LayerNorm forward's checks (y of element type Y: T, or uint16_t for layernorm_fwd16).
template <class R, class Y, class T>
void layernorm_fwd_check(const R& r, const char* op, const Y* y, const T* mean, const T* rstd, const T* x, const T* w,
                         const T* b, long N, long C) {
  r.check(op, "y", y, bytes_of<Y>(N * C));
  r.check(op, "mean", mean, bytes_of<T>(N));
  r.check(op, "rstd", rstd, bytes_of<T>(N));
  r.check(op, "x", x, bytes_of<T>(N * C));
  r.check(op, "w", w, bytes_of<T>(C));
  check_opt(r, op, "b", b, bytes_of<T>(C));
}
template <class R, class T>
void layernorm_fwd_op(const R& r, T* y, T* mean, T* rstd, const T* x, const T* w, const T* b, long N, long C, T eps) {
  r.run("layernorm_fwd", {{"N", N}, {"C", C}}, [&] {
    layernorm_fwd_check(r, "layernorm_fwd", y, mean, rstd, x, w, b, N, C);
    if (N > 0 && C > 0) layernorm_fwd(r.launch(), y, mean, rstd, x, w, b, N, C, eps);
  });
}
// fp32: the bf16-writing kernel; fp64: through T in scratch, then pack_bf16's rounding from double.
template <class R, class T>
void layernorm_fwd16_op(const R& r, uint16_t* y16, T* mean, T* rstd, const T* x, const T* w, const T* b, long N, long C,
                        T eps) {
  r.run("layernorm_fwd16", {{"N", N}, {"C", C}}, [&] {
    layernorm_fwd_check(r, "layernorm_fwd16", y16, mean, rstd, x, w, b, N, C);
    if (N <= 0 || C <= 0) return;
    bf16* y = reinterpret_cast<bf16*>(y16);
    if constexpr (std::is_same_v<T, float>) {
      layernorm_fwd16(r.launch(), y, mean, rstd, x, w, b, N, C, eps);
    } else {
      T* yt = static_cast<T*>(r.scratch(sizeof(T) * size_t(N * C)));
      layernorm_fwd(r.launch(), yt, mean, rstd, x, w, b, N, C, eps);
      pack_bf16(r.launch(), y, yt, N * C);
    }
  });
}
// layernorm_bwd and layernorm_bwd16: x stored as X (T, or bf16).
template <class R, class T, class X>
void layernorm_bwd_any(const R& r, const char* op, T* dx, T* dw, T* db, const T* dy, const X* x, const T* w,
                       const T* mean, const T* rstd, long N, long C) {
  r.run(op, {{"N", N}, {"C", C}}, [&] {
    r.check(op, "dx", dx, bytes_of<T>(N * C));
    r.check(op, "dw", dw, bytes_of<T>(C));
    check_opt(r, op, "db", db, bytes_of<T>(C));
    r.check(op, "dy", dy, bytes_of<T>(N * C));
    r.check(op, "x", x, bytes_of<X>(N * C));
    r.check(op, "w", w, bytes_of<T>(C));
    r.check(op, "mean", mean, bytes_of<T>(N));
    r.check(op, "rstd", rstd, bytes_of<T>(N));
    if (N <= 0 || C <= 0) return;
    layernorm_bwd_dx(r.launch(), dx, dy, x, w, mean, rstd, N, C);
    layernorm_bwd_wb(r.launch(), dw, db, dy, x, mean, rstd, N, C, column_scratch_of<T>(r, N, C));
  });
}
template <class R, class T>
void layernorm_bwd_op(const R& r, T* dx, T* dw, T* db, const T* dy, const T* x, const T* w, const T* mean,
                      const T* rstd, long N, long C) {
  layernorm_bwd_any(r, "layernorm_bwd", dx, dw, db, dy, x, w, mean, rstd, N, C);
}
template <class R, class T>
void layernorm_bwd16_op(const R& r, T* dx, T* dw, T* db, const T* dy, const uint16_t* x16, const T* w, const T* mean,
                        const T* rstd, long N, long C) {
  layernorm_bwd_any(r, "layernorm_bwd16", dx, dw, db, dy, reinterpret_cast<const bf16*>(x16), w, mean, rstd, N, C);
}

// The kernel writes one loss per row into scratch (after the total); one block sums them in double, read back.
// The loss total in double at `out` (cross_entropy_fwd_to: device memory the caller gives) or in the op's scratch
// (cross_entropy_fwd, which reads it back); returns where. N = 0 writes 0.
template <class R, class T>
double* cross_entropy_fwd_any(const R& r, const char* op, T* probs, double* out, const T* logits,
                              const int32_t* targets, long N, long V) {
  r.check(op, "probs", probs, bytes_of<T>(N * V));
  r.check(op, "logits", logits, bytes_of<T>(N * V));
  r.check(op, "targets", targets, bytes_of<int32_t>(N));
  double* sum = static_cast<double*>(r.scratch(sizeof(double) + sizeof(T) * size_t(N > 0 ? N : 0)));
  T* loss = reinterpret_cast<T*>(sum + 1);
  const auto& l = r.launch();
  if (N > 0) cross_entropy_fwd(l, probs, loss, logits, targets, N, V);
  if (out) sum = out;
  l(SumToDouble<T>{sum, loss, N > 0 ? N : 0}, Dim{1, l.block, kReduceSlots * 8});
  return sum;
}
template <class R, class T>
T cross_entropy_fwd_op(const R& r, T* probs, const T* logits, const int32_t* targets, long N, long V) {
  const char* op = "cross_entropy_fwd";
  double total = 0;
  r.run(op, {{"N", N}, {"V", V}}, [&] {
    if (N <= 0) return;
    total = r.read_back(cross_entropy_fwd_any(r, op, probs, static_cast<double*>(nullptr), logits, targets, N, V));
  });
  return T(total);
}
template <class R, class T>
void cross_entropy_fwd_to_op(const R& r, T* probs, double* loss, const T* logits, const int32_t* targets, long N,
                             long V) {
  const char* op = "cross_entropy_fwd_to";
  r.run(op, {{"N", N}, {"V", V}}, [&] {
    r.check(op, "loss", loss, sizeof(double));
    cross_entropy_fwd_any(r, op, probs, loss, logits, targets, N, V);
  });
}
template <class R, class T>
void cross_entropy_bwd_op(const R& r, T* dlogits, const T* probs, const int32_t* targets, long N, long V, T scale) {
  const char* op = "cross_entropy_bwd";
  r.run(op, {{"N", N}, {"V", V}}, [&] {
    r.check(op, "dlogits", dlogits, bytes_of<T>(N * V));
    r.check(op, "probs", probs, bytes_of<T>(N * V));
    r.check(op, "targets", targets, bytes_of<int32_t>(N));
    if (N > 0 && V > 0) cross_entropy_bwd<false>(r.launch(), dlogits, probs, targets, N, V, 0, scale);
  });
}
template <class R, class T>
void row_max_op(const R& r, T* mx, const T* x, long N, long V) {
  r.run("row_max", {{"N", N}, {"V", V}}, [&] {
    r.check("row_max", "mx", mx, bytes_of<T>(N));
    r.check("row_max", "x", x, bytes_of<T>(N * V));
    if (N > 0) ce_shard_max(r.launch(), mx, x, N, V);
  });
}

inline constexpr long kAllVocab = long(1) << 40;  // "every id is in the shard": the unsharded embedding ops
template <class R, class T>
void embedding_fwd_op(const R& r, T* out, const int32_t* tokens, const T* wte, const T* wpe, long B, long Tn, long C) {
  const char* op = "embedding_fwd";
  r.run(op, {{"B", B}, {"T", Tn}, {"C", C}}, [&] {
    r.check(op, "out", out, bytes_of<T>(B * Tn * C));
    r.check(op, "tokens", tokens, bytes_of<int32_t>(B * Tn));
    r.check(op, "wte", wte, bytes_of<T>(C));  // the vocabulary size is not an argument: at least one row
    check_opt(r, op, "wpe", wpe, bytes_of<T>(Tn * C));
    if (B * Tn * C > 0) embedding_fwd(r.launch(), out, tokens, wte, wpe, B, Tn, C, 0, kAllVocab);
  });
}
template <class R, class T>
void embedding_bwd_op(const R& r, T* dwte, T* dwpe, const T* dout, const int32_t* tokens, long B, long Tn, long C) {
  const char* op = "embedding_bwd";
  r.run(op, {{"B", B}, {"T", Tn}, {"C", C}}, [&] {
    check_opt(r, op, "dwte", dwte, bytes_of<T>(C));
    check_opt(r, op, "dwpe", dwpe, bytes_of<T>(Tn * C));
    r.check(op, "dout", dout, bytes_of<T>(B * Tn * C));
    r.check(op, "tokens", tokens, bytes_of<int32_t>(B * Tn));
    if (B * Tn * C > 0)
      embedding_bwd(r.launch(), dwte, dwpe, dout, tokens, B, Tn, C, 0, kAllVocab, embedding_scratch_of(r, dwte ? B * Tn : 0));
  });
}
// The shard's rows: dwte_shard[tokens[n] - v0] += dout[n] for tokens in [v0, v0 + Vl) (the kernel's own contract).
template <class R, class T>
void embedding_shard_bwd_op(const R& r, T* dwte_shard, const T* dout, const int32_t* tokens, long N, long C, long v0,
                            long Vl) {
  const char* op = "embedding_shard_bwd";
  r.run(op, {{"N", N}, {"C", C}, {"v0", v0}, {"Vl", Vl}}, [&] {
    r.check(op, "dwte_shard", dwte_shard, bytes_of<T>(Vl * C));
    r.check(op, "dout", dout, bytes_of<T>(N * C));
    r.check(op, "tokens", tokens, bytes_of<int32_t>(N));
    if (N * C > 0)
      embedding_bwd(r.launch(), dwte_shard, static_cast<T*>(nullptr), dout, tokens, 1, N, C, v0, Vl, embedding_scratch_of(r, N));
  });
}

}  // namespace tp::kernels
