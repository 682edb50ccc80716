// copy_streams: the copy streams and events of the offload stores (host_optimizer.hpp's pipeline, chunk_store's
// prefetch), created on first use on the backend current then and destroyed by it.
// Invariants: `queued` is recorded on the compute stream before copies that must follow the work queued there so far,
// `done` on a copy stream after copies the compute stream (or a later access) must wait for; destroying a stream lets
// what it still holds run or complete.
#pragma once
#include "exec/backends/backend.hpp"

namespace tp::exec {

struct CopyStreams {
  const Backend* be = nullptr;
  Stream d2h, h2d;
  Event queued, done;
  CopyStreams() = default;
  CopyStreams(const CopyStreams&) = delete;
  CopyStreams& operator=(const CopyStreams&) = delete;
  ~CopyStreams() {
    if (!be) return;
    be->stream_destroy(d2h);
    be->stream_destroy(h2d);
    be->event_destroy(queued);
    be->event_destroy(done);
  }
  void ensure() { ensure(current_backend()); }
  void ensure(const Backend& b) {
    if (be) return;
    be = &b;
    d2h = b.stream_create();
    h2d = b.stream_create();
    queued = b.event_create();
    done = b.event_create();
  }
};

}  // namespace tp::exec
