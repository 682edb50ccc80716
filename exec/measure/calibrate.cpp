// calibrate: measures this machine with the executor's CPU ops and communicator. See calibrate.hpp.
// Invariants: every rank runs the same sweeps in the same order with barriers between points (so concurrent
// ranks contend as they do in training); rank 0 assembles the profile; every curve has strictly increasing
// sizes and efficiencies in (0, 1] (models/hardware.cpp read_curve), which the tests check by loading it.
#include "exec/measure/calibrate.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "exec/backends/ops.hpp"
#include "exec/measure/calibrate_util.hpp"

namespace tp::exec {
namespace {

using namespace calib;

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("model name", 0) == 0) {
      auto p = line.find(':');
      if (p != std::string::npos) {
        std::string m = line.substr(p + 1);
        m.erase(0, m.find_first_not_of(' '));
        return m;
      }
    }
  return "unknown CPU";
}

struct Gemm { double flops = 0, sec = 0; };

// The operands a training step's ops read are not in the cache: between two uses of a buffer the rest of the
// step (other activations, the weights) has touched more than the last-level cache holds. So every sweep of a
// compute op (GEMMs, the element-wise mix, the optimizer) rotates over `copies` sets of operands, at least
// kColdBytes in all, and each call reads buffers that the previous calls evicted. Quick mode: one set (hot).
constexpr double kColdBytes = 512e6;

long copies_for(double set_bytes, const CalibrateOptions& o) {
  if (o.quick) return 1;
  return std::clamp((long)std::ceil(kColdBytes / std::max(1.0, set_bytes)), 1L, 4096L);
}

// GEMM sweep on the training shapes of a linear layer with 4s tokens of width s (all 8 s^3 FLOPs): the
// forward [4s, s] x [s, s] (NN), the input gradient [4s, s] x [s, s]^T (NT) and the weight gradient
// [s, 4s] = ... [4s, s]^T x [4s, s] (TN), as exec/model/gpt.cpp calls ops::matmul. (Quick mode: NN and TN.)
// `only` (not empty): those sizes alone (validate's machine-speed probe).
std::vector<std::vector<Gemm>> gemm_sweep(const CalibrateOptions& o, Comm& w, std::vector<long> only = {}) {
  std::vector<long> sizes = !only.empty() ? only
                            : o.quick     ? std::vector<long>{16, 64, 192, 512}
                                          : std::vector<long>{8, 16, 32, 64, 128, 192, 256, 384, 512, 768, 1024, 1536};
  // Three passes over the sizes (full mode), keeping each point's median time: a burst of other work on the
  // machine during one point (seen on shared VMs) then bends the curve neither down nor up.
  const int passes = o.quick ? 1 : 3;
  const double min_s = o.quick ? 0.03 : 0.08;
  long smax = sizes.back();
  // One pool of random values; each call takes the next set {A [4s, s], B [s, s] or [4s, s], C [4s, s]} of it.
  const long set_max = 12 * smax * smax;
  const long pool_n = std::max(set_max, o.quick ? 0L : (long)(kColdBytes / sizeof(float)) + set_max);
  std::vector<float> pool(pool_n);
  {
    const std::vector<float> r = random_floats(std::min(pool_n, 1L << 20), 1);
    for (long i = 0; i < pool_n; i += (long)r.size()) std::copy_n(r.begin(), std::min((long)r.size(), pool_n - i), pool.begin() + i);
  }
  std::vector<std::vector<Gemm>> out(sizes.size());
  std::vector<std::vector<std::vector<double>>> times(sizes.size());  // [size][variant][pass]
  for (int pass = 0; pass < passes; ++pass) {
    for (size_t si = 0; si < sizes.size(); ++si) {
      const long s = sizes[si];
      std::vector<Gemm>& row = out[si];
      struct V { long m, n, k; bool ta, tb; };
      const V nn{4 * s, s, s, false, false}, nt{4 * s, s, s, false, true}, tn{s, s, 4 * s, true, false};
      std::vector<V> vars = o.quick ? std::vector<V>{nn, tn} : std::vector<V>{nn, nt, tn};
      const long set_n = (12 * s * s + 15) / 16 * 16;  // A 4s^2, B <= 4s^2, C 4s^2; 64-byte steps
      const long copies = std::min(copies_for(4.0 * (double)set_n, o), pool_n / set_n);
      row.resize(vars.size());
      times[si].resize(vars.size());
      for (size_t vi = 0; vi < vars.size(); ++vi) {
        const V& v = vars[vi];
        long next = 0;
        w.barrier();
        double t = per_call([&] {
          float* A = pool.data() + next * set_n;
          next = (next + 1) % copies;
          ops::matmul<float>(A + 8 * s * s, A, A + 4 * s * s, v.m, v.n, v.k, v.ta, v.tb, 1.f, 0.f);
        }, min_s);
        times[si][vi].push_back(t);
      row[vi] = {2.0 * (double)v.m * v.n * v.k, median(times[si][vi])};
      }
    }
  }
  return out;
}

