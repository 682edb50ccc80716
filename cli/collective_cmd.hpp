// collective_cmd: `trainplan collective` (see collective_cmd.cpp).
#pragma once

namespace tp {

int cmd_collective(int argc, char** argv);

}  // namespace tp
