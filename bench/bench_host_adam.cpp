// bench_host_adam: the host Adam of offloaded optimizer state (exec/runtime/offload/host_adam.hpp) by thread count
// and length: parameters updated per second (each reads and writes p, m, v and reads g: 28 bytes of fp32). The table
// for docs/perf/offload.md; run with `build/bench/bench_host_adam` (Google Benchmark).
#include <benchmark/benchmark.h>

#include <vector>

#include "exec/runtime/offload/host_adam.hpp"

namespace {

void BM_HostAdam(benchmark::State& st) {
  const long n = st.range(0);
  const int threads = (int)st.range(1);
  std::vector<float> p(n, 0.5f), g(n, 0.25f), m(n, 0.f), v(n, 0.f);
  long t = 0;
  for (auto _ : st) {
    tp::exec::host_adamw(p.data(), g.data(), m.data(), v.data(), n, 1e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, ++t, 1.f, threads);
    benchmark::DoNotOptimize(p.data());
  }
  st.counters["params/s"] = benchmark::Counter((double)n * (double)st.iterations(), benchmark::Counter::kIsRate);
  st.counters["GB/s"] = benchmark::Counter(28.0 * (double)n * (double)st.iterations() / 1e9, benchmark::Counter::kIsRate);
}
BENCHMARK(BM_HostAdam)->ArgsProduct({{1L << 16, 1L << 20, 1L << 24}, {1, 2, 4}})->UseRealTime()->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
