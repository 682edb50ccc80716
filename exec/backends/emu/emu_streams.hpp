// emu_streams: the emu-device backend's created streams as deferred queues (emu_streams.cpp has the rules). Internal
// to exec/backends/emu/.
#pragma once
#include <functional>

#include "exec/backends/backend.hpp"

namespace tp::exec::emu_streams {

Stream create();
void destroy(Stream s);                           // runs what the stream still holds
void sync(Stream s);                              // runs everything queued on s (the default stream: nothing to run)
void sync_all();                                  // every stream
void enqueue(Stream s, std::function<void()> f);  // the default stream: f runs now
Event event_create();
void event_destroy(Event e);
void record(Event e, Stream s);
void wait(Stream s, Event e);
double elapsed_s(Event a, Event b);               // the host's clock between the two records

}  // namespace tp::exec::emu_streams
