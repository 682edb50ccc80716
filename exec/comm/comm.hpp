// exec/comm/: the communicators: this interface, MPI (comm_mpi.cpp), one rank (comm_local.cpp), staging through
// pinned host memory for device buffers (comm_staged.cpp), the device communicator (NCCL's table, device_comm.hpp)
// and prof's timed wrapper (comm_classed.hpp).
// comm: the communicator interface the executor's parallel runtime is written against (MPI in
// exec/comm/comm_mpi.cpp; a one-rank communicator for runs without MPI; for GPU tensors, NCCL's behind
// device_comm.hpp). No MPI type appears outside the implementation. The host communicators' collectives are
// deterministic: a sum over ranks adds in rank order, so results do not depend on message arrival (the float64
// oracle tests need bit-reproducible reductions); the device communicator's sums are NCCL's. Collectives are
// blocking, except the non-blocking ones (iall_reduce_sum, ireduce_scatter_sum: started, then waited), which a
// communicator without asynchronous progress completes when they start.
// Buffers hold `n` elements of float or double (Dtype names which). The host communicators take HOST memory: on
// the CPU backend (exec/backends/backend.hpp, host_accessible) tensors are passed as they are; a device backend
// stages them through pinned host buffers (staged_comm below), or gives its tensors to the device communicator.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace tp::exec {

enum class Dtype { f32 = 0, f64 = 1, i32 = 2, u8 = 3 };
// A non-blocking collective's handle (Comm::wait). id < 0: completed when it started.
struct CommRequest {
  long id = -1;
};
// One send or receive of an exchange (Comm::exchange): n elements of d to or from `peer`. A send's buf is read (it
// stays unchanged and alive until reap_sends / wait_sends counts the send); a receive's is written.
struct P2pOp {
  bool send = false;
  void* buf = nullptr;
  long n = 0;
  Dtype d = Dtype::f32;
  int peer = 0;
  int tag = 0;
};
size_t dtype_bytes(Dtype d);
// The Dtype of a floating-point element type T (float or double): the one mapping every caller uses.
template <class T>
constexpr Dtype dtype_of() { return sizeof(T) == 8 ? Dtype::f64 : Dtype::f32; }

struct Comm {
  virtual ~Comm() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // A sub-communicator of the ranks passing the same color, ordered by key (MPI_Comm_split semantics).
  virtual std::unique_ptr<Comm> split(int color, int key) = 0;

