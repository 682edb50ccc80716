// fuzz_scenario: libFuzzer target for the scenario loader. Any byte string must either load or throw
// tp::InputError (bad input, exit code 2); any other exception, a crash, a sanitizer report, or a loaded scenario
// that breaks the loader's promises (the invariants checked below) is a bug. Built with -DTRAINPLAN_FUZZ=ON and
// clang++; run it with scripts/fuzz.sh.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>

#include "models/scenario.hpp"

static void require(bool ok, const char* what) {
  if (ok) return;
  std::fprintf(stderr, "fuzz_scenario: loaded scenario breaks an invariant: %s\n", what);
  std::abort();
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string text(reinterpret_cast<const char*>(data), size);
  try {
    tp::Scenario sc = tp::scenario_from_text(text, "fuzz");
    const tp::Plan& p = sc.plan;
    const tp::Transformer& m = sc.model;
    require(p.dp >= 1 && p.tp >= 1 && p.pp >= 1 && p.virtual_stages >= 1 && p.microbatch >= 1, "positive plan sizes");
    require((long long)p.dp * p.tp * p.pp <= sc.cluster.total_gpus(), "dp x tp x pp fits the cluster");
    require(m.layers > 0 && m.hidden > 0 && m.heads > 0 && m.kv_heads > 0 && m.vocab > 0, "positive model sizes");
    require(m.hidden % m.heads == 0 && m.heads % m.kv_heads == 0, "model shape");
    require(m.heads % p.tp == 0 && m.layers % ((long long)p.pp * p.virtual_stages) == 0, "plan divides the model");
    require(sc.training.global_batch == (long long)p.dp * p.microbatch * p.num_microbatches, "batch split");
    (void)tp::scenario_to_json(sc).dump();  // the resolved scenario must serialise
  } catch (const tp::InputError& e) {
    require(!e.messages.empty(), "an InputError carries at least one message");
  }
  // Anything else propagates: libFuzzer reports an uncaught exception as a crash.
  return 0;
}
