// emu_graph: the emu-device backend's step capture (emu_graph.hpp). One capture at a time per process (as the
// runtime captures one step on one thread); a graph is its recorded list of work. Invariants: a recording runs only
// through graph_launch; the pool's state follows every begin, end and destroy (emu_dev::pool_*); a graph is
// destroyed once.
#include "exec/backends/emu/emu_graph.hpp"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <vector>

namespace tp::exec::emu_graph {
namespace {

struct Graph {
  std::vector<std::function<void()>> work;
};

std::mutex g_m;
bool g_capturing = false;
std::unique_ptr<Graph> g_rec;  // the capture's recording

}  // namespace

bool capturing() {
  std::lock_guard<std::mutex> lk(g_m);
  return g_capturing;
}

void record(std::function<void()> f) {
  std::lock_guard<std::mutex> lk(g_m);
  if (!g_capturing || !g_rec) throw std::logic_error("emu-device: record outside a capture");
  g_rec->work.push_back(std::move(f));
}

void refuse(const std::string& what) {
  throw std::runtime_error("emu-device backend: " + what +
                           " inside a captured step (a graph replays device work only: no read-backs, host copies, "
                           "synchronisations or other streams)");
}

bool refused_op(const char* name) {
  static const std::string op = [] {
    const char* e = std::getenv("TP_EMU_GRAPH_REFUSE");
    return std::string(e ? e : "");
  }();
  return !op.empty() && op == name;
}

bool capture_begin(char* why, size_t why_size) {
  {
    std::lock_guard<std::mutex> lk(g_m);
    if (g_capturing) {
      std::snprintf(why, why_size, "a capture is already running");
      return false;
    }
    g_capturing = true;
    g_rec = std::make_unique<Graph>();
  }
  emu_dev::pool_begin_capture();
  return true;
}

void* capture_end(bool keep, char* why, size_t why_size) {
  std::unique_ptr<Graph> rec;
  {
    std::lock_guard<std::mutex> lk(g_m);
    if (!g_capturing) {
      std::snprintf(why, why_size, "no capture is running");
      return nullptr;
    }
    g_capturing = false;
    rec = std::move(g_rec);
  }
  emu_dev::pool_end_capture(keep);
  if (!keep) {
    std::snprintf(why, why_size, "the capture was abandoned");
    return nullptr;
  }
  return rec.release();
}

void graph_launch(void* graph) {
  if (capturing()) refuse("a graph launch");
  for (const auto& f : static_cast<Graph*>(graph)->work) f();
}

void graph_destroy(void* graph) {
  if (!graph) return;
  delete static_cast<Graph*>(graph);
  emu_dev::pool_graph_destroyed();
}

}  // namespace tp::exec::emu_graph
