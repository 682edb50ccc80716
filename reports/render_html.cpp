// render_html: report.html (see render.hpp). One file: inline CSS, the figures' SVG inline, no scripts, no
// fonts, images or links to fetch. Spec text is escaped; its Markdown subset (paragraphs, **bold**,
// *italic*, `code`, [text](url)) is rendered; a link's target must be http(s) or relative (safe_url).
#include "render.hpp"

#include <cctype>

namespace tp::report {

namespace {

std::string esc(const std::string& s) { return svg::xml_escape(s); }

// A link target that is safe in href: http(s) or relative (no ':' at all), no whitespace or control characters.
// javascript:, data:, vbscript:, file: and every other scheme are refused; the check runs on the escaped text,
// so an entity can never hide a ':' from it.
bool safe_url(const std::string& u) {
  if (u.empty()) return false;
  for (unsigned char c : u)
    if (c <= 0x20 || c == 0x7f || c == '\\') return false;
  std::string low;
  for (unsigned char c : u) low += (char)std::tolower(c);
  if (low.rfind("http://", 0) == 0 || low.rfind("https://", 0) == 0) return true;
  return low.find(':') == std::string::npos;  // relative; a ':' anywhere could start a scheme, so none
}

// Inline Markdown of one paragraph: the source is escaped first, then the markers become tags.
std::string inline_md(const std::string& src) {
  std::string s = esc(src), o;
  auto close_at = [&](size_t from, const std::string& m) { return s.find(m, from); };
  for (size_t i = 0; i < s.size();) {
    if (s[i] == '`') {
      size_t e = close_at(i + 1, "`");
      if (e != std::string::npos) { o += "<code>" + s.substr(i + 1, e - i - 1) + "</code>"; i = e + 1; continue; }
    } else if (s.compare(i, 2, "**") == 0) {
      size_t e = close_at(i + 2, "**");
      if (e != std::string::npos && e > i + 2) { o += "<strong>" + s.substr(i + 2, e - i - 2) + "</strong>"; i = e + 2; continue; }
    } else if (s[i] == '*' && i + 1 < s.size() && s[i + 1] != ' ') {
      size_t e = close_at(i + 1, "*");
      if (e != std::string::npos && e > i + 1) { o += "<em>" + s.substr(i + 1, e - i - 1) + "</em>"; i = e + 1; continue; }
    } else if (s[i] == '[') {  // [text](url): the "(" must follow the closing "]" ("[D]: ..." is text)
      size_t m = close_at(i + 1, "]");
      size_t e = m != std::string::npos && s.compare(m, 2, "](") == 0 ? close_at(m + 2, ")") : std::string::npos;
      if (e != std::string::npos) {
        const std::string url = s.substr(m + 2, e - m - 2), text = s.substr(i + 1, m - i - 1);
        if (safe_url(url)) o += "<a href=\"" + url + "\">" + text + "</a>";
        else o += text + " (" + url + ")";  // an unsafe target stays visible as inert text, never a link
        i = e + 1;
        continue;
      }
    }
    o += s[i++];
  }
  return o;
}

std::string paragraphs(const std::string& text) {
  std::string o;
  size_t i = 0;
  while (i < text.size()) {
    size_t e = text.find("\n\n", i);
    std::string p = text.substr(i, e == std::string::npos ? std::string::npos : e - i);
    if (p.find_first_not_of(" \n") != std::string::npos) o += "<p>" + inline_md(p) + "</p>\n";
    if (e == std::string::npos) break;
    i = e + 2;
  }
  return o;
}

const char* kCss =
    "body{font-family:'DejaVu Sans',Helvetica,Arial,sans-serif;max-width:1120px;margin:2em auto;padding:0 1em;"
    "color:#222;line-height:1.45}\n"
    "h1{font-size:1.6em;margin-bottom:.4em}h2{margin-top:1.6em;border-bottom:1px solid #ddd}\n"
    "table{border-collapse:collapse;margin:1em 0;font-size:14px}\n"
    "th,td{border:1px solid #ccc;padding:4px 8px;text-align:left;vertical-align:top}\n"
    "th{background:#f3f3f3}td.num{text-align:right;white-space:nowrap}\n"
    ".ok{color:#0a6e31;font-weight:bold}.bad{color:#b3261e;font-weight:bold}\n"
    "figure{margin:1.5em 0}figure svg{max-width:100%;height:auto}figcaption{font-style:italic;color:#555}\n"
    "code{background:#f4f4f4;padding:0 3px}.small{color:#555;font-size:13px}\n";

}  // namespace

std::string render_html(const Report& rep) {
  const Spec& sp = *rep.spec;
  std::string h = "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>" + esc(sp.title) +
                  "</title>\n<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n<style>\n" +
                  kCss + "</style>\n</head>\n<body>\n<h1>" + esc(sp.title) + "</h1>\n";
  if (!sp.claim.empty()) h += "<p><strong>Claim.</strong> " + inline_md(sp.claim) + "</p>\n";
  if (!sp.source.empty()) h += "<p><strong>Source.</strong> " + inline_md(sp.source) + "</p>\n";
  h += paragraphs(sp.about);
  if (std::string legend = confidence_legend(sp); !legend.empty()) h += "<p class=\"small\">" + esc(legend) + "</p>\n";
  if (!sp.checks.empty()) {
    int ok = 0;
    for (const CheckOut& c : rep.checks) ok += c.reproduced;
    h += "<h2>Checks</h2>\n<p>" + std::to_string(ok) + " of " + std::to_string(sp.checks.size()) +
         " reproduced.</p>\n<table>\n<tr><th>claim</th><th>published</th><th>ours</th><th>reproduced?</th>"
         "<th>assumption</th></tr>\n";
    for (size_t i = 0; i < sp.checks.size(); ++i) {
      const Check& c = sp.checks[i];
      const CheckOut& o = rep.check(i);
      h += "<tr><td>" + esc(c.name) + "</td><td class=\"num\">" + esc(fmt_quantity(c.published, c.unit)) +
           "</td><td class=\"num\">" + esc(fmt_quantity(o.ours, c.unit)) + "</td><td><span class=\"" +
           (o.reproduced ? "ok\">reproduced" : "bad\">not reproduced") + "</span> <span class=\"small\">(ours " +
           esc(bounds_text(c)) + ")</span></td><td>" + inline_md(c.assumption) + "</td></tr>\n";
    }
    h += "</table>\n";
  }
  h += "<h2>Runs</h2>\n<table>\n<tr>";
  for (const char* c : kRunColumns) h += std::string("<th>") + c + "</th>";
  h += "</tr>\n";
  const auto rows = run_rows(rep);
  for (auto& row : rows) {
    h += "<tr>";
    for (size_t k = 0; k < row.size(); ++k) {
      bool numeric = k == 2 || k == 4 || k == 5 || k == 6 || k == 7 || k == 9 || k == 10;
      h += std::string(numeric ? "<td class=\"num\">" : "<td>") + esc(row[k]) + "</td>";
    }
    h += "</tr>\n";
  }
  h += "</table>\n";
  for (const std::string& l : run_label_legend(rows)) h += "<p>" + esc(l) + "</p>\n";
  h += "<p class=\"small\">Step time, MFU and memory are per step of the simulated plan; time to train and "
       "cost are for the whole run. All numbers are in data.json and data.csv.</p>\n";
  h += plan_answers_html(rep);
  if (!rep.figures.empty()) {
    h += "<h2>Figures</h2>\n";
    for (const Figure& f : rep.figures)
      h += "<figure>\n" + f.svg + "<figcaption>" + esc(f.title) + " (" + esc(f.file) + ")</figcaption>\n</figure>\n";
  }
  h += "</body>\n</html>\n";
  return h;
}

}  // namespace tp::report
