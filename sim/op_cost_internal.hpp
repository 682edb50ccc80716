// op_cost_internal: helpers shared by the 1D (op_cost.cpp) and Optimus 2D (op_cost_2d.cpp) cost builders:
// op constructors timed from the GPU profile and collectives folded into ops through TpComm.
// Invariants: a collective over a group of one member costs 0 time and 0 bytes; a repeated op (`times`
// copies, e.g. the q steps of SUMMA) has times x the FLOPs, bytes and time of one copy, so the smaller
// GEMMs' lower efficiency shows. Not part of the public API.
#pragma once
#include <algorithm>
#include <string>

#include "op_cost.hpp"

namespace tp::detail {

struct Ctx {
  const Gpu* gpu;
  Precision prec;
  const TpComm* tpc;
  int t;
  bool sp;
  double e;  // activation element bytes
  int g_row = 1, g_col = 1, g_ep = 1, g_cp = 1;  // sizes of the 2D grid row / column, the ep and cp groups

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
    return std::max(t_math, t_mem) + gpu->kernel_overhead_s;
  }
  double mem_s(double bytes) const {
    return bytes / (gpu->hbm_bandwidth_bytes_per_s * gpu->memory_efficiency.at(bytes)) + gpu->kernel_overhead_s;
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
