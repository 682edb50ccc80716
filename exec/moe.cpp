// moe: the MoE MLP forward and backward with expert-parallel all-to-alls. See moe.hpp.
// Buffers: disp / ye [E cap, C] in router order (expert-major: block e of cap rows); xe / eout [E cap, C] in
// expert order on the expert's rank (source ep rank s, local expert l: block s El + l). With ep = 1 the two
// orders coincide and no communication happens.
#include "exec/moe.hpp"

#include "exec/backend.hpp"
#include "exec/ops.hpp"
#include "models/json_check.hpp"

namespace tp::exec {

namespace {
Dtype dt(float) { return Dtype::f32; }
Dtype dt(double) { return Dtype::f64; }

// Block b of [E cap, C] between router order and expert order (all-to-all over ep: blocks of El cap C).
template <class T>
void exchange(Comm* ep, const T* in, T* out, long long El, long cap, long C, long long E) {
  if (!ep) { ops::copy(out, in, (long)(E * cap * C)); return; }
  ep->all_to_all(in, out, (long)(El * cap * C), dt(T{}));
}
}  // namespace

template <class T>
void moe_mlp_fwd(const Gpt<T>& g, const LayerParams& W, LayerActs<T>& a, T* x_out, long N) {
  const GptShape& s = g.lay.s;
  const long C = (long)s.C, E = (long)s.experts, k = (long)s.top_k, Fe = (long)s.fe_loc(), F1 = (long)s.fe1_cols();
  const long cap = moe_capacity(N, E, k, s.capacity_factor), rows = E * cap;
  const int ep = g.ep ? g.ep->size() : 1, er = g.ep ? g.ep->rank() : 0;
  const long El = E / ep;
  if (!current_backend().ops<T>().moe_route)  // a backend without the MoE ops (cuda, for now): refuse, never crash
    throw InputError({std::string("--backend ") + current_backend().name +
                      ": has no mixture-of-experts ops yet ($.model.moe runs on the cpu and emu backends)"});
  Buf<T> logits((size_t)(N * E));
  ops::matmul(logits.data(), a.ln2.data(), g.p(W.router_w), N, E, C, false, false, T(1), T(0));
  a.m_probs.resize((size_t)(N * E)); a.m_gate.resize((size_t)(N * k)); a.m_slot.resize((size_t)(N * k));
  g.moe_aux_sum += ops::moe_route(a.m_probs.data(), a.m_slot.data(), a.m_gate.data(), logits.data(), N, E, k, cap, k > 1 ? 1 : 0);
  Buf<T>().swap(logits);
  Buf<T> disp((size_t)(rows * C));
  ops::moe_dispatch(disp.data(), a.ln2.data(), a.m_slot.data(), N, k, C, rows);
  a.m_xe.resize((size_t)(rows * C));
  exchange(g.ep, disp.data(), a.m_xe.data(), El, cap, C, E);
  // Local expert l of block b (source rank b / El... in expert order: block = src * El + l).
  a.fc1.resize((size_t)(rows * F1)); a.act.resize((size_t)(rows * Fe));
  Buf<T>& eout = disp;  // reused: the dispatched copies are in m_xe now
  for (long b = 0; b < E; ++b) {
    const long ge = er * El + b % El;  // the global expert
    const T* xb = a.m_xe.data() + b * cap * C;
    T* h = a.fc1.data() + b * cap * F1;
    T* act = a.act.data() + b * cap * Fe;
    ops::matmul(h, xb, g.p(W.ex_w1) + ge * C * F1, cap, F1, C, false, false, T(1), T(0));
    if (W.ex_b1 >= 0) ops::add_bias(h, h, g.p(W.ex_b1) + ge * F1, cap, F1);
    if (s.gelu) ops::gelu_fwd(act, h, cap * Fe);
    else ops::swiglu_fwd(act, h, cap, Fe);
    ops::matmul(eout.data() + b * cap * C, act, g.p(W.ex_w2) + ge * Fe * C, cap, C, Fe, false, false, T(1), T(0));
  }
  if (g.tp) g.tp->all_reduce_sum(eout.data(), rows * C, dt(T{}));  // row-parallel fc2: partial sums over tp
  if (W.ex_b2 >= 0)
    for (long b = 0; b < E; ++b)
      ops::add_bias(eout.data() + b * cap * C, eout.data() + b * cap * C, g.p(W.ex_b2) + (er * El + b % El) * C, cap, C);
  a.m_ye.resize((size_t)(rows * C));
  exchange(g.ep, eout.data(), a.m_ye.data(), El, cap, C, E);
  ops::moe_combine(x_out, a.m_ye.data(), a.m_slot.data(), a.m_gate.data(), N, k, C);
}

template <class T>
void moe_mlp_bwd(const Gpt<T>& g, const LayerParams& W, LayerActs<T>& a, const T* dz, T* dln, long N) {
  const GptShape& s = g.lay.s;
  const long C = (long)s.C, E = (long)s.experts, k = (long)s.top_k, Fe = (long)s.fe_loc(), F1 = (long)s.fe1_cols();
  const long cap = moe_capacity(N, E, k, s.capacity_factor), rows = E * cap;
  const int ep = g.ep ? g.ep->size() : 1, er = g.ep ? g.ep->rank() : 0;
  const long El = E / ep;
  auto release = [](Buf<T>& v) { Buf<T>().swap(v); };
  Buf<T> dye((size_t)(rows * C)), dgate((size_t)(N * k));
  ops::fill(dye.data(), T(0), rows * C);
  ops::fill(dgate.data(), T(0), N * k);
  ops::moe_combine_bwd(dye.data(), dgate.data(), dz, a.m_ye.data(), a.m_slot.data(), a.m_gate.data(), N, k, C);
  release(a.m_ye);
  Buf<T> deo((size_t)(rows * C));  // expert-output gradients in expert order
  exchange(g.ep, dye.data(), deo.data(), El, cap, C, E);
  Buf<T>& dxe = dye;  // reused: expert-input gradients in expert order
  for (long b = 0; b < E; ++b) {
    const long ge = er * El + b % El;
    const T* d = deo.data() + b * cap * C;
    T* act = a.act.data() + b * cap * Fe;
    T* h = a.fc1.data() + b * cap * F1;
    if (W.ex_b2 >= 0) ops::bias_bwd(g.g(W.ex_b2) + ge * C, d, cap, C);
    ops::matmul(g.g(W.ex_w2) + ge * Fe * C, act, d, Fe, C, cap, true, false, T(1), T(1));
    Buf<T> dact((size_t)(cap * Fe));
    ops::matmul(dact.data(), d, g.p(W.ex_w2) + ge * Fe * C, cap, Fe, C, false, true, T(1), T(0));
    if (s.gelu) ops::gelu_bwd_set(h, h, dact.data(), cap * Fe);  // h becomes d fc1 in place
    else ops::swiglu_bwd_set(h, h, dact.data(), cap, Fe);
    if (W.ex_b1 >= 0) ops::bias_bwd(g.g(W.ex_b1) + ge * F1, h, cap, F1);
    const T* xb = a.m_xe.data() + b * cap * C;
    ops::matmul(g.g(W.ex_w1) + ge * C * F1, xb, h, C, F1, cap, true, false, T(1), T(1));
    ops::matmul(dxe.data() + b * cap * C, h, g.p(W.ex_w1) + ge * C * F1, cap, C, F1, false, true, T(1), T(0));
  }
  if (g.tp) g.tp->all_reduce_sum(dxe.data(), rows * C, dt(T{}));  // column-parallel fc1: partial over tp
  for (Buf<T>* v : {&a.fc1, &a.act, &a.m_xe, &deo}) release(*v);
  Buf<T> ddisp((size_t)(rows * C));
  exchange(g.ep, dxe.data(), ddisp.data(), El, cap, C, E);
  release(dye);
  ops::fill(dln, T(0), N * C);
  ops::moe_dispatch_bwd(dln, ddisp.data(), a.m_slot.data(), N, k, C);
  release(ddisp);
  Buf<T> dlogits((size_t)(N * E));
  ops::fill(dlogits.data(), T(0), N * E);
  ops::moe_route_bwd(dlogits.data(), a.m_probs.data(), a.m_slot.data(), dgate.data(), N, E, k, cap, k > 1 ? 1 : 0,
                     T(g.moe_aux_weight));
  ops::matmul(g.g(W.router_w), a.ln2.data(), dlogits.data(), C, E, N, true, false, T(1), T(1));
  ops::matmul(dln, dlogits.data(), g.p(W.router_w), N, C, E, false, true, T(1), T(1));
  for (Buf<T>* v : {&a.m_probs, &a.m_gate, &a.ln2}) release(*v);
  Buf<int32_t>().swap(a.m_slot);
}

template void moe_mlp_fwd<float>(const Gpt<float>&, const LayerParams&, LayerActs<float>&, float*, long);
template void moe_mlp_fwd<double>(const Gpt<double>&, const LayerParams&, LayerActs<double>&, double*, long);
template void moe_mlp_bwd<float>(const Gpt<float>&, const LayerParams&, LayerActs<float>&, const float*, float*, long);
template void moe_mlp_bwd<double>(const Gpt<double>&, const LayerParams&, LayerActs<double>&, const double*, double*,
                                  long);

}  // namespace tp::exec
