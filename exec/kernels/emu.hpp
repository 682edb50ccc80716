// emu: the CPU emulator of a CUDA thread block, which runs the kernels of exec/kernels/ under g++ (CI has no
// GPU). One std::thread per CUDA thread of the block, taken from a pool kept across launches; a std::barrier
// per block for sync() (__syncthreads); a per-warp barrier-based exchange for shfl_xor (__shfl_xor_sync over
// the full warp); dynamic shared memory per block, filled with 0xff bytes (NaN as float) before each block so a
// read before the write shows. Blocks of a grid run one after the other.
// Launch rules (checked; a violation throws LaunchError naming the kernel): 1 <= grid; 32 <= block <= 1024
// and block % 32 == 0; shared memory <= 48 KiB. A shuffle that reads a lane which already returned from the
// kernel is an error too (on a GPU it is undefined). Launches from several host threads are serialised.
// Schedule: `free` lets the OS interleave the threads (what ThreadSanitizer watches); `warps_forward` and
// `warps_backward` run the warps of a block one at a time between syncs, in ascending / descending order, so a
// missing sync between a write by one warp and a read by another gives a wrong result deterministically.
// Engines: the above is the thread engine; the fiber engine (emu_fibers.cpp, set_engine) runs the same
// block as user-space contexts on the launching thread, with the same checks, about 50x faster.
#pragma once
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "exec/kernels/kcommon.hpp"

namespace tp::kernels::emu {

struct LaunchError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

enum class Schedule { free, warps_forward, warps_backward };

constexpr unsigned kMaxBlock = 1024;
constexpr unsigned kMaxSmem = 48 * 1024;

struct Block;     // per-launch state shared by the threads of the block (emu.cpp)
struct FiberRun;  // per-launch state of the fiber engine (emu_fibers.cpp)

// What a kernel body sees under the emulator: its thread and block indices, and the block's sync, shuffle
// and shared memory.
// A warp-matrix fragment under the emulator: the whole 16 x 16 tile in every lane (the GPU spreads it over the
// lanes; kernel code never looks inside a fragment), bf16 operands held exactly as float.
struct EmuFrag {
  float v[256];
};

struct EmuCtx {
  unsigned tid_ = 0, bid_ = 0, bdim_ = 0, gdim_ = 0;
  unsigned char* smem_ = nullptr;
  unsigned smem_bytes_ = 0;
  Block* blk_ = nullptr;
  FiberRun* fib_ = nullptr;  // set when the fiber engine runs the block

  unsigned tid() const { return tid_; }
  unsigned bid() const { return bid_; }
  unsigned bdim() const { return bdim_; }
  unsigned gdim() const { return gdim_; }
  template <class T>
  T* shared() const {
    return reinterpret_cast<T*>(smem_);
  }
  void sync();
  float shfl_xor(float v, int mask) { return exchange_bits(v, mask); }
  double shfl_xor(double v, int mask) { return exchange_bits(v, mask); }
  int shfl_xor(int v, int mask) { return exchange_bits(v, mask); }
  // __syncwarp(): the lanes of this warp meet (all of them; a lane that returned is an error).
  void syncwarp() { (void)exchange(0, 0); }

  // Warp matrix products (nvcuda::wmma on the GPU, cuda_launch.cuh): 16 x 16 x 16 tiles, bf16 operands, fp32
  // accumulation; every lane of the warp calls each of these. Products are summed in k order in float (tensor cores
  // may order and round the sum differently: tests compare within fp32 accumulation error). A store writes from
  // lane 0 only, so the kernel must syncwarp() before another lane reads what was stored, as on the GPU. Loads and
  // stores enforce the GPU's rules: the pointer 32-byte aligned (counted from the block's shared memory when it
  // points there), ldm a multiple of 8 elements (bf16) or 4 (float); a violation throws (the launch fails).
  using FragA = EmuFrag;     // matrix_a, row-major: (m, k) at p[m ld + k]
  using FragBRow = EmuFrag;  // matrix_b, row-major: (k, n) at p[k ld + n]
  using FragBCol = EmuFrag;  // matrix_b, column-major: (k, n) at p[n ld + k]
  using FragC = EmuFrag;     // accumulator, float
  void load_a(FragA& f, const bf16* p, unsigned ld) { load(f, p, ld, false); }
  void load_b_row(FragBRow& f, const bf16* p, unsigned ld) { load(f, p, ld, false); }
  void load_b_col(FragBCol& f, const bf16* p, unsigned ld) { load(f, p, ld, true); }
  void fill(FragC& f, float x) {
    for (float& e : f.v) e = x;
  }
  void mma(FragC& d, const FragA& a, const EmuFrag& b, const FragC& c) {
    EmuFrag r;
    for (int m = 0; m < 16; ++m)
      for (int n = 0; n < 16; ++n) {
        float s = c.v[m * 16 + n];
        for (int k = 0; k < 16; ++k) s += a.v[m * 16 + k] * b.v[k * 16 + n];
        r.v[m * 16 + n] = s;
      }
    d = r;
  }
  void store(float* p, const FragC& f, unsigned ld) {
    check_frag(p, ld, 4, "store_matrix_sync");
    if (tid_ % 32 != 0) return;
    for (int m = 0; m < 16; ++m)
      for (int n = 0; n < 16; ++n) p[size_t(m) * ld + n] = f.v[m * 16 + n];
  }

