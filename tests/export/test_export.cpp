// test_export: `trainplan export` (export/export.hpp). For the bundled scenarios and plan variants (ZeRO 0-3,
// optimizer offload, interleaved and uneven pipelines, context and expert parallelism, fp8, recompute), every
// option name each target emits is in that framework's recorded list (data/export/*, with its source), the
// output parsed back gives the scenario's plan fields (round trip), what a target cannot express is refused
// with the JSON path and a nearest plan, and one golden output per target stays byte-identical.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "export/export.hpp"

using namespace tp;
using namespace tp::exporting;

namespace {

std::string src(const std::string& rel) {  // (appended in place: GCC 12's -Warray-bounds misfires on the temporaries' sum)
  std::string s = TP_SOURCE_DIR;
  s += '/';
  s += rel;
  return s;
}

std::set<std::string> names_in(const std::string& rel) {
  std::ifstream in(src(rel));
  std::set<std::string> s;
  for (std::string line; std::getline(in, line);)
    if (!line.empty() && line[0] != '#') s.insert(line);
  EXPECT_GT(s.size(), 50u) << rel;
  return s;
}

json scenario_json(const std::string& rel) {
  std::ifstream in(src(rel));
  return json::parse(in);
}

Scenario load(const json& j) { return scenario_from_json(j, src("scenarios"), "test"); }

// A one-GPU plan with CUDA graphs (plan.cuda_graphs), and the same with full recompute.
const json kOneGpuGraphs = {{"dp", 1}, {"tp", 1}, {"pp", 1}, {"zero", 0}, {"schedule", "1f1b"}, {"virtual_stages", 1},
                            {"sequence_parallel", false}, {"recompute", "selective"}, {"cuda_graphs", true}};
json with_full(json p) {
  p["recompute"] = "full";
  return p;
}

// A plan variant: the llama3-70b example with `plan` merged over its plan (and `model` over its model).
json variant(const json& plan, const json& model = json::object(), const std::string& precision = "") {
  json j = scenario_json("scenarios/examples/llama3-70b-dgx-h100.json");
  for (auto it = plan.begin(); it != plan.end(); ++it) j["plan"][it.key()] = it.value();
  if (!model.empty()) {
    json m = {{"name", "test-moe"}, {"layers", 16}, {"hidden", 4096}, {"heads", 32}, {"kv_heads", 8},
              {"ffn_hidden", 14336}, {"vocab", 32000}, {"seq_len", 8192}, {"activation", "swiglu"},
              {"tied_embeddings", false}, {"dropout", false}};
    for (auto it = model.begin(); it != model.end(); ++it) m[it.key()] = it.value();
    j["model"] = m;
  }
  if (!precision.empty()) j["training"]["precision"] = precision;
  // Framework "research": these cases test the exporters' own refusals, whatever the scenario's framework runs.
  j["training"]["framework"] = "research";
  return j;
}

// The plan fields a framework's configuration states.
struct Back {
  int tp = 1, pp = 1, v = 1, cp = 1, ep = 1, dp = 0, zero = 0, first = 0, last = 0;
  long long mb = 0, gb = 0;
  std::string recompute = "none", precision = "fp32";
  bool sp = false, offload = false;
  bool graphs = false;                      // CUDA graphs (Megatron --cuda-graph-impl local, NeMo cuda_graph_impl)
  bool acc_emb = false, acc_loss = false;   // Megatron's account_for_embedding / loss_in_pipeline_split
  int first_less = 0, last_less = 0, layers_per_stage = 0;  // TorchTitan's pipeline split
  std::string fqns;                         // TorchTitan's module_fqns_per_model_part, when given
  std::string moe_pattern;                  // Megatron --moe-layer-freq / NeMo moe_layer_freq, as given
  std::vector<int> layout;                  // Megatron / NeMo pipeline_model_parallel_layout's chunks, when given
};

// The layers of every model chunk (looping order) that Megatron-LM builds from its split options
// (megatron/core/transformer/transformer_config.py, core_v0.15.3): account_for_* = (L + accounted) / (pp v) per
// chunk, the first / last chunk one fewer; else first / last stage as given, the middle stages even; each stage's
// layers split evenly over its v chunks.
std::vector<int> megatron_chunks(long long L, const Back& b) {
  if (!b.layout.empty()) return b.layout;
  std::vector<int> c((size_t)b.pp * b.v);
  if ((b.acc_emb || b.acc_loss) && (b.first > 0 || b.last > 0)) return {};  // Megatron-Core raises ValueError
  if (b.acc_emb || b.acc_loss) {
    const long long k = (L + b.acc_emb + b.acc_loss) / (long long)c.size();
    for (int& x : c) x = (int)k;
    c.front() -= b.acc_emb;
    c.back() -= b.acc_loss;
    return c;
  }
  const int given = (b.first > 0) + (b.last > 0);
  const long long mid = b.pp > given ? (L - b.first - b.last) / (b.pp - given) : 0;
  for (size_t g = 0; g < c.size(); ++g) {
    const int st = (int)(g % b.pp);
    const long long n = st == 0 && b.first > 0 ? b.first : st == b.pp - 1 && b.last > 0 ? b.last : mid;
    c[g] = (int)(n / b.v);
  }
  return c;
}

// The same for TorchTitan v0.2.2 (torchtitan/distributed/pipeline_parallel.py: pipeline_llm's stage count and
// generate_llm_fqn_per_model_part): L + first_less + last_less split evenly over the stages, the remainder to
// the first ones; the first (last) stage gives first_less (last_less) of its share to the embedding (output).
std::vector<int> titan_chunks(long long L, const Back& b) {
  if (!b.fqns.empty()) {  // [["tok_embeddings", "layers.0", ...], ...]: layers per part, consecutive from 0
    std::vector<int> c;
    long long next = 0;
    for (size_t i = 0; i < b.fqns.size(); ++i) {
      if (b.fqns[i] == '[' && i > 0) c.push_back(0);
      if (b.fqns.compare(i, 8, "\"layers.") == 0) {
        EXPECT_EQ(std::stoll(b.fqns.substr(i + 8)), next++) << b.fqns;
        ++c.back();
      }
    }
    EXPECT_EQ(next, L);
    EXPECT_EQ(b.fqns.find("[[\"tok_embeddings\""), 0u);
    EXPECT_NE(b.fqns.find("\"norm\", \"output\"]]"), std::string::npos);
    return c;
  }
  const long long eff = L + b.first_less + b.last_less;
  const long long n = b.pp == 1 ? 1 : b.layers_per_stage > 0 ? (eff + b.layers_per_stage - 1) / b.layers_per_stage : b.pp;
  std::vector<int> c;
  long long cur = 0;
  for (long long i = 0; i < n; ++i) {
    long long e = n == 1 ? L : eff / n + (i < eff % n ? 1 : 0);
    if (n > 1 && i == 0) e -= b.first_less;
    if (n > 1 && i == n - 1) e -= b.last_less;
    e = std::min(e, L - cur);
    cur += e;
    c.push_back((int)e);
  }
  return c;
}

// Which layers a --moe-layer-freq pattern "([0]*a+[1])*n[+[0]*r]" or a list "'[0,1,...]'" makes MoE.
std::vector<int> moe_layers_of(const std::string& given) {
  std::vector<int> out;
  long long a = 0, n = 0, r = 0;
  if (std::sscanf(given.c_str(), "'([0]*%lld+[1])*%lld+[0]*%lld'", &a, &n, &r) >= 2) {
    for (long long i = 0; i < n; ++i) {
      out.insert(out.end(), (size_t)a, 0);
      out.push_back(1);
    }
    out.insert(out.end(), (size_t)r, 0);
    return out;
  }
  for (char ch : given)
    if (ch == '0' || ch == '1') out.push_back(ch - '0');
  return out;
}

// "  --flag value \" / "  key=value \" lines after the launcher line containing `launcher`.
std::vector<std::pair<std::string, std::string>> command_options(const std::string& text, const std::string& launcher,
                                                                 std::string* head) {
  std::istringstream in(text);
  std::vector<std::pair<std::string, std::string>> o;
  bool on = false;
  for (std::string line; std::getline(in, line);) {
    if (!on) {
      if (line[0] != '#' && line.find(launcher) != std::string::npos) { on = true; *head = line; }
      continue;
    }
    if (line.size() > 2 && line.back() == '\\') line.pop_back();
    while (!line.empty() && line.back() == ' ') line.pop_back();
    size_t a = line.find_first_not_of(' ');
    if (a == std::string::npos) continue;
    line = line.substr(a);
    size_t sp = line.find(' ');
    o.push_back({line.substr(0, sp), sp == std::string::npos ? "" : line.substr(sp + 1)});
  }
  return o;
}

// "#SBATCH --nodes=N" and the like: the job's shape, which gives dp with the parallel degrees.
int sbatch_int(const std::string& text, const std::string& opt) {
  size_t p = text.find("#SBATCH " + opt + "=");
  return p == std::string::npos ? 0 : std::stoi(text.substr(p + opt.size() + 9));
}
int job_gpus(const std::string& text) { return sbatch_int(text, "--nodes") * sbatch_int(text, "--gpus-per-node"); }

// The chunks of a Megatron-Core --pipeline-model-parallel-layout ("Et*3|t*4|...|tL", x*n unrolled as Megatron's
// parse_str_to_list does): transformer layers per chunk in looping order; E / L only on the first / last chunk.
std::vector<int> layout_chunks(std::string l) {
  if (!l.empty() && l.front() == '\'') l = l.substr(1, l.size() - 2);
  std::string u;
  for (size_t i = 0; i < l.size(); ++i) {
    if (i + 1 < l.size() && l[i + 1] == '*') {
      size_t e = i + 2;
      while (e < l.size() && std::isdigit((unsigned char)l[e])) ++e;
      u += std::string((size_t)std::stoi(l.substr(i + 2, e - i - 2)), l[i]);
      i = e - 1;
    } else {
      u += l[i];
    }
  }
  std::vector<int> c(1, 0);
  for (size_t i = 0; i < u.size(); ++i) {
    if (u[i] == '|') c.push_back(0);
    else if (u[i] == 't') ++c.back();
    else if (u[i] == 'E') EXPECT_TRUE(c.size() == 1) << l;
    else if (u[i] == 'L') EXPECT_EQ(u.find('|', i), std::string::npos) << l;
    else ADD_FAILURE() << "layout symbol " << u[i] << " in " << l;
  }
  return c;
}

// The recompute a plan runs (docs/export.md): selective under flash attention recomputes nothing.
std::string effective_recompute(const Plan& p) {
  return recomputes_nothing(p) ? "none" : recompute_name(p.recompute);
}

Back back_megatron(const std::string& text, const std::set<std::string>& valid) {
  std::string head;
  Back b;
  std::map<std::string, std::string> m;
  for (const auto& [k, v] : command_options(text, "pretrain_gpt.py", &head)) {
    EXPECT_TRUE(valid.count(k)) << "not a Megatron-LM option: " << k;
    m[k] = v;
  }
  auto get = [&](const char* k, int d) { return m.count(k) ? std::stoi(m[k]) : d; };
  b.tp = get("--tensor-model-parallel-size", 1);
  b.pp = get("--pipeline-model-parallel-size", 1);
  b.v = get("--num-virtual-stages-per-pipeline-rank", 1);
  b.cp = get("--context-parallel-size", 1);
  b.ep = get("--expert-model-parallel-size", 1);
  b.dp = job_gpus(text) / (b.tp * b.pp * b.cp);
  EXPECT_EQ(sbatch_int(text, "--ntasks-per-node"), sbatch_int(text, "--gpus-per-node")) << "one task per GPU";
  b.mb = get("--micro-batch-size", 0);
  b.gb = get("--global-batch-size", 0);
  b.first = get("--decoder-first-pipeline-num-layers", 0);
  b.last = get("--decoder-last-pipeline-num-layers", 0);
  if (m.count("--recompute-granularity")) b.recompute = m["--recompute-granularity"];
  if (b.recompute == "selective") {
    EXPECT_EQ(m["--recompute-modules"], "core_attn") << "trainplan's selective = core attention";
  }
  if (m.count("--pipeline-model-parallel-layout")) {
    b.layout = layout_chunks(m["--pipeline-model-parallel-layout"]);
    EXPECT_FALSE(m.count("--num-virtual-stages-per-pipeline-rank")) << "Megatron asserts at most one of them";
    b.v = (int)b.layout.size() / b.pp;
  }
  EXPECT_TRUE(m.count("--train-iters")) << "Megatron needs a run length";
  b.zero = m.count("--use-distributed-optimizer") ? 1 : 0;
  if (m.count("--data-parallel-sharding-strategy")) b.zero = m["--data-parallel-sharding-strategy"] == "optim_grads" ? 2 : 3;
  b.sp = m.count("--sequence-parallel");
  b.precision = m.count("--fp8-format") ? "fp8" : m.count("--bf16") ? "bf16" : m.count("--fp16") ? "fp16" : "fp32";
  b.offload = m.count("--optimizer-cpu-offload");
  b.graphs = m.count("--cuda-graph-impl") && m["--cuda-graph-impl"] == "local";
  b.acc_emb = m.count("--account-for-embedding-in-pipeline-split");
  b.acc_loss = m.count("--account-for-loss-in-pipeline-split");
  if (m.count("--moe-layer-freq")) b.moe_pattern = m["--moe-layer-freq"];
  if (m.count("--use-megatron-fsdp") || m.count("--optimizer-cpu-offload")) {
    EXPECT_TRUE(m.count("--use-distributed-optimizer")) << "Megatron FSDP / the precision-aware optimizer need it";
  }
  if (m.count("--overlap-param-gather")) {
    EXPECT_TRUE(m.count("--overlap-grad-reduce")) << "Megatron-LM asserts --overlap-grad-reduce with it";
  }
  if (m.count("--moe-expert-capacity-factor")) {
    EXPECT_EQ(m["--moe-token-dispatcher-type"], "alltoall") << "Megatron-Core: capacity factor needs alltoall";
  }
  return b;
}

Back back_nemo(const std::string& text, const std::set<std::string>& valid) {
  std::string head;
  Back b;
  std::map<std::string, std::string> m;
  for (const auto& [kv, unused] : command_options(text, "python trainplan_nemo_pretrain.py", &head)) {
    size_t eq = kv.find('=');
    EXPECT_NE(eq, std::string::npos) << kv;
    const std::string k = kv.substr(0, eq), v = kv.substr(eq + 1);
    EXPECT_TRUE(valid.count(k)) << "not a NeMo override path: " << k;
    m[k] = v;
  }
  const std::string plugin_path = "nemo.collections.llm.recipes.precision.mixed_precision.";
  EXPECT_EQ(m["trainer.plugins"].rfind(plugin_path, 0), 0u) << "the factory's full path: " << m["trainer.plugins"];
  const std::string plugin = m["trainer.plugins"].substr(std::min(plugin_path.size(), m["trainer.plugins"].size()));
  EXPECT_TRUE(valid.count("plugin:" + plugin)) << m["trainer.plugins"];
  EXPECT_FALSE(m.count("trainer.strategy.ddp.grad_reduce_in_fp32")) << "the precision plugin overwrites it";
  const std::string s = "trainer.strategy.";
  auto get = [&](const std::string& k, int d) { return m.count(k) && m[k] != "None" ? std::stoi(m[k]) : d; };
  b.tp = get(s + "tensor_model_parallel_size", 1);
  b.pp = get(s + "pipeline_model_parallel_size", 1);
  b.v = get(s + "virtual_pipeline_model_parallel_size", 1);
  b.cp = get(s + "context_parallel_size", 1);
  b.ep = get(s + "expert_model_parallel_size", 1);
  b.dp = get("trainer.num_nodes", 0) * get("trainer.devices", 0) / (b.tp * b.pp * b.cp);
  EXPECT_EQ(job_gpus(text), b.dp * b.tp * b.pp * b.cp);
  EXPECT_EQ(sbatch_int(text, "--ntasks-per-node"), get("trainer.devices", 0)) << "Lightning: one task per device";
  b.mb = get("data.micro_batch_size", 0);
  b.gb = get("data.global_batch_size", 0);
  b.first = get(s + "num_layers_in_first_pipeline_stage", 0);
  b.last = get(s + "num_layers_in_last_pipeline_stage", 0);
  if (m["model.config.recompute_granularity"] != "None") b.recompute = m["model.config.recompute_granularity"];
  if (b.recompute == "selective") {
    EXPECT_EQ(m["model.config.recompute_modules"], "\"['core_attn']\"");
  }
  if (m.count(s + "pipeline_model_parallel_layout")) {
    b.layout = layout_chunks(m[s + "pipeline_model_parallel_layout"]);
    EXPECT_EQ(m[s + "virtual_pipeline_model_parallel_size"], b.layout.size() / b.pp > 1 ? std::to_string(b.layout.size() / b.pp) : "None");
  }
  if (m.count(s + "fsdp")) {
    EXPECT_EQ(m[s + "save_ckpt_format"], "fsdp_dtensor") << "MegatronStrategy refuses Megatron FSDP otherwise";
  }
  EXPECT_NE(text.find("recipe.data = run.Config(PreTrainingDataModule, paths=[os.environ[\"DATA_PATH\"]]"), std::string::npos)
      << "not the recipe's mock data";
  b.zero = m[s + "ddp.use_distributed_optimizer"] == "True" ? 1 : 0;
  if (m.count(s + "ddp.data_parallel_sharding_strategy"))
    b.zero = m[s + "ddp.data_parallel_sharding_strategy"] == "optim_grads" ? 2 : 3;
  b.sp = m[s + "sequence_parallel"] == "True";
  b.precision = m.count("trainer.plugins.fp8") ? "fp8" : plugin.rfind("bf16", 0) == 0 ? "bf16" : "fp16";
  if (b.precision == "fp8") {
    EXPECT_EQ(m["trainer.plugins.fp8_param_gather"], "False") << "fp8 parameter gathers are not simulated";
  }
  b.offload = m["optim.config.optimizer_cpu_offload"] == "True";
  b.graphs = m["model.config.cuda_graph_impl"] == "'local'";
  b.acc_emb = m[s + "account_for_embedding_in_pipeline_split"] == "True";
  b.acc_loss = m[s + "account_for_loss_in_pipeline_split"] == "True";
  if (m.count("model.config.moe_layer_freq")) b.moe_pattern = m["model.config.moe_layer_freq"];
  if (m[s + "ddp.overlap_param_gather"] == "True") {
    EXPECT_EQ(m[s + "ddp.overlap_grad_reduce"], "True");
  }
  if (m.count("model.config.moe_expert_capacity_factor")) {
    EXPECT_EQ(m["model.config.moe_token_dispatcher_type"], "alltoall");
  }
  return b;
}

void check_ds_keys(const json& j, const std::string& prefix, const std::set<std::string>& valid) {
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string k = prefix + it.key();
    if (it->is_object()) check_ds_keys(*it, k + ".", valid);
    else EXPECT_TRUE(valid.count(k)) << "not a DeepSpeed config key: " << k;
  }
}

