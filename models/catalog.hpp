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
std::string catalog_names_text(const std::string& kind);  // "a, b, c" for error messages

}  // namespace tp
