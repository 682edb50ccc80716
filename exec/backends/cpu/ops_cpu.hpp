// exec/backends/cpu/: the CPU backend (Eigen GEMMs, plain loops), the default and the float64 oracle.
// ops_cpu: the CPU backend's op implementations (namespace tp::ops::cpu), one per entry of the op table
// (exec/backends/backend.hpp). Same signatures and contracts as the dispatching functions in exec/backends/ops.hpp; internal to
// exec/backends/cpu/ (backend_cpu.cpp fills the CPU backend's table with them).
#pragma once
#include <cstdint>

#include "exec/backends/ops.hpp"

namespace tp::ops::cpu {

// bf16 GEMM operands (training.precision "bf16"), per thread: while on, matmul and attention round every
// product's operands to bf16 (kernels::bf16_round) and accumulate in T. Returns the previous setting. The emu
// backends' GEMMs are this file's matmul, so the setting is theirs too.
bool set_bf16_gemm(bool on);
bool bf16_gemm();
template <class T> void matmul(T* C, const T* A, const T* B, long M, long N, long K, bool trans_a, bool trans_b, T alpha, T beta);
template <class T> void add_bias(T* y, const T* x, const T* b, long N, long C, const T* r);
template <class T> void bias_bwd(T* db, const T* dy, long N, long C, uint16_t* dy16);
template <class T> void add(T* y, const T* a, const T* b, long n);
template <class T> void accumulate(T* y, const T* x, long n);
template <class T> void scale(T* y, const T* x, T s, long n);
template <class T> void fill(T* y, T value, long n);
template <class T> void copy(T* dst, const T* src, long n);
template <class T>
void matmul16(T* C, const T* A, const uint16_t* A16, const T* B, const uint16_t* B16, long M, long N, long K,
              bool trans_a, bool trans_b, T alpha, T beta);
template <class T> void copy_rows(T* dst, long dst_stride, const T* src, long src_stride, long rows, long cols);
template <class T> void pack_bf16(uint16_t* y, const T* x, long n);
template <class T> void unpack_bf16(T* y, const uint16_t* x, long n);
template <class T> void layernorm_fwd(T* y, T* mean, T* rstd, const T* x, const T* w, const T* b, long N, long C, T eps);
template <class T>
void layernorm_fwd16(uint16_t* y16, T* mean, T* rstd, const T* x, const T* w, const T* b, long N, long C, T eps);
template <class T>
void layernorm_bwd(T* dx, T* dw, T* db, const T* dy, const T* x, const T* w, const T* mean, const T* rstd, long N, long C);
template <class T>
void layernorm_bwd16(T* dx, T* dw, T* db, const T* dy, const uint16_t* x16, const T* w, const T* mean, const T* rstd,
                     long N, long C);
template <class T> void ln_shard_sum(T* sum, const T* x, long N, long Cl);
template <class T> void ln_shard_sqdev(T* sqdev, T* mean, const T* sum, const T* x, long N, long Cl, long C);
template <class T>
void ln_shard_apply(T* y, T* rstd, const T* x, const T* mean, const T* sqdev, const T* w, const T* b, long N, long Cl,
                    long C, T eps);
template <class T>
void ln_shard_bwd_sums(T* sums, const T* dy, const T* x, const T* w, const T* mean, const T* rstd, long N, long Cl);
template <class T>
void ln_shard_bwd_apply(T* dx, T* dw, T* db, const T* dy, const T* x, const T* w, const T* mean, const T* rstd,
                        const T* sums, long N, long Cl, long C);
template <class T> void gelu_fwd(T* y, const T* x, long n);
template <class T> void gelu_fwd16(uint16_t* y16, uint16_t* x16, const T* x, long n);
template <class T> void gelu_bwd(T* dx, const T* x, const T* dy, long n);
template <class T> void gelu_bwd_set(T* dx, const T* x, const T* dy, long n);
template <class T> void gelu_bwd_bias16(uint16_t* dx16, T* db, const uint16_t* x16, const T* dy, long N, long F);
template <class T> void swiglu_fwd(T* y, const T* gate_up, long N, long F);
template <class T> void swiglu_bwd(T* dgate_up, const T* gate_up, const T* dy, long N, long F);
template <class T> void swiglu_bwd_set(T* dgate_up, const T* gate_up, const T* dy, long N, long F);
template <class T>
void attention_fwd(T* out, T* att, const T* q, const T* k, const T* v, long B, long Tn, long H, long Hkv, long D);
template <class T>
void attention_bwd(T* dq, T* dk, T* dv, const T* dout, const T* att, const T* q, const T* k, const T* v, long B,
                   long Tn, long H, long Hkv, long D);
template <class T>
void attention_fwd_kv(T* out, T* att, const T* q, const T* k, const T* v, long B, long Tq, long Tk, long H, long Hkv,
                      long D);
template <class T>
void attention_bwd_kv(T* dq, T* dk, T* dv, const T* dout, const T* att, const T* q, const T* k, const T* v, long B,
                      long Tq, long Tk, long H, long Hkv, long D);
template <class T>
void flash_attention_fwd(T* out, T* stats, const T* q, const T* k, const T* v, long B, long Tq, long Tk, long H,
                         long Hkv, long D, long ldq, long ldkv);
template <class T>
void flash_attention_bwd(T* dq, T* dk, T* dv, const T* dout, const T* out, const T* stats, const T* q, const T* k,
                         const T* v, long B, long Tq, long Tk, long H, long Hkv, long D, long ldq, long ldkv);
template <class T>
void flash_attention_fwd16(uint16_t* out, T* stats, const uint16_t* q, const uint16_t* k, const uint16_t* v, long B,
                           long Tq, long Tk, long H, long Hkv, long D, long ldq, long ldkv);
template <class T>
void flash_attention_bwd16(T* dq, T* dk, T* dv, const T* dout, const uint16_t* out, const T* stats, const uint16_t* q,
                           const uint16_t* k, const uint16_t* v, long B, long Tq, long Tk, long H, long Hkv, long D,
                           long ldq, long ldkv);
template <class T> T cross_entropy_fwd(T* probs, const T* logits, const int32_t* targets, long N, long V);
template <class T> void cross_entropy_bwd(T* dlogits, const T* probs, const int32_t* targets, long N, long V, T scale);
template <class T> void row_max(T* mx, const T* x, long N, long V);
template <class T> void max_combine(T* mx, const T* parts, long N, long P);
template <class T>
void ce_shard_exp(T* probs, T* sum_exp, T* target, const T* logits, const T* mx, const int32_t* targets, long N,
                  long V, long v0, CeForm form);
template <class T>
double ce_shard_finish(T* probs, const T* sum_exp, const T* target, const T* mx, long N, long V, CeForm form);
template <class T> void ce_shard_target_grad(T* dlogits, const int32_t* targets, long N, long V, long v0, T scale);
template <class T> void embedding_fwd(T* out, const int32_t* tokens, const T* wte, const T* wpe, long B, long Tn, long C);
template <class T> void embedding_bwd(T* dwte, T* dwpe, const T* dout, const int32_t* tokens, long B, long Tn, long C);
template <class T>
void embedding_shard_fwd(T* out, const int32_t* tokens, const T* wte_shard, long N, long C, long v0, long Vl);
template <class T>
void embedding_shard_bwd(T* dwte_shard, const T* dout, const int32_t* tokens, long N, long C, long v0, long Vl);
template <class T> void add_positions(T* x, const T* wpe, long rows, long C, long Tn, long row0);
template <class T> void positions_bwd(T* dwpe, const T* dx, long rows, long C, long Tn, long row0);
template <class T> void adamw(T* p, const T* g, T* m, T* v, long n, T lr, T b1, T b2, T eps, T wd, long t, T gscale);
template <class T> double sum_squares(const T* x, long n);
template <class T> double fp8_quantize(T* y, const T* x, long n, T scale, int format);
template <class T>
double moe_route(T* probs, int32_t* slot, T* gate, const T* logits, long N, long E, long k, long cap, int renorm);
template <class T>
void moe_route_bwd(T* dlogits, const T* probs, const int32_t* slot, const T* dgate, long N, long E, long k, long cap,
                   int renorm, T aux_weight);
template <class T> void moe_dispatch(T* out, const T* x, const int32_t* slot, long N, long k, long C, long rows);
template <class T> void moe_dispatch_bwd(T* dx, const T* dout, const int32_t* slot, long N, long k, long C);
template <class T> void moe_combine(T* y, const T* ein, const int32_t* slot, const T* gate, long N, long k, long C);
template <class T>
void moe_combine_bwd(T* dein, T* dgate, const T* dy, const T* ein, const int32_t* slot, const T* gate, long N, long k,
                     long C);

}  // namespace tp::ops::cpu
