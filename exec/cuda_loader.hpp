// Forwards to exec/backends/cuda/cuda_loader.hpp, where the header now lives (issue 40's layout). Kept only because
// cli/ still includes exec/cuda_loader.hpp; delete it once it includes the new path.
#pragma once
#include "exec/backends/cuda/cuda_loader.hpp"
