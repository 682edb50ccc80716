// chunk_offload: PatrickStar chunked offload inside the step program. It lists one rank's parameter tensors
// in module order, turns its compute runs into access moments (pre-forward / pre-backward of each run, then
// ADAM), records the non-model memory of every moment the way a warm-up step would (activations held,
// gathered parameters, buffers), runs the chunk manager (sim/chunks.hpp) and adds the chunk moves it decides
// as PCIe tasks that the accessing run waits for (PatrickStar moves chunks synchronously at access time).
// Internal to sim/program_build.cpp.
#pragma once
#include <string>
#include <vector>

#include "chunks.hpp"
#include "op_cost.hpp"
#include "program_builder.hpp"

namespace tp {

struct ChunkPlan {
  double gpu_adam_params = 0, cpu_adam_params = 0;  // Adam split between the GPU and the host CPU
  double adam_h2d_bytes = 0;                        // updated fp16 weights back to GPU-resident param chunks
  std::vector<int> adam_deps;                       // tasks the optimizers wait for (gradient copies to host)
  double gpu_chunk_bytes = 0;                       // peak GPU bytes of parameter chunks (local + gathered)
  double gpu_os_bytes = 0;                          // optimizer-state chunks placed on the GPU
  double comm_buffer_bytes = 0;                     // all-gather buffer
  double host_bytes = 0;                            // host memory of this rank's chunks and CPU optimizer state
  bool fits = true;
  std::string why;
};

// One rank's parameter tensors in module order (elements per GPU), appended to in.tensor_elements /
// in.tensor_part: part 0 the embedding (when held), 1 + i the i-th of `local_layers` (ascending), then the head.
void list_chunk_tensors(const Scenario& sc, const CostModel& cm, const std::vector<long long>& local_layers,
                        bool has_embed, bool has_head, ChunkSimInput& in);

ChunkPlan plan_chunk_offload(const Scenario& sc, Program& prog, detail::Builder& B, int rank,
                             const std::vector<detail::Run>& runs, const detail::Params& held);

}  // namespace tp