struct Triad { double bytes = 0, bw = 0; };

std::vector<Triad> triad_sweep(const CalibrateOptions& o, Comm& w) {
  std::vector<long> ns;
  for (long n = 1L << 10; n <= (o.quick ? (1L << 22) : (1L << 24)); n *= (o.quick ? 16 : 4)) ns.push_back(n);
  const double min_s = o.quick ? 0.05 : 0.25;
  std::vector<float> a(ns.back()), b = random_floats(ns.back(), 3), c = random_floats(ns.back(), 4);
  std::vector<Triad> out;
  for (long n : ns) {
    w.barrier();
    double t = per_call([&] { ops::add<float>(a.data(), b.data(), c.data(), n); }, min_s);  // a = b + c
    out.push_back({12.0 * n, 12.0 * n / t});
  }
  return out;
}

// One GPT (GELU) layer's element-wise ops, forward and backward, as exec/model/gpt.cpp runs them, at n tokens,
// hidden h, ffn 4h. Returns {simulated bytes (sim/op_cost.cpp, e = 4), seconds}.
struct Mix { double sim_bytes = 0, sec = 0, ops = 10; };

struct MixBufs {
  std::vector<float> x, y, dx, big, big2, dbig, qkv;
  MixBufs(long n, long h, long f, const MixBufs* from) : x(n * h), y(n * h), dx(n * h), big(n * f), big2(n * f), dbig(n * f), qkv(n * 3 * h) {
    if (from) {  // copies of the first set's values (the ops' speed does not depend on them)
      std::copy_n(from->x.begin(), x.size(), x.begin());
      std::copy_n(from->big.begin(), big.size(), big.begin());
      std::copy_n(from->qkv.begin(), qkv.size(), qkv.begin());
    } else {
      x = random_floats(n * h, 5), big = random_floats(n * f, 6), qkv = random_floats(n * 3 * h, 7);
    }
  }
  double bytes() const { return 4.0 * (3 * x.size() + 3 * big.size() + qkv.size()); }
};

std::vector<Mix> elementwise_sweep(const CalibrateOptions& o, Comm& w) {
  const long h = 256, f = 4 * h;
  std::vector<long> rows = o.quick ? std::vector<long>{4, 64, 1024} : std::vector<long>{1, 4, 16, 64, 256, 1024, 4096};
  const double min_s = o.quick ? 0.05 : 0.25;
  const long np = mix_param_elements(h, f);
  std::vector<float> wv = random_floats(np, 8), bv = random_floats(np, 9), gw(np), gb(np);
  std::vector<Mix> out;
  for (long n : rows) {
    std::vector<MixBufs> sets;
    sets.emplace_back(n, h, f, nullptr);
    const long copies = copies_for(sets[0].bytes(), o);
    sets.reserve(copies);
    for (long c = 1; c < copies; ++c) sets.emplace_back(n, h, f, &sets[0]);
    std::vector<float> mean(n), rstd(n);
    long next = 0;
    w.barrier();
    double t = per_call([&] {
      MixBufs& m = sets[next];
      next = (next + 1) % copies;
      layer_elementwise({m.x.data(), m.y.data(), m.dx.data(), m.big.data(), m.big2.data(), m.dbig.data(), m.qkv.data(),
                         mean.data(), rstd.data(), wv.data(), bv.data(), gw.data(), gb.data()}, n, h, f);
    }, min_s);
    out.push_back({layer_elementwise_sim_bytes(n, h, f), t, kMixOps});
  }
  return out;
}

