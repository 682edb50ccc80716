// report.html against hostile spec text (issue 14): a battery of script, event-handler and URL-scheme attacks in
// every text field of a report spec that reaches the HTML (title, claim, source, about, check name, unit and
// assumption, run id). The page may contain only the tags the renderer emits, no on* attributes, and href/src
// targets that are http(s) or relative.
#include <gtest/gtest.h>

#include <sys/wait.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>

#include "models/json_check.hpp"
#include "temp_dir.hpp"

namespace fs = std::filesystem;
using tp::json;
using tp::testutil::TempDir;

namespace {

const std::vector<std::string> kHostile = {
    "<script>alert(1)</script>",
    "[x](javascript:alert(1))",
    "[x](JaVaScRiPt:alert(1))",
    "[x]( javascript:alert(1))",
    "[x](java\tscript:alert(1))",
    "[x](data:text/html;base64,PHNjcmlwdD5hbGVydCgxKTwvc2NyaXB0Pg==)",
    "[x](vbscript:msgbox(1))",
    "[x](&#106;avascript:alert(1))",
    "[x](jav&#x09;ascript:alert(1))",
    "[x](file:///etc/passwd)",
    "[x](\" onmouseover=\"alert(1))",
    "[x](http://ok.example/\" onclick=\"alert(1))",
    "[<img src=x onerror=alert(1)>](https://example.com)",
    "**<svg onload=alert(1)>**",
    "`<iframe src=javascript:alert(1)>`",
    "*<a href=javascript:alert(1)>x</a>*",
    "\"><script>alert(1)</script>",
    "'><body onload=alert(1)>",
    "</title><script>alert(1)</script>",
    "<style>body{background:url(javascript:alert(1))}</style>",
    "[x](\\\\evil.example\\share)",
    "\x01\x7f<!-- -->]]><![CDATA[<script>",
};

std::string slurp(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::string lower(std::string s) {
  for (char& c : s) c = (char)std::tolower((unsigned char)c);
  return s;
}

// Every problem found in the page: tags outside the renderer's set, on* attributes, unsafe href/src.
std::vector<std::string> html_problems(const std::string& html) {
  static const std::set<std::string> allowed = {
      "!doctype", "html", "head", "meta", "title", "style", "body", "h1", "h2", "p", "strong", "em", "code", "a",
      "table", "tr", "th", "td", "span", "figure", "figcaption", "svg", "g", "rect", "line", "text", "path",
      "polyline", "polygon", "circle", "tspan", "desc", "defs", "clippath", "br"};
  std::vector<std::string> bad;
  const std::regex tag(R"(<\s*/?\s*([!A-Za-z][A-Za-z0-9]*)([^>]*)>)");
  for (std::sregex_iterator it(html.begin(), html.end(), tag), end; it != end; ++it) {
    const std::string name = lower((*it)[1]), attrs = lower((*it)[2]);
    if (!allowed.count(name)) bad.push_back("tag <" + name + ">");
    const std::string unquoted = std::regex_replace(attrs, std::regex(R"("[^"]*")"), "\"\"");  // values are inert
    if (std::regex_search(unquoted, std::regex(R"((^|[\s"'/])on[a-z]+\s*=)"))) bad.push_back("event attribute: " + it->str());
    std::smatch m;
    std::string rest = attrs;
    while (std::regex_search(rest, m, std::regex(R"((href|src)\s*=\s*"([^"]*)\")"))) {
      const std::string u = m[2];
      const bool ok = u.rfind("http://", 0) == 0 || u.rfind("https://", 0) == 0 || u.rfind('#', 0) == 0 ||
                      u.find(':') == std::string::npos;
      if (!ok) bad.push_back("unsafe url: " + u);
      rest = m.suffix();
    }
  }
  return bad;
}

}  // namespace

TEST(ReportHostile, NoScriptNoUnsafeUrlInHtml) {
  TempDir d;
  fs::copy_file(std::string(TP_SOURCE_DIR) + "/scenarios/default.json", d.file("s.json"));
  for (size_t i = 0; i < kHostile.size(); ++i) {
    const std::string& h = kHostile[i];
    std::string id = "r";  // appended: g++ 12 warns -Wrestrict falsely on "r" + std::string&&
    id += std::to_string(i);
    id += h;
    json spec = {{"title", h},
                 {"claim", "claim " + h},
                 {"source", "source " + h},
                 {"about", "about " + h + "\n\nsecond paragraph " + h},
                 {"runs", json::array({{{"id", id}, {"kind", "simulate"}, {"scenario", "s.json"}}})},
                 {"checks", json::array({{{"name", h},
                                          {"published", 1.0},
                                          {"unit", h},
                                          {"ours", {{"run", id}, {"metric", "/step_time_s"}}},
                                          {"reproduced_if", {{"min", 0.0}, {"max", 1e9}}},
                                          {"assumption", "assumption " + h}}})},
                 {"figures", json::array({{{"kind", "breakdown"}, {"runs", json::array({id})}}})}};
    std::ofstream(d.file("spec.json")) << spec.dump(1);
    const std::string out = d.file("out" + std::to_string(i));
    const std::string cmd = "timeout 60 " + std::string(TP_BINARY) + " report " + d.file("spec.json") + " --out " +
                            out + " --quiet 2>&1";
    FILE* p = popen(cmd.c_str(), "r");
    std::string log;
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, p)) > 0) log.append(buf, n);
    const int st = pclose(p);
    if (!(WIFEXITED(st) && WEXITSTATUS(st) == 0)) {  // refusing the input is safe too, but must say why
      EXPECT_EQ(WEXITSTATUS(st), 2) << h << "\n" << log;
      continue;
    }
    const std::string html = slurp(out + "/report.html");
    ASSERT_FALSE(html.empty()) << h;
    for (const std::string& b : html_problems(html)) ADD_FAILURE() << "hostile " << json(h).dump() << ": " << b;
    EXPECT_EQ(lower(html).find("javascript:\""), std::string::npos) << h;
  }
}
