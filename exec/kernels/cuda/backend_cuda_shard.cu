// backend_cuda_shard: the CUDA backend's sharded ops — column-split LayerNorm (2D tensor parallelism),
// vocabulary-parallel cross-entropy and embedding, positions — the bridge of exec/kernels/k_shard_ops.hpp on the
// CUDA runner, the same code the emu backend runs (backend_emu_shard.cpp), so the code the emulator checks in CI
// is the code that runs here. Invariants: as backend_cuda_ops.cu — everything on g.stream, errors name the op and
// its shapes; the cross-entropy loss is summed in double on the device, then read back.
#include <cstdint>
#include <stdexcept>
#include <string>

#include "exec/kernels/cuda/backend_cuda_parts.hpp"
#include "exec/kernels/cuda_launch.cuh"
#include "exec/kernels/k_shard_ops.hpp"
#include "exec/kernels/kernels.hpp"
#include "exec/kernels/cuda/instantiate.cuh"

namespace tp::kernels {
TP_CUDA_INSTANTIATE(extern template, float)
}  // namespace tp::kernels

namespace tp::cuda {
namespace {

namespace k = tp::kernels;
using F = float;

// The sharded ops: the bridge written once for emu and CUDA (exec/kernels/k_shard_ops.hpp) on the CUDA runner.
void ln_shard_sum(F* sum, const F* x, long N, long Cl) { k::ln_shard_sum_op(CudaRunner{}, sum, x, N, Cl); }
void ln_shard_sqdev(F* sqdev, F* mean, const F* sum, const F* x, long N, long Cl, long C) {
  k::ln_shard_sqdev_op(CudaRunner{}, sqdev, mean, sum, x, N, Cl, C);
}
void ln_shard_apply(F* y, F* rstd, const F* x, const F* mean, const F* sqdev, const F* w, const F* b, long N, long Cl,
                    long C, F eps) {
  k::ln_shard_apply_op(CudaRunner{}, y, rstd, x, mean, sqdev, w, b, N, Cl, C, eps);
}
void ln_shard_bwd_sums(F* sums, const F* dy, const F* x, const F* w, const F* mean, const F* rstd, long N, long Cl) {
  k::ln_shard_bwd_sums_op(CudaRunner{}, sums, dy, x, w, mean, rstd, N, Cl);
}
void ln_shard_bwd_apply(F* dx, F* dw, F* db, const F* dy, const F* x, const F* w, const F* mean, const F* rstd,
                        const F* sums, long N, long Cl, long C) {
  k::ln_shard_bwd_apply_op(CudaRunner{}, dx, dw, db, dy, x, w, mean, rstd, sums, N, Cl, C);
}
void max_combine(F* mx, const F* parts, long N, long P) { k::max_combine_op(CudaRunner{}, mx, parts, N, P); }
void ce_shard_exp(F* probs, F* sum_exp, F* target, const F* logits, const F* mx, const int32_t* targets, long N, long V,
                  long v0, exec::CeForm form) {
  k::ce_shard_exp_op(CudaRunner{}, probs, sum_exp, target, logits, mx, targets, N, V, v0, form,
                     exec::CeForm::shifted_target_reciprocal);
}
double ce_shard_finish(F* probs, const F* sum_exp, const F* target, const F* mx, long N, long V, exec::CeForm form) {
  return k::ce_shard_finish_op(CudaRunner{}, probs, sum_exp, target, mx, N, V, form,
                               exec::CeForm::shifted_target_reciprocal);
}
void ce_shard_target_grad(F* dlogits, const int32_t* targets, long N, long V, long v0, F scale) {
  k::ce_shard_target_grad_op(CudaRunner{}, dlogits, targets, N, V, v0, scale);
}
void embedding_shard_fwd(F* out, const int32_t* tokens, const F* wte, long N, long C, long v0, long Vl) {
  k::embedding_shard_fwd_op(CudaRunner{}, out, tokens, wte, N, C, v0, Vl);
}
void add_positions(F* x, const F* wpe, long rows_, long C, long Tn, long row0) {
  k::add_positions_op(CudaRunner{}, x, wpe, rows_, C, Tn, row0);
}
void positions_bwd(F* dwpe, const F* dx, long rows_, long C, long Tn, long row0) {
  k::positions_bwd_op(CudaRunner{}, dwpe, dx, rows_, C, Tn, row0);
}

}  // namespace

void fill_f32_shard_ops(exec::OpTable<float>& t) {
  t.ln_shard_sum = ln_shard_sum, t.ln_shard_sqdev = ln_shard_sqdev, t.ln_shard_apply = ln_shard_apply;
  t.ln_shard_bwd_sums = ln_shard_bwd_sums, t.ln_shard_bwd_apply = ln_shard_bwd_apply;
  t.max_combine = max_combine, t.ce_shard_exp = ce_shard_exp, t.ce_shard_finish = ce_shard_finish;
  t.ce_shard_target_grad = ce_shard_target_grad, t.embedding_shard_fwd = embedding_shard_fwd;
  t.add_positions = add_positions, t.positions_bwd = positions_bwd;
}

}  // namespace tp::cuda