// The optimizer step as the runtime runs it (gradient-norm sum of squares, then AdamW) over n fp32 parameters,
// charged with the simulator's optimizer traffic (sim/program_build.cpp, fp32: 24 B per parameter).
struct Opt { double sim_bytes = 0, sec = 0; };

std::vector<Opt> optimizer_sweep(const CalibrateOptions& o, Comm& w) {
  std::vector<long> ns = o.quick ? std::vector<long>{1L << 20} : std::vector<long>{1L << 20, 1L << 21, 1L << 22, 1L << 23, 1L << 24};
  const double min_s = o.quick ? 0.05 : 0.25;
  std::vector<Opt> out;
  const std::vector<float> p0 = random_floats(ns.back(), 10), g0 = random_floats(ns.back(), 11);
  for (long n : ns) {
    struct Set { std::vector<float> p, g, m, v; };
    const long copies = copies_for(16.0 * (double)n, o);
    std::vector<Set> sets((size_t)copies);
    for (Set& st : sets) st = {std::vector<float>(p0.begin(), p0.begin() + n), std::vector<float>(g0.begin(), g0.begin() + n),
                               std::vector<float>(n, 0.f), std::vector<float>(n, 0.f)};
    long next = 0;
    w.barrier();
    double sink = 0;
    double t = per_call([&] {
      Set& st = sets[next];
      next = (next + 1) % copies;
      sink += optimizer_step(st.p.data(), st.g.data(), st.m.data(), st.v.data(), n);
    }, min_s);
    if (sink < 0) std::fprintf(stderr, " ");  // keep the sums
    out.push_back({kOptimizerBytesPerParam * (double)n, t});
  }
  return out;
}

struct CommCal {
  bool measured = false;
  double latency_s = 0, bw = 0;
  json efficiency = json::array();
  std::string about;
};

