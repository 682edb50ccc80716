// emu: the block emulator (see emu.hpp). A launch hands one Block (barriers, shared memory, warp exchanges)
// to the first blockDim pool threads; each runs the kernel body for block 0, 1, ... of the grid, meeting the
// others at an end-of-block barrier whose completion resets the block state for the next one.
// A thread that returns from the body drops out of the sync and warp barriers for the rest of that block (as
// an exited thread no longer counts for __syncthreads on a GPU).
// The barriers are our own futex barriers rather than std::barrier: libstdc++'s std::barrier spins and yields
// before sleeping, and with hundreds of block threads on two cores the spinners starve the threads that still
// have to arrive (measured: an empty 256-thread launch took 7 ms, load average above 200).
#include "exec/kernels/emulator/emu.hpp"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace tp::kernels::emu {

namespace {
void futex_wait(std::atomic<uint32_t>& a, uint32_t old) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(&a), FUTEX_WAIT_PRIVATE, old, nullptr, nullptr, 0);
}
void futex_wake(std::atomic<uint32_t>& a, int n) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(&a), FUTEX_WAKE_PRIVATE, n, nullptr, nullptr, 0);
}
}  // namespace

// A barrier of `expected` threads that sleep in the kernel while they wait (no spinning). The last arrival
// runs the completion, re-arms the count and starts the next phase. arrive_and_drop leaves for good (until the
// next init, which only runs while no thread is inside).
class Barrier {
 public:
  void init(int n) {
    expected_.store(n, std::memory_order_relaxed);
    count_.store(n, std::memory_order_relaxed);
  }
  template <class F>
  void arrive_and_wait(F&& done) {
    const uint32_t ph = phase_.load(std::memory_order_acquire);
    if (count_.fetch_sub(1, std::memory_order_acq_rel) == 1) return last(done);
    while (phase_.load(std::memory_order_acquire) == ph) futex_wait(phase_, ph);
  }
  template <class F>
  void arrive_and_drop(F&& done) {
    expected_.fetch_sub(1, std::memory_order_relaxed);
    if (count_.fetch_sub(1, std::memory_order_acq_rel) == 1) last(done);
  }

 private:
  template <class F>
  void last(F& done) {
    done();
    count_.store(expected_.load(std::memory_order_relaxed), std::memory_order_relaxed);
    phase_.fetch_add(1, std::memory_order_release);
    futex_wake(phase_, INT_MAX);
  }
  std::atomic<int> expected_{0}, count_{0};
  std::atomic<uint32_t> phase_{0};
};
inline constexpr auto kNothing = [] {};

namespace {
std::atomic<uint64_t> g_launches{0}, g_blocks{0}, g_syncs{0}, g_shuffles{0};
std::atomic<Schedule> g_schedule{Schedule::free};
}  // namespace

// The lanes of one warp: a barrier of 32 and one 8-byte slot per lane for shuffles, twice: shuffle k uses
// slots[k % 2], so one barrier per shuffle suffices (a lane cannot write slots[k % 2] again before every lane
// has passed shuffle k + 1's barrier, i.e. finished reading shuffle k).
struct Warp {
  Barrier bar;
  uint64_t slot[2][kWarp] = {};
  unsigned parity[kWarp] = {};  // per lane: which slot row its next shuffle uses
  std::atomic<uint32_t> done{0};  // lanes that returned from the body in this block
  // `done` when the last shuffle's barrier completed: a lane that returned before that shuffle never wrote its
  // slot. (Read after the barrier, `done` itself may already hold a partner that took part in the shuffle and
  // returned since.) One copy suffices: the next shuffle cannot complete before every lane has read this one.
  uint32_t done_at_shuffle = 0;
  void snapshot() { done_at_shuffle = done.load(std::memory_order_acquire); }
};


