// Forwards to exec/io/checkpoint.hpp, where the header now lives (issue 40's layout). Kept only because
// cli/ and tests/cli/ still include exec/checkpoint.hpp; delete it once they include the new path.
#pragma once
#include "exec/io/checkpoint.hpp"
