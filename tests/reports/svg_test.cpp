// The SVG toolkit (reports/svg.hpp, reports/charts.hpp): number and unit formatting, tick choice, and charts
// that are well-formed XML, deterministic, with readable text and escaped labels.
#include <gtest/gtest.h>

#include <regex>

#include "report_test_util.hpp"
#include "reports/charts.hpp"

using namespace tp::svg;
using tp::reporttest::xml_problem;

TEST(ReportSvg, NumbersHaveFixedPrecision) {
  EXPECT_EQ(num(1.0), "1");
  EXPECT_EQ(num(1.234567, 2), "1.23");
  EXPECT_EQ(num(-0.0001, 2), "0");
  EXPECT_EQ(num(2.5, 3), "2.5");
  EXPECT_EQ(num(1234.5, 0), "1234");  // round-half-even of printf
  EXPECT_EQ(num(NAN), "0");
}

TEST(ReportSvg, HumanUnits) {
  EXPECT_EQ(human(0.0123, Unit::seconds), "12.3 ms");
  EXPECT_EQ(human(4.66, Unit::seconds), "4.66 s");
  EXPECT_EQ(human(5400, Unit::seconds), "90 min");
  EXPECT_EQ(human(3 * 86400.0, Unit::seconds), "3 days");
  EXPECT_EQ(human(7.02 * 1024 * 1024 * 1024, Unit::bytes), "7.02 GiB");
  EXPECT_EQ(human(512.0 * 1024 * 1024, Unit::bytes), "512 MiB");
  EXPECT_EQ(human(0.4385, Unit::fraction), "43.9 %");
  EXPECT_EQ(human(29751.33, Unit::usd), "$29.8k");
  EXPECT_EQ(human(4.2e6, Unit::usd), "$4.2M");
  EXPECT_EQ(human(1024, Unit::count), "1024");
  EXPECT_EQ(human(35889.19, Unit::count), "35.9k");
  EXPECT_EQ(pick_scale(16.0 * (1 << 30), Unit::bytes).suffix, "GiB");
  EXPECT_EQ(pick_scale(0.5, Unit::seconds).suffix, "ms");
  EXPECT_EQ(pick_scale(3e6, Unit::seconds).suffix, "days");
}

TEST(ReportSvg, NiceTicks) {
  Ticks t = nice_ticks(0, 7.3, 5);
  EXPECT_EQ(t.labels, (std::vector<std::string>{"0", "2", "4", "6", "8"}));
  EXPECT_DOUBLE_EQ(t.hi, 8);
  t = nice_ticks(0, 35.8, 5);
  EXPECT_EQ(t.labels, (std::vector<std::string>{"0", "10", "20", "30", "40"}));
  t = nice_ticks(0, 0.9, 4);
  EXPECT_EQ(t.labels, (std::vector<std::string>{"0", "0.25", "0.5", "0.75", "1"}));
  t = nice_ticks(3, 3, 5);  // a degenerate range still gives an axis
  EXPECT_GE(t.values.size(), 2u);
  EXPECT_LT(t.lo, t.hi);
}

TEST(ReportSvg, LogTicks) {
  Ticks t = log_ticks(8, 1024, true);
  EXPECT_EQ(t.labels, (std::vector<std::string>{"8", "16", "32", "64", "128", "256", "512", "1024"}));
  t = log_ticks(1, 65536, true);  // thinned to at most ~9 labels
  EXPECT_LE(t.values.size(), 9u);
  EXPECT_EQ(t.labels.front(), "1");
  t = log_ticks(3, 400, false);
  EXPECT_EQ(t.labels, (std::vector<std::string>{"5", "10", "20", "50", "100", "200"}));
  t = log_ticks(1e3, 1e9, false);
  EXPECT_EQ(t.labels.front(), "1000");
  EXPECT_EQ(t.labels.back(), "1G");
}