struct Block {
  const char* name = "";
  BodyFn body = nullptr;
  const void* kernel = nullptr;
  Dim dim;
  Schedule sched = Schedule::free;
  unsigned nwarps = 0;
  std::unique_ptr<unsigned char[]> smem;
  Barrier sync_bar, end_bar;
  std::unique_ptr<Warp[]> warps;
  // Ordered schedules: the warp at position `turn` of the order runs; parked / done count its lanes waiting at
  // the sync barrier / returned, and the turn moves on when they cover the warp.
  std::mutex m;
  unsigned turn = 0;
  std::atomic<unsigned> running{0};               // warp_at(turn), or nwarps when none may run
  std::unique_ptr<std::atomic<uint32_t>[]> wake;  // per warp: bumped (and futex-woken) when its turn comes
  std::vector<unsigned> parked, done;
  std::mutex err_m;
  std::string err;

  unsigned pos(unsigned w) const { return sched == Schedule::warps_backward ? nwarps - 1 - w : w; }
  unsigned warp_at(unsigned p) const { return sched == Schedule::warps_backward ? nwarps - 1 - p : p; }
  // Skips the warps whose lanes have all returned (m held).
  // Only the lanes of the warp whose turn it is are woken (waking all threads for every turn costs
  // O(threads x warps) per phase).
  void settle_turn() {
    while (turn < nwarps && done[warp_at(turn)] == kWarp) ++turn;
    const unsigned w = turn < nwarps ? warp_at(turn) : nwarps;
    running.store(w, std::memory_order_release);
    if (w < nwarps) {
      wake[w].fetch_add(1, std::memory_order_release);
      futex_wake(wake[w], INT_MAX);
    }
  }
  void fail(unsigned bid, unsigned tid, const std::string& msg) {
    std::lock_guard<std::mutex> lk(err_m);
    if (err.empty())
      err = std::string("kernel ") + name + ": block " + std::to_string(bid) + " thread " + std::to_string(tid) +
            ": " + msg;
  }
  // Fresh barriers, shared memory and schedule state for the next block (no thread of the block is inside).
  void reset() {
    sync_bar.init(int(dim.block));
    for (unsigned w = 0; w < nwarps; ++w) {
      warps[w].bar.init(int(kWarp));
      warps[w].done.store(0, std::memory_order_relaxed);
      std::fill(std::begin(warps[w].parity), std::end(warps[w].parity), 0u);
    }
    if (dim.smem) std::memset(smem.get(), 0xff, dim.smem);
    std::lock_guard<std::mutex> lk(m);
    turn = 0;
    running.store(warp_at(0), std::memory_order_release);
    std::fill(parked.begin(), parked.end(), 0u);
    std::fill(done.begin(), done.end(), 0u);
  }
  bool ordered() const { return sched != Schedule::free; }
  void gate(unsigned w) {
    if (!ordered()) return;
    for (;;) {
      if (running.load(std::memory_order_acquire) == w) return;
      const uint32_t seq = wake[w].load(std::memory_order_acquire);
      if (running.load(std::memory_order_acquire) == w) return;
      futex_wait(wake[w], seq);
    }
  }
  // A lane of warp w parks at the sync barrier (kDone: returned from the body).
  template <bool kDone>
  void leave_turn(unsigned w) {
    if (!ordered()) return;
    std::lock_guard<std::mutex> lk(m);
    (kDone ? done : parked)[w] += 1;
    if (warp_at(turn) == w && parked[w] + done[w] == kWarp) {
      ++turn;
      settle_turn();
    }
  }

  // Completion of a sync phase: the ordered schedules start again with the first warp.
  void sync_done() {
    g_syncs.fetch_add(1, std::memory_order_relaxed);
    if (!ordered()) return;
    std::lock_guard<std::mutex> lk(m);
    std::fill(parked.begin(), parked.end(), 0u);
    turn = 0;
    settle_turn();
  }
  void end_done() {
    g_blocks.fetch_add(1, std::memory_order_relaxed);
    reset();
  }
};

void EmuCtx::sync() {
  if (fib_) return detail::fiber_sync(*fib_, tid_);
  const unsigned w = tid_ / kWarp;
  blk_->leave_turn<false>(w);
  blk_->sync_bar.arrive_and_wait([b = blk_] { b->sync_done(); });
  blk_->gate(w);
}

