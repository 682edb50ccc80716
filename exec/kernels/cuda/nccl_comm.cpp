// nccl_comm: the device communicator's table (exec/comm/device_comm.hpp DeviceCommOps) on NCCL, for
// `trainplan run --backend cuda --comm nccl`; the C entry tp_cuda_nccl_ops (cuda_backend.h). NCCL is dlopened on
// first use (TRAINPLAN_NCCL_LIB, else libnccl.so.2 on the loader's path), so the CUDA backend loads and runs without
// it; nccl.h gives the types and prototypes only.
// Invariants: every call makes the backend's device current (enter()); blocking collectives are enqueued on the
// backend's compute stream (g.stream: stream-ordered with the ops, no host synchronisation); asynchronous ones on
// the communicator's own stream after an event on the compute stream, and wait() makes the compute stream wait for
// the event recorded after them; a request is one event, recycled once waited for.
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "exec/comm/device_comm.hpp"
#include "exec/kernels/cuda/backend_cuda_parts.hpp"
#include "exec/kernels/cuda/cuda_backend.h"
#if __has_include(<nccl.h>)
#include <nccl.h>
#define TP_HAVE_NCCL_H 1
#endif

#ifdef TP_HAVE_NCCL_H
namespace tp::cuda {
namespace {

// NCCL's entry points, from the library loaded at run time.
struct Nccl {
  void* handle = nullptr;
  std::string why;  // when handle is null
  decltype(&ncclGetVersion) get_version = nullptr;
  decltype(&ncclGetUniqueId) get_unique_id = nullptr;
  decltype(&ncclCommInitRank) init_rank = nullptr;
  decltype(&ncclCommSplit) split = nullptr;
  decltype(&ncclCommDestroy) destroy = nullptr;
  decltype(&ncclCommCount) count = nullptr;
  decltype(&ncclGetErrorString) error_string = nullptr;
  decltype(&ncclAllReduce) all_reduce = nullptr;
  decltype(&ncclReduceScatter) reduce_scatter = nullptr;
  decltype(&ncclAllGather) all_gather = nullptr;
  decltype(&ncclBroadcast) broadcast = nullptr;
  decltype(&ncclReduce) reduce = nullptr;
  decltype(&ncclSend) send = nullptr;
  decltype(&ncclRecv) recv = nullptr;
  decltype(&ncclGroupStart) group_start = nullptr;
  decltype(&ncclGroupEnd) group_end = nullptr;
  std::string version;  // "NCCL 2.28.3"
  int code = 0;         // 22803
};

template <class F>
bool bind(void* h, const char* name, F& f, std::string& why) {
  f = reinterpret_cast<F>(dlsym(h, name));
  if (!f) why = std::string("the NCCL library has no symbol ") + name;
  return f != nullptr;
}

const Nccl& nccl() {
  static const Nccl n = [] {
    Nccl x;
    const char* env = std::getenv("TRAINPLAN_NCCL_LIB");
    const std::string lib = env && *env ? env : "libnccl.so.2";
    x.handle = dlopen(lib.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!x.handle) {
      const char* e = dlerror();
      x.why = "NCCL could not be loaded (" + lib + ": " + (e ? e : "?") + "; set TRAINPLAN_NCCL_LIB to its path)";
      return x;
    }
    const bool ok = bind(x.handle, "ncclGetVersion", x.get_version, x.why) &&
                    bind(x.handle, "ncclGetUniqueId", x.get_unique_id, x.why) &&
                    bind(x.handle, "ncclCommInitRank", x.init_rank, x.why) &&
                    bind(x.handle, "ncclCommSplit", x.split, x.why) &&
                    bind(x.handle, "ncclCommDestroy", x.destroy, x.why) &&
                    bind(x.handle, "ncclCommCount", x.count, x.why) &&
                    bind(x.handle, "ncclGetErrorString", x.error_string, x.why) &&
                    bind(x.handle, "ncclAllReduce", x.all_reduce, x.why) &&
                    bind(x.handle, "ncclReduceScatter", x.reduce_scatter, x.why) &&
                    bind(x.handle, "ncclAllGather", x.all_gather, x.why) &&
                    bind(x.handle, "ncclBroadcast", x.broadcast, x.why) && bind(x.handle, "ncclReduce", x.reduce, x.why) &&
                    bind(x.handle, "ncclSend", x.send, x.why) && bind(x.handle, "ncclRecv", x.recv, x.why) &&
                    bind(x.handle, "ncclGroupStart", x.group_start, x.why) &&
                    bind(x.handle, "ncclGroupEnd", x.group_end, x.why);
    if (!ok) {
      dlclose(x.handle);
      x.handle = nullptr;
      return x;
    }
    int v = 0;
    x.get_version(&v);  // (major * 10000 + minor * 100 + patch since 2.9)
    x.code = v;
    x.version = "NCCL " + std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." + std::to_string(v % 100);
    return x;
  }();
  return n;
}

// One communicator: NCCL's, its communication stream and the events of its requests (index = request id).
struct Dc {
  ncclComm_t c = nullptr;
  cudaStream_t stream = nullptr;
  std::vector<cudaEvent_t> events;
  std::vector<long> free_events;
  int size = 0;
};

// Writes "what: <NCCL's message>" into why; returns 1 unless r is ncclSuccess.
int fail(ncclResult_t r, const char* what, char* why, size_t why_size) {
  if (r == ncclSuccess) return 0;
  std::snprintf(why, why_size, "%s: %s", what, nccl().error_string(r));
  return 1;
}
// Runs f, turning a CUDA error (thrown by check()) into a message.
template <class F>
int guarded(const char* what, char* why, size_t why_size, F&& f) {
  try {
    enter();
    return f();
  } catch (const std::exception& e) {
    std::snprintf(why, why_size, "%s: %s", what, e.what());
    return 1;
  }
}

ncclDataType_t type_of(int dtype) {
  switch (static_cast<exec::Dtype>(dtype)) {
    case exec::Dtype::f32: return ncclFloat32;
    case exec::Dtype::f64: return ncclFloat64;
    case exec::Dtype::i32: return ncclInt32;
    default: return ncclUint8;
  }
}
size_t elem_bytes(int dtype) {
  switch (static_cast<exec::Dtype>(dtype)) {
    case exec::Dtype::f64: return 8;
    case exec::Dtype::f32:
    case exec::Dtype::i32: return 4;
    default: return 1;
  }
}

// The stream a collective runs on: the compute stream, or (async) the communicator's after the compute stream's
// work so far.
cudaStream_t stream_for(Dc& d, int async) {
  if (!async) return g.stream;
  if (!d.stream) check(cudaStreamCreateWithFlags(&d.stream, cudaStreamNonBlocking), "nccl stream");
  cudaEvent_t ready;
  check(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming), "nccl event");
  check(cudaEventRecord(ready, g.stream), "nccl event record");
  check(cudaStreamWaitEvent(d.stream, ready, 0), "nccl stream wait");
  check(cudaEventDestroy(ready), "nccl event destroy");  // (released once the wait is done)
  return d.stream;
}
// After an async collective: the request, an event recorded on the communicator's stream.
long request_after(Dc& d) {
  long id;
  if (!d.free_events.empty()) {
    id = d.free_events.back();
    d.free_events.pop_back();
  } else {
    cudaEvent_t e;
    check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "nccl request event");
    d.events.push_back(e);
    id = long(d.events.size()) - 1;
  }
  check(cudaEventRecord(d.events[size_t(id)], d.stream), "nccl request record");
  return id;
}

