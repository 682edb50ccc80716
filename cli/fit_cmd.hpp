// fit_cmd: `trainplan fit` (see fit_cmd.cpp).
#pragma once

namespace tp {

int cmd_fit(int argc, char** argv);

}  // namespace tp
