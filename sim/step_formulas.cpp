// step_formulas: see step_formulas.hpp.
#include "step_formulas.hpp"

#include <algorithm>

#include "nccl_model.hpp"

namespace tp {

ElemBytes elem_bytes(const Training& t) {
  ElemBytes eb;
  eb.e = precision_bytes(t.precision);
  eb.g = precision_bytes(t.grad_precision);
  eb.master = eb.e < 4 ? 4 : 0;
  return eb;
}

double pipeline_send_bytes(const Scenario& sc, long long microbatch, int tp) {
  return precision_bytes(sc.training.precision) * (double)microbatch * (double)sc.training.seq_len / sc.plan.cp *
         (double)sc.model.hidden / tp;
}

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
  if (cl.nccl.step_collectives &&
      (c == Coll::all_reduce || c == Coll::reduce_scatter || c == Coll::all_gather || c == Coll::all_to_all))
    // As sim/collective.cpp times them, with the node's NICs shared by the groups running beside this one (the
    // simulator's flows share them).
    return nccl_collective(cl, c, g, g % k == 0 ? k : 1, S, true).time_s;
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
  if (cl.nccl.step_collectives && bytes > 0)  // as sim/collective.cpp times a pipeline send: NCCL's send / recv
    return nccl_collective(cl, Coll::p2p, 2, inter ? 1 : 2, bytes).time_s;
  if (!inter)
    return bytes / (cl.intra.bandwidth_bytes_per_s * cl.intra.efficiency.at(bytes)) + lat.intra_latency_s;
  double nic = cl.inter.nics_per_node * cl.inter.nic_bandwidth_bytes_per_s / cl.gpus_per_node;
  return bytes / (nic * cl.inter.efficiency.at(bytes)) + lat.inter_latency_s;
}

}  // namespace tp
