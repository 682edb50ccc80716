// json_check: see json_check.hpp. Messages are stable text: tests and users grep them.
#include "json_check.hpp"
#include "models/safe_io.hpp"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

namespace tp {

// The first kMaxIssueMessages problems are kept; past them one last line counts the rest, so that a file of
// millions of bad keys prints 21 lines, not hundreds of megabytes.
void Issues::push(std::string m) {
  if (messages.size() < kMaxIssueMessages) {
    messages.push_back(std::move(m));
    return;
  }
  ++more;
  std::string tail = "... and " + std::to_string(more) + " more problem" + (more == 1 ? "" : "s") + " (not shown)";
  if (more == 1) messages.push_back(std::move(tail));
  else messages.back() = std::move(tail);
}

void Issues::add(const std::string& path, const std::string& expected) { push(path + ": " + expected); }

void Issues::add_got(const std::string& path, const std::string& expected, const json& got) {
  push(path + ": expected " + expected + ", got " + json_brief(got));
}

static std::string join_lines(const std::vector<std::string>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? "\n" : "") + v[i];
  return s;
}

InputError::InputError(std::vector<std::string> msgs)
    : std::runtime_error(join_lines(msgs)), messages(std::move(msgs)) {}

// Appends a bounded rendering of v: nesting deeper than 3 levels and anything past ~64 characters is elided,
// so a huge or deeply nested user value neither recurses without bound nor produces a long message.
static void brief_into(const json& v, std::string& out, int depth) {
  constexpr size_t kBudget = 64;
  const auto replace = json::error_handler_t::replace;
  if (v.is_object() || v.is_array()) {
    bool obj = v.is_object();
    if (depth >= 3 && !v.empty()) { out += obj ? "{...}" : "[...]"; return; }
    out += obj ? '{' : '[';
    bool first = true;
    for (auto it = v.begin(); it != v.end(); ++it) {
      if (!first) out += ',';
      if (out.size() > kBudget) { out += "..."; break; }
      if (obj) out += json(it.key()).dump(-1, ' ', false, replace) + ":";
      brief_into(it.value(), out, depth + 1);
      first = false;
    }
    out += obj ? '}' : ']';
  } else if (v.is_string() && v.get_ref<const std::string&>().size() > kBudget) {
    out += json(v.get_ref<const std::string&>().substr(0, kBudget)).dump(-1, ' ', false, replace);
  } else {
    out += v.dump(-1, ' ', false, replace);
  }
}

std::string json_brief(const json& v) {
  std::string s;
  brief_into(v, s, 0);
  if (s.size() > 60) {
    size_t cut = 57;
    while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80) --cut;  // keep UTF-8 whole
    s = s.substr(0, cut) + "...";
  }
  if (v.is_string()) return s;
  if (v.is_object()) return "an object " + s;
  if (v.is_array()) return "an array " + s;
  return s;
}

Reader::Reader(const json& v, std::string p, Issues& is) : obj(nullptr), path(std::move(p)), issues(&is) {
  if (v.is_object()) obj = &v;
  else issues->add_got(path, "an object", v);
}

bool Reader::has(const std::string& key) const { return obj && obj->contains(key); }

const json* Reader::get(const std::string& key) {
  if (!obj) return nullptr;
  auto it = obj->find(key);
  if (it == obj->end()) return nullptr;
  seen.insert(key);
  return &*it;
}

static bool is_integer_value(const json& v) {
  if (v.is_number_integer()) return true;
  if (v.is_number_float()) {
    double d = v.get<double>();
    return std::isfinite(d) && std::floor(d) == d && std::fabs(d) < 9.0e15;
  }
  return false;
}

static std::string range_text(long long lo, long long hi) {
  std::string s = "an integer >= " + std::to_string(lo);
  if (hi < (1LL << 53)) s = "an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
  return s;
}

static std::string range_text(double lo, double hi) {
  std::ostringstream o;
  o << "a number >= " << lo;
  if (hi < 1e300) { o.str(""); o << "a number in [" << lo << ", " << hi << "]"; }
  return o.str();
}

long long Reader::opt_int(const std::string& key, long long dflt, long long lo, long long hi) {
  const json* v = get(key);
  if (!v) return dflt;
  if (!is_integer_value(*v)) { issues->add_got(at(key), range_text(lo, hi), *v); return dflt; }
  long long x = v->is_number_integer() ? v->get<long long>() : (long long)v->get<double>();
  if (x < lo || x > hi) { issues->add_got(at(key), range_text(lo, hi), *v); return dflt; }
  return x;
}

long long Reader::req_int(const std::string& key, long long lo, long long hi) {
  if (obj && !has(key)) { issues->add(at(key), "missing; expected " + range_text(lo, hi)); return lo; }
  return opt_int(key, lo, lo, hi);
}

double Reader::opt_num(const std::string& key, double dflt, double lo, double hi) {
  const json* v = get(key);
  if (!v) return dflt;
  if (!v->is_number()) { issues->add_got(at(key), range_text(lo, hi), *v); return dflt; }
  double x = v->get<double>();
  if (!std::isfinite(x) || x < lo || x > hi) {
    // The default upper bound (1e300) is a guard against overflow downstream; name it when it is the problem.
    issues->add_got(at(key), x > hi && hi >= 1e300 ? range_text(lo, hi) + " and <= 1e+300" : range_text(lo, hi), *v);
    return dflt;
  }
  return x;
}

