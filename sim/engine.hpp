// engine: a deterministic discrete-event simulator of tasks on lanes with dependencies, where communication
// tasks are collectives made of phases of flows that share link bandwidth (FlowNet, max-min fair).
// It knows nothing about transformers: program.cpp turns (model, plan, schedule) into EngineInput.
// Semantics: each (rank, lane) runs its tasks one at a time in the listed order; a task starts when it is at
// the head of its lane, the lane is idle and all its prerequisites have ended. A compute task lasts
// duration_s. A comm task joins its collective; when all of the collective's member tasks have started, its
// phases run one after another (a phase ends when all its flows end) and then every member task ends.
// Interference: while a rank has a collective in transfer (its member task's transfer has begun and not ended) on
// an interfering lane,
// compute tasks on that rank's slowed lanes progress at 1 / (1 + compute_slowdown) of their speed (NCCL's
// kernels take SMs and HBM bandwidth from the GEMMs they overlap); the work left is carried across the changes.
// Determinism: events at equal times are processed in insertion order; flows complete in id order on ties.
#pragma once
#include <vector>

#include "flows.hpp"

namespace tp {

struct EngineTask {
  int rank = 0;
  int lane = 0;
  double duration_s = 0;  // compute tasks
  int coll = -1;          // >= 0: this task is a member of collective `coll`
};

// A collective's flows, phase by phase (only the flows sent by simulated ranks). Shared by every collective
// instance of the same group, size and kind (e.g. all micro-batches' sends between two stages).
using CollShape = std::vector<std::vector<FlowSpec>>;

struct EngineColl {
  int shape = 0;    // index into EngineInput::shapes
  int members = 1;  // member tasks that must start before the transfer begins
};

struct EngineInput {
  int ranks = 0, lanes = 0;
  std::vector<EngineTask> tasks;
  // Dependencies as (prerequisite, task) edges; finalize() turns them into the CSR arrays below.
  std::vector<std::pair<int, int>> edges;
  std::vector<int> dep_offset, dep_ids;            // prerequisites of t: dep_ids[dep_offset[t] .. dep_offset[t+1])
  std::vector<int> out_offset, out_ids;            // dependents of t, same layout
  std::vector<std::vector<int>> lane_order;        // rank * lanes + lane -> task ids in order
  std::vector<EngineColl> colls;
  std::vector<CollShape> shapes;
  std::vector<double> link_capacity_bytes_per_s;
  double compute_slowdown = 0;    // fraction: a compute task overlapping a collective on its rank takes (1 + this) x
  std::vector<char> lane_slowed;  // per lane index (0..lanes-1): its compute tasks are slowed (empty: none)
  std::vector<char> lane_interferes;  // per lane index: its collectives slow the rank's compute (empty: every lane's)
};

// Builds the CSR dependency arrays from `edges` (call once, after the last edge was added).
void engine_finalize(EngineInput& in);

struct EngineOutput {
  std::vector<double> start_s, end_s;  // per task
  std::vector<double> transfer_s;      // comm tasks: when the collective's transfer began (all members arrived)
  std::vector<double> link_bytes;      // bytes carried per link
  double makespan_s = 0;
  long long events = 0;
  bool deadlock = false;               // some task never became ready (a schedule bug); reported, not hung
};

EngineOutput engine_run(const EngineInput& in);

}  // namespace tp
