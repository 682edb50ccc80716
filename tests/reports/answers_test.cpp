// Issue 12's report items: a plan run's answers (top-K, Pareto, why) in report.md, report.html and data.json
// as `trainplan plan` prints them; runs named by their scenario's "name" in tables, figure titles and legends;
// the scaling figure's stated baseline; and the committed seed reports being self-contained (no link out of
// the repository, confidence tags explained where they appear).
#include <gtest/gtest.h>

#include <filesystem>
#include <regex>
#include <sstream>

#include "planner/search.hpp"
#include "report_test_util.hpp"
#include "reports/render.hpp"
#include "sim/output.hpp"

using namespace tp;
using namespace tp::report;
using tp::reporttest::read_text;
namespace fs = std::filesystem;

static const std::string kSrc = TP_SOURCE_DIR;

namespace {

struct Evaluated {
  Spec spec;
  std::vector<RunOut> runs;
  Report rep;
};

std::unique_ptr<Evaluated> evaluate(const std::string& spec_file) {
  auto e = std::make_unique<Evaluated>();
  e->spec = read_spec(spec_file);
  e->runs = evaluate_runs(e->spec);
  e->rep.spec = &e->spec;
  e->rep.runs = &e->runs;
  for (const Check& c : e->spec.checks) e->rep.checks.push_back(evaluate_check(e->spec, c, e->runs));
  e->rep.figures = make_figures(e->spec, e->runs);
  return e;
}

}  // namespace

TEST(ReportPlanAnswers, TopParetoAndWhyAsThePlannerPrintsThem) {
  auto e = evaluate(kSrc + "/tests/reports/specs/plan.report.json");
  const json& res = e->runs[0].points[0].result;
  ASSERT_FALSE(res["top"].empty());
  ASSERT_FALSE(res["why"].empty()) << "the fixture search should explain its alternatives";
  // What `trainplan plan` prints for the same scenario.
  PlanOutcome o = plan_search(load_scenario(kSrc + "/tests/reports/specs/small-search.json", true));
  std::ostringstream printed;
  print_plan_outcome(printed, o);
  const std::string plan_text = printed.str();

  std::string md = render_md(e->rep), html = render_html(e->rep);
  EXPECT_NE(md.find("## Planner answers"), std::string::npos);
  EXPECT_NE(md.find("### small-search (search)"), std::string::npos);
  EXPECT_NE(md.find("| rank | GPUs | step (s) | to train | cost | MFU (of peak) | TFLOP/s/GPU | tokens/s/GPU | mem (GiB) | "
                    "analytic (s) | plan |"),
            std::string::npos);
  EXPECT_NE(md.find("Pareto front (GPUs, time to train, cost)"), std::string::npos);
  EXPECT_NE(md.find("Why the nearest alternatives lose:"), std::string::npos);
  EXPECT_NE(html.find("<h2>Planner answers</h2>"), std::string::npos);
  EXPECT_NE(html.find("<th>analytic (s)</th>"), std::string::npos);
  for (const json& c : res["top"]) {
    const json& s = c["simulated"];
    std::string row = "| " + std::to_string(c["rank"].get<int>()) + " | " + std::to_string(c["gpus"].get<int>()) + " | ";
    EXPECT_NE(md.find(row), std::string::npos) << row;
    const std::string mfu = percent_text(s["mfu"]) + " " + s["mfu_peak_precision"].get<std::string>() +
                            (s["mfu_fp8"].is_number() ? ", " + percent_text(s["mfu_fp8"]) + " fp8" : std::string());
    for (const std::string& cell : {days_text(s["time_to_train_s"]), usd_text(s["cost_usd"]), mfu,
                                    c["summary"].get<std::string>()}) {
      EXPECT_NE(md.find("| " + cell + " |"), std::string::npos) << cell;
      EXPECT_NE(plan_text.find(cell), std::string::npos) << "not as `plan` prints it: " << cell;
      EXPECT_NE(html.find(svg::xml_escape(cell)), std::string::npos) << cell;
    }
  }
  for (const json& g : res["pareto"]) {
    std::string cell = days_text(g["time_to_train_s"]);
    EXPECT_NE(md.find("| " + std::to_string(g["gpus"].get<int>()) + " | " + cell + " |"), std::string::npos) << cell;
  }
  for (const json& w : res["why"]) {
    std::string alt = "other " + w["dimension"].get<std::string>() + ": " + w["summary"].get<std::string>();
    std::string reason = w["reason"].get<std::string>() + ": " + w["detail"].get<std::string>();
    EXPECT_NE(md.find("- " + alt), std::string::npos) << alt;
    EXPECT_NE(md.find(reason), std::string::npos) << reason;
    EXPECT_NE(plan_text.find(alt), std::string::npos) << alt;
    EXPECT_NE(html.find(svg::xml_escape(reason)), std::string::npos) << reason;
  }
  json d = render_data(e->rep);
  const json& p0 = d["runs"][0]["points"][0];
  EXPECT_EQ(p0["top"].size(), res["top"].size());
  EXPECT_EQ(p0["why"].size(), res["why"].size());
  EXPECT_EQ(p0["top"][0]["summary"], res["top"][0]["summary"]);
  EXPECT_EQ(p0["why"][0]["reason"], res["why"][0]["reason"]);
  EXPECT_EQ(p0["pareto"][0]["summary"], res["pareto"][0]["summary"]);
}