Back back_deepspeed(const std::string& text, const std::set<std::string>& flags, const std::set<std::string>& keys) {
  const std::string open = "cat > ds_config.json <<'EOF'\n";
  size_t a = text.find(open), e = text.find("\nEOF\n", a);
  EXPECT_NE(a, std::string::npos);
  const json cfg = json::parse(text.substr(a + open.size(), e - a - open.size()));
  check_ds_keys(cfg, "", keys);
  std::string head;
  Back b;
  std::map<std::string, std::string> m;
  for (const auto& [k, v] : command_options(text, "pretrain_gpt.py", &head)) {
    EXPECT_TRUE(flags.count(k)) << "not a Megatron-DeepSpeed option: " << k;
    m[k] = v;
  }
  b.tp = std::stoi(m["--tensor-model-parallel-size"]);
  b.pp = std::stoi(m["--pipeline-model-parallel-size"]);
  if (m.count("--moe-expert-parallel-size")) b.ep = std::stoi(m["--moe-expert-parallel-size"]);
  b.dp = job_gpus(text) / (b.tp * b.pp);
  EXPECT_EQ(sbatch_int(text, "--ntasks-per-node"), sbatch_int(text, "--gpus-per-node")) << "one task per GPU";
  b.mb = cfg["train_micro_batch_size_per_gpu"].get<long long>();
  b.gb = cfg["train_batch_size"].get<long long>();
  EXPECT_EQ(b.gb, b.mb * b.dp * cfg["gradient_accumulation_steps"].get<long long>());  // DeepSpeed's own check
  EXPECT_EQ(std::to_string(b.mb), m["--micro-batch-size"]);
  if (m.count("--recompute-granularity")) b.recompute = m["--recompute-granularity"];
  b.zero = cfg["zero_optimization"]["stage"].get<int>();
  EXPECT_EQ(std::to_string(b.zero), m["--zero-stage"]);
  b.sp = m.count("--sequence-parallel");
  b.precision = cfg.contains("bf16") ? "bf16" : cfg.contains("fp16") ? "fp16" : "fp32";
  b.offload = cfg["zero_optimization"].contains("offload_optimizer");
  if (b.offload) {
    EXPECT_TRUE(m.count("--cpu-optimizer")) << "ZeRO-Offload needs DeepSpeedCPUAdam";
  }
  if (m.count("--num-experts")) {
    EXPECT_EQ(m["--expert-interval"], "1") << "MoE on every layer";
    EXPECT_EQ(m.count("--enable-expert-tensor-parallelism"), b.tp > 1 ? 1u : 0u);
    EXPECT_EQ(m.count("--create-moe-param-group"), b.zero >= 1 ? 1u : 0u);
  }
  if (cfg.contains("bf16") || cfg.contains("fp16")) {
    EXPECT_EQ(cfg["data_types"]["grad_accum_dtype"], cfg["communication_data_type"]);
  }
  return b;
}

