// plan: how one training step is parallelised (dp x tp x pp, schedule, micro-batching, recompute, ZeRO),
// and the training run it belongs to. Validation against the model and cluster happens in scenario.cpp.
// Invariant after validation: global_batch == dp * microbatch * num_microbatches.
#pragma once
#include <string>

#include "hardware.hpp"

namespace tp {

enum class Schedule { gpipe = 0, one_f_one_b = 1, interleaved = 2 };
enum class Recompute { none = 0, selective = 1, full = 2 };
const char* schedule_name(Schedule s);
const char* recompute_name(Recompute r);

struct Training {
  long long global_batch = 0;  // sequences per optimizer step
  long long seq_len = 0;       // tokens per sequence (defaults to the model's)
  double tokens = 0;           // run length in tokens; 0 = not given (derived from the scaling law)
  Precision precision = Precision::fp16;
  Precision grad_precision = Precision::fp32;  // main-gradient accumulation / reduction dtype (Megatron default fp32)
};

struct Plan {
  int dp = 1, tp = 1, pp = 1;
  int virtual_stages = 1;      // model chunks per pipeline rank (interleaving)
  long long microbatch = 1;    // sequences per micro-batch
  Schedule schedule = Schedule::one_f_one_b;
  bool sequence_parallel = false;
  Recompute recompute = Recompute::none;
  int zero = 0;                // 0 or 1 (distributed optimizer)
  bool overlap_grad_reduce = true;  // DP gradient reduction in buckets during the last backward (Megatron's --overlap-grad-reduce)
  long long num_microbatches = 1;  // derived: global_batch / (dp * microbatch)
  int gpus() const { return dp * tp * pp; }
};

// Rank layout, Megatron-LM's default order (tp fastest, then dp, then pipeline stage):
// global = tp_rank + tp * (dp_rank + dp * stage).
struct RankCoord { int tp, dp, stage; };
inline RankCoord rank_coord(const Plan& p, int g) { return RankCoord{g % p.tp, (g / p.tp) % p.dp, g / (p.tp * p.dp)}; }
inline int rank_global(const Plan& p, int tp_rank, int dp_rank, int stage) {
  return tp_rank + p.tp * (dp_rank + p.dp * stage);
}

}  // namespace tp
