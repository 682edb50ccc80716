// svg: see svg.hpp. Numbers are printed with snprintf in the "C" locale at fixed precision, so output never
// depends on the machine; unit and tick choices depend only on the values given.
#include "svg.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace tp::svg {

std::string num(double v, int decimals) {
  if (!std::isfinite(v)) return "0";
  char b[64];
  std::snprintf(b, sizeof b, "%.*f", std::clamp(decimals, 0, 12), v);
  std::string s = b;
  if (s.find('.') != std::string::npos) {
    while (s.back() == '0') s.pop_back();
    if (s.back() == '.') s.pop_back();
  }
  if (s == "-0") s = "0";
  return s;
}

std::string xml_escape(const std::string& s) {
  std::string o;
  o.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&': o += "&amp;"; break;
      case '<': o += "&lt;"; break;
      case '>': o += "&gt;"; break;
      case '"': o += "&quot;"; break;
      case '\'': o += "&#39;"; break;
      default: o += c;
    }
  }
  return o;
}

// Three significant digits, at most two decimals ("123", "12.3", "1.23").
static std::string sig3(double x) {
  double a = std::fabs(x);
  return num(x, a >= 100 ? 0 : a >= 10 ? 1 : 2);
}

Scale pick_scale(double m, Unit u) {
  m = std::fabs(m);
  switch (u) {
    case Unit::seconds:
      if (m < 1e-3) return {1e-6, "µs"};
      if (m < 1) return {1e-3, "ms"};
      if (m < 120) return {1, "s"};
      if (m < 7200) return {60, "min"};
      if (m < 2 * 86400) return {3600, "h"};
      return {86400, "days"};
    case Unit::bytes: {
      const double k = 1024;
      if (m < k) return {1, "B"};
      if (m < k * k) return {k, "KiB"};
      if (m < k * k * k) return {k * k, "MiB"};
      if (m < k * k * k * k) return {k * k * k, "GiB"};
      return {k * k * k * k, "TiB"};
    }
    case Unit::fraction: return {0.01, "%"};
    case Unit::usd:
      if (m < 1e3) return {1, "$"};
      if (m < 1e6) return {1e3, "$k"};
      if (m < 1e9) return {1e6, "$M"};
      return {1e9, "$B"};
    case Unit::count:
      if (m < 1e4) return {1, ""};
      if (m < 1e6) return {1e3, "thousands"};
      if (m < 1e9) return {1e6, "millions"};
      if (m < 1e12) return {1e9, "billions"};
      return {1e12, "trillions"};
  }
  return {1, ""};
}

std::string human(double v, Unit u) {
  if (!std::isfinite(v)) return "—";
  Scale s = pick_scale(v, u);
  double x = v / s.scale;
  switch (u) {
    case Unit::usd: {
      std::string sfx = s.suffix == "$k" ? "k" : s.suffix == "$M" ? "M" : s.suffix == "$B" ? "B" : "";
      return (v < 0 ? "-$" : "$") + sig3(std::fabs(x)) + sfx;
    }
    case Unit::count: {
      if (s.scale == 1) return std::floor(v) == v ? num(v, 0) : sig3(v);
      const char* sfx = s.scale == 1e3 ? "k" : s.scale == 1e6 ? "M" : s.scale == 1e9 ? "G" : "T";
      return sig3(x) + sfx;
    }
    case Unit::fraction: return num(x, std::fabs(x) >= 10 ? 1 : 2) + " %";
    default: return sig3(x) + " " + s.suffix;
  }
}

static std::string tick_label(double v) {
  double a = std::fabs(v);
  if (a >= 1e5) {
    double sc = a >= 1e12 ? 1e12 : a >= 1e9 ? 1e9 : a >= 1e6 ? 1e6 : 1e3;
    const char* sfx = sc == 1e3 ? "k" : sc == 1e6 ? "M" : sc == 1e9 ? "G" : "T";
    return sig3(v / sc) + sfx;
  }
  if (a == 0) return "0";
  int dec = a >= 1 ? (std::floor(a) == a ? 0 : 1) : (int)std::ceil(-std::log10(a) - 1e-9) + 1;
  return num(v, std::min(dec, 6));
}

