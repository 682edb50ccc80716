// report: `trainplan report` (docs/reports.md).
#pragma once
#include <string>
#include <vector>

namespace tp {

// The `report` subcommand: args are what follows "report" on the command line. Returns the exit code.
int report_main(const std::vector<std::string>& args);

}  // namespace tp
