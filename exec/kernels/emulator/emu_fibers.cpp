// emu_fibers: the fiber engine of the block emulator (emu.hpp, Engine::fibers). The CUDA threads of a block
// are ucontext fibers on the launching thread; a fiber runs until it reaches sync(), a shuffle or the end of
// the body, then the scheduler runs the next one in thread order (descending for warps_backward). A warp
// whose live lanes all wait at a shuffle is released; when every live thread waits at sync(), all are.
// Threads waiting at different kinds of barrier with nothing left to release is a deadlock: reported as an
// error of the launch (the fibers are abandoned; their stacks are reused). Launches are serialised by the
// caller (emu.cpp holds the launch mutex). Not compiled under ASan / TSan, which do not follow swapcontext.
#include "exec/kernels/emulator/emu.hpp"

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define TP_EMU_NO_FIBERS 1
#endif

#ifndef TP_EMU_NO_FIBERS
#include <setjmp.h>
#include <ucontext.h>

#include <algorithm>
#include <memory>
#include <vector>
#endif

namespace tp::kernels::emu {

#ifdef TP_EMU_NO_FIBERS
bool fibers_available() { return false; }
namespace detail {
void run_fibers(const char*, BodyFn, const void*, Dim, bool) {}
void fiber_sync(FiberRun&, unsigned) {}
uint64_t fiber_exchange(FiberRun&, unsigned, uint64_t, int, uint64_t*) { return 0; }
}  // namespace detail
#else
bool fibers_available() { return true; }

namespace {
constexpr size_t kStack = 64 * 1024;
enum St : int { kRun, kAtSync, kAtShfl, kDone };
struct Fiber {
  ucontext_t ctx;  // only to start the fiber (setcontext); later switches are _setjmp / _longjmp
  jmp_buf jb;
  bool started = false;
  int st = kRun;
  unsigned parity = 0;
};
// Stacks kept across launches (only the launching thread under the launch mutex uses them).
std::vector<std::unique_ptr<char[]>>& stacks() {
  static std::vector<std::unique_ptr<char[]>> s;
  return s;
}
}  // namespace

struct FiberRun {
  const char* name;
  BodyFn body;
  const void* kernel;
  Dim dim;
  bool backward;
  unsigned bid = 0, cur = 0;
  std::unique_ptr<unsigned char[]> smem;
  std::vector<Fiber> f;
  std::vector<uint64_t> slots;  // per warp: [2][32]
  // Per warp: the lanes that had returned when its last shuffle was released (a lane may return between the
  // release and a later lane's read of the shuffle it took part in; see emu.cpp's Warp::done_at_shuffle).
  std::vector<uint32_t> done_at_shuffle;
  jmp_buf sched;
  std::string err;

