// cp_attention: the context-parallel token selection, positions and attention. See cp_attention.hpp.
// Layouts: full K / V [B, T, Kl, D] in global position order; the all-gathered blocks [cp][B, Tl, Kl, D] in
// cp-rank order; the saved probabilities per sequence b: [half 0: Hl, Lc, Tk0 | half 1: Hl, Lc, Tk1] with
// Tk_h = (chunk(h) + 1) Lc, the keys a chunk's queries can see.
#include "exec/model/cp_attention.hpp"

#include <algorithm>

#include "exec/model/gpt.hpp"
#include "exec/backends/ops.hpp"

namespace tp::exec {

namespace {

long chunk_of(int rank, int size, int h) { return h == 0 ? rank : 2L * size - 1 - rank; }

// f(b, h, local row offset, global row offset) for every (sequence, half) of cp rank `r` (rows are Lc long).
template <class F>
void each_block(const CpCtx& c, int r, long B, F&& f) {
  const long Lc = c.Lc(), Tl = c.Tl();
  for (long b = 0; b < B; ++b)
    for (int h = 0; h < 2; ++h) f(b, h, b * Tl + h * Lc, b * c.T + chunk_of(r, c.size, h) * Lc);
}

// full [B, T, W] (global order) = the cp group's local [B, Tl, W] blocks, all-gathered.
template <class T>
void gather_seq(const CpCtx& c, const T* local, Buf<T>& full, long B, long W) {
  const long n = B * c.Tl() * W, Lc = c.Lc();
  Buf<T> all((size_t)n * c.size);
  c.cp->all_gather(local, all.data(), n, dtype_of<T>());
  full.resize((size_t)B * c.T * W);
  for (int s = 0; s < c.size; ++s)
    each_block(c, s, B, [&](long, int, long lrow, long grow) {
      ops::copy(full.data() + grow * W, all.data() + s * n + lrow * W, Lc * W);
    });
}

// local[B, Tl, W] += the cp group's sum of full [B, T, W] rows that this rank owns (reduce-scatter).
template <class T>
void scatter_seq(const CpCtx& c, const T* full, T* local, long B, long W) {
  const long n = B * c.Tl() * W, Lc = c.Lc();
  Buf<T> blocks((size_t)n * c.size), mine((size_t)n);
  for (int s = 0; s < c.size; ++s)
    each_block(c, s, B, [&](long, int, long lrow, long grow) {
      ops::copy(blocks.data() + s * n + lrow * W, full + grow * W, Lc * W);
    });
  c.cp->reduce_scatter_sum(blocks.data(), mine.data(), n, dtype_of<T>());
  ops::accumulate(local, mine.data(), n);
}

// The saved probabilities (flash: statistics) of (b, h).
long att_offset(const CpCtx& c, long b, int h, long Hl) {
  const long Lc = c.Lc();
  if (c.flash) return (b * 2 + h) * Hl * Lc * 2;
  return b * Hl * Lc * Lc * (2L * c.size + 1) + (h == 0 ? 0 : Hl * Lc * (c.chunk(0) + 1) * Lc);
}

// f(x row offset, global position of the first row, rows) for each run of consecutive global positions among
// the local rows [row0, row0 + rows).
template <class F>
void each_position_run(const CpCtx& c, long rows, long row0, F&& f) {
  const long Lc = c.Lc(), Tl = c.Tl();
  for (long i = 0; i < rows;) {
    const long t = (row0 + i) % Tl, n = std::min(rows - i, Lc - t % Lc);
    f(i, c.global_pos(t), n);
    i += n;
  }
}

}  // namespace

void cp_select_tokens(const CpCtx& c, const int32_t* full, int32_t* local, long B) {
  const long Tl = c.Tl();
  for (long b = 0; b < B; ++b)
    for (long t = 0; t < Tl; ++t) local[b * Tl + t] = full[b * c.T + c.global_pos(t)];
}

template <class T>
void cp_add_positions(const CpCtx& c, T* x, const T* wpe, long rows, long C, long row0) {
  // A run of n rows at consecutive positions p.. adds wpe rows p..p+n-1 (add_positions with its Tn = n).
  each_position_run(c, rows, row0, [&](long i, long p, long n) { ops::add_positions(x + i * C, wpe + p * C, n, C, n, 0); });
}

template <class T>
void cp_positions_bwd(const CpCtx& c, T* dwpe, const T* dx, long rows, long C, long row0) {
  each_position_run(c, rows, row0, [&](long i, long p, long n) { ops::positions_bwd(dwpe + p * C, dx + i * C, n, C, n, 0); });
}

template <class T>
void cp_attention_fwd(const CpCtx& c, T* out, T* att, const T* q, const T* k, const T* v, long B, long Hl, long Kl,
                      long D) {
  Buf<T> kf, vf;  // [B, T, Kl, D]
  gather_seq(c, k, kf, B, Kl * D);
  gather_seq(c, v, vf, B, Kl * D);
  const long Lc = c.Lc(), Tl = c.Tl();
  for (long b = 0; b < B; ++b)
    for (int h = 0; h < 2; ++h) {
      const long Tk = (c.chunk(h) + 1) * Lc, qo = (b * Tl + h * Lc) * Hl * D, ko = b * c.T * Kl * D;
      if (c.flash)
        ops::flash_attention_fwd(out + qo, att + att_offset(c, b, h, Hl), q + qo, kf.data() + ko, vf.data() + ko, 1L,
                                 Lc, Tk, Hl, Kl, D, Hl * D, Kl * D);
      else
        ops::attention_fwd_kv(out + qo, att + att_offset(c, b, h, Hl), q + qo, kf.data() + ko, vf.data() + ko, 1L, Lc,
                              Tk, Hl, Kl, D);
    }
}

template <class T>
void cp_attention_bwd(const CpCtx& c, T* dq, T* dk, T* dv, const T* dout, const T* out, const T* att, const T* q,
                      const T* k, const T* v, long B, long Hl, long Kl, long D) {
  Buf<T> kf, vf, dkf, dvf;  // [B, T, Kl, D]
  gather_seq(c, k, kf, B, Kl * D);
  gather_seq(c, v, vf, B, Kl * D);
  const long Lc = c.Lc(), Tl = c.Tl(), nf = B * c.T * Kl * D;
  dkf.resize((size_t)nf);
  dvf.resize((size_t)nf);
  ops::fill(dkf.data(), T(0), nf);
  ops::fill(dvf.data(), T(0), nf);
  for (long b = 0; b < B; ++b)
    for (int h = 0; h < 2; ++h) {
      const long Tk = (c.chunk(h) + 1) * Lc, qo = (b * Tl + h * Lc) * Hl * D, ko = b * c.T * Kl * D;
      if (c.flash)
        ops::flash_attention_bwd(dq + qo, dkf.data() + ko, dvf.data() + ko, dout + qo, out + qo,
                                 att + att_offset(c, b, h, Hl), q + qo, kf.data() + ko, vf.data() + ko, 1L, Lc, Tk, Hl,
                                 Kl, D, Hl * D, Kl * D);
      else
        ops::attention_bwd_kv(dq + qo, dkf.data() + ko, dvf.data() + ko, dout + qo, att + att_offset(c, b, h, Hl),
                              q + qo, kf.data() + ko, vf.data() + ko, 1L, Lc, Tk, Hl, Kl, D);
    }
  Buf<T>().swap(kf);
  Buf<T>().swap(vf);
  scatter_seq(c, dkf.data(), dk, B, Kl * D);
  scatter_seq(c, dvf.data(), dv, B, Kl * D);
}

#define TP_CP_INSTANTIATE(T)                                                                                  \
  template void cp_add_positions<T>(const CpCtx&, T*, const T*, long, long, long);                            \
  template void cp_positions_bwd<T>(const CpCtx&, T*, const T*, long, long, long);                            \
  template void cp_attention_fwd<T>(const CpCtx&, T*, T*, const T*, const T*, const T*, long, long, long, long); \
  template void cp_attention_bwd<T>(const CpCtx&, T*, T*, T*, const T*, const T*, const T*, const T*, const T*, \
                                    const T*, long, long, long, long);
TP_CP_INSTANTIATE(float)
TP_CP_INSTANTIATE(double)
#undef TP_CP_INSTANTIATE

}  // namespace tp::exec
