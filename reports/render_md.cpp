// render_md: report.md, data.json and data.csv (see render.hpp), plus the table rows both pages share.
#include <cmath>
#include <cstdio>

#include "render.hpp"
#include "models/framework.hpp"

namespace tp::report {

using svg::Unit;

const char* const kRunColumns[11] = {"run", "scenario", "GPUs", "plan", "global batch", "step time", "MFU",
                                     "peak memory / capacity", "fits", "time to train", "cost"};

static std::string g3(double v) {
  char b[64];
  if (std::floor(v) == v && std::fabs(v) < 1e7) std::snprintf(b, sizeof b, "%.0f", v);
  else if (std::fabs(v) >= 1e6 || std::fabs(v) < 1e-3) std::snprintf(b, sizeof b, "%.3g", v);
  else return svg::num(v, std::fabs(v) >= 100 ? 0 : std::fabs(v) >= 10 ? 1 : std::fabs(v) >= 1 ? 2 : 3);
  return b;
}

std::string fmt_quantity(const json& v, const std::string& unit) {
  if (v.is_boolean()) return v.get<bool>() ? "true" : "false";
  if (v.is_string()) return v.get<std::string>();
  if (!v.is_number()) return "—";
  std::string s = g3(v.get<double>());
  if (unit.empty()) return s;
  return s + (unit == "x" || unit == "%" ? unit : " " + unit);
}

std::string bounds_text(const Check& c) {
  if (!c.equals.is_null()) return "= " + fmt_quantity(c.equals, "");
  if (c.min && c.max) return "in [" + g3(*c.min) + ", " + g3(*c.max) + "]";
  if (c.min) return ">= " + g3(*c.min);
  return "<= " + g3(*c.max);
}

static std::string point_label(const RunOut& r, const Point& p) {
  return r.spec->sweep ? r.label() + " @ " + svg::num(p.x.get<double>(), 4) : r.label();
}

std::vector<std::vector<std::string>> run_rows(const Report& rep) {
  std::vector<std::vector<std::string>> rows;
  for (const RunOut& r : *rep.runs) {
    for (const Point& p : r.points) {
      std::string scen = r.spec->scenario;
      if (r.spec->sweep) scen += ", " + r.spec->sweep->pointer + " = " + json_brief(p.value);
      if (!r.spec->overrides.is_null()) scen += " (with overrides)";
      json m = key_metrics(p.result, r.spec->kind);
      if (m.empty()) {
        rows.push_back({point_label(r, p), scen, "—", "no plan fits", "—", "—", "—", "—", "no", "—", "—"});
        continue;
      }
      std::string plan = m["plan"].get<std::string>();
      if (r.spec->kind == RunKind::plan) plan = "best: " + plan;
      bool fits = m["fits"].get<bool>() && m["host_fits"].get<bool>();
      rows.push_back({point_label(r, p), scen, std::to_string(m["gpus"].get<long long>()), plan,
                      std::to_string(m["global_batch"].get<long long>()),
                      svg::human(m["step_time_s"].get<double>(), Unit::seconds),
                      svg::human(m["mfu"].get<double>(), Unit::fraction),
                      svg::human(m["peak_bytes_per_gpu"].get<double>(), Unit::bytes) + " / " +
                          svg::human(m["capacity_bytes"].get<double>(), Unit::bytes),
                      fits ? "yes" : !m["fits"].get<bool>() ? "no" : "no (host memory)",
                      svg::human(m["time_to_train_s"].get<double>(), Unit::seconds),
                      svg::human(m["cost_usd"].get<double>(), Unit::usd)});
    }
  }
  return rows;
}

std::vector<std::string> run_label_legend(const std::vector<std::vector<std::string>>& rows) {
  bool research = false, beyond = false;
  for (const auto& r : rows)
    if (r.size() > 3) {
      research |= r[3].find("[research]") != std::string::npos;
      beyond |= r[3].find("[beyond published]") != std::string::npos;
    }
  std::vector<std::string> out;
  if (research) out.push_back(std::string("[research] ") + kResearchLabel);
  if (beyond) out.push_back(std::string("[beyond published] ") + kBeyondPublishedLabel);
  return out;
}

static std::string cell(std::string s) {
  std::string o;
  for (char c : s) {
    if (c == '|') o += "\\|";
    else if (c == '\n') o += ' ';
    else o += c;
  }
  return o;
}

static std::string md_row(const std::vector<std::string>& cells) {
  std::string s = "|";
  for (const std::string& c : cells) {
    s += ' ';
    s += cell(c);
    s += " |";
  }
  return s + "\n";
}

std::string render_md(const Report& rep) {
  const Spec& sp = *rep.spec;
  std::string md = "# " + sp.title + "\n\n";
  if (!sp.claim.empty()) md += "**Claim.** " + sp.claim + "\n\n";
  if (!sp.source.empty()) md += "**Source.** " + sp.source + "\n\n";
  if (!sp.about.empty()) md += sp.about + "\n\n";
  if (std::string legend = confidence_legend(sp); !legend.empty()) md += "*" + legend + "*\n\n";
  if (!sp.checks.empty()) {
    int ok = 0;
    for (const CheckOut& c : rep.checks) ok += c.reproduced;
    md += "## Checks\n\n" + std::to_string(ok) + " of " + std::to_string(sp.checks.size()) + " reproduced.\n\n";
    md += md_row({"claim", "published", "ours", "reproduced?", "assumption"}) + "|---|---|---|---|---|\n";
    for (size_t i = 0; i < sp.checks.size(); ++i) {
      const Check& c = sp.checks[i];
      const CheckOut& o = rep.check(i);
      std::string verdict = std::string(o.reproduced ? "**reproduced**" : "**not reproduced**") + " (ours " +
                            bounds_text(c) + ")";
      md += md_row({c.name, fmt_quantity(c.published, c.unit), fmt_quantity(o.ours, c.unit), verdict, c.assumption});
    }
    md += "\n";
  }
  md += "## Runs\n\n";
  std::vector<std::string> head(kRunColumns, kRunColumns + 11);
  md += md_row(head) + "|---|---|---:|---|---:|---:|---:|---:|---|---:|---:|\n";
  const auto rows = run_rows(rep);
  for (auto& row : rows) md += md_row(row);
  for (const std::string& l : run_label_legend(rows)) md += "\n" + l + "\n";
  md += "\nStep time, MFU and memory are per step of the simulated plan (`trainplan simulate`); time to train and "
        "cost are for the whole run. All numbers are in data.json and data.csv.\n\n";
  md += plan_answers_md(rep);
  if (!rep.figures.empty()) {
    md += "## Figures\n\n";
    for (const Figure& f : rep.figures) md += "![" + f.title + "](" + f.file + ")\n\n*" + f.title + "*\n\n";
  }
  return md;
}

json render_data(const Report& rep) {
  const Spec& sp = *rep.spec;
  json d;
  d["title"] = sp.title;
  d["claim"] = sp.claim;
  d["source"] = sp.source;
  json runs = json::array();
  for (const RunOut& r : *rep.runs) {
    json jr = {{"id", r.spec->id}, {"name", r.label()}, {"kind", r.spec->kind == RunKind::plan ? "plan" : "simulate"},
               {"scenario", r.spec->scenario}};
    if (r.spec->sweep) jr["sweep"] = {{"pointer", r.spec->sweep->pointer}, {"x_label", r.spec->sweep->x_label}};
    json pts = json::array();
    for (const Point& p : r.points) {
      json jp;
      if (r.spec->sweep) { jp["x"] = p.x; jp["value"] = p.value; }
      jp["metrics"] = key_metrics(p.result, r.spec->kind);
      if (const json* s = sim_result(p.result, r.spec->kind)) {
        jp["breakdown_s"] = s->value("breakdown_s", json::object());
        if (s->contains("memory")) jp["memory_bytes"] = (*s)["memory"].value("breakdown_bytes", json::object());
      }
      if (r.spec->kind == RunKind::plan) {
        json bg = json::array();
        for (const char* list : {"by_gpus", "pareto"}) {
          json a = json::array();
          if (p.result.contains(list) && p.result[list].is_array())
            for (const json& e : p.result[list]) {
              json x;
              for (const char* k : {"gpus", "global_batch", "step_time_s", "time_to_train_s", "cost_usd", "summary"})
                if (e.contains(k)) x[k] = e[k];
              a.push_back(x);
            }
          jp[list] = a;
        }
        jp.update(plan_answers_data(p.result));
      }
      pts.push_back(jp);
    }
    jr["points"] = pts;
    runs.push_back(jr);
  }
  d["runs"] = runs;
  json checks = json::array();
  for (size_t i = 0; i < sp.checks.size(); ++i) {
    const Check& c = sp.checks[i];
    json b = json::object();
    if (c.min) b["min"] = *c.min;
    if (c.max) b["max"] = *c.max;
    if (!c.equals.is_null()) b["equals"] = c.equals;
    checks.push_back({{"name", c.name}, {"published", c.published}, {"unit", c.unit}, {"ours", rep.check(i).ours},
                      {"reproduced", rep.check(i).reproduced}, {"reproduced_if", b}, {"assumption", c.assumption}});
  }
  d["checks"] = checks;
  json figs = json::array();
  for (const Figure& f : rep.figures) figs.push_back({{"file", f.file}, {"title", f.title}});
  d["figures"] = figs;
  return d;
}

static std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string o = "\"";
  for (char c : s) o += c == '"' ? std::string("\"\"") : std::string(1, c);
  return o + "\"";
}

