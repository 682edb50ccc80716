// comm_classed: a communicator whose every call is timed into one of prof's classes (tp_comm, pp_comm,
// dp_comm; exec/prof/prof.hpp), so that `trainplan validate` splits communication time by the group it ran on.
#pragma once
#include <memory>

#include "exec/comm/comm.hpp"
#include "exec/prof/prof.hpp"

namespace tp::exec::prof {

// A communicator whose every call is timed as class `c` (and whose sub-communicators from split() inherit it).
// Null in, null out (split() with color < 0).
std::unique_ptr<Comm> classed(std::unique_ptr<Comm> inner, Cls c);

}  // namespace tp::exec::prof
