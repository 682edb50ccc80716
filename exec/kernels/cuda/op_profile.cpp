// op_profile: see op_profile.hpp. Plain C++ over the CUDA runtime API (inside libtrainplan_cuda.so).
#include "exec/kernels/cuda/op_profile.hpp"

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "exec/kernels/cuda/backend_cuda_parts.hpp"

namespace tp::cuda::prof {
namespace {

struct Row {
  bool started = false;  // its first call was seen (and left out: kept in ProfState::first)
  long calls = 0;
  double ms = 0;
  double host_ms = 0;  // host time inside the op call (launches, cuBLASLt setup, waits)
};
struct Pending {
  std::string key;
  bool first = false;  // the first call of its row
  cudaEvent_t start = nullptr, stop = nullptr;
  std::chrono::steady_clock::time_point host0;
};

struct ProfState {
  bool on = false;
  std::string file;                // "" = stderr
  int depth = 0;                   // nesting of OpTimers on the (one) host thread that issues ops
  std::vector<Pending> pending;    // recorded, not yet read
  std::vector<cudaEvent_t> spare;  // event pool
  std::map<std::string, Row> rows;
  Row first;  // every row's first call together: one-time costs (heuristics, tuning, kernel module loading)
} s;

constexpr size_t kMaxPending = 4096;

cudaEvent_t take_event() {
  if (!s.spare.empty()) {
    cudaEvent_t e = s.spare.back();
    s.spare.pop_back();
    return e;
  }
  cudaEvent_t e = nullptr;
  check(cudaEventCreate(&e), "creating a profiling event");
  return e;
}

void drain() {
  if (s.pending.empty()) return;
  check(cudaEventSynchronize(s.pending.back().stop), "reading the op profile's events");
  for (Pending& p : s.pending) {
    float ms = 0;
    if (cudaEventElapsedTime(&ms, p.start, p.stop) == cudaSuccess) {
      Row& r = p.first ? s.first : s.rows[p.key];
      r.calls += 1;
      r.ms += ms;
    } else {
      cudaGetLastError();
    }
    s.spare.push_back(p.start);
    s.spare.push_back(p.stop);
  }
  s.pending.clear();
}

void report_at_exit() {
  try {
    const std::string t = report();
    if (s.file.empty()) {
      std::fputs(t.c_str(), stderr);
    } else if (FILE* f = std::fopen(s.file.c_str(), "w")) {
      std::fputs(t.c_str(), f);
      std::fclose(f);
    } else {
      std::fprintf(stderr, "cuda: cannot write the op profile to %s\n", s.file.c_str());
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cuda: op profile not written: %s\n", e.what());
  }
}

}  // namespace

void init_from_env() {
  const char* v = std::getenv("TP_CUDA_PROFILE");
  if (!v || !*v || std::string(v) == "0") return;
  s.on = true;
  s.file = std::string(v) == "1" ? "" : v;
  std::atexit(report_at_exit);  // after the CUDA runtime's own exit handler was registered: runs before it
}

bool enabled() { return s.on; }

OpTimer::OpTimer(const char* name, std::initializer_list<std::pair<const char*, long>> shape) {
  if (!s.on || s.depth++ > 0) return;
  on_ = true;
  if (s.pending.size() >= kMaxPending) drain();
  Pending p;
  p.key = name;
  if (p.key.rfind("matmul", 0) == 0 || p.key.rfind("linear", 0) == 0 || p.key.rfind("attention", 0) == 0) {
    std::string d;
    for (const auto& [n, v] : shape) d += (d.empty() ? "" : ", ") + std::string(n) + " " + std::to_string(v);
    p.key += " (" + d + ")";
  }
  Row& row = s.rows[p.key];
  p.first = !row.started;
  row.started = true;
  p.start = take_event();
  p.stop = take_event();
  check(cudaEventRecord(p.start, g.stream), "recording a profiling event");
  p.host0 = std::chrono::steady_clock::now();
  s.pending.push_back(std::move(p));
  slot_ = int(s.pending.size()) - 1;
}

OpTimer::~OpTimer() {
  if (!s.on) return;
  --s.depth;
  if (!on_) return;
  Pending& p = s.pending[size_t(slot_)];
  cudaEventRecord(p.stop, g.stream);  // (a destructor: an error shows at the next read)
  (p.first ? s.first : s.rows[p.key]).host_ms +=
      1e3 * std::chrono::duration<double>(std::chrono::steady_clock::now() - p.host0).count();
}

std::string report() {
  drain();
  std::vector<std::pair<std::string, Row>> v(s.rows.begin(), s.rows.end());
  double total = 0;
  for (const auto& [k, r] : v) total += r.ms;
  std::sort(v.begin(), v.end(), [](const auto& a, const auto& b) { return a.second.ms > b.second.ms; });
  std::string out = "cuda op profile (GPU time between events around each op, every call but each row's first; host "
                    "ms: time the host spent inside the op's call)\n";
  char line[512];
  std::snprintf(line, sizeof line, "| %-72s | %7s | %9s | %8s | %6s | %11s |\n", "op", "calls", "total ms", "mean us",
                "share", "host ms");
  out += line;
  out += "|" + std::string(74, '-') + "|---------|-----------|----------|--------|-------------|\n";
  double host = 0;
  for (const auto& [k, r] : v) {
    std::snprintf(line, sizeof line, "| %-72s | %7ld | %9.3f | %8.1f | %5.1f%% | %11.3f |\n", k.c_str(), r.calls, r.ms,
                  1e3 * r.ms / double(std::max(1L, r.calls)), total > 0 ? 100 * r.ms / total : 0.0, r.host_ms);
    out += line;
    host += r.host_ms;
  }
  std::snprintf(line, sizeof line, "| %-72s | %7s | %9.3f | %8s | %6s | %11.3f |\n", "total", "", total, "", "100%", host);
  out += line;
  std::snprintf(line, sizeof line, "| %-72s | %7ld | %9.3f | %8s | %6s | %11.3f |\n",
                "(left out: each row's first call, one-time costs)", s.first.calls, s.first.ms, "", "", s.first.host_ms);
  out += line;
  return out;
}

}  // namespace tp::cuda::prof