void EmuCtx::ldsm(uint32_t r[4], const bf16* p, bool trans) {
  const auto* b = reinterpret_cast<const unsigned char*>(p);
  if (!smem_ || b < smem_ || b + 16 > smem_ + smem_bytes_ || (b - smem_) % 16 != 0)
    throw std::runtime_error(std::string("ldmatrix: row pointer not 16-byte aligned in the block's shared memory") +
                             (trans ? " (.trans)" : ""));
  uint64_t rows[kWarp];
  (void)exchange(reinterpret_cast<uintptr_t>(p), 0, rows);
  if (std::find(rows, rows + kWarp, uint64_t(0)) != rows + kWarp) {  // (a lane failed: the launch is failing)
    std::fill(r, r + 4, 0u);
    return;
  }
  const unsigned lane = tid_ % kWarp, g = lane / 4, t = lane % 4;
  for (unsigned i = 0; i < 4; ++i) {
    uint16_t e[2];
    for (unsigned h = 0; h < 2; ++h) {
      // matrix i's element (g, 2t + h), or (2t + h, g) transposed; row r's pointer came from lane 8i + r
      const unsigned row = trans ? 2 * t + h : g, col = trans ? g : 2 * t + h;
      e[h] = reinterpret_cast<const bf16*>(uintptr_t(rows[8 * i + row]))[col].bits;
    }
    r[i] = uint32_t(e[0]) | uint32_t(e[1]) << 16;
  }
}

void EmuCtx::cp_async16(void* dst, const void* src, bool zero) {
  const auto* b = static_cast<unsigned char*>(dst);
  if (!smem_ || b < smem_ || b + 16 > smem_ + smem_bytes_ || (b - smem_) % 16 != 0)
    throw std::runtime_error("cp.async: destination not 16-byte aligned in the block's shared memory");
  if (!zero && reinterpret_cast<uintptr_t>(src) % 16 != 0) throw std::runtime_error("cp.async: source not 16-byte aligned");
  if (nacp_ == kAsyncMax) throw std::runtime_error("cp.async: more queued copies than the emulator holds");
  if (schedule() == Schedule::warps_backward) {  // (at once: the earliest a GPU may; see emu.hpp)
    if (zero) std::memset(dst, 0, 16);
    else std::memcpy(dst, src, 16);
    zero = true, src = nullptr, dst = nullptr;  // (queued as done, so the waits and the end check still count it)
  }
  acp_[nacp_++] = AsyncCopy{dst, src, zero};
}

void EmuCtx::cp_async_commit() {
  if (ngrp_ == kGroupsMax) throw std::runtime_error("cp.async: more committed groups than the emulator holds");
  grp_[ngrp_++] = nacp_;
}

void EmuCtx::async_wait(int n) {
  if (ngrp_ <= n) return;
  const int done = ngrp_ - n, upto = grp_[done - 1];  // the oldest `done` groups: copies [0, upto)
  for (int i = 0; i < upto; ++i) {
    if (!acp_[i].dst) continue;  // (copied when issued)
    if (acp_[i].zero) std::memset(acp_[i].dst, 0, 16);
    else std::memcpy(acp_[i].dst, acp_[i].src, 16);
  }
  for (int i = upto; i < nacp_; ++i) acp_[i - upto] = acp_[i];
  nacp_ -= upto;
  for (int i = done; i < ngrp_; ++i) grp_[i - done] = grp_[i] - upto;
  ngrp_ -= done;
}

void EmuCtx::cp_async_end() {
  if (nacp_ > 0) throw std::runtime_error("cp.async: copies still queued when the thread returned");
}

