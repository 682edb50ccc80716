// device_oom: what `run` says when a device backend runs out of memory (issue 11): the bytes the backend had
// allocated at its peak, the device the run is on with its memory (Backend::device, device_bytes), the scenario's
// GPU with its capacity (which may be another GPU: a cluster's plan tried on a workstation), and the simulator's
// predicted memory per GPU for the same plan in the executor's precision (fp32 weights, gradients and
// activations) with its breakdown, so the user sees which term to cut (recompute, a smaller micro-batch, ZeRO,
// offload, more ranks).
// Invariant: never throws itself (the simulation is best effort: its failure is named in the message).
#include "exec/runtime/device_oom.hpp"

#include <cstdio>
#include <exception>
#include <string>

#include "sim/simulate.hpp"

namespace tp::exec {

namespace {
std::string gib(double bytes) {  // GiB, or MiB below one GiB
  char b[32];
  if (bytes >= 1024.0 * 1024.0 * 1024.0) std::snprintf(b, sizeof b, "%.2f GiB", bytes / (1024.0 * 1024.0 * 1024.0));
  else std::snprintf(b, sizeof b, "%.2f MiB", bytes / (1024.0 * 1024.0));
  return b;
}
}  // namespace

std::string device_oom_message(const Scenario& sc, const Backend& b) {
  std::string m = std::string("backend ") + b.name + ": out of device memory";
  if (b.peak_device_bytes) m += " after allocating " + gib(b.peak_device_bytes()) + " (tensors, scratch, workspace)";
  if (b.device && *b.device) {
    m += std::string(" on ") + b.device;
    if (b.device_bytes > 0) m += ", which has " + gib(b.device_bytes);
  }
  m += "; the scenario's GPU " + sc.cluster.gpu.name + " has " + gib(sc.cluster.gpu.hbm_bytes) + ".";
  try {
    Scenario fp32 = sc;  // the executor trains in fp32
    fp32.training.precision = Precision::fp32;
    fp32.training.grad_precision = Precision::fp32;
    const Result res = simulate(fp32);
    const MemoryBreakdown& p = res.ranks.front().peak;
    double worst = p.total();
    const MemoryBreakdown* w = &p;
    for (const RankResult& r : res.ranks)
      if (r.peak.total() > worst) worst = r.peak.total(), w = &r.peak;
    m += " The simulator predicts " + gib(w->total()) + " for the fullest GPU of this plan in fp32: weights " +
         gib(w->weights) + ", gradients " + gib(w->gradients) + ", optimizer " + gib(w->optimizer) +
         ", activations " + gib(w->activations) + ", buffers " + gib(w->buffers) + ", framework " +
         gib(w->framework) + " (trainplan simulate). Cut the largest term (recompute, a smaller micro-batch, ZeRO, "
         "offload, more tp / pp ranks) or let trainplan plan pick a plan that fits.";
  } catch (const std::exception& e) {
    m += std::string(" (the simulator's prediction is unavailable: ") + e.what() + ")";
  }
  return m;
}

}  // namespace tp::exec
