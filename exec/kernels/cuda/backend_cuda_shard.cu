// backend_cuda_shard: the CUDA backend's sharded ops — column-split LayerNorm (2D tensor parallelism),
// vocabulary-parallel cross-entropy and embedding, positions — on the bridge kernels of k_bridge.hpp, launched
// exactly as the emu backend launches them (backend_emu_shard.cpp), so the code the emulator checks in CI is
// the code that runs here. Invariants: as backend_cuda_ops.cu — everything on g.stream, errors name the op and
// its shapes; the cross-entropy loss is summed in double on the device, then read back.
#include <cstdint>
#include <stdexcept>
#include <string>

#include "exec/kernels/cuda/backend_cuda_parts.hpp"
#include "exec/kernels/cuda_launch.cuh"
#include "exec/kernels/k_bridge.hpp"
#include "exec/kernels/kernels.hpp"
#include "exec/kernels/cuda/instantiate.cuh"

namespace tp::kernels {
TP_CUDA_INSTANTIATE(extern template, float)
}  // namespace tp::kernels

namespace tp::cuda {
namespace {

namespace k = tp::kernels;
using F = float;

k::Dim rows(long n) { return k::row_dim(launcher(), n, sizeof(k::acc_t<F>)); }

void ln_shard_sum(F* sum, const F* x, long N, long Cl) {
  run_op("ln_shard_sum", {{"rows", N}, {"cols", Cl}}, [&] { if (N > 0) launcher()(k::LnShardRow<F, false>{sum, nullptr, nullptr, x, N, Cl, 1}, rows(N)); });
}
void ln_shard_sqdev(F* sqdev, F* mean, const F* sum, const F* x, long N, long Cl, long C) {
  run_op("ln_shard_sqdev", {{"rows", N}, {"cols", Cl}}, [&] { if (N > 0) launcher()(k::LnShardRow<F, true>{sqdev, mean, sum, x, N, Cl, C}, rows(N)); });
}
void ln_shard_apply(F* y, F* rstd, const F* x, const F* mean, const F* sqdev, const F* w, const F* b, long N, long Cl,
                    long C, F eps) {
  run_op("ln_shard_apply", {{"rows", N}, {"cols", Cl}}, [&] {
    if (N * Cl > 0)
      launcher()(k::LnShardApply<F>{y, rstd, x, mean, sqdev, w, b, N, Cl, C, eps}, k::flat_dim(launcher(), N * Cl));
  });
}
void ln_shard_bwd_sums(F* sums, const F* dy, const F* x, const F* w, const F* mean, const F* rstd, long N, long Cl) {
  run_op("ln_shard_bwd_sums", {{"rows", N}, {"cols", Cl}}, [&] {
    if (N > 0) launcher()(k::LnShardBwdSums<F>{sums, dy, x, w, mean, rstd, N, Cl}, rows(N));
  });
}
void ln_shard_bwd_apply(F* dx, F* dw, F* db, const F* dy, const F* x, const F* w, const F* mean, const F* rstd,
                        const F* sums, long N, long Cl, long C) {
  run_op("ln_shard_bwd_apply", {{"rows", N}, {"cols", Cl}}, [&] {
    if (N <= 0 || Cl <= 0) return;
    launcher()(k::LnShardBwdDx<F>{dx, dy, x, w, mean, rstd, sums, N, Cl, C}, k::flat_dim(launcher(), N * Cl));
    k::layernorm_bwd_wb(launcher(), dw, db, dy, x, mean, rstd, N, Cl, column_scratch(N, Cl));
  });
}
void max_combine(F* mx, const F* parts, long N, long P) {
  run_op("max_combine", {{"rows", N}, {"cols", P}}, [&] { if (N > 0) launcher()(k::MaxCombine<F>{mx, parts, N, P}, k::flat_dim(launcher(), N)); });
}
void ce_shard_exp(F* probs, F* sum_exp, F* target, const F* logits, const F* mx, const int32_t* targets, long N, long V,
                  long v0, exec::CeForm form) {
  run_op("ce_shard_exp", {{"rows", N}, {"cols", V}}, [&] {
    if (N > 0)
      launcher()(k::CeShardExp<F>{probs, sum_exp, target, logits, mx, targets, N, V, v0,
                                  form == exec::CeForm::shifted_target_reciprocal},
                 rows(N));
  });
}
// Per-row losses into device scratch, summed in double by one block, the total read back.
double ce_shard_finish(F* probs, const F* sum_exp, const F* target, const F* mx, long N, long V, exec::CeForm form) {
  double total = 0;
  run_op("ce_shard_finish", {{"rows", N}, {"cols", V}}, [&] {
    if (N <= 0) return;
    double* loss = static_cast<double*>(scratch(sizeof(double) * (size_t(N) + 1)));
    const k::CudaLauncher l = launcher();
    l(k::CeShardFinish<F>{probs, loss + 1, sum_exp, target, mx, N, V, form == exec::CeForm::shifted_target_reciprocal},
      k::Dim{k::blocks_for(N, 1, l.max_grid), l.block, 0});
    l(k::SumToDouble<double>{loss, loss + 1, N}, k::Dim{1, l.block, k::kReduceSlots * 8});
    check(cudaMemcpyAsync(&total, loss, sizeof total, cudaMemcpyDeviceToHost, g.stream), "loss copy");
    check(cudaStreamSynchronize(g.stream), "loss read-back");
  });
  return total;
}
void ce_shard_target_grad(F* dlogits, const int32_t* targets, long N, long V, long v0, F scale) {
  run_op("ce_shard_target_grad", {{"rows", N}, {"cols", V}}, [&] {
    if (N > 0) launcher()(k::CeShardTargetGrad<F>{dlogits, targets, N, V, v0, scale}, k::flat_dim(launcher(), N));
  });
}
void embedding_shard_fwd(F* out, const int32_t* tokens, const F* wte, long N, long C, long v0, long Vl) {
  run_op("embedding_shard_fwd", {{"rows", N}, {"cols", C}}, [&] {
    if (N * C > 0) launcher()(k::EmbeddingShardFwd<F>{out, tokens, wte, N, C, v0, Vl}, k::flat_dim(launcher(), N * C));
  });
}
void add_positions(F* x, const F* wpe, long rows_, long C, long Tn, long row0) {
  run_op("add_positions", {{"rows", rows_}, {"cols", C}}, [&] {
    if (rows_ * C > 0) launcher()(k::AddPositions<F>{x, wpe, rows_, C, Tn, row0}, k::flat_dim(launcher(), rows_ * C));
  });
}
void positions_bwd(F* dwpe, const F* dx, long rows_, long C, long Tn, long row0) {
  run_op("positions_bwd", {{"rows", rows_}, {"cols", C}}, [&] {
    if (rows_ * C > 0) launcher()(k::PositionsBwd<F>{dwpe, dx, rows_, C, Tn, row0}, k::flat_dim(launcher(), Tn * C));
  });
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
