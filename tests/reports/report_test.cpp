// `trainplan report` end to end: a small spec over the bundled examples (quantities and checks against
// independent simulations, the four renderings), the CLI (files, atomic all-or-nothing output, exit codes,
// determinism, ad-hoc mode), the plan figures from a hand-written planner JSON, the timeline, and the
// committed seed reports (reports/seeds/<name>/data.json) against a regeneration.
#include <gtest/gtest.h>

#include <filesystem>

#include "report_test_util.hpp"
#include "reports/render.hpp"
#include "sim/output.hpp"
#include "temp_dir.hpp"

using namespace tp;
using namespace tp::report;
using tp::reporttest::json_drift;
using tp::reporttest::read_text;
using tp::reporttest::sh;
using tp::reporttest::xml_problem;
using tp::testutil::TempDir;
namespace fs = std::filesystem;

static const std::string kSrc = TP_SOURCE_DIR;
static const std::string kSmall = kSrc + "/tests/reports/specs/small.report.json";

static json sim_json(const std::string& scenario, const json& patch = nullptr) {
  Issues is;
  json j = parse_json_file(scenario, scenario, is);
  if (!patch.is_null()) j.merge_patch(patch);
  return result_to_json(simulate(scenario_from_json(j, fs::path(scenario).parent_path().string(), scenario)));
}

