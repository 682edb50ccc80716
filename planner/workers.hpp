// workers: the planner's thread pools (the analytic pass, the simulations that confirm) run through here, so that
// an exception in any worker reaches the caller instead of std::terminate (issue 44).
// Invariants: every thread started is joined before run_workers returns or throws; the first exception thrown
// by any worker (in time) is rethrown on the caller's thread after the join, and `failed()` turns true at once so
// that the other workers (and a progress loop) stop taking work; a thread that cannot be started (no memory for
// its stack under `ulimit -v`) is not an error: its share runs on the threads that did start.
#pragma once
#include <atomic>
#include <exception>
#include <functional>
#include <mutex>
#include <system_error>
#include <thread>
#include <vector>

namespace tp {

class Workers {
 public:
  // True once any worker has thrown: workers and progress loops stop taking work.
  bool failed() const { return failed_.load(); }

  // Runs work(w) for w = 0 .. n-1, w = 0 on the caller's thread after `while_running` (if any) returns; the
  // others on threads of their own. `while_running` runs on the caller's thread while they work (a progress
  // loop: it must return once the work is done or failed()).
  void run(int n, const std::function<void(int)>& work, const std::function<void()>& while_running = {}) {
    std::vector<std::thread> pool;
    auto guarded = [&](int w) {
      try {
        work(w);
      } catch (...) {
        record(std::current_exception());
      }
    };
    for (int w = 1; w < n; ++w) {
      try {
        pool.emplace_back(guarded, w);
      } catch (const std::system_error&) {
        break;  // no thread: the started ones and the caller take the rest (work hands out items dynamically)
      }
    }
    if (while_running) {
      std::thread first;
      try {
        first = std::thread(guarded, 0);
      } catch (const std::system_error&) {
      }
      if (first.joinable()) {
        try {
          while_running();
        } catch (...) {
          record(std::current_exception());
        }
        first.join();
      } else {
        guarded(0);
      }
    } else {
      guarded(0);
    }
    for (auto& t : pool) t.join();
    if (error_) std::rethrow_exception(error_);
  }

 private:
  void record(std::exception_ptr e) {
    std::lock_guard<std::mutex> lk(mu_);
    if (!error_) error_ = e;
    failed_.store(true);
  }
  std::mutex mu_;
  std::exception_ptr error_;
  std::atomic<bool> failed_{false};
};

}  // namespace tp