void EmuCtx::mma16816(float d[4], const uint32_t a[4], const uint32_t b[2]) {
  uint64_t A01[kWarp], A23[kWarp], Bs[kWarp];
  (void)exchange(a[0] | uint64_t(a[1]) << 32, 0, A01);
  (void)exchange(a[2] | uint64_t(a[3]) << 32, 0, A23);
  (void)exchange(b[0] | uint64_t(b[1]) << 32, 0, Bs);
  // The 16-bit element at register `reg` (0..3 of a, 0..1 of b), half h, of lane l.
  auto half = [](uint64_t pair, unsigned reg, unsigned h) {
    return to_float(bf16{uint16_t(pair >> (32 * (reg % 2) + 16 * h))});
  };
  // A (m, k): lane (m % 8) 4 + (k % 8) / 2, register (m >= 8) + 2 (k >= 8), half k % 2 (a[0..1] in A01, a[2..3] in A23);
  // B (k, n): lane 4 n + (k % 8) / 2, register (k >= 8), half k % 2.
  auto A = [&](unsigned m, unsigned k) {
    const unsigned l = (m % 8) * 4 + (k % 8) / 2, reg = (m >= 8 ? 1u : 0u) + (k >= 8 ? 2u : 0u);
    return half(reg < 2 ? A01[l] : A23[l], reg, k % 2);
  };
  auto B = [&](unsigned k, unsigned n) { return half(Bs[4 * n + (k % 8) / 2], k >= 8 ? 1u : 0u, k % 2); };
  const unsigned lane = tid_ % kWarp, g = lane / 4, t = lane % 4;
  for (unsigned i = 0; i < 4; ++i) {
    const unsigned m = g + (i >= 2 ? 8u : 0u), n = 2 * t + i % 2;
    float s = d[i];
    for (unsigned k = 0; k < 16; ++k) s += A(m, k) * B(k, n);
    d[i] = s;
  }
}

uint64_t EmuCtx::exchange(uint64_t bits, int mask, uint64_t* all) {
  g_shuffles.fetch_add(1, std::memory_order_relaxed);
  if (fib_) return detail::fiber_exchange(*fib_, tid_, bits, mask, all);
  Warp& W = blk_->warps[tid_ / kWarp];
  const unsigned lane = tid_ % kWarp;
  const unsigned src = lane ^ unsigned(mask);
  uint64_t* row = W.slot[W.parity[lane]];
  W.parity[lane] ^= 1u;
  row[lane] = bits;
  W.bar.arrive_and_wait([&W] { W.snapshot(); });
  uint64_t r = 0;
  if (mask < 0 || src >= kWarp)
    blk_->fail(bid_, tid_, "shfl_xor lane mask " + std::to_string(mask) + " leaves the warp");
  else if (W.done_at_shuffle & (all ? ~0u : 1u << src)) {
    if (all) std::fill(all, all + kWarp, uint64_t(0));
    blk_->fail(bid_, tid_, all ? std::string("a warp-wide instruction (mma, ldmatrix) with a lane that has returned")
                               : "shfl_xor reads lane " + std::to_string(src) + ", which has returned");
  } else if (all) {
    std::copy(row, row + kWarp, all), r = row[src];
  } else {
    r = row[src];
  }
  return r;
}

namespace {

// The kernel body for every block of the grid, as CUDA thread `tid`.
void run_thread(Block& B, unsigned tid) {
  const unsigned w = tid / kWarp;
  for (unsigned bid = 0; bid < B.dim.grid; ++bid) {
    EmuCtx c;
    c.tid_ = tid;
    c.bid_ = bid;
    c.bdim_ = B.dim.block;
    c.gdim_ = B.dim.grid;
    c.smem_ = B.smem.get();
    c.smem_bytes_ = B.dim.smem;
    c.blk_ = &B;
    B.gate(w);
    try {
      B.body(B.kernel, c);
      c.cp_async_end();
    } catch (const std::exception& e) {
      B.fail(bid, tid, e.what());
    } catch (...) {
      B.fail(bid, tid, "unknown exception");
    }
    B.warps[w].done.fetch_or(1u << (tid % kWarp), std::memory_order_release);
    Warp& W = B.warps[w];
    W.bar.arrive_and_drop([&W] { W.snapshot(); });  // (completes a shuffle the other lanes wait in)
    B.leave_turn<true>(w);
    B.sync_bar.arrive_and_drop([&B] { B.sync_done(); });
    B.end_bar.arrive_and_wait([&B] { B.end_done(); });
  }
}

// Threads kept across launches; worker i runs CUDA thread i of each launch with blockDim > i.
struct Pool {
  struct Worker {
    std::thread th;
    std::atomic<uint32_t> go{0};
  };
  std::mutex launch_m;
  std::vector<std::unique_ptr<Worker>> workers;
  uint32_t gen = 0;
  Block* cur = nullptr;
  std::atomic<int> running{0};
  std::atomic<uint32_t> finished{0};
  bool quit = false;