TEST(ReportEndToEnd, SmallSpecQuantitiesChecksAndRenderings) {
  Spec spec = read_spec(kSmall);
  std::vector<RunOut> runs = evaluate_runs(spec);
  ASSERT_EQ(runs.size(), 3u);
  ASSERT_EQ(runs[2].points.size(), 5u);
  // Independent simulations of the same points.
  const std::string optimus = kSrc + "/scenarios/examples/optimus-2d-frontera.json";
  const std::string gpipe = kSrc + "/scenarios/examples/gpt3-2.7b-frontera-gpipe.json";
  double t2d = sim_json(optimus)["step_time_s"], t1d = sim_json(optimus, {{"plan", {{"tp_mode", "1d"}}}})["step_time_s"];
  double largest_fit = -1;
  for (int b : {64, 128, 256, 512, 1024}) {
    json r = sim_json(gpipe, {{"training", {{"global_batch", b}}}});
    if (r["memory"]["fits"].get<bool>() && r["memory"]["host_fits"].get<bool>()) largest_fit = b;
  }
  EXPECT_EQ(largest_fit, 256);  // the sweep has points on both sides of the memory wall
  std::vector<CheckOut> checks;
  for (const Check& c : spec.checks) checks.push_back(evaluate_check(spec, c, runs));
  ASSERT_EQ(checks.size(), 4u);
  EXPECT_DOUBLE_EQ(checks[0].ours.get<double>(), t1d / t2d);  // ratio
  EXPECT_TRUE(checks[0].reproduced);
  EXPECT_EQ(checks[1].ours, json(256.0));                      // max_fit
  EXPECT_FALSE(checks[1].reproduced);                          // min 512
  EXPECT_EQ(checks[2].ours, json(true));                       // equals on a boolean
  EXPECT_TRUE(checks[2].reproduced);
  EXPECT_FALSE(checks[3].reproduced);
  EXPECT_EQ(evaluate_quantity(spec, spec.checks[3].ours, runs), runs[2].points[0].result["step_time_s"]);

  Report rep;
  rep.spec = &spec;
  rep.runs = &runs;
  rep.checks = checks;
  rep.figures = make_figures(spec, runs);
  ASSERT_EQ(rep.figures.size(), 5u);
  EXPECT_EQ(rep.figures[0].file, "figures/01-breakdown.svg");
  EXPECT_EQ(rep.figures[3].file, "figures/04-sweep-batch.svg");
  for (const Figure& f : rep.figures) EXPECT_EQ(xml_problem(f.svg), "") << f.file;
  EXPECT_NE(rep.figures[2].svg.find("stage 0 compute"), std::string::npos);  // the timeline has lanes
  EXPECT_NE(rep.figures[3].svg.find("GPU memory capacity 16 GiB"), std::string::npos);

  std::string md = render_md(rep);
  EXPECT_NE(md.find("# Optimus 2D against Megatron 1D"), std::string::npos);
  EXPECT_NE(md.find("| claim | published | ours | reproduced? | assumption |"), std::string::npos);
  EXPECT_NE(md.find("| largest GPipe batch that fits | 512 sequences | 256 sequences | **not reproduced** (ours >= 512) |"),
            std::string::npos);
  EXPECT_NE(md.find("| 2D fits in memory | true | true | **reproduced** (ours = true) |"), std::string::npos);
  EXPECT_NE(md.find("2 of 4 reproduced."), std::string::npos);
  EXPECT_NE(md.find("| gpt3-2.7b-frontera-64 @ 512 |"), std::string::npos);
  EXPECT_NE(md.find("![Where the step time goes: optimus-2d-frontera-16 (1d), optimus-2d-frontera-16 (2d)](figures/01-breakdown.svg)"), std::string::npos);

  std::string html = render_html(rep);
  size_t svgs = 0;
  for (size_t p = html.find("<svg "); p != std::string::npos; p = html.find("<svg ", p + 1)) ++svgs;
  EXPECT_EQ(svgs, 5u);  // every figure inline
  for (const char* external : {"<script", "<link", "<img", " src=", "url("}) EXPECT_EQ(html.find(external), std::string::npos) << external;
  EXPECT_NE(html.find("<strong>small</strong>"), std::string::npos);  // the about text's Markdown
  EXPECT_NE(html.find("<code>code</code>"), std::string::npos);
  EXPECT_NE(html.find("batch sweep [D].</p>"), std::string::npos);  // brackets without a link stay text
  EXPECT_NE(html.find("<a href=\"https://example.org\">link</a>"), std::string::npos);
  EXPECT_NE(html.find("class=\"bad\">not reproduced"), std::string::npos);

  json data = render_data(rep);
  EXPECT_EQ(data["checks"][0]["ours"].get<double>(), t1d / t2d);
  EXPECT_EQ(data["checks"][1]["reproduced_if"], json({{"min", 512.0}}));
  EXPECT_EQ(data["runs"][0]["points"][0]["metrics"]["step_time_s"].get<double>(), t2d);
  EXPECT_EQ(data["runs"][2]["points"].size(), 5u);
  EXPECT_EQ(data["runs"][2]["points"][3]["metrics"]["fits"], false);
  EXPECT_EQ(data["figures"].size(), 5u);

  std::string csv = render_csv(rep);
  EXPECT_EQ(std::count(csv.begin(), csv.end(), '\n'), 1 + 2 + 5);  // header + one row per run point
  EXPECT_EQ(csv.rfind("run,name,kind,x,plan,gpus,", 0), 0u);
  EXPECT_NE(csv.find("\nbatch,gpt3-2.7b-frontera-64,simulate,512,"), std::string::npos);
}

