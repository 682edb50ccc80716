// Helpers shared by the planner tests (tests/planner/): search scenarios built from JSON, the trainplan binary
// run as a subprocess, small file helpers.
#pragma once
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "models/scenario.hpp"
#include "temp_dir.hpp"

namespace tp::testutil {

// A scenario with a search block (scenario_from_text refuses one: the loader needs allow_search).
inline Scenario search_scenario(const json& j) { return scenario_from_json(j, ".", "test", /*allow_search=*/true); }

// {"model": model, "cluster": cluster, "training": {seq_len 2048, tokens, bf16 (+ global_batch)}, "search": search}.
inline json search_json(const std::string& model, const std::string& cluster, json search, double tokens = 1e10,
                        long long global_batch = 0, const char* precision = "bf16") {
  json training = {{"seq_len", 2048}, {"tokens", tokens}, {"precision", precision}};
  if (global_batch > 0) training["global_batch"] = global_batch;
  return {{"name", "planner-test"}, {"model", model}, {"cluster", cluster}, {"training", training}, {"search", search}};
}

inline std::string read_text(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline void write_text(const std::filesystem::path& p, const std::string& text) {
  std::ofstream out(p, std::ios::binary);
  out << text;
}

inline std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

struct CliResult {
  int exit_code = -1;
  std::string out;  // stdout and stderr together (or stderr only, see run_trainplan)
};

// Runs `trainplan ARGS` (TP_BINARY); `stderr_only` drops stdout.
inline CliResult run_trainplan(const std::string& args, bool stderr_only = false) {
  std::string cmd = shell_quote(TP_BINARY) + " " + args + (stderr_only ? " 2>&1 >/dev/null" : " 2>&1");
  CliResult r;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) r.out.append(buf, n);
  int status = pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
  return r;
}

}  // namespace tp::testutil
