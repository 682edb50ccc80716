// test_export_launch: what makes an export launchable as written (issue 43) — every target is a Slurm batch script
// (#SBATCH nodes / tasks / GPUs, srun, MASTER_ADDR from the job's node list, never localhost), data and tokenizer
// are the only placeholders, the model fields a framework needs come from the scenario or its Hugging Face config
// (rotary base and scaling, norm epsilon), the run's optimizer, schedule, checkpoint and log intervals come from
// training.optimizer / checkpoint_every / log_every (or their documented defaults), the start-up flags the
// frameworks need are there (DeepSpeed's --cpu-optimizer, --create-moe-param-group), and selective recompute means
// what trainplan simulates. test_export.cpp has the round trips, the name lists and the goldens.
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "export/export.hpp"

using namespace tp;
using namespace tp::exporting;

namespace {

// (appended in place: GCC 12's -Warray-bounds misfires on string&& + "/" inlined here)
std::string src(const std::string& rel) {
  std::string path = TP_SOURCE_DIR;
  path += '/';
  path += rel;
  return path;
}

json scenario_json(const std::string& rel) {
  std::ifstream in(src(rel));
  return json::parse(in);
}

Scenario load(const json& j) { return scenario_from_json(j, src("scenarios"), "test"); }

// The llama3-70b example with `plan` merged over its plan.
json llama70(const json& plan = json::object()) {
  json j = scenario_json("scenarios/examples/llama3-70b-dgx-h100.json");
  for (auto it = plan.begin(); it != plan.end(); ++it) j["plan"][it.key()] = it.value();
  return j;
}

std::string exp(const json& j, Target t) { return export_plan(load(j), t, "s.json"); }
bool has(const std::string& text, const std::string& what) { return text.find(what) != std::string::npos; }

// The value after "  --flag " (Megatron-style) up to the line's end or " \".
std::string flag(const std::string& text, const std::string& f) {
  size_t p = text.find("  " + f + " ");
  if (p == std::string::npos) return "";
  p += f.size() + 3;
  size_t e = text.find('\n', p);
  std::string v = text.substr(p, e - p);
  if (v.size() >= 2 && v.compare(v.size() - 2, 2, " \\") == 0) v.resize(v.size() - 2);
  return v;
}

// A NeMo override "key=value".
std::string nemo_value(const std::string& text, const std::string& key) {
  size_t p = text.find("  " + key + "=");
  if (p == std::string::npos) return "";
  p += key.size() + 3;
  size_t e = text.find_first_of(" \n", p);
  return text.substr(p, e - p);
}

const Target kAll[] = {Target::megatron, Target::nemo, Target::deepspeed, Target::torchtitan};

}  // namespace

TEST(ExportLaunch, EveryTargetIsASlurmBatchScriptWithTheJobShape) {
  // llama3-70b on 4 nodes of 8: dp 4 x tp 8, ZeRO-3 (every target runs it, TorchTitan included).
  const json j = llama70({{"dp", 4}, {"tp", 8}, {"pp", 1}, {"zero", 3}, {"schedule", "1f1b"}, {"virtual_stages", 1}});
  for (Target t : kAll) {
    const std::string s = exp(j, t), tag = target_name(t);
    EXPECT_EQ(s.rfind("#!/bin/bash\n", 0), 0u) << tag;
    EXPECT_TRUE(has(s, "#SBATCH --nodes=4\n")) << tag;
    EXPECT_TRUE(has(s, "#SBATCH --gpus-per-node=8\n")) << tag;
    // One task per GPU (Megatron-LM, NeMo, DeepSpeed under srun) or one torchrun per node (TorchTitan).
    EXPECT_TRUE(has(s, t == Target::torchtitan ? "#SBATCH --ntasks-per-node=1\n" : "#SBATCH --ntasks-per-node=8\n")) << tag;
    EXPECT_TRUE(has(s, "MASTER_ADDR=$(scontrol show hostnames \"$SLURM_JOB_NODELIST\" | head -n 1)")) << tag;
    EXPECT_TRUE(has(s, "\nsrun ")) << tag;
    EXPECT_FALSE(has(s, "localhost")) << tag;
    // The #SBATCH lines come before the first command (sbatch stops reading them there).
    EXPECT_LT(s.find("#SBATCH --exclusive"), s.find("\nset -euo pipefail")) << tag;
    // Data and tokenizer are required from the environment, with a message; nothing else is a placeholder.
    EXPECT_TRUE(has(s, "DATA_PATH=${DATA_PATH:?\"set DATA_PATH to ")) << tag;
    EXPECT_TRUE(has(s, "TOKENIZER=${TOKENIZER:?\"set TOKENIZER to ")) << tag;
    EXPECT_FALSE(has(s, "REPLACE")) << tag;
  }
  EXPECT_TRUE(has(exp(j, Target::megatron), "RANK=$SLURM_PROCID LOCAL_RANK=$SLURM_LOCALID WORLD_SIZE=$SLURM_NTASKS"));
  EXPECT_TRUE(has(exp(j, Target::torchtitan), "torchrun --nnodes 4 --nproc-per-node 8 --rdzv-id \"$SLURM_JOB_ID\" "
                                              "--rdzv-backend c10d --rdzv-endpoint \"$MASTER_ADDR:$MASTER_PORT\""));
}