TEST(ReportEndToEnd, PlanRunsAndPlanSweeps) {
  Spec spec = read_spec(kSrc + "/tests/reports/specs/plan.report.json");
  std::vector<RunOut> runs = evaluate_runs(spec);
  ASSERT_EQ(runs.size(), 2u);
  const json& best = runs[0].points[0].result["best"];
  EXPECT_EQ(best["gpus"], 16);
  ASSERT_TRUE(runs[0].points[0].sim);  // the best plan's simulation, for the timeline
  EXPECT_EQ(runs[0].points[0].sim->step_time_s, best["result"]["step_time_s"].get<double>());
  CheckOut c0 = evaluate_check(spec, spec.checks[0], runs), c1 = evaluate_check(spec, spec.checks[1], runs);
  EXPECT_EQ(c0.ours, json(16));
  EXPECT_TRUE(c0.reproduced);
  double t2 = runs[1].points[0].result["best"]["result"]["training"]["time_s"];
  double t8 = runs[1].points[1].result["best"]["result"]["training"]["time_s"];
  EXPECT_DOUBLE_EQ(c1.ours.get<double>(), t2 / t8);
  EXPECT_LE(runs[1].points[1].result["best"]["gpus"].get<int>(), 8);
  std::vector<Figure> figs = make_figures(spec, runs);
  ASSERT_EQ(figs.size(), 6u);
  EXPECT_EQ(figs[3].file, "figures/04-scaling-search.svg");
  EXPECT_EQ(figs[4].file, "figures/05-pareto-search.svg");
  for (const Figure& f : figs) EXPECT_EQ(xml_problem(f.svg), "") << f.file;
  EXPECT_NE(figs[0].svg.find("small-search (caps) (best plan) @ 8"), std::string::npos);
  EXPECT_NE(figs[2].svg.find("stage 0 compute"), std::string::npos);
  EXPECT_NE(figs[3].svg.find("linear scaling from"), std::string::npos);
  // The planner is deterministic, so a second evaluation renders the same numbers and figures.
  std::vector<RunOut> again = evaluate_runs(spec);
  Report a, b;
  a.spec = b.spec = &spec;
  a.runs = &runs;
  b.runs = &again;
  EXPECT_EQ(render_data(a).dump(), render_data(b).dump());
  std::vector<Figure> figs2 = make_figures(spec, again);
  for (size_t i = 0; i < figs.size(); ++i) EXPECT_EQ(figs[i].svg, figs2[i].svg) << figs[i].file;
}

TEST(ReportEndToEnd, QuantityErrorsNameTheCheck) {
  json j = json::parse(R"({"title": "t", "runs": [{"id": "a", "kind": "simulate", "scenario": "optimus-2d-frontera.json"}],
    "checks": [{"name": "missing", "ours": {"run": "a", "metric": "/nope"}, "reproduced_if": {"min": 0}},
               {"name": "object", "ours": {"run": "a", "metric": "/memory"}, "reproduced_if": {"min": 0}},
               {"name": "bool ratio", "ours": {"ratio": [{"run": "a", "metric": "/memory/fits"}, {"value": 1}]},
                "reproduced_if": {"min": 0}},
               {"name": "zero", "ours": {"ratio": [{"value": 1}, {"value": 0}]}, "reproduced_if": {"min": 0}},
               {"name": "types", "ours": {"run": "a", "metric": "/memory/fits"}, "reproduced_if": {"equals": 1}},
               {"name": "bounds", "ours": {"run": "a", "metric": "/memory/fits"}, "reproduced_if": {"max": 1}}]})");
  Spec spec = spec_from_json(j, kSrc + "/scenarios/examples", "s.json");
  std::vector<RunOut> runs(1);
  runs[0].spec = &spec.runs[0];
  runs[0].points.push_back({nullptr, nullptr, json{{"step_time_s", 2.0}, {"memory", {{"fits", true}}}}, nullptr});
  std::vector<std::string> want = {
      "s.json: $.checks[0].ours.metric: run \"a\"'s result has no /nope",
      "s.json: $.checks[1].ours.metric: /memory in run \"a\"'s result is an object",
      "s.json: $.checks[2].ours.ratio: both quantities must be numbers",
      "s.json: $.checks[3].ours.ratio[1]: the denominator is zero",
      "s.json: $.checks[4].reproduced_if.equals: ours is a boolean, equals is a number",
      "s.json: $.checks[5].reproduced_if: min / max need a number, but ours is a boolean"};
  for (size_t i = 0; i < want.size(); ++i) {
    try {
      evaluate_check(spec, spec.checks[i], runs);
      ADD_FAILURE() << "no error for check " << i;
    } catch (const InputError& e) {
      EXPECT_EQ(e.messages.at(0).rfind(want[i], 0), 0u) << e.messages[0];
    }
  }
}

static std::vector<std::string> listing(const fs::path& dir) {
  std::vector<std::string> v;
  for (auto& e : fs::recursive_directory_iterator(dir)) v.push_back(fs::relative(e.path(), dir).string());
  std::sort(v.begin(), v.end());
  return v;
}

