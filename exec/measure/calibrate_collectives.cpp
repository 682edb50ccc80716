// calibrate_collectives: the device calibrate's collectives between the job's ranks (`mpirun -np R trainplan
// calibrate --backend cuda [--comm nccl]`), on device buffers through the communicator `run` would use (NCCL's
// with --comm nccl, else MPI staged through pinned host memory), and what the profile takes from them.
// Measured per operation and size, as nccl-tests reports them: the time of one call (median over the ranks' slowest
// of repeated calls, each batch ended by a device sync and a barrier), the algorithm bandwidth (bytes / time) and
// the bus bandwidth (all-reduce x 2 (R-1) / R; all-gather, reduce-scatter and all-to-all x (R-1) / R; send / recv
// x 1, a one-way time between ranks 0 and 1 from a ping-pong of exchanges, the pipeline's calls). Sizes are nccl-tests' (all-gather: the gathered
// output; reduce-scatter: the input; all-to-all: one rank's whole buffer).
// Then the slowdown of a GEMM beside the largest all-reduce (gemm_slowdown_beside_allreduce, calibrate.hpp), where
// the communicator runs collectives beside compute (NCCL's non-blocking ones).
// Invariants: every rank runs the same calls in the same order (ranks other than 0 and 1 idle through the
// ping-pong at its barriers); buffers are the backend's device memory, freed before return.
#include <algorithm>
#include <chrono>
#include <stdexcept>
#include <string>
#include <vector>

#include "exec/backends/backend.hpp"
#include "exec/measure/calibrate.hpp"
#include "exec/measure/calibrate_util.hpp"
#include "exec/runtime/offload/host_adam.hpp"

