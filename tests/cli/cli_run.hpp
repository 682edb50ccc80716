// Helpers of the CLI tests (tests/cli/): the trainplan binary run
// under `timeout` (a regression fails instead of hanging) with its exit code and output, and small file helpers.
#pragma once
#include <sys/wait.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace tp::testutil {

struct Out { int rc; std::string text; };

// Runs shell command `cmd` (popen), its output and exit code (128 when it did not exit normally).
inline Out run_shell(const std::string& cmd) {
  FILE* p = popen(cmd.c_str(), "r");
  std::string out;
  if (!p) return {128, out};
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  int st = pclose(p);
  return {WIFEXITED(st) ? WEXITSTATUS(st) : 128, out};
}

// `trainplan ARGS` (in folder `cwd` if given), stderr captured; stdout captured too unless `stdout_to` names
// where it goes instead. rc 128 when the binary did not exit normally.
inline Out tp_run(const std::string& args, const std::string& stdout_to = "", const std::string& cwd = "") {
  std::string cmd = (cwd.empty() ? "" : "cd '" + cwd + "' && ") + "timeout -k 2 120 " + std::string(TP_BINARY) + " " + args +
                    (stdout_to.empty() ? " 2>&1" : " 2>&1 >" + stdout_to) + " </dev/null";
  return run_shell(cmd);
}

inline std::string slurp(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

inline void spit(const std::string& p, const std::string& text) { std::ofstream(p, std::ios::binary) << text; }

inline bool has(const std::string& text, const std::string& what) { return text.find(what) != std::string::npos; }

// The names in `dir`, sorted.
inline std::vector<std::string> listing(const std::filesystem::path& dir) {
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace tp::testutil
