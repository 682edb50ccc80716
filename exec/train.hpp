// Forwards to exec/runtime/train.hpp, where the header now lives (issue 40's layout). Kept only because
// cli/, tests/sim/ and tests/models/ still include exec/train.hpp; delete it once they include the new path.
#pragma once
#include "exec/runtime/train.hpp"
