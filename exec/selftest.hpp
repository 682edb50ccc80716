// Forwards to exec/selftest/selftest.hpp, where the header now lives (issue 40's layout). Kept only because
// cli/ still includes exec/selftest.hpp; delete it once it includes the new path.
#pragma once
#include "exec/selftest/selftest.hpp"
