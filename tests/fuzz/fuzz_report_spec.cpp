// fuzz_report_spec: libFuzzer target for the report-spec parser (`trainplan report SPEC.json`). Any byte string
// must either parse into a Spec, every point of whose runs yields a scenario JSON or an InputError, or throw
// tp::InputError (exit 2); any other exception, a crash or a sanitizer report is a bug. Nothing is simulated.
// Built with -DTRAINPLAN_FUZZ=ON and clang++; run with scripts/fuzz.sh.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "models/json_check.hpp"
#include "reports/spec.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string text(reinterpret_cast<const char*>(data), size);
  tp::Issues issues;
  tp::json j = tp::parse_json_text(text, "fuzz", issues);
  if (!issues.empty()) return 0;
  try {
    tp::report::Spec spec = tp::report::spec_from_json(j, ".", "fuzz");
    for (const tp::report::RunSpec& r : spec.runs) {
      try {
        (void)tp::report::point_scenario_json(spec, r, 0);
      } catch (const tp::InputError& e) {
        if (e.messages.empty()) std::abort();
      }
    }
  } catch (const tp::InputError& e) {
    if (e.messages.empty()) {
      std::fprintf(stderr, "fuzz_report_spec: an InputError without a message\n");
      std::abort();
    }
  }
  return 0;
}
