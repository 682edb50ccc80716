// rss: the one reader of this process's resident memory from /proc (issue 40): the resident set now (the
// runtime's trace memory counter, trace_recorder.hpp Recorder; validate's probe), its high-water mark (Linux
// VmHWM, the runs' peak host memory, runtime_step.cpp) and that mark's restart (validate keeps its machine-speed
// probe's operands out of the figure). Pages are counted in sysconf(_SC_PAGESIZE) bytes. Defined in rss.cpp.
#pragma once

namespace tp::exec::detail {

double rss_bytes();       // resident memory now (/proc/self/statm's resident pages); 0 when it cannot be read
double peak_rss_bytes();  // the process's resident high-water mark (Linux VmHWM; getrusage's maximum without it)
bool reset_peak_rss();    // restarts that mark from the resident memory now (/proc/self/clear_refs "5"); false: could not

}  // namespace tp::exec::detail
