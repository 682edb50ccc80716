// op_cost_internal: helpers shared by the 1D (op_cost.cpp) and Optimus 2D (op_cost_2d.cpp) cost builders:
// op constructors timed from the GPU profile and collectives folded into ops through TpComm.
// Invariants: a collective over a group of one member costs 0 time and 0 bytes; a repeated op (`times`
// copies, e.g. the q steps of SUMMA) has times x the FLOPs, bytes and time of one copy, so the smaller
// GEMMs' lower efficiency shows. Not part of the public API.
#pragma once
#include <algorithm>
#include <cmath>
#include <string>

#include "op_cost.hpp"

namespace tp::detail {

// Flash attention: decoder-only language models are causal; FlashAttention skips the masked score tiles,
// so the score work (and the K / V tiles each query tile reads) is halved.
inline constexpr double kCausalFraction = 0.5;

struct Ctx {
  const Gpu* gpu;
  Precision prec;  // GEMMs outside the linear layers (bf16 under fp8 training)
  const TpComm* tpc;
  int t;
  bool sp;
  double e;  // activation element bytes
  int g_row = 1, g_col = 1, g_ep = 1, g_cp = 1;  // sizes of the 2D grid row / column, the ep and cp groups
  bool fp8 = false;  // fp8 linear-layer GEMMs (training.precision "fp8")
  // Under fp8, the recipe's cost on this GPU (training.fp8_recipe, models/fp8_recipe.hpp): its fp8 GEMM
  // efficiency scale and the HBM bytes per element it quantises (delayed scaling: read bf16, write fp8, 3).
  double fp8_gemm_scale = 1, fp8_cast_bytes = 3;
  // Each kernel's fixed cost: the GPU's stream launch, or its graph replay's under plan.cuda_graphs (these ops are the
  // step's forward and backward, which the graph holds; the optimizer's are costed elsewhere, launched).
  double overhead_s = 0;

  // Builds the context of a scenario: precisions from training.precision, element bytes from precision_bytes.
  static Ctx of(const Scenario& sc, const TpComm* tpc, int t, bool sp) {
    Ctx c{&sc.cluster.gpu, tensor_precision(sc.training.precision), tpc, t, sp, (double)precision_bytes(sc.training.precision)};
    c.overhead_s = sc.cluster.gpu.kernel_overhead_for(sc.plan.cuda_graphs);
    c.fp8 = linear_gemm_precision(sc.training.precision) == Precision::fp8;
    if (const Fp8RecipeCost* r = c.fp8 ? find_fp8_recipe(sc.cluster.gpu.fp8_recipes, sc.training.fp8_recipe) : nullptr) {
      c.fp8_gemm_scale = r->gemm_efficiency_scale;
      c.fp8_cast_bytes = r->cast_bytes_per_element;
    }
    return c;
  }

