// train: the rank runtime of `trainplan run`. See train.hpp.
// One step: for each micro-batch j of this dp rank, embedding -> layers -> head loss forward, then the
// backward in reverse; gradients accumulate over micro-batches; the dp group all-reduces (ZeRO 0) or
// reduce-scatters and all-gathers (ZeRO 1) them; the global gradient norm is clipped; AdamW updates.
// Loss scale: every token of the global batch weighs 1 / (global_batch * seq_len), so the summed gradient is
// the gradient of the mean loss whatever the layout.
#include "train.hpp"

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <unistd.h>

#include "exec/data.hpp"
#include "exec/gpt.hpp"
#include "exec/ops.hpp"

namespace tp::exec {

void check_runnable(const Scenario& sc) {
  const Plan& p = sc.plan;
  std::vector<std::string> no;
  auto need = [&](bool ok, const std::string& what) { if (!ok) no.push_back(what); };
  need(p.pp == 1, "$.plan.pp: pipeline parallelism (pp > 1)");
  need(p.tp_mode == TpMode::d1, "$.plan.tp_mode: \"2d\"");
  need(!p.sequence_parallel, "$.plan.sequence_parallel");
  need(p.zero <= 1, "$.plan.zero: ZeRO-2/3");
  need(p.grad_accumulation == GradAccumulation::standard, "$.plan.grad_accumulation: \"layered\"");
  need(!p.offload.on(), "$.plan.offload");
  need(p.ep == 1 && sc.model.moe.experts == 0, "mixture of experts ($.model.moe, $.plan.ep)");
  need(!sc.delink.on(), "$.plan.delink");
  need(p.recompute != Recompute::selective, "$.plan.recompute: \"selective\"");
  if (!no.empty()) {
    std::vector<std::string> msgs;
    for (const std::string& w : no) msgs.push_back(w + ": not supported by `trainplan run` yet (simulate supports it)");
    throw InputError(msgs);
  }
}

namespace {

double peak_rss_bytes() {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return (double)ru.ru_maxrss * 1024.0;
}

// The run's token stream: the given llm.c token file, or the bundled tiny corpus (byte tokens).
std::vector<uint16_t> load_run_tokens(const std::string& path, long long vocab) {
  std::vector<uint16_t> t = read_tokens(path.empty() ? ensure_corpus_tokens() : path);
  uint16_t mx = 0;
  for (uint16_t x : t) mx = std::max(mx, x);
  if ((long long)mx >= vocab)
    throw InputError({(path.empty() ? std::string("the bundled corpus") : path) + ": token id " + std::to_string(mx) +
                      " is outside the model's vocabulary (" + std::to_string(vocab) + ")"});
  return t;
}

template <class T>
Dtype dtype_of() { return sizeof(T) == 8 ? Dtype::f64 : Dtype::f32; }

template <class T>
RunResult run_typed(const Scenario& sc, const RunOptions& o, Comm& world) {
  const Plan& p = sc.plan;
  const long long Tn = sc.training.seq_len, b = p.microbatch, m = p.num_microbatches;
  const RankCoord rc = rank_coord(p, world.rank());
  std::unique_ptr<Comm> tp_comm = world.split(rc.dp + p.dp * rc.stage, rc.tp);   // same dp, stage
  std::unique_ptr<Comm> dp_comm = world.split(rc.tp + p.tp * rc.stage + (1 << 20), rc.dp);  // same tp, stage

  // Weights: the full initialisation, this rank's tp shard.
  GptShape full_shape = gpt_shape(sc.model, Tn, 1, 0);
  GptLayout full = gpt_layout(full_shape);
  GptLayout lay = gpt_layout(gpt_shape(sc.model, Tn, p.tp, rc.tp));
  std::vector<T> params = shard_params<T>(full, init_full_params<T>(full_shape, o.seed), lay);
  // ZeRO-1 shards the flat buffer into dp pieces of S elements (padded to S * dp).
  const bool zero1 = p.zero >= 1 && p.dp > 1;
  const long long S = zero1 ? (lay.total + p.dp - 1) / p.dp : lay.total;
  params.resize(zero1 ? S * p.dp : lay.total, T(0));
  std::vector<T> grads(params.size(), T(0)), m1(S, T(0)), m2(S, T(0)), gshard(zero1 ? S : 0);
  Gpt<T> model;
  model.lay = lay;
  model.tp = p.tp > 1 ? tp_comm.get() : nullptr;
  model.params = params.data();
  model.grads = grads.data();
  // Parameters replicated across tp ranks (counted once in the gradient norm).
  std::vector<char> replicated(lay.views.size(), 0);
  for (size_t i = 0; i < lay.views.size(); ++i) {
    const std::string& n = lay.views[i].name;
    bool sharded = n.find("qkv_") != std::string::npos || n.find("fc1_") != std::string::npos ||
                   n.find("proj_w") != std::string::npos || n.find("fc2_w") != std::string::npos;
    replicated[i] = !sharded;
  }

  std::vector<uint16_t> tokens = load_run_tokens(o.data, sc.model.vocab);
  const long long L = sc.model.layers, C = sc.model.hidden, N = b * Tn;
  std::vector<LayerActs<T>> acts(L);
  HeadActs<T> head;
  std::vector<T> x0(N * C), x1(N * C), dx0(N * C), dx1(N * C);
  std::vector<int32_t> in(N), tgt(N);
  const T scale = T(1.0 / ((double)sc.training.global_batch * (double)Tn));
  const int warmup = o.warmup_steps >= 0 ? o.warmup_steps : std::max(1, o.steps / 10);

  RunResult res;
  double tokens_after_first = 0, time_after_first = 0;
  for (int step = 0; step < o.steps; ++step) {
    auto t0 = std::chrono::steady_clock::now();
    std::fill(grads.begin(), grads.end(), T(0));
    double loss_sum = 0;
    for (long long j = 0; j < m; ++j) {
      // Global sequences (d * m + j) * b .. + b of the step: this dp rank's micro-batch j.
      fill_micro_batch(tokens, BatchSpec{(int)Tn, (int)b, o.seed}, step, (long)((rc.dp * m + j) * b), in.data(), tgt.data());
      model.embed_fwd(x0.data(), in.data(), b, Tn);
      for (long long l = 0; l < L; ++l) {
        model.layer_fwd((int)l, x0.data(), x1.data(), acts[l], b, Tn);
        if (p.recompute == Recompute::full) acts[l].clear_all_but_input();
        std::swap(x0, x1);
      }
      loss_sum += (double)model.head_fwd(x0.data(), tgt.data(), head, b, Tn);
      model.head_bwd(dx0.data(), tgt.data(), head, b, Tn, scale);
      for (long long l = L - 1; l >= 0; --l) {
        if (p.recompute == Recompute::full) {  // rebuild the layer's activations from its saved input
          std::vector<T> xin = acts[l].x_in;
          model.layer_fwd((int)l, xin.data(), x1.data(), acts[l], b, Tn);
        }
        model.layer_bwd((int)l, dx0.data(), dx1.data(), acts[l], b, Tn);
        std::swap(dx0, dx1);
      }
      model.embed_bwd(dx0.data(), in.data(), b, Tn);
    }
    // Data-parallel reduction. ZeRO 0: all-reduce, every rank updates all parameters. ZeRO 1: reduce-scatter
    // the flat gradient into dp shards [lo, hi), update only the own shard (optimizer state for it alone), then
    // all-gather the parameters. Sums are rank-ordered either way, so both give the same numbers.
    double loss_all = loss_sum;
    if (p.dp > 1) dp_comm->all_reduce_sum(&loss_all, 1, Dtype::f64);
    long long lo = 0, hi = lay.total;
    if (zero1) {
      dp_comm->reduce_scatter_sum(grads.data(), gshard.data(), S, dtype_of<T>());
      lo = rc.dp * S;
      hi = std::min(lay.total, lo + S);
    } else if (p.dp > 1) {
      dp_comm->all_reduce_sum(grads.data(), lay.total, dtype_of<T>());
    }
    auto G = [&](long long i) { return zero1 ? gshard.data() + (i - lo) : grads.data() + i; };  // gradient i
    // Global gradient norm: sharded tensors summed over tp ranks, tp-replicated ones once, dp shards summed.
    double sq = 0;
    for (size_t i = 0; i < lay.views.size(); ++i) {
      const ParamView& v = lay.views[i];
      long long a = std::max(lo, v.offset), z = std::min(hi, v.offset + v.count);
      if (a < z && (!replicated[i] || rc.tp == 0)) sq += ops::sum_squares(G(a), (long)(z - a));
    }
    if (zero1) dp_comm->all_reduce_sum(&sq, 1, Dtype::f64);
    if (p.tp > 1) tp_comm->all_reduce_sum(&sq, 1, Dtype::f64);
    double norm = std::sqrt(sq);
    T clip = norm > o.grad_clip && o.grad_clip > 0 ? T(o.grad_clip / norm) : T(1);
    if (clip != T(1)) ops::scale(G(lo), G(lo), clip, (long)(hi - lo));
    // Learning rate: linear warm-up, then cosine to min_lr_ratio * lr.
    double lr = o.lr;
    if (step < warmup) lr = o.lr * (step + 1) / warmup;
    else if (o.steps > warmup) {
      double r = (double)(step - warmup) / std::max(1, o.steps - warmup);
      lr = o.lr * (o.min_lr_ratio + (1 - o.min_lr_ratio) * 0.5 * (1 + std::cos(3.141592653589793 * r)));
    }
    for (const ParamView& v : lay.views) {
      long long a = std::max(lo, v.offset), z = std::min(hi, v.offset + v.count);
      if (a >= z) continue;
      ops::adamw(params.data() + a, G(a), m1.data() + (a - lo), m2.data() + (a - lo), (long)(z - a), T(lr), T(o.beta1),
                 T(o.beta2), T(o.eps), T(v.decay ? o.weight_decay : 0), (long)step + 1);
    }
    if (zero1) {
      std::vector<T> mine(params.begin() + lo, params.begin() + lo + S);
      dp_comm->all_gather(mine.data(), params.data(), S, dtype_of<T>());
    }
    double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    double mean_loss = loss_all / ((double)sc.training.global_batch * (double)Tn);
    res.losses.push_back(mean_loss);
    res.grad_norm.push_back(norm);
    res.step_time_s.push_back(dt);
    if (step > 0) { tokens_after_first += (double)sc.training.global_batch * Tn; time_after_first += dt; }
    if (o.progress && world.rank() == 0) {
      double tps = (double)sc.training.global_batch * Tn / dt;
      std::fprintf(stderr, "\rstep %d/%d  loss %.4f  %.0f tokens/s  ETA %.0f s   ", step + 1, o.steps, mean_loss, tps,
                   dt * (o.steps - step - 1));
      if (step + 1 == o.steps) std::fprintf(stderr, "\n");
    }
  }
  res.tokens_per_s = time_after_first > 0 ? tokens_after_first / time_after_first
                                          : (double)sc.training.global_batch * Tn / std::max(1e-12, res.step_time_s.back());
  // Peak memory of every rank, gathered on all.
  double mine = peak_rss_bytes();
  res.peak_memory_bytes.assign(world.size(), 0);
  world.all_gather(&mine, res.peak_memory_bytes.data(), 1, Dtype::f64);
  return res;
}

}  // namespace

RunResult run_training(const Scenario& sc, const RunOptions& o, Comm& world) {
  return o.fp64 ? run_typed<double>(sc, o, world) : run_typed<float>(sc, o, world);
}

json run_result_to_json(const RunResult& r, const Scenario& sc, const RunOptions& o) {
  return {{"scenario", scenario_to_json(sc)},
          {"precision", o.fp64 ? "fp64" : "fp32"},
          {"steps", o.steps},
          {"seed", o.seed},
          {"losses", r.losses},
          {"grad_norm", r.grad_norm},
          {"step_time_s", r.step_time_s},
          {"tokens_per_s", r.tokens_per_s},
          {"peak_memory_bytes", r.peak_memory_bytes}};
}

}  // namespace tp::exec