TEST(ReportPlanAnswers, NoPlanRunNoSection) {
  auto e = evaluate(kSrc + "/tests/reports/specs/small.report.json");  // simulate runs only
  EXPECT_EQ(render_md(e->rep).find("Planner answers"), std::string::npos);
  EXPECT_EQ(render_html(e->rep).find("Planner answers"), std::string::npos);
}

TEST(ReportNames, RunsAreNamedByTheirScenario) {
  auto e = evaluate(kSrc + "/tests/reports/specs/plan.report.json");
  // Both runs use small-search.json ("name": "small-search"), so each adds its id.
  EXPECT_EQ(e->runs[0].label(), "small-search (search)");
  EXPECT_EQ(e->runs[1].label(), "small-search (caps)");
  std::string md = render_md(e->rep);
  EXPECT_NE(md.find("| small-search (search) | small-search.json |"), std::string::npos);
  EXPECT_NE(md.find("| small-search (caps) @ 2 |"), std::string::npos);
  const std::vector<Figure>& f = e->rep.figures;
  EXPECT_EQ(f[0].title, "Where the step time goes: small-search (search), small-search (caps)");
  EXPECT_NE(f[0].svg.find("small-search (search) (best plan)"), std::string::npos);  // legend / bar label
  EXPECT_EQ(f[2].title, "One training step of small-search (search), per pipeline stage");
  EXPECT_EQ(f[4].title, "GPUs against time to train: the Pareto front (small-search (search))");
  EXPECT_NE(f[5].title.find("(small-search (caps))"), std::string::npos);
  EXPECT_EQ(f[2].file, "figures/03-timeline-search.svg");  // files keep the run id
  json d = render_data(e->rep);
  EXPECT_EQ(d["runs"][0]["name"], "small-search (search)");
  EXPECT_EQ(d["runs"][0]["id"], "search");
  // A scenario used once keeps its plain name.
  auto s = evaluate(kSrc + "/tests/reports/specs/small.report.json");
  EXPECT_EQ(s->runs[2].label(), "gpt3-2.7b-frontera-64");
}

TEST(ReportScaling, FigureStatesItsBaseline) {
  auto e = evaluate(kSrc + "/tests/reports/specs/plan.report.json");
  const Figure& f = e->rep.figures[3];
  const json& bg = e->runs[0].points[0].result["by_gpus"];
  ASSERT_FALSE(bg.empty());
  int fewest = bg[0]["gpus"];
  for (const json& g : bg) fewest = std::min(fewest, g["gpus"].get<int>());
  std::string base = "linear scaling from " + std::to_string(fewest) + (fewest == 1 ? " GPU" : " GPUs");
  EXPECT_EQ(f.title, "Time to train against GPU count (small-search (search)); dashed: " + base);
  EXPECT_NE(f.svg.find(base), std::string::npos);  // the legend names it too
  EXPECT_NE(render_md(e->rep).find("*" + f.title + "*"), std::string::npos);
}

TEST(ReportLegend, ConfidenceTagsExplainedWhereTheyAppear) {
  Spec sp;
  EXPECT_EQ(confidence_legend(sp), "");
  sp.about = "A derived number [D].";
  std::string l = confidence_legend(sp);
  EXPECT_NE(l.find("[D] derived by us"), std::string::npos);
  EXPECT_EQ(l.find("[?]"), std::string::npos);  // only the tags used
  Check c;
  c.assumption = "not retrieved [?]";
  sp.checks.push_back(c);
  EXPECT_NE(confidence_legend(sp).find("[?] unknown"), std::string::npos);
}