TEST(ReportCli, WritesEveryFileDeterministically) {
  TempDir t("tp_report_cli");
  std::string a = t.file("a"), b = t.file("b");
  ASSERT_EQ(sh(std::string(TP_BINARY) + " report " + kSmall + " --out " + a + " --quiet"), 0);
  fs::create_directories(b + "/figures");
  std::ofstream(b + "/figures/99-stale.svg") << "<svg/>";  // left from an earlier report: removed
  ASSERT_EQ(sh(std::string(TP_BINARY) + " report " + kSmall + " --out " + b + " > /dev/null"), 0);
  std::vector<std::string> want = {"data.csv", "data.json", "figures", "figures/01-breakdown.svg",
                                   "figures/02-memory.svg", "figures/03-timeline-2d.svg", "figures/04-sweep-batch.svg",
                                   "figures/05-sweep-batch.svg", "report.html", "report.md"};
  EXPECT_EQ(listing(a), want);  // nothing else: no temporary files left
  EXPECT_EQ(listing(b), want);
  for (const std::string& f : want) {
    if (f == "figures") continue;
    EXPECT_EQ(read_text(a + "/" + f), read_text(b + "/" + f)) << f;  // byte-identical
    if (f.find(".svg") != std::string::npos) {
      EXPECT_EQ(xml_problem(read_text(a + "/" + f)), "") << f;
    }
  }
  json d = json::parse(read_text(a + "/data.json"));
  EXPECT_EQ(d["checks"].size(), 4u);
}

TEST(ReportCli, BadInputExitsTwoAndWritesNothing) {
  TempDir t("tp_report_bad");
  std::string out = t.file("out"), err = t.file("err.txt");
  std::string bin = TP_BINARY;
  auto spec_file = [&](const std::string& name, const std::string& text) {
    std::string p = t.file(name);
    std::ofstream(p) << text;
    return p;
  };
  const std::string ex = kSrc + "/scenarios/examples/optimus-2d-frontera.json";
  std::string bad_key = spec_file("k.report.json", R"({"title": "t", "runs": [{"id": "a", "kind": "simulate",
      "scenario": ")" + ex + R"(", "sweep": {"pointer": "nope", "values": [1]}}]})");
  EXPECT_EQ(sh(bin + " report " + bad_key + " --out " + out + " 2> " + err), 2);
  EXPECT_NE(read_text(err).find("error: " + bad_key + ": $.runs[0].sweep.pointer: expected a JSON pointer"), std::string::npos)
      << read_text(err);
  std::string bad_scenario = spec_file("s.report.json", R"({"title": "t", "runs": [{"id": "a", "kind": "simulate",
      "scenario": ")" + ex + R"(", "overrides": {"plan": {"tp": 7}}}]})");
  EXPECT_EQ(sh(bin + " report " + bad_scenario + " --out " + out + " 2> " + err), 2);
  EXPECT_NE(read_text(err).find(bad_scenario + ": $.runs[0] (" + ex + "): $.plan.tp"), std::string::npos) << read_text(err);
  std::string bad_metric = spec_file("m.report.json", R"({"title": "t", "runs": [{"id": "a", "kind": "simulate",
      "scenario": ")" + ex + R"("}], "checks": [{"name": "n", "ours": {"run": "a", "metric": "/nope"},
      "reproduced_if": {"min": 1}}]})");
  EXPECT_EQ(sh(bin + " report " + bad_metric + " --out " + out + " 2> " + err), 2);
  EXPECT_NE(read_text(err).find("$.checks[0].ours.metric: run \"a\"'s result has no /nope"), std::string::npos);
  EXPECT_EQ(sh(bin + " report " + t.file("missing.json") + " --out " + out + " 2> /dev/null"), 2);
  EXPECT_FALSE(fs::exists(out));  // every failure above happened before anything was written
  // Usage errors.
  EXPECT_EQ(sh(bin + " report 2> /dev/null"), 2);
  EXPECT_EQ(sh(bin + " report " + kSmall + " 2> /dev/null"), 2);                          // no --out
  EXPECT_EQ(sh(bin + " report " + kSmall + " --out 2> /dev/null"), 2);                    // --out without a value
  EXPECT_EQ(sh(bin + " report " + kSmall + " --out " + out + " --bogus 2> /dev/null"), 2);
  EXPECT_EQ(sh(bin + " report " + kSmall + " " + ex + " --out " + out + " 2> /dev/null"), 2);  // spec + scenario
  EXPECT_FALSE(fs::exists(out));
  EXPECT_EQ(sh(bin + " report --help > /dev/null"), 0);
}