TEST(ExportLaunch, ModelFieldsComeFromTheScenarioAndItsHuggingFaceConfig) {
  // Llama 3 (catalog): rotary base 500000; Qwen2 and Mixtral HF configs: 1e6 and their norm epsilon.
  const std::string l = exp(llama70(), Target::megatron);
  EXPECT_EQ(flag(l, "--rotary-base"), "500000");
  EXPECT_EQ(flag(l, "--norm-epsilon"), "1e-05");
  EXPECT_EQ(nemo_value(exp(llama70(), Target::nemo), "model.config.rotary_base"), "500000");
  json q = llama70({{"tp", 4}, {"dp", 16}, {"pp", 1}, {"schedule", "1f1b"}, {"virtual_stages", 1}});
  q["model"] = {{"hf_config", "../tests/models/hf/qwen2-7b/config.json"}};
  const std::string qm = exp(q, Target::megatron), qn = exp(q, Target::nemo);
  EXPECT_EQ(flag(qm, "--rotary-base"), "1000000");
  EXPECT_EQ(flag(qm, "--norm-epsilon"), "1e-06");
  EXPECT_TRUE(has(qm, "  --add-qkv-bias"));
  // Qwen2 goes through llama3_8b (qwen2_7b's string ddp would refuse the ddp.* overrides), stating its biases.
  EXPECT_TRUE(has(qn, "python trainplan_nemo_pretrain.py llama3_8b \\\n"));
  EXPECT_EQ(nemo_value(qn, "model.config.add_qkv_bias"), "True");
  EXPECT_EQ(nemo_value(qn, "model.config.rotary_base"), "1000000");
  EXPECT_EQ(nemo_value(qn, "model.config.layernorm_epsilon"), "1e-06");
  // Inline rope_theta / norm_eps / Llama 3.1 rope scaling.
  json s = llama70();
  s["model"] = {{"layers", 16}, {"hidden", 4096}, {"heads", 32}, {"kv_heads", 8}, {"ffn_hidden", 14336},
                {"vocab", 128256}, {"seq_len", 8192}, {"activation", "swiglu"}, {"tied_embeddings", false},
                {"rope_theta", 500000}, {"norm_eps", 1e-5}, {"rope_scaling", {{"factor", 8}}}};
  s["plan"] = {{"dp", 8}, {"tp", 8}, {"pp", 1}, {"zero", 1}, {"sequence_parallel", true}};
  const std::string sm = exp(s, Target::megatron), sn = exp(s, Target::nemo);
  EXPECT_TRUE(has(sm, "  --use-rope-scaling"));
  EXPECT_EQ(flag(sm, "--rope-scaling-factor"), "8");
  EXPECT_TRUE(has(sn, "python trainplan_nemo_pretrain.py llama31_8b \\\n"));
  EXPECT_EQ(nemo_value(sn, "model.config.scale_factor"), "8");
  EXPECT_EQ(nemo_value(sn, "model.config.old_context_len"), "8192");
}