  int group_size(CommGroup g) const {
    switch (g) {
      case CommGroup::tp: return t;
      case CommGroup::tp_row: return g_row;
      case CommGroup::tp_col: return g_col;
      case CommGroup::ep: return g_ep;
      case CommGroup::cp: return g_cp;
    }
    return 1;
  }
  double gemm_s(double flops, double bytes) const {
    double peak = gpu->matrix_flops_per_s[(int)prec];
    double t_math = flops / (peak * gpu->matrix_efficiency.at(flops));
    double t_mem = bytes / (gpu->hbm_bandwidth_bytes_per_s * gpu->memory_efficiency.at(bytes));
    return std::max(t_math, t_mem) + overhead_s;
  }
  double fp8_gemm_s(double flops, double bytes) const {
    double peak = gpu->matrix_flops_per_s[(int)Precision::fp8];
    double t_math = flops / (peak * std::min(1.0, gpu->fp8_curve().at(flops) * fp8_gemm_scale));
    double t_mem = bytes / (gpu->hbm_bandwidth_bytes_per_s * gpu->memory_efficiency.at(bytes));
    return std::max(t_math, t_mem) + overhead_s;
  }
  // A fused attention kernel: matrix peak of `prec` x the attention efficiency curve, or its HBM time. The
  // tensor work is that of the kernel's head dim (Gpu::attention_kernel_head_dim) for `flops` at head dim dh.
  // `occupancy` (<= 1): the fraction of the SMs the kernel's grid keeps busy; the kernel takes 1 / occupancy
  // as long (Gpu::attention_backward_occupancy).
  double attn_s(double flops, double bytes, double dh, double occupancy = 1.0) const {
    double peak = gpu->matrix_flops_per_s[(int)prec];
    double work = flops * gpu->attention_kernel_head_dim(dh) / dh;
    double t_math = work / (peak * gpu->attention_curve().at(work));
    double t_mem = bytes / (gpu->hbm_bandwidth_bytes_per_s * gpu->memory_efficiency.at(bytes));
    return std::max(t_math, t_mem) / occupancy + overhead_s;
  }
  double mem_s(double bytes) const {
    return bytes / (gpu->hbm_bandwidth_bytes_per_s * gpu->memory_efficiency.at(bytes)) + overhead_s;
  }
  // GEMM [M,K] x [K,N]
  Op gemm(const std::string& name, double M, double K, double N, OpClass cls = OpClass::gemm) const {
    Op op{name, cls};
    op.flops = 2 * M * K * N;
    op.bytes = (M * K + K * N + M * N) * e;
    op.time_s = gemm_s(op.flops, op.bytes);
    return op;
  }
  // `times` sequential GEMMs [M,K] x [K,N] (SUMMA steps, or one GEMM per local expert)
  Op gemm_rep(const std::string& name, double times, double M, double K, double N) const {
    Op op = gemm(name, M, K, N);
    op.flops *= times;
    op.bytes *= times;
    op.time_s *= times;
    return op;
  }
  // Linear-layer GEMM [M,K] x [K,N]: as gemm(), or under fp8 with fp8 operands (1 byte) and a bf16 output at
  // the fp8 peak x fp8 efficiency curve.
  Op lin(const std::string& name, double M, double K, double N) const {
    if (!fp8) return gemm(name, M, K, N);
    Op op{name, OpClass::gemm};
    op.flops = 2 * M * K * N;
    op.bytes = (M * K + K * N) * 1 + M * N * e;
    op.time_s = fp8_gemm_s(op.flops, op.bytes);
    return op;
  }
  Op lin_rep(const std::string& name, double times, double M, double K, double N) const {
    Op op = lin(name, M, K, N);
    op.flops *= times;
    op.bytes *= times;
    op.time_s *= times;
    return op;
  }
  // fp8 cast (with its scales) of `elements` bf16 elements under the recipe; only meaningful when fp8.
  Op cast(const std::string& name, double elements) const { return elem(name, fp8_cast_bytes * elements); }
  // Causal FlashAttention-2/3 forward over bh = (sequences x query heads) per rank of s tokens, head dim dh,
  // kv_bh (sequences x kv heads) K / V heads. FLOPs: QK^T and PV, 4 bh s^2 dh, halved by causality (softmax
  // FLOPs neglected). HBM bytes (IO-aware): Q read and O written once, K and V read once per wave of row
  // tiles (ceil(s / Br) tiles, sm_count of them at once share each K / V read through L2; causal: on average
  // half of K / V per wave beyond the first), the fp32 logsumexp statistics written.
  double flash_kv_passes(double s) const {
    double tiles = std::ceil(s / gpu->attention_tile_rows);
    double waves = std::ceil(tiles / gpu->sm_count);
    return (waves + 1) * kCausalFraction;  // causal: 1 for one wave, about half the waves for many
  }
  // s_q: this rank's queries, s_k: the keys they attend over (s_q = s_k = s without context parallelism;
  // with cp, s_q = s / cp against s_k = s, the causal half balanced over the cp ranks).
  Op flash_fwd(double bh, double kv_bh, double s_q, double s_k, double dh) const {
    Op op{"attn.flash", OpClass::attention};
    op.flops = 4 * bh * s_q * s_k * dh * kCausalFraction;
    op.bytes = e * dh * (2 * bh * s_q + 2 * kv_bh * s_k * flash_kv_passes(s_q)) + 4 * bh * s_q;
    op.time_s = attn_s(op.flops, op.bytes, dh);
    return op;
  }
  // Backward: recomputes the scores from Q, K and the statistics, then dV, dP, dQ, dK: 5 GEMMs of the
  // forward's 2 (2.5x its FLOPs). Bytes: O and dO read for D = rowsum(dO * O) (fp32, written); K, V read and
  // dK, dV written once; per wave of K / V column tiles (as the forward's passes) Q and dO re-read, the
  // statistics and D re-read (fp32), and dQ accumulated in fp32 (read + write); dQ converted and written.
  // A kernel that runs one program per (sequence, head) ("attention_backward_grid": "heads") leaves SMs idle
  // in its last wave: its time grows by 1 / Gpu::attention_backward_occupancy(bh).
  Op flash_bwd(double bh, double kv_bh, double s_q, double s_k, double dh) const {
    Op op{"attn.flash.bwd", OpClass::attention};
    const double passes = flash_kv_passes(s_k);
    op.flops = 2.5 * 4 * bh * s_q * s_k * dh * kCausalFraction;
    op.bytes = e * dh * (2 * bh * s_q + 4 * kv_bh * s_k + 2 * bh * s_q * passes + bh * s_q) +
               4 * s_q * dh * bh * (2 * passes + 1) + 4 * bh * s_q * (1 + 2 * passes);
    op.time_s = attn_s(op.flops, op.bytes, dh, gpu->attention_backward_occupancy(bh));
    return op;
  }
  // Batched GEMM: `batch` products [M,K] x [K,N]
  Op bgemm(const std::string& name, double batch, double M, double K, double N) const {
    Op op{name, OpClass::attention};
    op.flops = 2 * batch * M * K * N;
    op.bytes = batch * (M * K + K * N + M * N) * e;
    op.time_s = gemm_s(op.flops, op.bytes);
    return op;
  }
  Op elem(const std::string& name, double bytes, OpClass cls = OpClass::elementwise) const {
    Op op{name, cls};
    op.bytes = bytes;
    op.time_s = mem_s(bytes);
    return op;
  }
  // `times` sequential collectives of `bytes` each over `group`; op.bytes = times x bytes (buffer bytes),
  // pc.tp_bytes += times x the member's payload bytes.
  Op comm_n(const std::string& name, Coll c, double bytes, double times, CommGroup group, PassCost& pc,
            OpClass cls = OpClass::tp_comm) const {
    Op op{name, cls};
    op.bytes = times * bytes;
    bool real = group_size(group) > 1 && bytes > 0;
    op.time_s = real ? times * tpc->time_s(c, bytes, group) : 0;
    if (real) {
      TierBytes tb = tpc->bytes(c, bytes, group);
      pc.tp_bytes.intra += times * tb.intra;
      pc.tp_bytes.inter += times * tb.inter;
    }
    return op;
  }
  // One collective over the whole (1D) TP group.
  Op comm(const std::string& name, Coll c, double bytes, PassCost& pc) const {
    return comm_n(name, c, bytes, 1, CommGroup::tp, pc);
  }
};

// Adds an overlapped TP collective: it runs while `under` (the op just added) computes; only the excess shows.
inline void add_overlapped(PassCost& pc, Op comm) {
  double under = pc.ops.empty() ? 0 : pc.ops.back().time_s;
  comm.hidden_s = std::min(comm.time_s, under);
  comm.time_s -= comm.hidden_s;
  pc.add(comm);
}

// Optimus 2D (SUMMA) cost model, plan.tp_mode == d2 (op_cost_2d.cpp).
CostModel build_cost_model_2d(const Scenario& sc, const TpComm& tpc);

}  // namespace tp::detail
