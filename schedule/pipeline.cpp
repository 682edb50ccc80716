// pipeline: schedule orders. See pipeline.hpp. Verified against Megatron-LM's schedules.py logic.
#include "pipeline.hpp"

#include <algorithm>
#include <cstdio>

namespace tp {

int warmup_items(Schedule s, int pp, int v, int m, int stage) {
  switch (s) {
    case Schedule::gpipe: return m;
    case Schedule::one_f_one_b: return std::min(pp - stage - 1, m);
    case Schedule::modular:
    case Schedule::interleaved: {
      int total = m * v;
      if (m == pp) return total;  // Megatron: all warm-up when micro-batches == pipeline size
      int w = (pp - stage - 1) * 2 + (v - 1) * pp;
      return std::min(w, total);
    }
  }
  return 0;
}

// Megatron's get_model_chunk_id / microbatch id for the k-th virtual micro-batch (group size = pp).
static WorkItem interleaved_item(int k, int pp, int v, bool forward) {
  int in_group = k % (pp * v);
  int chunk = in_group / pp;
  if (!forward) chunk = v - chunk - 1;
  int mb = (k / (pp * v)) * pp + (k % pp);
  return WorkItem{forward ? Pass::fwd : Pass::bwd, chunk, mb};
}

std::vector<WorkItem> pipeline_order(Schedule s, int pp, int v, int m, int stage) {
  std::vector<WorkItem> out;
  if (s == Schedule::gpipe) {
    for (int j = 0; j < m; ++j) out.push_back({Pass::fwd, 0, j});
    for (int j = 0; j < m; ++j) out.push_back({Pass::bwd, 0, j});
    return out;
  }
  if (s == Schedule::one_f_one_b) {
    int w = warmup_items(s, pp, 1, m, stage);
    int f = 0, b = 0;
    for (int i = 0; i < w; ++i) out.push_back({Pass::fwd, 0, f++});
    for (int i = 0; i < m - w; ++i) {
      out.push_back({Pass::fwd, 0, f++});
      out.push_back({Pass::bwd, 0, b++});
    }
    while (b < m) out.push_back({Pass::bwd, 0, b++});
    return out;
  }
  int total = m * v;
  int w = warmup_items(s, pp, v, m, stage);
  for (int k = 0; k < w; ++k) out.push_back(interleaved_item(k, pp, v, true));
  for (int k = 0; k < total - w; ++k) {
    out.push_back(interleaved_item(k + w, pp, v, true));
    out.push_back(interleaved_item(k, pp, v, false));
  }
  for (int k = total - w; k < total; ++k) out.push_back(interleaved_item(k, pp, v, false));
  return out;
}

std::vector<WorkItem> breadth_first_order(int v, int m) {
  std::vector<WorkItem> out;
  out.reserve((size_t)2 * v * m);
  for (int c = 0; c < v; ++c)
    for (int j = 0; j < m; ++j) out.push_back({Pass::fwd, c, j});
  for (int c = v - 1; c >= 0; --c)
    for (int j = 0; j < m; ++j) out.push_back({Pass::bwd, c, j});
  return out;
}

long long StageLayout::largest_chunk() const {
  long long most = 0;
  for (size_t g = 0; g + 1 < chunk_lo.size(); ++g) most = std::max(most, chunk_lo[g + 1] - chunk_lo[g]);
  return most;
}

long long StageLayout::stage_layers(int stage) const {
  long long n = 0;
  for (int c = 0; c < v; ++c) n += chunk_layers(stage, c);
  return n;
}

int StageLayout::chunk_of_layer(long long layer) const {
  if (even()) return (int)(layer / layers_per_chunk());
  return (int)(std::upper_bound(chunk_lo.begin(), chunk_lo.end(), layer) - chunk_lo.begin()) - 1;
}

StageLayout stage_layout(const Plan& p, long long layers) {
  if (p.grad_accumulation == GradAccumulation::layered && p.schedule != Schedule::modular)
    return StageLayout{p.pp, (int)(layers / p.pp), layers, false, {}};  // validation: even stages only
  StageLayout lay{p.pp, p.virtual_stages, layers, true, {}};
  if (!p.chunk_layers.empty()) {  // Megatron's accounted split: given per global model chunk
    const int n = lay.num_model_chunks();
    lay.chunk_lo.assign((size_t)n + 1, 0);
    for (int g = 0; g < n; ++g) lay.chunk_lo[g + 1] = lay.chunk_lo[g] + p.chunk_layers[g];
  } else if (!p.stage_layers.empty()) {  // looping order; stage s's chunks hold stage_layers[s] / v layers each
    const int n = lay.num_model_chunks();
    lay.chunk_lo.assign((size_t)n + 1, 0);
    for (int g = 0; g < n; ++g) lay.chunk_lo[g + 1] = lay.chunk_lo[g] + p.stage_layers[lay.stage_of(g)] / lay.v;
  }
  return lay;
}

std::vector<WorkItem> plan_order(const Plan& p, long long layers, int stage) {
  const int m = (int)p.num_microbatches;
  StageLayout lay = stage_layout(p, layers);
  if (p.grad_accumulation == GradAccumulation::layered) return breadth_first_order(lay.v, m);
  if (p.schedule == Schedule::modular) return pipeline_order(Schedule::interleaved, p.pp, lay.v, m, stage);
  return pipeline_order(p.schedule, p.pp, lay.v, m, stage);
}

std::string chunk_op_name(int model_chunk, Pass p, int mb) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "C%02d.%s.mb%d", model_chunk, p == Pass::fwd ? "fwd" : "bwd", mb);
  return buf;
}

std::string part_name(long long layer) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "L%02lld", layer);
  return buf;
}

std::string part_op_name(const std::string& part, const char* pass, const std::string& op, int mb) {
  std::string s = part;
  s += '.';
  s += pass;
  if (!op.empty()) {
    s += '.';
    s += op;
  }
  s += ".mb";
  s += std::to_string(mb);
  return s;
}

std::string p2p_op_name(int from_stage, int to_stage, Pass p, int mb) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "pp.send.s%d-s%d.%s.mb%d", from_stage, to_stage, p == Pass::fwd ? "fwd" : "bwd", mb);
  return buf;
}

}  // namespace tp