TEST(ExportLaunch, TrainingSettingsAndTheRunLengthAreExported) {
  // No tokens in the scenario: the run length is where simulate stops it, never missing.
  json j = llama70();
  j["training"].erase("tokens");
  const long long steps = train_steps(load(j));
  ASSERT_GT(steps, 0);
  EXPECT_EQ(flag(exp(j, Target::megatron), "--train-iters"), std::to_string(steps));
  // Defaults (docs/export.md): lr 3e-4 cosine to lr / 10, warm-up 1 % of the steps, clipping 1.0, save every 1000.
  std::string m = exp(j, Target::megatron);
  EXPECT_EQ(flag(m, "--lr"), "0.0003");
  EXPECT_EQ(flag(m, "--min-lr"), "3e-05");
  EXPECT_EQ(flag(m, "--lr-warmup-iters"), std::to_string(std::max(1LL, steps / 100)));
  EXPECT_EQ(flag(m, "--save-interval"), "1000");
  // Given ones.
  j["training"]["optimizer"] = {{"lr", 1.5e-4}, {"min_lr", 1.5e-5}, {"decay", "linear"}, {"warmup_steps", 2000},
                                {"weight_decay", 0.05}, {"grad_clip", 0.5}, {"beta2", 0.98}};
  j["training"]["checkpoint_every"] = 250;
  j["training"]["log_every"] = 5;
  m = exp(j, Target::megatron);
  EXPECT_EQ(flag(m, "--lr"), "0.00015");
  EXPECT_EQ(flag(m, "--lr-decay-style"), "linear");
  EXPECT_EQ(flag(m, "--lr-warmup-iters"), "2000");
  EXPECT_EQ(flag(m, "--weight-decay"), "0.05");
  EXPECT_EQ(flag(m, "--clip-grad"), "0.5");
  EXPECT_EQ(flag(m, "--adam-beta2"), "0.98");
  EXPECT_EQ(flag(m, "--save-interval"), "250");
  EXPECT_EQ(flag(m, "--log-interval"), "5");
  json z3 = j;
  z3["plan"] = {{"dp", 8}, {"tp", 8}, {"pp", 1}, {"zero", 3}, {"sequence_parallel", true}};
  const std::string t = exp(z3, Target::torchtitan);
  EXPECT_TRUE(has(t, "[lr_scheduler]\nwarmup_steps = 2000\ndecay_type = \"linear\"\nmin_lr_factor = 0.1\n"));
  EXPECT_TRUE(has(t, "[checkpoint]\nenable = true\ninterval = 250\n"));
  EXPECT_TRUE(has(t, "max_norm = 0.5\n"));
  j["training"]["optimizer"]["decay"] = "cosine";  // NeMo's recipes schedule by cosine annealing (linear is refused)
  const std::string n = exp(j, Target::nemo);
  EXPECT_EQ(nemo_value(n, "optim.lr_scheduler.warmup_steps"), "2000");
  EXPECT_EQ(nemo_value(n, "log.ckpt.every_n_train_steps"), "250");
  // Bad settings: one message naming the path and the range (exit 2 at the CLI).
  j["training"]["optimizer"] = {{"lr", 20}};
  EXPECT_THROW(load(j), InputError);
  try {
    load(j);
  } catch (const InputError& e) {
    EXPECT_TRUE(has(e.what(), "$.training.optimizer.lr: expected a number in (0, 10]")) << e.what();
  }
  j["training"]["optimizer"] = {{"learning_rate", 1e-4}};
  try {
    load(j);
    ADD_FAILURE() << "unknown key accepted";
  } catch (const InputError& e) {
    EXPECT_TRUE(has(e.what(), "$.training.optimizer.learning_rate: unknown key")) << e.what();
  }
}

