// ops: the dispatch of every exec/backends/ops.hpp function through the calling thread's current backend
// (exec/backends/backend.hpp). One indirect call per op; no work and no memory access here.
#include "exec/backends/ops.hpp"

#include "exec/backends/backend.hpp"

namespace tp::ops {
namespace {
template <class T>
const exec::OpTable<T>& tab() { return exec::current_backend().ops<T>(); }
}  // namespace

template <class T>
void matmul(T* C, const T* A, const T* B, long M, long N, long K, bool trans_a, bool trans_b, T alpha, T beta) {
  tab<T>().matmul(C, A, B, M, N, K, trans_a, trans_b, alpha, beta);
}
template <class T>
void matmul16(T* C, const T* A, const uint16_t* A16, const T* B, const uint16_t* B16, long M, long N, long K,
              bool trans_a, bool trans_b, T alpha, T beta) {
  tab<T>().matmul16(C, A, A16, B, B16, M, N, K, trans_a, trans_b, alpha, beta);
}
template <class T>
void linear_fwd(T* y, T* pre, const T* x, const uint16_t* x16, const T* w, const uint16_t* w16, const T* b, long M,
                long N, long K) {
  tab<T>().linear_fwd(y, pre, x, x16, w, w16, b, M, N, K);
}
template <class T>
void add_bias(T* y, const T* x, const T* b, long N, long C, const T* r) { tab<T>().add_bias(y, x, b, N, C, r); }
template <class T>
void bias_bwd(T* db, const T* dy, long N, long C, uint16_t* dy16) { tab<T>().bias_bwd(db, dy, N, C, dy16); }
template <class T>
void add(T* y, const T* a, const T* b, long n) { tab<T>().add(y, a, b, n); }
template <class T>
void accumulate(T* y, const T* x, long n) { tab<T>().accumulate(y, x, n); }
template <class T>
void scale(T* y, const T* x, T s, long n) { tab<T>().scale(y, x, s, n); }
template <class T>
void fill(T* y, T value, long n) { tab<T>().fill(y, value, n); }
template <class T>
void copy(T* dst, const T* src, long n) { tab<T>().copy(dst, src, n); }
template <class T>
void copy_rows(T* dst, long dst_stride, const T* src, long src_stride, long rows, long cols) {
  tab<T>().copy_rows(dst, dst_stride, src, src_stride, rows, cols);
}
template <class T>
void pack_bf16(uint16_t* y, const T* x, long n) { tab<T>().pack_bf16(y, x, n); }
template <class T>
void unpack_bf16(T* y, const uint16_t* x, long n) { tab<T>().unpack_bf16(y, x, n); }
template <class T>
void layernorm_fwd(T* y, T* mean, T* rstd, const T* x, const T* w, const T* b, long N, long C, T eps) {
  tab<T>().layernorm_fwd(y, mean, rstd, x, w, b, N, C, eps);
}
template <class T>
void layernorm_fwd16(uint16_t* y16, T* mean, T* rstd, const T* x, const T* w, const T* b, long N, long C, T eps) {
  tab<T>().layernorm_fwd16(y16, mean, rstd, x, w, b, N, C, eps);
}
template <class T>
void layernorm_bwd(T* dx, T* dw, T* db, const T* dy, const T* x, const T* w, const T* mean, const T* rstd, long N,
                   long C) {
  tab<T>().layernorm_bwd(dx, dw, db, dy, x, w, mean, rstd, N, C);
}
template <class T>
void layernorm_bwd16(T* dx, T* dw, T* db, const T* dy, const uint16_t* x16, const T* w, const T* mean, const T* rstd,
                     long N, long C) {
  tab<T>().layernorm_bwd16(dx, dw, db, dy, x16, w, mean, rstd, N, C);
}
template <class T>
void ln_shard_sum(T* sum, const T* x, long N, long Cl) { tab<T>().ln_shard_sum(sum, x, N, Cl); }
template <class T>
void ln_shard_sqdev(T* sqdev, T* mean, const T* sum, const T* x, long N, long Cl, long C) {
  tab<T>().ln_shard_sqdev(sqdev, mean, sum, x, N, Cl, C);
}
template <class T>
void ln_shard_apply(T* y, T* rstd, const T* x, const T* mean, const T* sqdev, const T* w, const T* b, long N,
                    long Cl, long C, T eps) {
  tab<T>().ln_shard_apply(y, rstd, x, mean, sqdev, w, b, N, Cl, C, eps);
}
template <class T>
void ln_shard_bwd_sums(T* sums, const T* dy, const T* x, const T* w, const T* mean, const T* rstd, long N, long Cl) {
  tab<T>().ln_shard_bwd_sums(sums, dy, x, w, mean, rstd, N, Cl);
}
template <class T>
void ln_shard_bwd_apply(T* dx, T* dw, T* db, const T* dy, const T* x, const T* w, const T* mean, const T* rstd,
                        const T* sums, long N, long Cl, long C) {
  tab<T>().ln_shard_bwd_apply(dx, dw, db, dy, x, w, mean, rstd, sums, N, Cl, C);
}
template <class T>
void gelu_fwd(T* y, const T* x, long n) { tab<T>().gelu_fwd(y, x, n); }
template <class T>
void gelu_fwd16(uint16_t* y16, uint16_t* x16, const T* x, long n) { tab<T>().gelu_fwd16(y16, x16, x, n); }
template <class T>
void gelu_bwd(T* dx, const T* x, const T* dy, long n) { tab<T>().gelu_bwd(dx, x, dy, n); }
template <class T>
void gelu_bwd_set(T* dx, const T* x, const T* dy, long n) { tab<T>().gelu_bwd_set(dx, x, dy, n); }
template <class T>
void gelu_bwd_bias16(uint16_t* dx16, T* db, const uint16_t* x16, const T* dy, long N, long F) {
  tab<T>().gelu_bwd_bias16(dx16, db, x16, dy, N, F);
}
template <class T>
void swiglu_fwd(T* y, const T* gate_up, long N, long F) { tab<T>().swiglu_fwd(y, gate_up, N, F); }
template <class T>
void swiglu_bwd(T* dgate_up, const T* gate_up, const T* dy, long N, long F) { tab<T>().swiglu_bwd(dgate_up, gate_up, dy, N, F); }
template <class T>
void swiglu_bwd_set(T* dgate_up, const T* gate_up, const T* dy, long N, long F) {
  tab<T>().swiglu_bwd_set(dgate_up, gate_up, dy, N, F);
}
template <class T>
void attention_fwd(T* out, T* att, const T* q, const T* k, const T* v, long B, long Tn, long H, long Hkv, long D) {
  tab<T>().attention_fwd(out, att, q, k, v, B, Tn, H, Hkv, D);
}
template <class T>
void attention_bwd(T* dq, T* dk, T* dv, const T* dout, const T* att, const T* q, const T* k, const T* v, long B,
                   long Tn, long H, long Hkv, long D) {
  tab<T>().attention_bwd(dq, dk, dv, dout, att, q, k, v, B, Tn, H, Hkv, D);
}
template <class T>
void attention_fwd_kv(T* out, T* att, const T* q, const T* k, const T* v, long B, long Tq, long Tk, long H, long Hkv,
                      long D) {
  tab<T>().attention_fwd_kv(out, att, q, k, v, B, Tq, Tk, H, Hkv, D);
}
template <class T>
void attention_bwd_kv(T* dq, T* dk, T* dv, const T* dout, const T* att, const T* q, const T* k, const T* v, long B,
                      long Tq, long Tk, long H, long Hkv, long D) {
  tab<T>().attention_bwd_kv(dq, dk, dv, dout, att, q, k, v, B, Tq, Tk, H, Hkv, D);
}
template <class T>
void flash_attention_fwd(T* out, T* stats, const T* q, const T* k, const T* v, long B, long Tq, long Tk, long H,
                         long Hkv, long D, long ldq, long ldkv) {
  tab<T>().flash_attention_fwd(out, stats, q, k, v, B, Tq, Tk, H, Hkv, D, ldq, ldkv);
}
template <class T>
void flash_attention_bwd(T* dq, T* dk, T* dv, const T* dout, const T* out, const T* stats, const T* q, const T* k,
                         const T* v, long B, long Tq, long Tk, long H, long Hkv, long D, long ldq, long ldkv) {
  tab<T>().flash_attention_bwd(dq, dk, dv, dout, out, stats, q, k, v, B, Tq, Tk, H, Hkv, D, ldq, ldkv);
}
template <class T>
void flash_attention_fwd16(uint16_t* out, T* stats, const uint16_t* q, const uint16_t* k, const uint16_t* v, long B,
                           long Tq, long Tk, long H, long Hkv, long D, long ldq, long ldkv) {
  tab<T>().flash_attention_fwd16(out, stats, q, k, v, B, Tq, Tk, H, Hkv, D, ldq, ldkv);
}
template <class T>
void flash_attention_bwd16(T* dq, T* dk, T* dv, const T* dout, const uint16_t* out, const T* stats, const uint16_t* q,
                           const uint16_t* k, const uint16_t* v, long B, long Tq, long Tk, long H, long Hkv, long D,
                           long ldq, long ldkv) {
  tab<T>().flash_attention_bwd16(dq, dk, dv, dout, out, stats, q, k, v, B, Tq, Tk, H, Hkv, D, ldq, ldkv);
}
template <class T>
T cross_entropy_fwd(T* probs, const T* logits, const int32_t* targets, long N, long V) {
  return tab<T>().cross_entropy_fwd(probs, logits, targets, N, V);
}
template <class T>
void cross_entropy_bwd(T* dlogits, const T* probs, const int32_t* targets, long N, long V, T scale) {
  tab<T>().cross_entropy_bwd(dlogits, probs, targets, N, V, scale);
}
template <class T>
void row_max(T* mx, const T* x, long N, long V) { tab<T>().row_max(mx, x, N, V); }
template <class T>
void max_combine(T* mx, const T* parts, long N, long P) { tab<T>().max_combine(mx, parts, N, P); }
template <class T>
void ce_shard_exp(T* probs, T* sum_exp, T* target, const T* logits, const T* mx, const int32_t* targets, long N,
                  long V, long v0, CeForm form) {
  tab<T>().ce_shard_exp(probs, sum_exp, target, logits, mx, targets, N, V, v0, form);
}
template <class T>
double ce_shard_finish(T* probs, const T* sum_exp, const T* target, const T* mx, long N, long V, CeForm form) {
  return tab<T>().ce_shard_finish(probs, sum_exp, target, mx, N, V, form);
}
template <class T>
void ce_shard_target_grad(T* dlogits, const int32_t* targets, long N, long V, long v0, T scale) {
  tab<T>().ce_shard_target_grad(dlogits, targets, N, V, v0, scale);
}
template <class T>
void embedding_fwd(T* out, const int32_t* tokens, const T* wte, const T* wpe, long B, long Tn, long C) {
  tab<T>().embedding_fwd(out, tokens, wte, wpe, B, Tn, C);
}
template <class T>
void embedding_bwd(T* dwte, T* dwpe, const T* dout, const int32_t* tokens, long B, long Tn, long C) {
  tab<T>().embedding_bwd(dwte, dwpe, dout, tokens, B, Tn, C);
}
template <class T>
void embedding_shard_fwd(T* out, const int32_t* tokens, const T* wte_shard, long N, long C, long v0, long Vl) {
  tab<T>().embedding_shard_fwd(out, tokens, wte_shard, N, C, v0, Vl);
}
template <class T>
void embedding_shard_bwd(T* dwte_shard, const T* dout, const int32_t* tokens, long N, long C, long v0, long Vl) {
  tab<T>().embedding_shard_bwd(dwte_shard, dout, tokens, N, C, v0, Vl);
}
template <class T>
void add_positions(T* x, const T* wpe, long rows, long C, long Tn, long row0) {
  tab<T>().add_positions(x, wpe, rows, C, Tn, row0);
}
template <class T>
void positions_bwd(T* dwpe, const T* dx, long rows, long C, long Tn, long row0) {
  tab<T>().positions_bwd(dwpe, dx, rows, C, Tn, row0);
}
template <class T>
void adamw(T* p, const T* g, T* m, T* v, long n, T lr, T b1, T b2, T eps, T wd, long t, T gscale) {
  tab<T>().adamw(p, g, m, v, n, lr, b1, b2, eps, wd, t, gscale);
}
template <class T>
double sum_squares(const T* x, long n) { return tab<T>().sum_squares(x, n); }
template <class T>
double fp8_quantize(T* y, const T* x, long n, T scale, int format) { return tab<T>().fp8_quantize(y, x, n, scale, format); }
template <class T>
double moe_route(T* probs, int32_t* slot, T* gate, const T* logits, long N, long E, long k, long cap, int renorm) {
  return tab<T>().moe_route(probs, slot, gate, logits, N, E, k, cap, renorm);
}
template <class T>
void moe_route_bwd(T* dlogits, const T* probs, const int32_t* slot, const T* dgate, long N, long E, long k, long cap,
                   int renorm, T aux_weight) {
  tab<T>().moe_route_bwd(dlogits, probs, slot, dgate, N, E, k, cap, renorm, aux_weight);
}
template <class T>
void moe_dispatch(T* out, const T* x, const int32_t* slot, long N, long k, long C, long rows) {
  tab<T>().moe_dispatch(out, x, slot, N, k, C, rows);
}
template <class T>
void moe_dispatch_bwd(T* dx, const T* dout, const int32_t* slot, long N, long k, long C) {
  tab<T>().moe_dispatch_bwd(dx, dout, slot, N, k, C);
}
template <class T>
void moe_combine(T* y, const T* ein, const int32_t* slot, const T* gate, long N, long k, long C) {
  tab<T>().moe_combine(y, ein, slot, gate, N, k, C);
}
template <class T>
void moe_combine_bwd(T* dein, T* dgate, const T* dy, const T* ein, const int32_t* slot, const T* gate, long N, long k,
                     long C) {
  tab<T>().moe_combine_bwd(dein, dgate, dy, ein, slot, gate, N, k, C);
}

#define TP_OPS_DISPATCH_INSTANTIATE(T)                                                                        \
  template void matmul<T>(T*, const T*, const T*, long, long, long, bool, bool, T, T);                        \
  template void matmul16<T>(T*, const T*, const uint16_t*, const T*, const uint16_t*, long, long, long, bool, bool, T, \
                            T);              \
  template void add_bias<T>(T*, const T*, const T*, long, long, const T*);                                    \
  template void linear_fwd<T>(T*, T*, const T*, const uint16_t*, const T*, const uint16_t*, const T*, long, long,  \
                              long);                                                                            \
  template void bias_bwd<T>(T*, const T*, long, long, uint16_t*);                                                  \
  template void add<T>(T*, const T*, const T*, long);                                                         \
  template void accumulate<T>(T*, const T*, long);                                                            \
  template void scale<T>(T*, const T*, T, long);                                                              \
  template void fill<T>(T*, T, long);                                                                         \
  template void copy<T>(T*, const T*, long);                                                                  \
  template void copy_rows<T>(T*, long, const T*, long, long, long);                                           \
  template void pack_bf16<T>(uint16_t*, const T*, long);                                                      \
  template void unpack_bf16<T>(T*, const uint16_t*, long);                                                    \
  template void layernorm_fwd<T>(T*, T*, T*, const T*, const T*, const T*, long, long, T);                    \
  template void layernorm_fwd16<T>(uint16_t*, T*, T*, const T*, const T*, const T*, long, long, T);           \
  template void layernorm_bwd<T>(T*, T*, T*, const T*, const T*, const T*, const T*, const T*, long, long);   \
  template void layernorm_bwd16<T>(T*, T*, T*, const T*, const uint16_t*, const T*, const T*, const T*, long, long); \
  template void ln_shard_sum<T>(T*, const T*, long, long);                                                    \
  template void ln_shard_sqdev<T>(T*, T*, const T*, const T*, long, long, long);                              \
  template void ln_shard_apply<T>(T*, T*, const T*, const T*, const T*, const T*, const T*, long, long, long, T); \
  template void ln_shard_bwd_sums<T>(T*, const T*, const T*, const T*, const T*, const T*, long, long);       \
  template void ln_shard_bwd_apply<T>(T*, T*, T*, const T*, const T*, const T*, const T*, const T*, const T*, \
                                      long, long, long);                                                      \
  template void gelu_fwd<T>(T*, const T*, long);                                                              \
  template void gelu_fwd16<T>(uint16_t*, uint16_t*, const T*, long);                                          \
  template void gelu_bwd<T>(T*, const T*, const T*, long);                                                    \
  template void gelu_bwd_set<T>(T*, const T*, const T*, long);                                                \
  template void gelu_bwd_bias16<T>(uint16_t*, T*, const uint16_t*, const T*, long, long);                          \
  template void swiglu_fwd<T>(T*, const T*, long, long);                                                      \
  template void swiglu_bwd<T>(T*, const T*, const T*, long, long);                                            \
  template void swiglu_bwd_set<T>(T*, const T*, const T*, long, long);                                        \
  template void attention_fwd<T>(T*, T*, const T*, const T*, const T*, long, long, long, long, long);         \
  template void attention_bwd<T>(T*, T*, T*, const T*, const T*, const T*, const T*, const T*, long, long,    \
                                 long, long, long);                                                           \
  template void attention_fwd_kv<T>(T*, T*, const T*, const T*, const T*, long, long, long, long, long, long); \
  template void attention_bwd_kv<T>(T*, T*, T*, const T*, const T*, const T*, const T*, const T*, long, long, \
                                    long, long, long, long);                                                  \
  template void flash_attention_fwd<T>(T*, T*, const T*, const T*, const T*, long, long, long, long, long, long,   \
                                       long, long);                                                                \
  template void flash_attention_bwd<T>(T*, T*, T*, const T*, const T*, const T*, const T*, const T*, const T*, long, \
                                       long, long, long, long, long, long, long);                                  \
  template void flash_attention_fwd16<T>(uint16_t*, T*, const uint16_t*, const uint16_t*, const uint16_t*, long, long, \
                                         long, long, long, long, long, long);                                        \
  template void flash_attention_bwd16<T>(T*, T*, T*, const T*, const uint16_t*, const T*, const uint16_t*,           \
                                         const uint16_t*, const uint16_t*, long, long, long, long, long, long, long,  \
                                         long);                                                                      \
  template T cross_entropy_fwd<T>(T*, const T*, const int32_t*, long, long);                                  \
  template void cross_entropy_bwd<T>(T*, const T*, const int32_t*, long, long, T);                            \
  template void row_max<T>(T*, const T*, long, long);                                                         \
  template void max_combine<T>(T*, const T*, long, long);                                                     \
  template void ce_shard_exp<T>(T*, T*, T*, const T*, const T*, const int32_t*, long, long, long, CeForm);    \
  template double ce_shard_finish<T>(T*, const T*, const T*, const T*, long, long, CeForm);                   \
  template void ce_shard_target_grad<T>(T*, const int32_t*, long, long, long, T);                             \
  template void embedding_fwd<T>(T*, const int32_t*, const T*, const T*, long, long, long);                   \
  template void embedding_bwd<T>(T*, T*, const T*, const int32_t*, long, long, long);                         \
  template void embedding_shard_fwd<T>(T*, const int32_t*, const T*, long, long, long, long);                 \
  template void embedding_shard_bwd<T>(T*, const T*, const int32_t*, long, long, long, long);                 \
  template void add_positions<T>(T*, const T*, long, long, long, long);                                       \
  template void positions_bwd<T>(T*, const T*, long, long, long, long);                                       \
  template void adamw<T>(T*, const T*, T*, T*, long, T, T, T, T, T, long, T);                                    \
  template double sum_squares<T>(const T*, long);                                                            \
  template double fp8_quantize<T>(T*, const T*, long, T, int);                                               \
  template double moe_route<T>(T*, int32_t*, T*, const T*, long, long, long, long, int);                      \
  template void moe_route_bwd<T>(T*, const T*, const int32_t*, const T*, long, long, long, long, int, T);       \
  template void moe_dispatch<T>(T*, const T*, const int32_t*, long, long, long, long);                          \
  template void moe_dispatch_bwd<T>(T*, const T*, const int32_t*, long, long, long);                            \
  template void moe_combine<T>(T*, const T*, const int32_t*, const T*, long, long, long);                       \
  template void moe_combine_bwd<T>(T*, T*, const T*, const T*, const int32_t*, const T*, long, long, long);
TP_OPS_DISPATCH_INSTANTIATE(float)
TP_OPS_DISPATCH_INSTANTIATE(double)
#undef TP_OPS_DISPATCH_INSTANTIATE

}  // namespace tp::ops