int unique_id(void* id, char* why, size_t why_size) {
  ncclUniqueId u;
  if (fail(nccl().get_unique_id(&u), "ncclGetUniqueId", why, why_size)) return 1;
  std::memcpy(id, &u, sizeof u);
  return 0;
}
int init(void** comm, const void* id, int nranks, int rank, char* why, size_t why_size) {
  return guarded("ncclCommInitRank", why, why_size, [&] {
    ncclUniqueId u;
    std::memcpy(&u, id, sizeof u);
    auto* d = new Dc;
    d->size = nranks;
    if (fail(nccl().init_rank(&d->c, nranks, u, rank), "ncclCommInitRank", why, why_size)) {
      delete d;
      return 1;
    }
    *comm = d;
    return 0;
  });
}
int split(void* comm, int color, int key, void** out, char* why, size_t why_size) {
  return guarded("ncclCommSplit", why, why_size, [&] {
    auto* d = static_cast<Dc*>(comm);
    ncclComm_t c = nullptr;
    if (fail(nccl().split(d->c, color < 0 ? NCCL_SPLIT_NOCOLOR : color, key, &c, nullptr), "ncclCommSplit", why,
             why_size))
      return 1;
    *out = nullptr;
    if (!c) return 0;
    auto* s = new Dc;
    s->c = c;
    int n = 0;
    nccl().count(c, &n);
    s->size = n;
    *out = s;
    return 0;
  });
}
void destroy(void* comm) {
  auto* d = static_cast<Dc*>(comm);
  if (!d) return;
  for (cudaEvent_t e : d->events) cudaEventDestroy(e);
  if (d->stream) cudaStreamDestroy(d->stream);
  if (d->c) nccl().destroy(d->c);
  delete d;
}