Ticks nice_ticks(double lo, double hi, int target) {
  Ticks t;
  if (!(hi > lo)) hi = lo + (lo == 0 ? 1 : std::fabs(lo) * 0.1);
  double raw = (hi - lo) / std::max(target, 1);
  double mag = std::pow(10.0, std::floor(std::log10(raw)));
  double n = raw / mag, f = 10;
  for (double c : {1.0, 2.0, 2.5, 5.0, 10.0})
    if (c >= n * (1 - 1e-9)) { f = c; break; }
  double step = f * mag;
  long long i0 = (long long)std::floor(lo / step + 1e-9), i1 = (long long)std::ceil(hi / step - 1e-9);
  int dec = std::max(0, (int)-std::floor(std::log10(step) + 1e-9)) + (f == 2.5 ? 1 : 0);
  for (long long i = i0; i <= i1; ++i) {
    double v = (double)i * step;
    t.values.push_back(v);
    t.labels.push_back(num(v, dec));
  }
  t.lo = t.values.front();
  t.hi = t.values.back();
  return t;
}

Ticks log_ticks(double lo, double hi, bool base2) {
  Ticks t;
  if (!(lo > 0)) lo = 1;
  if (!(hi > lo)) { lo /= base2 ? 2 : 3; hi = std::max(hi, lo) * (base2 ? 4 : 9); }
  t.lo = lo;
  t.hi = hi;
  auto inside = [&](double v) { return v >= lo * (1 - 1e-9) && v <= hi * (1 + 1e-9); };
  if (base2) {
    int k0 = (int)std::ceil(std::log2(lo) - 1e-9), k1 = (int)std::floor(std::log2(hi) + 1e-9);
    int stride = std::max(1, (k1 - k0 + 9) / 9);
    for (int k = k0; k <= k1; k += stride) t.values.push_back(std::ldexp(1.0, k));
  } else {
    int d0 = (int)std::floor(std::log10(lo)), d1 = (int)std::ceil(std::log10(hi));
    std::vector<double> mult = d1 - d0 <= 4 ? std::vector<double>{1, 2, 5} : std::vector<double>{1};
    int stride = std::max(1, (d1 - d0 + 8) / 9);
    for (int d = d0; d <= d1; d += stride)
      for (double m : mult)
        if (inside(m * std::pow(10.0, d))) t.values.push_back(m * std::pow(10.0, d));
    if (t.values.size() < 2) {  // a narrow range: finer multiples
      t.values.clear();
      for (int d = d0 - 1; d <= d1; ++d)
        for (double m : {1.0, 1.5, 2.0, 3.0, 5.0, 7.0})
          if (inside(m * std::pow(10.0, d))) t.values.push_back(m * std::pow(10.0, d));
    }
  }
  for (double v : t.values) t.labels.push_back(tick_label(v));
  return t;
}

const char* const kSeries[8] = {"#0072B2", "#E69F00", "#009E73", "#D55E00",
                                "#CC79A7", "#56B4E9", "#000000", "#F0E442"};

std::string category_colour(const std::string& n, int fallback) {
  struct Entry { const char* name; const char* colour; };
  static const Entry kMap[] = {
      {"compute", "#0072B2"}, {"fwd", "#0072B2"}, {"bwd", "#56B4E9"}, {"recompute", "#CC79A7"},
      {"bubble", "#BBBBBB"}, {"tp_comm_exposed", "#E69F00"}, {"pp_comm_exposed", "#D55E00"},
      {"pp comm", "#D55E00"}, {"dp_comm_exposed", "#009E73"}, {"dp comm", "#009E73"},
      {"zero gather", "#332288"}, {"optimizer", "#F0E442"}, {"ep_comm_exposed", "#882255"},
      {"offload_stall", "#999933"}, {"comm_slowdown", "#44AA99"}, {"pcie copy", "#999933"}, {"host adam", "#DDCC77"},
      {"weights", "#0072B2"}, {"gradients", "#56B4E9"}, {"activations", "#CC79A7"}, {"buffers", "#BBBBBB"}};
  for (const Entry& e : kMap)
    if (n == e.name) return e.colour;
  return kSeries[((fallback % 8) + 8) % 8];
}

double text_width(const std::string& s, double font_px) {
  size_t chars = 0;
  for (unsigned char c : s) chars += (c & 0xC0) != 0x80;  // UTF-8 code points
  return (double)chars * font_px * 0.62;
}

void Doc::rect(double x, double y, double width, double height, const std::string& fill, const std::string& extra) {
  body += "<rect x=\"" + num(x) + "\" y=\"" + num(y) + "\" width=\"" + num(std::max(width, 0.0)) + "\" height=\"" +
          num(std::max(height, 0.0)) + "\" fill=\"" + fill + "\"" + (extra.empty() ? "" : " " + extra) + "/>\n";
}