namespace tp::exec {
namespace {

using namespace calib;

// Seconds per call of f on every rank, the slowest rank's (f is collective; `reps` calls, then a device sync).
template <class F>
double timed(const Backend& be, Comm& host, int reps, F&& f) {
  f();  // warm: the communicator's buffers, a library's plan
  be.sync();
  host.barrier();
  const auto t0 = Clock::now();
  for (int i = 0; i < reps; ++i) f();
  be.sync();
  double t = since(t0) / reps;
  std::vector<double> all((size_t)host.size());
  host.all_gather(&t, all.data(), 1, Dtype::f64);
  return *std::max_element(all.begin(), all.end());
}

}  // namespace

double gemm_slowdown_beside_allreduce(const Backend& be, Comm& c, Comm& host, float* buf, long n, double allreduce_s,
                                      long s, double min_s, std::string* about) {
  BackendScope scope(be);
  int overlaps = c.progresses_async();  // (every rank the same answer: all ranks run the same communicator)
  host.all_reduce_sum(&overlaps, 1, Dtype::i32);
  be.sync();
  if (overlaps != host.size()) return -1;
  Bf16GemmScope bf(be, true);
  const long M = 4 * s, big = M * s;
  DevBuf a32(be, 4 * big, "GEMM operand"), a16(be, 2 * big, "GEMM operand"), cbuf(be, 4 * big, "GEMM output");
  fill_random(be, a32.f(), big, 3);
  ops::pack_bf16(a16.h(), a32.f(), big);
  auto gemm = [&] { ops::matmul16<float>(cbuf.f(), nullptr, a16.h(), nullptr, a16.h(), M, s, s, false, false, 1.f, 0.f); };
  auto compute_sync = [&] { be.stream_sync ? be.stream_sync(Stream{}) : be.sync(); };  // (not the comm stream)
  const double alone = per_call(gemm, min_s, compute_sync);
  const int k = (int)std::clamp(min_s / alone, 4.0, 4000.0);
  const int ars = (int)std::clamp(std::ceil(1.5 * k * alone / std::max(allreduce_s, 1e-7)), 2.0, 500.0);
  host.barrier();
  std::vector<CommRequest> reqs;
  for (int i = 0; i < ars; ++i) reqs.push_back(c.iall_reduce_sum(buf, n, Dtype::f32));
  const auto t0 = Clock::now();
  for (int i = 0; i < k; ++i) gemm();
  compute_sync();
  const double beside = since(t0) / k;
  for (const CommRequest& r : reqs) c.wait(r);
  be.sync();
  double slow = beside / alone - 1;
  std::vector<double> all((size_t)host.size());
  host.all_gather(&slow, all.data(), 1, Dtype::f64);
  slow = std::clamp(*std::max_element(all.begin(), all.end()), 0.0, 1.0);
  if (about)
    *about = "compute_slowdown_under_comm measured: a bf16 GEMM (" + std::to_string(M) + " x " + std::to_string(s) + " x " +
             std::to_string(s) + ") took " + fmt("%.3g s", alone) + " alone and " + fmt("%.3g s", beside) + " beside " +
             std::to_string(ars) + " non-blocking all-reduces of " + fmt("%.3g", 4.0 * (double)n) +
             " B (the slowest rank's ratio, clamped to [0, 1]).";
  return slow;
}

CollectiveMeasurements measure_collectives(const Backend& be, Comm& c, Comm& host, const CalibrateOptions& o) {
  CollectiveMeasurements m;
  const int R = c.size();
  m.ranks = R;
  m.one_node = local_ranks(R) >= R;
  if (R < 2) return m;
  BackendScope scope(be);
  std::vector<long> sizes;
  for (long s = o.quick ? (1L << 12) : (1L << 20); s <= (o.quick ? (1L << 16) : (1L << 30)); s *= (o.quick ? 16 : 4))
    sizes.push_back(s - s % (4L * R));  // whole f32 blocks per rank
  const double budget = o.quick ? 4e6 : 2e9;  // bytes moved per point, about
  for (long S : sizes) {
    const long n = S / 4;
    DevBuf a(be, (size_t)S, "the collectives"), b(be, (size_t)S, "the collectives");
    ops::fill<float>(a.f(), 1.f, n);
    const int reps = (int)std::clamp(budget / (double)S, 3.0, 50.0);
    float* in = a.f();
    float* out = b.f();
    const double f1 = (double)(R - 1) / R;
    auto add = [&](const char* op, double t, double factor) {
      m.points.push_back({op, (double)S, t, (double)S / t, (double)S / t * factor});
    };
    const double all_reduce_s = timed(be, host, reps, [&] { c.all_reduce_sum(in, n, Dtype::f32); });
    add("all_reduce", all_reduce_s, 2 * f1);
    ops::fill<float>(in, 1.f, n);  // (the sums grew)
    add("all_gather", timed(be, host, reps, [&] { c.all_gather(in, out, n / R, Dtype::f32); }), f1);
    add("reduce_scatter", timed(be, host, reps, [&] { c.reduce_scatter_sum(in, out, n / R, Dtype::f32); }), f1);
    add("all_to_all", timed(be, host, reps, [&] { c.all_to_all(in, out, n / R, Dtype::f32); }), f1);
    const int me = c.rank();
    // The ping-pong as the pipeline's exchanges (ncclSend / ncclRecv under --comm nccl, as `run` sends).
    const P2pOp to1{true, in, n, Dtype::f32, 1, 11}, from1{false, out, n, Dtype::f32, 1, 12};
    const P2pOp from0{false, out, n, Dtype::f32, 0, 11}, to0{true, in, n, Dtype::f32, 0, 12};
    const double rtt = timed(be, host, reps, [&] {
      if (me == 0) c.exchange({to1}), c.exchange({from1});
      else if (me == 1) c.exchange({from0}), c.exchange({to0});
    });
    c.wait_sends();
    add("send_recv", rtt / 2, 1.0);
    if (S == sizes.back())  // compute beside the largest all-reduce
      m.gemm_slowdown = gemm_slowdown_beside_allreduce(be, c, host, in, n, all_reduce_s,
                                                      o.quick ? 256 : 4096, o.quick ? 0.01 : 0.1, &m.slowdown_about);
  }
  return m;
}

json collectives_json(const CollectiveMeasurements& m) {
  json rows = json::array();
  for (const CollectivePoint& p : m.points)
    rows.push_back({{"op", p.op}, {"bytes", p.bytes}, {"time_s", p.sec}, {"algbw_bytes_per_s", p.algbw}, {"busbw_bytes_per_s", p.busbw}});
  return rows;
}

}  // namespace tp::exec
