// runtime_state: the rank's parameter state for exec/runtime/runtime.cpp, declared in model_flat.hpp and
// run_state.hpp: the initial model of this tp rank, the learning rate, the ZeRO-3 gather of a layer's slices and the checkpoint files.
// Invariants: under ZeRO-3 with dp > 1 (no chunked offload) a rank holds a layer's parameters as its padded
// slice (slice d of the unit on dp rank d, zeros past the unit's end) and, from the all-gather before a run of
// the layer to the run's end, as the gathered unit (slice * dp elements; the views point into its first
// b - a). A checkpoint holds everything the next step depends on (the data order and learning rate follow from
// the step and the seed), so a resumed run reproduces the uninterrupted one bit for bit.

#include <cmath>
#include <cstdio>
#include <string>

#include "exec/runtime/model_flat.hpp"
#include "exec/prof/rss.hpp"
#include "exec/runtime/run_state.hpp"
#include "models/scenario.hpp"

namespace tp::exec::detail {

template <class T>
void init_model(const Scenario& sc, int tp_rank, Comm& tp, Net<T>& model, Flat& gl, std::vector<char>& replicated_view,
                std::unique_ptr<Comm>& grid_row, std::unique_ptr<Comm>& grid_col, int ep_rank) {
  const Plan& p = sc.plan;
  const long long Tn = sc.training.seq_len;
  GptShape fs = gpt_shape(sc.model, Tn, 1, 0);
  // plan.attention: flash saves the softmax statistics and recomputes P in the backward (exec/backends/ops.hpp).
  model.d1.flash = model.d2.flash = p.attention == Attention::flash;
  model.two_d = p.tp_mode == TpMode::d2 && p.tp > 1;
  if (model.two_d) {
    // Grid position of this tp rank (rows, or Optimus' node blocks), as the simulator places it.
    int q = p.tp_q(), bs = 1;
    if (p.tp_grid_node_blocks) while ((bs + 1) * (bs + 1) <= sc.cluster.gpus_per_node) ++bs;
    GridPos gp = grid_pos(tp_rank, q, bs);
    grid_row = tp.split(gp.row, gp.col);
    grid_col = tp.split(gp.col, gp.row);
    Gpt2dLayout l2 = gpt2d_layout(fs, q, gp.row * q + gp.col);
    gl = Flat::of(l2);
    model.d2.lay = l2;
    model.d2.row = grid_row.get();
    model.d2.col = grid_col.get();
    replicated_view.resize(gl.views.size());
    for (size_t i = 0; i < gl.views.size(); ++i) replicated_view[i] = !l2.owned(i);  // counted elsewhere
  } else {
    GptShape s1 = gpt_shape(sc.model, Tn, p.tp, tp_rank);
    if (s1.experts > 0) { s1.ep = p.ep; s1.ep_rank = ep_rank; }
    GptLayout l1 = gpt_layout(s1);
    gl = Flat::of(l1);
    model.d1.lay = l1;
    model.d1.tp = p.tp > 1 ? &tp : nullptr;
    model.d1.sp = model.sp = p.sequence_parallel && p.tp > 1;
    model.d1.tp_overlap = model.d1.sp && p.tp_comm_overlap;  // (exec/model/sp_pieces.hpp)
    replicated_view.resize(gl.views.size());
    for (size_t i = 0; i < gl.views.size(); ++i) {
      const std::string& n = gl.views[i].name;
      replicated_view[i] = !(n.find("qkv_") != std::string::npos || n.find("fc1_") != std::string::npos ||
                             n.find("proj_w") != std::string::npos || n.find("fc2_w") != std::string::npos ||
                             n.find("ex_w") != std::string::npos || n.find("ex_b1") != std::string::npos ||
                             n == "wte");  // wte: vocabulary-parallel
    }
  }
}
template void init_model<float>(const Scenario&, int, Comm&, Net<float>&, Flat&, std::vector<char>&,
                                std::unique_ptr<Comm>&, std::unique_ptr<Comm>&, int);
template void init_model<double>(const Scenario&, int, Comm&, Net<double>&, Flat&, std::vector<char>&,
                                 std::unique_ptr<Comm>&, std::unique_ptr<Comm>&, int);

template <class T>
ParamSource<T> seeded_params(const Scenario& sc, const Net<T>& model, const Flat& gl, uint64_t seed) {
  const GptShape fs = gpt_shape(sc.model, sc.training.seq_len, 1, 0);
  const GptLayout full = gpt_layout(fs);
  size_t cached = gl.views.size();  // the view whose shard `shard` holds
  std::vector<T> fview, shard;
  return [=, &model, &gl](long long a, long long z, T* dst) mutable {
    gl.each_view(a, z, [&](size_t v, long long lo, long long hi, long long at) {
      if (v != cached) {  // the view's full tensor (its own random stream), then this rank's shard of it
        const ParamView& pv = gl.views[v];
        const ParamView& fv = full.view(pv.name);
        fview.resize((size_t)fv.count);
        shard.resize((size_t)pv.count);
        init_full_view(fs, fv, seed, fview.data());
        if (model.two_d) shard_view_2d(model.d2.lay, pv, fview.data(), shard.data());
        else shard_view(model.d1.lay.s, pv, fv, fview.data(), shard.data());
        cached = v;
      }
      std::copy(shard.begin() + lo, shard.begin() + hi, dst + at);
    });
  };
}
template ParamSource<float> seeded_params<float>(const Scenario&, const Net<float>&, const Flat&, uint64_t);
template ParamSource<double> seeded_params<double>(const Scenario&, const Net<double>&, const Flat&, uint64_t);

namespace {
// The shard of the identity over one view (values: index + 1, so that the 0 written where a shard element has
// no full element becomes -1).
template <class Shard>
std::vector<double> view_index(const ParamView& fv, long long count, Shard shard) {
  std::vector<double> id((size_t)fv.count), at((size_t)count);
  for (long long i = 0; i < fv.count; ++i) id[(size_t)i] = (double)(fv.offset + i + 1);
  shard(id.data(), at.data());
  for (double& x : at) x -= 1;
  return at;
}
}  // namespace

std::vector<double> view_full_index(const GptLayout& full, const GptLayout& shard, const ParamView& v) {
  const ParamView& fv = full.view(v.name);
  return view_index(fv, v.count, [&](const double* src, double* dst) { shard_view(shard.s, v, fv, src, dst); });
}

std::vector<double> view_full_index(const GptLayout& full, const Gpt2dLayout& shard, const ParamView& v) {
  return view_index(full.view(v.name), v.count,
                    [&](const double* src, double* dst) { shard_view_2d(shard, v, src, dst); });
}

double learning_rate(const RunOptions& o, int step, int warmup) {
  if (step < warmup) return o.lr * (step + 1) / warmup;
  if (o.steps <= warmup) return o.lr;
  double r = (double)(step - warmup) / std::max(1, o.steps - warmup);
  return o.lr * (o.min_lr_ratio + (1 - o.min_lr_ratio) * 0.5 * (1 + std::cos(3.141592653589793 * r)));
}

double peak_memory_of(const Backend& b) { return b.peak_device_bytes ? b.peak_device_bytes() : peak_rss_bytes(); }

namespace {
// A checkpoint file is written and read on the host: tensors in device memory (a backend that is not
// host-accessible) go through host copies; others (every tensor on the CPU backend) are used in place.
bool staged(const TensorView& t) { return t.count > 0 && on_device(current_backend(), t.data); }
size_t view_bytes(const TensorView& t) { return dtype_bytes(t.dtype) * (size_t)t.count; }
}  // namespace

void save_rank_checkpoint(const Scenario& sc, const RunOptions& o, Comm& world, long next_step,
                          const std::vector<TensorView>& device_tensors) {
  std::vector<TensorView> tensors = device_tensors;
  std::vector<std::vector<char>> host;  // the staged copies
  for (TensorView& t : tensors)
    if (staged(t)) {
      host.emplace_back(view_bytes(t));
      current_backend().copy(host.back().data(), t.data, view_bytes(t), CopyKind::device_to_host, Stream{});
      t.data = host.back().data();
    }
  CheckpointHeader h;
  h.step = next_step;
  h.seed = o.seed;
  h.rank = world.rank();
  h.world_size = world.size();
  // What the next step depends on besides the tensors: the scenario and plan, and the run's options (a resume
  // compares them; see load_rank_checkpoint).
  h.description = json{{"scenario", scenario_to_json(sc)}, {"seed", o.seed}, {"lr", o.lr}, {"data", o.data},
                       {"steps", o.steps}, {"fp64", o.fp64}}.dump();
  write_checkpoint(checkpoint_path(o.checkpoint_dir, next_step, world.rank()), h, tensors);
  world.barrier();  // a step's checkpoint is complete when every rank's file is
}

void load_rank_checkpoint(const Scenario& sc, const RunOptions& o, int rank, long step,
                          const std::vector<TensorView>& tensors) {
  Checkpoint c = read_checkpoint(checkpoint_path(o.checkpoint_dir, step, rank));
  const std::string where = o.checkpoint_dir + ": the checkpoint of step " + std::to_string(step);
  json d = json::parse(c.header.description, nullptr, false);
  if (d.is_discarded() || !d.is_object() || !d.contains("scenario") || d["scenario"] != scenario_to_json(sc))
    throw InputError({where + " is of another scenario or plan"});
  // A resume must continue the same run: the data order, initialisation and updates depend on these.
  std::vector<std::string> differ;
  auto same = [&](const char* key, const json& now, const char* opt) {
    if (!d.contains(key) || d[key] != now) differ.push_back(std::string(opt) + " " + now.dump() + " (the checkpoint has " +
                                                            (d.contains(key) ? d[key].dump() : "none") + ")");
  };
  same("seed", o.seed, "--seed");
  same("lr", o.lr, "--lr");
  same("data", o.data, "--data");
  same("fp64", o.fp64, "--fp64");
  if (!differ.empty()) {
    std::string m = where + " was written by a run with other options; resuming would not continue it:";
    for (const std::string& x : differ) m += " " + x + ";";
    throw InputError({m});
  }
  if (rank == 0 && d.contains("steps") && d["steps"] != o.steps)
    std::fprintf(stderr, "warning: resuming with --steps %d where the checkpoint's run had %s: the learning-rate schedule "
                 "(warmup and cosine decay over --steps) changes from here\n", o.steps, d["steps"].dump().c_str());
  // Same scenario and options, another layout of the state (optimizer offload in bf16 with ZeRO 1-2 keeps only its
  // slices' master copy, --no-bf16-weight-copies the whole units): refused before anything is copied.
  for (const TensorView& t : tensors) {
    const TensorInfo* i = c.find(t.name);
    if (i && i->dtype == t.dtype && i->count == t.count) continue;
    const std::string want = std::to_string(t.count) + " x " + dtype_name(t.dtype);
    throw InputError({where + (i ? " holds '" + t.name + "' as " + std::to_string(i->count) + " x " + dtype_name(i->dtype)
                                 : " has no '" + t.name + "'") +
                      " where this run keeps " + want + ": it was written by a run that lays its state out otherwise "
                      "(under optimizer offload in bf16 with ZeRO 1-2, --no-bf16-weight-copies changes the layout)"});
  }
  std::vector<char> host;
  for (const TensorView& t : tensors) {
    if (!staged(t)) { c.copy_to(t.name, const_cast<void*>(t.data), t.count, t.dtype); continue; }
    host.resize(view_bytes(t));
    c.copy_to(t.name, host.data(), t.count, t.dtype);
    current_backend().copy(const_cast<void*>(t.data), host.data(), host.size(), CopyKind::host_to_device, Stream{});
  }
}

}  // namespace tp::exec::detail
