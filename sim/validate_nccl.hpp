// validate_nccl: published nccl-tests results (data/validation/nccl-tests-set.json) against the NCCL model
// (sim/nccl_model): per row its cluster (a catalog cluster with the row's NICs and in-network reduction), ranks,
// operation and forced algorithm / protocol; per point the bus bandwidth nccl-tests printed and the model's.
// Statistics over the points from 1 MiB to 8 GiB (the range); points outside it are listed, not counted.
#pragma once
#include <ostream>
#include <string>
#include <vector>

#include "models/json_check.hpp"

namespace tp {

struct NcclTestsPoint {
  std::string row;
  double bytes = 0, published_GBps = 0, predicted_GBps = 0;
  std::string algo, proto;
  int ranks = 0, nodes = 0, channels = 0;
  double latency_us = 0;  // the model's latency term (the rest of its time is bytes / bandwidth)
  double fill_us = 0;     // of which the pipeline's fill
  bool counted = false;  // inside [1 MiB, 8 GiB]
  double error() const { return (predicted_GBps - published_GBps) / published_GBps; }
};

struct NcclTestsReport {
  std::vector<NcclTestsPoint> points;
  std::vector<std::string> skipped;  // "id: why"
  double mean_abs = 0, max_abs = 0;  // over counted points
  int counted = 0;
  double share_within_10pct = 0;     // counted points within 10 %
};

// Throws InputError on a row that does not validate (its path named).
NcclTestsReport validate_nccl_tests(const json& set, const std::string& file);
void print_nccl_tests(std::ostream& os, const NcclTestsReport& r);
json nccl_tests_to_json(const NcclTestsReport& r);

}  // namespace tp
