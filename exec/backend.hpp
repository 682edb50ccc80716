// Forwards to exec/backends/backend.hpp, where the header now lives (issue 40's layout). Kept only because
// cli/ still includes exec/backend.hpp; delete it once it includes the new path.
#pragma once
#include "exec/backends/backend.hpp"
