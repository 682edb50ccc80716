// Optimus 2D GPT (exec/model/gpt2d.hpp) against the single-rank GPT (exec/model/gpt.hpp), run by ctest under mpirun with
// 4 ranks (exec.gpt2d_mpi_4: a 2 x 2 grid, float64). Plain main, no GoogleTest. For each configuration
// (GELU / SwiGLU x Hkv = 2 / 4; 2 layers, C 16, H 4, V 32, Tn 8) every rank runs the single-rank model locally
// (no communication) and the 2D model on the grid over two micro-batches (B = 2, then B = 4; gradients
// accumulate), from the same perturbed initialisation (biases and norm weights non-trivial), and checks:
//  - the loss sum of every micro-batch equal to 1e-12 relative, on every rank;
//  - the final hidden block equal to the matching block of the single-rank activations;
//  - every parameter gradient: the gathered full tensor (gather_grads_2d) equal to the single-rank gradient to
//    1e-10 relative (norm-wise per tensor), and this rank's owned blocks equal to the matching blocks
//    (shard_params_2d of the single-rank gradient); non-owned (column-replicated, rows != 0) gradients zero.
// The non-owned parameter copies (rows != 0) are poisoned with NaN: they must never be read.
// Also q = 1 (null row / column communicators) on each rank alone. Prints "ok" (rank 0) and exits 0 only when
// every rank passed.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "exec/comm/comm.hpp"
#include "exec/model/gpt.hpp"
#include "exec/model/gpt2d.hpp"
#include "models/plan.hpp"

using namespace tp::exec;

namespace {

int g_fail = 0, g_rank = 0;
std::string g_ctx;
double g_max_loss_err = 0, g_max_grad_err = 0;  // largest relative errors seen (reported by rank 0)

void fail(const std::string& what) {
  ++g_fail;
  std::fprintf(stderr, "rank %d: FAIL [%s] %s\n", g_rank, g_ctx.c_str(), what.c_str());
}

uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}
double unif(uint64_t i, uint64_t salt) { return (double)(mix(i * 1315423911ULL + salt) >> 11) / 9007199254740992.0; }

double rel_err(const double* a, const double* b, long n) {  // ||a - b|| / ||b|| (absolute when b = 0)
  double d = 0, r = 0;
  for (long i = 0; i < n; ++i) {
    d += (a[i] - b[i]) * (a[i] - b[i]);
    r += b[i] * b[i];
  }
  if (!(d == d)) return std::numeric_limits<double>::infinity();
  return r > 0 ? std::sqrt(d / r) : std::sqrt(d);
}

struct MicroBatch {
  long B;
  std::vector<int32_t> in, tgt;
};