CommCal comm_calibrate(const CalibrateOptions& o, Comm& w, double dram_bw) {
  CommCal cc;
  const int R = w.size(), me = w.rank();
  if (R < 2) {
    cc.latency_s = 1e-6;
    cc.bw = dram_bw / 2;  // a shared-memory transfer copies in and out: about half the DRAM triad bandwidth
    cc.efficiency = json::array({json::array({1e3, 0.05}), json::array({1e5, 0.5}), json::array({1e7, 0.9}),
                                 json::array({1e9, 1.0})});
    cc.about = "intra_node not measured (one rank): latency 1 us, bandwidth = DRAM triad / 2, a default efficiency curve";
    return cc;
  }
  cc.measured = true;
  const double budget = o.quick ? 16e6 : 256e6;  // bytes moved per size
  const long maxb = o.quick ? (1L << 22) : (1L << 25);
  std::vector<unsigned char> buf(maxb), buf2(maxb);
  // Ping-pong rank 0 <-> 1: one-way time = round trip / 2.
  std::vector<std::pair<double, double>> pp;  // bytes, one-way seconds
  for (long S = 8; S <= maxb; S *= (o.quick ? 16 : 4)) {
    int reps = (int)std::clamp(budget / (double)S, 5.0, o.quick ? 200.0 : 2000.0);
    w.barrier();
    std::vector<double> ts;
    for (int r = 0; r < reps + 1; ++r) {
      auto t0 = Clock::now();
      if (me == 0) { w.send(buf.data(), S, Dtype::u8, 1, 7); w.recv(buf.data(), S, Dtype::u8, 1, 8); }
      else if (me == 1) { w.recv(buf.data(), S, Dtype::u8, 0, 7); w.send(buf.data(), S, Dtype::u8, 0, 8); }
      if (r > 0) ts.push_back(since(t0) / 2);
    }
    double t = median(ts);
    w.broadcast(&t, 1, Dtype::f64, 0);
    pp.push_back({(double)S, t});
  }
  cc.latency_s = pp.front().second;
  for (auto& [S, t] : pp) cc.bw = std::max(cc.bw, S / std::max(1e-12, t));  // large messages set it
  // All-reduce over every rank: the simulator's ring over R members moves 2 (R-1)/R S per member in 2
  // latency steps at bandwidth x efficiency(S).
  std::vector<std::pair<double, double>> eff;
  std::string ar;
  // The buffers rotate over a pool of at least kColdBytes, as the gradients a step reduces are not in the cache.
  // Each buffer is reduced at most reps / copies + 1 <= 2 times, so the sums (doubling with 2 ranks) stay small.
  const long smax = o.quick ? (1L << 22) : (1L << 26);
  const long pool_n = std::max(smax / 4, o.quick ? 0L : (long)(kColdBytes / sizeof(float)));
  std::vector<float> pool(pool_n, 1.f);
  for (long S = 4096; S <= smax; S *= (o.quick ? 16 : 4)) {
    long n = S / 4;
    const long copies = std::min(copies_for((double)S, o), pool_n / n);
    int reps = (int)std::clamp(budget / (double)S, 3.0, o.quick ? 100.0 : 500.0);
    w.barrier();
    std::vector<double> ts;
    for (int r = 0; r < reps + 1; ++r) {
      float* v = pool.data() + (r % copies) * n;
      auto t0 = Clock::now();
      w.all_reduce_sum(v, n, Dtype::f32);
      if (r > 0) ts.push_back(since(t0));
    }
    double t = median(ts);
    w.broadcast(&t, 1, Dtype::f64, 0);
    double payload = 2.0 * (R - 1) / R * (double)S;
    double wire = t - 2.0 * (R - 1) * cc.latency_s;
    eff.push_back({(double)S, wire > 0 ? payload / (cc.bw * wire) : 1e-4});
    ar += (ar.empty() ? "" : ", ") + fmt("%.3g B", (double)S) + fmt(" %.3g s", t);
  }
  cc.efficiency = make_curve(eff);
  cc.about = "intra_node measured with " + std::to_string(R) + " ranks: ping-pong latency " +
             fmt("%.3g s", cc.latency_s) + ", bandwidth " + fmt("%.4g B/s", cc.bw) +
             "; efficiency from Comm::all_reduce_sum times (" + ar + ")";
  return cc;
}

}  // namespace

double gemm_probe_flops_per_s(long s, Comm& w) {
  const std::vector<Gemm> row = gemm_sweep(CalibrateOptions{}, w, {s}).front();
  double mean = 0;  // as a matrix_efficiency point: the mean over the variants of the achieved FLOP/s
  for (const Gemm& g : row) mean += g.flops / g.sec / (double)row.size();
  return mean;
}

