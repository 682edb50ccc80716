// battery: see battery.hpp. A sampled plan A is simulated once; each partner B (one change: dp x cp split, ZeRO
// stage, micro-batch) once; every check compares numbers of A and B or of A alone. Partners keep the micro-batch
// count m, so the global batch follows dp x micro-batch (the checks are about one step, not one batch).
#include "battery.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <optional>
#include <random>
#include <sstream>

#include "planner/analytic.hpp"
#include "planner/explain.hpp"  // plan_summary
#include "planner/space.hpp"
#include "sim/op_cost.hpp"      // total_params
#include "sim/simulate.hpp"

namespace tp::battery {

namespace {

const char* kInvariants[] = {"states_dp_x_cp",        "zero_monotone",        "act_scale_tokens",
                             "class_le_fp32",         "step_ge_peak_bound",   "hw_ge_model_flops",
                             "analytic_step_5pct",    "analytic_mem_5pct",    "analytic_step_offload",
                             "analytic_mem_offload"};
// Reported, not enforced (battery.hpp): the analytic estimate against the simulation.
bool enforced(const std::string& inv) { return inv.rfind("analytic_", 0) != 0; }
constexpr int kKeepFailures = 4;
constexpr double kMaxTasks = 4e5;  // sampled plans whose symmetric program is larger are skipped (CI time)

json search_scn(const std::string& name, json model, const std::string& cluster, long long seq, long long batch,
                json precisions, int max_gpus, json extra_fix = json::object()) {
  json fix = extra_fix;
  fix["precision"] = precisions;
  return {{"name", name},
          {"model", model},
          {"cluster", cluster},
          {"training", {{"seq_len", seq}, {"tokens", 1e10}, {"precision", precisions[0]}, {"global_batch", batch}}},
          {"search", {{"max_gpus", max_gpus}, {"fix", fix}}}};
}

// A small Mixtral-like MoE (8 experts, top-2, grouped-query attention, SwiGLU).
json small_moe() {
  return {{"layers", 8},    {"hidden", 1024},  {"heads", 16},         {"kv_heads", 4},
          {"ffn_hidden", 3584}, {"vocab", 32000}, {"seq_len", 4096},     {"activation", "swiglu"},
          {"tied_embeddings", false}, {"moe", {{"experts", 8}, {"top_k", 2}}}};
}
// A small dense Llama (grouped-query attention, SwiGLU, no biases).
json small_llama() {
  return {{"layers", 8},    {"hidden", 1024},  {"heads", 16},         {"kv_heads", 4},
          {"ffn_hidden", 3584}, {"vocab", 32000}, {"seq_len", 4096},     {"activation", "swiglu"},
          {"tied_embeddings", false}};
}
json mixtral_8x7b() {
  return {{"layers", 32},   {"hidden", 4096},  {"heads", 32},         {"kv_heads", 8},
          {"ffn_hidden", 14336}, {"vocab", 32000}, {"seq_len", 4096}, {"activation", "swiglu"},
          {"tied_embeddings", false}, {"moe", {{"experts", 8}, {"top_k", 2}}}};
}

struct Measured {
  Result res;
  double static_w = 0, static_g = 0, static_o = 0;  // static model states, max over simulated ranks
  double peak_w = 0, peak_g = 0, peak_o = 0, peak_buf = 0;  // classes at each rank's peak, max over ranks
  double stored_act = 0;                            // max stored activations
  double max_hold = 0;                              // largest transient hold (gathered run, unreduced bucket)
};

Measured measure(const Scenario& s) {
  SimOptions so;
  so.keep_memory_timeline = false;
  Measured m{simulate(s, so)};
  const Program& pg = m.res.prog;
  for (const RankStatic& st : pg.statics) {
    m.static_w = std::max(m.static_w, st.weights_bytes);
    m.static_g = std::max(m.static_g, st.gradients_bytes);
    m.static_o = std::max(m.static_o, st.optimizer_bytes);
  }
  for (const RankResult& rr : m.res.ranks) {
    m.peak_w = std::max(m.peak_w, rr.peak.weights);
    m.peak_g = std::max(m.peak_g, rr.peak.gradients);
    m.peak_o = std::max(m.peak_o, rr.peak.optimizer);
    m.peak_buf = std::max(m.peak_buf, rr.peak.buffers);
    m.stored_act = std::max(m.stored_act, rr.stored_peak_bytes);
  }
  for (const MemHold& h : pg.holds) m.max_hold = std::max(m.max_hold, h.bytes);
  return m;
}

// The scenario with `plan` at global batch `gb` and precision `prec`, validated (nullopt when invalid).
std::optional<Scenario> with_plan(const Scenario& search_sc, Plan plan, long long gb, Precision prec) {
  Scenario s = search_sc;
  s.search.reset();
  s.training.global_batch = gb;
  s.training.precision = prec;
  s.plan = std::move(plan);
  s.plan.attention = search_attention(search_sc.search->fix);
  Issues is;
  validate_plan(s.model, s.cluster, s.training, s.plan, is);
  if (!is.empty()) return std::nullopt;
  return s;
}

// A partner of `a`: its plan changed by `change`, the micro-batch count kept.
std::optional<Scenario> partner(const Scenario& search_sc, const Scenario& a, const std::function<bool(Plan&)>& change) {
  Plan p = a.plan;
  if (!change(p)) return std::nullopt;
  const long long gb = (long long)p.dp * p.microbatch * a.plan.num_microbatches;
  return with_plan(search_sc, p, gb, a.training.precision);
}

// n valid plans: a seeded layout, then one of its valid inner choices, uniformly (alternately without offload).
std::vector<Scenario> sample(const Scenario& sc, int n, std::uint64_t seed) {
  std::vector<Scenario> out;
  AnalyticModel am(sc);
  SpaceLimits lim = space_limits(sc, 0);
  std::vector<Layout> layouts = enumerate_layouts(sc, lim);
  if (layouts.empty()) return out;
  std::mt19937_64 rng(seed);
  for (int tries = 0; (int)out.size() < n && tries < 20 * n; ++tries) {
    const Layout& lay = layouts[rng() % layouts.size()];
    // Every other plan without offload: offload multiplies the choices, and would otherwise be most of the sample.
    const bool no_offload = out.size() % 2 == 0;
    Choice pick;
    long long gb = 0, seen = 0, dominated = 0;
    enumerate_choices(sc, am, lay, lim, [&](const Choice& c, const MicroCost&, long long b) {
      if (no_offload && c.offload != OffloadKind::none) return false;
      if (rng() % (unsigned long long)++seen == 0) { pick = c; gb = b; }  // reservoir: uniform over the choices
      return false;
    }, dominated, /*prune_dominated=*/false);
    if (seen == 0) continue;
    std::optional<Scenario> s = with_plan(sc, plan_from(lay, pick), gb, lay.prec);
    if (!s || program_tasks_estimate(*s, false) > kMaxTasks) continue;
    out.push_back(std::move(*s));
  }
  return out;
}

std::string summary(const Scenario& s) {
  return plan_summary(s.plan, s.training.global_batch, s.training.precision);
}

struct Checker {
  Report& rep;
  std::map<std::string, Check*> by_name;
  explicit Checker(Report& r) : rep(r) {
    rep.checks.clear();
    for (const char* n : kInvariants) {
      Check ch;
      ch.invariant = n, ch.enforced = enforced(n);
      rep.checks.push_back(ch);
    }
    for (Check& c : rep.checks) by_name[c.invariant] = &c;
  }
  // One check: `excess` > 0 is a failure (relative excess over the bound).
  void record(const char* inv, double excess, const Scenario& a, const Scenario* b, const std::string& detail) {
    Check& c = *by_name.at(inv);
    ++c.checked;
    if (!(excess > 0)) return;
    ++c.failed;
    c.worst = std::max(c.worst, excess);
    if ((int)c.failures.size() < kKeepFailures)
      c.failures.push_back("A: " + summary(a) + (b ? " | B: " + summary(*b) : std::string()) + " | " + detail);
  }
};

template <class... A>
std::string fmt(const char* f, A... a) {
  char buf[200];
  std::snprintf(buf, sizeof buf, f, a...);
  return buf;
}
const double kGiB = 1073741824.0;

// Relative excess of |x - y| over `allow` (both in bytes), against the larger of x and y.
double excess_abs(double x, double y, double allow) {
  double d = std::fabs(x - y) - allow;
  return d > 1e-6 * std::max({std::fabs(x), std::fabs(y), 1.0}) ? d / std::max({std::fabs(x), std::fabs(y), 1.0}) : 0;
}

void check_alone(Checker& ck, const Scenario& a, const Measured& ma) {
  const Result& r = ma.res;
  // class_le_fp32
  const double fp32 = 16 * total_params(a.model);
  const double cls[] = {ma.peak_w, ma.peak_g, ma.peak_o, ma.peak_buf};
  const char* names[] = {"weights", "gradients", "optimizer", "buffers"};
  for (int k = 0; k < 4; ++k)
    ck.record("class_le_fp32", cls[k] / fp32 - 1, a, nullptr,
              std::string(names[k]) + fmt(" %.2f GiB > full fp32 states %.2f GiB", cls[k] / kGiB, fp32 / kGiB));
  // step_ge_peak_bound
  double peak = 0;
  for (double f : a.cluster.gpu.matrix_flops_per_s) peak = std::max(peak, f);
  const double bound = r.prog.cm.model_flops_per_step / a.plan.gpus() / peak;
  ck.record("step_ge_peak_bound", bound / r.step_time_s - 1, a, nullptr,
            fmt("step %.4g s below the compute bound %.4g s", r.step_time_s, bound));
  // hw_ge_model_flops
  ck.record("hw_ge_model_flops", 1 - r.hardware_tflops_per_gpu / r.model_tflops_per_gpu - 1e-9, a, nullptr,
            fmt("hardware %.1f TFLOP/s < model %.1f TFLOP/s", r.hardware_tflops_per_gpu, r.model_tflops_per_gpu));
  // analytic within 5 % (chunked offload: 10 % step, as tests/planner/analytic_test.cpp states)
  AnalyticModel am(a);
  Estimate e = estimate_plan(am, a.plan);
  const bool off = a.plan.offload.on();
  const double es = e.step_s > 0 ? std::fabs(e.step_s / r.step_time_s - 1) : 1;
  const double em = e.peak_bytes > 0 ? std::fabs(e.peak_bytes / r.peak_bytes_per_gpu - 1) : 1;
  ck.record(off ? "analytic_step_offload" : "analytic_step_5pct", es - 0.05, a, nullptr,
            fmt("analytic %.4g s vs simulated %.4g s", e.step_s, r.step_time_s));
  ck.record(off ? "analytic_mem_offload" : "analytic_mem_5pct", em - 0.05, a, nullptr,
            fmt("analytic %.2f GiB vs simulated %.2f GiB", e.peak_bytes / kGiB, r.peak_bytes_per_gpu / kGiB));
}

// Model states at the peak (weights + gradients + optimizer).
double states(const Measured& m) { return m.peak_w + m.peak_g + m.peak_o; }
double static_states(const Measured& m) { return m.static_w + m.static_g + m.static_o; }

void check_pair(Checker& ck, const char* kind, const Scenario& a, const Measured& ma, const Scenario& b,
                const Measured& mb) {
  const std::string k = kind;
  if (k == "dp_x_cp" && a.plan.offload.kind != OffloadKind::chunked) {  // (chunked: battery.hpp)
    const double allow = 2 * std::max(ma.max_hold, mb.max_hold);
    ck.record("states_dp_x_cp",
              std::max({excess_abs(ma.static_w, mb.static_w, 0), excess_abs(ma.static_g, mb.static_g, 0),
                        excess_abs(ma.static_o, mb.static_o, 0)}),
              a, &b, fmt("static states %.3f GiB vs %.3f GiB", static_states(ma) / kGiB, static_states(mb) / kGiB));
    ck.record("states_dp_x_cp",
              std::max({excess_abs(ma.peak_w, mb.peak_w, allow), excess_abs(ma.peak_g, mb.peak_g, allow),
                        excess_abs(ma.peak_o, mb.peak_o, allow)}),
              a, &b,
              fmt("at the peak: weights %.3f vs %.3f GiB, gradients %.3f vs %.3f GiB", ma.peak_w / kGiB, mb.peak_w / kGiB,
                  ma.peak_g / kGiB, mb.peak_g / kGiB));
  }
  if (k == "zero") {  // b has the higher stage
    const double sa = static_states(ma), sb = static_states(mb);
    ck.record("zero_monotone", sb > sa * (1 + 1e-9) ? sb / sa - 1 : 0, a, &b,
              fmt("static states %.3f GiB -> %.3f GiB", sa / kGiB, sb / kGiB));
    const double pa = states(ma), pb = states(mb), allow = 2 * mb.max_hold;
    ck.record("zero_monotone", pb > pa + allow + 1e-9 * pa ? (pb - pa - allow) / pa : 0, a, &b,
              fmt("model states at the peak %.3f GiB -> %.3f GiB", pa / kGiB, pb / kGiB));
  }
  if (k == "dp_x_cp" || k == "microbatch") {  // tokens on a rank: microbatch x seq / cp
    const double ta = (double)a.plan.microbatch / a.plan.cp, tb = (double)b.plan.microbatch / b.plan.cp;
    // Unfused attention stores the s x s scores of each chunk's causal prefix: quadratic in the tokens of a
    // sequence on a rank, so only a micro-batch change scales it linearly.
    const bool linear = a.plan.attention == Attention::flash || a.plan.cp == b.plan.cp;
    if (ta != tb && ma.stored_act > 0 && linear) {
      const double ratio = (mb.stored_act / ma.stored_act) / (tb / ta);
      ck.record("act_scale_tokens", std::fabs(ratio - 1) - 0.01, a, &b,
                fmt("stored activations %.3f GiB -> %.3f GiB for %.3g x the tokens per rank", ma.stored_act / kGiB,
                    mb.stored_act / kGiB, tb / ta));
    }
  }
}

}  // namespace

std::vector<Family> families(bool full) {
  std::vector<Family> f;
  json both = json::array({"bf16", "fp8"});
  f.push_back({"gpt3-1.3b h100 s4096 bf16/fp8", search_scn("battery-dense", "gpt3-1.3b", "dgx-h100", 4096, 64, both, 32)});
  f.push_back({"small-moe h100 s4096 bf16/fp8", search_scn("battery-moe", small_moe(), "dgx-h100", 4096, 64, both, 32)});
  // TorchTitan: its op-level selective checkpointing (selective_op) and FSDP2's ZeRO-2/3 over a small Llama.
  json titan = search_scn("battery-titan", small_llama(), "dgx-h100", 4096, 64, both, 32);
  titan["training"]["framework"] = "torchtitan";
  f.push_back({"small-llama h100 s4096 bf16/fp8 torchtitan", titan});
  f.push_back({"gpt3-350m a100 s2048 fp16 (1d/2d, unfused)",
               search_scn("battery-a100", "gpt3-350m", "selene", 2048, 64, json::array({"fp16"}), 16,
                          {{"attention", "unfused"}})});
  if (full) {
    f.push_back({"llama3-70b h100 s8192 bf16/fp8", search_scn("battery-llama70b", "llama3-70b", "dgx-h100", 8192, 512, both, 512)});
    f.push_back({"gpt3-175b a100 s2048 fp16", search_scn("battery-gpt3", "gpt3-175b", "selene", 2048, 1536,
                                                         json::array({"fp16"}), 1024, {{"attention", "unfused"}})});
    f.push_back({"mixtral-8x7b h100 s4096 bf16/fp8", search_scn("battery-mixtral", mixtral_8x7b(), "dgx-h100", 4096, 256, both, 64)});
    f.push_back({"llama3-8b h100 s8192 fp32/bf16", search_scn("battery-llama8b", "llama3-8b", "dgx-h100", 8192, 128,
                                                               json::array({"bf16", "fp32"}), 64)});
  }
  return f;
}

Report run_family(const Family& f, int plans, std::uint64_t seed) {
  Report rep;
  Checker ck(rep);
  Scenario sc = scenario_from_json(f.scenario, ".", f.name, /*allow_search=*/true);
  std::vector<Scenario> pts = sample(sc, plans, seed);
  rep.plans = (long long)pts.size();
  for (const Scenario& a : pts) {
    Measured ma = measure(a);
    ++rep.simulations;
    check_alone(ck, a, ma);
    auto with = [&](const char* kind, const std::function<bool(Plan&)>& change) {
      std::optional<Scenario> b = partner(sc, a, change);
      if (!b || program_tasks_estimate(*b, false) > kMaxTasks) return;
      Measured mb = measure(*b);
      ++rep.simulations;
      check_pair(ck, kind, a, ma, *b, mb);
    };
    with("dp_x_cp", [](Plan& p) {  // the same data ranks split the other way
      if (p.cp > 1) { p.cp /= 2; p.dp *= 2; return true; }
      if (p.dp % 2 == 0) { p.dp /= 2; p.cp *= 2; return true; }
      return false;
    });
    with("zero", [](Plan& p) { return p.data_ranks() > 1 && p.zero < 3 && (++p.zero, true); });
    with("microbatch", [](Plan& p) { p.microbatch *= 2; return true; });
    // Megatron's overlapped parameter gather (not in the search space): the single-plan checks on it too.
    if (std::optional<Scenario> b = partner(sc, a, [](Plan& p) {
          return (p.zero == 1 || p.zero == 2) && p.data_ranks() > 1 && !p.overlap_param_gather &&
                 p.offload.kind != OffloadKind::chunked && (p.overlap_param_gather = true);
        })) {
      if (program_tasks_estimate(*b, false) <= kMaxTasks) {
        check_alone(ck, *b, measure(*b));
        ++rep.simulations;
      }
    }
  }
  return rep;
}

void merge(Report& into, const Report& r) {
  into.plans += r.plans;
  into.simulations += r.simulations;
  if (into.checks.empty()) { into.checks = r.checks; return; }
  for (size_t i = 0; i < into.checks.size(); ++i) {
    Check& c = into.checks[i];
    const Check& o = r.checks[i];
    c.checked += o.checked;
    c.failed += o.failed;
    c.worst = std::max(c.worst, o.worst);
    for (const std::string& s : o.failures)
      if ((int)c.failures.size() < kKeepFailures) c.failures.push_back(s);
  }
}

std::string table(const Report& r) {
  std::ostringstream os;
  char buf[256];
  std::snprintf(buf, sizeof buf, "%lld sampled plans, %lld simulations (* reported, not enforced)\n%-23s %8s %7s %9s  %s\n",
                r.plans, r.simulations, "invariant", "checked", "failed", "worst",
                "first failure (A and B: the plans that disagree)");
  os << buf;
  for (const Check& c : r.checks) {
    std::snprintf(buf, sizeof buf, "%-22s%s %8lld %7lld %8.1f%%  ", c.invariant.c_str(), c.enforced ? " " : "*", c.checked,
                  c.failed, c.worst * 100);
    os << buf << (c.failures.empty() ? "" : c.failures.front()) << "\n";
  }
  return os.str();
}

}  // namespace tp::battery
