// rss: the process's resident memory from /proc. See rss.hpp.
#include "exec/prof/rss.hpp"

#include <sys/resource.h>
#include <unistd.h>

#include <cstdio>

namespace tp::exec::detail {

double rss_bytes() {
  long pages = 0, resident = 0;
  if (std::FILE* fp = std::fopen("/proc/self/statm", "r")) {
    if (std::fscanf(fp, "%ld %ld", &pages, &resident) != 2) resident = 0;
    std::fclose(fp);
  }
  return (double)resident * (double)sysconf(_SC_PAGESIZE);
}

double peak_rss_bytes() {
  // VmHWM (resettable: reset_peak_rss), else getrusage's maximum of the process's lifetime.
  std::FILE* f = std::fopen("/proc/self/status", "r");
  char line[256];
  double kb = -1;
  while (f && std::fgets(line, sizeof line, f))
    if (std::sscanf(line, "VmHWM: %lf kB", &kb) == 1) break;
  if (f) std::fclose(f);
  if (kb >= 0) return kb * 1024.0;
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return (double)ru.ru_maxrss * 1024.0;
}

bool reset_peak_rss() {
  std::FILE* f = std::fopen("/proc/self/clear_refs", "w");
  if (!f) return false;
  const bool ok = std::fputs("5", f) >= 0;
  return std::fclose(f) == 0 && ok;
}

}  // namespace tp::exec::detail
