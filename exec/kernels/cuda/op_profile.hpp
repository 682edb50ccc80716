// op_profile: GPU time per op of the CUDA backend, for finding where a training step's time goes on a GPU
// (TP_CUDA_PROFILE=1: a table on stderr at exit; TP_CUDA_PROFILE=FILE: the table written to FILE).
// Every op entry (TP_OP in backend_cuda_ops.cu, run_op in backend_cuda_parts.hpp) opens an OpTimer: a CUDA
// event recorded on the backend's stream before and after the op's work, so a row is GPU time between the
// two events (kernels and cuBLASLt calls of that op), not host launch time.
// Invariants:
//  - Off unless TP_CUDA_PROFILE is set: a disabled OpTimer costs one branch and records nothing.
//  - Only the outermost op is timed (an op called inside another op counts once, as part of its caller).
//  - Enabled, it never synchronises inside an op: pending event pairs are read when 4096 are waiting (one
//    event synchronisation) and at exit; the ops' order on the stream is unchanged.
//  - Rows are keyed by op name; matmul, linear and attention rows also by their shapes, so the table shows which GEMMs
//    cost what.
//  - Each row's first call is left out of it (one line sums them): it carries one-time costs — cuBLASLt's heuristic
//    and tuning, kernel module loading (CUDA's lazy loading) — that made a 50 us GEMM read ~1 ms per call on an
//    H200 over an 8-step run (docs/perf/gpu.md).
#pragma once
#include <initializer_list>
#include <string>
#include <utility>

namespace tp::cuda::prof {

// Reads TP_CUDA_PROFILE once (the backend's creation); registers the report at exit when set.
void init_from_env();
bool enabled();

class OpTimer {
 public:
  OpTimer(const char* name, std::initializer_list<std::pair<const char*, long>> shape);
  ~OpTimer();
  OpTimer(const OpTimer&) = delete;
  OpTimer& operator=(const OpTimer&) = delete;

 private:
  bool on_ = false;
  int slot_ = -1;
};

// The table so far (reads every pending event pair first): op, calls, total ms, mean us, share of the total.
std::string report();

}  // namespace tp::cuda::prof
