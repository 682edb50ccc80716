// step_formulas: the formulas of one training step that the simulator's program (sim/program_build.cpp) and
// the planner's analytic pass (planner/analytic.cpp) both use — one place for each: element sizes, pipeline
// send bytes, gradient bucket size, the split of parameters between GPU and host optimizers, static state
// memory, GPU and host Adam times, PCIe copy times, and the closed-form time of a ring / hierarchical
// collective built from the same phase list (collective_ring_phases) from which sim/collective.cpp builds its
// flows.
// Invariants: sizes in bytes, times in seconds, parameter counts per GPU; nothing here allocates, so the
// planner can call it per evaluated plan (the small formulas are inline: the planner's hot loop calls them).
#pragma once
#include <algorithm>

#include "collective.hpp"
#include "models/scenario.hpp"

namespace tp {

// Bytes per element of one plan: weights / activations (e), gradients (g), and the fp32 master copy kept
// when weights are in a lower precision (master: 4 or 0). Adam adds 8 bytes (two fp32 moments).
struct ElemBytes {
  double e = 2, g = 4, master = 4;
  double optimizer() const { return master + 8; }  // optimizer state bytes per parameter
};
ElemBytes elem_bytes(const Training& t);

// Parameters per GPU, split into the part replicated over dp (dense) and the experts (replicated over the
// expert-data-parallel group, dp / ep ranks).
struct Params {
  double dense = 0, expert = 0;
  double total() const { return dense + expert; }
  Params& operator+=(const Params& o) { dense += o.dense; expert += o.expert; return *this; }
  Params operator-(const Params& o) const { return Params{dense - o.dense, expert - o.expert}; }
};

// The share of `pr` a rank keeps when ZeRO stage `zero` >= `stage` shards it over dp (experts over edp).
inline double zero_shard(const Params& pr, int zero, int stage, int dp, int edp) {
  return zero >= stage && dp > 1 ? pr.dense / dp + pr.expert / std::max(1, edp) : pr.total();
}

// One pipeline send of one micro-batch: Megatron's scatter-gather sends 1/tp of [b, s / cp, h].
double pipeline_send_bytes(const Scenario& sc, long long microbatch, int tp);
// A pipeline rank's send / receive buffers: one micro-batch's activation (or its gradient) each way, in both
// directions (4 x the send), none without pipeline parallelism. Sim and planner alike.
inline double pipeline_buffer_bytes(int pp, double send_bytes) { return pp > 1 ? 4 * send_bytes : 0; }

// The gradient bucket is the framework's (framework_bucket_params, models/framework.hpp): Megatron-Core's
// max(40 M, 1 M x dp) parameters, DeepSpeed's 500 M, FSDP's one per layer.
// ZeRO-2/3: unreduced gradient buckets a rank holds at most (DeepSpeed's double-buffered ipg buckets): the
// backward that fills a third waits for the first one's reduce-scatter.
constexpr int kGradBucketsInFlight = 2;

// Which parameters each optimizer updates: the GPU's Adam and the host CPU's Adam (ZeRO-Offload: all of
// this rank's shard; granular: the offloaded layers'). `held`: parameters of the rank; `off`: those that
// live in host memory (granular offload). Chunked offload splits by chunks (sim/chunk_offload.cpp).
struct OptimizerSplit { double gpu_params = 0, host_params = 0; };
inline OptimizerSplit optimizer_split(const Params& held, const Params& off, OffloadKind kind, int zero, int dp, int edp) {
  OptimizerSplit s;
  switch (kind) {
    case OffloadKind::none:
    case OffloadKind::chunked: s.gpu_params = zero_shard(held, zero, 1, dp, edp); break;
    case OffloadKind::optimizer: s.host_params = zero_shard(held, zero, 1, dp, edp); break;
    case OffloadKind::granular:
      s.gpu_params = zero_shard(held - off, zero, 1, dp, edp);
      s.host_params = zero_shard(off, zero, 1, dp, edp);
      break;
  }
  return s;
}

// Static state per GPU (chunked offload excepted): low-precision weights (ZeRO-3 shards them), gradients
// (ZeRO-2), optimizer state on the GPU, and host memory of the offloaded states.
struct StateBytes { double weights = 0, gradients = 0, optimizer = 0, host = 0; };
inline StateBytes state_bytes(const Params& held, const Params& off, OffloadKind kind, int zero, int dp, int edp,
                       const ElemBytes& eb) {
  StateBytes st;
  const Params on_gpu = held - off;
  const OptimizerSplit os = optimizer_split(held, off, kind, zero, dp, edp);
  st.weights = zero_shard(on_gpu, zero, 3, dp, edp) * eb.e;
  st.gradients = zero_shard(on_gpu, zero, 2, dp, edp) * eb.g;
  st.optimizer = kind == OffloadKind::optimizer ? 0 : os.gpu_params * eb.optimizer();
  if (kind == OffloadKind::optimizer) st.host = os.host_params * (eb.optimizer() + 4);  // + the fp32 gradient
  if (kind == OffloadKind::granular) st.host = off.total() * (eb.e + 4) + os.host_params * eb.optimizer();
  return st;
}

// GPU Adam: bandwidth-bound over master weights, moments (read + write), gradient and weight.
inline double gpu_adam_s(double params, const Gpu& gpu, const ElemBytes& eb) {
  double traffic = params * (2 * eb.optimizer() + eb.g + eb.e);
  if (traffic <= 0) return 0;
  return traffic / (gpu.hbm_bandwidth_bytes_per_s * gpu.memory_efficiency.at(traffic)) + gpu.kernel_overhead_s;
}
// Host (CPU) Adam at this GPU's share of the node's DRAM bandwidth: fp32 master, moments read and written,
// fp32 gradient read (4 reads + 3 writes of 4 bytes) and the low-precision weight written back.
inline double host_adam_s(double params, const Host& host, int gpus_sharing_host, const ElemBytes& eb) {
  if (host.memory_bandwidth_bytes_per_s <= 0 || params <= 0) return 0;
  return params * (28 + eb.e) / (host.memory_bandwidth_bytes_per_s / std::max(1, gpus_sharing_host));
}
// One copy over this GPU's PCIe link.
inline double pcie_copy_s(double bytes, const Host& host) { return bytes / host.pcie_bandwidth_bytes_per_s; }

// Closed-form time of a ring / hierarchical collective (collective_ring_phases, sim/collective.hpp) when every GPU of the involved nodes runs one like it at once: a ring
// flow gets the intra-node bandwidth, or the node's NIC bandwidth shared by its GPUs (capped by the GPU's
// PCIe link, divided by the oversubscription when the group spans `leaves_spanned` > 1 leaves), times the
// tier's efficiency; latency per step per tier.
struct LinkTiers { double intra_latency_s = 0, inter_latency_s = 0; };
double collective_closed_form_s(Coll c, int g, int k, double bytes, const Cluster& cl, const LinkTiers& lat);
// One pipeline send inside a node or across nodes, alone on its path.
double p2p_closed_form_s(bool inter, double bytes, const Cluster& cl, const LinkTiers& lat);

// Communicators one rank of a layout belongs to, each holding NCCL buffers: its tp group, cp group, data
// (dp x cp) group, expert-parallel and expert-data-parallel groups, one per neighbouring pipeline stage (2 with
// pp > 2, 1 with pp = 2), and the tied-embedding group of the first and last stages.
inline int rank_communicators(int tp, int cp, int data_ranks, int ep, int pp, bool tied_embeddings) {
  int n = (tp > 1) + (cp > 1) + (data_ranks > 1);
  if (ep > 1) n += 1 + (data_ranks / ep > 1);
  if (pp > 1) n += (pp > 2 ? 2 : 1) + (tied_embeddings ? 1 : 0);
  return n;
}

// Device memory the framework uses beyond the tensors (GPU JSON framework_memory, cluster JSON
// nccl_buffer_bytes_per_communicator): CUDA context + cuBLAS workspace + NCCL buffers x communicators +
// allocator fragmentation x the tensor peak. Counted in every peak and in fits (simulator and planner).
inline double framework_bytes(const Cluster& cl, int communicators, double tensor_peak_bytes) {
  const FrameworkMemory& f = cl.gpu.framework;
  return f.cuda_context_bytes + f.cublas_workspace_bytes + communicators * cl.nccl_buffer_bytes_per_communicator +
         f.allocator_fragmentation * tensor_peak_bytes;
}

}  // namespace tp
