// calibrate_device: `trainplan calibrate --backend cuda|emu|emu-device` — measures one device with the executor's
// own ops on that backend (the ops `trainplan run --backend ...` trains with) and writes the same kind of profile as
// calibrate_cpu: an inline cluster object whose "gpu" is an inline GPU object (calibrate.hpp).
// What is measured (docs/perf/validate.md, "calibrate on a device"):
// - fp8 GEMMs (a device whose catalog GPU has an fp8 peak): ops::matmul_fp8 over the same products, against that peak:
//   fp8_matrix_efficiency.
// - bf16 GEMMs: ops::matmul16 with both operands packed bf16 and bf16 GEMM operands on (the training GEMMs of
//   training.precision "bf16"), on a linear layer's three products of 4s tokens at width s (NN, NT, TN) over a
//   sweep of s: matrix_efficiency by GEMM FLOPs against the bf16 peak. fp32 GEMMs (ops::matmul) at the largest size
//   give matrix_flops_per_s.fp32, set so that the fp32 prediction at that size is the measured time.
// - attention: flash_attention_fwd16 / bwd16 (the bf16 flash ops, on cuda cuDNN's SDPA where loaded, as run uses)
//   over sequence lengths, charged with the FLOPs sim/op_cost_internal.hpp counts (causal: half of 4 B H T^2 D,
//   the backward 2.5x), at the kernel head dim the GPU entry names: attention_efficiency.
// - memory: hbm_bandwidth = the best of an ops::add sweep (12 B per element), the layer's element-wise mix and the
//   optimizer step (calibrate_util.hpp: the simulator's bytes); memory_efficiency from the mix and the optimizer.
// - host: pinned PCIe bandwidth each way (Backend::copy between alloc_pinned and device memory); the profile's
//   host.pcie_bandwidth is their mean (the simulator has one figure), both are in "about".
// - host Adam: host_adamw (the offloaded optimizer's CPU Adam, with the threads a rank of this job uses) on fp32
//   host arrays: host.memory_bandwidth_bytes_per_s = its 28 bytes per parameter / time x the job's ranks on this
//   node (the simulator's host Adam divides the node's bandwidth among the GPUs sharing it), host.cpu_cores the
//   cores this process may use. (The catalog's host is a whole DGX; a lent or shared machine's is not.)
// - kernel_overhead_s: the time per call of ops::add on one element, in batches ended by one device sync;
//   graph_kernel_overhead_s (a backend that captures: cuda, emu-device): the same op captured 256 times as one graph
//   (Backend::capture_begin, exec/runtime/step_graph.hpp), the time per kernel of its launches, ended by one sync.
// Peaks: when the device's name matches a catalog GPU (H200, H100, A100 by memory size, V100), its datasheet peaks,
// head dims, fp8 curve, framework memory and interference term are kept and the efficiencies are against its
// peaks; the profile's links and host come from the catalog cluster built of that GPU. Otherwise (emu, an unknown
// GPU) the bf16 peak is the best GEMM measured and the links are a one-node default. Collectives between GPUs and
// the slowdown of a GEMM beside an all-reduce (compute_slowdown_under_comm) are measured with >= 2 ranks
// (calibrate_collectives.cpp; the slowdown only where the communicator overlaps: --comm nccl); "about" says which.
// Invariants: every buffer is the backend's device memory (or its pinned host memory for the PCIe sweep), freed
// before return; each timed batch ends with Backend::sync; one rank measures (rank 0; the others wait at the
// barriers), so a job's ranks do not share the device while it is timed; then, with >= 2 ranks, every rank measures
// the collectives (calibrate_collectives.cpp) and the profile's links take them (fit_links).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "exec/backends/backend.hpp"
#include "exec/measure/calibrate.hpp"
#include "exec/measure/calibrate_util.hpp"
#include "exec/runtime/offload/host_adam.hpp"
#include "models/catalog.hpp"
#include "models/hardware.hpp"

