// emu_nccl: the emu-device backend's stand-in for NCCL's table (exec/comm/device_comm.hpp DeviceCommOps), so that
// `--comm nccl` runs on the emulated device and CI exercises the device communicator between ranks: its bootstrap,
// splits, the routing of device buffers to the table, requests, and the pipeline's exchanges issued as one group.
// Every entry moves the device buffers through MPI (the job's world, duplicated at init so the stand-in's traffic
// never meets the host path's), staged through host memory as `--comm mpi` stages them.
// Invariants: sums are MPI's rank-ordered ones, so a run matches `--comm mpi` bit for bit (NCCL's would match to
// rounding); a non-blocking collective runs as late as NCCL may run it: it is queued, and runs (with every one queued
// before it on the communicator, in issue order) when it is waited for or when a later call on the communicator
// starts (NCCL runs a communicator's operations in issue order). So a caller that reads a non-blocking
// collective's output before its wait, or changes its input, gets other results than `--comm mpi`, as it could on a
// GPU; a group's point-to-point matches a
// pair's operations in issue order as NCCL does (one MPI tag: MPI's messages between a pair do not overtake), and
// under TP_COMM_RENDEZVOUS its sends complete only as their receives run (exec/comm/comm_mpi.cpp), as NCCL's.
// A group's sends leave host copies that are reaped at the next call and waited for when the communicator ends.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "exec/backends/backend.hpp"
#include "exec/comm/device_comm.hpp"

