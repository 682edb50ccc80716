// report: `trainplan report` (docs/reports.md). The library, one job per file:
//   svg      drawing primitives, units, ticks, the colour-blind-safe palette (deterministic SVG text)
//   charts   stacked bars, line / scatter charts, the Gantt timeline
//   spec     the report spec: exact key validation with JSON paths, overrides and sweeps of scenarios
//   evaluate simulating / planning every run point, quantities and checks, key numbers of a result
//   figures  the figure kinds (breakdown, memory, timeline, sweep, scaling, pareto) from results
//   render_* report.md, report.html (self-contained), data.json, data.csv
//   report   the command line, the ad-hoc spec of scenario files, the all-or-nothing write of DIR
#pragma once
#include <string>
#include <vector>

namespace tp {

// The `report` subcommand: args are what follows "report" on the command line. Returns the exit code
// (0 written, 2 bad input or usage, nothing written).
int report_main(const std::vector<std::string>& args);

}  // namespace tp
