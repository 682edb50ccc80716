// charts: see charts.hpp. Layout is computed top-down: title, legend rows (their height is measured first),
// then the plot area, then axes; the document height follows from the content, so nothing overlaps.
#include "charts.hpp"

#include <algorithm>
#include <functional>
#include <cmath>

namespace tp::svg {

namespace {

constexpr double kMargin = 16, kTitleY = 26, kLegendY = 38;
const char* kGrid = "#E3E3E3";
const char* kAxis = "#444444";
const char* kHalo = "stroke=\"#FFFFFF\" stroke-width=\"3\" paint-order=\"stroke\"";

// Draws the title, wrapped at spaces to the document width; returns where the legend starts.
double title(Doc& d, const std::string& t) {
  const double avail = d.w - 2 * kMargin, bold = 16 * 1.08;
  std::vector<std::string> lines(1);
  std::string word;
  auto flush = [&] {
    std::string cand = lines.back().empty() ? word : lines.back() + " " + word;
    if (!lines.back().empty() && text_width(cand, bold) > avail) lines.push_back(word);
    else lines.back() = cand;
    word.clear();
  };
  for (char ch : t + " ") {
    if (ch == ' ') { if (!word.empty()) flush(); }
    else word += ch;
  }
  for (size_t i = 0; i < lines.size(); ++i)
    d.text(kMargin, kTitleY + 20 * (double)i, lines[i], 16, "start", "font-weight=\"bold\"");
  return kLegendY + 20 * (double)(lines.size() - 1);
}

std::string with_unit(const std::string& label, const Scale& s) {
  return s.suffix.empty() ? label : label + " (" + s.suffix + ")";
}

// Cuts a label to fit `px` at 12 px, ending it with an ellipsis.
std::string fit_label(const std::string& s, double px, double font = 12) {
  if (text_width(s, font) <= px) return s;
  std::string o;
  for (size_t i = 0; i < s.size(); ++i) {
    if ((static_cast<unsigned char>(s[i]) & 0xC0) != 0x80 && text_width(o + "…", font) > px - font * 0.62) break;
    o += s[i];
  }
  while (!o.empty() && (static_cast<unsigned char>(o.back()) & 0xC0) == 0x80) o.pop_back();
  if (!o.empty() && (static_cast<unsigned char>(o.back()) & 0xC0) == 0xC0) o.pop_back();
  return o + "…";
}

// A label in at most two lines of `px` each: split at the space nearest the middle that lets the first line fit
// (each line then cut with an ellipsis only if it still does not fit). One line when it fits.
std::vector<std::string> wrap_label(const std::string& s, double px, double font = 12) {
  if (text_width(s, font) <= px) return {s};
  size_t best = std::string::npos;
  for (size_t i = s.find(' '); i != std::string::npos; i = s.find(' ', i + 1))
    if (text_width(s.substr(0, i), font) <= px) best = i;
  if (best == std::string::npos) return {fit_label(s, px, font)};
  return {s.substr(0, best), fit_label(s.substr(best + 1), px, font)};
}

void rect_tip(Doc& d, double x, double y, double w, double h, const std::string& fill, const std::string& tip) {
  d.raw("<rect x=\"" + num(x) + "\" y=\"" + num(y) + "\" width=\"" + num(std::max(w, 0.0)) + "\" height=\"" +
        num(std::max(h, 0.0)) + "\" fill=\"" + fill + "\" stroke=\"#FFFFFF\" stroke-width=\"0.75\"><title>" +
        xml_escape(tip) + "</title></rect>\n");
}

// A numeric axis over display values, mapped onto pixels [p0, p1] (p1 < p0 for a vertical axis).
struct Axis {
  Scale sc;
  Ticks t;
  bool log = false;
  double lo = 0, hi = 1, p0 = 0, p1 = 1;
  double px(double v_raw) const {
    double v = v_raw / sc.scale;
    double f = log ? (std::log10(std::max(v, 1e-300)) - std::log10(lo)) / (std::log10(hi) - std::log10(lo))
                   : (v - lo) / (hi - lo);
    return p0 + f * (p1 - p0);
  }
};

// Builds an axis over raw values. Linear axes start at zero when `from_zero` and all values are >= 0.
Axis make_axis(const std::vector<double>& raw, Unit u, bool log, bool base2, bool from_zero, double pad) {
  Axis a;
  a.log = log;
  double mn = INFINITY, mx = -INFINITY;
  for (double v : raw)
    if (std::isfinite(v) && (!log || v > 0)) { mn = std::min(mn, v); mx = std::max(mx, v); }
  if (!std::isfinite(mn)) { mn = log ? 1 : 0; mx = 1; }
  a.sc = pick_scale(std::max(std::fabs(mn), std::fabs(mx)), u);
  mn /= a.sc.scale;
  mx /= a.sc.scale;
  if (log) {
    a.t = log_ticks(mn, mx, base2);
    double f = std::pow(a.t.hi / a.t.lo, pad);
    a.lo = a.t.lo / f;
    a.hi = a.t.hi * f;
  } else {
    if (from_zero && mn >= 0) mn = 0;
    a.t = nice_ticks(mn, mx, 5);
    double span = a.t.hi - a.t.lo;
    a.lo = a.t.lo - (from_zero && mn == 0 ? 0 : span * pad);
    a.hi = a.t.hi + span * pad;
  }
  return a;
}

}  // namespace

std::string bar_chart(const BarChart& c) {
  const double W = c.width;
  Doc d(W, 100);
  const double ly = title(d, c.title);
  std::vector<LegendItem> legend;
  std::vector<bool> used(c.categories.size(), false);
  double vmax = 0;
  bool any_marker = false;
  for (const Bar& b : c.bars) {
    double tot = 0;
    for (size_t k = 0; k < b.values.size() && k < used.size(); ++k) {
      tot += b.values[k];
      if (b.values[k] > 0) used[k] = true;
    }
    vmax = std::max(vmax, tot);
    if (std::isfinite(b.marker)) { vmax = std::max(vmax, b.marker); any_marker = true; }
  }
  for (size_t k = 0; k < c.categories.size(); ++k)
    if (used[k]) legend.push_back({c.category_labels[k], category_colour(c.categories[k], (int)k)});
  if (any_marker) legend.push_back({c.marker_label, "#000000", true, true});
  double lh = legend_height(legend, W - 2 * kMargin);
  draw_legend(d, legend, kMargin, ly, W - 2 * kMargin);
  const double top = ly + lh + 14;
  Scale sc = pick_scale(vmax, c.unit);
  Ticks t = nice_ticks(0, vmax > 0 ? vmax / sc.scale : 1, 5);
  auto total_text = [&](const Bar& b) {
    double tot = 0;
    for (double v : b.values) tot += v;
    return human(tot, c.unit) + (b.note.empty() ? "" : " — " + b.note);
  };
  const size_t n = c.bars.size();
  if (c.horizontal) {
    double labw = 40, totw = 60;
    for (const Bar& b : c.bars) {
      labw = std::max(labw, text_width(b.label, 12));
      totw = std::max(totw, text_width(total_text(b), 12) + 14);
    }
    labw = std::min(labw, W * 0.3);
    totw = std::min(totw, W * 0.3);
    const double left = kMargin + labw + 10, right = W - totw, slot = 36, bh = 24;
    const double ph = slot * (double)std::max<size_t>(n, 1), bottom = top + ph;
    auto X = [&](double raw) { return left + raw / sc.scale / t.hi * (right - left); };
    for (size_t i = 0; i < t.values.size(); ++i) {
      double x = left + t.values[i] / t.hi * (right - left);
      d.line(x, top, x, bottom, kGrid);
      d.text(x, bottom + 16, t.labels[i], 12, "middle");
    }
    d.line(left, bottom, right, bottom, kAxis);
    d.line(left, top, left, bottom, kAxis);
    d.text((left + right) / 2, bottom + 36, with_unit(c.value_label, sc), 12, "middle");
    for (size_t i = 0; i < n; ++i) {
      const Bar& b = c.bars[i];
      double y = top + slot * (double)i + (slot - bh) / 2, x = left;
      const std::vector<std::string> lines = wrap_label(b.label, labw);
      for (size_t li = 0; li < lines.size(); ++li)  // one line centred on the bar, or two around its middle
        d.text(left - 8, y + bh / 2 + 4 + (lines.size() == 1 ? 0.0 : (li == 0 ? -7.0 : 7.0)), lines[li], 12, "end");
      for (size_t k = 0; k < b.values.size() && k < c.categories.size(); ++k) {
        if (!(b.values[k] > 0)) continue;
        double w = X(b.values[k]) - left;
        rect_tip(d, x, y, w, bh, category_colour(c.categories[k], (int)k),
                 b.label + ": " + c.category_labels[k] + " " + human(b.values[k], c.unit));
        x += w;
      }
      double lx = x + 6;
      if (std::isfinite(b.marker)) {
        double mx = X(b.marker);
        d.line(mx, y - 5, mx, y + bh + 5, "#000000", 2, "stroke-dasharray=\"4 3\"");
        if (mx >= x - 2 && mx <= lx + text_width(total_text(b), 12)) lx = mx + 6;
      }
      d.text(lx, y + bh / 2 + 4, fit_label(total_text(b), std::max(40.0, W - 4 - lx)));  // never past the edge
    }
    d.h = bottom + 50;
  } else {
    double ticw = 0, labw = 0;
    for (auto& l : t.labels) ticw = std::max(ticw, text_width(l, 12));
    for (const Bar& b : c.bars) labw = std::max(labw, text_width(b.label, 12));
    bool notes = false;
    for (const Bar& b : c.bars) notes = notes || !b.note.empty();
    const double left = kMargin + 22 + ticw + 8, right = W - kMargin, ph = 300, bottom = top + (notes ? 38 : 24) + ph;
    const double slot = (right - left) / (double)std::max<size_t>(n, 1), bw = std::min(64.0, slot * 0.6);
    const bool rotate = labw > slot - 8;
    labw = std::min(labw, 220.0);
    auto Y = [&](double raw) { return bottom - raw / sc.scale / t.hi * ph; };
    for (size_t i = 0; i < t.values.size(); ++i) {
      double y = bottom - t.values[i] / t.hi * ph;
      d.line(left, y, right, y, kGrid);
      d.text(left - 6, y + 4, t.labels[i], 12, "end");
    }
    d.line(left, bottom, right, bottom, kAxis);
    d.line(left, bottom - ph, left, bottom, kAxis);
    d.text(kMargin + 10, bottom - ph / 2, with_unit(c.value_label, sc), 12, "middle", "", -90);
    for (size_t i = 0; i < n; ++i) {
      const Bar& b = c.bars[i];
      double cx = left + slot * ((double)i + 0.5), y = bottom;
      for (size_t k = 0; k < b.values.size() && k < c.categories.size(); ++k) {
        if (!(b.values[k] > 0)) continue;
        double h = bottom - Y(b.values[k]);
        rect_tip(d, cx - bw / 2, y - h, bw, h, category_colour(c.categories[k], (int)k),
                 b.label + ": " + c.category_labels[k] + " " + human(b.values[k], c.unit));
        y -= h;
      }
      // The total above the bar, and its note on a line above that; both move above a marker they would cross.
      const double block = b.note.empty() ? 14 : 28;
      double label_y = y - 6;
      if (std::isfinite(b.marker)) {
        double my = Y(b.marker);
        d.line(cx - slot * 0.42, my, cx + slot * 0.42, my, "#000000", 2, "stroke-dasharray=\"4 3\"");
        if (my <= y + 2 && my >= label_y - block) label_y = my - 6;
      }
      double tot = 0;
      for (double v : b.values) tot += v;
      d.text(cx, label_y, fit_label(human(tot, c.unit), slot - 4, 11), 11, "middle", kHalo);
      if (!b.note.empty()) d.text(cx, label_y - 14, fit_label(b.note, slot - 4, 11), 11, "middle", kHalo);
      if (rotate) d.text(cx + 4, bottom + 14, fit_label(b.label, labw), 12, "end", "", -30);
      else d.text(cx, bottom + 18, b.label, 12, "middle");
    }
    d.h = bottom + (rotate ? 24 + labw * 0.5 : 30) + 10;
  }
  return d.finish(c.title);
}

std::string line_chart(const LineChart& c) {
  const double W = c.width;
  Doc d(W, c.height);
  const double ly = title(d, c.title);
  std::vector<LegendItem> legend;
  bool any_hollow = false;
  std::vector<double> xs, ys;
  for (size_t i = 0; i < c.series.size(); ++i) {
    const Series& s = c.series[i];
    std::string col = s.colour.empty() ? kSeries[i % 8] : s.colour;
    if (!s.name.empty()) legend.push_back({s.name, col, !s.markers, s.dashed});
    xs.insert(xs.end(), s.x.begin(), s.x.end());
    ys.insert(ys.end(), s.y.begin(), s.y.end());
    for (bool h : s.hollow) any_hollow = any_hollow || h;
  }
  if (any_hollow && !c.hollow_label.empty()) legend.push_back({c.hollow_label + " (open marker)", "#FFFFFF"});
  for (const RefLine& r : c.ref_lines) ys.push_back(r.y);
  double lh = legend_height(legend, W - 2 * kMargin);
  draw_legend(d, legend, kMargin, ly, W - 2 * kMargin);
  const double top = ly + lh + 16;
  Axis ax = make_axis(xs, c.x_unit, c.log_x, c.base2_x, false, 0.04);
  Axis ay = make_axis(ys, c.y_unit, c.log_y, false, true, 0.05);
  double ticw = 0;
  for (auto& l : ay.t.labels) ticw = std::max(ticw, text_width(l, 12));
  const double left = kMargin + 22 + ticw + 8, right = W - 24;
  const double bottom = c.height - 52 - (c.note.empty() ? 0 : 18);
  ax.p0 = left; ax.p1 = right;
  ay.p0 = bottom; ay.p1 = top;
  for (size_t i = 0; i < ay.t.values.size(); ++i) {
    double y = ay.px(ay.t.values[i] * ay.sc.scale);
    d.line(left, y, right, y, kGrid);
    d.text(left - 6, y + 4, ay.t.labels[i], 12, "end");
  }
  for (size_t i = 0; i < ax.t.values.size(); ++i) {
    double x = ax.px(ax.t.values[i] * ax.sc.scale);
    d.line(x, top, x, bottom, kGrid);
    d.text(x, bottom + 17, ax.t.labels[i], 12, "middle");
  }
  d.line(left, bottom, right, bottom, kAxis);
  d.line(left, top, left, bottom, kAxis);
  d.text((left + right) / 2, bottom + 38, with_unit(c.x_label, ax.sc) + (c.log_x ? ", log scale" : ""), 12, "middle");
  d.text(kMargin + 10, (top + bottom) / 2, with_unit(c.y_label, ay.sc) + (c.log_y ? ", log scale" : ""), 12,
         "middle", "", -90);
  if (!c.note.empty()) d.text(kMargin, c.height - 12, c.note, 11, "start", "fill=\"#555555\"");
  struct Box { double x0, y0, x1, y1; bool soft = false; };  // soft: a line, ignored by the fallback pass
  std::vector<Box> taken;
  for (const RefLine& r : c.ref_lines) {
    double y = ay.px(r.y);
    d.line(left, y, right, y, "#555555", 1.5, "stroke-dasharray=\"6 4\"");
    double w = text_width(r.label, 11);
    d.text(right - 4, y - 5, r.label, 11, "end", kHalo);
    taken.push_back({right - 4 - w, y - 16, right - 4, y - 2});
  }
  for (size_t i = 0; i < c.series.size(); ++i)  // markers and lines are obstacles for labels
    for (size_t k = 0; k < c.series[i].x.size(); ++k) {
      double x = ax.px(c.series[i].x[k]), y = ay.px(c.series[i].y[k]);
      taken.push_back({x - 5, y - 5, x + 5, y + 5});
      if (!c.series[i].lines || k == 0) continue;
      double x0 = ax.px(c.series[i].x[k - 1]), y0 = ay.px(c.series[i].y[k - 1]);
      int steps = (int)std::ceil(std::hypot(x - x0, y - y0) / 6);
      for (int j = 1; j < steps; ++j) {
        double f = (double)j / steps, px = x0 + f * (x - x0), py = y0 + f * (y - y0);
        taken.push_back({px - 2, py - 2, px + 2, py + 2, true});
      }
    }
  auto free_box = [&](const Box& b, bool over_lines) {
    if (b.x0 < left + 2 || b.x1 > right - 2 || b.y0 < top || b.y1 > bottom - 2) return false;
    for (const Box& o : taken)
      if (!(over_lines && o.soft) && b.x0 < o.x1 && o.x0 < b.x1 && b.y0 < o.y1 && o.y0 < b.y1) return false;
    return true;
  };
  for (size_t i = 0; i < c.series.size(); ++i) {
    const Series& s = c.series[i];
    std::string col = s.colour.empty() ? kSeries[i % 8] : s.colour;
    if (s.lines && s.x.size() >= 2) {
      std::string pts;
      for (size_t k = 0; k < s.x.size(); ++k) {
        if (k) pts += ' ';
        pts += num(ax.px(s.x[k]));
        pts += ',';
        pts += num(ay.px(s.y[k]));
      }
      d.raw("<polyline points=\"" + pts + "\" fill=\"none\" stroke=\"" + col + "\" stroke-width=\"2\"" +
            (s.dashed ? " stroke-dasharray=\"6 4\"" : "") + "/>\n");
    }
    if (s.markers)
      for (size_t k = 0; k < s.x.size(); ++k) {
        bool hollow = k < s.hollow.size() && s.hollow[k];
        marker(d, (int)i, ax.px(s.x[k]), ay.px(s.y[k]), hollow ? "#FFFFFF" : col, col);
      }
  }
  for (size_t i = 0; i < c.series.size(); ++i) {
    const Series& s = c.series[i];
    for (size_t k = 0; k < s.point_labels.size() && k < s.x.size(); ++k) {
      const std::string& l = s.point_labels[k];
      if (l.empty()) continue;
      double x = ax.px(s.x[k]), y = ay.px(s.y[k]), w = text_width(l, 11);
      struct Cand { double dx, dy; const char* anchor; Box b; };
      Cand cands[] = {{8, -8, "start", {x + 8, y - 19, x + 8 + w, y - 5}},
                      {-8, -8, "end", {x - 8 - w, y - 19, x - 8, y - 5}},
                      {8, 16, "start", {x + 8, y + 5, x + 8 + w, y + 19}},
                      {-8, 16, "end", {x - 8 - w, y + 5, x - 8, y + 19}},
                      {0, -11, "middle", {x - w / 2, y - 22, x + w / 2, y - 8}},
                      {0, 21, "middle", {x - w / 2, y + 10, x + w / 2, y + 24}},
                      {8, -22, "start", {x + 8, y - 33, x + 8 + w, y - 19}},
                      {-8, -22, "end", {x - 8 - w, y - 33, x - 8, y - 19}},
                      {8, 30, "start", {x + 8, y + 19, x + 8 + w, y + 33}},
                      {-8, 30, "end", {x - 8 - w, y + 19, x - 8, y + 33}}};
      bool placed = false;
      for (bool over_lines : {false, true})  // first away from lines, then (with a halo) across them
        for (const Cand& cd : cands)
          if (!placed && free_box(cd.b, over_lines)) {
            d.text(x + cd.dx, y + cd.dy, l, 11, cd.anchor, kHalo);
            taken.push_back(cd.b);
            placed = true;
          }
    }
  }
  return d.finish(c.title);
}

// The coloured runs of a Gantt chart: slices are drawn per 1 px column; each column takes the category covering
// most of it, and is drawn when it is at least half covered or holds a whole (sub-pixel) slice; runs of equal
// columns become one rect. This keeps a step of thousands of tasks a small file, and sub-pixel slices visible.
// A column where a second category covers at least kMixedShare of what is covered (1F1B's steady state with
// hundreds of micro-batches: forwards and backwards alternate below a pixel) is drawn split: the main category
// on top, the second below, in quarters of the lane, so the phases keep their colours.
struct GanttRun {
  int lane, col, end, cat;
  int cat2 = -1;         // the second category of a mixed column (-1: none)
  int quarters = 4;      // the main category's share of the lane height, in quarters (2 or 3 when mixed)
};
constexpr double kMixedShare = 0.2;
static std::vector<GanttRun> gantt_runs(const Gantt& g, int ncol, const std::function<double(double)>& colx) {
  const int ncat = std::max<int>(1, (int)g.categories.size());
  std::vector<std::vector<int>> by_lane(g.lanes.size());
  for (size_t i = 0; i < g.slices.size(); ++i)
    if (g.slices[i].lane >= 0 && g.slices[i].lane < (int)g.lanes.size()) by_lane[g.slices[i].lane].push_back((int)i);
  std::vector<double> cov((size_t)ncol * ncat);
  std::vector<char> whole(ncol);
  std::vector<GanttRun> runs;
  for (size_t ln = 0; ln < g.lanes.size(); ++ln) {
    std::fill(cov.begin(), cov.end(), 0.0);
    std::fill(whole.begin(), whole.end(), 0);
    for (int i : by_lane[ln]) {
      const Slice& sl = g.slices[i];
      int cat = std::clamp(sl.cat, 0, ncat - 1);
      double x0 = std::clamp(colx(sl.t0), 0.0, (double)ncol), x1 = std::clamp(colx(sl.t1), 0.0, (double)ncol);
      if (x1 < x0) continue;
      int c0 = std::min((int)x0, ncol - 1), c1 = std::min((int)x1, ncol - 1);
      if (c0 == c1) whole[c0] = 1;
      for (int col = c0; col <= c1; ++col)
        cov[(size_t)col * ncat + cat] += std::min(x1, col + 1.0) - std::max(x0, (double)col);
    }
    auto colour_of = [&](int col) {
      GanttRun r{(int)ln, col, col + 1, -1};
      double bv = 0, sv = 0, tot = 0;
      int second = -1;
      for (int k = 0; k < ncat; ++k) {
        double v = cov[(size_t)col * ncat + k];
        tot += v;
        if (v > bv) { sv = bv; second = r.cat; bv = v; r.cat = k; }
        else if (v > sv) { sv = v; second = k; }
      }
      if (!(tot >= 0.5 || whole[col])) r.cat = -1;
      if (r.cat >= 0 && second >= 0 && sv >= kMixedShare * tot) {
        r.cat2 = second;
        r.quarters = bv >= 0.625 * (bv + sv) ? 3 : 2;
      }
      return r;
    };
    auto same = [](const GanttRun& a, const GanttRun& b) { return a.cat == b.cat && a.cat2 == b.cat2 && a.quarters == b.quarters; };
    for (int col = 0; col < ncol;) {
      GanttRun r = colour_of(col);
      while (r.end < ncol && same(colour_of(r.end), r)) ++r.end;
      if (r.cat >= 0) runs.push_back(r);
      col = r.end;
    }
  }
  return runs;
}

// Slice labels (micro-batch numbers) inside the slices wide enough for them. In a lane where some labelled
// slices are too narrow (hundreds of micro-batches), the first and the last labelled slices are named anyway,
// at the lane's ends in dark text ("mb 0" ... "mb 511"), so the range stays readable.
static void draw_slice_labels(Doc& d, const Gantt& g, const std::function<double(double)>& X, double top, double lane_h) {
  std::vector<int> first(g.lanes.size(), -1), last(g.lanes.size(), -1);
  std::vector<char> skipped(g.lanes.size(), 0), narrow(g.slices.size(), 0);
  for (size_t i = 0; i < g.slices.size(); ++i) {
    const Slice& sl = g.slices[i];
    if (sl.label.empty() || sl.lane < 0 || sl.lane >= (int)g.lanes.size()) continue;
    if (first[sl.lane] < 0 || sl.t0 < g.slices[first[sl.lane]].t0) first[sl.lane] = (int)i;
    if (last[sl.lane] < 0 || sl.t1 >= g.slices[last[sl.lane]].t1) last[sl.lane] = (int)i;
    const double x0 = X(sl.t0), x1 = X(sl.t1);
    if (x1 - x0 < text_width(sl.label, 9) + 4) {
      skipped[sl.lane] = narrow[i] = 1;
      continue;
    }
    d.text((x0 + x1) / 2, top + lane_h * (double)sl.lane + lane_h - 4.5, sl.label, 9, "middle", "fill=\"#FFFFFF\"");
  }
  const char* halo = "fill=\"#222222\" stroke=\"#FFFFFF\" stroke-width=\"2.5\" paint-order=\"stroke\"";
  for (size_t ln = 0; ln < g.lanes.size(); ++ln) {
    if (!skipped[ln] || first[ln] < 0 || first[ln] == last[ln]) continue;
    const double y = top + lane_h * (double)ln + lane_h - 4.5;
    const Slice &a = g.slices[first[ln]], &b = g.slices[last[ln]];
    const double xa = X(a.t0), xb = X(b.t1);
    const std::string la = "mb " + a.label, lb = "mb " + b.label;
    if (xb - xa < text_width(la, 9) + text_width(lb, 9) + 12) continue;  // both must fit side by side
    if (narrow[first[ln]]) d.text(xa + 2, y, la, 9, "start", halo);
    if (narrow[last[ln]]) d.text(xb - 2, y, lb, 9, "end", halo);
  }
}

std::string gantt_chart(const Gantt& g) {
  const double W = g.width;
  Doc d(W, 100);
  const double ly = title(d, g.title);
  double labw = 40;
  for (const Lane& l : g.lanes) labw = std::max(labw, text_width(l.label, 11));
  labw = std::min(labw, 220.0);
  const double left = kMargin + labw + 8, right = W - 20;
  const double t_end = g.t_end > 0 ? g.t_end : 1;
  auto X = [&](double ts) { return left + ts / t_end * (right - left); };
  const int ncol = std::max(1, (int)std::ceil(right - left));
  const std::vector<GanttRun> runs = gantt_runs(g, ncol, [&](double ts) { return X(ts) - left; });
  // The legend names only the categories drawn (a category whose slices lose every pixel column is left out).
  std::vector<LegendItem> legend;
  std::vector<bool> used(g.categories.size(), false);
  for (const GanttRun& r : runs)
    for (int c : {r.cat, r.cat2})
      if (c >= 0 && c < (int)used.size()) used[c] = true;
  for (size_t k = 0; k < g.categories.size(); ++k)
    if (used[k]) legend.push_back({k < g.category_labels.size() ? g.category_labels[k] : g.categories[k],
                                   category_colour(g.categories[k], (int)k)});
  double lh = legend_height(legend, W - 2 * kMargin);
  draw_legend(d, legend, kMargin, ly, W - 2 * kMargin);
  const double top = ly + lh + 14, lane_h = 15;
  const double bottom = top + lane_h * (double)g.lanes.size();
  Scale sc = pick_scale(t_end, Unit::seconds);
  Ticks t = nice_ticks(0, t_end / sc.scale, 8);
  int group = -1;
  for (size_t i = 0; i < g.lanes.size(); ++i) {  // stage bands and lane labels
    if (g.lanes[i].group_start || i == 0) ++group;
    double y = top + lane_h * (double)i;
    if (group % 2 == 0) d.rect(left, y, right - left, lane_h, "#F2F2F2");
    if (g.lanes[i].group_start && i > 0) d.line(kMargin, y, right, y, "#BBBBBB", 1);
    d.text(left - 6, y + lane_h - 4, fit_label(g.lanes[i].label, labw, 11), 11, "end");
  }
  for (size_t i = 0; i < t.values.size(); ++i) {
    if (t.values[i] * sc.scale > t_end * (1 + 1e-9)) break;
    double x = X(t.values[i] * sc.scale);
    d.line(x, top, x, bottom, "#D0D0D0", 0.75);
    d.text(x, bottom + 16, t.labels[i], 12, "middle");
  }
  for (const GanttRun& r : runs) {
    const double y = top + lane_h * (double)r.lane + 2, h = lane_h - 4, h1 = h * r.quarters / 4.0;
    d.rect(left + r.col, y, r.end - r.col, h1, category_colour(g.categories[r.cat], r.cat));
    if (r.cat2 >= 0) d.rect(left + r.col, y + h1, r.end - r.col, h - h1, category_colour(g.categories[r.cat2], r.cat2));
  }
  draw_slice_labels(d, g, X, top, lane_h);
  d.line(left, bottom, right, bottom, kAxis);
  d.line(left, top, left, bottom, kAxis);
  d.text((left + right) / 2, bottom + 36, with_unit("time in the step", sc), 12, "middle");
  double h = bottom + 48;
  if (!g.note.empty()) {
    d.text(kMargin, h + 4, g.note, 11, "start", "fill=\"#555555\"");
    h += 16;
  }
  d.h = h;
  return d.finish(g.title);
}

}  // namespace tp::svg
