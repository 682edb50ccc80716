// host_adam: see host_adam.hpp. The pool: workers wait on a generation counter; a call publishes its block function
// and the number of blocks, bumps the generation, runs block 0 itself and waits until the other blocks are done.
#include "exec/runtime/offload/host_adam.hpp"

#include <sched.h>

#include <algorithm>
#include <condition_variable>
#include <cstdlib>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "exec/backends/backend.hpp"
#include "exec/prof/prof.hpp"

namespace tp::exec {
namespace {

class Pool {
 public:
  ~Pool() {
    {
      std::lock_guard<std::mutex> l(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (std::thread& t : workers_) t.join();
  }
  // Runs f(0) .. f(blocks - 1), f(0) on the calling thread, the others on workers; returns when all are done.
  void run(int blocks, const std::function<void(int)>& f) {
    if (blocks <= 1) {
      if (blocks == 1) f(0);
      return;
    }
    std::lock_guard<std::mutex> one_call(call_mu_);  // ranks run as threads of one process (tests) share the pool
    {
      std::lock_guard<std::mutex> l(mu_);
      while ((int)workers_.size() < blocks - 1) {
        const int id = (int)workers_.size() + 1;
        workers_.emplace_back([this, id] { loop(id); });
      }
      job_ = &f;
      blocks_ = blocks;
      pending_ = blocks - 1;
      ++generation_;
    }
    cv_.notify_all();
    f(0);
    std::unique_lock<std::mutex> l(mu_);
    done_.wait(l, [&] { return pending_ == 0; });
    job_ = nullptr;
  }

 private:
  void loop(int id) {
    long seen = 0;
    for (;;) {
      const std::function<void(int)>* job = nullptr;
      {
        std::unique_lock<std::mutex> l(mu_);
        cv_.wait(l, [&] { return stop_ || generation_ != seen; });
        if (stop_) return;
        seen = generation_;
        if (id < blocks_) job = job_;
      }
      if (!job) continue;  // this call needs fewer workers
      (*job)(id);
      {
        std::lock_guard<std::mutex> l(mu_);
        --pending_;
      }
      done_.notify_one();
    }
  }

  std::mutex call_mu_, mu_;
  std::condition_variable cv_, done_;
  std::vector<std::thread> workers_;
  const std::function<void(int)>* job_ = nullptr;
  int blocks_ = 0, pending_ = 0;
  long generation_ = 0;
  bool stop_ = false;
};

Pool& pool() {
  static Pool p;
  return p;
}

// f(lo, hi) over [0, n) cut into at most `threads` contiguous blocks (64-element aligned, at least
// kHostAdamMinPerThread elements a block), on the pool.
void run_blocks(long n, int threads, const std::function<void(long, long)>& f) {
  const long most = std::max(1L, n / kHostAdamMinPerThread);
  const int blocks = (int)std::clamp<long>(threads, 1, most);
  const long per = (n / blocks + 63) / 64 * 64;
  pool().run(blocks, [&](int b) {
    const long lo = std::min(n, (long)b * per), hi = b == blocks - 1 ? n : std::min(n, lo + per);
    if (hi > lo) f(lo, hi);
  });
}

}  // namespace

int usable_cores() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1, (int)std::thread::hardware_concurrency());
}

int local_ranks(int world_size) {
  for (const char* v : {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS", "SLURM_NTASKS_PER_NODE"})
    if (const char* e = std::getenv(v)) {
      const int n = std::atoi(e);
      if (n > 0) return n;
    }
  return std::max(1, world_size);
}

int host_adam_threads(const Backend& be, int world_size) {
  if (const char* e = std::getenv("TRAINPLAN_HOST_ADAM_THREADS")) {
    const int n = std::atoi(e);
    if (n >= 1) return std::min(n, 256);
  }
  if (be.host_accessible) return 1;
  return std::max(1, usable_cores() / local_ranks(world_size));
}

template <class T>
void host_adamw(T* p, const T* g, T* m, T* v, long n, T lr, T b1, T b2, T eps, T wd, long t, T gscale, int threads) {
  if (n <= 0) return;
  prof::Scope scope(prof::Cls::optimizer);  // the whole call, once; the blocks' own scopes are inner
  const auto adamw = cpu_backend().ops<T>().adamw;
  run_blocks(n, threads, [&](long lo, long hi) { adamw(p + lo, g + lo, m + lo, v + lo, hi - lo, lr, b1, b2, eps, wd, t, gscale); });
}

template <class T>
double host_sum_squares(const T* x, long n, int threads) {
  if (n <= 0) return 0;
  prof::Scope scope(prof::Cls::optimizer);  // (as host_adamw: once, on the calling thread)
  const auto sum_squares = cpu_backend().ops<T>().sum_squares;
  const long nb = (n + kHostSumBlock - 1) / kHostSumBlock;
  if (nb == 1) return sum_squares(x, n);
  std::vector<double> part((size_t)nb, 0.0);
  const int workers = (int)std::clamp<long>(threads, 1, nb);
  pool().run(workers, [&](int w) {  // worker w: blocks w, w + workers, ...
    for (long b = w; b < nb; b += workers) part[(size_t)b] = sum_squares(x + b * kHostSumBlock, std::min(kHostSumBlock, n - b * kHostSumBlock));
  });
  double s = 0;
  for (double v : part) s += v;
  return s;
}

template <class T>
void host_pack_bf16(uint16_t* y, const T* x, long n, int threads) {
  if (n <= 0) return;
  const auto pack = cpu_backend().ops<T>().pack_bf16;
  run_blocks(n, threads, [&](long lo, long hi) { pack(y + lo, x + lo, hi - lo); });
}

template void host_pack_bf16<float>(uint16_t*, const float*, long, int);
template void host_pack_bf16<double>(uint16_t*, const double*, long, int);
template void host_adamw<float>(float*, const float*, float*, float*, long, float, float, float, float, float, long, float, int);
template void host_adamw<double>(double*, const double*, double*, double*, long, double, double, double, double, double, long,
                                 double, int);

template double host_sum_squares<float>(const float*, long, int);
template double host_sum_squares<double>(const double*, long, int);

}  // namespace tp::exec
