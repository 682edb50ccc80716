// selftest_train: the training comparisons of `trainplan selftest` (selftest.hpp): a few steps of the tiny GPT
// (scenarios/exec/tiny-gpt.json's model and plan, built here so an installed program needs no scenario file)
// on the backend under test and on the CPU backend, one rank each, in fp32 and bf16 with the unfused and the flash
// attention; their losses and gradient norms must agree to the precision's tolerance. Ops that pass one by one can
// still train wrongly together (a buffer read before it is written, an accumulate-vs-overwrite slip across ops, a
// packed copy made from the wrong tensor); this is the check for that. A backend that captures steps as graphs
// (cuda, emu-device) trains with them on, and its bf16 flash run is also compared with its own eager run.
#include <algorithm>
#include <cmath>
#include <exception>
#include <string>

#include "exec/comm/comm.hpp"
#include "exec/selftest/selftest.hpp"
#include "exec/runtime/train.hpp"
#include "models/scenario.hpp"

namespace tp::exec {

namespace {

Scenario tiny_gpt(const std::string& precision, const std::string& attention) {
  const json j = {
      {"name", "selftest-tiny-gpt"},
      {"model",
       {{"name", "tiny-gpt"}, {"layers", 4}, {"hidden", 64}, {"heads", 4}, {"vocab", 256}, {"seq_len", 32},
        {"activation", "gelu"}, {"tied_embeddings", true}, {"dropout", false}}},
      {"cluster", "selene"},
      {"training", {{"global_batch", 8}, {"seq_len", 32}, {"precision", precision}}},
      {"plan", {{"attention", attention}, {"dp", 1}, {"tp", 1}, {"pp", 1}, {"microbatch", 2}}}};
  return scenario_from_json(j, ".", "selftest (built-in tiny GPT)");
}

double max_rel(const std::vector<double>& got, const std::vector<double>& want) {
  if (got.size() != want.size() || got.empty()) return INFINITY;
  double e = 0;
  for (size_t i = 0; i < got.size(); ++i) e = std::max(e, std::abs(got[i] - want[i]) / std::max(1e-30, std::abs(want[i])));
  return e;
}

void compare(TrainCheck& c, const RunResult& got, const RunResult& want) {
  c.want_losses = want.losses, c.got_losses = got.losses;
  c.err = std::max(max_rel(got.losses, want.losses), max_rel(got.grad_norm, want.grad_norm));
  c.status = c.err <= c.tol ? CheckStatus::pass : CheckStatus::fail;
}

}  // namespace

std::vector<TrainCheck> run_selftest_training(const Backend& b, int steps) {
  std::vector<TrainCheck> out;
  for (const char* precision : {"fp32", "bf16"})
    for (const char* attention : {"unfused", "flash"}) {
      TrainCheck c;
      c.precision = precision, c.attention = attention, c.steps = steps;
      c.tol = c.precision == "bf16" ? kSelftestTrainTolBf16 : kSelftestTrainTol;
      try {
        const Scenario sc = tiny_gpt(precision, attention);
        RunOptions o;
        o.steps = steps;
        o.log_every = 0;
        auto run_on = [&](const std::string& backend, const char* graphs) {
          RunOptions r = o;
          r.backend = backend;
          r.cuda_graphs = graphs;
          std::unique_ptr<Comm> one = make_local_comm();  // one rank, also when this process is one of an mpirun job
          return run_training(sc, r, *one);
        };
        // A backend that captures steps trains with them (the second step captured, the later ones replayed); a
        // capture that fails is an error here, not a quiet fallback.
        const bool graphs = b.capture_begin != nullptr;
        if (graphs) c.attention += ", cuda graphs";
        const RunResult want = run_on("cpu", "off"), got = run_on(b.name, graphs ? "on" : "off");
        compare(c, got, want);
        if (graphs && c.precision == "bf16" && c.attention.rfind("flash", 0) == 0) {  // and against its eager run
          out.push_back(c);
          c = TrainCheck{};
          c.precision = precision, c.attention = std::string(attention) + ", cuda graphs against eager", c.steps = steps;
          c.tol = kSelftestTrainTol;
          compare(c, got, run_on(b.name, "off"));
        }
      } catch (const std::exception& e) {
        c.status = CheckStatus::fail;
        c.message = e.what();
      }
      out.push_back(c);
    }
  return out;
}

}  // namespace tp::exec
