// host_memory: see host_memory.hpp. Linux: /proc/meminfo, /proc/self/statm and getrlimit.
#include "host_memory.hpp"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "json_check.hpp"

namespace tp {

namespace {

double mem_available_bytes() {
  std::ifstream f("/proc/meminfo");
  std::string key, unit;
  double kb = 0;
  while (f >> key >> kb) {
    std::getline(f, unit);
    if (key == "MemAvailable:") return kb * 1024.0;
  }
  return -1;
}

// The process's current virtual size (what RLIMIT_AS counts) in bytes.
double virtual_size_bytes() {
  std::ifstream f("/proc/self/statm");
  double pages = 0;
  if (!(f >> pages)) return 0;
  return pages * (double)sysconf(_SC_PAGESIZE);
}

double limit_left(int resource, double used) {
  rlimit rl{};
  if (getrlimit(resource, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY) return -1;
  return std::max(0.0, (double)rl.rlim_cur - used);
}

}  // namespace

double available_memory_bytes() {
  double best = mem_available_bytes();
  for (double x : {limit_left(RLIMIT_AS, virtual_size_bytes()), limit_left(RLIMIT_DATA, virtual_size_bytes())})
    if (x >= 0) best = best < 0 ? x : std::min(best, x);
  return best;
}

std::string gigabytes_text(double bytes) {
  char buf[32];
  double gb = bytes / 1e9;
  std::snprintf(buf, sizeof buf, gb >= 100 ? "%.0f GB" : gb >= 10 ? "%.1f GB" : "%.2f GB", gb);
  return buf;
}

void require_memory(const std::string& what, double need_bytes) {
  double have = available_memory_bytes();
  if (have < 0 || need_bytes <= have) return;
  throw InputError({what + " needs about " + gigabytes_text(need_bytes) + " of memory; this machine has " +
                    gigabytes_text(have) + " available"});
}

}  // namespace tp
