// fp8: `training.precision: "fp8"` in the executor — Transformer Engine's fp8 linear layers with delayed
// scaling, emulated in the working precision on every backend (exec/kernels/k_fp8.hpp casts each GEMM operand to
// the fp8 grid and back; the GEMM then runs in T). What is cast, as TE's te.Linear / LayerNormLinear under
// Megatron-LM's `--fp8-format hybrid`: in each layer the QKV, projection, fc1 and fc2 GEMMs (MoE: each expert's
// two GEMMs and the shared experts'), their inputs and weights in E4M3 in the forward and the output gradients
// in E5M2 in the backward (dgrad = fp8(dy) fp8(w)ᵀ, wgrad = fp8(x)ᵀ fp8(dy), x cast again with the forward's
// scale, which gives TE's saved fp8 copy bit for bit). The embedding, the router, the LM head and everything
// element-wise stay in T, as in TE.
// Recipe (Megatron-LM's defaults): amax history 1, "most_recent", margin 0: scale = fp8_max / amax of the last
// step that saw the tensor, 1 until then, unchanged after a step whose amax is 0 or not finite.
// Invariants, so that every plan reproduces the single-rank run (the float64 oracle tests):
//  - a slot is (weight group, linear, operand); its amax is the max over every cast of it in a step on every
//    rank of the phase (all micro-batches, tp / cp / dp shards, pipeline stages: a max over the world), and
//    scales change only between steps (TE updates after every forward; this emulation once per step, so that
//    the micro-batch count does not change the numerics);
//  - every rank holds every slot's scale (a replicated vector: checkpoints and the Pseudo-to-Real handover
//    carry it whole).
// The casts keep each slot's amax in the memory of the backend they run on (Fp8Slots: ops::fp8_quantize's amax,
// no read-back per cast, which on a GPU would stop the stream at every cast); end_step reads them back once.
// The casts and the fp8 GEMMs read each slot's scale (and its inverse, cuBLASLt's dequantising factor) from that
// memory too, not as kernel arguments, so a captured step (CUDA graphs, exec/runtime/step_graph.hpp) replayed at a
// later step reads that step's scales: load_scales uploads them before every step (and end_step and delink after
// changing them); the values are T(scale) and T(1 / scale), the ones the casts used as arguments before.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "exec/comm/comm.hpp"
#include "exec/model/gpt.hpp"
#include "exec/backends/ops.hpp"
#include "models/scenario.hpp"

namespace tp::exec {

enum class Fp8Operand : int { x = 0, w = 1, dy = 2 };
// The linear layers of a block: 0 QKV, 1 projection, 2 fc1, 3 fc2, 4 / 5 the shared experts' fc1 / fc2,
// 6 + 2e / 7 + 2e expert e's fc1 / fc2 (global expert index).
enum Fp8Linear : int { kFp8Qkv = 0, kFp8Proj = 1, kFp8Fc1 = 2, kFp8Fc2 = 3, kFp8ShFc1 = 4, kFp8ShFc2 = 5, kFp8Expert = 6 };

struct Backend;
// Per backend (and element size) that cast this step, an array of T (float or double) in that backend's memory.
// The amax slots: n per backend, zeroed at first use; drain reads each back once, takes the max into a host vector
// and zeroes them again. The scales: 2 n per backend, {scale, 1 / scale} per slot, uploaded by load when their
// version differs from the one that buffer holds. Freed with the last Fp8State copy.
class Fp8Slots {
 public:
  Fp8Slots() = default;
  Fp8Slots(const Fp8Slots&) = delete;
  Fp8Slots& operator=(const Fp8Slots&) = delete;
  ~Fp8Slots();
  // The current backend's n slots of T, allocated and zeroed at first use.
  template <class T>
  T* slots(size_t n) {
    return static_cast<T*>(slots_bytes(sizeof(T), n));
  }
  // amax[i] = max(amax[i], every backend's slot i); the slots zeroed.
  void drain(std::vector<double>& amax);
  // The current backend's buffer of T holding `values` (each rounded to T), whose version is `version`: made and
  // uploaded at first use, uploaded again when it holds another version.
  template <class T>
  T* load(const std::vector<double>& values, unsigned long long version) {
    return static_cast<T*>(load_bytes(sizeof(T), values, version));
  }
  // Every buffer of load (every backend and element size) brought to `values` of `version`.
  void load_all(const std::vector<double>& values, unsigned long long version);

 private:
  struct Slots {
    const Backend* be;
    size_t elem_bytes, n;
    void* p;
    unsigned long long version;  // (load's buffers: the version uploaded)
  };
  Slots& slots_of(size_t elem_bytes, size_t n);  // the current backend's, made (zeroed, version 0) at first use
  void* slots_bytes(size_t elem_bytes, size_t n);
  void* load_bytes(size_t elem_bytes, const std::vector<double>& values, unsigned long long version);
  static void upload(const Slots& s, const std::vector<double>& values);
  std::vector<Slots> bufs_;
};

struct Fp8State {
  long long groups = 0, linears = 0;  // weight groups (the model's layers) and linears per group
  std::vector<double> scale;          // per slot: the scale of this step's casts
  std::vector<double> amax;           // per slot: max |x| cast in this step (end_step: over the ranks)
  std::shared_ptr<Fp8Slots> dev = std::make_shared<Fp8Slots>();        // the casts' amax, where they ran
  std::shared_ptr<Fp8Slots> dev_scale = std::make_shared<Fp8Slots>();  // {scale, 1 / scale} per slot, where cast

