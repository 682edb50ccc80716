// The report spec (reports/spec.hpp): a valid spec resolves paths, defaults and sweeps; every kind of
// mistake is reported at once with the spec file and the JSON path; overrides and sweep values reach the
// scenario JSON.
#include <gtest/gtest.h>

#include <algorithm>

#include "reports/spec.hpp"

using namespace tp;
using namespace tp::report;

static const std::string kExamples = std::string(TP_SOURCE_DIR) + "/scenarios/examples";

static std::vector<std::string> errors_of(const json& j) {
  try {
    spec_from_json(j, kExamples, "spec.json");
  } catch (const InputError& e) {
    return e.messages;
  }
  return {};
}

static bool has(const std::vector<std::string>& msgs, const std::string& needle) {
  return std::any_of(msgs.begin(), msgs.end(), [&](const std::string& m) { return m.find(needle) != std::string::npos; });
}

TEST(ReportSpec, ValidSpecResolvesPathsAndDefaults) {
  json j = json::parse(R"({
    "title": "t", "claim": "c",
    "runs": [
      {"id": "a", "kind": "simulate", "scenario": "optimus-2d-frontera.json", "overrides": {"plan": {"tp_mode": "1d"}}},
      {"id": "s", "kind": "simulate", "scenario": "optimus-2d-frontera.json",
       "sweep": {"pointer": "/training/global_batch", "values": [48, 96]}},
      {"id": "p", "kind": "plan", "scenario": "optimus-2d-frontera.json"}
    ],
    "checks": [{"name": "n", "published": 1.5, "ours": {"ratio": [{"run": "a", "metric": "/step_time_s"},
                                                                  {"run": "s", "metric": "/step_time_s", "at": 1}]},
                "reproduced_if": {"min": 1}},
               {"name": "m", "ours": {"max_fit": "s"}, "reproduced_if": {"equals": 96}}],
    "figures": [{"kind": "breakdown", "runs": ["a", "s"]}, {"kind": "sweep", "run": "s", "metric": "/step_time_s"},
                {"kind": "scaling", "run": "p"}, {"kind": "pareto", "run": "p"}, {"kind": "timeline", "run": "a"}]
  })");
  Spec s = spec_from_json(j, kExamples, "spec.json");
  ASSERT_EQ(s.runs.size(), 3u);
  EXPECT_EQ(s.runs[0].scenario_file, kExamples + "/optimus-2d-frontera.json");
  EXPECT_EQ(s.runs[0].overrides["plan"]["tp_mode"], "1d");
  ASSERT_TRUE(s.runs[1].sweep.has_value());
  EXPECT_EQ(s.runs[1].sweep->x, (std::vector<double>{48, 96}));  // x defaults to numeric values
  EXPECT_EQ(s.runs[1].sweep->x_label, "/training/global_batch");
  EXPECT_EQ(s.runs[1].points(), 2u);
  EXPECT_EQ(s.runs[2].kind, RunKind::plan);
  ASSERT_EQ(s.checks.size(), 2u);
  EXPECT_EQ(s.checks[0].ours.kind, Quantity::ratio);
  EXPECT_EQ(s.checks[0].ours.parts.at(1).at, 1);
  EXPECT_EQ(*s.checks[0].min, 1.0);
  EXPECT_FALSE(s.checks[0].max.has_value());
  EXPECT_EQ(s.checks[1].equals, json(96));
  EXPECT_EQ(s.figures.size(), 5u);
  EXPECT_EQ(s.figures[1].metric, "/step_time_s");
  EXPECT_EQ(s.find("s"), &s.runs[1]);
  EXPECT_EQ(s.find("nope"), nullptr);
}