TEST(ReportSeeds, CommittedReportsAreSelfContained) {
  const fs::path committed = kSrc + "/reports/seeds";
  int checked = 0;
  const std::regex url(R"(https?://[^\s"'<>)]*)"), md_link(R"(\]\(([^)]*)\))"), attr_link(R"((?:href|src)=\"([^\"]*)\")");
  for (const char* name : {"lga_mpp", "m6_10t", "optimus", "patrickstar"}) {
    for (const char* file : {"report.md", "report.html"}) {
      fs::path p = committed / name / file;
      if (!fs::exists(p)) continue;
      SCOPED_TRACE(p.string());
      std::string text = read_text(p.string());
      for (std::sregex_iterator it(text.begin(), text.end(), url), end; it != end; ++it)
        EXPECT_EQ(it->str(), "http://www.w3.org/2000/svg") << "a link outside the repository";
      for (const std::regex* re : {&md_link, &attr_link})
        for (std::sregex_iterator it(text.begin(), text.end(), *re), end; it != end; ++it) {
          std::string target = (*it)[1];
          EXPECT_EQ(target.find(".."), std::string::npos) << "a relative link leaving the report: " << target;
          EXPECT_NE(target.rfind("/", 0), 0u) << "an absolute path: " << target;
        }
      EXPECT_EQ(text.find("../"), std::string::npos) << "a path leaving the repository";
      for (const char* tag : {"[C]", "[D]", "[M]", "[?]"}) {
        if (text.find(tag) == std::string::npos) continue;
        const char* word = tag[1] == 'C' ? "confirmed" : tag[1] == 'D' ? "derived" : tag[1] == 'M' ? "from memory" : "unknown";
        EXPECT_NE(text.find(std::string(tag) + " " + word), std::string::npos) << tag << " is used but not explained";
      }
      ++checked;
    }
  }
  if (checked == 0) GTEST_SKIP() << "no committed seed reports";
}

TEST(ReportTimeline, LegendNamesOnlyWhatIsDrawn) {
  svg::Gantt g;
  g.title = "t";
  g.t_end = 1.0;
  g.categories = {"fwd", "bwd", "recompute", "pp comm"};
  g.category_labels = {"forward", "backward", "recompute", "pipeline send/recv"};
  g.lanes = {{"stage 0 compute", true}, {"stage 0 pp.fwd", false}};
  g.slices = {{0, 0.0, 0.5, 0},           // forward: drawn
              {0, 0.25, 0.25 + 1e-7, 2},  // a sub-pixel recompute slice inside forward's pixels: not drawn
              {1, 0.6, 0.7, 3}};          // pipeline communication: drawn; no backward at all
  std::string s = svg::gantt_chart(g);
  EXPECT_NE(s.find(">forward<"), std::string::npos);
  EXPECT_NE(s.find(">pipeline send/recv<"), std::string::npos);
  EXPECT_EQ(s.find(">backward<"), std::string::npos);
  EXPECT_EQ(s.find(">recompute<"), std::string::npos);
  // The real timeline colours forward, backward and communication apart.
  Result r = simulate(load_scenario(kSrc + "/scenarios/examples/gpt3-2.7b-frontera-gpipe.json"));
  std::string tl = timeline_svg(r, "step");
  for (const char* label : {">forward<", ">backward<", ">pipeline send/recv<"})
    EXPECT_NE(tl.find(label), std::string::npos) << label;
}

// Hundreds of micro-batches: 1F1B's steady state alternates forwards and backwards below a pixel. Its columns are
// drawn split (backward over forward), not all in the dominant backward colour, and the lane names its first and
// last micro-batches at its ends.
TEST(ReportTimeline, HundredsOfMicroBatchesKeepThePhasesColoursAndNameTheEnds) {
  svg::Gantt g;
  g.t_end = 1;
  g.categories = {"fwd", "bwd"};
  g.lanes = {{"stage 0 compute", true}};
  const int m = 400;
  const double slot = 0.9 / (3.0 * m);  // a forward takes one slot, a backward two
  double t = 0;
  for (int k = 0; k < m; ++k) {
    g.slices.push_back({0, t, t + slot, 0, std::to_string(k)});
    g.slices.push_back({0, t + slot, t + 3 * slot, 1, std::to_string(k)});
    t += 3 * slot;
  }
  const std::string s = svg::gantt_chart(g);
  const std::string fwd = "fill=\"" + svg::category_colour("fwd", 0) + "\"", bwd = "fill=\"" + svg::category_colour("bwd", 1) + "\"";
  // The plot's rects of each colour (the legend adds one swatch each).
  auto count = [&](const std::string& fill) {
    int n = 0;
    for (size_t at = s.find("<rect"); at != std::string::npos; at = s.find("<rect", at + 1))
      n += s.substr(at, s.find("/>", at) - at).find(fill) != std::string::npos;
    return n;
  };
  EXPECT_GE(count(fwd), 2) << "the steady state lost the forward colour";
  EXPECT_GE(count(bwd), 2);
  EXPECT_NE(s.find(">mb 0<"), std::string::npos);
  EXPECT_NE(s.find(">mb 399<"), std::string::npos);
  EXPECT_EQ(s.find(">17<"), std::string::npos);  // no label squeezed into a slice too narrow for it
  EXPECT_EQ(reporttest::xml_problem(s), "");
}

// Bar labels are not cut off: a long run name wraps onto two lines beside its bar, and the total (with its note)
// never runs past the chart's right edge.
TEST(ReportBars, LongLabelsWrapAndTotalsStayInside) {
  svg::BarChart c;
  c.title = "t";
  c.value_label = "step time";
  c.categories = {"compute"};
  c.category_labels = {"compute"};
  c.bars = {{"seed-patrickstar-v100-chunked (v100-chunked) @ 49.9", {2.0}, NAN,
             "does not fit: 38.6 GiB of 32 GiB, the chunk budget exceeded at the head moment of the warm-up step"},
            {"short", {1.0}, NAN, ""}};
  const std::string s = svg::bar_chart(c);
  EXPECT_NE(s.find(">seed-patrickstar-v100-chunked<"), std::string::npos) << "first line";
  EXPECT_NE(s.find(">(v100-chunked) @ 49.9<"), std::string::npos) << "second line";
  // Left-anchored texts (the default anchor: no text-anchor attribute) end inside the width.
  std::regex text_re("<text x=\"([0-9.]+)\" y=\"[0-9.]+\">([^<]*)</text>");
  int checked = 0;
  for (auto it = std::sregex_iterator(s.begin(), s.end(), text_re); it != std::sregex_iterator(); ++it, ++checked)
    EXPECT_LE(std::stod((*it)[1]) + svg::text_width((*it)[2], 12), c.width + 1) << (*it)[2];
  EXPECT_GE(checked, 2);
  EXPECT_EQ(reporttest::xml_problem(s), "");
}

// The timeline labels micro-batches inside slices wide enough for their number, and gives the expert all-to-all
// of MoE layers a lane of its own (with its legend entry) only for MoE models.
TEST(ReportTimeline, MicroBatchLabelsAndTheExpertAllToAllLane) {
  svg::Gantt g;
  g.t_end = 1;
  g.categories = {"fwd"};
  g.lanes = {{"stage 0 compute", true}};
  g.slices = {{0, 0.0, 0.4, 0, "3"}, {0, 0.5, 0.5000001, 0, "7"}};  // the second is far too narrow for its label
  std::string s = svg::gantt_chart(g);
  EXPECT_NE(s.find(">3<"), std::string::npos);
  EXPECT_EQ(s.find(">7<"), std::string::npos);
  Result dense = simulate(load_scenario(kSrc + "/scenarios/examples/gpt3-2.7b-frontera-gpipe.json"));
  svg::Gantt gd = timeline_chart(dense, "dense");
  for (const svg::Lane& l : gd.lanes) EXPECT_EQ(l.label.find("all-to-all"), std::string::npos) << l.label;
  int labelled = 0;
  for (const svg::Slice& sl : gd.slices) labelled += !sl.label.empty();
  EXPECT_GT(labelled, 0);
  Result moe = simulate(load_scenario(kSrc + "/scenarios/examples/m6-10t-pseudo-to-real.json"));
  svg::Gantt gm = timeline_chart(moe, "moe");
  bool lane = false;
  for (const svg::Lane& l : gm.lanes) lane |= l.label.find("ep all-to-all") != std::string::npos;
  EXPECT_TRUE(lane);
  EXPECT_NE(timeline_svg(moe, "moe").find(">expert all-to-all (MoE)<"), std::string::npos);
}