namespace {

// The GPU profile's matrix curve: per GEMM size the mean over its variants of the achieved fraction of the best.
struct MatrixFit {
  double peak = 0;
  std::vector<std::pair<double, double>> pts;
  std::string about;
};
MatrixFit fit_matrix(const std::vector<std::vector<Gemm>>& gemms) {
  MatrixFit m;
  for (auto& row : gemms)
    for (auto& g : row) m.peak = std::max(m.peak, g.flops / g.sec);
  for (auto& row : gemms) {
    double e = 0;
    for (auto& g : row) e += g.flops / g.sec / m.peak;
    e /= (double)row.size();
    m.pts.push_back({row.front().flops, e});
    m.about += (m.about.empty() ? "" : ", ") + fmt("%.3g", row.front().flops) + fmt(":%.3g", e);
  }
  return m;
}

// The GPU profile's memory side: the bandwidth (the best of the triad, the element-wise mix and the optimizer, so that
// every efficiency is <= 1) and the memory curve (the layer ops' sizes, then the optimizer's beyond them).
struct MemoryFit {
  double hbm_bw = 0;
  std::vector<std::pair<double, double>> pts;
  std::string triad_about, mix_about, opt_about;
};
MemoryFit fit_memory(const std::vector<Triad>& triad, const std::vector<Mix>& mix, const std::vector<Opt>& opt) {
  MemoryFit m;
  for (auto& x : mix) m.hbm_bw = std::max(m.hbm_bw, x.sim_bytes / x.sec);
  for (auto& t : triad) {
    m.hbm_bw = std::max(m.hbm_bw, t.bw);
    m.triad_about += (m.triad_about.empty() ? "" : ", ") + fmt("%.3g B", t.bytes) + fmt(" %.3g B/s", t.bw);
  }
  for (auto& q : opt) m.hbm_bw = std::max(m.hbm_bw, q.sim_bytes / q.sec);
  double mix_max = 0;
  for (auto& x : mix) {
    double bw = x.sim_bytes / x.sec;
    m.pts.push_back({x.sim_bytes / x.ops, bw / m.hbm_bw});
    mix_max = std::max(mix_max, x.sim_bytes / x.ops);
    m.mix_about += (m.mix_about.empty() ? "" : ", ") + fmt("%.3g B", x.sim_bytes / x.ops) + fmt(" %.3g B/s", bw);
  }
  // Beyond the layer ops' sizes the one element-wise op of a step is the optimizer: its points extend the curve.
  for (auto& q : opt) {
    if (q.sim_bytes <= mix_max) continue;
    double bw = q.sim_bytes / q.sec;
    m.pts.push_back({q.sim_bytes, bw / m.hbm_bw});
    m.opt_about += (m.opt_about.empty() ? "" : ", ") + fmt("%.3g B", q.sim_bytes) + fmt(" %.3g B/s", bw);
  }
  return m;
}

// The calibrated "GPU": one core of this machine as the CPU backend runs it.
json cpu_gpu_json(const CalibrateOptions& o, int ranks, const MatrixFit& mf, const MemoryFit& mem_fit, double overhead,
                  double mem, double power) {
  return {
      {"name", "cpu-" + host_name()},
      {"about", "One core of " + cpu_model() + " running the trainplan CPU backend (Eigen, fp32, one thread per rank), measured by `trainplan calibrate --backend cpu" +
                    std::string(o.quick ? " --quick" : "") + "` with " + std::to_string(ranks) +
                    " concurrent rank(s)" + std::string(o.quick ? " on hot buffers" : "; every sweep rotates its operands over >= 512 MB of buffers (cold caches, as in a training step)") +
                    ". matrix fp32 = best ops::matmul<float> over the sweep" + std::string(o.quick ? "" : " (median of 3 passes per point)") + "; efficiency by GEMM FLOPs (" + mf.about +
                    "). fp16 / bf16: not supported by the backend (0). vector fp32: not measured, set to the matrix peak (unused by the cost model). HBM = this rank's share of RAM; bandwidth = best of the triad (ops::add, 12 B per element) over sizes and of the element-wise mix (triad: " +
                    mem_fit.triad_about + "); memory efficiency from a GPT layer's element-wise ops charged with the simulator's bytes (" + mem_fit.mix_about +
                    ") and, above those sizes, from the optimizer step (sum of squares + AdamW, 24 B per fp32 parameter: " +
                    mem_fit.opt_about + "). kernel_overhead = one ops::add of 1 element. power: an estimate (" + fmt("%.0f W", power) + " per core)."},
      {"matrix_flops_per_s", {{"fp32", mf.peak}, {"fp16", 0.0}, {"bf16", 0.0}}},
      {"vector_flops_per_s", {{"fp32", mf.peak}, {"fp16", 0.0}, {"bf16", 0.0}}},
      {"hbm_bytes", mem},
      {"hbm_bandwidth_bytes_per_s", mem_fit.hbm_bw},
      {"matrix_efficiency", make_curve(mf.pts)},
      {"memory_efficiency", make_curve(mem_fit.pts)},
      {"kernel_overhead_s", std::clamp(overhead, 0.0, 1.0)},
      {"power_w", power}};
}

// The calibrated cluster: this machine as one node of gpn "GPUs" around `gpu`, its links as measured.
json cpu_cluster_json(const json& gpu, int gpn, const CommCal& cc, double ram, long cores, double dram_bw, double power) {
  json link_eff = cc.efficiency;
  return {
      {"name", "cpu-" + host_name() + "-" + std::to_string(gpn)},
      {"about", "This machine as one node of " + std::to_string(gpn) + " \"GPUs\" (one core = one rank), from `trainplan calibrate --backend cpu`. " +
                    cc.about + ". intra_node.kind is a label (ranks talk through shared memory); inter_node copies intra_node (one node, unused). host.pcie_bandwidth = DRAM triad (no PCIe hop). Price 0."},
      {"gpu", gpu},
      {"nodes", 1},
      {"gpus_per_node", gpn},
      {"intra_node", {{"kind", "pcie"}, {"bandwidth_bytes_per_s", cc.bw}, {"latency_s", cc.latency_s}, {"efficiency", link_eff}}},
      {"inter_node",
       {{"nics_per_node", 1}, {"nic_bandwidth_bits_per_s", cc.bw * 8}, {"topology", "fat_tree"}, {"oversubscription", 1.0},
        {"nodes_per_leaf", 1}, {"latency_s", cc.latency_s}, {"efficiency", link_eff}}},
      {"host",
       {{"memory_bytes", ram}, {"pcie_bandwidth_bytes_per_s", dram_bw}, {"cpu_cores", (int)cores},
        {"memory_bandwidth_bytes_per_s", dram_bw}}},
      {"price_per_gpu_hour_usd", 0.0},
      {"power_per_gpu_w", power},
      // The ranks' collectives are MPI's over shared memory: the measured curves time them, not NCCL's model.
      {"nccl", {{"step_collectives", false}}}};
}

}  // namespace

