// rss: the process's resident-memory high-water mark (Linux VmHWM) and its restart, for the runs' peak host memory
// (runtime_step.cpp) and validate's machine-speed probe (validate.cpp keeps the probe's operands out of the
// figure). Defined in runtime_state.cpp.
#pragma once

namespace tp::exec::detail {

double peak_rss_bytes();  // the process's resident high-water mark (Linux VmHWM; getrusage's maximum without it)
bool reset_peak_rss();    // restarts that mark from the resident memory now (/proc/self/clear_refs "5"); false: could not

}  // namespace tp::exec::detail
