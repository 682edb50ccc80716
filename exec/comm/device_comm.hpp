// device_comm: a communicator whose collectives run on the device (NCCL in libtrainplan_cuda.so,
// exec/kernels/cuda/nccl_comm.cpp), behind the Comm interface (comm.hpp). The library fills DeviceCommOps, a plain
// table compiled into both sides from this header (as exec::Backend is); the CPU program never links NCCL.
// device_comm() builds the world's device communicator over a host communicator (MPI under mpirun or srun): the ranks
// tell each other their (host, GPU) and a job whose ranks share a GPU the library cannot share is refused on every
// rank, before any joins; rank 0 makes the bootstrap id, the host communicator broadcasts it, every rank joins;
// split() splits both.
// Invariants: a collective whose buffers all lie in the backend's device memory runs on the device, stream-ordered
// with the backend's ops (its results are there for the next op, no host synchronisation); so does an exchange (the
// pipeline's grouped sends and receives) of device buffers, as one group, its sends complete in stream order (their
// buffers may be freed at once: the allocator is stream-ordered); any other call (host buffers: loss scalars,
// offloaded layers' host slices; blocking point to point; barrier) goes through the host communicator, staged
// (comm_staged.cpp), so every Comm call keeps its meaning. Device sums are NCCL's, not in rank order: results
// match the rank-ordered host sums to rounding, not bit for bit (`--comm mpi` keeps the exact sums).
// Non-blocking collectives run on the library's communication stream after the compute stream's work so far;
// wait() makes the compute stream wait for them (no host synchronisation).
#pragma once
#include <cstddef>
#include <memory>
#include <stdexcept>
#include <string>

#include "exec/comm/comm.hpp"

namespace tp::exec {

// One operation of DeviceCommOps::p2p_group: a send (1) of buf's n elements to `peer`, or a receive (0) into it.
struct DeviceP2p {
  int send = 0;
  void* buf = nullptr;
  long n = 0;
  int dtype = 0;
  int peer = 0;
};

// Every entry returns 0 on success, else non-zero with a message in why[why_size]; comm handles are opaque.
struct DeviceCommOps {
  const char* name = "";  // e.g. "NCCL 2.28.3" (the library loaded at run time)
  size_t id_bytes = 0;    // the bootstrap id's size (NCCL: sizeof(ncclUniqueId), 128)
  int (*unique_id)(void* id, char* why, size_t why_size) = nullptr;
  // The communicator of `nranks` ranks joining with the same id (collective over them); this rank is `rank`.
  int (*init)(void** comm, const void* id, int nranks, int rank, char* why, size_t why_size) = nullptr;
  // MPI_Comm_split semantics (collective over comm's ranks); *out null for color < 0.
  int (*split)(void* comm, int color, int key, void** out, char* why, size_t why_size) = nullptr;
  void (*destroy)(void* comm) = nullptr;
  // The collectives of Comm on device buffers, dtype a Dtype as int. async 0: on the compute stream; async 1: on
  // the communication stream, *request set to a handle for wait (async 0 leaves it -1).
  int (*all_reduce_sum)(void* comm, void* buf, long n, int dtype, int async, long* request, char* why,
                        size_t why_size) = nullptr;
  int (*reduce_scatter_sum)(void* comm, const void* in, void* out, long n, int dtype, int async, long* request,
                            char* why, size_t why_size) = nullptr;
  int (*all_gather)(void* comm, const void* in, void* out, long n, int dtype, int async, long* request, char* why,
                    size_t why_size) = nullptr;
  int (*broadcast)(void* comm, void* buf, long n, int dtype, int root, char* why, size_t why_size) = nullptr;
  int (*reduce_sum)(void* comm, const void* in, void* out, long n, int dtype, int root, char* why,
                    size_t why_size) = nullptr;
  int (*all_to_all)(void* comm, const void* in, void* out, long n, int dtype, char* why, size_t why_size) = nullptr;
  // Sends and receives of device buffers as one group (NCCL: ncclGroupStart, ncclSend / ncclRecv, ncclGroupEnd) on
  // the compute stream; a pair of ranks' operations match in issue order.
  int (*p2p_group)(void* comm, const DeviceP2p* ops, int count, char* why, size_t why_size) = nullptr;
  // The compute stream waits for the request's collective (then the request is forgotten).
  int (*wait)(void* comm, long request, char* why, size_t why_size) = nullptr;
  int (*local_device)() = nullptr;  // this process's GPU (the backend's device index)
  // 1 when ranks of one communicator may share a GPU (NCCL >= 2.30 with NCCL_MULTI_RANK_GPU_ENABLE=1); else
  // device_comm refuses such a job before any rank joins.
  int shares_gpus = 0;
  // 1 when the asynchronous collectives progress on their own stream while the caller computes (NCCL); 0 when they
  // run only when waited for (the emu-device stand-in). Comm::progresses_async.
  int progresses_async = 0;
};

// device_comm's refusal of a job whose ranks share a GPU the library cannot share (a usage error: exit 2).
struct DeviceCommRefused : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct Backend;
// The table `--comm nccl` uses on backend `be`: NCCL's (libtrainplan_cuda.so, loaded on first use) on cuda, the
// emulated one on emu-device (emu_nccl_ops); null with the reason in `why` on other backends or when NCCL is missing.
const DeviceCommOps* device_comm_ops(const Backend& be, std::string& why);
// emu-device's stand-in for NCCL's table, over MPI (exec/backends/emu/emu_nccl.cpp).
const DeviceCommOps& emu_nccl_ops();
// The world's device communicator over `host` (not owned; MPI under a launcher): every rank of host joins with
// the id rank 0 makes. Device buffers are those `be` calls device memory (Backend::is_device_ptr); everything else
// goes through `host`, staged for `be`. Throws std::runtime_error naming the library's message on failure.
std::unique_ptr<Comm> device_comm(Comm& host, const Backend& be, const DeviceCommOps& ops);

}  // namespace tp::exec
