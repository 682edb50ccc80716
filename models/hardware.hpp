// hardware: one GPU's speeds and capacities, read from JSON (catalog or inline). No speed lives in code.
// Invariants: rates are per second in SI units; efficiency curves return a fraction in (0, 1].
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "json_check.hpp"

namespace tp {

enum class Precision { fp32 = 0, fp16 = 1, bf16 = 2 };
inline constexpr int kPrecisions = 3;
const char* precision_name(Precision p);
int precision_bytes(Precision p);  // bytes of one activation / weight element

// Piecewise-linear efficiency in log10(x), clamped at both ends. x is an op size (FLOPs or bytes).
// JSON: [[x0, eff0], [x1, eff1], ...] with x strictly increasing, eff in (0, 1].
struct Curve {
  std::vector<std::pair<double, double>> points;  // sorted by x
  double at(double x) const;
};
Curve read_curve(const json& v, const std::string& path, Issues& issues);
json curve_to_json(const Curve& c);

struct Gpu {
  std::string name;
  double matrix_flops_per_s[kPrecisions] = {0, 0, 0};  // dense tensor-core peak by precision
  double vector_flops_per_s[kPrecisions] = {0, 0, 0};  // non-matrix (CUDA core) peak by precision
  double hbm_bytes = 0;
  double hbm_bandwidth_bytes_per_s = 0;
  Curve matrix_efficiency;   // x = FLOPs of one GEMM -> fraction of matrix peak achieved
  Curve memory_efficiency;   // x = bytes moved by one memory-bound op -> fraction of HBM bandwidth
  double kernel_overhead_s = 0;  // fixed cost per launched kernel (launch + tail)
  double power_w = 0;            // board power at training load
};

// Reads a GPU object (all keys validated). `path` is the JSON path used in messages.
Gpu read_gpu(const json& v, const std::string& path, Issues& issues);
json gpu_to_json(const Gpu& g);

}  // namespace tp