Back back_torchtitan(const std::string& script, const std::set<std::string>& valid) {
  const std::string open = "cat > torchtitan-job.toml <<EOF\n";
  size_t a = script.find(open), e = script.find("\nEOF\n", a);
  EXPECT_NE(a, std::string::npos);
  const std::string text = script.substr(a + open.size(), e - a - open.size());
  EXPECT_NE(script.find("torchrun --nnodes " + std::to_string(sbatch_int(script, "--nodes")) + " --nproc-per-node " +
                        std::to_string(sbatch_int(script, "--gpus-per-node"))), std::string::npos);
  EXPECT_EQ(sbatch_int(script, "--ntasks-per-node"), 1) << "one torchrun per node";
  std::istringstream in(text);
  std::map<std::string, std::string> m;
  std::string section;
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') continue;
    if (line[0] == '[') { section = line.substr(1, line.size() - 2); continue; }
    size_t eq = line.find(" = ");
    EXPECT_NE(eq, std::string::npos) << line;
    if (eq == std::string::npos) continue;
    std::string k = section + "." + line.substr(0, eq), v = line.substr(eq + 3);
    if (v.size() >= 2 && v.front() == '"') v = v.substr(1, v.size() - 2);
    EXPECT_TRUE(valid.count(k)) << "not a TorchTitan job-config key: " << k;
    m[k] = v;
  }
  if (m.count("model.converters")) {
    EXPECT_EQ(m["model.converters"], "[\"quantize.linear.float8\"]");
    EXPECT_TRUE(valid.count("converter:quantize.linear.float8"));
  }
  Back b;
  auto get = [&](const std::string& k, int d) { return m.count(k) ? std::stoi(m[k]) : d; };
  b.tp = get("parallelism.tensor_parallel_degree", 1);
  b.pp = get("parallelism.pipeline_parallel_degree", 1);
  b.cp = get("parallelism.context_parallel_degree", 1);
  b.dp = get("parallelism.data_parallel_replicate_degree", 1) * get("parallelism.data_parallel_shard_degree", 1);
  b.gb = get("training.global_batch_size", 0);
  b.mb = b.pp > 1 ? get("parallelism.pipeline_parallel_microbatch_size", 0) : get("training.local_batch_size", 0);
  b.zero = get("parallelism.data_parallel_shard_degree", 1) > 1 || b.dp == 1
               ? (m["parallelism.fsdp_reshard_after_forward"] == "never" ? 2 : 3) : 0;
  b.recompute = m["activation_checkpoint.mode"];
  EXPECT_NE(m["model.hf_assets_path"], "") << "the tokenizer placeholder";
  EXPECT_EQ(m["training.dataset_path"], "${DATA_PATH}");
  if (m.count("quantize.linear.float8.enable_fsdp_float8_all_gather")) {
    EXPECT_EQ(m["quantize.linear.float8.enable_fsdp_float8_all_gather"], "false");
  }
  if (get("parallelism.context_parallel_degree", 1) > 1) {
    EXPECT_EQ(m["parallelism.context_parallel_rotate_method"], "alltoall") << "the ring";
  }
  if (m.count("parallelism.module_fqns_per_model_part")) b.fqns = m["parallelism.module_fqns_per_model_part"];
  b.sp = b.tp > 1;
  b.precision = m.count("model.converters") ? "fp8" : m["training.mixed_precision_param"] == "float32" ? "fp32" : "bf16";
  if (b.pp > 1 && (m["parallelism.pipeline_parallel_schedule"] == "Interleaved1F1B" || !b.fqns.empty()))
    b.v = 0;  // layers per stage given instead: the caller checks the chunks
  if (b.pp > 1) {
    b.first_less = get("parallelism.pipeline_parallel_first_stage_less_layers", 1);  // TorchTitan's default 1
    b.last_less = get("parallelism.pipeline_parallel_last_stage_less_layers", 1);
    b.layers_per_stage = get("parallelism.pipeline_parallel_layers_per_stage", 0);
  }
  return b;
}