double Reader::req_num(const std::string& key, double lo, double hi) {
  if (obj && !has(key)) { issues->add(at(key), "missing; expected " + range_text(lo, hi)); return lo; }
  return opt_num(key, lo, lo, hi);
}

std::string limit_text(const Limit& l) {
  if (l.kind == LimitKind::integer)
    return "an integer in [" + std::to_string((long long)l.lo) + ", " + std::to_string((long long)l.hi) + "]";
  std::ostringstream o;
  o << (l.kind == LimitKind::zero_or_number ? "0 or " : "") << "a number in "
    << (l.kind == LimitKind::open_number ? "(" : "[") << l.lo << ", " << l.hi << "]";
  return o.str();
}

bool within(const Limit& l, double x) {
  if (l.kind == LimitKind::zero_or_number && x == 0) return true;
  if (!std::isfinite(x) || x > l.hi || x < l.lo || (l.kind == LimitKind::open_number && x <= l.lo)) return false;
  return l.kind != LimitKind::integer || std::floor(x) == x;
}

long long Reader::opt_int(const std::string& key, long long dflt, const Limit& l) {
  return opt_int(key, dflt, (long long)l.lo, (long long)l.hi);
}

long long Reader::req_int(const std::string& key, const Limit& l) { return req_int(key, (long long)l.lo, (long long)l.hi); }

double Reader::opt_num(const std::string& key, double dflt, const Limit& l) {
  const json* v = get(key);
  if (!v) return dflt;
  if (!v->is_number() || !within(l, v->get<double>())) { issues->add_got(at(key), limit_text(l), *v); return dflt; }
  return v->get<double>();
}

double Reader::req_num(const std::string& key, const Limit& l) {
  if (obj && !has(key)) { issues->add(at(key), "missing; expected " + limit_text(l)); return l.lo; }
  return opt_num(key, l.lo, l);
}

bool Reader::opt_bool(const std::string& key, bool dflt) {
  const json* v = get(key);
  if (!v) return dflt;
  if (!v->is_boolean()) { issues->add_got(at(key), "true or false", *v); return dflt; }
  return v->get<bool>();
}

std::string Reader::opt_str(const std::string& key, const std::string& dflt) {
  const json* v = get(key);
  if (!v) return dflt;
  if (!v->is_string()) { issues->add_got(at(key), "a string", *v); return dflt; }
  return v->get<std::string>();
}

std::string Reader::req_str(const std::string& key) {
  if (obj && !has(key)) { issues->add(at(key), "missing; expected a string"); return ""; }
  return opt_str(key, "");
}

static std::string choices_text(const std::vector<std::string>& c) {
  std::string s = "one of ";
  for (size_t i = 0; i < c.size(); ++i) s += (i ? ", \"" : "\"") + c[i] + "\"";
  return s;
}

int Reader::opt_enum(const std::string& key, const std::vector<std::string>& choices, int dflt) {
  const json* v = get(key);
  if (!v) return dflt;
  if (v->is_string()) {
    std::string s = v->get<std::string>();
    for (size_t i = 0; i < choices.size(); ++i)
      if (choices[i] == s) return (int)i;
  }
  issues->add_got(at(key), choices_text(choices), *v);
  return dflt;
}

int Reader::req_enum(const std::string& key, const std::vector<std::string>& choices) {
  if (obj && !has(key)) { issues->add(at(key), "missing; expected " + choices_text(choices)); return 0; }
  return opt_enum(key, choices, 0);
}

void Reader::not_yet(const std::vector<std::string>& keys, const std::string& feature) {
  for (const auto& k : keys)
    if (get(k)) issues->add(at(k), "not supported yet (" + feature + "); remove this key");
}

void Reader::finish(const std::vector<std::string>& expected) {
  if (!obj) return;
  std::string list;
  for (size_t i = 0; i < expected.size(); ++i) list += (i ? ", " : "") + expected[i];
  for (auto it = obj->begin(); it != obj->end(); ++it) {
    if (seen.count(it.key())) continue;
    issues->add(at(it.key()), "unknown key; expected one of: " + list);
  }
}

// Cuts a parser message to a readable length (the offending token can be arbitrarily long).
static std::string cap_message(std::string s) {
  if (s.size() <= 200) return s;
  size_t cut = 197;
  while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80) --cut;
  return s.substr(0, cut) + "...";
}

// The parse stopped at a bound (nesting depth, number of values) before it used the memory of the whole tree.
struct JsonTooLarge {
  std::string why;
};