// One collective, f(d, stream) -> ncclResult_t, on the compute stream or (async) on the communicator's after the
// compute stream's work so far; *request (when given): -1, or the event wait() makes the compute stream wait for.
template <class F>
int collective(void* comm, int async, long* request, const char* what, char* why, size_t why_size, F&& f) {
  return guarded(what, why, why_size, [&] {
    auto& d = *static_cast<Dc*>(comm);
    if (request) *request = -1;
    if (fail(f(d, stream_for(d, async)), what, why, why_size)) return 1;
    if (async) *request = request_after(d);
    return 0;
  });
}

int all_reduce_sum(void* comm, void* buf, long n, int dtype, int async, long* request, char* why, size_t why_size) {
  return collective(comm, async, request, "ncclAllReduce", why, why_size, [&](Dc& d, cudaStream_t s) {
    return nccl().all_reduce(buf, buf, size_t(n), type_of(dtype), ncclSum, d.c, s);
  });
}
int reduce_scatter_sum(void* comm, const void* in, void* out, long n, int dtype, int async, long* request, char* why,
                       size_t why_size) {
  return collective(comm, async, request, "ncclReduceScatter", why, why_size, [&](Dc& d, cudaStream_t s) {
    return nccl().reduce_scatter(in, out, size_t(n), type_of(dtype), ncclSum, d.c, s);
  });
}
int all_gather(void* comm, const void* in, void* out, long n, int dtype, int async, long* request, char* why,
               size_t why_size) {
  return collective(comm, async, request, "ncclAllGather", why, why_size, [&](Dc& d, cudaStream_t s) {
    return nccl().all_gather(in, out, size_t(n), type_of(dtype), d.c, s);
  });
}
int broadcast(void* comm, void* buf, long n, int dtype, int root, char* why, size_t why_size) {
  return collective(comm, 0, nullptr, "ncclBroadcast", why, why_size, [&](Dc& d, cudaStream_t s) {
    return nccl().broadcast(buf, buf, size_t(n), type_of(dtype), root, d.c, s);
  });
}
int reduce_sum(void* comm, const void* in, void* out, long n, int dtype, int root, char* why, size_t why_size) {
  return collective(comm, 0, nullptr, "ncclReduce", why, why_size, [&](Dc& d, cudaStream_t s) {
    return nccl().reduce(in, out, size_t(n), type_of(dtype), ncclSum, root, d.c, s);
  });
}
// Block r of in to rank r, block s of out from rank s: one group of sends and receives.
int all_to_all(void* comm, const void* in, void* out, long n, int dtype, char* why, size_t why_size) {
  return guarded("nccl all-to-all", why, why_size, [&] {
    auto& d = *static_cast<Dc*>(comm);
    const size_t block = size_t(n) * elem_bytes(dtype);
    if (fail(nccl().group_start(), "ncclGroupStart", why, why_size)) return 1;
    for (int r = 0; r < d.size; ++r) {
      const char* src = static_cast<const char*>(in) + size_t(r) * block;
      char* dst = static_cast<char*>(out) + size_t(r) * block;
      if (fail(nccl().send(src, size_t(n), type_of(dtype), r, d.c, g.stream), "ncclSend", why, why_size) ||
          fail(nccl().recv(dst, size_t(n), type_of(dtype), r, d.c, g.stream), "ncclRecv", why, why_size)) {
        nccl().group_end();
        return 1;
      }
    }
    return fail(nccl().group_end(), "ncclGroupEnd", why, why_size);
  });
}
// The pipeline's exchange: its sends and receives in one group on the compute stream (Megatron-LM's
// batch_isend_irecv); NCCL pairs a pair of ranks' operations in issue order.
int p2p_group(void* comm, const exec::DeviceP2p* ops, int count, char* why, size_t why_size) {
  return guarded("nccl p2p group", why, why_size, [&] {
    auto& d = *static_cast<Dc*>(comm);
    if (fail(nccl().group_start(), "ncclGroupStart", why, why_size)) return 1;
    for (int i = 0; i < count; ++i) {
      const exec::DeviceP2p& o = ops[i];
      const ncclResult_t r = o.send ? nccl().send(o.buf, size_t(o.n), type_of(o.dtype), o.peer, d.c, g.stream)
                                    : nccl().recv(o.buf, size_t(o.n), type_of(o.dtype), o.peer, d.c, g.stream);
      if (fail(r, o.send ? "ncclSend" : "ncclRecv", why, why_size)) {
        nccl().group_end();
        return 1;
      }
    }
    return fail(nccl().group_end(), "ncclGroupEnd", why, why_size);
  });
}
int wait(void* comm, long request, char* why, size_t why_size) {
  return guarded("nccl wait", why, why_size, [&] {
    auto& d = *static_cast<Dc*>(comm);
    if (request < 0) return 0;
    check(cudaStreamWaitEvent(g.stream, d.events[size_t(request)], 0), "nccl wait");
    d.free_events.push_back(request);
    return 0;
  });
}

}  // namespace
}  // namespace tp::cuda