struct Lists {
  std::set<std::string> megatron = names_in("data/export/megatron-lm.flags");
  std::set<std::string> nemo = names_in("data/export/nemo.keys");
  std::set<std::string> ds_flags = names_in("data/export/megatron-deepspeed.flags");
  std::set<std::string> ds_keys = names_in("data/export/deepspeed-config.keys");
  std::set<std::string> titan = names_in("data/export/torchtitan.keys");
};

const Lists& lists() {
  static Lists l;
  return l;
}

// Exports `sc` to every target; each that accepts it must state the plan (round trip). Returns how many accepted.
int round_trip(const Scenario& sc, const std::string& what) {
  const Plan& p = sc.plan;
  int accepted = 0;
  for (Target t : {Target::megatron, Target::nemo, Target::deepspeed, Target::torchtitan}) {
    std::string text;
    try {
      text = export_plan(sc, t, "s.json");
    } catch (const InputError& e) {
      for (const std::string& m : e.messages) EXPECT_NE(m.find("nearest plan"), std::string::npos) << m;
      continue;
    }
    ++accepted;
    const std::string tag = what + " -> " + target_name(t);
    Back b = t == Target::megatron ? back_megatron(text, lists().megatron)
             : t == Target::nemo   ? back_nemo(text, lists().nemo)
             : t == Target::deepspeed ? back_deepspeed(text, lists().ds_flags, lists().ds_keys)
                                      : back_torchtitan(text, lists().titan);
    EXPECT_EQ(b.tp, p.tp) << tag;
    EXPECT_EQ(b.pp, p.pp) << tag;
    EXPECT_EQ(b.cp, p.cp) << tag;
    EXPECT_EQ(b.dp, p.dp) << tag;
    if (t != Target::torchtitan) {
      EXPECT_EQ(b.ep, p.ep) << tag;
    }
    if (b.v != 0) {
      EXPECT_EQ(b.v, p.schedule == Schedule::interleaved ? p.virtual_stages : 1) << tag;
    }
    EXPECT_EQ(b.mb, p.microbatch) << tag;
    EXPECT_EQ(b.gb, sc.training.global_batch) << tag;
    EXPECT_EQ(b.recompute, effective_recompute(p)) << tag;
    EXPECT_EQ(text.find("localhost"), std::string::npos) << tag;
    EXPECT_EQ(b.zero, p.zero) << tag;
    EXPECT_EQ(b.sp, p.sequence_parallel) << tag;
    EXPECT_EQ(b.precision, precision_name(sc.training.precision)) << tag;
    EXPECT_EQ(b.graphs, p.cuda_graphs) << tag;  // (DeepSpeed and TorchTitan refuse it)
    EXPECT_EQ(b.offload, p.offload.kind == OffloadKind::optimizer) << tag;
    if (t == Target::megatron) {  // Megatron sets fp32 main gradients itself only under bf16
      const bool fp32_grads = sc.training.precision == Precision::fp16 && sc.training.grad_precision == Precision::fp32;
      EXPECT_EQ(text.find("--accumulate-allreduce-grads-in-fp32") != std::string::npos, fp32_grads) << tag;
    }
    if (t == Target::megatron || t == Target::nemo) {
      const FirstLast fl = first_last_layers(p, sc.model.layers);
      EXPECT_EQ(b.first, fl.ok ? fl.first : 0) << tag;
      EXPECT_EQ(b.last, fl.ok ? fl.last : 0) << tag;
      EXPECT_EQ(b.layout.empty(), fl.ok) << tag;
      EXPECT_EQ(b.acc_emb, p.account_for_embedding) << tag;
      EXPECT_EQ(b.acc_loss, p.account_for_loss) << tag;
    }
    // The layers of every model chunk the framework builds from its options = the plan's split.
    if (t == Target::megatron || t == Target::nemo) {
      EXPECT_EQ(megatron_chunks(sc.model.layers, b), chunk_layers(p, sc.model.layers)) << tag;
    }
    if (t == Target::torchtitan) {
      EXPECT_EQ(titan_chunks(sc.model.layers, b), chunk_layers(p, sc.model.layers)) << tag;
    }
    if (sc.model.moe.every > 1 && (t == Target::megatron || t == Target::nemo)) {
      std::vector<int> want;
      for (long long l = 0; l < sc.model.layers; ++l) want.push_back(sc.model.is_moe_layer(l) ? 1 : 0);
      EXPECT_EQ(moe_layers_of(b.moe_pattern), want) << tag << ": " << b.moe_pattern;
    }
  }
  return accepted;
}

}  // namespace

