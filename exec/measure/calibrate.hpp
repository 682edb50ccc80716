// exec/measure/: calibrate (this file) and validate (validate.hpp), the executor measured for the simulator.
// calibrate: `trainplan calibrate --backend cpu` (calibrate_device below: a GPU or an emulated device) — measures this machine with the executor's own CPU ops and
// communicator, and writes a hardware profile the simulator reads: an INLINE CLUSTER OBJECT (catalog format,
// models/cluster.hpp) whose "gpu" is an inline GPU object, so a scenario can use it as "cluster": <profile>.
// One "GPU" is one rank = one core (the CPU backend runs one thread per rank).
// What is measured (docs/perf/validate.md):
// Every compute sweep takes its operands from a rotating set of buffers of at least 512 MB in all (full mode), so
// that each call reads buffers the previous calls evicted from the cache, as a training step does.
// - matrix_flops_per_s.fp32 = the best ops::matmul<float> throughput over a sweep of GEMM shapes (nn, nt and tn
//   variants of a linear layer's products; the median of three passes per point); matrix_efficiency = the mean
//   achieved / peak at each size, by GEMM FLOPs. fp16 / bf16 peaks are 0 (the backend computes in fp32: CPU
//   scenarios use training.precision "fp32").
// - hbm_bandwidth_bytes_per_s = the best bandwidth of a STREAM-like sweep (ops::add, a = b + c, 12 bytes per
//   element; cache sizes included) and of the element-wise mix below; host.memory_bandwidth_bytes_per_s = the
//   STREAM-like bandwidth at the largest (DRAM) size.
// - memory_efficiency: a GPT layer's element-wise ops (LayerNorm, bias adds, residual adds, GELU and their
//   backwards, as the executor runs them) over a sweep of token counts, charged with the bytes the simulator's
//   cost model (sim/op_cost.cpp) counts for those ops: efficiency = those bytes / time / hbm_bandwidth, at
//   x = the layer's simulated element-wise bytes per op; above those sizes, the optimizer step.
// - kernel_overhead_s = the time of the smallest op call (ops::add of one element).
// - intra_node: under mpirun with >= 2 ranks, latency and bandwidth from a ping-pong between ranks 0 and 1 and
//   the efficiency curve from Comm::all_reduce_sum over all ranks on rotating (cold) buffers (against the
//   simulator's ring model);
//   otherwise documented defaults derived from the triad bandwidth. inter_node copies it (one node).
// Every rank runs the compute sweeps at the same time (so a profile taken with mpirun -np R includes the
// contention of R busy cores); rank 0's numbers are written.
#pragma once
#include <string>
#include <vector>

#include "exec/comm/comm.hpp"
#include "models/json_check.hpp"