  // Slots for `layers` weight groups of a model with `experts` experts (0: dense); scales 1.
  void init(long long layers, long long experts);
  bool on() const { return groups > 0; }
  int slot(int group, int linear, Fp8Operand op) const {
    return int((group * linears + linear) * 3 + (int)op);
  }
  // The fp8 format of a slot (exec/kernels/k_fp8.hpp Fp8Format): E5M2 for output gradients, else E4M3.
  static int format_of(long slot) { return slot % 3 == (int)Fp8Operand::dy ? 1 : 0; }
  // The state `sc` trains with: slots for its layers and experts when training.precision is fp8, else off.
  static Fp8State for_scenario(const Scenario& sc);
  // dst[n] = x cast to the slot's fp8 format with its scale (E5M2 for dy, else E4M3); `record` adds max |x| to
  // the slot's amax on the backend (the backward's second cast of a forward operand does not). Returns dst.
  template <class T>
  const T* cast(Buf<T>& dst, const T* x, long n, int slot, bool record = true) {
    if (dst.size() != (size_t)n) {  // a fresh buffer: resizing a used one would copy its elements on the host,
      Buf<T> fresh;                 // which a device backend's memory does not allow
      fresh.resize((size_t)n);
      dst.swap(fresh);
    }
    cast_to(dst.data(), x, n, slot, record);
    return dst.data();
  }
  // cast's work into dst[n], a buffer the caller sized (the rows of a larger cast: Gpt::f8q_at).
  template <class T>
  void cast_to(T* dst, const T* x, long n, int slot, bool record = true) {
    T* a = record ? dev->slots<T>(scale.size()) + slot : nullptr;
    ops::fp8_quantize(dst, x, n, scale_pair<T>(slot), format_of(slot), a);
  }
  // The slot's {scale, 1 / scale} in the current backend's memory (matmul_fp8's sa / sb; fp8_quantize reads the first).
  template <class T>
  const T* scale_pair(int slot) {
    return dev_scale->load<T>(pairs_, pairs_version_) + 2 * (size_t)slot;
  }
  // Before a step: this step's scales in the current backend's memory (a host upload when they changed: outside any
  // capture, so that a captured step reads them from there).
  template <class T>
  void load_scales() {
    if (!on()) return;
    refresh_pairs();
    dev_scale->load<T>(pairs_, pairs_version_);
  }
  // After a step: the casts' amax read back, reduced (max) over the phase's ranks, the new scales, the amax cleared.
  void end_step(Comm& world);
  // Pseudo-to-Real's delink: layer l takes the scales of the weight group it used (group_of[l]).
  void delink(const std::vector<long long>& group_of);

 private:
  std::vector<double> pairs_;                // {scale, 1 / scale} per slot, from scale at the last refresh
  unsigned long long pairs_version_ = 0;     // bumped when a refresh changes pairs_
  void refresh_pairs();                      // pairs_ from scale; every loaded buffer brought to them
};

// Operand `op` of linear `lin` of weight group wl cast into tmp by f, with the slot's scale and format for the GEMM
// (gemm8 / linear8, matmul_fp8), or x itself (no scale) when f is null (the models' one call site for the casts:
// Gpt::f8q, Gpt2d's SUMMA operands).
template <class T>
Q8<T> fp8_operand(Fp8State* f, Buf<T>& tmp, const T* x, long n, int wl, int lin, Fp8Operand op, bool record = true) {
  if (!f) return Q8<T>{x};
  const int slot = f->slot(wl, lin, op);
  return Q8<T>{f->cast(tmp, x, n, slot, record), f->scale_pair<T>(slot), Fp8State::format_of(slot)};
}

// fp8_operand's cast of n elements x, which are elements [off, off + n) of an operand of `total` elements, into the
// same place of tmp (sized `total`, fresh, at the first such call), for a GEMM of those rows: the operand cast block
// by block as its rows arrive (exec/model/sp_pieces.hpp), the same values and amax as one cast of it all.
template <class T>
Q8<T> fp8_operand_at(Fp8State* f, Buf<T>& tmp, long total, const T* x, long off, long n, int wl, int lin,
                     Fp8Operand op, bool record = true) {
  if (!f) return Q8<T>{x};
  if (tmp.size() != (size_t)total) {  // (fresh, as Fp8State::cast sizes it)
    Buf<T> fresh;
    fresh.resize((size_t)total);
    tmp.swap(fresh);
  }
  const int slot = f->slot(wl, lin, op);
  f->cast_to(tmp.data() + off, x, n, slot, record);
  return Q8<T>{tmp.data() + off, f->scale_pair<T>(slot), Fp8State::format_of(slot)};
}

}  // namespace tp::exec