TEST(Export, BundledScenariosRoundTripWithValidNames) {
  int accepted = 0;
  for (const char* f : {"scenarios/default.json", "scenarios/examples/llama3-70b-dgx-h100.json",
                        "scenarios/examples/llama3-8b-dgx-h100-fp8.json", "scenarios/examples/llama3-405b-uneven.json",
                        "scenarios/examples/llama3-70b-128k-cp16.json", "scenarios/examples/offload-optimizer.json",
                        "scenarios/examples/gpt3-2.7b-frontera-gpipe.json", "scenarios/examples/zero3-layered.json"})
    accepted += round_trip(load(scenario_json(f)), f);
  EXPECT_GE(accepted, 14);
}

TEST(Export, PlanVariantsRoundTripOnEveryTarget) {
  struct Case { const char* name; json plan, model; const char* precision; int min_accepted; };
  const json flash = "flash";
  std::vector<Case> cases = {
      {"zero3_full", {{"zero", 3}, {"pp", 1}, {"dp", 32}, {"schedule", "1f1b"}, {"virtual_stages", 1}, {"recompute", "full"}},
       json::object(), "", 3},
      {"zero2_sp_fp8", {{"zero", 2}, {"pp", 1}, {"dp", 32}, {"schedule", "1f1b"}, {"virtual_stages", 1}}, json::object(),
       "fp8", 3},
      {"zero0_tp8_pp4_1f1b", {{"zero", 0}, {"schedule", "1f1b"}, {"virtual_stages", 1}}, json::object(), "", 3},
      {"cp2", {{"cp", 2}, {"dp", 4}, {"attention", flash}}, json::object(), "", 2},
      {"uneven_first_last", {{"schedule", "1f1b"}, {"virtual_stages", 1}, {"first_stage_layers", 18},
                             {"last_stage_layers", 18}}, json::object(), "", 2},
      {"offload_optimizer_zero1", {{"offload", {{"kind", "optimizer"}}}}, json::object(), "", 2},
      {"moe_ep4", {{"ep", 4}, {"pp", 1}, {"tp", 4}, {"dp", 64}, {"schedule", "1f1b"}, {"virtual_stages", 1}},
       {{"moe", {{"experts", 8}, {"top_k", 2}}}}, "", 3},
      // MoE on every other layer (trainplan: layers 1, 3, ...; Megatron's integer form would take 0, 2, ...).
      {"moe_every2_pp3", {{"ep", 2}, {"pp", 3}, {"tp", 4}, {"dp", 16}, {"schedule", "1f1b"}, {"virtual_stages", 1}},
       {{"layers", 15}, {"moe", {{"experts", 8}, {"top_k", 2}, {"every", 2}}}}, "", 2},
      // Megatron's accounted split (30 layers + embedding + loss over 4 x 2 chunks: 3, 4, ..., 4, 3): no first /
      // last stage options beside it (Megatron-Core refuses both at once); TorchTitan's less-layers per chunk.
      {"account_emb_loss_v2", {{"virtual_stages", 2}, {"account_for_embedding_in_pipeline_split", true},
                               {"account_for_loss_in_pipeline_split", true}, {"zero", 3}},
       {{"layers", 30}}, "", 3},
      {"uneven_interleaved", {{"virtual_stages", 2}, {"first_stage_layers", 18}, {"last_stage_layers", 18}}, json::object(),
       "", 2},
      // Any other split: Megatron / NeMo's pipeline_model_parallel_layout, TorchTitan's module_fqns_per_model_part.
      {"uneven_middle", {{"schedule", "1f1b"}, {"virtual_stages", 1}, {"stage_layers", {10, 30, 20, 20}}, {"zero", 3}},
       json::object(), "", 3},
      {"uneven_interleaved_zero3", {{"virtual_stages", 2}, {"first_stage_layers", 18}, {"last_stage_layers", 18}, {"zero", 3}},
       json::object(), "", 3},
      // Selective recompute: under flash nothing is recomputed (no flags); unfused: core attention.
      {"selective_flash", {{"recompute", "selective"}, {"attention", "flash"}}, json::object(), "", 2},
      {"selective_unfused", {{"recompute", "selective"}, {"attention", "unfused"}}, json::object(), "", 2},
      {"fp16_megatron", {{"schedule", "1f1b"}, {"virtual_stages", 1}}, json::object(), "fp16", 3},
      // Plain data parallelism: TorchTitan's DDP (its mixed precision by autocast) and every other target.
      {"ddp_only", {{"zero", 0}, {"tp", 1}, {"pp", 1}, {"dp", 64}, {"sequence_parallel", false}, {"schedule", "1f1b"},
                    {"virtual_stages", 1}}, json::object(), "", 4},
      {"overlap_param_gather_dp1", {{"dp", 1}, {"zero", 1}, {"overlap_param_gather", true}}, json::object(), "", 2},
      // CUDA graphs (one GPU): Megatron-LM's --cuda-graph-impl local, NeMo's cuda_graph_impl; the others refuse.
      {"cuda_graphs_1gpu", kOneGpuGraphs, json::object(), "", 2},
  };
  for (const Case& c : cases) {
    Scenario sc = load(variant(c.plan, c.model, c.precision));
    EXPECT_GE(round_trip(sc, c.name), c.min_accepted) << c.name;
  }
}

