// emu_streams: the emu-device backend's streams and events, with a GPU's ordering rules made visible. The default
// stream (a null handle: where every op runs, at once, on the emulator) stays synchronous. A stream made by
// stream_create is a QUEUE: a copy on it is deferred and runs as late as the rules allow — when the stream is
// synchronised (stream_sync, sync), or when another stream waits on an event recorded after it (stream_wait on
// the default stream runs it at once; on a created stream, when that stream's own queue reaches the wait). So code
// that reads a copy's destination, or writes its source, without waiting for it sees the wrong bytes, as it would
// on a GPU where the copy has not run yet; the tests' bitwise checks catch it. (The other hazard, a copy that runs
// before the compute it should wait for, is not shown: ops never lag here.)
// Invariants: a queue runs its items in order, each once; an event records (queue, items queued so far), or
// "done" on the default stream; destroying a stream runs what it still holds; one mutex (recursive: a wait item
// runs another queue) guards every queue, and the copies run under it.
#include "exec/backends/emu/emu_streams.hpp"

#include <chrono>
#include <deque>
#include <functional>
#include <mutex>
#include <set>

namespace tp::exec::emu_streams {
namespace {

struct Queue {
  std::deque<std::function<void()>> items;
  long long queued = 0, ran = 0;  // items ever queued / run
};
struct Ev {
  Queue* q = nullptr;  // null: recorded on the default stream (complete)
  long long upto = 0;
  double host_s = 0;   // the host's clock when recorded (elapsed_s: ops on the default stream run as they are issued)
};

std::recursive_mutex& mu() {
  static std::recursive_mutex m;
  return m;
}
std::set<Queue*>& queues() {
  static std::set<Queue*> s;
  return s;
}

void run_upto(Queue* q, long long upto) {
  while (q->ran < upto && !q->items.empty()) {
    std::function<void()> f = std::move(q->items.front());
    q->items.pop_front();
    ++q->ran;
    f();
  }
}

}  // namespace

Stream create() {
  std::lock_guard<std::recursive_mutex> l(mu());
  Queue* q = new Queue;
  queues().insert(q);
  return Stream{q};
}

void destroy(Stream s) {
  if (!s.handle) return;
  std::lock_guard<std::recursive_mutex> l(mu());
  Queue* q = static_cast<Queue*>(s.handle);
  run_upto(q, q->queued);
  queues().erase(q);
  delete q;
}

void sync(Stream s) {
  if (!s.handle) return;
  std::lock_guard<std::recursive_mutex> l(mu());
  Queue* q = static_cast<Queue*>(s.handle);
  run_upto(q, q->queued);
}

void sync_all() {
  std::lock_guard<std::recursive_mutex> l(mu());
  for (Queue* q : queues()) run_upto(q, q->queued);
}

void enqueue(Stream s, std::function<void()> f) {
  if (!s.handle) {
    f();
    return;
  }
  std::lock_guard<std::recursive_mutex> l(mu());
  Queue* q = static_cast<Queue*>(s.handle);
  q->items.push_back(std::move(f));
  ++q->queued;
}

Event event_create() { return Event{new Ev}; }
void event_destroy(Event e) { delete static_cast<Ev*>(e.handle); }

void record(Event e, Stream s) {
  std::lock_guard<std::recursive_mutex> l(mu());
  Ev* ev = static_cast<Ev*>(e.handle);
  Queue* q = static_cast<Queue*>(s.handle);
  *ev = Ev{q, q ? q->queued : 0,
            std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count()};
}

double elapsed_s(Event a, Event b) {
  std::lock_guard<std::recursive_mutex> l(mu());
  return static_cast<Ev*>(b.handle)->host_s - static_cast<Ev*>(a.handle)->host_s;
}

void wait(Stream s, Event e) {
  std::lock_guard<std::recursive_mutex> l(mu());
  const Ev ev = *static_cast<Ev*>(e.handle);
  if (!ev.q) return;  // recorded on the default stream: complete
  if (!s.handle) {    // the default stream waits: what the event covers runs now
    run_upto(ev.q, ev.upto);
    return;
  }
  enqueue(s, [ev] {
    if (queues().count(ev.q)) run_upto(ev.q, ev.upto);
  });
}

}  // namespace tp::exec::emu_streams
