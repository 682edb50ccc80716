// program_build_ctx: internal to sim/program_build*.cpp — the shared context of one build_program call (the
// plan's constants, the compute pieces and runs of every simulated rank) and of one simulated rank (its
// groups, parameters, and what its optimizers wait for). Each concern of the step program (compute pieces,
// pipeline sends, parameter fetches, gradient reductions, tied / shared-layer reductions, optimizers, static
// memory) is one function over these contexts. Not part of the public interface.
#pragma once
#include <map>
#include <tuple>
#include <set>
#include <utility>
#include <vector>

#include "chunk_offload.hpp"
#include "program_builder.hpp"
#include "step_formulas.hpp"

namespace tp::detail {

struct BuildCtx {
  const Scenario& sc;
  const Plan& p;
  const Transformer& M;
  Program& prog;
  Builder& B;
  const CostModel& cm;
  StageLayout lay;
  long long L = 0, Lc = 0;   // layers, layers per model chunk (uneven stages: of the largest chunk)
  int V = 1, m = 1, nchunks = 1, R = 0, edp = 1;
  ElemBytes eb;
  double p2p_bytes = 0, bucket_params = 0;  // bucket_params 0: one gradient bucket per layer (the framework's)
  bool overlap_grad_reduce = true;           // the plan's, unless the framework reduces a pipeline's after its flush
  bool zero2 = false, zero3 = false, per_layer = false, shared = false;
  bool gather_under_fwd = false;  // overlap_param_gather: ZeRO-1/2 parameter all-gathers under the first forward
  OffloadKind okind = OffloadKind::none;
  std::vector<char> offloaded;  // granular: layer l's parameters live in host memory
  int gpus_sharing_host = 1;
  // pass 1 results
  std::vector<std::pair<int, int>> comp;  // (sim, local chunk, mb, pass) -> first / last compute task
  std::vector<std::vector<WorkItem>> orders;
  std::vector<std::vector<Run>> runs;
  // full mode: one collective instance per (group, tag); looked up by reference (no copy of the group per rank)
  std::map<std::tuple<int, std::vector<int>>, int, std::less<>> shared_colls;  // (tag, group): the tag compares first
  // Data-parallel groups by (tp rank, stage, residue mod ep; -1: the whole dp group), built once: in full mode
  // every member of a group shares it instead of building its own (which cost O(dp) per rank).
  using GroupKey = std::tuple<int, int, int>;  // (tp rank, stage, residue): names one of dp_groups
  std::map<GroupKey, std::vector<int>> dp_groups;
  const std::vector<int>& dp_group(int tp_rank, int stage, int residue);
  // Memoised by the group's key: full mode asks once per member, and a dp-sized group compared by value would
  // cost O(dp) per member.
  std::map<std::tuple<GroupKey, int, double>, int> dp_shape_memo;  // (dp group, kind, bytes) -> shape
  std::map<std::pair<GroupKey, int>, int> dp_coll_memo;            // (dp group, tag) -> collective

  BuildCtx(const Scenario& s, Program& pr, Builder& b);
  // The slot of (sim rank, global model chunk, mb, pass) in `comp` (and in any table laid out as it).
  size_t comp_index(int sim, int model_chunk, int mb, int pass) const {
    return (((size_t)sim * V + lay.local_chunk(model_chunk)) * m + mb) * 2 + pass;
  }
  std::pair<int, int>& comp_at(int sim, int model_chunk, int mb, int pass) { return comp[comp_index(sim, model_chunk, mb, pass)]; }
  Params layer_params(long long l) const;
  Params piece_params(long long lo, long long hi, bool embed, bool head) const;
  Params offloaded_layer(long long l) const;           // whole layer, or only its experts
  Params offloaded_params(long long lo, long long hi) const;
  double layer_fp8_weight_bytes(long long l) const {
    return M.is_moe_layer(l) ? cm.moe_fp8_weight_bytes : cm.layer_fp8_weight_bytes;
  }
  double shard(const Params& pr, int stage) const { return zero_shard(pr, p.zero, stage, p.data_ranks(), edp); }
  void edge(int a, int b) { if (a >= 0 && b >= 0) prog.in.edges.push_back({a, b}); }
  void hold(int r, int from, bool from_start, int to, double bytes, MemCat cat) {
    if (bytes > 0) prog.holds.push_back(MemHold{r, from, to, from_start, bytes, cat});
  }
  int group_coll(const std::vector<int>& group, int tag, Coll c, double bytes, int members, bool spans_dp);
};

struct RankCtx {
  int r = 0, s = 0, me = 0;
  RankCoord rc{};
  const std::vector<int>* dp_group = nullptr;   // BuildCtx::dp_groups: the dp group and
  const std::vector<int>* edp_group = nullptr;  // the expert-data-parallel group of this rank,
  BuildCtx::GroupKey dp_key{}, edp_key{};       // and their keys there
  int dp_members = 1, edp_members = 1;
  const std::vector<int>* lane = nullptr;  // compute lane order
  const std::vector<Run>* rs = nullptr;
  Params held, off, on_gpu;                // parameters held; in host memory (granular); on the GPU
  double fp8_weight_bytes = 0;             // fp8 training: Transformer Engine's fp8 copies of the GPU-resident linears
  std::set<long long> wgroups;             // weight groups held (once each under sharing)
  std::vector<int> opt_deps, host_deps;    // what the GPU / host optimizers wait for
  std::vector<int> off_runs;               // runs with offloaded (granular) parameters
  int tag = 0;
};

RankCtx make_rank_ctx(BuildCtx& x, int r);
// A dp collective of `pr` (dense over the dp group, experts over the expert-dp group); returns the last task.
int dp_collective(BuildCtx& x, RankCtx& rk, Coll c, TaskKind kind, const Params& pr, double elem_bytes, int after,
                  TaskInfo base, std::vector<int>* out);

void add_param_fetches(BuildCtx& x, RankCtx& rk);      // granular loads and ZeRO-3 gathers, once per run
void add_param_gathers_under_fwd(BuildCtx& x, RankCtx& rk);  // overlap_param_gather: ZeRO-1/2 gathers under the forward
void add_grad_reductions(BuildCtx& x, RankCtx& rk);    // buckets, dp reductions, gradient copies to the host
void add_tied_embedding_reduce(BuildCtx& x, RankCtx& rk);
void add_shared_layer_reduce(BuildCtx& x, RankCtx& rk);  // delink pseudo phase: shared weights across stages
void add_optimizers(BuildCtx& x, RankCtx& rk, const ChunkPlan& chunks);
RankStatic rank_static(BuildCtx& x, RankCtx& rk, const ChunkPlan& chunks);

}  // namespace tp::detail
