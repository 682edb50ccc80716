// figures: the report's figure kinds (docs/reports.md) as SVG — breakdown (stacked step time per run),
// memory (stacked peak memory per run against the GPU's capacity), timeline (one simulated step: per
// pipeline stage a compute lane and its communication lanes), sweep (a metric against a sweep's x), scaling
// (time-to-train against GPUs from a plan run's by_gpus) and pareto (a plan run's Pareto front).
// Invariants: every figure function but the timeline takes only JSON (the public simulate / plan outputs),
// so tests can draw them from fixtures; the timeline reads a Result's program and engine times; a timeline
// shows at most 16 pipeline stages (evenly chosen, the first and last included) and says so in its note.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "charts.hpp"
#include "evaluate.hpp"

namespace tp::report {

struct Figure {
  std::string file;     // relative to the report folder: "figures/01-breakdown.svg"
  std::string title;    // also the alt text and caption
  std::string svg;
};

// (label, simulate --json result) per bar.
using Labelled = std::vector<std::pair<std::string, json>>;
std::string breakdown_svg(const Labelled& bars, const std::string& title);
std::string memory_svg(const Labelled& bars, const std::string& title);
// One simulated step of a Result: lanes per stage, slices coloured by forward / backward / recompute /
// optimizer / communication kind.
svg::Gantt timeline_chart(const Result& r, const std::string& title);
std::string timeline_svg(const Result& r, const std::string& title);
// A metric (JSON pointer into each point's simulate --json result) against x.
std::string sweep_svg(const std::vector<double>& x, const std::vector<json>& results, const std::string& metric,
                      const std::string& x_label, const std::string& title);
std::string scaling_svg(const json& plan_result, const std::string& title);
std::string pareto_svg(const json& plan_result, const std::string& title);

// A unit and a readable axis label for a metric pointer ("/memory/peak_bytes_per_gpu" -> bytes,
// "peak bytes per gpu").
std::pair<svg::Unit, std::string> metric_unit(const std::string& pointer);

// Every figure of the spec, in spec order, with files "figures/NN-kind[-run].svg".
std::vector<Figure> make_figures(const Spec& spec, const std::vector<RunOut>& runs);

}  // namespace tp::report
