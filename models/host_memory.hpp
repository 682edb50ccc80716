// host_memory: how much memory this process may still allocate, and the check every command makes before a
// large allocation (issue 14: estimate the memory a command needs and refuse with exit 2 instead of bad_alloc or
// the OOM killer). Invariant: an unknown limit never refuses (the estimate only stops what surely cannot fit).
#pragma once
#include <string>

namespace tp {

// Bytes this process may still allocate: the smaller of the kernel's MemAvailable and what the address-space
// (ulimit -v) and data-segment limits leave above the current size. A negative value when nothing is known.
double available_memory_bytes();

// Throws InputError (exit 2) "<what> needs about X GB of memory; this machine has Y GB available" when
// need_bytes exceeds available_memory_bytes().
void require_memory(const std::string& what, double need_bytes);

// "12.3 GB" (decimal gigabytes, 3 significant digits) for messages.
std::string gigabytes_text(double bytes);

}  // namespace tp