TEST(ReportSpec, EveryProblemNamesTheSpecAndJsonPath) {
  json j = json::parse(R"({
    "title": 3, "colour": "red",
    "runs": [
      {"id": "a", "kind": "simulat", "scenario": "no-such-file.json"},
      {"id": "s", "kind": "simulate", "scenario": "optimus-2d-frontera.json",
       "sweep": {"pointer": "training/global_batch", "values": [48, 96], "x": [1]}},
      {"id": "a", "kind": "simulate", "scenario": "optimus-2d-frontera.json", "overrides": [1]},
      {"id": "t", "kind": "simulate", "scenario": "optimus-2d-frontera.json",
       "sweep": {"pointer": "/plan/recompute", "values": ["none", "full"], "step": 1}}
    ],
    "checks": [
      {"name": "r", "ours": {"ratio": [{"run": "a", "metric": "/step_time_s"}, {"run": "zz", "metric": "/x"}]}},
      {"name": "at", "ours": {"run": "s", "metric": "/step_time_s"}, "reproduced_if": {"max": 1, "min": 2}},
      {"name": "mf", "ours": {"max_fit": "a"}, "reproduced_if": {"equals": "yes"}},
      {"name": "two", "ours": {"value": 1, "run": "a"}, "reproduced_if": {}},
      {"name": "at2", "ours": {"run": "a", "metric": "/step_time_s", "at": 0}, "reproduced_if": {"min": 0}}
    ],
    "figures": [
      {"kind": "histogram"},
      {"kind": "breakdown", "runs": ["a", "nope"], "metric": "/x"},
      {"kind": "scaling", "run": "a"},
      {"kind": "sweep", "run": "a", "metric": "step_time_s"}
    ]
  })");
  auto m = errors_of(j);
  // At most 20 problems are listed, then one line counts the rest (issue 44); the checks' and figures' problems
  // are listed in full once the runs and the top-level keys are right.
  EXPECT_EQ(m.size(), 21u);
  EXPECT_TRUE(has(m, "more problems (not shown)"));
  m.pop_back();
  json fixed = j;
  fixed["title"] = "t";
  fixed.erase("colour");
  fixed["runs"] = json::parse(R"([{"id": "a", "kind": "simulate", "scenario": "optimus-2d-frontera.json"},
      {"id": "s", "kind": "simulate", "scenario": "optimus-2d-frontera.json",
       "sweep": {"pointer": "/training/global_batch", "values": [48, 96]}}])");
  auto more = errors_of(fixed);
  EXPECT_LE(more.size(), 20u);
  m.insert(m.end(), more.begin(), more.end());
  for (auto& s : m) EXPECT_EQ(s.rfind("spec.json: $", 0), 0u) << s;  // every message: file, then JSON path
  EXPECT_TRUE(has(m, "spec.json: $.title: expected a string, got 3"));
  EXPECT_TRUE(has(m, "$.colour: unknown key; expected one of: title, claim, source, about, runs, checks, figures"));
  EXPECT_TRUE(has(m, "$.runs[0].kind: expected one of \"simulate\", \"plan\", got \"simulat\""));
  EXPECT_TRUE(has(m, "$.runs[0].scenario: expected a scenario file (relative to the spec)"));
  EXPECT_TRUE(has(m, "spec.json: $.runs[1].sweep.pointer: expected a JSON pointer"));
  EXPECT_TRUE(has(m, "$.runs[1].sweep.x: expected 2 numbers (one per value), got 1"));
  EXPECT_TRUE(has(m, "$.runs[2].id: expected a unique run id, got \"a\""));
  EXPECT_TRUE(has(m, "$.runs[2].overrides: expected an object"));
  EXPECT_TRUE(has(m, "$.runs[3].sweep.x: missing; expected numbers, one per value"));
  EXPECT_TRUE(has(m, "$.runs[3].sweep.step: unknown key"));
  EXPECT_TRUE(has(m, "$.checks[0].ours.ratio[1].run: expected the id of a run in $.runs, got \"zz\""));
  EXPECT_TRUE(has(m, "$.checks[0].reproduced_if: missing"));
  EXPECT_TRUE(has(m, "$.checks[1].ours.at: missing; run \"s\" is a sweep"));
  EXPECT_TRUE(has(m, "$.checks[1].reproduced_if: min must be <= max"));
  EXPECT_TRUE(has(m, "$.checks[2].ours.max_fit: needs a simulate run with a sweep"));
  EXPECT_TRUE(has(m, "$.checks[2].reproduced_if.equals: expected true, false or a number"));
  EXPECT_TRUE(has(m, "$.checks[3].ours: more than one of the forms"));
  EXPECT_TRUE(has(m, "$.checks[3].reproduced_if: expected at least one of min, max, equals"));
  EXPECT_TRUE(has(m, "$.checks[4].ours.at: only for sweep runs"));
  EXPECT_TRUE(has(m, "$.figures[0].kind: expected one of \"breakdown\", \"memory\""));
  EXPECT_TRUE(has(m, "$.figures[1].metric: unknown key; expected one of: kind, runs"));
  EXPECT_TRUE(has(m, "$.figures[1].runs[1]: expected the id of a run in $.runs, got \"nope\""));
  EXPECT_TRUE(has(m, "$.figures[2].run: a scaling figure needs a run of kind \"plan\""));
  EXPECT_TRUE(has(m, "$.figures[3].run: a sweep figure needs a run with a sweep"));
  EXPECT_TRUE(has(m, "$.figures[3].metric: expected a JSON pointer"));
}

