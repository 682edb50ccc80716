// charts: the three chart types of the report figures, drawn with svg.hpp — stacked bars (horizontal or
// vertical, with an optional per-bar reference marker such as the GPU's memory capacity), line / scatter
// charts (linear or log axes, reference lines, labelled points) and a Gantt timeline (lanes x time).
// Invariants: legends sit outside the plot area (between the title and the plot), so they never cover
// data; every axis shows its unit; point labels that would overlap an earlier label are dropped rather
// than drawn on top of each other; output is deterministic (svg.hpp).
#pragma once
#include <cmath>
#include <string>
#include <vector>

#include "svg.hpp"

namespace tp::svg {

struct Bar {
  std::string label;
  std::vector<double> values;   // one per category (stack order)
  double marker = NAN;          // a reference value drawn across this bar (e.g. its GPU's capacity)
  std::string note;             // appended to the total label ("does not fit")
};

struct BarChart {
  std::string title, value_label;          // value_label: the value axis ("step time"); the unit is added
  Unit unit = Unit::seconds;
  bool horizontal = true;
  std::vector<std::string> categories;     // names (they pick the colour, category_colour)
  std::vector<std::string> category_labels;  // legend text, one per category
  std::vector<Bar> bars;
  std::string marker_label;                // legend text of the markers ("GPU memory capacity")
  double width = 820;
};
std::string bar_chart(const BarChart& c);

struct Series {
  std::string name;
  std::vector<double> x, y;
  std::vector<std::string> point_labels;   // optional, one per point ("" = none)
  std::vector<bool> hollow;                // optional, one per point: drawn as an open marker
  bool lines = true, dashed = false, markers = true;
  std::string colour;                      // empty: the palette colour of the series' index
};

struct RefLine { double y; std::string label; };

struct LineChart {
  std::string title, x_label, y_label;     // units are appended to the axis labels
  Unit x_unit = Unit::count, y_unit = Unit::seconds;
  bool log_x = false, log_y = false, base2_x = false;
  std::vector<Series> series;
  std::vector<RefLine> ref_lines;          // horizontal dashed lines (e.g. GPU capacity)
  std::string hollow_label;                // legend text for open markers ("does not fit")
  std::string note;                        // one line under the chart
  double width = 820, height = 460;
};
std::string line_chart(const LineChart& c);

struct Lane { std::string label; bool group_start = false; };  // group_start: first lane of a stage
struct Slice { int lane; double t0, t1; int cat; std::string label = ""; };  // label: drawn inside when it fits

struct Gantt {
  std::string title, note;
  std::vector<Lane> lanes;
  std::vector<Slice> slices;
  std::vector<std::string> categories, category_labels;  // names pick colours; labels go in the legend
  double t_end = 0;                                       // seconds
  double width = 1040;
};
std::string gantt_chart(const Gantt& g);

}  // namespace tp::svg
