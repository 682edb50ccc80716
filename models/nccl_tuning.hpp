// nccl_tuning: the constants of NCCL's tuning model, as data. NCCL (src/graph/tuning.cc) predicts each
// collective's time for every algorithm and protocol from a base latency, a per-hop latency by link kind, and a
// bus bandwidth built from its topology search's channels (src/graph/search.cc), then runs the fastest. The
// numbers are NCCL's own, one catalog entry per NCCL version (models/catalog/nccl.json, each table citing the
// file and the version); a cluster's "nccl" object picks the version and overrides any of them. The model that
// uses them is sim/nccl_model.
// Units as NCCL writes them: microseconds and GB/s (1e9 bytes/s). Invariant after reading: every number finite
// and >= 0; tables have their full shape.
#pragma once
#include <string>
#include <vector>

#include "json_check.hpp"

namespace tp {

enum class NcclAlgo { tree = 0, ring = 1, collnet_direct = 2, collnet_chain = 3, nvls = 4, nvls_tree = 5 };
enum class NcclProto { ll = 0, ll128 = 1, simple = 2 };
constexpr int kNcclAlgos = 6, kNcclProtos = 3;
// NCCL's link kinds for latency (NCCL_HW_NVLINK, NCCL_HW_PCI, NCCL_HW_NET).
enum class NcclHw { nvlink = 0, pci = 1, net = 2 };
// GPU generations NCCL's per-channel tables are indexed by (compute capability 7.x, 8.x, 9.x, 10.x).
enum class NcclArch { volta = 0, ampere = 1, hopper = 2, blackwell = 3 };
constexpr int kNcclArchs = 4;

const char* nccl_algo_name(NcclAlgo a);    // "Tree", "Ring", "CollNetDirect", "CollNetChain", "NVLS", "NVLSTree"
const char* nccl_proto_name(NcclProto p);  // "LL", "LL128", "Simple"
NcclArch nccl_arch_of(double compute_capability);

// One NCCL version's tuning constants (models/catalog/nccl.json; the JSON keys are these names).
struct NcclTuning {
  std::string version;  // "2.30.7"
  double base_latency_us[kNcclAlgos][kNcclProtos] = {};   // baseLatencies
  double hw_latency_us[3][kNcclAlgos][kNcclProtos] = {};  // hwLatencies[NVLINK | PCI | NET]
  // Caps by generation and node-count class (1 node, 2 nodes, more), GB/s.
  double ll_max_bw[kNcclArchs][3] = {};              // llMaxBws: the whole LL bus bandwidth
  double ring_ll128_channel_bw[kNcclArchs][3] = {};  // perChMaxRingLL128Bws: per channel
  double tree_ll128_channel_bw[kNcclArchs][3] = {};  // perChMaxTreeLL128Bws
  double tree_channel_bw[kNcclArchs][3] = {};        // perChMaxTreeBws
  double nvls_tree_channel_bw[kNcclArchs][3] = {};   // perChMaxNVLSTreeBws
  double nvls_efficiency[kNcclArchs] = {};           // nvlsEfficiency
  // Tree all-reduce bandwidth correction by protocol and log2(bytes / 64), 0..22 (treeCorrectionFactor).
  double tree_correction[kNcclProtos][23] = {};
  // Ring Simple all-reduce across nodes at its plateau: latency x this (before compute capability 8.0, from it).
  double ring_plateau_latency_factor[2] = {1, 1};
  double net_overhead_us = 0;  // per inter-node ring step (getNetOverhead; x3 for Simple)
  double net_latency_us = 0;   // the topology search's latencyInter (the network plugin's; 0 for InfiniBand)
  double nvlink_link_bw[kNcclArchs] = {};  // GB/s per NVLink as NCCL counts it (SMxx_NVLINK_BW)
  // Per-channel speeds the topology search tries, descending, GB/s (speedArrayIntra / Inter by generation).
  std::vector<double> speeds_intra[kNcclArchs], speeds_inter[kNcclArchs];
  // Not NCCL's: the pipeline's fill, which NCCL's tuning model leaves out (it is why runs are slower than its
  // prediction at 1-256 MiB). A chunk crosses the algorithm's chain of stages one after another; with a chunk
  // size that balances its per-chunk cost against the fill, the fill costs 2 sqrt(T x tau): T the bandwidth
  // term (capped at saturation_us, where the chunk reaches its largest size), tau the sum over the chain of the
  // per-stage costs below (LL128 and Simple; LL has no fill). Fitted on the published nccl-tests set (docs/accuracy.md); all 0 turns it off.
  struct PipelineFill {
    double nvls_stage_us = 0;  // an NVLS multimem stage (reduce or broadcast inside a node)
    double intra_hop_us = 0;   // a hop over NVLink or PCIe inside a node
    double net_hop_us = 0;     // a hop across nodes
    double saturation_us = 0;  // the bandwidth term beyond which the fill stops growing
  } fill;
  int ring_max_channels = 32;  // the ring graph's maxChannels (trees take the ring's count)
  int nvls_max_channels = 32;  // NCCL_MAX_NVLS_ARITY (NVLS channels: at most the GPUs of a node)
};

// Reads one entry (catalog "nccl" or the cluster's override object). Keys not given keep `base`'s values.
NcclTuning read_nccl_tuning(const json& v, const std::string& path, const NcclTuning& base, Issues& is);
// The catalog's entry for `version` ("" = the newest bundled); throws InputError naming the versions when absent.
NcclTuning nccl_tuning_version(const std::string& version);

}  // namespace tp