namespace tp::exec {
namespace {

struct EmuDc {
  std::unique_ptr<Comm> host;    // the stand-in's own MPI communicator
  std::unique_ptr<Comm> staged;  // host staged for the emulated device
  std::deque<std::pair<long, std::function<void()>>> queued;  // non-blocking collectives not run yet, in issue order
  long next_request = 0;
  // Runs the queued collectives up to request `upto` (all of them: -1), in issue order.
  void run_queued(long upto = -1) {
    while (!queued.empty() && (upto < 0 || queued.front().first <= upto)) {
      auto f = std::move(queued.front().second);
      queued.pop_front();
      f();
    }
  }
};

EmuDc* make(std::unique_ptr<Comm> host) {
  auto* d = new EmuDc;
  d->host = std::move(host);
  d->staged = staged_comm(*d->host, emu_device_backend());
  return d;
}

// Runs f, turning an exception into the table's error return.
template <class F>
int guarded(const char* what, char* why, size_t why_size, F&& f) {
  try {
    f();
    return 0;
  } catch (const std::exception& e) {
    std::snprintf(why, why_size, "%s: %s", what, e.what());
    return 1;
  }
}

// The communicator for a call that starts now: what was queued before it runs first (issue order).
Comm& staged(void* c) {
  EmuDc& d = *static_cast<EmuDc*>(c);
  d.run_queued();
  d.staged->reap_sends();  // (frees the host copies of sends that completed)
  return *d.staged;
}
// A collective: run now (async 0, *req -1) or queued as request *req (async 1).
int start(void* c, int async, long* req, const char* what, char* why, size_t why_size, std::function<void(Comm&)> f) {
  return guarded(what, why, why_size, [&] {
    Comm& s = staged(c);
    *req = -1;
    if (!async) return f(s);
    EmuDc& d = *static_cast<EmuDc*>(c);
    *req = d.next_request++;
    d.queued.emplace_back(*req, [&s, f = std::move(f)] { f(s); });
  });
}
Dtype dt(int d) { return static_cast<Dtype>(d); }

int unique_id(void* id, char*, size_t) {
  std::memset(id, 0, 16);
  std::memcpy(id, "emu-nccl", 8);
  return 0;
}
int init(void** comm, const void*, int nranks, int rank, char* why, size_t why_size) {
  return guarded("emu-nccl init", why, why_size, [&] {
    Comm& w = world();
    if (w.size() != nranks || w.rank() != rank)
      throw std::runtime_error("the stand-in joins the whole job only (" + std::to_string(nranks) + " ranks asked, the job has " +
                               std::to_string(w.size()) + ")");
    *comm = make(w.split(0, rank));
  });
}
int split(void* comm, int color, int key, void** out, char* why, size_t why_size) {
  return guarded("emu-nccl split", why, why_size, [&] {
    std::unique_ptr<Comm> s = static_cast<EmuDc*>(comm)->host->split(color, key);
    *out = s ? make(std::move(s)) : nullptr;
  });
}
void destroy(void* comm) {
  auto* d = static_cast<EmuDc*>(comm);
  if (!d) return;
  try {
    d->run_queued();  // (never waited for: a caller's bug, but the other ranks run it)
  } catch (const std::exception& e) {
    std::fprintf(stderr, "emu-nccl: a queued collective failed at the communicator's end: %s\n", e.what());
  }
  d->staged->wait_sends();
  delete d;
}

int all_reduce_sum(void* c, void* buf, long n, int d, int async, long* req, char* why, size_t why_size) {
  return start(c, async, req, "emu-nccl all-reduce", why, why_size, [=](Comm& s) { s.all_reduce_sum(buf, n, dt(d)); });
}
int reduce_scatter_sum(void* c, const void* in, void* out, long n, int d, int async, long* req, char* why,
                       size_t why_size) {
  return start(c, async, req, "emu-nccl reduce-scatter", why, why_size,
               [=](Comm& s) { s.reduce_scatter_sum(in, out, n, dt(d)); });
}
int all_gather(void* c, const void* in, void* out, long n, int d, int async, long* req, char* why, size_t why_size) {
  return start(c, async, req, "emu-nccl all-gather", why, why_size, [=](Comm& s) { s.all_gather(in, out, n, dt(d)); });
}
int broadcast(void* c, void* buf, long n, int d, int root, char* why, size_t why_size) {
  return guarded("emu-nccl broadcast", why, why_size, [&] { staged(c).broadcast(buf, n, dt(d), root); });
}
int reduce_sum(void* c, const void* in, void* out, long n, int d, int root, char* why, size_t why_size) {
  return guarded("emu-nccl reduce", why, why_size, [&] { staged(c).reduce_sum(in, out, n, dt(d), root); });
}
int all_to_all(void* c, const void* in, void* out, long n, int d, char* why, size_t why_size) {
  return guarded("emu-nccl all-to-all", why, why_size, [&] { staged(c).all_to_all(in, out, n, dt(d)); });
}
int p2p_group(void* c, const DeviceP2p* ops, int count, char* why, size_t why_size) {
  return guarded("emu-nccl p2p group", why, why_size, [&] {
    std::vector<P2pOp> g;
    for (int i = 0; i < count; ++i)
      g.push_back({ops[i].send != 0, ops[i].buf, ops[i].n, dt(ops[i].dtype), ops[i].peer, 0});  // (one tag: issue order)
    staged(c).exchange(g);
  });
}
int wait(void* c, long req, char* why, size_t why_size) {
  return guarded("emu-nccl wait", why, why_size, [&] { static_cast<EmuDc*>(c)->run_queued(req); });
}

}  // namespace

const DeviceCommOps& emu_nccl_ops() {
  static const DeviceCommOps ops = [] {
    DeviceCommOps o;
    o.name = "emu-nccl (NCCL's table emulated over MPI)";
    o.id_bytes = 16;
    o.unique_id = &unique_id;
    o.init = &init;
    o.split = &split;
    o.destroy = &destroy;
    o.all_reduce_sum = &all_reduce_sum;
    o.reduce_scatter_sum = &reduce_scatter_sum;
    o.all_gather = &all_gather;
    o.broadcast = &broadcast;
    o.reduce_sum = &reduce_sum;
    o.all_to_all = &all_to_all;
    o.p2p_group = &p2p_group;
    o.wait = &wait;
    o.local_device = [] { return 0; };
    // (every rank's emulated device is its own memory; TP_EMU_NCCL_ONE_GPU=1 makes the stand-in refuse ranks sharing
    // device 0 as NCCL before 2.30 refuses ranks sharing a GPU: the refusal's test)
    const char* one = std::getenv("TP_EMU_NCCL_ONE_GPU");
    o.shares_gpus = one && std::string(one) == "1" ? 0 : 1;
    return o;
  }();
  return ops;
}

}  // namespace tp::exec
