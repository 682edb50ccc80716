// nccl_model: NCCL's graphs, tuning table and choice for one communicator. See nccl_model.hpp.
#include "nccl_model.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <mutex>
#include <unordered_map>

namespace tp {

namespace {

constexpr double kNvlinkRawLinkBytesPerS[kNcclArchs] = {25e9, 25e9, 25e9, 50e9};  // NVLink 2/3/4, 5 per direction
constexpr int kLlThreshold = 8, kLl128Threshold = 8, kSimpleThreshold = 64;         // NCCL_*_THREAD_THRESHOLD
constexpr int kMaxThreads[kNcclProtos] = {512, 640, 512};                           // LL, LL128, Simple max threads

// NCCL's function index (Broadcast, Reduce, AllGather, ReduceScatter, AllReduce); -1 for p2p kinds.
int func_of(Coll op) {
  switch (op) {
    case Coll::broadcast: return 0;
    case Coll::reduce: return 1;
    case Coll::all_gather: return 2;
    case Coll::reduce_scatter: return 3;
    case Coll::all_reduce: return 4;
    default: return -1;
  }
}

int log2i(long long n) {
  int l = 0;
  while (n >>= 1) ++l;
  return l;
}

// The ring search in closed form: over the search's speeds (at most the per-channel path bandwidth), the channel
// count each allows (every channel takes its speed on each GPU's fabric link and, across nodes, on one NIC
// each way), keeping the most total bandwidth (ties: the higher speed, found first); then NCCL's duplication of
// fast channels (ncclTopoDupChannels) and its second pass, which raises the speed while the channels still fit.
NcclGraph ring_graph(const NcclSystem& s, const NcclTuning& t, bool inter) {
  const std::vector<double>& speeds = inter ? t.speeds_inter[(int)s.arch] : t.speeds_intra[(int)s.arch];
  const double max_bw = inter ? s.gpu_net_bw : s.gpu_intra_bw;
  // Across nodes a channel enters each node at one GPU and leaves it at another: of the node's k GPUs, k - 1
  // send over the fabric, so a GPU's links carry (k - 1) / k of the channels on average.
  const double k = std::max(1, s.gpus_per_node), fabric_share = inter && k > 1 ? (k - 1) / k : 1.0;
  auto channels_at = [&](double v) {
    double n = std::floor(s.gpu_intra_bw / (v * fabric_share) + 1e-9);
    if (inter) n = std::min(n, s.nics_per_node * std::floor(s.nic_bw / v + 1e-9));
    return (int)std::min<double>(t.ring_max_channels, n);
  };
  NcclGraph g;
  for (double v : speeds) {
    if (v > max_bw + 1e-9) continue;
    int n = channels_at(v);
    if (n >= 1 && n * v > g.channels * g.bw_intra + 1e-9) g = NcclGraph{n, v, v};
  }
  if (g.channels == 0) {  // slower than every listed speed: one channel at the path's bandwidth
    g = NcclGraph{1, max_bw, max_bw};
    return g;
  }
  const bool dup = g.bw_intra >= 25.0 && !(s.arch > NcclArch::ampere && g.bw_intra < 50.0 && g.channels > 4);
  if (dup) {
    int n2 = std::min(g.channels * 2, t.ring_max_channels);
    double div = std::ceil((double)n2 / g.channels);
    g = NcclGraph{n2, g.bw_intra / div, g.bw_inter / div};
  }
  for (double v : speeds)  // pass 2: the highest speed at which the channels still fit
    if (v > g.bw_intra && v <= max_bw + 1e-9 && channels_at(v) >= g.channels) {
      g.bw_intra = g.bw_inter = v;
      break;
    }
  return g;
}

// The tree takes the ring's channels and speed; across nodes the search's second pass raises its intra-node
// speed while below twice the inter-node one and the channels still fit the GPU's fabric links (the speed NCCL
// uses for trees on two nodes, where bandwidth = bw_intra).
NcclGraph tree_graph(const NcclSystem& s, const NcclTuning& t, const NcclGraph& ring, bool inter) {
  NcclGraph g = ring;
  if (!inter || g.channels == 0) return g;
  const double k = std::max(1, s.gpus_per_node), share = k > 1 ? (k - 1) / k : 1.0;
  const std::vector<double>& speeds = t.speeds_inter[(int)s.arch];
  for (auto it = speeds.rbegin(); it != speeds.rend(); ++it)  // ascending: the highest that fits wins
    if (*it > g.bw_intra && *it < 2 * g.bw_inter && g.channels * *it * share <= s.gpu_intra_bw + 1e-9) g.bw_intra = *it;
  return g;
}

// NVLS: one channel per GPU of the node (NCCL_MAX_NVLS_ARITY at most), the highest speed whose channels fit the
// GPU's NVLinks; across nodes each head's NIC (bw_inter raised, as the search's second pass does, below twice
// the intra speed and within the NIC path).
NcclGraph nvls_graph(const NcclSystem& s, const NcclTuning& t, bool inter) {
  NcclGraph g;
  if (!s.nvswitch || s.arch < NcclArch::hopper) return g;
  const int n = std::min(s.gpus_per_node, t.nvls_max_channels);
  const std::vector<double>& speeds = inter ? t.speeds_inter[(int)s.arch] : t.speeds_intra[(int)s.arch];
  const double cap = inter ? s.gpu_net_bw : 1e300;
  for (double v : speeds)
    if (v * n <= s.gpu_intra_bw + 1e-9 && v <= cap + 1e-9) { g = NcclGraph{n, v, v}; break; }
  if (g.channels == 0) return g;
  for (double v : speeds)
    if (v > g.bw_inter && v < 2 * g.bw_intra && v <= cap + 1e-9) { g.bw_inter = v; break; }
  return g;
}

// ncclTopoTuneModel for one function, algorithm and protocol: fills c.bw / c.lat.
void tune_one(NcclComm& c, int f, int a, int p) {
  const NcclTuning& t = c.tuning;
  const int R = c.ranks, N = c.nodes, ai = (int)c.sys.arch, idx2 = N <= 2 ? N - 1 : 2;
  const double ppn = (double)R / N;
  const NcclGraph& g = a == (int)NcclAlgo::ring ? c.ring : a == (int)NcclAlgo::tree ? c.tree
                       : (a == (int)NcclAlgo::nvls || a == (int)NcclAlgo::nvls_tree) ? c.nvls : c.ring;
  const bool collnet = a == (int)NcclAlgo::collnet_direct || a == (int)NcclAlgo::collnet_chain;
  const bool nvls = a == (int)NcclAlgo::nvls || a == (int)NcclAlgo::nvls_tree;
  const int nsteps = f == 4 ? 2 * (R - 1) : (f == 2 || f == 3) ? R - 1 : R;
  if (g.channels == 0 || (nvls && g.channels < 2)) return;
  double bw = (N <= 2 || collnet) ? g.bw_intra : g.bw_inter;
  if (nvls) {
    double intra = g.bw_intra * t.nvls_efficiency[ai] * (g.channels - 1) / g.channels;
    intra *= f == 4 ? 2.0 : (ppn - 1) / ppn;
    double inter = g.bw_inter * ((N <= 2 && a == (int)NcclAlgo::nvls_tree) ? 2 : 1);
    bw = std::min(intra, inter);
    if (a == (int)NcclAlgo::nvls_tree) bw = std::min(bw, t.nvls_tree_channel_bw[ai][idx2]);
  }
  double bus = g.channels * bw;
  const int idx1 = N == 1 ? ai : 0;  // LL across nodes: by CPU vendor (Intel's row)
  if (a == (int)NcclAlgo::ring && p == (int)NcclProto::ll) bus = std::min(t.ll_max_bw[idx1][idx2], bus * .5);
  if (a == (int)NcclAlgo::ring && p == (int)NcclProto::ll128) bus = std::min(bus * .92, g.channels * t.ring_ll128_channel_bw[ai][idx2]);
  if (a == (int)NcclAlgo::tree && f == 4) bus = std::min(bus * .92, g.channels * t.tree_channel_bw[ai][idx2]);
  if (a == (int)NcclAlgo::tree && p == (int)NcclProto::ll) bus = std::min(bus / 3.8, t.ll_max_bw[idx1][idx2]);
  if (a == (int)NcclAlgo::tree && p == (int)NcclProto::ll128)
    bus = std::min(bus * (N == 1 ? 7.0 / 9.0 : 120.0 / 128.0), g.channels * t.tree_ll128_channel_bw[ai][idx2]);
  if (collnet && p != (int)NcclProto::simple) bus = 0;
  if (a == (int)NcclAlgo::collnet_direct && p == (int)NcclProto::simple) {
    if (f == 2 || f == 3) bus = ppn * std::min(g.bw_intra, g.bw_inter * 0.9);
    else {
      double factor = ppn / g.channels;
      factor -= (factor - 1) / 2;
      bus /= factor;
      if (c.sys.arch >= NcclArch::hopper) bus *= .85;
    }
  }
  if (!(a != (int)NcclAlgo::ring && (f == 2 || f == 3)))
    bus *= (a == (int)NcclAlgo::ring || nvls) ? (double)R / nsteps : .5;
  c.bw[f][a][p] = bus;

  const int intra_hw = (int)c.sys.intra_hw, hw = N == 1 ? intra_hw : (int)NcclHw::net;
  double lat = t.base_latency_us[a][p];
  double intra_lat = t.hw_latency_us[intra_hw][a][p];
  double inter_lat = (ppn == 1 ? t.hw_latency_us[2][(int)NcclAlgo::tree][p] : t.hw_latency_us[2][a][p]) + t.net_latency_us;
  if (p == (int)NcclProto::simple) inter_lat += t.net_latency_us;
  if (a == (int)NcclAlgo::ring) {
    if (f == 0 || f == 1) {
      lat += t.hw_latency_us[hw][a][p];  // NCCL's rings have the same channels on every node here
    } else {
      double net_overhead = N > 1 ? t.net_overhead_us * (p == (int)NcclProto::simple ? 3 : 1) : 0;
      intra_lat = std::max(intra_lat, net_overhead);
      int inter_steps = N == 1 ? 0 : f == 4 ? 2 * (N - 1) : N - 1;
      lat += (nsteps - inter_steps) * intra_lat + inter_steps * inter_lat;
    }
  } else if (a == (int)NcclAlgo::tree) {
    if (f == 4) lat += 2 * ((R / N - 1) * intra_lat + log2i(N) * inter_lat);
  } else if (a == (int)NcclAlgo::collnet_direct) {
    lat += 2 * (std::min(1, R / N - 1) * intra_lat + (R / N - 1) * 0.4) + inter_lat;
  } else if (a == (int)NcclAlgo::collnet_chain) {
    lat += 2 * (R / N - 1) * intra_lat + inter_lat;
  } else if (a == (int)NcclAlgo::nvls) {
    lat = intra_lat + (N > 1 ? inter_lat : 0);
  } else if (a == (int)NcclAlgo::nvls_tree) {
    lat += intra_lat + 2 * log2i(N) * inter_lat;
  }
  c.lat[f][a][p] = lat;
}

// Which (function, algorithm) pairs NCCL tunes at all, and which it enables by default on this system.
bool algo_runs(const NcclComm& c, int f, int a) {
  const bool multi = c.nodes > 1;
  if ((f == 0 || f == 1) && a != (int)NcclAlgo::ring) return false;
  if ((f == 2 || f == 3) && a != (int)NcclAlgo::ring && a != (int)NcclAlgo::nvls && a != (int)NcclAlgo::collnet_direct)
    return false;
  if (a == (int)NcclAlgo::nvls_tree && !multi) return false;
  if (!c.sys.collnet && (a == (int)NcclAlgo::collnet_direct || a == (int)NcclAlgo::collnet_chain ||
                         (a == (int)NcclAlgo::nvls && multi)))
    return false;
  if (a == (int)NcclAlgo::collnet_direct && !c.sys.nvswitch) return false;
  // All-gather / reduce-scatter over NVLS or CollNet across nodes need one GPU per NIC (collnet heads).
  if ((f == 2 || f == 3) && multi && (a == (int)NcclAlgo::nvls || a == (int)NcclAlgo::collnet_direct) &&
      c.sys.gpus_per_node > c.sys.nics_per_node)
    return false;
  return true;
}

// Channels the launch uses for `bytes` (enqueue.cc: fewer channels while each thread would get too little).
int launch_channels(const NcclComm& c, int a, int p, double bytes) {
  if (a == (int)NcclAlgo::nvls || a == (int)NcclAlgo::nvls_tree) return c.nvls.channels;
  int nc = std::max(1, c.ring.channels * 2);  // ncclTopoPostset doubles the graph's rings into channels
  const int nt = kMaxThreads[p];
  long long thr = p == (int)NcclProto::ll ? kLlThreshold : p == (int)NcclProto::ll128 ? kLl128Threshold : kSimpleThreshold;
  if (a == (int)NcclAlgo::ring && p == (int)NcclProto::ll) thr *= c.ranks;
  while (bytes < (double)nc * nt * thr && nc >= 2) --nc;
  return nc;
}

}  // namespace

NcclTuning nccl_tuning_for(const Cluster& cl) {
  NcclTuning t = nccl_tuning_version(cl.nccl.version);
  if (cl.nccl.overrides.empty()) return t;
  Issues is;
  t = read_nccl_tuning(cl.nccl.overrides, "cluster.nccl.tuning", t, is);
  if (!is.empty()) throw InputError(is.messages);
  return t;
}

NcclSystem nccl_system(const Cluster& cl, const NcclTuning& t) {
  NcclSystem s;
  s.arch = nccl_arch_of(cl.gpu.compute_capability > 0 ? cl.gpu.compute_capability : 8.0);
  s.nvswitch = cl.intra.kind == Fabric::nvswitch;
  s.intra_hw = cl.intra.kind == Fabric::pcie ? NcclHw::pci : NcclHw::nvlink;
  s.gpus_per_node = cl.gpus_per_node;
  if (s.intra_hw == NcclHw::nvlink) {
    double links = std::max(1.0, std::round(cl.intra.bandwidth_bytes_per_s / kNvlinkRawLinkBytesPerS[(int)s.arch]));
    s.gpu_intra_bw = links * t.nvlink_link_bw[(int)s.arch];
  } else {
    s.gpu_intra_bw = cl.intra.bandwidth_bytes_per_s / 1e9;
  }
  s.nic_bw = cl.inter.nic_bandwidth_bytes_per_s / 1e9;
  s.nics_per_node = cl.inter.nics_per_node;
  const double pcie = cl.host.pcie_bandwidth_bytes_per_s / 1e9;
  s.gpu_net_bw = pcie > 0 ? std::min(s.nic_bw, pcie) : s.nic_bw;
  s.collnet = cl.nccl.collnet;
  return s;
}

NcclComm nccl_comm(const Cluster& cl, const NcclTuning& t, int ranks, int ranks_per_node, bool node_busy) {
  NcclComm c;
  c.tuning = t;
  c.sys = nccl_system(cl, t);
  c.ranks = std::max(1, ranks);
  ranks_per_node = std::max(1, std::min(ranks_per_node, c.ranks));
  c.nodes = std::max(1, c.ranks / ranks_per_node);
  // The communicator's GPUs of one node and the NICs next to them (every GPU keeps its share of the NICs).
  const int gpn = std::max(1, c.sys.gpus_per_node);
  const double nic_share = (double)c.sys.nics_per_node * ranks_per_node / gpn;
  c.sys.nics_per_node = std::max(1, (int)std::lround(nic_share));
  if (node_busy) {
    double f = std::min(1.0, nic_share);
    if (c.nodes > cl.inter.nodes_per_leaf && cl.inter.oversubscription > 1) f /= cl.inter.oversubscription;
    c.sys.nic_bw *= f;
    c.sys.gpu_net_bw = std::min(c.sys.gpu_net_bw, c.sys.nic_bw);
  }
  c.sys.gpus_per_node = ranks_per_node;
  if (c.ranks <= 1) return c;
  const bool inter = c.nodes > 1;
  c.ring = ring_graph(c.sys, t, inter);
  c.tree = tree_graph(c.sys, t, c.ring, inter);
  if (ranks_per_node > 1) c.nvls = nvls_graph(c.sys, t, inter);
  for (int f = 0; f < kNcclFuncs; ++f)
    for (int a = 0; a < kNcclAlgos; ++a) {
      if (!algo_runs(c, f, a)) continue;
      for (int p = 0; p < kNcclProtos; ++p) {
        if ((a == (int)NcclAlgo::nvls || a == (int)NcclAlgo::nvls_tree) && p != (int)NcclProto::simple) continue;
        tune_one(c, f, a, p);
      }
    }
  return c;
}

namespace {

// ncclTopoGetAlgoTime: us, or -1 when the pair does not run.
double algo_time_us(const NcclComm& c, int f, int a, int p, double bytes) {
  double bw = c.bw[f][a][p], lat = c.lat[f][a][p];
  if (bw <= 0) return -1;
  const int log_size = log2i((long long)bytes >> 6);
  if (a == (int)NcclAlgo::tree && f == 4 && log_size >= 0 && log_size < 23) bw *= c.tuning.tree_correction[p][log_size];
  const int ring_channels = std::max(1, c.ring.channels * 2);
  if (a == (int)NcclAlgo::ring && p == (int)NcclProto::simple && c.nodes > 1 && f == 4 &&
      bytes / ((double)ring_channels * c.ranks) >= 64)
    lat *= c.tuning.ring_plateau_latency_factor[c.sys.arch >= NcclArch::ampere ? 1 : 0];
  return lat + bytes / (1000 * bw);
}

// The fill of a pipeline whose chain costs tau us per chunk, for a bandwidth term of T us (NcclTuning::PipelineFill).
double fill_of_us(const NcclTuning::PipelineFill& pf, double T_us, double tau_us) {
  return 2 * std::sqrt(std::min(T_us, pf.saturation_us) * tau_us);
}

// The pipeline's fill (NcclTuning::PipelineFill), us: 2 sqrt(min(T, saturation) x tau), tau the per-stage costs
// summed over the chain a chunk follows: ring 2(R-1) hops for all-reduce, R-1 otherwise, 2(N-1) resp. N-1 of them
// across nodes; tree up and down the node's chain and log2 N levels; NVLS two multimem stages (one for
// all-gather / reduce-scatter), NVLSTree and CollNet those plus one level up and down across nodes; point to
// point one hop. LL has none.
double fill_us(const NcclComm& c, int f, int a, int p, double bw_us) {
  if (p == (int)NcclProto::ll) return 0;  // LL: every 8-byte line carries its flag; no chunk waits to fill
  const NcclTuning::PipelineFill& pf = c.tuning.fill;
  const int R = c.ranks, N = c.nodes, k = std::max(1, R / std::max(1, N)), times = f == 4 ? 2 : 1;
  const int levels = N > 1 ? (int)std::ceil(std::log2((double)N)) : 0;
  double tau = 0;
  switch ((NcclAlgo)a) {
    case NcclAlgo::ring: {
      const int net = N > 1 ? times * (N - 1) : 0;
      tau = (times * (R - 1) - net) * pf.intra_hop_us + net * pf.net_hop_us;
      break;
    }
    case NcclAlgo::tree: tau = 2 * (k - 1) * pf.intra_hop_us + 2 * levels * pf.net_hop_us; break;
    case NcclAlgo::nvls: tau = times * pf.nvls_stage_us; break;
    case NcclAlgo::nvls_tree: tau = 2 * pf.nvls_stage_us + 2 * levels * pf.net_hop_us; break;
    case NcclAlgo::collnet_direct:
    case NcclAlgo::collnet_chain: tau = 2 * pf.nvls_stage_us + 2 * pf.net_hop_us; break;
  }
  return fill_of_us(pf, bw_us, tau);
}

// Send/recv and all-to-all: each peer's share over NVLink (same node) or the GPU's NIC path, with the ring
// Simple hop latency per peer round (NCCL's grouped p2p runs the rounds on its p2p channels).
NcclCall p2p_call(const NcclComm& c, Coll op, double bytes) {
  NcclCall call{"P2P", "Simple", std::max(1, c.ring.channels * 2), 0};
  const NcclTuning& t = c.tuning;
  const int R = c.ranks, k = std::max(1, R / c.nodes);
  const double intra_bw = c.sys.gpu_intra_bw, net_bw = std::min(c.sys.gpu_net_bw, c.sys.nic_bw * c.sys.nics_per_node / k);
  const int ihw = (int)c.sys.intra_hw, ring = (int)NcclAlgo::ring, simple = (int)NcclProto::simple;
  double us;
  if (op == Coll::p2p) {
    const bool across = c.nodes > 1;
    us = t.base_latency_us[ring][simple] + t.hw_latency_us[across ? 2 : ihw][ring][simple] +
         bytes / (1000 * (across ? net_bw : intra_bw));
  } else {  // all-to-all: R - 1 peers, S / R each; k - 1 of them on this node
    const double per_peer = bytes / R;
    const double intra_s = (k - 1) * per_peer / (1000 * intra_bw), inter_s = c.nodes > 1 ? (R - k) * per_peer / (1000 * net_bw) : 0;
    us = t.base_latency_us[ring][simple] + std::max(intra_s, inter_s) +
         (k - 1) * t.hw_latency_us[ihw][ring][simple] / call.channels + (R - k) * t.hw_latency_us[2][ring][simple] / call.channels;
  }
  // One hop of the pipeline's fill: the bandwidth term is the time beyond the base and hop latencies.
  const double hop_us = c.nodes > 1 ? t.fill.net_hop_us : t.fill.intra_hop_us;
  const double fill = fill_of_us(t.fill, us, hop_us);
  call.time_s = (us + fill) * 1e-6;
  call.latency_s = call.fill_s = fill * 1e-6;
  return call;
}

}  // namespace

NcclCall nccl_call(const NcclComm& c, Coll op, double bytes, int force_algo, int force_proto) {
  if (c.ranks <= 1 || bytes <= 0) return NcclCall{"-", "-", 0, 0};
  const int f = func_of(op);
  if (f < 0) return p2p_call(c, op, bytes);
  double best = -1;
  int ba = -1, bp = -1;
  for (int a = 0; a < kNcclAlgos; ++a) {
    if (force_algo >= 0 && a != force_algo) continue;
    for (int p = 0; p < kNcclProtos; ++p) {
      if (force_proto >= 0 && p != force_proto) continue;
      double us = algo_time_us(c, f, a, p, bytes);
      if (us >= 0 && (best < 0 || us < best)) { best = us; ba = a; bp = p; }
    }
  }
  if (ba < 0 && force_algo < 0 && force_proto < 0) return NcclCall{"-", "-", 0, 0, 0};
  if (ba < 0)
    throw InputError({std::string("NCCL does not run ") + coll_name(op) + " with " +
                      (force_algo >= 0 ? nccl_algo_name((NcclAlgo)force_algo) : "any algorithm") + " / " +
                      (force_proto >= 0 ? nccl_proto_name((NcclProto)force_proto) : "any protocol") + " on " +
                      std::to_string(c.ranks) + " ranks of this cluster"});
  const double bw_us = bytes / (1000 * c.bw[f][ba][bp]);  // the bandwidth term before corrections
  const double lat_us = std::clamp(best - bw_us, 0.0, best);
  // NCCL chose by its own model; the run also pays the pipeline's fill (counted with the latency).
  const double fill = fill_us(c, f, ba, bp, bw_us);
  return NcclCall{nccl_algo_name((NcclAlgo)ba), nccl_proto_name((NcclProto)bp), launch_channels(c, ba, bp, bytes),
                  (best + fill) * 1e-6, (lat_us + fill) * 1e-6, fill * 1e-6};
}

namespace {

// What a communicator of nccl_collective depends on: the tuning (version and overrides), what NCCL's search
// sees of the cluster, and the ranks.
struct CommKey {
  std::string version, overrides;  // the overrides dumped only when there are any (short strings: no allocation)
  double cc, intra_bw, nic_bw, pcie_bw;
  double oversubscription;
  int intra_kind, nics, gpn, leaf, g, k;
  bool collnet, node_busy;
  bool operator==(const CommKey& o) const {
    return version == o.version && overrides == o.overrides && cc == o.cc && intra_bw == o.intra_bw && nic_bw == o.nic_bw && pcie_bw == o.pcie_bw &&
           oversubscription == o.oversubscription && intra_kind == o.intra_kind && nics == o.nics && gpn == o.gpn &&
           leaf == o.leaf && g == o.g && k == o.k && collnet == o.collnet && node_busy == o.node_busy;
  }
};
struct CommKeyHash {
  size_t operator()(const CommKey& key) const {
    size_t h = std::hash<std::string>()(key.version) ^ std::hash<std::string>()(key.overrides);
    for (double d : {key.cc, key.intra_bw, key.nic_bw, key.pcie_bw, key.oversubscription}) h = h * 1000003u ^ std::hash<double>()(d);
    for (int i : {key.intra_kind, key.nics, key.gpn, key.leaf, key.g, key.k, 2 * (int)key.collnet + (int)key.node_busy})
      h = h * 1000003u ^ std::hash<int>()(i);
    return h;
  }
};

}  // namespace

NcclCall nccl_collective(const Cluster& cl, Coll c, int g, int k, double bytes, bool node_busy) {
  // Communicators are cached per thread (the planner's threads each keep theirs; no lock on the hot path); the
  // tunings, shared by every thread, behind a lock.
  static std::mutex mu;
  static std::map<std::string, std::shared_ptr<const NcclTuning>> tunings;
  thread_local std::unordered_map<CommKey, NcclComm, CommKeyHash> comms;
  k = std::max(1, std::min(k, g));
  CommKey key{cl.nccl.version, cl.nccl.overrides.empty() ? std::string() : cl.nccl.overrides.dump(),
              cl.gpu.compute_capability, cl.intra.bandwidth_bytes_per_s, cl.inter.nic_bandwidth_bytes_per_s,
              cl.host.pcie_bandwidth_bytes_per_s, cl.inter.oversubscription, (int)cl.intra.kind, cl.inter.nics_per_node,
              cl.gpus_per_node, cl.inter.nodes_per_leaf, g, k, cl.nccl.collnet, node_busy};
  auto it = comms.find(key);
  if (it == comms.end()) {
    std::shared_ptr<const NcclTuning> t;
    {
      std::lock_guard<std::mutex> lock(mu);
      const std::string tuning_key = key.version + "#" + key.overrides;
      auto ti = tunings.find(tuning_key);
      if (ti == tunings.end()) ti = tunings.emplace(tuning_key, std::make_shared<const NcclTuning>(nccl_tuning_for(cl))).first;
      t = ti->second;
    }
    if (comms.size() >= 4096) comms.clear();  // bounded: a planner's search meets a few hundred
    it = comms.emplace(std::move(key), nccl_comm(cl, *t, g, k, node_busy)).first;
  }
  NcclCall call = nccl_call(it->second, c, bytes);
  if (cl.nccl.bandwidth_scale != 1 && cl.nccl.bandwidth_scale > 0)  // a framework's fitted network scale
    call.time_s = call.latency_s + (call.time_s - call.latency_s) / cl.nccl.bandwidth_scale;
  return call;
}

double nccl_bus_factor(Coll op, int ranks) {
  const double R = std::max(1, ranks);
  switch (op) {
    case Coll::all_reduce: return 2 * (R - 1) / R;
    case Coll::all_gather:
    case Coll::reduce_scatter:
    case Coll::all_to_all: return (R - 1) / R;
    default: return 1;
  }
}

}  // namespace tp
