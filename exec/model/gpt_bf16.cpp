// gpt_bf16: bf16 storage (training.precision "bf16"; gpt.hpp): the saved activations packed between a layer's forward
// and backward (LayerActs::pack_bf16 / unpack_bf16), and the weight matrices' bf16 copies (WeightCopies16, Gpt::p16).
// Every value stored as bf16 is ops::pack_bf16's rounding of the T value, the rounding the bf16 GEMM operands get, so
// what a GEMM reads packed is exactly what it would have rounded itself.
#include <array>
#include <stdexcept>

#include "exec/model/gpt.hpp"
#include "exec/backends/ops.hpp"

namespace tp::exec {

// The tensors of a (const) LayerActs that bf16 storage packs, in LayerActs::b16's order (att: null when it holds
// flash's statistics).
template <class Acts>
static auto bf16_fields(Acts& a, bool att_is_stats) {
  using P = decltype(&a.x_in);
  return std::array<P, 15>{&a.x_in, &a.ln1, &a.q, &a.k, &a.v, att_is_stats ? nullptr : &a.att, &a.attn, &a.x_mid,
                           &a.ln2, &a.fc1, &a.act, &a.m_xe, &a.m_ye, &a.s_fc1, &a.s_act};
}

template <class T>
void LayerActs<T>::pack_bf16(bool att_is_stats) {
  const auto f = bf16_fields(*this, att_is_stats);
  b16.resize(f.size());
  for (size_t i = 0; i < f.size(); ++i) {
    if (!f[i] || f[i]->empty()) continue;
    if (!b16[i].empty()) {  // packed and unchanged since (round_input's x_in): its copy is kept
      Buf<T>().swap(*f[i]);
      continue;
    }
    b16[i].resize(f[i]->size());
    ops::pack_bf16(b16[i].data(), f[i]->data(), (long)f[i]->size());
    Buf<T>().swap(*f[i]);
  }
}

template <class T>
void LayerActs<T>::unpack_bf16(bool att_is_stats) {
  const auto f = bf16_fields(*this, att_is_stats);
  bool kept = false;
  for (size_t i = 0; i < b16.size() && i < f.size(); ++i) {
    if (b16[i].empty()) continue;
    if (stay16 >> i & 1u) {  // (read packed by the backward)
      kept = true;
      continue;
    }
    f[i]->resize(b16[i].size());
    ops::unpack_bf16(f[i]->data(), b16[i].data(), (long)b16[i].size());
    Buf<uint16_t>().swap(b16[i]);
  }
  if (!kept) b16.clear();
}

template <class T>
const uint16_t* LayerActs<T>::packed(const Buf<T>& field) const {
  const auto f = bf16_fields(*this, false);
  for (size_t i = 0; i < b16.size() && i < f.size(); ++i)
    if (f[i] == &field && !b16[i].empty()) return b16[i].data();
  return nullptr;
}

template <class T>
void LayerActs<T>::release_packed(const Buf<T>& field) {
  const auto f = bf16_fields(*this, false);
  for (size_t i = 0; i < b16.size() && i < f.size(); ++i)
    if (f[i] == &field) Buf<uint16_t>().swap(b16[i]), stay16 &= ~(1u << i);
}

template <class T>
const uint16_t* LayerActs<T>::pack_now(Buf<T>& field, bool stays) {
  const auto f = bf16_fields(*this, false);
  b16.resize(f.size());
  for (size_t i = 0; i < f.size(); ++i) {
    if (f[i] != &field) continue;
    b16[i].resize(field.size());
    ops::pack_bf16(b16[i].data(), field.data(), (long)field.size());
    Buf<T>().swap(field);
    if (stays) stay16 |= 1u << i;
    return b16[i].data();
  }
  throw std::logic_error("LayerActs::pack_now: not a packed field");
}

template <class T>
void LayerActs<T>::stays_packed(const Buf<T>& field) {
  const auto f = bf16_fields(*this, false);
  for (size_t i = 0; i < f.size(); ++i)
    if (f[i] == &field) {
      stay16 |= 1u << i;
      return;
    }
  throw std::logic_error("LayerActs::stays_packed: not a packed field");
}

template <class T>
uint16_t* LayerActs<T>::out16(Buf<T>& field, size_t n) {
  const auto f = bf16_fields(*this, false);
  b16.resize(f.size());
  for (size_t i = 0; i < f.size(); ++i) {
    if (f[i] != &field) continue;
    Buf<T>().swap(field);
    b16[i].resize(n);
    stay16 |= 1u << i;
    return b16[i].data();
  }
  throw std::logic_error("LayerActs::out16: not a packed field");
}

template <class T>
void LayerActs<T>::round_input() {
  if (x_in.empty()) return;
  b16.resize(bf16_fields(*this, false).size());
  b16[0].resize(x_in.size());  // (x_in is bf16_fields' first)
  ops::pack_bf16(b16[0].data(), x_in.data(), (long)x_in.size());
  ops::unpack_bf16(x_in.data(), b16[0].data(), (long)x_in.size());
}

template <class T>
void round_bf16(T* x, long n) {
  if (n <= 0) return;
  Buf<uint16_t> h((size_t)n);
  ops::pack_bf16(h.data(), x, n);
  ops::unpack_bf16(x, h.data(), n);
}

template <class T>
void round_bf16(Buf<T>& x) {
  round_bf16(x.data(), (long)x.size());
}

template <class T>
const uint16_t* WeightCopies16::of(size_t v, const T* src, long long n) {
  if (at[v]) return at[v];
  if (held[v]) return copy[v].data();
  if (made[v] != step || (long long)copy[v].size() != n) {
    copy[v].resize((size_t)n);
    ops::pack_bf16(copy[v].data(), src, (long)n);
    made[v] = step;
  }
  return copy[v].data();
}

size_t WeightCopies16::bytes() const {
  size_t n = 0;
  for (const Buf<uint16_t>& c : copy) n += c.size();
  return n * sizeof(uint16_t);
}

template <class T>
const uint16_t* Gpt<T>::p16(int view) const {
  if (!this->w16) return nullptr;
  return this->w16->of((size_t)view, p(view), lay.views[(size_t)view].count);
}

template <class T>
Buf<uint16_t> Gpt<T>::grad16(const T* d, long n) const {
  Buf<uint16_t> c;
  if (pack_operands16 && n > 0) {
    c.resize((size_t)n);
    ops::pack_bf16(c.data(), d, n);
  }
  return c;
}

template <class T>
Buf<uint16_t> Gpt<T>::bias_grad16(T* db, const T* d, long N, long C) const {
  if (!db) return grad16(d, N * C);
  Buf<uint16_t> c;
  if (pack_operands16 && N * C > 0) c.resize((size_t)(N * C));
  ops::bias_bwd(db, d, N, C, c.empty() ? nullptr : c.data());
  return c;
}

#define TP_GPT_BF16_INSTANTIATE(T)                                              \
  template void LayerActs<T>::pack_bf16(bool);                                  \
  template void LayerActs<T>::round_input();                                    \
  template const uint16_t* LayerActs<T>::pack_now(Buf<T>&, bool);               \
  template void LayerActs<T>::unpack_bf16(bool);                                \
  template const uint16_t* LayerActs<T>::packed(const Buf<T>&) const;           \
  template void LayerActs<T>::release_packed(const Buf<T>&);                    \
  template uint16_t* LayerActs<T>::out16(Buf<T>&, size_t);                      \
  template void LayerActs<T>::stays_packed(const Buf<T>&);                      \
  template void round_bf16<T>(Buf<T>&);                                         \
  template void round_bf16<T>(T*, long);                                        \
  template const uint16_t* WeightCopies16::of<T>(size_t, const T*, long long);  \
  template const uint16_t* Gpt<T>::p16(int) const;                              \
  template Buf<uint16_t> Gpt<T>::grad16(const T*, long) const;                  \
  template Buf<uint16_t> Gpt<T>::bias_grad16(T*, const T*, long, long) const;
TP_GPT_BF16_INSTANTIATE(float)
TP_GPT_BF16_INSTANTIATE(double)

}  // namespace tp::exec
