// render: the report's four renderings of one evaluated spec — report.md (Markdown, figures linked as
// figures/*.svg), report.html (self-contained: inline CSS and inline SVG, no external resource), data.json
// (every run point's key numbers and every check's numbers: what the seed-report regeneration test
// compares) and data.csv (one row per run point).
// Invariants: output depends only on the spec, the results and the figures (no dates, hosts or timings),
// so regenerating a report gives identical files; text from the spec is escaped for its format.
#pragma once
#include <string>
#include <vector>

#include "evaluate.hpp"
#include "figures.hpp"

namespace tp::report {

struct Report {
  const Spec* spec = nullptr;
  const std::vector<RunOut>* runs = nullptr;
  std::vector<CheckOut> checks;   // one per spec check (a missing one renders as not evaluated)
  const CheckOut& check(size_t i) const {
    static const CheckOut none;
    return i < checks.size() ? checks[i] : none;
  }
  std::vector<Figure> figures;    // one per spec figure
};

std::string render_md(const Report& r);
std::string render_html(const Report& r);
json render_data(const Report& r);
std::string render_csv(const Report& r);

// Shared by the Markdown and HTML renderings.
std::string fmt_quantity(const json& v, const std::string& unit);  // "1.48x", "true", "512", "—"
std::string bounds_text(const Check& c);                           // "in [1.2, 1.8]", ">= 2", "= true"
// A row of the runs table: run label, scenario, GPUs, plan, batch, step time, MFU, memory, fits,
// time to train, cost.
std::vector<std::vector<std::string>> run_rows(const Report& r);
// The legend of the labels the run rows carry ("[research] research technique: ...", "[beyond published] ...").
std::vector<std::string> run_label_legend(const std::vector<std::vector<std::string>>& rows);
extern const char* const kRunColumns[11];

// render_sections.cpp: the planner's answers of every plan run (empty without one), the legend sentence of the
// confidence tags ([C], [D], [M], [?]) the spec's text uses (empty when it uses none), and a plan point's
// top-K and why lists for data.json.
std::string plan_answers_md(const Report& r);
std::string plan_answers_html(const Report& r);
std::string confidence_legend(const Spec& sp);
json plan_answers_data(const json& plan_result);

}  // namespace tp::report
