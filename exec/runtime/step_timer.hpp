// step_timer: a training step's device time, where the backend has a device clock (Backend::timer_create /
// elapsed_s: CUDA events on cuda, the host's clock at each record on emu-device): what validate compares with the
// prediction on a device, as the GPU ran the step rather than as the host waited for it.
// Invariants: the two events are recorded on the compute stream (outside any capture: around the step's work,
// the graph's launch included); stop_s synchronises that stream before reading them.
#pragma once
#include "exec/backends/backend.hpp"

namespace tp::exec {

// A step's device time (validate on a device: CUDA events, as the GPU ran it), where the backend has a device clock:
// one timed event recorded on the compute stream as the step starts, one as it ends; stop_s synchronises the stream
// and returns the seconds between them.
struct StepTimer {
  const Backend* be = nullptr;  // null: no device clock
  Event a{}, b{};
  StepTimer() = default;
  StepTimer(const StepTimer&) = delete;
  StepTimer& operator=(const StepTimer&) = delete;
  ~StepTimer() {
    if (!be) return;
    be->event_destroy(a);
    be->event_destroy(b);
  }
  void start() {
    if (!be) {
      const Backend& cur = current_backend();
      if (!cur.timer_create || !cur.elapsed_s) return;
      be = &cur;
      a = be->timer_create();
      b = be->timer_create();
    }
    be->event_record(a, Stream{});
  }
  bool on() const { return be != nullptr; }
  double stop_s() {
    be->event_record(b, Stream{});
    be->stream_sync(Stream{});
    return be->elapsed_s(a, b);
  }
};

}  // namespace tp::exec
