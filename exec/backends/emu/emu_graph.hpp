// emu_graph: the emu-device backend's capture of a step as a graph (the Backend's capture_begin .. graph_destroy,
// exec/backends/backend.hpp), as CUDA's stream capture behaves: while capturing, ops and default-stream
// device-to-device copies are recorded, not run, so host code that depended on their results would see stale
// memory; a read-back, a host copy, a synchronisation, an event or another stream's work throws. A launch runs the
// recording in order, each op with the bf16-GEMM setting it was captured under. Internal to exec/backends/emu/.
#pragma once
#include <cstddef>
#include <functional>
#include <string>

namespace tp::exec::emu_graph {

bool capturing();
// While capturing: f runs at each launch of the graph being captured.
void record(std::function<void()> f);
// Throws the capture's refusal: "<what> inside a captured step (a graph cannot ...)".
[[noreturn]] void refuse(const std::string& what);

bool capture_begin(char* why, size_t why_size);
void* capture_end(bool keep, char* why, size_t why_size);
void graph_launch(void* graph);
void graph_destroy(void* graph);

// TP_EMU_GRAPH_REFUSE=<op name>: that op refuses to be captured (a stand-in for a library call that cannot be,
// so the tests see the runtime fall back to running the step eagerly).
bool refused_op(const char* name);

}  // namespace tp::exec::emu_graph

namespace tp::exec::emu_dev {
// The device memory's graph pool (exec/backends/graph_pool.hpp), in backend_emu_device.cpp.
void pool_begin_capture();
void pool_end_capture(bool made_graph);
void pool_graph_destroyed();
}  // namespace tp::exec::emu_dev
