// hardware: one GPU's speeds and capacities, read from JSON (catalog or inline). No speed lives in code.
// Invariants: rates are per second in SI units; efficiency curves return a fraction in (0, 1].
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "fp8_recipe.hpp"
#include "json_check.hpp"

namespace tp {

// fp8 is Transformer Engine's mixed fp8 training (training.precision only): the linear layers' GEMMs run in
// fp8 (e4m3 forward, e5m2 gradients); activations, weights, non-linear ops, attention and communication stay
// bf16. So precision_bytes(fp8) = 2 (the bf16 element) and the GEMM precisions come from the two helpers below.
enum class Precision { fp32 = 0, fp16 = 1, bf16 = 2, fp8 = 3 };
inline constexpr int kPrecisions = 4;
const char* precision_name(Precision p);
int precision_bytes(Precision p);  // bytes of one activation / weight element (fp8 training: bf16, 2)
// Precision of the GEMMs that fp8 training leaves in bf16 (attention, LM head, MoE router): bf16 under fp8.
Precision tensor_precision(Precision training);
// Precision of the linear layers' GEMMs (qkv, proj, fc1, fc2, MoE experts; forward, dgrad, wgrad).
inline Precision linear_gemm_precision(Precision training) { return training; }

// Piecewise-linear efficiency in log10(x), clamped at both ends. x is an op size (FLOPs or bytes).
// JSON: [[x0, eff0], [x1, eff1], ...] with x strictly increasing, eff in (0, 1].
struct Curve {
  std::vector<std::pair<double, double>> points;  // sorted by x
  double at(double x) const;
};
Curve read_curve(const json& v, const std::string& path, Issues& issues);
json curve_to_json(const Curve& c);

// Device memory a training framework uses beyond its tensors (GPU JSON "framework_memory", every key optional,
// 0 when absent): the CUDA context (driver, kernels of the loaded libraries), the cuBLAS / cuBLASLt workspace
// of the compute stream, and the caching allocator's fragmentation as a fraction of the tensor peak.
struct FrameworkMemory {
  double cuda_context_bytes = 0;
  double cublas_workspace_bytes = 0;
  double allocator_fragmentation = 0;
};

// How a fused attention kernel's backward spreads over the GPU ("attention_backward_grid"): key_tiles = one
// program per (sequence, head, key tile), as FlashAttention-2/3 and cuDNN: enough programs that partial waves
// are not modelled; heads = one program per (sequence, head) looping over every key tile (the Triton
// FlashAttention of llm-foundry), so b x h programs fill sm_count SMs in ceil(b h / sm_count) waves.
enum class AttnBwdGrid { key_tiles = 0, heads = 1 };
const char* attn_bwd_grid_name(AttnBwdGrid g);

// A framework's kernels on this GPU (GPU JSON "kernel_profiles": {NAME: {...}}), chosen by a scenario's
// training.kernel_profile: each curve given replaces the GPU's own (empty = keep it). The GPU's own curves are
// the Megatron-Core / Transformer Engine kernels; a profile describes another framework's (e.g. llm-foundry's
// Triton attention and PyTorch-eager elementwise ops), fitted and cited like the base curves.
struct KernelProfile {
  std::string name;
  Curve matrix_efficiency, fp8_matrix_efficiency, attention_efficiency, memory_efficiency;
  std::vector<double> attention_head_dims;  // as Gpu's; empty = keep the GPU's
  bool has_backward_grid = false;            // "attention_backward_grid" given
  AttnBwdGrid attention_backward_grid = AttnBwdGrid::key_tiles;
};

struct Gpu {
  std::string name;
  double matrix_flops_per_s[kPrecisions] = {0, 0, 0, 0};  // dense tensor-core peak by precision (fp8 optional)
  double vector_flops_per_s[kPrecisions] = {0, 0, 0, 0};  // non-matrix (CUDA core) peak by precision (no fp8)
  double hbm_bytes = 0;
  double hbm_bandwidth_bytes_per_s = 0;
  Curve matrix_efficiency;   // x = FLOPs of one GEMM -> fraction of matrix peak achieved
  Curve memory_efficiency;   // x = bytes moved by one memory-bound op -> fraction of HBM bandwidth
  // Optional: x = FLOPs of one fused (flash) attention op -> fraction of the matrix peak; empty = matrix_efficiency.
  Curve attention_efficiency;
  // Optional: x = FLOPs of one fp8 GEMM -> fraction of the fp8 matrix peak; empty = matrix_efficiency.
  Curve fp8_matrix_efficiency;
  // Flash attention IO model: query rows per tile (Br) and streaming multiprocessors, whose concurrent row
  // tiles of one head share each K / V read through L2 (1 = every tile reads K / V from HBM, Dao et al.'s model).
  double attention_tile_rows = 128;
  double sm_count = 1;
  // CUDA compute capability (7.0 Volta, 8.0 Ampere, 9.0 Hopper, 10.0 Blackwell): which of NCCL's per-generation
  // tables apply (sim/nccl_model). 0 = not given: Ampere's.
  double compute_capability = 0;
  // Head dims the fused attention kernel is compiled for (ascending, "attention_head_dims"): a head of dim dh
  // runs as the smallest listed >= dh (beyond the largest: its multiple), so e.g. dh 80 costs 128's tensor
  // work in a kernel padded to powers of two. Empty = any head dim runs as itself.
  std::vector<double> attention_head_dims;
  double attention_kernel_head_dim(double dh) const;
  AttnBwdGrid attention_backward_grid = AttnBwdGrid::key_tiles;
  // Fraction of the SMs the attention backward keeps busy for `bh` (sequences x heads) on one rank: 1 under
  // key_tiles; under heads, bh / (ceil(bh / sm_count) x sm_count) (the last wave's idle SMs).
  double attention_backward_occupancy(double bh) const;
  const Curve& attention_curve() const { return attention_efficiency.points.empty() ? matrix_efficiency : attention_efficiency; }
  const Curve& fp8_curve() const { return fp8_matrix_efficiency.points.empty() ? matrix_efficiency : fp8_matrix_efficiency; }
  double kernel_overhead_s = 0;  // fixed cost per launched kernel (launch + tail)
  // The same for a kernel replayed from a CUDA graph (plan.cuda_graphs: no host launch, only the device's gap
  // between nodes): JSON "graph_kernel_overhead_s" (calibrate --backend cuda measures it); absent (-1): the
  // stream launch's kernel_overhead_s, so a profile without it predicts no gain.
  double graph_kernel_overhead_s = -1;
  double kernel_overhead_for(bool graphed) const {
    return graphed && graph_kernel_overhead_s >= 0 ? graph_kernel_overhead_s : kernel_overhead_s;
  }
  // Fraction a compute kernel slows by while an NCCL collective runs on the same GPU (its channels' thread blocks
  // take SMs, its copies HBM bandwidth): JSON "compute_slowdown_under_comm", 0 (absent) = not modelled.
  // sim/engine slows the compute lane by it while the rank has a collective in transfer; the planner's
  // estimate lengthens its compute by it over the hidden data-parallel communication.
  double compute_slowdown_under_comm = 0;
  double power_w = 0;            // board power at training load
  FrameworkMemory framework;
  std::vector<KernelProfile> kernel_profiles;  // by name
  // fp8 scaling recipes this GPU has costs for (JSON "fp8_recipes", models/fp8_recipe.hpp); empty = "delayed" only.
  std::vector<Fp8RecipeCost> fp8_recipes;
};

const KernelProfile* find_kernel_profile(const Gpu& g, const std::string& name);
// The GPU with the profile's curves in force (its non-empty curves replace the GPU's).
void apply_kernel_profile(Gpu& g, const KernelProfile& k);

// Reads a GPU object (all keys validated). `path` is the JSON path used in messages.
Gpu read_gpu(const json& v, const std::string& path, Issues& issues);
json gpu_to_json(const Gpu& g);

}  // namespace tp