  // In place: buf[n] = sum over ranks (added in rank order 0, 1, ..., size-1).
  virtual void all_reduce_sum(void* buf, long n, Dtype d) = 0;
  // in[n * size] -> out[n]: rank r receives the rank-ordered sum of every rank's block r.
  virtual void reduce_scatter_sum(const void* in, void* out, long n, Dtype d) = 0;
  // in[n] -> out[n * size]: block r of out is rank r's in.
  virtual void all_gather(const void* in, void* out, long n, Dtype d) = 0;
  // buf[n] from `root` to every rank.
  virtual void broadcast(void* buf, long n, Dtype d, int root) = 0;
  // in[n] -> out[n] on `root` = rank-ordered sum (out may be null elsewhere).
  virtual void reduce_sum(const void* in, void* out, long n, Dtype d, int root) = 0;
  // in[n * size] -> out[n * size]: block r of in goes to rank r, block s of out came from rank s.
  virtual void all_to_all(const void* in, void* out, long n, Dtype d) = 0;
  // Non-blocking collectives, for overlap (the data-parallel gradient reduction started as the backward finishes a
  // unit's gradient, waited before the optimizer; ZeRO-3's parameter all-gather a layer ahead, waited before the
  // layer runs; ZeRO-2/3's reduce-scatter as a layer's backward ends): the call starts the collective and returns its handle; the caller
  // neither reads nor writes its buffers until wait() on the handle returns. Results as the blocking calls' (rank-
  // ordered sums), and the same rule: every rank of the group starts them in the same order. These defaults complete
  // the collective inside the call and wait returns at once (a communicator without asynchronous progress: MPI's
  // rank-ordered sums, one rank, staging; blocking is a valid implementation); a device communicator overrides them.
  virtual CommRequest iall_reduce_sum(void* buf, long n, Dtype d) {
    all_reduce_sum(buf, n, d);
    return {};
  }
  virtual CommRequest ireduce_scatter_sum(const void* in, void* out, long n, Dtype d) {
    reduce_scatter_sum(in, out, n, d);
    return {};
  }
  virtual CommRequest iall_gather(const void* in, void* out, long n, Dtype d) {
    all_gather(in, out, n, d);
    return {};
  }
  virtual void wait(CommRequest) {}
  // Whether a non-blocking collective makes progress while the caller computes (NCCL's, on its own stream), so
  // that it runs beside compute (calibrate's slowdown measurement needs it). False: it runs inside a call (these
  // defaults, MPI, staging) or only when waited for (emu-device's NCCL stand-in).
  virtual bool progresses_async() const { return false; }
  // Point to point (blocking; tags keep concurrent streams apart).
  virtual void send(const void* buf, long n, Dtype d, int dst, int tag) = 0;
  virtual void recv(void* buf, long n, Dtype d, int src, int tag) = 0;
  // Non-blocking send: the caller keeps `buf` unchanged and alive until wait_sends() returns (pipeline sends,
  // so that two stages sending to each other at once cannot deadlock).
  virtual void isend(const void* buf, long n, Dtype d, int dst, int tag) = 0;
  virtual void wait_sends() = 0;
  // Non-blocking: the number of the oldest outstanding isend() calls, in call order, that have completed
  // (their buffers may now be freed); they are forgotten, so the next call counts from the first still pending.
  virtual int reap_sends() = 0;
  // A group of sends and receives issued together (NCCL's ncclGroupStart .. ncclGroupEnd; Megatron-LM's
  // batch_isend_irecv): the pipeline's traffic, grouped by the shared schedule (schedule/exchange.hpp) so that the
  // ranks' groups pair up even when a send completes only once its receive runs (NCCL's rendezvous). Returns when
  // the receives' data are in place for what follows (host communicators: received; the device communicator: on
  // the device, stream-ordered); each send counts as one isend for reap_sends / wait_sends. Tags tell a host
  // communicator's messages apart; a device communicator matches a pair's operations in issue order instead (the
  // schedule keeps both orders the same). This default: the sends as isend, then the receives as recv (MPI's
  // buffered sends never wait for a receive).
  virtual void exchange(const std::vector<P2pOp>& ops) {
    for (const P2pOp& o : ops)
      if (o.send) isend(o.buf, o.n, o.d, o.peer, o.tag);
    for (const P2pOp& o : ops)
      if (!o.send) recv(o.buf, o.n, o.d, o.peer, o.tag);
  }
  virtual void barrier() = 0;
  // Ends the whole job with `code` after printing `message` (a failing rank must never leave others hanging).
  [[noreturn]] virtual void abort(int code, const std::string& message) = 0;
};

// The world communicator: MPI when the binary was built with MPI and the process was launched by mpirun /
// srun (or MPI is otherwise initialised), else a one-rank communicator. Initialises MPI on first use.
Comm& world();
// Finalises MPI if it was initialised (call once before exit).
void finalize_world();
// A one-rank communicator (tests, single-process runs).
std::unique_ptr<Comm> make_local_comm();
// `inner` (not owned) with host staging of the buffers that lie in `be`'s device memory (exec/comm/comm_staged.cpp):
// the runtime wraps the world in it when the backend is not host-accessible; splits are staged too.
struct Backend;
std::unique_ptr<Comm> staged_comm(Comm& inner, const Backend& be);

}  // namespace tp::exec
