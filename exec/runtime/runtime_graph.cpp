// runtime_graph: the step's work items run eagerly, captured as a graph or replayed (exec/runtime/step_graph.hpp has
// the design): which plans allow a capture, the capture at the run's second step, and the eager fallback when a
// capture fails. Invariant: a captured step and its replays give the eager step's results, bit for bit.
#include <cstdio>
#include <stdexcept>
#include <string>

#include "exec/runtime/runtime_loop.hpp"

namespace tp::exec {
namespace detail {

template <class T>
double RankRun<T>::step_items(Loop& lp, bool capturing) {
  double loss = 0;
  // The residual stream between pieces, one buffer: a layer's input is moved into its saved activations
  // (a.x_in, no copy) and its output is a fresh buffer; the last output moves into the head's saved input,
  // to the next stage's send or to `local`. The backward's gradient stays in x (layers run in place).
  Buf<T> x;
  size_t pc = 0;
  for (size_t k = 0; k < lp.order.size(); ++k) {
    const WorkItem& w = lp.order[k];
    const int g = lay.model_chunk(rc.stage, w.chunk);
    const long long j = w.microbatch;
    reap(lp);
    enter(lp, pc);
    item_input(lp, k, w, g, j, x);
    for (long long k = 0; k < lay.chunk_layers(rc.stage, w.chunk); ++k, ++pc) run_piece(lp, w, pc, j, x);
    const bool head = w.pass == Pass::fwd && g == nchunks - 1;
    loss += item_output(lp, w, g, j, x, capturing && head ? lp.graph.slot(j) : nullptr);
  }
  exchange_at(lp, lp.order.size());  // the last item's send
  if (!lp.outbox.empty() || !lp.received.empty()) throw std::logic_error("pipeline exchanges: an output never sent or an input never used");
  return loss;
}

// Why this rank's steps cannot be captured as a graph: the step's work must be device work only, the same every
// step (exec/runtime/step_graph.hpp). "" when they can.
template <class T>
std::string RankRun<T>::graph_blocker() const {
  if (const std::string no = cuda_graph_blocker(sc.model, p); !no.empty()) return no;  // (the simulator's rule)
  if (world.size() > 1) return "a job of several ranks (the step's collectives go through the host)";
  if (!o.trace.empty()) return "--trace (the traced step times its ops on the host)";
  if (prof::enabled()) return "per-op-class timing (validate's profiled run times each op on the host)";
  return "";
}

// The capture at the run's second step where the backend captures and --cuda-graphs says so: "on", or "auto" with
// plan.cuda_graphs (so the simulator costs what runs: models/hardware.hpp graph_kernel_overhead_s).
template <class T>
void RankRun<T>::prepare_graph(Loop& lp, int first) {
  const Backend& be = current_backend();
  const bool want = o.cuda_graphs == "on" || (o.cuda_graphs == "auto" && p.cuda_graphs);
  if (!want || !be.capture_begin) return;
  const std::string no = graph_blocker();
  if (!no.empty()) {
    if (o.cuda_graphs == "on") throw InputError({"--cuda-graphs on: this plan's step cannot be captured: " + no});
    if (world.rank() == 0) std::fprintf(stderr, "note: cuda graphs off: %s\n", no.c_str());
    return;
  }
  lp.graph.be = &be;
  lp.graph.capture_step = first + 1;
  lp.graph.loss.resize((size_t)m);
}

// After an abandoned capture: the step's host state back to its start (nothing of it ran on the device), so the step
// runs eagerly from there.
template <class T>
void RankRun<T>::clear_step_state(Loop& lp) {
  for (LayerActs<T>& a : lp.acts) a = LayerActs<T>{};
  for (HeadActs<T>& h : lp.head) h = HeadActs<T>{};
  lp.local.clear();
  lp.sendbufs.clear();
  lp.outbox = Buf<T>();
  lp.received.clear();
  lp.cur_run = -1;
  if (w16) w16->next_step();  // (the capture marked copies made that never ran)
}

template <class T>
double RankRun<T>::step_work(Loop& lp, int step) {
  f8.load_scales<T>();  // precision fp8: this step's scales where the casts and GEMMs read them (outside the capture)
  StepGraph<T>& sg = lp.graph;
  if (sg.replays()) {
    sg.launch();
    return sg.loss_sum();
  }
  if (sg.captures_at(step)) {
    std::string why;
    if (sg.capture([&] { step_items(lp, true); }, why)) {
      lp.res.graph_steps.push_back(step);
      return sg.loss_sum();
    }
    if (world.rank() == 0) std::fprintf(stderr, "note: cuda graphs off: the step's capture failed: %s\n", why.c_str());
    if (o.cuda_graphs == "on") throw std::runtime_error("--cuda-graphs on: the step's capture failed: " + why);
    sg.be = nullptr;
    clear_step_state(lp);
  }
  return step_items(lp, false);
}

#define TP_RUNTIME_GRAPH_INSTANTIATE(T)                                   \
  template double RankRun<T>::step_items(Loop&, bool);                    \
  template double RankRun<T>::step_work(Loop&, int);                      \
  template void RankRun<T>::clear_step_state(Loop&);                      \
  template std::string RankRun<T>::graph_blocker() const;                 \
  template void RankRun<T>::prepare_graph(Loop&, int);
TP_RUNTIME_GRAPH_INSTANTIATE(float)
TP_RUNTIME_GRAPH_INSTANTIATE(double)
#undef TP_RUNTIME_GRAPH_INSTANTIATE

}  // namespace detail
}  // namespace tp::exec
