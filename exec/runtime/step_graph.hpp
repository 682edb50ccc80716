// step_graph: a rank's steady training step captured once and replayed as a graph (CUDA graphs: `trainplan run
// --cuda-graphs auto|on|off`), so the forward and backward of every micro-batch cost one launch instead of
// thousands. What is captured is the step's device work between the batch upload and the optimizer (the runtime's
// work items, exec/runtime/runtime_step.cpp): the same ops the eager step queues, in the same order, on the same
// buffers. The upload, the gradient zeroing, the optimizer (its clip reads the norm back, its learning rate changes
// per step) and the loss read-back stay eager around it.
// Invariants:
//  - The capture is made at the run's second step (the first, eager, makes every lazy plan, cuBLASLt's, cuDNN's,
//    and the caches' blocks), launched at once, and replayed at every later step; the results are the eager
//    run's, bit for bit (the emu-device backend's tests).
//  - Inside the capture no read-back: each micro-batch's loss sum goes to its own double of device memory
//    (ops::cross_entropy_fwd_to), read back once after the launch and summed in the order the eager step adds them.
//  - A capture that fails (an op that refuses, exec/backends/backend.hpp) ran no device work: the caller clears the
//    step's host state and runs the step eagerly, and the run stays eager.
//  - Memory: the backend's graph pool (exec/backends/graph_pool.hpp); the graph is destroyed before the run's
//    buffers that outlive the loop.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "exec/backends/backend.hpp"
#include "exec/model/gpt.hpp"

namespace tp::exec {

template <class T>
struct StepGraph {
  const Backend* be = nullptr;  // null: every step eager
  void* graph = nullptr;
  int capture_step = 0;         // the step to capture at
  std::vector<int> loss_order;  // the micro-batches whose losses the step adds, in the eager step's order
  Buf<double> loss;             // per micro-batch: its loss sum (device memory)

  StepGraph() = default;
  StepGraph(const StepGraph&) = delete;
  StepGraph& operator=(const StepGraph&) = delete;
  ~StepGraph() { drop(); }
  void drop() {
    if (graph && be) be->graph_destroy(graph);
    graph = nullptr;
  }
  bool replays() const { return be && graph; }
  bool captures_at(int step) const { return be && !graph && step >= capture_step; }
  // The loss slot of micro-batch j while capturing (recording the order of the sum).
  double* slot(long long j) {
    loss_order.push_back((int)j);
    return loss.data() + j;
  }
  // Records region() as the graph and launches it once: true. False (why set) when the capture failed; nothing ran.
  bool capture(const std::function<void()>& region, std::string& why) {
    loss_order.clear();
    graph = capture_graph(*be, region, why);
    if (graph) be->graph_launch(graph);
    return graph != nullptr;
  }
  void launch() { be->graph_launch(graph); }
  // The step's loss sum: each micro-batch's as the eager head returns it (rounded to T), added in the eager order.
  double loss_sum() const {
    std::vector<double> host(loss.size());
    be->copy(host.data(), loss.data(), sizeof(double) * host.size(), CopyKind::device_to_host, Stream{});
    double s = 0;
    for (int j : loss_order) s += (double)T(host[(size_t)j]);
    return s;
  }
};

}  // namespace tp::exec
