// graph_pool: the memory rule of captured work (a training step captured once and replayed as a CUDA graph,
// exec/runtime/step_graph.hpp), one policy for the backends that capture (cuda: backend_cuda.cpp; emu-device:
// exec/backends/emu/emu_graph.cpp). A graph replays with the addresses it was captured with, so every block its
// ops touch must stay the graph's for the graph's life, as PyTorch's private graph pools do:
//  1. a block allocated while capturing is the pool's;
//  2. a block freed while capturing (also one allocated before the capture) is the pool's, free;
//  3. a free pool block is reused only by an allocation while capturing (in the captured stream's order, as the
//     eager cache reuses blocks), never by eager work, which a replay would overwrite;
//  4. a pool block freed outside a capture stays in the pool (a later replay still writes it);
//  5. when no graph is left and no capture runs, release() hands the pool's free blocks back to the backend and
//     its live blocks become ordinary ones.
// Blocks the graph reads that were allocated before the capture and stay alive (parameters, gradients, the batch)
// are the caller's to keep alive while the graph exists. Not thread-safe: the backend's lock guards it.
#pragma once
#include <cstddef>
#include <map>
#include <unordered_set>
#include <utility>
#include <vector>

namespace tp::exec {

class GraphPool {
 public:
  bool capturing() const { return capturing_; }
  // A capture runs or a graph exists: buffers the backend keeps for itself (scratch, workspaces) that it would
  // replace must be retired (freed at release), not freed.
  bool busy() const { return capturing_ || graphs_ > 0; }
  void begin_capture() { capturing_ = true; }
  // The capture ended: made_graph when it gave a graph (destroyed later with graph_destroyed), false when it was
  // abandoned (its work never ran and nothing refers to its blocks).
  void end_capture(bool made_graph) {
    capturing_ = false;
    graphs_ += made_graph ? 1 : 0;
  }
  void graph_destroyed() {
    if (graphs_ > 0) --graphs_;
  }
  // An allocation while capturing: a free pool block of at least `bytes` and at most `max_bytes` (rule 3), with
  // its size in *got; null when there is none (the backend allocates one and adopts it).
  void* take(size_t bytes, size_t max_bytes, size_t* got) {
    if (!capturing_) return nullptr;
    auto it = free_.lower_bound(bytes);
    if (it == free_.end() || it->first > max_bytes) return nullptr;
    void* p = it->second;
    *got = it->first;
    free_.erase(it);
    return p;
  }
  void adopt(void* p) {  // rule 1 (while capturing)
    if (capturing_ && p) owned_.insert(p);
  }
  // A free of p (bytes long): true when the pool keeps it (rules 2 and 4); false: the backend frees it as usual.
  bool keep(void* p, size_t bytes) {
    if (!p) return false;
    if (!capturing_ && !owned_.count(p)) return false;
    owned_.insert(p);
    free_.emplace(bytes, p);
    return true;
  }
  // Rule 5: the free blocks (pointer, bytes) for the backend to free or cache; empty while busy.
  std::vector<std::pair<void*, size_t>> release() {
    std::vector<std::pair<void*, size_t>> out;
    if (busy()) return out;
    for (const auto& [bytes, p] : free_) out.emplace_back(p, bytes);
    free_.clear();
    owned_.clear();
    return out;
  }
  bool owns(const void* p) const { return owned_.count(const_cast<void*>(p)) > 0; }

 private:
  bool capturing_ = false;
  int graphs_ = 0;
  std::unordered_set<void*> owned_;         // every block of the pool, live or free
  std::multimap<size_t, void*> free_;       // the pool's free blocks by size
};

}  // namespace tp::exec