namespace tp::exec {

struct CalibrateOptions {
  bool quick = false;         // < 1 s instead of ~30 s: fewer sizes, shorter timings, hot buffers
  int gpus_per_node = 0;      // 0: the number of online cores
  double memory_bytes = 0;    // per "GPU"; 0: physical RAM / gpus_per_node
  double power_w = 0;         // per "GPU"; 0: a stated estimate (10 W per core)
  bool progress = false;      // a line per phase on stderr (rank 0)
  std::string comm = "mpi";   // device calibrate under mpirun: the collectives' communicator (mpi: staged; nccl)
};

// Collective over `world` (every rank calls it). Returns the cluster object on rank 0 (null elsewhere).
json calibrate_cpu(const CalibrateOptions& o, Comm& world);

struct Backend;
// What the device calibrate measured (calibrate_device.cpp). A point: x (the curve's abscissa: GEMM FLOPs,
// attention FLOPs at head dim attention_head_dim, bytes per op), the FLOPs or bytes it did, and its seconds.
struct DevicePoint { double x = 0, flops_or_bytes = 0, sec = 0; };
struct DeviceMeasurements {
  std::string backend, device;  // Backend::name, Backend::device ("device 0 of 1 (NVIDIA H100 80GB HBM3)")
  double device_bytes = 0;
  std::vector<DevicePoint> gemm, attention, triad, mix, opt;  // bf16 GEMMs, flash fwd / bwd, memory-bound work
  std::vector<DevicePoint> fp8_gemm;  // ops::matmul_fp8 (fp8_gemm_sweep), on a device whose catalog GPU has an fp8 peak
  long gemm_tokens = 0;                                          // the GEMM sweep's tokens (0: 4s per width s)
  long fp32_size = 0, attention_head_dim = 0;
  double fp32_rate = 0, pcie_h2d = 0, pcie_d2h = 0, overhead_s = 0;  // FLOP/s, B/s, s
  double graph_overhead_s = -1;  // per kernel replayed from a captured graph; -1: not measured (no capture)
  std::string pcie_about;
  // The host Adam (exec/runtime/offload/host_adam.hpp) of one rank, as offloaded runs use it: parameters per call,
  // seconds per call, its threads, and the job's ranks on this node; cores this process may use.
  long host_adam_n = 0;
  double host_adam_s = 0;
  int host_adam_threads = 0, local_ranks = 1, cores = 0;
};
// The device calibrate's collectives between the job's ranks (calibrate_collectives.cpp), as nccl-tests reports them.
struct CollectivePoint { std::string op; double bytes = 0, sec = 0, algbw = 0, busbw = 0; };
struct CollectiveMeasurements {
  int ranks = 1;
  bool one_node = true;  // every rank of the job on this node (the launcher's local size)
  std::vector<CollectivePoint> points;
  double gemm_slowdown = -1;  // compute_slowdown_under_comm measured (gemm_slowdown_beside_allreduce); -1: not
  std::string slowdown_about;
};
// Collective over c (device buffers of be; host: the host communicator of the same ranks, for barriers and times).
CollectiveMeasurements measure_collectives(const Backend& be, Comm& c, Comm& host, const CalibrateOptions& o);
json collectives_json(const CollectiveMeasurements& m);
// The slowdown of a bf16 GEMM (calibrate's NN product at width s, M = 4s) while all-reduces of n floats of `buf` (device
// memory of be) run beside it over c, the simulator's compute_slowdown_under_comm: the GEMM timed alone on the compute
// stream, then with enough non-blocking all-reduces (each about allreduce_s) queued first to outlast the GEMMs; the
// slowest rank's fraction (host: the same ranks), clamped to [0, 1]. -1 where c does not run a collective beside
// compute (its request is complete when it starts: MPI, staging, the emulated table). Every rank calls it.
double gemm_slowdown_beside_allreduce(const Backend& be, Comm& c, Comm& host, float* buf, long n, double allreduce_s,
                                      long s, double min_s, std::string* about = nullptr);
// fp8 GEMMs as training.precision "fp8" runs them: ops::matmul_fp8 of two E4M3 casts (the op casts its operands, then
// cuBLASLt's fp8 kernels where the device and shape take them, else a bf16-speed matmul) on a linear layer's three
// products at each width s of `widths` over max(4s, tokens) tokens, as the bf16 sweep: x = the GEMM's FLOPs.
std::vector<DevicePoint> fp8_gemm_sweep(const Backend& be, const std::vector<long>& widths, long tokens, double min_s);
// The catalog GPU a device is by its name (and memory, for the A100s): "H100-SXM-80GB", ...; "" when none.
std::string catalog_gpu_for_device(const std::string& device, double device_bytes);
// validate's machine-speed probe on a device: the bf16 GEMM point of width s over max(4s, tokens) tokens (NN / NT / TN,
// mean FLOP/s), as calibrate's sweep measures it; calibrate_gemm_tokens: that sweep's tokens (quick or full).
double device_gemm_probe_flops_per_s(const Backend& be, long s, long tokens);
long calibrate_gemm_tokens(bool quick);
// The tokens of that GEMM point of width s (max(4s, tokens)) and its FLOPs per product (2 x tokens x s^2).
long device_gemm_point_tokens(long s, long tokens);
double device_gemm_point_flops(long s, long tokens);
// The profile (cluster object) of measurements: a matched catalog GPU keeps its peaks and its cluster's links.
// With collectives of >= 2 ranks on one node, intra_node's bandwidth, latency and efficiency are fitted to the
// all-reduce (the simulator's ring) and the step's collectives take them (nccl.step_collectives false).
json device_profile(const DeviceMeasurements& m, const CalibrateOptions& o, const CollectiveMeasurements& coll = {});
// `trainplan calibrate --backend cuda|emu|emu-device` (calibrate_device.cpp): one device measured with the backend's
// own ops, written as the same kind of cluster object. Collective over `world` (rank 0 measures, the others wait
// at its barriers). Throws std::runtime_error when the device runs out of memory.
// coll_comm: the communicator of the collectives (the world, staged for a device backend, or NCCL's), over world's ranks.
json calibrate_device(const Backend& be, const CalibrateOptions& o, Comm& world, Comm& coll_comm);

// One point of the full GEMM sweep, size s (cold operands, the three variants, the median of three passes): the
// mean achieved FLOP/s over the variants, which is what the profile's curve holds at FLOPs 8 s^3 (times the
// peak) for a machine running as fast as when it was calibrated. Collective; about 1 s. `validate` runs it
// before and after its measured steps to tell how fast the machine ran then (docs/perf/validate.md).
double gemm_probe_flops_per_s(long s, Comm& world);

}  // namespace tp::exec