TEST(ReportCli, AdHocScenarios) {
  TempDir t("tp_report_adhoc");
  std::string out = t.file("out");
  const std::string ex = kSrc + "/scenarios/examples/";
  ASSERT_EQ(sh(std::string(TP_BINARY) + " report " + ex + "optimus-2d-frontera.json " + ex +
               "gpt3-2.7b-frontera-gpipe.json --out " + out + " --quiet"),
            0);
  EXPECT_EQ(listing(out), (std::vector<std::string>{"data.csv", "data.json", "figures", "figures/01-breakdown.svg",
                                                    "figures/02-memory.svg",
                                                    "figures/03-timeline-optimus-2d-frontera.svg",
                                                    "figures/04-timeline-gpt3-2.7b-frontera-gpipe.svg", "report.html",
                                                    "report.md"}));
  std::string md = read_text(out + "/report.md");
  EXPECT_EQ(md.find("## Checks"), std::string::npos);
  EXPECT_NE(md.find("| gpt3-2.7b-frontera-64 | " + ex + "gpt3-2.7b-frontera-gpipe.json | 64 |"), std::string::npos);
  // The title names the scenarios by their "name", as the tables do (issue 43).
  EXPECT_NE(md.find("trainplan report: optimus-2d-frontera-16, gpt3-2.7b-frontera-64"), std::string::npos) << md;
  std::string err = t.file("err");
  std::string bad = t.file("bad.json");
  std::ofstream(bad) << R"({"model": "gpt3-2.7b", "cluster": "frontera-rtx", "training": {"global_batch": 8, "seq_len": 2048},
                           "plan": {"dp": 3, "tp": 1, "pp": 1}})";
  EXPECT_EQ(sh(std::string(TP_BINARY) + " report " + bad + " --out " + t.file("out2") + " 2> " + err), 2);
  EXPECT_NE(read_text(err).find("error: " + bad + ": $.training.global_batch: must be divisible"), std::string::npos)
      << read_text(err);  // named like simulate names it
  EXPECT_FALSE(fs::exists(t.file("out2")));
}

static json plan_fixture() {
  json p = json::parse(read_text(kSrc + "/tests/reports/fixtures/plan_outcome.json"));
  p["best"]["result"] = sim_json(kSrc + "/scenarios/examples/optimus-2d-frontera.json");
  return p;
}

TEST(ReportFigures, ScalingAndParetoFromPlannerJson) {
  json p = plan_fixture();
  std::string sc = scaling_svg(p, "scaling"), pa = pareto_svg(p, "pareto");
  EXPECT_EQ(xml_problem(sc), "");
  EXPECT_EQ(xml_problem(pa), "");
  EXPECT_EQ(sc, scaling_svg(p, "scaling"));
  EXPECT_NE(sc.find("linear scaling from 8 GPUs"), std::string::npos);
  EXPECT_NE(sc.find(">1024</text>"), std::string::npos);  // base-2 GPU ticks
  EXPECT_NE(sc.find("GPUs, log scale"), std::string::npos);
  EXPECT_NE(sc.find("time to train (days)"), std::string::npos);
  EXPECT_NE(pa.find("Pareto front"), std::string::npos);
  EXPECT_NE(pa.find("$133k"), std::string::npos);  // cost labels on the front
  json empty = {{"by_gpus", json::array()}, {"pareto", json::array()}};
  EXPECT_NE(scaling_svg(empty, "s").find("no plan that fits"), std::string::npos);
  EXPECT_EQ(xml_problem(pareto_svg(empty, "p")), "");
}

