// report_test_util: helpers for tests/reports — a small XML well-formedness check (balanced tags, quoted
// attributes, escaped text), file reading, running the trainplan binary, and comparing the numbers of two
// JSON documents.
#pragma once
#include <sys/wait.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace tp::reporttest {

// "" when `s` is well-formed XML as far as elements, attributes and entities go; else the first problem.
inline std::string xml_problem(const std::string& s) {
  std::vector<std::string> open;
  size_t i = 0;
  auto entity_ok = [&](size_t at) {
    for (const char* e : {"&amp;", "&lt;", "&gt;", "&quot;", "&#39;"})
      if (s.compare(at, std::char_traits<char>::length(e), e) == 0) return true;
    return false;
  };
  bool root_seen = false;
  while (i < s.size()) {
    if (s[i] == '&' && !entity_ok(i)) return "unescaped & at " + std::to_string(i);
    if (s[i] == '>') return "stray > at " + std::to_string(i);
    if (s[i] != '<') { ++i; continue; }
    size_t e = s.find('>', i);
    if (e == std::string::npos) return "unterminated tag at " + std::to_string(i);
    std::string tag = s.substr(i + 1, e - i - 1);
    if (tag.rfind("!--", 0) == 0 || tag.rfind("?", 0) == 0 || tag.rfind("!DOCTYPE", 0) == 0) { i = e + 1; continue; }
    size_t quotes = 0;
    for (char c : tag) quotes += c == '"';
    if (quotes % 2) return "unbalanced quotes in <" + tag + ">";
    if (tag.find('<') != std::string::npos) return "< inside a tag at " + std::to_string(i);
    if (!tag.empty() && tag[0] == '/') {
      std::string name = tag.substr(1);
      if (open.empty() || open.back() != name) return "mismatched </" + name + ">, open <" + (open.empty() ? "" : open.back()) + ">";
      open.pop_back();
    } else if (!tag.empty() && tag.back() == '/') {
      if (open.empty() && root_seen) return "second root element";
    } else {
      std::string name = tag.substr(0, tag.find_first_of(" \n\t"));
      if (open.empty() && root_seen) return "second root element <" + name + ">";
      open.push_back(name);
      root_seen = true;
    }
    i = e + 1;
  }
  if (!open.empty()) return "unclosed <" + open.back() + ">";
  return "";
}

inline std::string read_text(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// Exit code of a shell command.
inline int sh(const std::string& cmd) {
  int rc = std::system(cmd.c_str());
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

// Every number in `want` must be in `got` at the same path within a relative tolerance, and every boolean
// equal; strings are not compared. Returns the differences, one per line ("" when none).
inline std::string json_drift(const nlohmann::json& want, const nlohmann::json& got, double rel,
                              const std::string& path = "$") {
  std::string out;
  if (want.is_object()) {
    if (!got.is_object()) return path + ": expected an object\n";
    for (auto it = want.begin(); it != want.end(); ++it) {
      if (!got.contains(it.key())) { out += path + "." + it.key() + ": missing\n"; continue; }
      out += json_drift(it.value(), got[it.key()], rel, path + "." + it.key());
    }
  } else if (want.is_array()) {
    if (!got.is_array() || got.size() != want.size()) return path + ": expected an array of " + std::to_string(want.size()) + "\n";
    for (size_t i = 0; i < want.size(); ++i) out += json_drift(want[i], got[i], rel, path + "[" + std::to_string(i) + "]");
  } else if (want.is_number()) {
    if (!got.is_number()) return path + ": expected a number\n";
    double a = want.get<double>(), b = got.get<double>();
    if (std::fabs(a - b) > rel * std::max(std::fabs(a), std::fabs(b)) + 1e-300)
      out += path + ": committed " + want.dump() + ", regenerated " + got.dump() + "\n";
  } else if (want.is_boolean() && want != got) {  // strings (titles, plan summaries) are not compared
    out += path + ": committed " + want.dump() + ", regenerated " + got.dump() + "\n";
  }
  return out;
}

}  // namespace tp::reporttest
