// fuzz_search: libFuzzer target for the planner's search block. The input is a `search` object: it is read
// alone (read_search: every problem recorded, never thrown) and inside a fixed small scenario through the
// loader (cross-field rules: GPU counts against the cluster, fix values against the model). Either it loads
// or tp::InputError is thrown (exit 2); any other exception, a crash or a sanitizer report is a bug, and so is
// a loaded search that breaks the loader's promises below. No search is run. Built with -DTRAINPLAN_FUZZ=ON.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "models/scenario.hpp"

static void require(bool ok, const char* what) {
  if (ok) return;
  std::fprintf(stderr, "fuzz_search: loaded search breaks an invariant: %s\n", what);
  std::abort();
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string text(reinterpret_cast<const char*>(data), size);
  tp::Issues issues;
  tp::json v = tp::parse_json_text(text, "fuzz", issues);
  if (!issues.empty()) return 0;
  (void)tp::read_search(v, "$.search", issues);
  tp::json sc = {{"model", "gpt3-125m"}, {"cluster", "selene"},
                 {"training", {{"seq_len", 2048}, {"tokens", 3e11}}}, {"search", v}};
  try {
    tp::Scenario s = tp::scenario_from_json(sc, ".", "fuzz", true);
    require(s.search != nullptr, "a search block");
    const tp::Search& se = *s.search;
    require(se.top_k >= 1 && (se.confirm == 0 || se.confirm >= se.top_k), "top_k and confirm");
    require(se.max_gpus == 0 || se.min_gpus <= se.max_gpus, "min_gpus <= max_gpus");
    require(se.confirm_budget_s > 0, "a positive confirmation budget");
    (void)tp::search_to_json(se).dump();
  } catch (const tp::InputError& e) {
    require(!e.messages.empty(), "an InputError carries at least one message");
  }
  return 0;
}