  void fail(unsigned tid, const std::string& msg) {
    if (err.empty())
      err = std::string("kernel ") + name + ": block " + std::to_string(bid) + " thread " + std::to_string(tid) +
            ": " + msg;
  }
  // Back to the scheduler; returns when the scheduler resumes this fiber. _setjmp / _longjmp do not save the
  // signal mask, so a switch makes no system call (swapcontext makes two).
  void park(unsigned tid, int st) {
    f[tid].st = st;
    if (!_setjmp(f[tid].jb)) _longjmp(sched, 1);
  }
};

namespace {
void fiber_entry(unsigned hi, unsigned lo) {
  FiberRun* R = reinterpret_cast<FiberRun*>((uintptr_t(hi) << 32) | uintptr_t(lo));
  const unsigned t = R->cur;
  EmuCtx c;
  c.tid_ = t;
  c.bid_ = R->bid;
  c.bdim_ = R->dim.block;
  c.gdim_ = R->dim.grid;
  c.smem_ = R->smem.get();
  c.smem_bytes_ = R->dim.smem;
  c.fib_ = R;
  try {
    R->body(R->kernel, c);
    c.cp_async_end();
  } catch (const std::exception& e) {
    R->fail(t, e.what());
  } catch (...) {
    R->fail(t, "unknown exception");
  }
  R->f[t].st = kDone;
  _longjmp(R->sched, 1);  // never returns: the fiber's stack is abandoned
}

// A fresh context that starts fiber_entry on `stack` (which ends by jumping to the scheduler). Out of line: getcontext returns
// twice as far as the compiler knows, which would make it warn about every local of the caller.
[[gnu::noinline]] void init_fiber(Fiber& fb, char* stack, uintptr_t self) {
  getcontext(&fb.ctx);
  fb.ctx.uc_stack.ss_sp = stack;
  fb.ctx.uc_stack.ss_size = kStack;
  fb.ctx.uc_link = nullptr;
  fb.started = false;
  makecontext(&fb.ctx, reinterpret_cast<void (*)()>(fiber_entry), 2, unsigned(self >> 32), unsigned(self & 0xffffffffu));
  fb.st = kRun;
  fb.parity = 0;
}

// Runs fiber t until it parks or finishes (out of line, so no local of the caller lives across the jumps).
[[gnu::noinline]] void resume(FiberRun& R, unsigned t) {
  R.cur = t;
  if (_setjmp(R.sched)) return;
  Fiber& fb = R.f[t];
  if (fb.started) _longjmp(fb.jb, 1);
  fb.started = true;
  setcontext(&fb.ctx);
}

// Releases what can run again; false when every thread is done or nothing can be released (deadlock).
bool release(FiberRun& R, bool& deadlock) {
  const unsigned n = R.dim.block;
  bool any = false;
  unsigned nsync = 0, ndone = 0;
  for (unsigned w = 0; w < n / kWarp; ++w) {
    unsigned shfl = 0, live = 0;
    for (unsigned l = 0; l < kWarp; ++l) {
      const int st = R.f[w * kWarp + l].st;
      live += st != kDone;
      shfl += st == kAtShfl;
    }
    if (shfl && shfl == live) {
      uint32_t done = 0;
      for (unsigned l = 0; l < kWarp; ++l) {
        if (R.f[w * kWarp + l].st == kDone) done |= 1u << l;
        if (R.f[w * kWarp + l].st == kAtShfl) R.f[w * kWarp + l].st = kRun;
      }
      R.done_at_shuffle[w] = done;
      any = true;
    }
  }
  if (any) return true;
  for (const Fiber& fb : R.f) nsync += fb.st == kAtSync, ndone += fb.st == kDone;
  if (ndone == n) return false;
  if (nsync + ndone == n) {
    for (Fiber& fb : R.f)
      if (fb.st == kAtSync) fb.st = kRun;
    return true;
  }
  deadlock = true;
  return false;
}
}  // namespace

namespace detail {

void fiber_sync(FiberRun& r, unsigned tid) { r.park(tid, kAtSync); }

uint64_t fiber_exchange(FiberRun& r, unsigned tid, uint64_t bits, int mask, uint64_t* all) {
  const unsigned w = tid / kWarp, lane = tid % kWarp, src = lane ^ unsigned(mask);
  uint64_t* row = &r.slots[(w * 2 + r.f[tid].parity) * kWarp];
  r.f[tid].parity ^= 1u;  // the next shuffle uses the other row (see emu.cpp's Warp)
  row[lane] = bits;
  r.park(tid, kAtShfl);
  if (mask < 0 || src >= kWarp) {
    r.fail(tid, "shfl_xor lane mask " + std::to_string(mask) + " leaves the warp");
    return 0;
  }
  if (r.done_at_shuffle[w] & (all ? ~0u : 1u << src)) {
    if (all) std::fill(all, all + kWarp, uint64_t(0));
    r.fail(tid, all ? std::string("a warp-wide instruction (mma, ldmatrix) with a lane that has returned")
                    : "shfl_xor reads lane " + std::to_string(src) + ", which has returned");
    return 0;
  }
  if (all) std::copy(row, row + kWarp, all);
  return row[src];
}

void run_fibers(const char* name, BodyFn body, const void* kernel, Dim dim, bool backward) {
  FiberRun R;
  R.name = name;
  R.body = body;
  R.kernel = kernel;
  R.dim = dim;
  R.backward = backward;
  R.smem.reset(new unsigned char[dim.smem ? dim.smem : 16]);
  R.f.resize(dim.block);
  R.slots.assign(size_t(dim.block / kWarp) * 2 * kWarp, 0);
  R.done_at_shuffle.assign(dim.block / kWarp, 0);
  auto& S = stacks();
  while (S.size() < dim.block) S.emplace_back(new char[kStack]);
  const uintptr_t self = reinterpret_cast<uintptr_t>(&R);
  for (unsigned b = 0; b < dim.grid && R.err.empty(); ++b) {
    R.bid = b;
    if (dim.smem) std::memset(R.smem.get(), 0xff, dim.smem);
    for (unsigned t = 0; t < dim.block; ++t) init_fiber(R.f[t], S[t].get(), self);
    bool deadlock = false;
    do {
      for (unsigned k = 0; k < dim.block; ++k) {
        const unsigned t = backward ? dim.block - 1 - k : k;
        if (R.f[t].st != kRun) continue;
        resume(R, t);
      }
    } while (release(R, deadlock));
    if (deadlock) R.fail(0, "deadlock: threads wait at sync() while others of their block wait at a shuffle");
  }
  if (!R.err.empty()) throw LaunchError(R.err);
}

}  // namespace detail
#endif

}  // namespace tp::kernels::emu
