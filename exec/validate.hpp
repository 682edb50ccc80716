// Forwards to exec/measure/validate.hpp, where the header now lives (issue 40's layout). Kept only because
// cli/ still includes exec/validate.hpp; delete it once it includes the new path.
#pragma once
#include "exec/measure/validate.hpp"