std::string render_csv(const Report& rep) {
  static const char* const num_keys[] = {"gpus", "global_batch", "step_time_s", "mfu", "tokens_per_s",
                                         "peak_bytes_per_gpu", "capacity_bytes", "time_to_train_s", "gpu_hours",
                                         "cost_usd"};
  std::string s = "run,name,kind,x,plan,gpus,global_batch,step_time_s,mfu,tokens_per_s,peak_bytes_per_gpu,capacity_bytes,"
                  "time_to_train_s,gpu_hours,cost_usd,fits,host_fits\n";
  for (const RunOut& r : *rep.runs) {
    for (const Point& p : r.points) {
      json m = key_metrics(p.result, r.spec->kind);
      char b[64];
      std::string row = csv_field(r.spec->id) + "," + csv_field(r.label()) + "," + (r.spec->kind == RunKind::plan ? "plan" : "simulate") + ",";
      if (p.x.is_number()) { std::snprintf(b, sizeof b, "%.9g", p.x.get<double>()); row += b; }
      row += ',';
      row += csv_field(m.value("plan", std::string()));
      for (const char* k : num_keys) {
        row += ",";
        if (m.contains(k)) { std::snprintf(b, sizeof b, "%.9g", m[k].get<double>()); row += b; }
      }
      row += std::string(",") + (m.contains("fits") ? (m["fits"].get<bool>() ? "true" : "false") : "") + "," +
             (m.contains("host_fits") ? (m["host_fits"].get<bool>() ? "true" : "false") : "");
      s += row + "\n";
    }
  }
  return s;
}

}  // namespace tp::report
