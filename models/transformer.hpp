// transformer: the architecture of a GPT-style decoder, from the catalog, inline JSON, or a Hugging Face config
// (models/hf_config.cpp).
// Invariants: kv_heads divides heads; head_dim() = attn_head_dim when given, else hidden / heads (and then heads
// divides hidden); the query width heads x head_dim may differ from hidden; counts are exact integers.
// GPT-style (gelu) models always have every bias; SwiGLU models have the biases their flags name.
#pragma once
#include <cmath>
#include <string>

#include "json_check.hpp"

namespace tp {

enum class Activation { gelu = 0, swiglu = 1 };

// Mixture of experts (JSON model.moe): every `every`-th layer (layer l with (l + 1) % every == 0) replaces its
// MLP by `experts` expert MLPs of ffn_hidden each (the model's ffn_hidden when 0); a router sends each token to
// top_k experts; an expert processes at most capacity_factor * tokens * top_k / experts tokens (padding counts
// as compute). shared_ffn_hidden > 0 adds an always-on shared expert MLP of that inner size (DeepSeek's
// n_shared_experts x moe_intermediate_size, Qwen-MoE's shared_expert_intermediate_size) to every MoE layer.
// aux_loss_coeff weighs the load-balancing loss the executor trains with (it costs nothing in the simulator).
struct Moe {
  long long experts = 0;  // 0 = dense model
  int top_k = 1;
  double capacity_factor = 1.0;
  int every = 1;
  long long ffn_hidden = 0;         // one expert's inner size; 0 = the model's ffn_hidden
  long long shared_ffn_hidden = 0;  // shared experts' inner size (all of them together); 0 = none
  double aux_loss_coeff = 0.01;     // load-balancing loss weight (Megatron-LM --moe-aux-loss-coeff; Switch's alpha)
};

// Tokens one expert takes from a routing group of n tokens (one rank's micro-batch rows):
// ceil(capacity_factor x top_k x n / experts), GShard's capacity; copies beyond it are dropped and the padding
// counts as compute. One policy for the executor's dispatch buffers and the simulator's padded copies.
inline long long moe_capacity_tokens(long long n, long long experts, long long top_k, double capacity_factor) {
  return (long long)std::ceil(capacity_factor * (double)top_k * (double)n / (double)experts - 1e-9);
}

struct Transformer {
  std::string name;
  long long layers = 0;
  long long hidden = 0;      // h
  long long heads = 0;       // a
  long long kv_heads = 0;    // grouped-query attention: heads sharing one K/V head
  long long ffn_hidden = 0;  // MLP inner size (per branch for SwiGLU)
  long long vocab = 0;       // V
  long long seq_len = 0;     // default sequence length
  Activation activation = Activation::gelu;
  bool tied_embeddings = true;
  bool dropout = true;       // dropout after attention probabilities, residual branches and embeddings (default:
                             // true for gelu, false for swiglu); false drops its ops and masks from the cost
  Moe moe;
  long long attn_head_dim = 0;  // per-head width dh (HF head_dim); 0 = hidden / heads
  bool qkv_bias = false;        // SwiGLU models: biases on q, k, v (Qwen2, Llama attention_bias)
  bool proj_bias = false;       // SwiGLU models: bias on the attention output projection (Llama attention_bias)
  bool mlp_bias = false;        // SwiGLU models: biases on the MLP's gate, up and down projections (Llama mlp_bias)
  long long sliding_window = 0; // attention window of the source config; not modelled (the scenario warns), 0 = none
  std::string source;           // where the model came from, for warnings (the hf_config file, or the JSON path)
  // Fields that change no cost but that a framework needs to build the same model (export/); 0 = the default.
  double rope_theta = 0;        // rotary base (Llama 3 500000, Mixtral / Qwen2 1e6); 0 = 10000 (Megatron's default)
  double norm_eps = 0;          // RMSNorm / LayerNorm epsilon; 0 = 1e-5
  // Llama 3.1 rope scaling (HF rope_scaling with rope_type "llama3"); factor 0 = none.
  double rope_scaling_factor = 0, rope_low_freq_factor = 1, rope_high_freq_factor = 4;
  long long rope_original_max_position = 8192;
  double rotary_base() const { return rope_theta > 0 ? rope_theta : 10000.0; }
  double norm_epsilon() const { return norm_eps > 0 ? norm_eps : 1e-5; }
  long long head_dim() const { return attn_head_dim > 0 ? attn_head_dim : hidden / heads; }
  long long q_width() const { return heads * head_dim(); }  // width of Q and of the projection's input
  long long expert_ffn() const { return moe.ffn_hidden > 0 ? moe.ffn_hidden : ffn_hidden; }
  bool has_qkv_bias() const { return activation == Activation::gelu || qkv_bias; }
  bool has_proj_bias() const { return activation == Activation::gelu || proj_bias; }
  bool has_mlp_bias() const { return activation == Activation::gelu || mlp_bias; }
  bool is_moe_layer(long long l) const { return moe.experts > 0 && (l + 1) % moe.every == 0; }
  long long moe_layers_in(long long lo, long long hi) const {  // MoE layers among [lo, hi)
    if (moe.experts <= 0) return 0;
    return hi / moe.every - lo / moe.every;
  }
};

// `base_dir` resolves relative hf_config paths (the scenario file's folder).
Transformer read_transformer(const json& v, const std::string& path, const std::string& base_dir, Issues& issues);
// Hugging Face config.json (Llama / Mistral / Qwen2 / Mixtral / Qwen-MoE / DeepSeek / GPT-2 names). Problems go
// to issues.messages; fields that change the cost but are not modelled go to issues.warnings (models/hf_config.cpp).
Transformer read_hf_config(const std::string& file, const std::string& path, Issues& issues);
json transformer_to_json(const Transformer& m);
// Shape checks shared by every source (heads divides hidden unless head_dim is given; kv_heads divides heads);
// also normalises an explicit head_dim or moe.ffn_hidden equal to its default to 0 (the default).
void check_transformer_shape(Transformer& m, const std::string& path, Issues& issues);

}  // namespace tp