TEST(ReportFigures, PlanRunsInTablesAndData) {
  Spec spec;
  spec.file = "fixture";
  spec.title = "plan";
  RunSpec r;
  r.id = "search";
  r.kind = RunKind::plan;
  r.scenario = "search.json";
  spec.runs = {r, r};
  spec.runs[1].id = "nothing";
  FigureSpec f;
  f.kind = FigureKind::breakdown;
  f.runs = {"search", "nothing"};
  spec.figures = {f};
  f.runs.clear();
  f.run = "search";
  for (FigureKind k : {FigureKind::scaling, FigureKind::pareto}) {
    f.kind = k;
    spec.figures.push_back(f);
  }
  std::vector<RunOut> runs(2);
  runs[0].spec = &spec.runs[0];
  runs[0].points.push_back({nullptr, nullptr, plan_fixture(), nullptr});
  runs[1].spec = &spec.runs[1];
  runs[1].points.push_back({nullptr, nullptr, json{{"best", nullptr}, {"by_gpus", json::array()}}, nullptr});
  Report rep;
  rep.spec = &spec;
  rep.runs = &runs;
  rep.figures = make_figures(spec, runs);
  ASSERT_EQ(rep.figures.size(), 3u);
  EXPECT_NE(rep.figures[0].svg.find("search (best plan)"), std::string::npos);
  std::string md = render_md(rep);
  EXPECT_NE(md.find("| search | search.json | 1024 | best: dp 8 × tp 8 × pp 4, 1f1b, mb 1, SP, recompute selective, ZeRO-1, fp16 | 512 |"),
            std::string::npos) << md;
  EXPECT_NE(md.find("| nothing | search.json | — | no plan fits |"), std::string::npos);
  json d = render_data(rep);
  EXPECT_EQ(d["runs"][0]["points"][0]["metrics"]["gpus"], 1024);
  EXPECT_EQ(d["runs"][0]["points"][0]["by_gpus"].size(), 8u);
  EXPECT_EQ(d["runs"][0]["points"][0]["pareto"].size(), 7u);
  EXPECT_EQ(d["runs"][1]["points"][0]["metrics"], json::object());
  EXPECT_NE(render_csv(rep).find("\nnothing,nothing,plan,,,"), std::string::npos);
}

TEST(ReportFigures, TimelineLanesAndSlices) {
  Scenario sc = load_scenario(kSrc + "/scenarios/examples/gpt3-2.7b-frontera-gpipe.json");
  Result r = simulate(sc);
  svg::Gantt g = timeline_chart(r, "t");
  std::vector<std::string> lanes;
  for (auto& l : g.lanes) lanes.push_back(l.label);
  EXPECT_EQ(lanes, (std::vector<std::string>{"stage 0 compute", "stage 0 pp.fwd", "stage 0 dp", "stage 1 compute",
                                             "stage 1 pp.bwd", "stage 1 dp"}));
  std::set<int> cats;
  for (const svg::Slice& s : g.slices) {
    cats.insert(s.cat);
    EXPECT_GE(s.t0, 0);
    EXPECT_LE(s.t1, r.step_time_s * (1 + 1e-12));
    EXPECT_LE(s.t0, s.t1);
  }
  for (const char* c : {"fwd", "bwd", "recompute", "pp comm", "dp comm", "optimizer"}) {
    int k = (int)(std::find(g.categories.begin(), g.categories.end(), c) - g.categories.begin());
    EXPECT_TRUE(cats.count(k)) << c;  // full recompute: every backward starts with its recompute
  }
  // A deep pipeline shows 16 of its stages, first and last included.
  Issues is;
  json j = parse_json_file(kSrc + "/scenarios/examples/lga-mpp-gpt3-175b.json", "x", is);
  j["plan"] = {{"dp", 1}, {"tp", 8}, {"pp", 32}, {"microbatch", 1}, {"schedule", "1f1b"}};
  j["training"]["global_batch"] = 64;
  Result deep = simulate(scenario_from_json(j, kSrc + "/scenarios/examples", "deep"));
  svg::Gantt gd = timeline_chart(deep, "deep");
  EXPECT_EQ(gd.lanes.front().label, "stage 0 compute");
  EXPECT_EQ(gd.lanes.back().label.rfind("stage 31 ", 0), 0u);
  int groups = 0;
  for (auto& l : gd.lanes) groups += l.group_start;
  EXPECT_EQ(groups, 16);
  EXPECT_EQ(gd.note.rfind("Showing 16 of 32 pipeline stages", 0), 0u);
  std::string svg = svg::gantt_chart(gd);
  EXPECT_EQ(xml_problem(svg), "");
  EXPECT_LT(svg.size(), 400000u);  // drawn per pixel column, not per task
}

