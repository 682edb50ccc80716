// gemm_cache: the CUDA backend's cache of cuBLASLt GEMM setups, as plain data — no CUDA header, so the CPU
// tests check the key and the eviction policy (tests/exec/test_cuda_gemm_plan.cpp). gemm_lt.cpp stores, per
// key, the matmul descriptor, the three matrix layouts and the algorithm the heuristic chose, so a repeated
// GEMM (every layer, every micro-batch, every step) skips the descriptor creation and the heuristic query.
// Invariants: the key holds everything the stored setup depends on — the cuBLASLt plan's shapes, leading
// dimensions, batch strides and transposes, the compute mode (GemmCompute), the epilogue and the alignment of each pointer
// (the heuristic was told them) — and nothing else: pointers, alpha and beta are passed per call. At most
// `capacity` entries; inserting beyond it destroys the least recently used one (its value's destructor runs
// exactly once, when evicted or when the cache is cleared or destroyed).
#pragma once
#include <cstddef>
#include <cstdint>
#include <list>
#include <memory>
#include <unordered_map>
#include <utility>

#include "exec/kernels/cuda/gemm_plan.hpp"

namespace tp::cuda {

// How a GEMM computes: fp32; TF32 tensor cores (TP_CUDA_TF32=1); or bf16 tensor cores on operands cast to bf16
// copies first (training.precision "bf16"). All accumulate in fp32 into fp32 C. (cuBLASLt's
// CUBLAS_COMPUTE_32F_FAST_16BF on the fp32 operands was tried on an H200: all 30 of the selftest's bf16 matmul and
// linear checks failed (it does not compute on bf16-rounded operands), and its GPT-2 losses equalled TF32's.)
enum GemmCompute : int { kComputeF32 = 0, kComputeTf32 = 1, kComputeBf16Cast = 2 };
// fp8 operands (matmul_fp8): kComputeFp8 + fa + 2 fb, fa and fb the two operands' formats (0 E4M3, 1 E5M2).
constexpr int kComputeFp8 = 3;

struct GemmKey {
  LtMatrix m1, m2, mc;
  long m = 0, n = 0, k = 0;
  int batch = 1;
  bool trans1 = false, trans2 = false;
  int compute = kComputeF32;  // GemmCompute
  uint32_t align1 = 0, align2 = 0, align_c = 0;  // bytes: 16, 8 or 4
  int epilogue = 0;                              // 0 none, 1 bias, 2 gelu with aux, 3 gelu with aux and bias

  bool operator==(const GemmKey& o) const {
    auto same = [](const LtMatrix& a, const LtMatrix& b) {
      return a.rows == b.rows && a.cols == b.cols && a.ld == b.ld && a.stride == b.stride;
    };
    return same(m1, o.m1) && same(m2, o.m2) && same(mc, o.mc) && m == o.m && n == o.n && k == o.k &&
           batch == o.batch && trans1 == o.trans1 && trans2 == o.trans2 && compute == o.compute && align1 == o.align1 &&
           align2 == o.align2 && align_c == o.align_c && epilogue == o.epilogue;
  }
};

// The key of plan p with its pointers' alignments (in bytes) and the compute mode.
inline GemmKey gemm_key(const LtPlan& p, uint32_t align1, uint32_t align2, uint32_t align_c, int compute,
                        int epilogue = 0) {
  GemmKey k;
  k.m1 = p.m1, k.m2 = p.m2, k.mc = p.mc;
  k.m = p.m, k.n = p.n, k.k = p.k;
  k.batch = p.batch;
  k.trans1 = p.trans1, k.trans2 = p.trans2, k.compute = compute;
  k.align1 = align1, k.align2 = align2, k.align_c = align_c;
  k.epilogue = epilogue;
  return k;
}

struct GemmKeyHash {
  size_t operator()(const GemmKey& k) const {
    uint64_t h = 1469598103934665603ull;  // FNV-1a over the fields
    auto mix = [&](uint64_t v) { h = (h ^ v) * 1099511628211ull; };
    for (const LtMatrix* x : {&k.m1, &k.m2, &k.mc}) {
      mix((uint64_t)x->rows), mix((uint64_t)x->cols), mix((uint64_t)x->ld), mix((uint64_t)x->stride);
    }
    mix((uint64_t)k.m), mix((uint64_t)k.n), mix((uint64_t)k.k), mix((uint64_t)k.batch);
    mix((uint64_t)k.trans1 | (uint64_t)k.trans2 << 1 | (uint64_t)k.compute << 2);
    mix(k.align1), mix(k.align2), mix(k.align_c), mix((uint64_t)k.epilogue);
    return (size_t)h;
  }
};

// Least-recently-used map from GemmKey to an owned V.
template <class V>
class GemmCache {
 public:
  explicit GemmCache(size_t capacity) : capacity_(capacity < 1 ? 1 : capacity) {}
  // The entry of key, marked most recently used; nullptr when absent.
  V* find(const GemmKey& key) {
    auto it = index_.find(key);
    if (it == index_.end()) return nullptr;
    order_.splice(order_.begin(), order_, it->second);
    return it->second->second.get();
  }
  // Stores value under key (absent), evicting the least recently used entry when full; returns the stored value.
  V* insert(const GemmKey& key, std::unique_ptr<V> value) {
    if (index_.size() >= capacity_) {
      index_.erase(order_.back().first);
      order_.pop_back();
    }
    order_.emplace_front(key, std::move(value));
    index_[key] = order_.begin();
    return order_.front().second.get();
  }
  void clear() {
    index_.clear();
    order_.clear();
  }
  size_t size() const { return index_.size(); }
  size_t capacity() const { return capacity_; }

 private:
  using Entry = std::pair<GemmKey, std::unique_ptr<V>>;
  size_t capacity_;
  std::list<Entry> order_;  // most recently used first
  std::unordered_map<GemmKey, typename std::list<Entry>::iterator, GemmKeyHash> index_;
};

}  // namespace tp::cuda
