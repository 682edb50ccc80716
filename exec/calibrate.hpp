// Forwards to exec/measure/calibrate.hpp, where the header now lives (issue 40's layout). Kept only because
// cli/ still includes exec/calibrate.hpp; delete it once it includes the new path.
#pragma once
#include "exec/measure/calibrate.hpp"
