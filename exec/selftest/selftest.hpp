// exec/selftest/: `trainplan selftest`: the op checks (this file, selftest_cases.cpp, selftest_harness.hpp) and
// the training comparison (selftest_train.cpp).
// selftest: every op of a backend's fp32 table against the CPU backend's float64 table on the same
// (float-rounded) inputs, over many shapes: one row, odd sizes, rows longer than a block, in-place use, and
// the accumulate and overwrite variants of exec/backends/ops.hpp. Used by `trainplan selftest --backend NAME` (the first
// thing to run on a GPU) and by tests/exec/test_backend_ops.cpp for every compiled-in backend (one place).
// Invariants: outputs are compared element-wise as max |got - want| / (1 + |want|) against the fp32
// tolerance times sqrt of the op's reduction length; an op that throws "not supported" is reported as
// unsupported (not passed, not failed); any other exception is a failure with its message.
#pragma once
#include <string>
#include <vector>

#include "exec/backends/backend.hpp"

namespace tp::exec {

enum class CheckStatus { pass, fail, unsupported };

struct OpCheck {
  std::string op;       // ops:: name
  std::string shape;    // e.g. "N 17, C 100"
  std::string variant;  // e.g. "in place", "accumulate", "trans_a trans_b beta 0.5"
  double err = 0;       // largest scaled error over the outputs (and the returned value)
  double tol = 0;
  CheckStatus status = CheckStatus::pass;
  std::string message;  // the exception's text, when one was thrown
};

struct SelftestResult {
  std::string backend;
  std::vector<OpCheck> checks;
  int passed = 0, failed = 0, unsupported = 0;
};

// Tolerance of fp32 against the float64 reference, per element, before the sqrt(reduction length) factor.
constexpr double kSelftestTolF32 = 2e-5;
// Tolerance of a library's fused bf16 attention (cuDNN's SDPA) against the reference, per element: it rounds P
// unnormalised and writes its gradients as bf16 (2^-9 relative) where the reference rounds P normalised and keeps
// fp32 gradients, so it computes the same function at bf16's precision, not the reference's rounding exactly.
constexpr double kSelftestTolLibraryAttention = 1e-2;

// Runs every check on `b` (quick: the first shapes of each op only), then the coverage check: a failed check "coverage"
// when an op of exec/backends/ops.def has no check.
SelftestResult run_selftest(const Backend& b, bool quick = false);
// The ops of exec/backends/ops.def that no check names as a word of its op or its variant ("flash_attention_fwd16+
// flash_attention_bwd16", "then unpack_bf16"), in ops.def's order; empty when every op is checked.
std::vector<std::string> unchecked_ops(bool quick);

// The training comparisons (selftest_train.cpp): `steps` steps of a tiny GPT on backend `b` and on the CPU backend,
// one rank each, in each precision and attention the executor trains with: fp32 with the unfused and the flash
// attention (pass when losses and gradient norms agree to kSelftestTrainTol relative), and training.precision
// "bf16" with each (kSelftestTrainTolBf16: another summation order can move a value across a bf16 rounding
// boundary). The bf16 runs take every bf16 path of the backend: GEMMs on bf16 operands, the saved activations
// packed, the weights' copies, the output gradients packed once, flash on tensor cores.
constexpr double kSelftestTrainTol = 1e-4;
constexpr double kSelftestTrainTolBf16 = 2e-3;
struct TrainCheck {
  std::string precision, attention;  // "fp32" / "bf16", "unfused" / "flash"
  double tol = 0;
  int steps = 0;
  std::vector<double> got_losses, want_losses;
  double err = 0;  // largest relative difference of a loss or a gradient norm
  CheckStatus status = CheckStatus::pass;
  std::string message;  // the exception's text, when one was thrown
};
std::vector<TrainCheck> run_selftest_training(const Backend& b, int steps);
// On a backend that captures steps as graphs (Backend::capture_begin: cuda, emu-device): a few ops captured once and
// launched twice against what they compute, and a read-back inside the capture refused (run_selftest adds it).
OpCheck selftest_graph_check(const Backend& b);

}  // namespace tp::exec