// Duplicate keys of one object (nlohmann keeps the last silently): their JSON paths, found while parsing. It
// also bounds the tree: nesting deeper than kMaxJsonDepth or more than kMaxJsonValues values stop the parse
// (64 MiB of "[" took 5.6 GB as a tree; 5.2 million keys 3.8 GB).
struct DuplicateKeys {
  struct Frame { bool array = false; long index = 0; std::set<std::string> keys; std::string key; };
  std::vector<Frame> stack;
  std::vector<std::string> found;
  std::string path() const {
    std::string p = "$";
    for (const Frame& f : stack) {
      if (f.array) {
        p += '[';
        p += std::to_string(f.index);
        p += ']';
      } else {
        p += '.';
        p += f.key;
      }
    }
    return p;
  }
  void element_done() { if (!stack.empty() && stack.back().array) ++stack.back().index; }
  long long values = 0;
  bool operator()(int, json::parse_event_t ev, json& parsed) {
    using E = json::parse_event_t;
    if (ev != E::object_end && ev != E::array_end && ++values > kMaxJsonValues)
      throw JsonTooLarge{"more than " + std::to_string(kMaxJsonValues) + " values and keys; the limit keeps memory bounded"};
    if ((ev == E::object_start || ev == E::array_start) && stack.size() >= kMaxJsonDepth)
      throw JsonTooLarge{"arrays and objects nested more than " + std::to_string(kMaxJsonDepth) + " deep (at " + path() + ")"};
    if (ev == E::object_start || ev == E::array_start) {
      stack.emplace_back();
      stack.back().array = ev == E::array_start;
    }
    else if (ev == E::object_end || ev == E::array_end) { if (!stack.empty()) stack.pop_back(); element_done(); }
    else if (ev == E::key && !stack.empty()) {
      Frame& f = stack.back();
      f.key = parsed.get<std::string>();
      if (!f.keys.insert(f.key).second) found.push_back(path());
    } else if (ev == E::value) element_done();
    return true;
  }
};

json parse_json_text(const std::string& text, const std::string& where, Issues& issues) {
  if (text.find_first_not_of(" \t\r\n") == std::string::npos) {
    issues.add(where, "empty input; expected a JSON document");
    return json();
  }
  try {
    DuplicateKeys dup;
    json j = json::parse(text, [&dup](int d, json::parse_event_t ev, json& parsed) { return dup(d, ev, parsed); });
    for (const std::string& p : dup.found)
      issues.add(where + ": " + p, "duplicate key: each key may appear once in an object (JSON parsers disagree on "
                                   "which value wins)");
    if (!dup.found.empty()) return json();
    return j;
  } catch (const JsonTooLarge& e) {
    issues.add(where, "JSON input refused: " + e.why);
    return json();
  } catch (const json::parse_error& e) {
    // nlohmann gives a byte offset; turn it into line and column.
    size_t off = e.byte > 0 ? e.byte - 1 : 0;
    int line = 1, col = 1;
    for (size_t i = 0; i < off && i < text.size(); ++i) {
      if (text[i] == '\n') { ++line; col = 1; } else { ++col; }
    }
    // Keep nlohmann's description, not its "[json.exception...] parse error at line L, column C: " prefix.
    std::string what = e.what();
    auto p = what.find("parse error");
    if (p != std::string::npos) {
      auto q = what.find(": ", p);
      what = q != std::string::npos ? what.substr(q + 2) : what.substr(p);
    }
    issues.add(where, "malformed JSON at line " + std::to_string(line) + ", column " + std::to_string(col) + ": " + cap_message(what));
    return json();
  } catch (const json::exception& e) {
    // e.g. out_of_range.406 "number overflow parsing '1e400'": a number that does not fit in a double.
    std::string what = e.what();
    auto p = what.find("] ");
    if (p != std::string::npos) what = what.substr(p + 2);
    issues.add(where, "malformed JSON: " + cap_message(what) + (e.id == 406 ? " (numbers must fit in a double)" : ""));
    return json();
  }
}

json parse_json_file(const std::string& file, const std::string& where, Issues& issues) {
  if (file.find('\0') != std::string::npos) {  // "\u0000" in a path from JSON: the file system would cut it there
    std::string m = "\"";  // appended, not "\"" + string: g++ 12 warns -Wstringop-overflow falsely on that form
    m += file.substr(0, file.find('\0'));
    m += "\\u0000...\": a file path must not contain a NUL character (\\u0000)";
    issues.add(where, m);
    return json();
  }
  std::error_code ec;
  if (std::filesystem::is_directory(file, ec)) {
    issues.add(where, "\"" + file + "\" is a directory; expected a JSON file");
    return json();
  }
  if (!std::filesystem::exists(file, ec)) {
    issues.add(where, "cannot read file \"" + file + "\": " + (ec ? ec.message() : "no such file"));
    return json();
  }
  std::string text;
  try {
    // Regular files only (a FIFO would block open() forever), at most kMaxJsonBytes.
    text = read_file_capped(file, kMaxJsonBytes, "JSON file");
  } catch (const InputError& e) {
    std::string m = e.messages.empty() ? "cannot read file \"" + file + "\"" : e.messages.front();
    if (m.rfind(where + ": ", 0) == 0) m = m.substr(where.size() + 2);  // read_file_capped names the file too
    issues.add(where, m);
    return json();
  }
  return parse_json_text(text, where, issues);
}

}  // namespace tp