 private:
  void check_frag(const void* p, unsigned ld, unsigned elem_bytes, const char* what) const;
  void load(EmuFrag& f, const bf16* p, unsigned ld, bool col) {
    check_frag(p, ld, 2, "load_matrix_sync");
    for (int r = 0; r < 16; ++r)
      for (int c = 0; c < 16; ++c) f.v[r * 16 + c] = to_float(col ? p[size_t(c) * ld + r] : p[size_t(r) * ld + c]);
  }
  uint64_t exchange(uint64_t bits, int mask);
  template <class V>
  V exchange_bits(V v, int mask) {
    uint64_t b = 0;
    std::memcpy(&b, &v, sizeof(V));
    b = exchange(b, mask);
    V r;
    std::memcpy(&r, &b, sizeof(V));
    return r;
  }
};

using BodyFn = void (*)(const void* kernel, EmuCtx& ctx);

// Runs body(kernel, ctx) for every thread of every block; throws LaunchError on a bad launch or when a thread
// reported an error (the first one, with its block and thread).
void launch_raw(const char* name, BodyFn body, const void* kernel, Dim dim);

// The schedule of later launches (process-wide; tests set it around a launch). Default: free.
void set_schedule(Schedule s);
Schedule schedule();

// How a block is run. threads: one std::thread per CUDA thread (what ThreadSanitizer checks). fibers: all
// threads of the block as user-space contexts on the launching thread, switched at sync() and shuffles,
// in thread order (backward for warps_backward) — deterministic and far cheaper per sync, for training runs.
// Default: threads, or fibers when the environment sets TP_EMU_ENGINE=fibers. Under AddressSanitizer or
// ThreadSanitizer the fiber engine is not compiled and fibers means threads.
enum class Engine { threads, fibers };
void set_engine(Engine e);
Engine engine();
bool fibers_available();

namespace detail {
void run_fibers(const char* name, BodyFn body, const void* kernel, Dim dim, bool backward);
void fiber_sync(FiberRun& r, unsigned tid);
uint64_t fiber_exchange(FiberRun& r, unsigned tid, uint64_t bits, int mask);
}  // namespace detail

// Counters for tests and benchmarks: launches and block-threads run since the process started.
struct Stats {
  uint64_t launches = 0, blocks = 0, syncs = 0, shuffles = 0;
};
Stats stats();

// Launch a kernel functor K (with `template <class Ctx> void operator()(Ctx&) const`) on the emulator.
template <class K>
void launch(const K& k, Dim dim, const char* name = K::kName) {
  if (LaunchBound<K>::value < kMaxBlock && dim.block > LaunchBound<K>::value)  // (launch_raw checks the rest)
    throw LaunchError(std::string("kernel ") + name + ": bad launch: block size above the kernel's launch bound");
  launch_raw(
      name, [](const void* p, EmuCtx& c) { (*static_cast<const K*>(p))(c); }, &k, dim);
}

// The launcher the op functions in exec/kernels/*.hpp take: grid sizes are capped at max_grid (the kernels
// loop over the rest), `block` is the block size used where an op does not need a specific one.
struct Launcher {
  unsigned block = 256;
  unsigned max_grid = 8;
  template <class K>
  void operator()(const K& k, Dim dim) const {
    launch(k, dim);
  }
};

}  // namespace tp::kernels::emu
