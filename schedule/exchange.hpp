// exchange: the pipeline's point-to-point traffic as grouped exchanges, shared by the executor (which issues them)
// and the tests (which prove them deadlock-free under NCCL's semantics).
// Megatron-LM issues its pipeline sends and receives in groups (p2p_communication.py over batch_isend_irecv =
// ncclGroupStart / ncclSend / ncclRecv / ncclGroupEnd). Why groups: NCCL's send completes only when its receive
// runs (a rendezvous, for messages beyond its buffers), and a rank's operations run in issue order on its stream,
// so one-by-one sends and receives deadlock even 1F1B (docs/cuda.md has the worked example).
// The groups here: exchange k of a stage (k = 0 .. items) runs before its work item k (exchange `items` after the
// last) and holds the send of item k-1's output when that output goes to another stage, then the receive of item
// k's input when it comes from another stage: 1F1B's send_forward_recv_backward and kin. Where two stages would
// still wait on each other (each sending while the other's receive is in a later group: the interleaved schedule's
// steady state, breadth-first layered accumulation over looping stages), plan_exchanges posts that receive in the
// receiver's current group instead, as Megatron's interleaved schedule receives the next backward's gradient with
// the forward's (send_forward_backward_recv_forward_backward). A receive may so come before its item: it names
// the item it feeds (pass, receiving model chunk, micro-batch).
// Invariant (checked by rendezvous_check): NCCL matches a pair's sends and receives in issue order (no tags), so for
// every ordered pair of stages the sender's sends and the receiver's receives name the same items in the same order.
#pragma once
#include <string>
#include <vector>

#include "schedule/pipeline.hpp"

namespace tp {

// One send or receive of an exchange. model_chunk is the RECEIVING global model chunk (its input: forward
// activations into chunk g from g - 1, backward gradients into g from g + 1), the same on both sides.
struct P2pStep {
  bool send = false;
  int peer = 0;  // the other pipeline stage
  Pass pass = Pass::fwd;
  int model_chunk = 0;
  int microbatch = 0;
  bool operator==(const P2pStep&) const = default;
};
using Exchange = std::vector<P2pStep>;  // issued as one group

// The per-item exchanges of stage `stage` running `order` (its schedule: plan_order): order.size() + 1 groups,
// group k before item k (see the file comment), before any receive is moved earlier.
std::vector<Exchange> item_exchanges(const StageLayout& lay, const std::vector<WorkItem>& order, int stage);

// Whether plan p's exchanges block compute, as the frameworks run them: GPipe and 1F1B under standard accumulation,
// whose groups (item_exchanges) are waited for before the next item runs — Megatron-LM's p2p_communication without
// overlap_p2p_comm (arguments.py turns it off unless the schedule is interleaved), DeepSpeed's pipeline engine and
// TorchTitan's schedules likewise. The interleaved and modular schedules post their receives ahead and wait for
// sends later (overlap_p2p_comm), and the research schedules keep that overlap. The simulator (its pipeline sends)
// and the planner's estimate (its exposed pipeline communication) both follow it.
bool exchanges_block_compute(const Plan& p);

// What every stage of plan p issues (index: stage): item_exchanges with the receives moved earlier where a
// rendezvous would deadlock. Throws std::logic_error if the schedule itself cannot finish (not for plan_order's).
std::vector<std::vector<Exchange>> plan_exchanges(const Plan& p, long long layers);

// Runs every stage's exchanges under rendezvous semantics: each stage is blocked in its current group until every
// operation of that group has met its counterpart in the peer's current group (or met it earlier); pairs match in
// issue order. Returns "" when every stage finishes, else what went wrong: a deadlock (each blocked stage and what
// it waits for) or a mismatched pair (a send matched against a receive of another item).
std::string rendezvous_check(const std::vector<std::vector<Exchange>>& by_stage);

// "send f C03.fwd.mb5 to s2" / "recv b C03.bwd.mb5 from s2": one step, for messages.
std::string describe(const P2pStep& s);

}  // namespace tp
