// catalog: locating and caching the bundled catalog files. See catalog.hpp.
#include "catalog.hpp"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <mutex>
#include <unistd.h>

#ifndef TRAINPLAN_CATALOG_DIR
#define TRAINPLAN_CATALOG_DIR "models/catalog"
#endif

namespace tp {
namespace fs = std::filesystem;

static std::string exe_dir() {
  char buf[4096];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return ".";
  buf[n] = 0;
  return fs::path(buf).parent_path().string();
}

std::string catalog_dir() {
  if (const char* e = std::getenv("TRAINPLAN_CATALOG")) return e;
  std::string d = exe_dir();
  for (const std::string& c : {d + "/../share/trainplan/catalog", d + "/catalog"})
    if (fs::exists(c + "/gpus.json")) return c;
  return TRAINPLAN_CATALOG_DIR;
}

static std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return (char)std::tolower(c); });
  return s;
}

static const json& catalog_file(const std::string& kind) {
  static std::mutex mu;
  static std::map<std::string, json> cache;
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache.find(kind);
  if (it != cache.end()) return it->second;
  Issues issues;
  std::string file = catalog_dir() + "/" + kind + ".json";
  json j = parse_json_file(file, file, issues);
  if (!issues.empty()) throw InputError(issues.messages);  // a broken catalog is a broken installation
  return cache.emplace(kind, std::move(j)).first->second;
}

const json* catalog_find(const std::string& kind, const std::string& name) {
  const json& f = catalog_file(kind);
  if (!f.is_object()) return nullptr;
  std::string want = lower(name);
  for (auto it = f.begin(); it != f.end(); ++it)
    if (lower(it.key()) == want) return &it.value();
  return nullptr;
}

json catalog_cluster_patched(const std::string& base, const json& patch, long long min_gpus, const std::string& what) {
  const json* e = catalog_find("clusters", base);
  if (!e) throw InputError({what + ": unknown catalog cluster \"" + base + "\" (" + catalog_names_text("clusters") + ")"});
  json c = *e;
  for (auto it = patch.begin(); it != patch.end(); ++it) {
    const bool merged = it.key() == "intra_node" || it.key() == "inter_node" || it.key() == "host" || it.key() == "nccl";
    if (!merged || !it.value().is_object() || !c.contains(it.key()) || !c[it.key()].is_object()) {
      c[it.key()] = it.value();
      continue;
    }
    for (auto f = it.value().begin(); f != it.value().end(); ++f)
      if (f.key() != "published" && f.key() != "about") c[it.key()][f.key()] = f.value();
  }
  const long long per_node = std::max<long long>(1, c.at("gpus_per_node").get<long long>());
  if (c.at("nodes").get<long long>() * per_node < min_gpus) c["nodes"] = (min_gpus + per_node - 1) / per_node;
  return c;
}

std::vector<std::string> catalog_names(const std::string& kind) {
  std::vector<std::string> names;
  const json& f = catalog_file(kind);
  if (f.is_object())
    for (auto it = f.begin(); it != f.end(); ++it) names.push_back(it.key());
  return names;
}

std::string closest_name(const std::string& word, const std::vector<std::string>& names) {
  const std::string w = lower(word);
  std::string best;
  size_t best_d = std::max<size_t>(2, w.size() / 3) + 1;
  for (const std::string& n : names) {
    const std::string t = lower(n);
    std::vector<size_t> prev(t.size() + 1), cur(t.size() + 1);  // Levenshtein, two rows
    for (size_t j = 0; j <= t.size(); ++j) prev[j] = j;
    for (size_t i = 1; i <= w.size(); ++i) {
      cur[0] = i;
      for (size_t j = 1; j <= t.size(); ++j)
        cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (w[i - 1] == t[j - 1] ? 0 : 1)});
      std::swap(prev, cur);
    }
    if (prev[t.size()] < best_d) { best_d = prev[t.size()]; best = n; }
  }
  return best;
}

void add_unknown_catalog_name(Issues& is, const std::string& path, const std::string& kind, const std::string& what,
                              const std::string& or_else, const json& got) {
  is.add_got(path, "a " + what + " catalog name (" + catalog_names_text(kind) + ")" + or_else, got);
  std::string near = got.is_string() ? closest_name(got.get<std::string>(), catalog_names(kind)) : "";
  if (!near.empty()) is.messages.back() += "; did you mean \"" + near + "\"?";
}

std::string catalog_names_text(const std::string& kind) {
  std::string s;
  for (auto& n : catalog_names(kind)) s += (s.empty() ? "" : ", ") + n;
  return s;
}

}  // namespace tp