  void loop(Worker* wk, unsigned idx) {
    uint32_t seen = 0;
    for (;;) {
      uint32_t g;
      while ((g = wk->go.load(std::memory_order_acquire)) == seen) futex_wait(wk->go, seen);
      seen = g;
      if (quit) return;
      run_thread(*cur, idx);
      if (running.fetch_sub(1, std::memory_order_acq_rel) == 1) {
        finished.store(1, std::memory_order_release);
        futex_wake(finished, 1);
      }
    }
  }
  void grow(unsigned n) {
    while (workers.size() < n) {
      auto wk = std::make_unique<Worker>();
      Worker* p = wk.get();
      const unsigned idx = unsigned(workers.size());
      wk->th = std::thread([this, p, idx] { loop(p, idx); });
      workers.push_back(std::move(wk));
    }
  }
  void wake(unsigned n) {
    ++gen;
    for (unsigned i = 0; i < n; ++i) {
      workers[i]->go.store(gen, std::memory_order_release);
      futex_wake(workers[i]->go, 1);
    }
  }
  void run(Block& B) {
    grow(B.dim.block);
    cur = &B;
    finished.store(0, std::memory_order_relaxed);
    running.store(int(B.dim.block), std::memory_order_relaxed);
    wake(B.dim.block);
    while (finished.load(std::memory_order_acquire) == 0) futex_wait(finished, 0);
    cur = nullptr;
  }
  ~Pool() {
    quit = true;
    wake(unsigned(workers.size()));
    for (auto& w : workers) w->th.join();
  }
};

Pool& pool() {
  static Pool p;
  return p;
}

void check_dim(const char* name, Dim d) {
  auto bad = [&](const std::string& why) {
    throw LaunchError(std::string("kernel ") + name + ": bad launch (grid " + std::to_string(d.grid) + ", block " +
                      std::to_string(d.block) + ", shared " + std::to_string(d.smem) + " B): " + why);
  };
  if (const char* why = launch_problem(d)) bad(why);
}

}  // namespace

void launch_raw(const char* name, BodyFn body, const void* kernel, Dim dim) {
  check_dim(name, dim);
  Pool& P = pool();
  std::lock_guard<std::mutex> lk(P.launch_m);
  if (engine() == Engine::fibers && fibers_available()) {
    g_launches.fetch_add(1, std::memory_order_relaxed);
    return detail::run_fibers(name, body, kernel, dim, g_schedule.load() == Schedule::warps_backward);
  }
  Block B;
  B.name = name;
  B.body = body;
  B.kernel = kernel;
  B.dim = dim;
  B.sched = g_schedule.load();
  B.nwarps = dim.block / kWarp;
  // operator new aligns to 16 bytes on x86-64, as CUDA aligns dynamic shared memory.
  B.smem.reset(new unsigned char[dim.smem ? dim.smem : 16]);
  B.warps.reset(new Warp[B.nwarps]);
  B.parked.assign(B.nwarps, 0);
  B.wake.reset(new std::atomic<uint32_t>[B.nwarps]());
  B.done.assign(B.nwarps, 0);
  B.end_bar.init(int(dim.block));
  B.reset();
  g_launches.fetch_add(1, std::memory_order_relaxed);
  P.run(B);
  if (!B.err.empty()) throw LaunchError(B.err);
}

namespace {
Engine engine_from_env() {
  const char* e = std::getenv("TP_EMU_ENGINE");
  return e && std::string(e) == "fibers" ? Engine::fibers : Engine::threads;
}
std::atomic<Engine> g_engine{engine_from_env()};
}  // namespace
void set_engine(Engine e) { g_engine.store(e); }
Engine engine() { return g_engine.load(); }

void set_schedule(Schedule s) { g_schedule.store(s); }
Schedule schedule() { return g_schedule.load(); }

Stats stats() {
  Stats s;
  s.launches = g_launches.load();
  s.blocks = g_blocks.load();
  s.syncs = g_syncs.load();
  s.shuffles = g_shuffles.load();
  return s;
}

}  // namespace tp::kernels::emu