namespace tp::exec {
namespace {

// Seconds per kernel replayed from a captured graph of kKernels one-element ops::add on x (x[0] += x[1]), its
// launches batched as per_call's; -1 when the backend cannot capture or the capture fails.
double graph_kernel_overhead(const Backend& be, float* x, double min_s) {
  constexpr int kKernels = 256;
  if (!be.capture_begin) return -1;
  std::string why;
  void* g = capture_graph(be, [&] { for (int i = 0; i < kKernels; ++i) ops::add<float>(x, x, x + 1, 1); }, why);
  if (!g) return -1;
  const double s = calib::per_call([&] { be.graph_launch(g); }, min_s, [&] { be.sync(); }) / kKernels;
  be.graph_destroy(g);
  return s;
}

using namespace calib;

struct Sizes {
  std::vector<long> gemm, attn_t, mix_rows, opt_n, triad_n, pcie_bytes;
  long host_adam_n = 0, gemm_tokens = 0;  // gemm_tokens: the GEMM sweep's tokens (at least 4s; 0: 4s)
  long attn_tokens = 0, attn_heads = 0, attn_dim = 0, mix_h = 0;
  double min_s = 0;
};

// Full: what a training step's ops see on a data-centre GPU (about a minute). Quick: a smoke test (emu in CI).
Sizes sizes_for(const CalibrateOptions& o) {
  Sizes z;
  if (o.quick) {
    z.gemm = {32, 64};
    z.attn_t = {32, 64};
    z.attn_tokens = 128, z.attn_heads = 2, z.attn_dim = 16;
    z.mix_rows = {4, 32}, z.mix_h = 64;
    z.opt_n = {1L << 14};
    z.triad_n = {1L << 10, 1L << 14};
    z.pcie_bytes = {1L << 16, 1L << 20};
    z.host_adam_n = 1L << 16;
    z.min_s = 0.002;
    return z;
  }
  z.gemm = {256, 512, 1024, 2048, 3072, 4096, 6144, 8192};
  z.gemm_tokens = 8192;
  z.attn_t = {512, 1024, 2048, 4096, 8192};
  z.attn_tokens = 16384, z.attn_heads = 16, z.attn_dim = 128;
  z.mix_rows = {16, 64, 256, 1024, 4096, 16384}, z.mix_h = 1024;
  z.opt_n = {1L << 20, 1L << 22, 1L << 24, 1L << 26};
  for (long n = 1L << 12; n <= (1L << 28); n *= 4) z.triad_n.push_back(n);
  for (long b = 1L << 20; b <= (1L << 28); b *= 4) z.pcie_bytes.push_back(b);
  z.host_adam_n = 1L << 24;  // 448 MB of state and gradients per call: well beyond a host's caches
  z.min_s = 0.1;
  return z;
}

// Each width's mean rate over the NN, NT and TN products of a linear layer (M = max(4s, tokens) rows), run by gemm.
template <class G>
std::vector<DevicePoint> layer_gemm_sweep(const std::vector<long>& widths, long tokens, double min_s, G&& gemm,
                                          const std::function<void()>& sync) {
  std::vector<DevicePoint> out;
  for (long s : widths) {
    const long M = device_gemm_point_tokens(s, tokens);
    struct V { long m, n, k; bool ta, tb; };
    const V vars[3] = {{M, s, s, false, false}, {M, s, s, false, true}, {s, s, M, true, false}};
    double rate = 0;
    for (const V& v : vars)
      rate += 2.0 * (double)v.m * v.n * v.k / per_call([&] { gemm(s, v.m, v.n, v.k, v.ta, v.tb); }, min_s, sync) / 3.0;
    const double flops = device_gemm_point_flops(s, tokens);
    out.push_back({flops, flops, flops / rate});
  }
  return out;
}

// bf16 GEMMs of a linear layer of width s over M = max(4s, z.gemm_tokens) tokens (a training micro-batch's: the
// simulator keys GEMM efficiency by FLOPs, and a model's GEMMs of a given FLOP count have many tokens and a narrow
// width): NN [M,s]x[s,s], NT [M,s]x[s,s]^T, TN [M,s]^T x [M,s]; each point the mean achieved FLOP/s over the three
// (x = 2 M s^2 FLOPs).
std::vector<DevicePoint> gemm_sweep(const Backend& be, const Sizes& z) {
  Bf16GemmScope bf(be, true);
  const long s_max = *std::max_element(z.gemm.begin(), z.gemm.end());
  const long big = device_gemm_point_tokens(s_max, z.gemm_tokens) * s_max;
  DevBuf a32(be, 4 * big, "GEMM operand"), a16(be, 2 * big, "GEMM operand"), b16(be, 2 * big, "GEMM operand"),
      c(be, 4 * big, "GEMM output");
  fill_random(be, a32.f(), big, 1);
  ops::pack_bf16(a16.h(), a32.f(), big);
  ops::pack_bf16(b16.h(), a32.f(), big);
  return layer_gemm_sweep(z.gemm, z.gemm_tokens, z.min_s, [&](long, long m, long n, long k, bool ta, bool tb) {
    ops::matmul16<float>(c.f(), nullptr, a16.h(), nullptr, b16.h(), m, n, k, ta, tb, 1.f, 0.f);
  }, [&] { be.sync(); });
}

// fp32 GEMM (ops::matmul, NN) at width s: achieved FLOP/s.
double fp32_gemm_rate(const Backend& be, long s, double min_s) {
  const long big = 4 * s * s;
  DevBuf a(be, 4 * big, "GEMM operand"), c(be, 4 * big, "GEMM output");
  fill_random(be, a.f(), big, 2);
  double t = per_call([&] { ops::matmul<float>(c.f(), a.f(), a.f(), 4 * s, s, s, false, false, 1.f, 0.f); }, min_s,
                      [&] { be.sync(); });
  return 8.0 * (double)s * s * s / t;
}

// Causal flash attention, bf16 storage, forward then backward, at each sequence length T (B = tokens / T sequences,
// H heads of dim D, q, k, v packed in one [N, 3 H D] buffer as the model's fused QKV). x = the simulator's FLOPs
// at head dim D (device_profile scales them to the kernel's head dim).
std::vector<DevicePoint> attention_sweep(const Backend& be, const Sizes& z) {
  std::vector<DevicePoint> out;
  Bf16GemmScope bf(be, true);
  auto sync = [&] { be.sync(); };
  const long H = z.attn_heads, D = z.attn_dim, Q = 3 * H * D;
  for (long T : z.attn_t) {
    const long B = std::max(1L, z.attn_tokens / T), N = B * T;
    DevBuf qkv32(be, 4 * (size_t)N * Q, "attention input"), qkv(be, 2 * (size_t)N * Q, "attention input"),
        o16(be, 2 * (size_t)N * H * D, "attention output"), stats(be, 4 * (size_t)B * H * T * 2, "attention statistics"),
        dqkv(be, 4 * (size_t)N * Q, "attention gradient"), dout(be, 4 * (size_t)N * H * D, "attention gradient");
    fill_random(be, qkv32.f(), N * Q, 3);
    fill_random(be, dout.f(), N * H * D, 4);
    ops::pack_bf16(qkv.h(), qkv32.f(), N * Q);
    const uint16_t *q = qkv.h(), *k = qkv.h() + H * D, *v = qkv.h() + 2 * H * D;
    auto fwd = [&] { ops::flash_attention_fwd16<float>(o16.h(), stats.f(), q, k, v, B, T, T, H, H, D, Q, Q); };
    double tf = per_call(fwd, z.min_s, sync);
    fwd();
    double tb = per_call([&] {
      ops::flash_attention_bwd16<float>(dqkv.f(), dqkv.f() + H * D, dqkv.f() + 2 * H * D, dout.f(), o16.h(), stats.f(), q, k, v,
                                        B, T, T, H, H, D, Q, Q);
    }, z.min_s, sync);
    const double flops = 4.0 * (double)B * H * T * T * D * 0.5;  // sim/op_cost_internal.hpp flash_fwd (causal)
    out.push_back({flops, flops, tf});
    out.push_back({2.5 * flops, 2.5 * flops, tb});
  }
  return out;
}

// Memory-bound work: the triad (a = b + c), the layer's element-wise mix and the optimizer step. x = bytes per op.
void memory_sweeps(DeviceMeasurements& m, const Backend& be, const Sizes& z) {
  auto sync = [&] { be.sync(); };
  {
    const long n = z.triad_n.back();
    DevBuf a(be, 4 * (size_t)n, "triad"), b(be, 4 * (size_t)n, "triad"), c(be, 4 * (size_t)n, "triad");
    fill_random(be, b.f(), n, 5);
    fill_random(be, c.f(), n, 6);
    for (long k : z.triad_n) {
      double t = per_call([&] { ops::add<float>(a.f(), b.f(), c.f(), k); }, z.min_s, sync);
      m.triad.push_back({12.0 * k, 12.0 * k, t});
    }
  }
  const long h = z.mix_h, f = 4 * h, np = mix_param_elements(h, f);
  for (long n : z.mix_rows) {
    const size_t nh = (size_t)n * h, nf = (size_t)n * f;
    DevBuf x(be, 4 * nh, "mix"), y(be, 4 * nh, "mix"), dx(be, 4 * nh, "mix"), big(be, 4 * nf, "mix"), big2(be, 4 * nf, "mix"),
        dbig(be, 4 * nf, "mix"), qkv(be, 12 * nh, "mix"), mean(be, 4 * (size_t)n, "mix"), rstd(be, 4 * (size_t)n, "mix"),
        w(be, 4 * (size_t)np, "mix"), b(be, 4 * (size_t)np, "mix"), gw(be, 4 * (size_t)np, "mix"), gb(be, 4 * (size_t)np, "mix");
    fill_random(be, x.f(), (long)nh, 7);
    fill_random(be, big.f(), (long)nf, 8);
    fill_random(be, qkv.f(), 3 * (long)nh, 9);
    fill_random(be, w.f(), np, 10);
    fill_random(be, b.f(), np, 11);
    const MixPtrs p{x.f(), y.f(), dx.f(), big.f(), big2.f(), dbig.f(), qkv.f(), mean.f(), rstd.f(), w.f(), b.f(), gw.f(), gb.f()};
    double t = per_call([&] { layer_elementwise(p, n, h, f); }, z.min_s, sync);
    const double bytes = layer_elementwise_sim_bytes(n, h, f);
    m.mix.push_back({bytes / kMixOps, bytes, t});
  }
  for (long n : z.opt_n) {
    DevBuf p(be, 4 * (size_t)n, "optimizer"), g(be, 4 * (size_t)n, "optimizer"), mo(be, 4 * (size_t)n, "optimizer"),
        v(be, 4 * (size_t)n, "optimizer");
    fill_random(be, p.f(), n, 12);
    fill_random(be, g.f(), n, 13);
    ops::fill<float>(mo.f(), 0.f, n);
    ops::fill<float>(v.f(), 0.f, n);
    double sink = 0;
    double t = per_call([&] { sink += optimizer_step(p.f(), g.f(), mo.f(), v.f(), n); }, z.min_s, sync);
    if (!std::isfinite(sink)) std::fprintf(stderr, " ");  // keep the sums
    const double bytes = kOptimizerBytesPerParam * (double)n;
    m.opt.push_back({bytes, bytes, t});
  }
}

// Pinned host <-> device copies: {host-to-device, device-to-host} bandwidth at the largest size, and the about text.
void pcie_sweep(DeviceMeasurements& r, const Backend& be, const Sizes& z) {
  const size_t top = (size_t)z.pcie_bytes.back();
  void* host = be.alloc_pinned(top);
  if (!host) throw std::runtime_error("calibrate: no pinned host memory for the PCIe sweep (" + fmt("%.3g", (double)top) + " bytes)");
  try {
    DevBuf dev(be, top, "PCIe sweep");
    auto sync = [&] { be.sync(); };
    for (long b : z.pcie_bytes) {
      double th = per_call([&] { be.copy(dev.p, host, (size_t)b, CopyKind::host_to_device, {}); }, z.min_s, sync);
      double td = per_call([&] { be.copy(host, dev.p, (size_t)b, CopyKind::device_to_host, {}); }, z.min_s, sync);
      r.pcie_h2d = b / th, r.pcie_d2h = b / td;
      r.pcie_about += (r.pcie_about.empty() ? "" : ", ") + fmt("%.3g B", (double)b) + fmt(" %.3g", r.pcie_h2d) + fmt(" / %.3g B/s", r.pcie_d2h);
    }
  } catch (...) {
    be.free_pinned(host);
    throw;
  }
  be.free_pinned(host);
}

// The host Adam of one rank of a `world`-rank job: host_adamw over fp32 host arrays with that rank's threads.
void host_adam_measure(DeviceMeasurements& r, const Backend& be, const Sizes& z, int world) {
  const long n = z.host_adam_n;
  std::vector<float> p = random_floats((size_t)n, 11), g = random_floats((size_t)n, 12), m1 = random_floats((size_t)n, 13),
                     m2 = random_floats((size_t)n, 14);
  for (float& x : m2) x *= x;  // second moments are >= 0
  r.host_adam_threads = host_adam_threads(be, world);
  r.local_ranks = local_ranks(world);
  r.cores = usable_cores();
  r.host_adam_n = n;
  long t = 0;
  r.host_adam_s = per_call([&] {
    host_adamw(p.data(), g.data(), m1.data(), m2.data(), n, 1e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, ++t, 1.f, r.host_adam_threads);
  }, z.min_s, [] {});
}

// The catalog cluster built of GPU `gpu` (the first one listed), or "" when none.
std::string catalog_cluster_for(const std::string& gpu) {
  for (const std::string& n : catalog_names("clusters")) {
    const json* c = catalog_find("clusters", n);
    if (c && c->contains("gpu") && (*c)["gpu"].is_string() && (*c)["gpu"].get<std::string>() == gpu && c->value("gpus_per_node", 0) > 1)
      return n;
  }
  return "";
}

json matrix_curve(const std::vector<DevicePoint>& pts, double peak) {
  std::vector<std::pair<double, double>> e;
  for (const DevicePoint& p : pts) e.push_back({p.x, p.flops_or_bytes / p.sec / peak});
  return make_curve(e);
}

std::string points_text(const std::vector<DevicePoint>& pts, const char* unit) {
  std::string s;
  for (const DevicePoint& p : pts) s += (s.empty() ? "" : ", ") + fmt("%.3g", p.x) + fmt(": %.3g", p.flops_or_bytes / p.sec) + unit;
  return s;
}

// The profile's links from the measured collectives: their table in "about"; with >= 2 ranks on one node, intra_node
// fitted to the all-reduce as the simulator's ring costs it (2 (R-1) / R S per rank in 2 latency steps at
// bandwidth x efficiency(S)): bandwidth = the best bus bandwidth, latency = the smallest size's time / 2.
void fit_links(json& cl, const CollectiveMeasurements& coll) {
  if (coll.ranks < 2 || coll.points.empty()) return;
  std::string t;
  for (const CollectivePoint& p : coll.points)
    t += (t.empty() ? "" : "; ") + p.op + fmt(" %.3g B", p.bytes) + fmt(" %.3g s", p.sec) + fmt(" busbw %.3g B/s", p.busbw);
  cl["about"] = cl["about"].get<std::string>() + " Collectives measured with " + std::to_string(coll.ranks) +
                " ranks (nccl-tests' bus bandwidth): " + t + ".";
  std::vector<const CollectivePoint*> ar;
  for (const CollectivePoint& p : coll.points)
    if (p.op == "all_reduce") ar.push_back(&p);
  if (!coll.one_node || ar.size() < 2) return;
  const double R = coll.ranks;
  double bw = 0;
  for (const CollectivePoint* p : ar) bw = std::max(bw, p->busbw);
  const double lat = ar.front()->sec / (2 * (R - 1)) * 0.5;  // (half of the smallest call: the rest is its bytes)
  std::vector<std::pair<double, double>> eff;
  for (const CollectivePoint* p : ar) {
    const double wire = p->sec - 2 * (R - 1) * lat;
    eff.push_back({p->bytes, wire > 0 ? 2 * (R - 1) / R * p->bytes / (bw * wire) : 1e-4});
  }
  cl["intra_node"]["bandwidth_bytes_per_s"] = bw;
  cl["intra_node"]["latency_s"] = lat;
  cl["intra_node"]["efficiency"] = make_curve(eff);
  cl["nccl"] = {{"step_collectives", false}};
  cl["about"] = cl["about"].get<std::string>() + " intra_node fitted to the all-reduce (the step's collectives take it, not the NCCL model).";
}

}  // namespace

std::string catalog_gpu_for_device(const std::string& device, double device_bytes) {
  auto has = [&](const char* s) { return device.find(s) != std::string::npos; };
  if (has("H200")) return "H200-SXM-141GB";
  if (has("H100")) return "H100-SXM-80GB";
  if (has("A100")) return device_bytes > 60e9 ? "A100-SXM4-80GB" : "A100-SXM4-40GB";
  if (has("V100")) return "V100-SXM2-32GB";
  return "";
}

long device_gemm_point_tokens(long s, long tokens) { return std::max(4 * s, tokens); }
double device_gemm_point_flops(long s, long tokens) { return 2.0 * (double)device_gemm_point_tokens(s, tokens) * (double)s * (double)s; }

long calibrate_gemm_tokens(bool quick) {
  CalibrateOptions o;
  o.quick = quick;
  return sizes_for(o).gemm_tokens;
}

std::vector<DevicePoint> fp8_gemm_sweep(const Backend& be, const std::vector<long>& widths, long tokens, double min_s) {
  BackendScope scope(be);
  const long s_max = *std::max_element(widths.begin(), widths.end());
  const long big = device_gemm_point_tokens(s_max, tokens) * s_max;
  DevBuf a(be, 4 * big, "fp8 GEMM operand"), c(be, 4 * big, "fp8 GEMM output"), sc(be, 8, "fp8 scale");
  fill_random(be, a.f(), big, 4);
  const float scale[2] = {64.f, 1 / 64.f};  // (|x| <= 1 scaled into E4M3's range, as a delayed scale would; its inverse)
  be.copy(sc.f(), scale, sizeof scale, CopyKind::host_to_device, Stream{});
  return layer_gemm_sweep(widths, tokens, min_s, [&](long, long m, long n, long k, bool ta, bool tb) {
    ops::matmul_fp8<float>(c.f(), a.f(), sc.f(), 0, a.f(), sc.f(), 0, m, n, k, ta, tb, 1.f, 0.f);
  }, [&] { be.sync(); });
}

double device_gemm_probe_flops_per_s(const Backend& be, long s, long tokens) {
  BackendScope scope(be);
  Sizes z;
  z.gemm = {s};
  z.gemm_tokens = tokens;
  z.min_s = 0.1;
  const DevicePoint p = gemm_sweep(be, z).front();
  return p.flops_or_bytes / p.sec;
}

json device_profile(const DeviceMeasurements& m, const CalibrateOptions& o, const CollectiveMeasurements& coll) {
  const std::string cat = catalog_gpu_for_device(m.device, m.device_bytes);
  json gpu = json::object();
  double kernel_dim = (double)m.attention_head_dim;
  if (!cat.empty()) {
    gpu = *catalog_find("gpus", cat);
    Issues is;
    Gpu g = read_gpu(gpu, "catalog gpus." + cat, is);
    kernel_dim = g.attention_kernel_head_dim((double)m.attention_head_dim);
  }
  double best = 0;
  for (const DevicePoint& p : m.gemm) best = std::max(best, p.flops_or_bytes / p.sec);
  const double bf16_peak = !cat.empty() ? gpu["matrix_flops_per_s"]["bf16"].get<double>() : best;
  const double fp8_peak = !cat.empty() ? gpu["matrix_flops_per_s"].value("fp8", 0.0) : 0.0;
  const json mcurve = matrix_curve(m.gemm, bf16_peak);
  Issues is;
  const double s_top = (double)m.fp32_size;
  const double eff_top = read_curve(mcurve, "matrix_efficiency", is).at(8.0 * s_top * s_top * s_top);
  const double fp32_peak = m.fp32_rate / std::max(1e-4, eff_top);
  std::vector<DevicePoint> attn = m.attention;  // at the kernel's head dim, as sim/op_cost_internal.hpp attn_s
  for (DevicePoint& p : attn) p.x *= kernel_dim / (double)m.attention_head_dim, p.flops_or_bytes = p.x;
  // The simulator has one attention curve for the forward (F) and the backward (2.5 F) of a length: each pair's
  // points carry the pair's rate, (F + 2.5 F) / (t_fwd + t_bwd), so the two predicted kernels take the measured
  // time together (a backward slower than its forward would otherwise put a zigzag into the curve: on an H200,
  // cuDNN's backward ran at about half the forward's rate).
  const std::vector<DevicePoint> attn_measured = attn;
  for (size_t i = 0; i + 1 < attn.size(); i += 2) {
    const double rate = (attn[i].flops_or_bytes + attn[i + 1].flops_or_bytes) / (attn[i].sec + attn[i + 1].sec);
    attn[i].sec = attn[i].flops_or_bytes / rate;
    attn[i + 1].sec = attn[i + 1].flops_or_bytes / rate;
  }
  double hbm = 0;
  for (const auto* v : {&m.triad, &m.mix, &m.opt})
    for (const DevicePoint& p : *v) hbm = std::max(hbm, p.flops_or_bytes / p.sec);
  std::vector<std::pair<double, double>> mem_pts;
  double mix_top = 0;
  for (const DevicePoint& p : m.mix) mem_pts.push_back({p.x, p.flops_or_bytes / p.sec / hbm}), mix_top = std::max(mix_top, p.x);
  for (const DevicePoint& p : m.opt)
    if (p.x > mix_top) mem_pts.push_back({p.x, p.flops_or_bytes / p.sec / hbm});

  const std::string label = m.backend + "-" + host_name();
  const std::string dev = m.device.empty() ? m.backend : m.device;
  const double hbm_bytes = o.memory_bytes > 0 ? o.memory_bytes : m.device_bytes > 0 ? m.device_bytes : 16e9;
  gpu["name"] = label;
  gpu["about"] = "Measured by `trainplan calibrate --backend " + m.backend + (o.quick ? " --quick" : "") + "` on " + dev +
                 (cat.empty() ? ": no catalog GPU matches its name, so the bf16 peak is the best GEMM measured (efficiencies relative to it)"
                              : ": peaks, head dims, fp8 curve, framework memory and interference term of the catalog's " + cat +
                                    "; efficiencies against its peaks") +
                 ". bf16 GEMMs (ops::matmul16, both operands bf16; linear-layer NN / NT / TN of width s over max(4s, " +
                 std::to_string(m.gemm_tokens) + ") tokens), FLOPs: achieved FLOP/s: " +
                 points_text(m.gemm, "") + ". fp32 = ops::matmul at s = " + std::to_string(m.fp32_size) + fmt(": %.3g FLOP/s", m.fp32_rate) +
                 " (the peak is set so that the curve predicts it). Attention (flash_attention_fwd16 / bwd16, causal, head dim " +
                 std::to_string(m.attention_head_dim) + ", the simulator's FLOPs at kernel head dim " + fmt("%.0f", kernel_dim) +
                 "; forward then backward per length): " + points_text(attn_measured, "") +
                 "; the curve holds each pair's rate at both its points. HBM = best of ops::add (12 B per element: " +
                 points_text(m.triad, " B/s") + "), the layer's element-wise mix (bytes per op: " + points_text(m.mix, " B/s") +
                 ") and the optimizer step (" + points_text(m.opt, " B/s") +
                 "). kernel_overhead = ops::add of one element per call, batches ended by one sync" +
                 (m.graph_overhead_s >= 0 ? "; graph_kernel_overhead = per kernel of a captured graph of 256 of them." : ".") +
                 (fp8_peak > 0 && !m.fp8_gemm.empty()
                      ? " fp8 GEMMs (ops::matmul_fp8 of two E4M3 casts, the casts included; cuBLASLt's fp8 kernels where the"
                        " shape takes them), the same products: " + points_text(m.fp8_gemm, "") + "; fp8_matrix_efficiency against"
                        " the fp8 peak."
                      : std::string(" fp8 GEMMs are not measured (only on a device whose catalog GPU has an fp8 peak).")) +
                 (coll.gemm_slowdown >= 0 ? " " + coll.slowdown_about
                                          : std::string(" The slowdown of a GEMM beside a collective is not measured (it needs a"
                                                        " communicator that runs collectives beside compute: NCCL's, --comm nccl on"
                                                        " GPUs under mpirun).")) +
                 " Collectives: under mpirun, in the cluster's about.";
  gpu["matrix_flops_per_s"]["bf16"] = bf16_peak;
  if (cat.empty()) gpu["matrix_flops_per_s"]["fp16"] = bf16_peak;
  gpu["matrix_flops_per_s"]["fp32"] = fp32_peak;
  if (!gpu.contains("vector_flops_per_s")) gpu["vector_flops_per_s"] = {{"fp32", fp32_peak}, {"fp16", bf16_peak}, {"bf16", bf16_peak}};
  gpu["hbm_bytes"] = hbm_bytes;
  gpu["hbm_bandwidth_bytes_per_s"] = hbm;
  gpu["matrix_efficiency"] = mcurve;
  gpu["attention_efficiency"] = matrix_curve(attn, bf16_peak);
  gpu["memory_efficiency"] = make_curve(mem_pts);
  gpu["kernel_overhead_s"] = std::clamp(m.overhead_s, 0.0, 1.0);
  if (m.graph_overhead_s >= 0) gpu["graph_kernel_overhead_s"] = std::clamp(m.graph_overhead_s, 0.0, 1.0);
  if (coll.gemm_slowdown >= 0) gpu["compute_slowdown_under_comm"] = coll.gemm_slowdown;
  if (fp8_peak > 0 && !m.fp8_gemm.empty()) gpu["fp8_matrix_efficiency"] = matrix_curve(m.fp8_gemm, fp8_peak);
  if (o.power_w > 0 || !gpu.contains("power_w")) gpu["power_w"] = o.power_w > 0 ? o.power_w : 700.0;

  const double pcie_bw = 0.5 * (m.pcie_h2d + m.pcie_d2h);
  const std::string base = cat.empty() ? "" : catalog_cluster_for(cat);
  json cl;
  if (!base.empty()) {
    cl = *catalog_find("clusters", base);
    cl["about"] = "The catalog cluster " + base + " with this device's measured GPU (`trainplan calibrate --backend " + m.backend +
                  "`); its links, NCCL model and host memory are the catalog's; host.pcie_bandwidth measured (pinned, mean of " +
                  "host-to-device / device-to-host: " + m.pcie_about + ")." +
                  (coll.ranks < 2 ? " Collectives were not measured (one rank)." : "");
  } else {
    const json eff = json::array({json::array({1e3, 0.05}), json::array({1e5, 0.5}), json::array({1e7, 0.9}), json::array({1e9, 1.0})});
    cl = {{"about", "One node of this device (`trainplan calibrate --backend " + m.backend +
                        "`): links not measured (the PCIe bandwidth and a default efficiency curve); host.pcie_bandwidth measured, pinned, mean of " +
                        "host-to-device / device-to-host: " + m.pcie_about + "."},
          {"gpus_per_node", 1},
          {"intra_node", {{"kind", "pcie"}, {"bandwidth_bytes_per_s", pcie_bw}, {"latency_s", 1e-5}, {"efficiency", eff}}},
          {"inter_node",
           {{"nics_per_node", 1}, {"nic_bandwidth_bits_per_s", pcie_bw * 8}, {"topology", "fat_tree"}, {"oversubscription", 1.0},
            {"nodes_per_leaf", 1}, {"latency_s", 1e-5}, {"efficiency", eff}}},
          {"host", {{"memory_bytes", 64e9}, {"cpu_cores", 16}, {"memory_bandwidth_bytes_per_s", 50e9}}},
          {"price_per_gpu_hour_usd", 0.0},
          {"nccl", {{"step_collectives", false}}}};
  }
  fit_links(cl, coll);
  cl["name"] = label + "-" + (base.empty() ? std::string("node") : base);
  cl["gpu"] = gpu;
  cl["nodes"] = 1;
  if (coll.one_node && coll.ranks > cl.value("gpus_per_node", 1)) cl["gpus_per_node"] = coll.ranks;  // (the job's GPUs)
  if (o.gpus_per_node > 0) cl["gpus_per_node"] = o.gpus_per_node;
  cl["host"]["pcie_bandwidth_bytes_per_s"] = pcie_bw;
  if (m.host_adam_s > 0) {
    cl["host"]["memory_bandwidth_bytes_per_s"] = 28.0 * (double)m.host_adam_n / m.host_adam_s * m.local_ranks;
    cl["host"]["cpu_cores"] = m.cores;
    cl["about"] = cl["about"].get<std::string>() + " host.memory_bandwidth and host.cpu_cores measured: the host Adam (host_adamw, " +
                  std::to_string(m.host_adam_threads) + " thread(s) of " + std::to_string(m.cores) + " usable cores) took " +
                  fmt("%.3g s", m.host_adam_s) + " per " + fmt("%.3g", (double)m.host_adam_n) +
                  " fp32 parameters: 28 B per parameter at " + fmt("%.3g B/s", 28.0 * (double)m.host_adam_n / m.host_adam_s) +
                  " per rank, x " + std::to_string(m.local_ranks) + " rank(s) on this node.";
  }
  return cl;
}

json calibrate_device(const Backend& be, const CalibrateOptions& o, Comm& w, Comm& coll_comm) {
  auto t_start = Clock::now();
  auto say = [&](const char* what) {
    if (o.progress && w.rank() == 0) std::fprintf(stderr, "calibrate --backend %s: %s (%.1f s)\n", be.name, what, since(t_start));
  };
  w.barrier();
  DeviceMeasurements m;
  if (w.rank() == 0) {  // one rank measures the device; the others wait (they would share it)
    BackendScope scope(be);
    const Sizes z = sizes_for(o);
    m.backend = be.name;
    m.device = be.device ? be.device : "";
    m.device_bytes = be.device_bytes;
    say("bf16 GEMM sweep");
    m.gemm = gemm_sweep(be, z);
    m.gemm_tokens = z.gemm_tokens;
    if (const json* g = catalog_find("gpus", catalog_gpu_for_device(m.device, m.device_bytes));
        g && (*g)["matrix_flops_per_s"].value("fp8", 0.0) > 0) {
      say("fp8 GEMM sweep");
      m.fp8_gemm = fp8_gemm_sweep(be, z.gemm, z.gemm_tokens, z.min_s);
    }
    say("fp32 GEMM");
    m.fp32_size = z.gemm.back();
    m.fp32_rate = fp32_gemm_rate(be, m.fp32_size, z.min_s);
    say("attention sweep");
    m.attention = attention_sweep(be, z);
    m.attention_head_dim = z.attn_dim;
    say("memory sweeps");
    memory_sweeps(m, be, z);
    say("PCIe sweep");
    pcie_sweep(m, be, z);
    say("host Adam");
    host_adam_measure(m, be, z, w.size());
    say("kernel overhead");
    DevBuf one(be, 16, "overhead probe");
    ops::fill<float>(one.f(), 1.f, 4);
    m.overhead_s = per_call([&] { ops::add<float>(one.f(), one.f(), one.f() + 1, 1); }, o.quick ? 0.01 : 0.1, [&] { be.sync(); });
    m.graph_overhead_s = graph_kernel_overhead(be, one.f(), o.quick ? 0.01 : 0.1);
  }
  w.barrier();
  CollectiveMeasurements coll;
  if (w.size() >= 2) {
    say("collectives");
    coll = measure_collectives(be, coll_comm, w, o);
    if (o.progress && w.rank() == 0)
      for (const CollectivePoint& p : coll.points)
        std::fprintf(stderr, "  %-15s %12.0f B  %10.3g s  algbw %8.3g GB/s  busbw %8.3g GB/s\n", p.op.c_str(), p.bytes, p.sec,
                     p.algbw / 1e9, p.busbw / 1e9);
  }
  if (w.rank() != 0) return nullptr;
  json cl = device_profile(m, o, coll);
  say("done");
  return cl;
}

}  // namespace tp::exec
