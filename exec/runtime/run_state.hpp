// run_state: the rank's run state outside the model: the learning-rate schedule, its peak memory on the backend and its checkpoint files
// (exec/runtime/runtime_state.cpp). Internal to exec/runtime. Invariant: a checkpoint is complete only when
// every rank's file is (save_rank_checkpoint ends with a barrier).
#pragma once
#include <vector>

#include "exec/backends/backend.hpp"
#include "exec/comm/comm.hpp"
#include "exec/io/checkpoint.hpp"
#include "exec/runtime/train.hpp"
#include "models/scenario.hpp"

namespace tp::exec::detail {

double learning_rate(const RunOptions& o, int step, int warmup);  // linear warmup, then cosine to min_lr_ratio
// The run's peak memory on backend b: its device high-water mark on a device backend, else peak_rss_bytes().
double peak_memory_of(const Backend& b);
// This rank's checkpoint of the state before step `next_step` (then a barrier: complete when every rank's is),
// and its read-back into the same tensors (InputError when the file is of another scenario or plan).
void save_rank_checkpoint(const Scenario& sc, const RunOptions& o, Comm& world, long next_step,
                          const std::vector<TensorView>& tensors);
void load_rank_checkpoint(const Scenario& sc, const RunOptions& o, int rank, long step,
                          const std::vector<TensorView>& tensors);  // into each tensor's data

}  // namespace tp::exec::detail