static BarChart sample_bars(bool horizontal) {
  BarChart c;
  c.title = "Where the step time goes <&> \"quoted\"";
  c.value_label = "step time";
  c.horizontal = horizontal;
  c.categories = {"compute", "bubble", "dp_comm_exposed"};
  c.category_labels = {"compute", "pipeline bubble", "DP comm (exposed)"};
  c.bars = {{"run a", {1.5, 0.5, 0.25}, 4.0, ""}, {"run b with a long label", {2.0, 0, 1.0}, 4.0, "does not fit"}};
  c.marker_label = "capacity";
  return c;
}

TEST(ReportSvg, ChartsAreWellFormedDeterministicAndReadable) {
  LineChart l;
  l.title = "Peak memory against batch";
  l.x_label = "global batch";
  l.y_label = "peak memory";
  l.y_unit = Unit::bytes;
  l.log_x = l.base2_x = true;
  Series s;
  s.name = "peak";
  s.x = {64, 128, 256, 512};
  s.y = {5e9, 7e9, 1.1e10, 2e10};
  s.hollow = {false, false, false, true};
  s.point_labels = {"a", "b", "c", "d & e"};
  l.series = {s};
  l.ref_lines = {{1.6e10, "capacity"}};
  l.hollow_label = "does not fit";
  Gantt g;
  g.title = "timeline";
  g.t_end = 2.0;
  g.categories = {"fwd", "bwd"};
  g.category_labels = {"forward", "backward"};
  g.lanes = {{"stage 0 compute", true}, {"stage 0 dp", false}, {"stage 1 compute", true}};
  for (int i = 0; i < 200; ++i) g.slices.push_back({i % 3, i * 0.01, i * 0.01 + 0.004, i % 2});
  std::vector<std::string> svgs = {bar_chart(sample_bars(true)), bar_chart(sample_bars(false)), line_chart(l),
                                   gantt_chart(g)};
  std::vector<std::string> again = {bar_chart(sample_bars(true)), bar_chart(sample_bars(false)), line_chart(l),
                                    gantt_chart(g)};
  std::regex font(R"re(font-size="([0-9.]+)")re");
  for (size_t i = 0; i < svgs.size(); ++i) {
    SCOPED_TRACE(i);
    EXPECT_EQ(svgs[i], again[i]);  // byte-identical
    EXPECT_EQ(xml_problem(svgs[i]), "");
    EXPECT_EQ(svgs[i].rfind("<svg xmlns=\"http://www.w3.org/2000/svg\"", 0), 0u);
    for (auto it = std::sregex_iterator(svgs[i].begin(), svgs[i].end(), font); it != std::sregex_iterator(); ++it)
      EXPECT_GE(std::stod((*it)[1]), 11.0);
    EXPECT_EQ(svgs[i].find("nan"), std::string::npos);
    EXPECT_EQ(svgs[i].find("inf"), std::string::npos);
  }
  EXPECT_NE(svgs[0].find("&lt;&amp;&gt; &quot;quoted&quot;"), std::string::npos);  // escaped title
  EXPECT_NE(svgs[0].find("step time (s)"), std::string::npos);                     // unit on the axis
  EXPECT_NE(svgs[0].find("does not fit"), std::string::npos);
  EXPECT_NE(svgs[2].find("peak memory (GiB)"), std::string::npos);
  EXPECT_NE(svgs[2].find("global batch, log scale"), std::string::npos);
  EXPECT_NE(svgs[3].find("time in the step (s)"), std::string::npos);
  EXPECT_EQ(xml_problem("<svg><g></svg>"), "mismatched </svg>, open <g>");  // the checker itself works
}

TEST(ReportSvg, CategoriesKeepTheirColours) {
  EXPECT_EQ(category_colour("compute", 5), category_colour("fwd", 0));
  EXPECT_EQ(category_colour("bubble", 0), "#BBBBBB");
  EXPECT_NE(category_colour("dp_comm_exposed", 0), category_colour("pp_comm_exposed", 0));
  EXPECT_EQ(category_colour("something new", 1), kSeries[1]);
}
