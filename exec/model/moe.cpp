// moe: the MoE MLP forward and backward with expert-parallel all-to-alls. See moe.hpp.
// Buffers: disp / ye [E cap, C] in router order (expert-major: block e of cap rows); xe / eout [E cap, C] in
// expert order on the expert's rank (source ep rank s, local expert l: block s El + l). With ep = 1 the two
// orders coincide and no communication happens.
#include "exec/model/moe.hpp"

#include "exec/model/fp8.hpp"

#include "exec/backends/backend.hpp"
#include "exec/backends/ops.hpp"
#include "models/json_check.hpp"

#include <stdexcept>
#include <string>

namespace tp::exec {

namespace {

// Block b of [E cap, C] between router order and expert order (all-to-all over ep: blocks of El cap C).
template <class T>
void exchange(Comm* ep, const T* in, T* out, long long El, long cap, long C, long long E) {
  if (!ep) { ops::copy(out, in, (long)(E * cap * C)); return; }
  ep->all_to_all(in, out, (long)(El * cap * C), dtype_of<T>());
}
}  // namespace

// The experts' inputs on this rank: m_xe [rows, C], or under SP all tp ranks' (gathered: [G rows, C], tp-rank
// major) in `xg`; returns the pointer the expert GEMMs read.
template <class T>
const T* expert_inputs(const Gpt<T>& g, const Buf<T>& xe, Buf<T>& xg, long G, long rows, long C) {
  if (G == 1) return xe.data();
  xg.resize((size_t)(G * rows * C));
  g.tp->all_gather(xe.data(), xg.data(), rows * C, dtype_of<T>());
  return xg.data();
}

template <class T>
void moe_mlp_fwd(const Gpt<T>& g, int wl, const LayerParams& W, LayerActs<T>& a, T* x_out, long N) {
  const GptShape& s = g.lay.s;
  const long C = (long)s.C, E = (long)s.experts, k = (long)s.top_k, Fe = (long)s.fe_loc(), F1 = (long)s.fe1_cols();
  const long cap = moe_capacity(N, E, k, s.capacity_factor), rows = E * cap;
  const int ep = g.ep ? g.ep->size() : 1;
  const long El = E / ep, G = g.sp ? g.tp->size() : 1;  // G: tp ranks whose tokens this rank's experts take
  if (El != (long)s.el())
    throw std::logic_error("moe: the layout holds " + std::to_string(s.el()) + " experts, the ep group needs " +
                           std::to_string(El));
  if (!current_backend().ops<T>().moe_route)  // a backend without the MoE ops: refuse, never crash
    throw InputError({std::string("--backend ") + current_backend().name +
                      ": has no mixture-of-experts ops ($.model.moe runs on the cpu, emu and cuda backends)"});
  Buf<T> logits((size_t)(N * E));
  ops::matmul(logits.data(), a.ln2.data(), g.p(W.router_w), N, E, C, false, false, T(1), T(0));
  a.m_probs.resize((size_t)(N * E)); a.m_gate.resize((size_t)(N * k)); a.m_slot.resize((size_t)(N * k));
  g.moe_aux_sum += ops::moe_route(a.m_probs.data(), a.m_slot.data(), a.m_gate.data(), logits.data(), N, E, k, cap, k > 1 ? 1 : 0);
  Buf<T>().swap(logits);
  Buf<T> disp((size_t)(rows * C));
  ops::moe_dispatch(disp.data(), a.ln2.data(), a.m_slot.data(), N, k, C, rows);
  a.m_xe.resize((size_t)(rows * C));
  exchange(g.ep, disp.data(), a.m_xe.data(), El, cap, C, E);
  Buf<T> xg;
  const T* xin = expert_inputs(g, a.m_xe, xg, G, rows, C);
  // Block b (of G E) in expert order is local expert b % El (tp source b / E, ep source (b % E) / El).
  a.fc1.resize((size_t)(G * rows * F1)); a.act.resize((size_t)(G * rows * Fe));
  Buf<T>& eout = disp;  // reused: the dispatched copies are in m_xe now
  Buf<T> eg((size_t)(G > 1 ? G * rows * C : 0));  // SP: the experts' outputs for every tp rank's tokens
  T* ep_out = G > 1 ? eg.data() : eout.data();    // partial over tp (row-parallel fc2)
  Buf<T> qx, qw;  // fp8 casts (exec/model/fp8.hpp): expert e's GEMMs are linears kFp8Expert + 2e and + 2e + 1
  const uint16_t *w1_16 = g.p16(W.ex_w1), *w2_16 = g.p16(W.ex_w2);  // bf16 storage of the weights (else null)
  for (long b = 0; b < G * E; ++b) {
    const long ge = b % El;  // the local expert (global expert ep_rank El + b % El)
    const int lin = kFp8Expert + 2 * int(s.ep_rank * El + ge);
    T* h = a.fc1.data() + b * cap * F1;
    T* act = a.act.data() + b * cap * Fe;
    gemm8(h, g.f8q(qx, xin + b * cap * C, cap * C, wl, lin, Fp8Operand::x), nullptr,
          w1_16 ? Q8<T>{} : g.f8q(qw, g.p(W.ex_w1) + ge * C * F1, C * F1, wl, lin, Fp8Operand::w),
          w1_16 ? w1_16 + ge * C * F1 : nullptr, cap, F1, C, false, false, T(0));
    if (W.ex_b1 >= 0) ops::add_bias(h, h, g.p(W.ex_b1) + ge * F1, cap, F1);
    if (s.gelu) ops::gelu_fwd(act, h, cap * Fe);
    else ops::swiglu_fwd(act, h, cap, Fe);
    gemm8(ep_out + b * cap * C, g.f8q(qx, act, cap * Fe, wl, lin + 1, Fp8Operand::x), nullptr,
          w2_16 ? Q8<T>{} : g.f8q(qw, g.p(W.ex_w2) + ge * Fe * C, Fe * C, wl, lin + 1, Fp8Operand::w),
          w2_16 ? w2_16 + ge * Fe * C : nullptr, cap, C, Fe, false, false, T(0));
  }
  Buf<T>().swap(xg);
  if (G > 1) g.tp->reduce_scatter_sum(eg.data(), eout.data(), rows * C, dtype_of<T>());  // SP: my tokens' sums
  else if (g.tp) g.tp->all_reduce_sum(eout.data(), rows * C, dtype_of<T>());  // row-parallel fc2: partial sums over tp
  Buf<T>().swap(eg);
  if (W.ex_b2 >= 0)
    for (long b = 0; b < E; ++b)
      ops::add_bias(eout.data() + b * cap * C, eout.data() + b * cap * C, g.p(W.ex_b2) + (b % El) * C, cap, C);
  a.m_ye.resize((size_t)(rows * C));
  exchange(g.ep, eout.data(), a.m_ye.data(), El, cap, C, E);
  ops::moe_combine(x_out, a.m_ye.data(), a.m_slot.data(), a.m_gate.data(), N, k, C);
}

template <class T>
void moe_mlp_bwd(const Gpt<T>& g, int wl, const LayerParams& W, LayerActs<T>& a, const T* dz, T* dln, long N) {
  const GptShape& s = g.lay.s;
  const long C = (long)s.C, E = (long)s.experts, k = (long)s.top_k, Fe = (long)s.fe_loc(), F1 = (long)s.fe1_cols();
  const long cap = moe_capacity(N, E, k, s.capacity_factor), rows = E * cap;
  const int ep = g.ep ? g.ep->size() : 1;
  const long El = E / ep, G = g.sp ? g.tp->size() : 1;
  auto release = [](Buf<T>& v) { Buf<T>().swap(v); };
  Buf<T> dye((size_t)(rows * C)), dgate((size_t)(N * k));
  ops::fill(dye.data(), T(0), rows * C);
  ops::fill(dgate.data(), T(0), N * k);
  ops::moe_combine_bwd(dye.data(), dgate.data(), dz, a.m_ye.data(), a.m_slot.data(), a.m_gate.data(), N, k, C);
  release(a.m_ye);
  Buf<T> deo((size_t)(rows * C));  // expert-output gradients in expert order
  exchange(g.ep, dye.data(), deo.data(), El, cap, C, E);
  if (W.ex_b2 >= 0)  // (SP: over my tokens' rows; the runtime sums the partial bias gradients over tp)
    for (long b = 0; b < E; ++b) ops::bias_bwd(g.g(W.ex_b2) + (b % El) * C, deo.data() + b * cap * C, cap, C);
  Buf<T> dg, xg;  // SP: every tp rank's output gradients (the reduce-scatter's backward) and inputs, re-gathered
  const T* dout = expert_inputs(g, deo, dg, G, rows, C);
  const T* xin = expert_inputs(g, a.m_xe, xg, G, rows, C);
  Buf<T> dxg((size_t)(G > 1 ? G * rows * C : 0));  // SP: for every tp rank's tokens
  T* dx_part = G > 1 ? dxg.data() : dye.data();      // expert-input gradients in expert order, partial over tp
  Buf<T> qx, qw, qd;  // fp8 casts (exec/model/fp8.hpp; the forward operands again with the same scales)
  const uint16_t *w1_16 = g.p16(W.ex_w1), *w2_16 = g.p16(W.ex_w2);  // bf16 storage of the weights (else null)
  for (long b = 0; b < G * E; ++b) {
    const long ge = b % El;  // the local expert
    const int lin = kFp8Expert + 2 * int(s.ep_rank * El + ge);
    const Q8<T> dq = g.f8q(qd, dout + b * cap * C, cap * C, wl, lin + 1, Fp8Operand::dy);
    const T* d = dq.p;
    T* act = a.act.data() + b * cap * Fe;
    T* h = a.fc1.data() + b * cap * F1;
    Buf<uint16_t> d16 = g.grad16(d, cap * C);  // (bf16: packed once for the two GEMMs that read it)
    gemm8(g.g(W.ex_w2) + ge * Fe * C, g.f8q(qx, act, cap * Fe, wl, lin + 1, Fp8Operand::x, false), nullptr, dq,
          data16(d16), Fe, C, cap, true, false, T(1));
    Buf<T> dact((size_t)(cap * Fe));
    gemm8(dact.data(), dq, data16(d16),
          w2_16 ? Q8<T>{} : g.f8q(qw, g.p(W.ex_w2) + ge * Fe * C, Fe * C, wl, lin + 1, Fp8Operand::w, false),
          w2_16 ? w2_16 + ge * Fe * C : nullptr, cap, Fe, C, false, true, T(0));
    if (s.gelu) ops::gelu_bwd_set(h, h, dact.data(), cap * Fe);  // h becomes d fc1 in place
    else ops::swiglu_bwd_set(h, h, dact.data(), cap, Fe);
    Buf<uint16_t>().swap(d16);
    // (bf16: h's copy, from the pass of the bias gradient: expert ge's slice of the stacked bias)
    const Buf<uint16_t> dh16 = g.bias_grad16(W.ex_b1 >= 0 ? g.g(W.ex_b1) + ge * F1 : nullptr, h, cap, F1);
    const Q8<T> dh = g.f8q(qd, h, cap * F1, wl, lin, Fp8Operand::dy);
    gemm8(g.g(W.ex_w1) + ge * C * F1, g.f8q(qx, xin + b * cap * C, cap * C, wl, lin, Fp8Operand::x, false), nullptr, dh,
          data16(dh16), C, F1, cap, true, false, T(1));
    gemm8(dx_part + b * cap * C, dh, data16(dh16),
          w1_16 ? Q8<T>{} : g.f8q(qw, g.p(W.ex_w1) + ge * C * F1, C * F1, wl, lin, Fp8Operand::w, false),
          w1_16 ? w1_16 + ge * C * F1 : nullptr, cap, C, F1, false, true, T(0));
  }
  for (Buf<T>* v : {&a.fc1, &a.act, &a.m_xe, &deo, &dg, &xg}) release(*v);
  Buf<T>& dxe = dye;  // reused: my tokens' expert-input gradients in expert order
  if (G > 1) g.tp->reduce_scatter_sum(dxg.data(), dxe.data(), rows * C, dtype_of<T>());  // SP: the all-gather's backward
  else if (g.tp) g.tp->all_reduce_sum(dxe.data(), rows * C, dtype_of<T>());  // column-parallel fc1: partial over tp
  release(dxg);
  Buf<T> ddisp((size_t)(rows * C));
  exchange(g.ep, dxe.data(), ddisp.data(), El, cap, C, E);
  release(dye);
  ops::fill(dln, T(0), N * C);
  ops::moe_dispatch_bwd(dln, ddisp.data(), a.m_slot.data(), N, k, C);
  release(ddisp);
  Buf<T> dlogits((size_t)(N * E));
  ops::fill(dlogits.data(), T(0), N * E);
  // SP (cp): each tp (cp) rank routes 1 / G (1 / cp) of the micro-batch, a routing group weighing as much of
  // the micro-batch's aux
  const double groups = (double)G * (g.cpx ? (double)g.cpx->size : 1.0);
  ops::moe_route_bwd(dlogits.data(), a.m_probs.data(), a.m_slot.data(), dgate.data(), N, E, k, cap, k > 1 ? 1 : 0,
                     T(g.moe_aux_weight / groups));
  ops::matmul(g.g(W.router_w), a.ln2.data(), dlogits.data(), C, E, N, true, false, T(1), T(1));
  ops::matmul(dln, dlogits.data(), g.p(W.router_w), N, C, E, false, true, T(1), T(1));
  for (Buf<T>* v : {&a.m_probs, &a.m_gate, &a.ln2}) release(*v);
  Buf<int32_t>().swap(a.m_slot);
}

template void moe_mlp_fwd<float>(const Gpt<float>&, int, const LayerParams&, LayerActs<float>&, float*, long);
template void moe_mlp_fwd<double>(const Gpt<double>&, int, const LayerParams&, LayerActs<double>&, double*, long);
template void moe_mlp_bwd<float>(const Gpt<float>&, int, const LayerParams&, LayerActs<float>&, const float*, float*, long);
template void moe_mlp_bwd<double>(const Gpt<double>&, int, const LayerParams&, LayerActs<double>&, const double*, double*,
                                  long);

}  // namespace tp::exec
