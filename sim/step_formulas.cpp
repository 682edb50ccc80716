// step_formulas: see step_formulas.hpp.
#include "step_formulas.hpp"

#include <algorithm>

namespace tp {

ElemBytes elem_bytes(const Training& t) {
  ElemBytes eb;
  eb.e = precision_bytes(t.precision);
  eb.g = precision_bytes(t.grad_precision);
  eb.master = eb.e < 4 ? 4 : 0;
  return eb;
}

double zero_shard(const Params& pr, int zero, int stage, int dp, int edp) {
  return zero >= stage && dp > 1 ? pr.dense / dp + pr.expert / std::max(1, edp) : pr.total();
}

double pipeline_send_bytes(const Scenario& sc, long long microbatch, int tp) {
  return precision_bytes(sc.training.precision) * (double)microbatch * (double)sc.training.seq_len / sc.plan.cp *
         (double)sc.model.hidden / tp;
}

double grad_bucket_params(int dp) { return std::max(40e6, 1e6 * dp); }

OptimizerSplit optimizer_split(const Params& held, const Params& off, OffloadKind kind, int zero, int dp, int edp) {
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

StateBytes state_bytes(const Params& held, const Params& off, OffloadKind kind, int zero, int dp, int edp,
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

double gpu_adam_s(double params, const Gpu& gpu, const ElemBytes& eb) {
  double traffic = params * (2 * eb.optimizer() + eb.g + eb.e);
  if (traffic <= 0) return 0;
  return traffic / (gpu.hbm_bandwidth_bytes_per_s * gpu.memory_efficiency.at(traffic)) + gpu.kernel_overhead_s;
}

double host_adam_s(double params, const Host& host, int gpus_sharing_host, const ElemBytes& eb) {
  if (host.memory_bandwidth_bytes_per_s <= 0 || params <= 0) return 0;
  return params * (28 + eb.e) / (host.memory_bandwidth_bytes_per_s / std::max(1, gpus_sharing_host));
}

double pcie_copy_s(double bytes, const Host& host) { return bytes / host.pcie_bandwidth_bytes_per_s; }

namespace {
// Per-GPU inter-node bandwidth when all GPUs of a node send at once: the node's NICs shared by its GPUs,
// capped by the GPU's PCIe link.
double nic_share_bytes_per_s(const Cluster& cl) {
  double nic = cl.inter.nics_per_node * cl.inter.nic_bandwidth_bytes_per_s / cl.gpus_per_node;
  return cl.host.pcie_bandwidth_bytes_per_s > 0 ? std::min(nic, cl.host.pcie_bandwidth_bytes_per_s) : nic;
}
}  // namespace

double collective_closed_form_s(Coll c, int g, int k, double S, const Cluster& cl, const LinkTiers& lat) {
  if (g <= 1 || S <= 0) return 0;
  k = std::max(1, std::min(k, g));
  const int nodes = (g + k - 1) / k;
  double inter_bw = nic_share_bytes_per_s(cl);
  if (nodes > cl.inter.nodes_per_leaf) inter_bw /= cl.inter.oversubscription;
  RingPhases rp = collective_ring_phases(c, g, k);
  double t = 0;
  for (int i = 0; i < rp.count; ++i) {
    const RingPhase& ph = rp.phase[i];
    double bw = ph.inter ? inter_bw : cl.intra.bandwidth_bytes_per_s;
    const Curve& eff = ph.inter ? cl.inter.efficiency : cl.intra.efficiency;
    t += ph.payload_fraction * S / (bw * eff.at(ph.eff_fraction * S)) +
         ph.steps * (ph.inter ? lat.inter_latency_s : lat.intra_latency_s);
  }
  return t;
}

double p2p_closed_form_s(bool inter, double bytes, const Cluster& cl, const LinkTiers& lat) {
  if (!inter)
    return bytes / (cl.intra.bandwidth_bytes_per_s * cl.intra.efficiency.at(bytes)) + lat.intra_latency_s;
  double nic = cl.inter.nics_per_node * cl.inter.nic_bandwidth_bytes_per_s / cl.gpus_per_node;
  return bytes / (nic * cl.inter.efficiency.at(bytes)) + lat.inter_latency_s;
}

int rank_communicators(int tp, int cp, int data_ranks, int ep, int pp, bool tied_embeddings) {
  int n = (tp > 1) + (cp > 1) + (data_ranks > 1);
  if (ep > 1) n += 1 + (data_ranks / ep > 1);
  if (pp > 1) n += (pp > 2 ? 2 : 1) + (tied_embeddings ? 1 : 0);
  return n;
}

double framework_bytes(const Cluster& cl, int communicators, double tensor_peak_bytes) {
  const FrameworkMemory& f = cl.gpu.framework;
  return f.cuda_context_bytes + f.cublas_workspace_bytes + communicators * cl.nccl_buffer_bytes_per_communicator +
         f.allocator_fragmentation * tensor_peak_bytes;
}

}  // namespace tp