extern "C" const void* tp_cuda_nccl_ops(char* why, size_t why_size) {
  namespace c = tp::cuda;
  const c::Nccl& n = c::nccl();
  if (!n.handle) {
    if (why && why_size) std::snprintf(why, why_size, "%s", n.why.c_str());
    return nullptr;
  }
  static const tp::exec::DeviceCommOps ops = [&n] {
    tp::exec::DeviceCommOps o;
    o.name = n.version.c_str();
    o.id_bytes = sizeof(ncclUniqueId);
    o.unique_id = &c::unique_id;
    o.init = &c::init;
    o.split = &c::split;
    o.destroy = &c::destroy;
    o.all_reduce_sum = &c::all_reduce_sum;
    o.reduce_scatter_sum = &c::reduce_scatter_sum;
    o.all_gather = &c::all_gather;
    o.broadcast = &c::broadcast;
    o.reduce_sum = &c::reduce_sum;
    o.all_to_all = &c::all_to_all;
    o.p2p_group = &c::p2p_group;
    o.wait = &c::wait;
    o.local_device = [] { return c::g.device; };
    // Ranks sharing a GPU: NCCL 2.30 and later with NCCL_MULTI_RANK_GPU_ENABLE=1 (experimental); else refused.
    const char* multi = std::getenv("NCCL_MULTI_RANK_GPU_ENABLE");
    o.shares_gpus = n.code >= 23000 && multi && std::string(multi) == "1";
    o.progresses_async = 1;  // (its stream runs beside the compute stream)
    return o;
  }();
  return &ops;
}

extern "C" void tp_cuda_nccl_version(char* out, size_t out_size) {
  const tp::cuda::Nccl& n = tp::cuda::nccl();
  if (out && out_size) std::snprintf(out, out_size, "%s", n.handle ? (n.version + " (run time)").c_str() : n.why.c_str());
}
#else
extern "C" const void* tp_cuda_nccl_ops(char* why, size_t why_size) {
  if (why && why_size) std::snprintf(why, why_size, "this library was built without nccl.h");
  return nullptr;
}
extern "C" void tp_cuda_nccl_version(char* out, size_t out_size) {
  if (out && out_size) std::snprintf(out, out_size, "NCCL not found at build time");
}
#endif