TEST(ExportLaunch, FrameworkStartUpFlagsAndPrecisionMeaning) {
  // DeepSpeed: ZeRO-Offload needs --cpu-optimizer; MoE with ZeRO its own parameter group, every layer MoE,
  // experts sharded over tp; gradients accumulated and reduced in fp32 as planned.
  json off = llama70({{"dp", 32}, {"tp", 2}, {"pp", 1}, {"zero", 1}, {"schedule", "1f1b"}, {"virtual_stages", 1},
                      {"offload", {{"kind", "optimizer"}}}});
  const std::string d = exp(off, Target::deepspeed);
  EXPECT_TRUE(has(d, "  --cpu-optimizer"));
  EXPECT_TRUE(has(d, "\"grad_accum_dtype\": \"fp32\""));
  EXPECT_TRUE(has(d, "\"communication_data_type\": \"fp32\""));
  json moe = off;
  moe["plan"].erase("offload");
  moe["plan"]["ep"] = 4;
  moe["model"] = {{"layers", 16}, {"hidden", 4096}, {"heads", 32}, {"kv_heads", 8}, {"ffn_hidden", 14336}, {"vocab", 32000},
                  {"seq_len", 8192}, {"activation", "swiglu"}, {"tied_embeddings", false}, {"moe", {{"experts", 8}, {"top_k", 2}}}};
  const std::string dm = exp(moe, Target::deepspeed);
  EXPECT_TRUE(has(dm, "  --create-moe-param-group"));
  EXPECT_EQ(flag(dm, "--expert-interval"), "1");
  EXPECT_TRUE(has(dm, "  --enable-expert-tensor-parallelism"));
  // NeMo: the plugin by its full factory path; fp8 as simulated (no fp8 parameter gathers); fp32 gradient reduction
  // on the plugin (it overwrites the ddp field); Megatron FSDP saves fsdp_dtensor; attention backend as the enum.
  const std::string n8 = exp(llama70({{"zero", 2}, {"pp", 1}, {"dp", 32}, {"schedule", "1f1b"}, {"virtual_stages", 1}}),
                             Target::nemo);
  EXPECT_EQ(nemo_value(n8, "trainer.plugins"), "nemo.collections.llm.recipes.precision.mixed_precision.bf16_mixed");
  EXPECT_EQ(nemo_value(n8, "trainer.plugins.grad_reduce_in_fp32"), "True");
  EXPECT_EQ(nemo_value(n8, "trainer.strategy.save_ckpt_format"), "fsdp_dtensor");
  EXPECT_EQ(nemo_value(n8, "model.config.attention_backend"), "'megatron.core.transformer.enums.AttnBackend(1)'");
  json f8 = scenario_json("scenarios/examples/llama3-8b-dgx-h100-fp8.json");
  const std::string nf = exp(f8, Target::nemo);
  EXPECT_EQ(nemo_value(nf, "trainer.plugins.fp8"), "hybrid");
  EXPECT_EQ(nemo_value(nf, "trainer.plugins.fp8_param_gather"), "False");
  // Megatron-LM fp16: fp32 main gradients as the plan says.
  const std::string m16 = exp(scenario_json("scenarios/default.json"), Target::megatron);
  EXPECT_TRUE(has(m16, "  --fp16 \\\n  --accumulate-allreduce-grads-in-fp32"));
  // TorchTitan: the built-in flavor, fp8 weights gathered in bf16, cp passing K / V around the ring.
  json tc = llama70({{"dp", 2}, {"cp", 4}, {"tp", 8}, {"pp", 1}, {"zero", 3}, {"schedule", "1f1b"}, {"virtual_stages", 1}});
  tc["training"]["seq_len"] = 32768;
  const std::string t = exp(tc, Target::torchtitan);
  EXPECT_TRUE(has(t, "flavor = \"70B\"\n"));
  EXPECT_TRUE(has(t, "context_parallel_rotate_method = \"alltoall\"\n"));
  json tf = scenario_json("scenarios/examples/llama3-8b-dgx-h100-fp8.json");
  tf["plan"] = {{"dp", 8}, {"tp", 1}, {"pp", 1}, {"zero", 3}};
  const std::string t8 = exp(tf, Target::torchtitan);
  EXPECT_TRUE(has(t8, "flavor = \"8B\"\n"));
  EXPECT_TRUE(has(t8, "enable_fsdp_float8_all_gather = false\n"));
}

TEST(ExportLaunch, SelectiveRecomputeMeansWhatTrainplanSimulates) {
  // Flash: trainplan recomputes nothing, so no target turns recompute on (Megatron-Core's selective would
  // recompute core_attn, TorchTitan's op-level SAC every second matmul).
  const json flash = llama70({{"dp", 8}, {"tp", 8}, {"pp", 1}, {"zero", 3}, {"schedule", "1f1b"}, {"virtual_stages", 1},
                              {"recompute", "selective"}, {"attention", "flash"}});
  EXPECT_FALSE(has(exp(flash, Target::megatron), "--recompute"));
  EXPECT_EQ(nemo_value(exp(flash, Target::nemo), "model.config.recompute_granularity"), "None");
  EXPECT_FALSE(has(exp(flash, Target::deepspeed), "--recompute"));
  EXPECT_TRUE(has(exp(flash, Target::torchtitan), "[activation_checkpoint]\nmode = \"none\"\n"));
  // Unfused: core attention, named.
  json unfused = flash;
  unfused["plan"]["attention"] = "unfused";
  const std::string m = exp(unfused, Target::megatron);
  EXPECT_EQ(flag(m, "--recompute-granularity"), "selective");
  EXPECT_EQ(flag(m, "--recompute-modules"), "core_attn");
  EXPECT_EQ(nemo_value(exp(unfused, Target::nemo), "model.config.recompute_modules"), "\"['core_attn']\"");
}

