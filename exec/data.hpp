// Forwards to exec/io/data.hpp, where the header now lives (issue 40's layout). Kept only because
// tests/cli/ still includes exec/data.hpp; delete it once it includes the new path.
#pragma once
#include "exec/io/data.hpp"
