// svg: the drawing primitives and axis arithmetic under the report figures (charts.hpp draws the charts).
// Invariants: output is deterministic — the same calls give byte-identical SVG (every number goes through
// num(), fixed precision, no locale, no clock, no addresses); text is XML-escaped; font sizes are >= 11 px.
// Units: an axis picks one display unit for all its ticks (e.g. "ms", "GiB", "days") from the largest
// value it shows, so tick labels are short numbers and the unit is in the axis label.
#pragma once
#include <string>
#include <vector>

namespace tp::svg {

// What a value measures; decides its display unit and number format.
enum class Unit { count, seconds, bytes, fraction, usd };

// Fixed-precision number ("%.*f") without trailing zeros and without "-0".
std::string num(double v, int decimals = 2);
std::string xml_escape(const std::string& s);

// A human rendering of one value: "12.3 ms", "61.2 GiB", "3.4 days", "41.5 %", "$1.23M", "1.5k".
std::string human(double v, Unit u);

// One display unit for an axis: values are divided by `scale`; `suffix` names the unit ("" for none).
struct Scale { double scale = 1; std::string suffix; };
Scale pick_scale(double max_abs, Unit u);

// Axis ticks in display units (already divided by the scale).
struct Ticks {
  std::vector<double> values;      // display units, ascending
  std::vector<std::string> labels;
  double lo = 0, hi = 1;           // axis range in display units (linear: rounded out to ticks)
};
// Linear ticks covering [lo, hi] with about `target` steps of 1, 2, 2.5 or 5 x 10^k.
Ticks nice_ticks(double lo, double hi, int target = 5);
// Log ticks over [lo, hi] (both > 0): powers of two when base2, else 1-2-5 or decades; at most ~9 labels.
Ticks log_ticks(double lo, double hi, bool base2);

// The fixed colour-blind-safe palette (Okabe–Ito plus greys) and the colour of each named category
// (breakdown, memory and timeline categories share names and colours across figures).
extern const char* const kSeries[8];
std::string category_colour(const std::string& name, int fallback_index);

// Estimated width in px of text at a font size (sans-serif average advance).
double text_width(const std::string& s, double font_px);

// Accumulates SVG elements; finish() wraps them in the root element with a white background.
struct Doc {
  double w, h;
  std::string body;
  Doc(double width, double height) : w(width), h(height) {}
  void rect(double x, double y, double width, double height, const std::string& fill,
            const std::string& extra = "");
  void line(double x1, double y1, double x2, double y2, const std::string& stroke, double width = 1,
            const std::string& extra = "");
  // anchor: "start", "middle" or "end"; rotate in degrees about (x, y).
  void text(double x, double y, const std::string& s, double size = 12, const std::string& anchor = "start",
            const std::string& extra = "", double rotate = 0);
  void raw(const std::string& s) { body += s; }
  std::string finish(const std::string& title) const;
};

// A legend laid out in rows across [x, x + width] starting at y; returns the height it used.
struct LegendItem { std::string label, colour; bool line = false; bool dashed = false; };
double legend_height(const std::vector<LegendItem>& items, double width);
double draw_legend(Doc& d, const std::vector<LegendItem>& items, double x, double y, double width);

// Marker shapes for line / scatter series (shape i % 4: circle, square, triangle, diamond).
void marker(Doc& d, int shape, double x, double y, const std::string& fill, const std::string& stroke, double r = 4);

}  // namespace tp::svg
