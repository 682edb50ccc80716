// exec/prof/: the executor measuring itself as it runs: time per op class and the tracked heap (this file), and
// the process's resident memory (rss.hpp). Includes nothing else of exec/.
// prof: a tiny per-op-class time accumulator for the executor (used by `trainplan validate`), and a tracked-heap
// counter. The CPU backend's ops open a Scope (matmul = gemm, attention_fwd / _bwd = attention, adamw and the
// gradient-norm sum of squares = optimizer, every other op = elementwise); the MPI communicator opens a Scope
// of the "current comm class" (dp_comm unless a caller set another with CommClass, or the call goes through a
// communicator wrapped by classed(), exec/comm/comm_classed.hpp).
// Invariants:
// - Off by default: a disabled Scope costs one branch. Enabled, it costs two steady_clock reads per op call.
// - Only the outermost Scope counts (an op called inside another op's or a collective's scope is not counted
//   twice), so the classes partition the time spent inside instrumented calls.
// - Single-threaded per rank (the CPU backend runs one thread per rank); the heap counters are atomics.
// - Heap tracking (the global operator new / delete replacements in prof.cpp) counts malloc_usable_size of
//   every block allocated while tracking is on; it is switched on once, early, by the program that wants it.
#pragma once
#include <chrono>
#include <string_view>

namespace tp::exec::prof {

enum class Cls : int { gemm = 0, attention = 1, elementwise = 2, optimizer = 3, tp_comm = 4, pp_comm = 5, dp_comm = 6 };
inline constexpr int kClasses = 7;
const char* cls_name(Cls c);

struct Snapshot {
  double seconds[kClasses] = {};  // time inside instrumented calls, by class, since the last reset
  long long calls[kClasses] = {};
  int steps = 0;                  // step_end() calls since the last reset
  double heap_live_bytes = 0;     // tracked heap in use now
  double heap_peak_bytes = 0;     // highest tracked heap in use since the last reset (>= live at the reset)
};

void set_enabled(bool on);
bool enabled();
// Zeroes times, calls and steps; the heap peak restarts from the heap in use now.
void reset();
Snapshot snapshot();

// Heap tracking (operator new / delete). Switch on before allocating what you want measured; never off again.
void track_heap();
double heap_live_bytes();
// A second peak counter, independent of reset() (the chunk store measures each moment's non-model memory with
// it): the highest tracked heap since the last heap_window_reset(); 0 while tracking is off.
double heap_window_peak_bytes();
void heap_window_reset();

namespace detail {
extern bool g_on;
extern int g_depth;
extern void (*g_sync)();
void add(int c, double s);
}  // namespace detail

// A device's synchronisation (Backend::sync) run by every counted scope before it starts and before it stops its
// clock, so a device op's class gets the op's device time (not its launch); null (the default): no sync. validate
// sets it for a separate profiled run on a device backend (the syncs slow the step, whose time it takes elsewhere).
void set_sync(void (*sync)());

// The class of the op named `name` of exec/backends/ops.def, as the CPU backend's ops charge themselves: GEMMs
// (matmul, matmul16, matmul_fp8, linear_fwd), attention (attention_*, flash_attention_*), the optimizer (adamw, sum_squares and their _multi forms),
// everything else element-wise. exec/backends/ops.cpp opens a scope of it around every op of a device backend.
constexpr Cls op_class(std::string_view name) {
  if (name == "matmul" || name == "matmul16" || name == "matmul_fp8" || name == "linear_fwd") return Cls::gemm;
  if (name.substr(0, 9) == "attention" || name.substr(0, 15) == "flash_attention") return Cls::attention;
  if (name.substr(0, 5) == "adamw" || name.substr(0, 11) == "sum_squares") return Cls::optimizer;
  return Cls::elementwise;
}

// Times the enclosing op into class `c` (outermost scope only, when enabled).
class Scope {
 public:
  explicit Scope(Cls c) noexcept : c_((int)c), on_(detail::g_on && detail::g_depth == 0) {
    if (on_) {
      detail::g_depth = 1;
      if (detail::g_sync) detail::g_sync();
      t0_ = std::chrono::steady_clock::now();
    }
  }
  ~Scope() {
    if (on_) {
      if (detail::g_sync) detail::g_sync();
      detail::add(c_, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count());
      detail::g_depth = 0;
    }
  }
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;

 private:
  int c_;
  bool on_;
  std::chrono::steady_clock::time_point t0_;
};

// The class communication is charged to (dp_comm by default). CommClass sets it for a scope.
Cls comm_class();
class CommClass {
 public:
  explicit CommClass(Cls c);
  ~CommClass();
  CommClass(const CommClass&) = delete;
  CommClass& operator=(const CommClass&) = delete;

 private:
  Cls prev_;
};

// Runtime step hooks. With set_warmup_steps(w) (validate uses 1), step_begin(w) resets the counters so that a
// snapshot after the run covers the steady steps only; step_end counts steps.
void set_warmup_steps(int w);
void step_begin(int step);
void step_end(int step);

}  // namespace tp::exec::prof