TEST(ReportSpec, RequiredKeysAndShapes) {
  auto m = errors_of(json::parse(R"({"runs": []})"));
  EXPECT_TRUE(has(m, "spec.json: $.title: missing; expected a string"));
  EXPECT_TRUE(has(m, "spec.json: $.runs: expected a non-empty array, got an array []"));
  m = errors_of(json::parse(R"([1, 2])"));
  EXPECT_TRUE(has(m, "spec.json: $: expected an object"));
  m = errors_of(json::parse(R"({"title": "t", "runs": [{"id": "", "kind": "plan"}], "figures": {}})"));
  EXPECT_TRUE(has(m, "$.runs[0].id: must not be empty"));
  EXPECT_TRUE(has(m, "$.runs[0].scenario: missing; expected a string"));
  EXPECT_TRUE(has(m, "$.figures: expected a non-empty array"));
}

TEST(ReportSpec, ReadSpecReportsUnreadableAndMalformedFiles) {
  try {
    read_spec("/nonexistent/spec.report.json");
    FAIL();
  } catch (const InputError& e) {
    EXPECT_NE(e.messages.at(0).find("/nonexistent/spec.report.json"), std::string::npos);
  }
}

TEST(ReportSpec, OverridesThenSweepValueReachTheScenario) {
  json j = json::parse(R"({"title": "t", "runs": [
      {"id": "s", "kind": "simulate", "scenario": "optimus-2d-frontera.json",
       "overrides": {"training": {"global_batch": 48, "tokens": 1e9}, "about": null},
       "sweep": {"pointer": "/plan/microbatch", "values": [6, 12], "x": [1, 2], "x_label": "mb"}}]})");
  Spec s = spec_from_json(j, kExamples, "spec.json");
  json p1 = point_scenario_json(s, s.runs[0], 1);
  EXPECT_EQ(p1["training"]["global_batch"], 48);
  EXPECT_EQ(p1["training"]["tokens"], 1e9);
  EXPECT_EQ(p1["training"]["seq_len"], 512);     // merge patch keeps what it does not mention
  EXPECT_FALSE(p1.contains("about"));           // null removes a key (RFC 7386)
  EXPECT_EQ(p1["plan"]["microbatch"], 12);
  EXPECT_EQ(p1["plan"]["tp_mode"], "2d");
  EXPECT_EQ(point_scenario_json(s, s.runs[0], 0)["plan"]["microbatch"], 6);
}

TEST(ReportSpec, SweepPointerThatCannotBeSetIsAnInputError) {
  json j = json::parse(R"({"title": "t", "runs": [
      {"id": "s", "kind": "simulate", "scenario": "optimus-2d-frontera.json",
       "sweep": {"pointer": "/training/global_batch/deeper", "values": [1, 2]}}]})");
  Spec s = spec_from_json(j, kExamples, "spec.json");
  try {
    point_scenario_json(s, s.runs[0], 0);
    FAIL();
  } catch (const InputError& e) {
    EXPECT_EQ(e.messages.at(0).rfind("spec.json: $.runs[0].sweep.pointer: cannot place a value", 0), 0u) << e.messages[0];
  }
}