TEST(ReportFigures, MetricUnitsAndLabels) {
  EXPECT_EQ(metric_unit("/memory/peak_bytes_per_gpu"), std::make_pair(svg::Unit::bytes, std::string("peak memory per GPU")));
  EXPECT_EQ(metric_unit("/step_time_s"), std::make_pair(svg::Unit::seconds, std::string("step time")));
  EXPECT_EQ(metric_unit("/throughput/mfu"), std::make_pair(svg::Unit::fraction, std::string("MFU")));
  EXPECT_EQ(metric_unit("/training/cost_usd"), std::make_pair(svg::Unit::usd, std::string("training cost")));
  EXPECT_EQ(metric_unit("/training/time_s"), std::make_pair(svg::Unit::seconds, std::string("training time")));
  EXPECT_EQ(metric_unit("/throughput/tokens_per_s"), std::make_pair(svg::Unit::count, std::string("tokens/s")));
  EXPECT_EQ(metric_unit("/best/result/training/time_s").first, svg::Unit::seconds);
}

TEST(ReportSeeds, DriftComparesNumbersAndBooleans) {
  json committed = {{"a", 1.0}, {"b", {1, 2}}, {"s", "x"}, {"f", true}, {"gone", 3}};
  json regenerated = {{"a", 1.0000000001}, {"b", {1, 2.1}}, {"s", "y"}, {"f", false}};
  EXPECT_EQ(json_drift(committed, regenerated, 1e-6),
            "$.b[1]: committed 2, regenerated 2.1\n$.f: committed true, regenerated false\n$.gone: missing\n");
}

// reports/seeds/<name>/ is generated from scenarios/seeds/<name>.report.json; a regeneration must give the
// same numbers in data.json (relative 1e-6: the simulator is deterministic, this only absorbs compiler and
// library differences in the last digits).
TEST(ReportSeeds, CommittedReportsRegenerate) {
  const fs::path specs = kSrc + "/scenarios/seeds", committed = kSrc + "/reports/seeds";
  int compared = 0;
  if (fs::is_directory(specs))
    for (auto& e : fs::directory_iterator(specs)) {
      std::string name = e.path().filename().string();
      const std::string suffix = ".report.json";
      if (name.size() <= suffix.size() || name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0) continue;
      name = name.substr(0, name.size() - suffix.size());
      fs::path data = committed / name / "data.json";
      if (!fs::exists(data)) continue;  // not generated and committed yet
      SCOPED_TRACE(name);
      Spec spec = read_spec(e.path().string());
      std::vector<RunOut> runs = evaluate_runs(spec);
      Report rep;
      rep.spec = &spec;
      rep.runs = &runs;
      for (const Check& c : spec.checks) rep.checks.push_back(evaluate_check(spec, c, runs));
      rep.figures = make_figures(spec, runs);
      EXPECT_EQ(json_drift(json::parse(read_text(data.string())), render_data(rep), 1e-6), "");
      ++compared;
    }
  if (compared == 0) GTEST_SKIP() << "no committed seed reports (reports/seeds/<name>/data.json) yet";
}