TEST(Export, InexpressibleFeaturesAreRefusedWithPathAndNearestPlan) {
  struct Case { const char* name; json plan; Target t; const char* path; json model = json::object(); };
  std::vector<Case> cases = {
      {"2d", {{"tp", 4}, {"dp", 16}, {"tp_mode", "2d"}, {"sequence_parallel", false}, {"microbatch", 2}}, Target::megatron, "$.plan.tp_mode"},
      {"modular", {{"schedule", "modular"}, {"grad_accumulation", "layered"}}, Target::nemo, "$.plan.schedule"},
      {"layered", {{"schedule", "gpipe"}, {"virtual_stages", 1}, {"grad_accumulation", "layered"}}, Target::megatron,
       "$.plan.grad_accumulation"},
      {"gpipe", {{"schedule", "gpipe"}, {"virtual_stages", 1}}, Target::megatron, "$.plan.schedule"},
      {"granular", {{"offload", {{"kind", "granular"}, {"fraction", 0.5}}}}, Target::deepspeed, "$.plan.offload.kind"},
      {"chunked", {{"offload", {{"kind", "chunked"}}}, {"zero", 3}}, Target::nemo, "$.plan.offload.kind"},
      {"cp_ds", {{"cp", 2}, {"dp", 4}, {"attention", "flash"}}, Target::deepspeed, "$.plan.cp"},
      {"cp_unfused", {{"cp", 2}, {"dp", 4}, {"attention", "unfused"}}, Target::megatron, "$.plan.attention"},
      {"interleaved_ds", json::object(), Target::deepspeed, "$.plan.schedule"},
      {"zero1_titan", json::object(), Target::torchtitan, "$.plan.zero"},
      {"zero0_tp_pp_bf16_titan", {{"zero", 0}, {"schedule", "1f1b"}, {"virtual_stages", 1}}, Target::torchtitan,
       "$.training.precision"},
      {"zero0_cp_titan", {{"zero", 0}, {"cp", 2}, {"dp", 4}, {"pp", 1}, {"schedule", "1f1b"}, {"virtual_stages", 1}},
       Target::torchtitan, "$.plan.zero"},
      {"moe_pp_deepspeed", {{"schedule", "1f1b"}, {"virtual_stages", 1}, {"zero", 1}, {"ep", 2}}, Target::deepspeed,
       "$.plan.pp", {{"moe", {{"experts", 8}, {"top_k", 2}}}}},
      {"param_gather_no_grad_overlap", {{"overlap_param_gather", true}, {"overlap_grad_reduce", false}}, Target::megatron,
       "$.plan.overlap_param_gather"},
      {"param_gather_no_grad_overlap_nemo", {{"overlap_param_gather", true}, {"overlap_grad_reduce", false}}, Target::nemo,
       "$.plan.overlap_param_gather"},
      {"rope_scaling_ds", {{"zero", 1}, {"pp", 1}, {"dp", 32}, {"schedule", "1f1b"}, {"virtual_stages", 1}},
       Target::deepspeed, "$.model.rope_scaling", {{"rope_scaling", {{"factor", 8}}}}},
      {"constant_lr_nemo", json::object(), Target::nemo, "$.training.optimizer.decay"},
      {"cuda_graphs_ds", kOneGpuGraphs, Target::deepspeed, "$.plan.cuda_graphs"},
      {"cuda_graphs_titan", kOneGpuGraphs, Target::torchtitan, "$.plan.cuda_graphs"},
      {"cuda_graphs_full_recompute", with_full(kOneGpuGraphs), Target::megatron, "$.plan.cuda_graphs"},
  };
  for (const Case& c : cases) {
    json j = variant(c.plan, c.model);
    if (std::string(c.name) == "constant_lr_nemo") j["training"]["optimizer"] = {{"decay", "constant"}};
    Scenario sc = load(j);
    try {
      export_plan(sc, c.t, "s.json");
      ADD_FAILURE() << c.name << ": exported";
    } catch (const InputError& e) {
      bool found = false;
      for (const std::string& m : e.messages)
        found = found || (m.find(c.path) != std::string::npos && m.find("nearest plan") != std::string::npos);
      EXPECT_TRUE(found) << c.name << ": " << e.messages.front();
    }
  }
  EXPECT_THROW(target_of("colossalai"), InputError);
}

