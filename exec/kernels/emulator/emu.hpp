// exec/kernels/emulator/: the CPU block emulator (this file, emu.cpp, emu_fibers.cpp), library tp_kernels_emu.
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

  // Warp-level tensor-core instructions (PTX on the GPU, cuda_launch.cuh), every lane of the warp calling each
  // with its own registers; lane l holds its fragment elements in the PTX ISA's layout (g = l / 4, t = l % 4;
  // a bf16 pair per 32-bit register, the lower-indexed element in the low half):
  // - mma16816: d += a b, mma.sync.m16n8k16.row.col.f32.bf16.bf16.f32. a (16 x 16): a[0] (g, 2t..2t+1),
  //   a[1] (g + 8, 2t..), a[2] (g, 2t + 8..), a[3] (g + 8, 2t + 8..); b (16 x 8): b[0] (2t..2t+1, g),
  //   b[1] (2t + 8.., g); d (16 x 8): d[0..1] (g, 2t..2t+1), d[2..3] (g + 8, 2t..). The emulator sums each element's
  //   16 products in k order in float after c (tensor cores may order and round differently: tests compare
  //   within fp32 accumulation error).
  // - ldsm4 / ldsm4_t: ldmatrix.sync.m8n8.x4(.trans).shared.b16 — four 8 x 8 bf16 matrices, matrix i's row r at
  //   lane 8i + r's pointer; r[i] = matrix i's (g, 2t..2t+1), or with .trans (2t..2t+1, g). The emulator checks
  //   every row pointer is in the block's shared memory and 16-byte aligned (a violation fails the launch).
  void mma16816(float d[4], const uint32_t a[4], const uint32_t b[2]);
  void ldsm4(uint32_t r[4], const bf16* p) { ldsm(r, p, false); }
  void ldsm4_t(uint32_t r[4], const bf16* p) { ldsm(r, p, true); }
  // Asynchronous copies (cp.async, sm_80): cp_async16 queues 16 bytes from global memory to shared memory (zero:
  // 16 zero bytes, src unread, as cp.async's src-size 0), cp_async_commit closes this thread's group,
  // cp_async_wait<N> completes every committed group but the newest N. The emulator copies at the two ends of the
  // window in which a GPU may: at the wait that completes the group (schedules free and warps_forward), so a read
  // of a destination before its wait and the sync that publishes it sees the old bytes; and at once
  // (warps_backward), so a copy issued into a buffer another warp still reads, before the sync that ends those
  // reads, overwrites what that warp reads. A destination outside the block's shared memory or not 16-byte
  // aligned, a source not 16-byte aligned, and copies still queued when the thread returns fail the launch.
  void cp_async16(void* dst, const void* src, bool zero);
  void cp_async_commit();
  template <int N>
  void cp_async_wait() {
    async_wait(N);
  }
  void cp_async_end();  // (the engines, after the body returns)

 private:
  static constexpr int kAsyncMax = 64, kGroupsMax = 8;
  struct AsyncCopy {
    void* dst;
    const void* src;
    bool zero;
  };
  AsyncCopy acp_[kAsyncMax];
  int nacp_ = 0;              // queued copies, oldest first
  int grp_[kGroupsMax] = {};  // committed group i ends before acp_[grp_[i]]
  int ngrp_ = 0;
  void async_wait(int n);
  void ldsm(uint32_t r[4], const bf16* p, bool trans);
  // The value of lane (this lane ^ mask) after every lane of the warp gave its own; with `all`, every lane's
  // value in all[0..31] (a warp-wide gather: no lane may have returned).
  uint64_t exchange(uint64_t bits, int mask, uint64_t* all = nullptr);
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
uint64_t fiber_exchange(FiberRun& r, unsigned tid, uint64_t bits, int mask, uint64_t* all);
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
