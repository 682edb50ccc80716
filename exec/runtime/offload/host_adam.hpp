// host_adam: the CPU Adam of host-resident optimizer state — optimizer offload's master copy (host_optimizer.hpp,
// ZeRO-Offload) and the chunk store's host-resident chunks (PatrickStar) — split over a pool of threads, as
// DeepSpeed's CPU Adam and PatrickStar run it beside the GPU. Each thread runs the CPU backend's adamw on its own
// contiguous block, so the result is bitwise the single-threaded one whatever the split (Adam is element-wise).
// Invariants:
//  - host_adamw(..., threads) calls the CPU backend's ops::adamw on [0, n) cut into at most `threads` blocks (64-element
//    aligned; ranges under kHostAdamMinPerThread elements per thread use fewer threads); the calling thread runs the
//    first block and returns when every block is done.
//  - The pool is one per process, started on first use with the workers it needs, and joined at exit. Callers on
//    several threads (ranks as threads of one process, in tests) take turns; a block never calls the pool.
//  - host_sum_squares(x, n, threads): ops::sum_squares over blocks of kHostSumBlock elements (the last shorter), the
//    blocks' sums added in block order: the same double for any thread count, and the CPU backend's own sum when
//    n <= kHostSumBlock.
//  - The time is charged once, to the optimizer class, by a prof::Scope on the calling thread; the workers' own op
//    scopes are inner (not counted), so they write nothing of prof's (exec/prof/prof.hpp).
#pragma once
#include <cstdint>

namespace tp::exec {

struct Backend;

inline constexpr long kHostAdamMinPerThread = 1L << 15;
inline constexpr long kHostSumBlock = 1L << 20;

// The threads of the host Adam for a rank on backend `be` of a job of `world_size` ranks: TRAINPLAN_HOST_ADAM_THREADS
// when set (>= 1); else 1 on a host-accessible backend (cpu, emu: every rank is a core already busy computing), and
// on a device backend the cores this process may use divided by the job's ranks on this node (at least 1).
int host_adam_threads(const Backend& be, int world_size);

// Cores this process may run on (its affinity mask), and the job's ranks on this node (the launcher's local size:
// Open MPI, MPICH / Intel MPI, Slurm; else world_size).
int usable_cores();
int local_ranks(int world_size);

// ops::adamw's contract (exec/backends/ops.def) on host memory, over `threads` threads of the pool.
template <class T>
void host_adamw(T* p, const T* g, T* m, T* v, long n, T lr, T b1, T b2, T eps, T wd, long t, T gscale, int threads);

// ops::pack_bf16 (the CPU backend's) on host memory, cut into blocks as host_adamw: optimizer offload's bf16 working
// weights, packed on the host after each Adam block (exec/runtime/runtime_rank.hpp host_master).
template <class T>
void host_pack_bf16(uint16_t* y, const T* x, long n, int threads);

// ops::sum_squares's contract (the sum of x^2 in double) on host memory, over `threads` threads of the pool.
template <class T>
double host_sum_squares(const T* x, long n, int threads);

}  // namespace tp::exec
