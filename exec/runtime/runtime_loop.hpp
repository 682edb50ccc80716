// runtime_loop: the state of RankRun's step loop (exec/runtime/runtime_rank.hpp), shared by the step loop
// (runtime_step.cpp) and the captured step (runtime_graph.cpp). Internal to exec/runtime/.
#pragma once
#include <deque>
#include <map>
#include <tuple>
#include <vector>

#include "exec/runtime/runtime_rank.hpp"
#include "exec/runtime/step_timer.hpp"
#include "schedule/exchange.hpp"

namespace tp::exec::detail {

// The state of the step loop (RankRun::run): the batch's buffers, the schedule's pieces and runs, the
// activations held between passes, and the throughput counters.
template <class T>
struct RankRun<T>::Loop {
  std::vector<uint16_t> tokens;  // the run's token stream (exec/io/data.hpp)
  long long N = 0;               // this rank's tokens of a micro-batch
  long long X = 0;               // elements of the residual stream between pieces
  T scale = T(0);                // every token weighs 1 / (global_batch * seq_len)
  int warmup = 0;                // learning-rate warm-up steps
  std::vector<WorkItem> order;   // the rank's schedule
  std::vector<Exchange> exchanges;  // its pipeline exchanges: k before order[k], the last after it
  Buf<T> outbox;                 // the last item's output for another stage, until the next exchange sends it
  std::map<std::tuple<int, int, int>, Buf<T>> received;  // (pass, model chunk, mb) -> an input received ahead
  std::vector<Piece> pieces;     // pieces in execution order
  std::vector<int> run_of_piece, run_layer;  // runs (the chunk store's moments): same layer and pass
  std::vector<size_t> last_bwd_piece;        // per unit: the piece of the step's last backward of the unit
  int cur_run = -1;              // the run whose chunks are resident and pinned
  std::vector<LayerActs<T>> acts;                // per (layer, micro-batch)
  std::vector<HeadActs<T>> head;                 // per micro-batch
  std::map<std::pair<int, int>, Buf<T>> local;   // (chunk boundary key, mb) -> activation / gradient
  // Token ids and targets per micro-batch: read on the host, used by the ops from backend memory (an upload
  // per step).
  std::vector<int32_t> host_in, host_tgt;  // whole sequences (cp: this rank's rows selected)
  std::vector<Buf<int32_t>> in, tgt;
  std::deque<Buf<T>> sendbufs;  // the buffers of outstanding pipeline sends, oldest first
  RunResult res;
  StepGraph<T> graph;  // the captured step (--cuda-graphs)
  StepTimer timer;     // the step's device time, where the backend has a device clock
  double tok_after_first = 0, time_after_first = 0;
  int last_logged = 0;  // the step (1-based) of the last iteration line: its interval starts after it
};

}  // namespace tp::exec::detail
