// validate_published: regenerates the published rows of the dev suite (Korthikanti et al. 2022 Table 5 in
// both modes and Fig. 1 memory; Narayanan et al. 2021 Table 2 PTD-P rows) with one cluster profile for all
// rows, and reports predicted vs published per row with mean and max |error|. Plans not given by a paper are
// stated per row as an assumption (never searched for a better fit).
#pragma once
#include <ostream>
#include <string>
#include <vector>

#include "models/json_check.hpp"

namespace tp {

struct PublishedRow {
  std::string table, name, quantity, assumption;
  double published = 0, predicted = 0;
  std::string framework;  // the row's training framework ("" = the default, Megatron-Core)
  double error() const { return (predicted - published) / published; }
};

struct PublishedReport {
  std::vector<PublishedRow> time_rows, memory_rows;
  std::vector<std::string> skipped;  // rows that could not be simulated: "id: why" (not in the statistics)
  double time_mean_abs = 0, time_max_abs = 0, memory_mean_abs = 0, memory_max_abs = 0;
};

// `suite` is the dev-suite JSON; `cluster` the catalog cluster name used for every row.
PublishedReport validate_published(const json& suite, const std::string& cluster);
// mean and max |error| over rows (0 for none).
void published_stats(const std::vector<PublishedRow>& rows, double& mean, double& mx);
void print_published(std::ostream& os, const PublishedReport& r);
// Mean and max |error| per training framework: {"fsdp": {rows, mean_abs_error, max_abs_error}, ...}.
json framework_stats(const std::vector<PublishedRow>& rows);
json published_to_json(const PublishedReport& r);

}  // namespace tp
