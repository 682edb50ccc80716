// render_sections: the sections both pages share beyond the checks and runs tables — the planner's answers of
// every plan run (top-K table, Pareto table, why the nearest alternatives lose; cells from planner/output.cpp's
// plan_answers, so the report reads as `trainplan plan` prints) and the legend of the confidence tags that spec
// text uses ([C], [D], [M], [?], defined in the seed notes).
#include "planner/search.hpp"
#include "render.hpp"

namespace tp::report {

namespace {

struct Tag {
  const char* tag;
  const char* meaning;
};
const Tag kTags[] = {{"[C]", "confirmed from a primary public source"},
                     {"[D]", "derived by us (arithmetic or first-principles modelling that fits the paper's description)"},
                     {"[M]", "from memory or secondary summaries, not re-verified against the paper"},
                     {"[?]", "unknown (the paper's full text was not available)"}};

bool uses(const Spec& sp, const std::string& tag) {
  if (sp.claim.find(tag) != std::string::npos || sp.source.find(tag) != std::string::npos ||
      sp.about.find(tag) != std::string::npos)
    return true;
  for (const Check& c : sp.checks)
    if (c.name.find(tag) != std::string::npos || c.assumption.find(tag) != std::string::npos) return true;
  return false;
}

// The plan points whose answers are shown: (heading, plan --json result).
std::vector<std::pair<std::string, const json*>> plan_points(const Report& rep) {
  std::vector<std::pair<std::string, const json*>> v;
  for (const RunOut& r : *rep.runs) {
    if (r.spec->kind != RunKind::plan) continue;
    for (const Point& p : r.points) {
      std::string h = r.label();
      if (r.spec->sweep) h += ", " + r.spec->sweep->pointer + " = " + json_brief(p.value);
      v.push_back({h, &p.result});
    }
  }
  return v;
}

std::string md_cell(const std::string& s) {
  std::string o;
  for (char c : s) o += c == '|' ? std::string("\\|") : c == '\n' ? std::string(" ") : std::string(1, c);
  return o;
}

std::string md_table(const std::vector<std::string>& head, const std::vector<std::vector<std::string>>& rows) {
  std::string s = "|", rule = "|";
  for (const std::string& h : head) {
    s += " ";
    s += md_cell(h);
    s += " |";
    rule += h == "plan" ? "---|" : "---:|";
  }
  s += "\n" + rule + "\n";
  for (const auto& row : rows) {
    s += "|";
    for (const std::string& c : row) {
      s += " ";
      s += md_cell(c);
      s += " |";
    }
    s += "\n";
  }
  return s;
}

std::string html_table(const std::vector<std::string>& head, const std::vector<std::vector<std::string>>& rows) {
  std::string s = "<table>\n<tr>";
  for (const std::string& h : head) s += "<th>" + svg::xml_escape(h) + "</th>";
  s += "</tr>\n";
  for (const auto& row : rows) {
    s += "<tr>";
    for (size_t k = 0; k < row.size(); ++k)
      s += std::string(k + 1 < row.size() ? "<td class=\"num\">" : "<td>") + svg::xml_escape(row[k]) + "</td>";
    s += "</tr>\n";
  }
  return s + "</table>\n";
}

const char* kIntro = "The planner's answers for each plan run, as `trainplan plan` prints them.";

}  // namespace

std::string confidence_legend(const Spec& sp) {
  std::string s;
  for (const Tag& t : kTags)
    if (uses(sp, t.tag)) s += std::string(s.empty() ? "" : "; ") + t.tag + " " + t.meaning;
  return s.empty() ? s : "Confidence tags in this report: " + s + ".";
}

std::string plan_answers_md(const Report& rep) {
  auto pts = plan_points(rep);
  if (pts.empty()) return "";
  std::string md = "## Planner answers\n\n" + std::string(kIntro) + "\n\n";
  for (const auto& [head, res] : pts) {
    PlanAnswers a = plan_answers(*res);
    md += "### " + head + "\n\n";
    if (a.top.empty()) {
      md += "No plan: " + res->value("note", std::string("nothing fits")) + "\n\n";
      continue;
    }
    for (const std::string& n : a.notes) md += "- " + n + "\n";
    if (!a.notes.empty()) md += "\n";
    md += "Top plans (simulated):\n\n" + md_table(a.top_head, a.top) + "\n";
    md += a.pareto_title + ":\n\n" + md_table(a.pareto_head, a.pareto) + "\n";
    if (!a.why.empty()) {
      md += "Why the nearest alternatives lose:\n\n";
      for (const auto& [alt, reason] : a.why) md += "- " + alt + "  \n  " + reason + "\n";
      md += "\n";
    }
  }
  return md;
}

std::string plan_answers_html(const Report& rep) {
  auto pts = plan_points(rep);
  if (pts.empty()) return "";
  std::string h = "<h2>Planner answers</h2>\n<p>The planner's answers for each plan run, as <code>trainplan plan</code> "
                  "prints them.</p>\n";
  for (const auto& [head, res] : pts) {
    PlanAnswers a = plan_answers(*res);
    h += "<h3>" + svg::xml_escape(head) + "</h3>\n";
    if (a.top.empty()) {
      h += "<p>No plan: " + svg::xml_escape(res->value("note", std::string("nothing fits"))) + "</p>\n";
      continue;
    }
    if (!a.notes.empty()) {
      h += "<ul>\n";
      for (const std::string& n : a.notes) h += "<li>" + svg::xml_escape(n) + "</li>\n";
      h += "</ul>\n";
    }
    h += "<p>Top plans (simulated):</p>\n" + html_table(a.top_head, a.top);
    h += "<p>" + svg::xml_escape(a.pareto_title) + ":</p>\n" + html_table(a.pareto_head, a.pareto);
    if (!a.why.empty()) {
      h += "<p>Why the nearest alternatives lose:</p>\n<ul>\n";
      for (const auto& [alt, reason] : a.why)
        h += "<li>" + svg::xml_escape(alt) + "<br>" + svg::xml_escape(reason) + "</li>\n";
      h += "</ul>\n";
    }
  }
  return h;
}

json plan_answers_data(const json& result) {
  json d;
  json top = json::array();
  for (const json& c : result.value("top", json::array())) {
    json s = c.value("simulated", json::object());
    json e = {{"rank", c.value("rank", 0)}, {"gpus", c.value("gpus", 0)}, {"global_batch", c.value("global_batch", 0)},
              {"summary", c.value("summary", std::string())}};
    for (const char* k : {"step_time_s", "time_to_train_s", "cost_usd", "mfu", "peak_bytes_per_gpu"})
      if (s.contains(k)) e[k] = s[k];
    if (c.contains("analytic")) e["analytic_step_time_s"] = c["analytic"].value("step_time_s", 0.0);
    top.push_back(e);
  }
  d["top"] = top;
  d["notes"] = result.value("notes", json::array());
  json why = json::array();
  for (const json& e : result.value("why", json::array())) {
    json w;
    for (const char* k : {"dimension", "gpus", "global_batch", "summary", "reason", "detail", "time_to_train_s", "fits"})
      if (e.contains(k)) w[k] = e[k];
    why.push_back(w);
  }
  d["why"] = why;
  if (result.contains("min_gpus")) d["min_gpus"] = result["min_gpus"];
  return d;
}

}  // namespace tp::report
