// catalog_cmd: the tables of `trainplan catalog` (see catalog_cmd.cpp).
#pragma once
#include <ostream>
#include <string>
#include <vector>

#include "models/json_check.hpp"

namespace tp {

// Prints the tables of `kinds` ("gpus", "clusters", "models", "frameworks") to `os` (when not null); returns them as JSON.
json catalog_tables(const std::vector<std::string>& kinds, std::ostream* os);

}  // namespace tp