json calibrate_cpu(const CalibrateOptions& o, Comm& w) {
  auto t_start = Clock::now();
  auto say = [&](const char* what) {
    if (o.progress && w.rank() == 0) std::fprintf(stderr, "calibrate: %s (%.1f s)\n", what, since(t_start));
  };
  const long cores = std::max(1L, sysconf(_SC_NPROCESSORS_ONLN));
  const int gpn = o.gpus_per_node > 0 ? o.gpus_per_node : (int)std::max<long>(cores, w.size());
  const double ram = (double)sysconf(_SC_PHYS_PAGES) * (double)sysconf(_SC_PAGESIZE);

  say("GEMM sweep");
  auto gemms = gemm_sweep(o, w);
  say("triad sweep");
  auto triad = triad_sweep(o, w);
  say("element-wise sweep");
  auto mix = elementwise_sweep(o, w);
  say("optimizer sweep");
  auto opt = optimizer_sweep(o, w);
  say("kernel overhead");
  std::vector<float> one(4, 1.f);
  w.barrier();
  double overhead = per_call([&] { ops::add<float>(one.data(), one.data(), one.data() + 1, 1); }, o.quick ? 0.02 : 0.1);
  double dram_bw = triad.back().bw;
  say("communication");
  CommCal cc = comm_calibrate(o, w, dram_bw);
  w.barrier();
  if (w.rank() != 0) return nullptr;

  const double mem = o.memory_bytes > 0 ? o.memory_bytes : ram / gpn;
  const double power = o.power_w > 0 ? o.power_w : 10.0;
  const json gpu = cpu_gpu_json(o, w.size(), fit_matrix(gemms), fit_memory(triad, mix, opt), overhead, mem, power);
  json cl = cpu_cluster_json(gpu, gpn, cc, ram, cores, dram_bw, power);
  say("done");
  return cl;
}

}  // namespace tp::exec