void Doc::line(double x1, double y1, double x2, double y2, const std::string& stroke, double width,
               const std::string& extra) {
  body += "<line x1=\"" + num(x1) + "\" y1=\"" + num(y1) + "\" x2=\"" + num(x2) + "\" y2=\"" + num(y2) +
          "\" stroke=\"" + stroke + "\" stroke-width=\"" + num(width) + "\"" + (extra.empty() ? "" : " " + extra) +
          "/>\n";
}

void Doc::text(double x, double y, const std::string& s, double size, const std::string& anchor,
               const std::string& extra, double rotate) {
  body += "<text x=\"" + num(x) + "\" y=\"" + num(y) + "\"";
  if (size != 12) body += " font-size=\"" + num(std::max(size, 11.0)) + "\"";
  if (anchor != "start") body += " text-anchor=\"" + anchor + "\"";
  if (rotate != 0) body += " transform=\"rotate(" + num(rotate) + " " + num(x) + " " + num(y) + ")\"";
  if (!extra.empty()) body += " " + extra;
  body += '>';
  body += xml_escape(s);
  body += "</text>\n";
}

std::string Doc::finish(const std::string& title) const {
  std::string W = num(w, 0), H = num(h, 0);
  return "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + W + "\" height=\"" + H + "\" viewBox=\"0 0 " + W +
         " " + H + "\" font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\" font-size=\"12\" fill=\"#222222\">\n" +
         "<title>" + xml_escape(title) + "</title>\n<rect width=\"" + W + "\" height=\"" + H + "\" fill=\"#FFFFFF\"/>\n" +
         body + "</svg>\n";
}

static constexpr double kLegendRow = 18, kSwatch = 12;

static double item_width(const LegendItem& it) { return kSwatch + 5 + text_width(it.label, 12) + 16; }

double legend_height(const std::vector<LegendItem>& items, double width) {
  if (items.empty()) return 0;
  double x = 0, rows = 1;
  for (const LegendItem& it : items) {
    double iw = item_width(it);
    if (x > 0 && x + iw > width) { rows += 1; x = 0; }
    x += iw;
  }
  return rows * kLegendRow;
}

double draw_legend(Doc& d, const std::vector<LegendItem>& items, double x0, double y0, double width) {
  double x = 0, y = 0;
  for (const LegendItem& it : items) {
    double iw = item_width(it);
    if (x > 0 && x + iw > width) { y += kLegendRow; x = 0; }
    double sx = x0 + x, sy = y0 + y + 3;
    if (it.line)
      d.line(sx, sy + kSwatch / 2, sx + kSwatch, sy + kSwatch / 2, it.colour, 2,
             it.dashed ? "stroke-dasharray=\"4 3\"" : "");
    else
      d.rect(sx, sy, kSwatch, kSwatch, it.colour, "stroke=\"#555555\" stroke-width=\"0.5\"");
    d.text(sx + kSwatch + 5, sy + kSwatch - 1, it.label);
    x += iw;
  }
  return legend_height(items, width);
}

void marker(Doc& d, int shape, double x, double y, const std::string& fill, const std::string& stroke, double r) {
  std::string st = "fill=\"" + fill + "\" stroke=\"" + stroke + "\" stroke-width=\"1.5\"";
  switch (((shape % 4) + 4) % 4) {
    case 0:
      d.raw("<circle cx=\"" + num(x) + "\" cy=\"" + num(y) + "\" r=\"" + num(r) + "\" " + st + "/>\n");
      break;
    case 1: d.rect(x - r * 0.9, y - r * 0.9, r * 1.8, r * 1.8, fill, "stroke=\"" + stroke + "\" stroke-width=\"1.5\""); break;
    case 2:
      d.raw("<polygon points=\"" + num(x) + "," + num(y - r * 1.1) + " " + num(x + r) + "," + num(y + r * 0.8) + " " +
            num(x - r) + "," + num(y + r * 0.8) + "\" " + st + "/>\n");
      break;
    default:
      d.raw("<polygon points=\"" + num(x) + "," + num(y - r * 1.2) + " " + num(x + r * 1.2) + "," + num(y) + " " +
            num(x) + "," + num(y + r * 1.2) + " " + num(x - r * 1.2) + "," + num(y) + "\" " + st + "/>\n");
  }
}

}  // namespace tp::svg
