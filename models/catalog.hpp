// catalog: the bundled JSON catalog of GPUs, clusters and transformer models (models/catalog/*.json).
// Lookup is case-insensitive. The directory is found from $TRAINPLAN_CATALOG, then next to the executable
// (../share/trainplan/catalog, ./catalog), then the source tree path compiled in.
#pragma once
#include <string>
#include <vector>

#include "json_check.hpp"

namespace tp {

std::string catalog_dir();
// Returns the catalog entry `name` of `kind` ("gpus", "clusters", "models"); null json when absent.
const json* catalog_find(const std::string& kind, const std::string& name);
std::vector<std::string> catalog_names(const std::string& kind);
// A catalog cluster as a validation row describes it: the entry `base` with `patch` applied (top-level keys
// replace the entry's; the objects intra_node, inter_node, host and nccl merge key by key, their "about" and
// "published" notes skipped), grown to at least `min_gpus` GPUs. InputError naming `what` when `base` is unknown.
json catalog_cluster_patched(const std::string& base, const json& patch, long long min_gpus, const std::string& what);
std::string catalog_names_text(const std::string& kind);  // "a, b, c" for error messages
// The closest of `names` to `word` (case-insensitive edit distance at most max(2, |word| / 3)); "" when none is.
std::string closest_name(const std::string& word, const std::vector<std::string>& names);
// Reports an unknown catalog name at `path`: "expected a <what> catalog name (a, b, c)<or_else>, got "x"", followed
// by "; did you mean "y"?" when a name is close. `what` is "GPU", "cluster" or "model".
void add_unknown_catalog_name(Issues& is, const std::string& path, const std::string& kind, const std::string& what,
                              const std::string& or_else, const json& got);

}  // namespace tp