// Runs both models over the micro-batches; comm: row / col / tp of the grid (q = 1: null / null / local).
void check_config(bool gelu, long long Hkv, int q, int tp_rank, Comm* row, Comm* col, Comm& tp) {
  const long Tn = 8;
  GptShape s;
  s.layers = 2; s.C = 16; s.H = 4; s.Hkv = Hkv; s.D = 4; s.F = gelu ? 64 : 40; s.V = 32; s.maxT = 10;
  s.gelu = gelu;
  const GptLayout full = gpt_layout(s);
  std::vector<double> fp = init_full_params<double>(s, 1234);
  for (long long i = 0; i < full.total; ++i) fp[i] += 0.2 * (unif(i, 7) - 0.5);  // non-trivial biases / norms

  std::vector<MicroBatch> mbs;
  for (long B : {2L, 4L}) {
    MicroBatch m{B, std::vector<int32_t>(B * Tn), std::vector<int32_t>(B * Tn)};
    for (long i = 0; i < B * Tn; ++i) {
      m.in[i] = (int32_t)(mix(i + 100 * B) % s.V);
      m.tgt[i] = (int32_t)(mix(i + 100 * B + 77) % s.V);
    }
    mbs.push_back(m);
  }
  long total_tokens = 0;
  for (auto& m : mbs) total_tokens += m.B * Tn;
  const double scale = 1.0 / (double)total_tokens;

  // Single-rank reference.
  std::vector<double> rp = fp, rg(full.total, 0.0);
  Gpt<double> ref;
  ref.lay = full;
  ref.params = rp.data();
  ref.grads = rg.data();
  // 2D model.
  const Gpt2dLayout lay = gpt2d_layout(s, q, tp_rank);
  std::vector<double> p2 = shard_params_2d(full, fp, lay), g2(lay.total, 0.0);
  for (size_t i = 0; i < lay.views.size(); ++i)
    if (!lay.owned(i))
      for (long long k = 0; k < lay.views[i].count; ++k)
        p2[lay.views[i].offset + k] = std::numeric_limits<double>::quiet_NaN();
  Gpt2d<double> m2;
  m2.lay = lay;
  m2.row = row;
  m2.col = col;
  m2.params = p2.data();
  m2.grads = g2.data();

  const long C = s.C, Cl = lay.c_loc();
  for (size_t j = 0; j < mbs.size(); ++j) {
    const MicroBatch& mb = mbs[j];
    const long B = mb.B, N = B * Tn, Nl = lay.act_rows(B, Tn);
    // reference
    std::vector<LayerActs<double>> ra(s.layers);
    HeadActs<double> rh;
    std::vector<double> x0(N * C), x1(N * C);
    ref.embed_fwd(x0.data(), mb.in.data(), B, Tn);
    for (int l = 0; l < s.layers; ++l) {
      ref.layer_fwd(l, x0.data(), x1.data(), ra[l], B, Tn);
      std::swap(x0, x1);
    }
    std::vector<double> xfin = x0;
    const double rloss = ref.head_fwd(x0.data(), mb.tgt.data(), rh, B, Tn);
    ref.head_bwd(x0.data(), mb.tgt.data(), rh, B, Tn, scale);
    for (int l = (int)s.layers - 1; l >= 0; --l) {
      ref.layer_bwd(l, x0.data(), x1.data(), ra[l], B, Tn);
      std::swap(x0, x1);
    }
    ref.embed_bwd(x0.data(), mb.in.data(), B, Tn);
    // 2D
    std::vector<LayerActs<double>> a2(s.layers);
    HeadActs<double> h2;
    std::vector<double> y0(Nl * Cl), y1(Nl * Cl);
    m2.embed_fwd(y0.data(), mb.in.data(), B, Tn);
    for (int l = 0; l < s.layers; ++l) {
      m2.layer_fwd(l, y0.data(), y1.data(), a2[l], B, Tn);
      std::swap(y0, y1);
    }
    // final hidden block (r, c) against the reference
    std::vector<double> blk(Nl * Cl);
    for (long n = 0; n < Nl; ++n)
      for (long k = 0; k < Cl; ++k) blk[n * Cl + k] = xfin[(lay.row * Nl + n) * C + lay.col * Cl + k];
    double e = rel_err(y0.data(), blk.data(), Nl * Cl);
    if (!(e <= 1e-12)) fail("micro-batch " + std::to_string(j) + ": hidden block rel err " + std::to_string(e));
    const double loss = m2.head_fwd(y0.data(), mb.tgt.data(), h2, B, Tn);
    e = std::fabs(loss - rloss) / std::fabs(rloss);
    g_max_loss_err = std::max(g_max_loss_err, e);
    if (!(e <= 1e-12))
      fail("micro-batch " + std::to_string(j) + ": loss " + std::to_string(loss) + " vs " + std::to_string(rloss));
    m2.head_bwd(y0.data(), mb.tgt.data(), h2, B, Tn, scale);
    for (int l = (int)s.layers - 1; l >= 0; --l) {
      m2.layer_bwd(l, y0.data(), y1.data(), a2[l], B, Tn);
      std::swap(y0, y1);
    }
    m2.embed_bwd(y0.data(), mb.in.data(), B, Tn);
  }

  // Gradients: gathered full tensors, then this rank's blocks.
  std::vector<double> gfull = gather_grads_2d(full, lay, g2.data(), tp);
  std::vector<double> gref_blocks = shard_params_2d(full, rg, lay);
  for (size_t i = 0; i < full.views.size(); ++i) {
    const ParamView& v = full.views[i];
    double e = rel_err(gfull.data() + v.offset, rg.data() + v.offset, (long)v.count);
    g_max_grad_err = std::max(g_max_grad_err, e);
    if (!(e <= 1e-10)) fail("gradient " + v.name + " (gathered): rel err " + std::to_string(e));
    double nrm = 0;
    for (long long k = 0; k < v.count; ++k) nrm += rg[v.offset + k] * rg[v.offset + k];
    if (!(nrm > 0)) fail("gradient " + v.name + " is zero in the reference (the test exercises nothing)");
  }
  for (size_t i = 0; i < lay.views.size(); ++i) {
    const ParamView& v = lay.views[i];
    const double* got = g2.data() + v.offset;
    if (!lay.owned(i)) {
      for (long long k = 0; k < v.count; ++k)
        if (got[k] != 0.0) { fail("non-owned gradient " + v.name + " written"); break; }
      continue;
    }
    const ParamView& fv = full.view(v.name);
    double fn = 0, d = 0;
    for (long long k = 0; k < fv.count; ++k) fn += rg[fv.offset + k] * rg[fv.offset + k];
    for (long long k = 0; k < v.count; ++k) d += std::pow(got[k] - gref_blocks[v.offset + k], 2);
    if (!(std::sqrt(d) <= 1e-10 * std::sqrt(fn))) fail("gradient block " + v.name + " differs");
  }
}

}  // namespace

int main() {
  Comm& world = tp::exec::world();
  g_rank = world.rank();
  if (world.size() != 4) {
    std::fprintf(stderr, "test_gpt2d_mpi: needs 4 ranks, got %d\n", world.size());
    finalize_world();
    return 2;
  }
  const int q = 2, k = world.rank();
  const tp::GridPos gp = tp::grid_pos(k, q, 1);
  std::unique_ptr<Comm> row = world.split(gp.row, gp.col);  // grid row, ordered by column
  std::unique_ptr<Comm> col = world.split(gp.col, gp.row);  // grid column, ordered by row
  if (row->rank() != gp.col || col->rank() != gp.row) fail("grid communicators misordered");
  std::unique_ptr<Comm> local = make_local_comm();
  for (bool gelu : {true, false})
    for (long long Hkv : {2LL, 4LL}) {
      g_ctx = std::string(gelu ? "gelu" : "swiglu") + " Hkv " + std::to_string(Hkv);
      try {
        check_config(gelu, Hkv, q, k, row.get(), col.get(), world);
        g_ctx += " q 1";
        check_config(gelu, Hkv, 1, 0, nullptr, nullptr, *local);
      } catch (const std::exception& e) {
        fail(std::string("exception: ") + e.what());
        world.abort(1, e.what());
      }
    }
  int fails = g_fail;
  world.all_reduce_sum(&fails, 1, Dtype::i32);
  if (world.rank() == 0) {
    std::printf("max relative error: loss %.3g, gradient %.3g\n", g_max_loss_err, g_max_grad_err);
    if (fails == 0) std::printf("ok\n");
    else std::printf("FAILED (%d failures)\n", fails);
  }
  finalize_world();
  return fails == 0 ? 0 : 1;
}
