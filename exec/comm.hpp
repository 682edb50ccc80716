// Forwards to exec/comm/comm.hpp, where the header now lives (issue 40's layout). Kept only because
// cli/ still includes exec/comm.hpp; delete it once it includes the new path.
#pragma once
#include "exec/comm/comm.hpp"