// Golden outputs (regenerate with scripts/update_golden.sh after an intended change; review the diff).
TEST(Export, GoldenOutputs) {
  struct G { const char* scenario; Target t; const char* golden; };
  for (const G& g : {G{"scenarios/default.json", Target::megatron, "default.megatron.sh"},
                     G{"scenarios/default.json", Target::nemo, "default.nemo.sh"},
                     G{"scenarios/default.json", Target::deepspeed, "default.deepspeed.sh"},
                     G{"scenarios/examples/llama3-70b-128k-cp16.json", Target::megatron, "llama3-70b-128k-cp16.megatron.sh"}}) {
    std::ifstream in(src(std::string("tests/golden/export/") + g.golden));
    std::stringstream want;
    want << in.rdbuf();
    EXPECT_EQ(export_plan(load(scenario_json(g.scenario)), g.t, g.scenario), want.str()) << g.golden;
  }
  // TorchTitan: the llama3-70b variant with ZeRO-3 and an uneven 1F1B pipeline.
  std::ifstream in(src("tests/golden/export/llama3-70b-zero3.torchtitan.sh"));
  std::stringstream want;
  want << in.rdbuf();
  Scenario sc = load(variant({{"zero", 3}, {"schedule", "1f1b"}, {"virtual_stages", 1}, {"first_stage_layers", 18},
                              {"last_stage_layers", 18}}));
  EXPECT_EQ(export_plan(sc, Target::torchtitan, "llama3-70b-zero3.json"), want.str());
}