TEST(ExportLaunch, TorchTitansOpLevelCheckpointingExportsAsItselfAndOnlyThere) {
  json j = llama70({{"dp", 8}, {"tp", 8}, {"pp", 1}, {"zero", 3}, {"schedule", "1f1b"}, {"virtual_stages", 1},
                    {"recompute", "selective_op"}, {"attention", "flash"}, {"sequence_parallel", true}});
  j["training"]["framework"] = "torchtitan";
  EXPECT_TRUE(has(exp(j, Target::torchtitan), "[activation_checkpoint]\nmode = \"selective\"\nselective_ac_option = \"op\"\n"));
  for (Target t : {Target::megatron, Target::nemo, Target::deepspeed}) {
    try {
      exp(j, t);
      ADD_FAILURE() << "exported selective_op to a framework without it";
    } catch (const InputError& e) {
      EXPECT_TRUE(has(e.what(), "$.plan.recompute: TorchTitan's op-level selective checkpointing")) << e.what();
    }
  }
}

TEST(ExportLaunch, ARecomputedShareOfTheLayersIsMegatronsBlockMethodAndTorchTitansEveryKthBlock) {
  // llama3-70b: 80 layers; pp 4 x v 2 = 8 chunks of 10; 40 of 80 recomputed = 5 per chunk, every 2nd block.
  json j = llama70({{"dp", 8}, {"tp", 8}, {"pp", 4}, {"zero", 1}, {"schedule", "interleaved"}, {"virtual_stages", 2},
                    {"recompute", "full"}, {"recompute_layers", 40}, {"sequence_parallel", true}});
  const std::string m = exp(j, Target::megatron);
  EXPECT_EQ(flag(m, "--recompute-granularity"), "full");
  EXPECT_EQ(flag(m, "--recompute-method"), "block");
  EXPECT_EQ(flag(m, "--recompute-num-layers"), "5");
  EXPECT_EQ(nemo_value(exp(j, Target::nemo), "model.config.recompute_method"), "block");
  EXPECT_EQ(nemo_value(exp(j, Target::nemo), "model.config.recompute_num_layers"), "5");
  json t = llama70({{"dp", 8}, {"tp", 8}, {"pp", 1}, {"zero", 3}, {"schedule", "1f1b"}, {"virtual_stages", 1},
                    {"recompute", "full"}, {"recompute_layers", 40}, {"sequence_parallel", true}});
  EXPECT_TRUE(has(exp(t, Target::torchtitan), "[activation_checkpoint]\nmode = \"selective\"\nselective_ac_option = \"2\"\n"));
  // 30 of 80: 3.75 per chunk of 10, and not every k-th block: refused with the nearest plan.
  j["plan"]["recompute_layers"] = 30;
  t["plan"]["recompute_layers"] = 30;
  for (auto [jj, target] : {std::pair{j, Target::megatron}, std::pair{t, Target::torchtitan}}) {
    try {
      exp(jj, target);
      ADD_FAILURE() << "exported 30 of 80 layers";
    } catch (const InputError& e) {
      EXPECT_TRUE(has(e.what(), "$.plan.recompute_layers")) << e.what();
    }
  }
}

TEST(ExportLaunch, IrregularStagesExportAsLayouts) {
  const json j = llama70({{"schedule", "1f1b"}, {"virtual_stages", 1}, {"stage_layers", {10, 30, 20, 20}}, {"zero", 3}});
  EXPECT_EQ(flag(exp(j, Target::megatron), "--pipeline-model-parallel-layout"), "'Et*10|t*30|t*20|t*20L'");
  EXPECT_EQ(nemo_value(exp(j, Target::nemo), "trainer.strategy.pipeline_model_parallel_layout"), "'Et*10|t*30|t*20|t*20L'");
  EXPECT_TRUE(has(exp(j, Target::torchtitan), "module_fqns_per_model_part = [[\"tok_embeddings\", \"layers.0\","));
}
