// json_check: reading user JSON with exact key validation and error messages that name the JSON path.
// Invariant: a Reader never throws on bad user input; it records one message per problem in Issues and
// returns a harmless default so that validation can continue and report every problem at once.
// Callers throw InputError (exit code 2) once the whole input has been read.
#pragma once
#include <nlohmann/json.hpp>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "models/limits.hpp"

namespace tp {

using json = nlohmann::json;

// All problems found in one input, each "<path>: <what was expected>[, got <value>]". Warnings (an input that is
// valid but only partly modelled) do not stop the run; the CLI prints them as "warning: ..." lines on stderr.
constexpr size_t kMaxIssueMessages = 20;     // problems listed; the rest are counted in one last line
constexpr size_t kMaxJsonDepth = 64;         // arrays / objects nested deeper: refused while parsing
constexpr long long kMaxJsonValues = 1000000;  // values and keys in one JSON input: refused past it

struct Issues {
  std::vector<std::string> messages;  // at most kMaxIssueMessages + 1 (the last: "... and N more problems")
  std::vector<std::string> warnings;
  long long more = 0;                 // problems past kMaxIssueMessages, counted only
  void add(const std::string& path, const std::string& expected);
  void warn(const std::string& text) { warnings.push_back(text); }
  void add_got(const std::string& path, const std::string& expected, const json& got);
  bool empty() const { return messages.empty(); }
  size_t count() const { return messages.size() + (size_t)more - (more > 0); }  // problems found, shown or not
  void push(std::string message);
};

// Thrown when user input is invalid; what() joins all messages, one per line. Maps to exit code 2.
struct InputError : std::runtime_error {
  std::vector<std::string> messages;
  explicit InputError(std::vector<std::string> msgs);
};

// Short rendering of a JSON value for messages (strings quoted, long values cut).
std::string json_brief(const json& v);

// Reads one JSON object at `path`. Every key read is marked; finish() reports the unread (unknown) keys.
struct Reader {
  const json* obj;  // null when the value at path is not an object (already reported)
  std::string path;
  Issues* issues;
  std::set<std::string> seen;

  Reader(const json& v, std::string path, Issues& issues);
  bool ok() const { return obj != nullptr; }
  bool has(const std::string& key) const;
  const json* get(const std::string& key);  // marks key seen; null when absent
  std::string at(const std::string& key) const { return path + "." + key; }

  // Required / optional typed fields. Numbers are checked for type, finiteness and range.
  long long req_int(const std::string& key, long long min_value, long long max_value = (1LL << 53));
  long long opt_int(const std::string& key, long long dflt, long long min_value, long long max_value = (1LL << 53));
  double req_num(const std::string& key, double min_value, double max_value = 1e300);
  double opt_num(const std::string& key, double dflt, double min_value, double max_value = 1e300);
  // The same against an entry of models/limits.hpp (the message names its range).
  long long req_int(const std::string& key, const Limit& l);
  long long opt_int(const std::string& key, long long dflt, const Limit& l);
  double req_num(const std::string& key, const Limit& l);
  double opt_num(const std::string& key, double dflt, const Limit& l);
  bool opt_bool(const std::string& key, bool dflt);
  std::string req_str(const std::string& key);
  std::string opt_str(const std::string& key, const std::string& dflt);
  // A string that must be one of `choices`; returns its index (or `dflt_index` when absent / invalid).
  int req_enum(const std::string& key, const std::vector<std::string>& choices);
  int opt_enum(const std::string& key, const std::vector<std::string>& choices, int dflt_index);
  // Keys that are recognised but belong to a later feature: reported as "not supported yet".
  void not_yet(const std::vector<std::string>& keys, const std::string& feature);
  // Reports every key not read so far as unknown, listing the expected keys.
  void finish(const std::vector<std::string>& expected_keys);
};

// Parses text as JSON; on failure records "<file>: malformed JSON at line L, column C: ..." and returns null.
json parse_json_text(const std::string& text, const std::string& where, Issues& issues);
// Reads and parses a file; records an issue if it cannot be read.
json parse_json_file(const std::string& file, const std::string& where, Issues& issues);

}  // namespace tp
