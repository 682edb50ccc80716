// transformer: the architecture of a GPT-style decoder, from the catalog, inline JSON, or a Hugging Face config.
// Invariants: kv_heads divides heads; head_dim = hidden / heads; counts are exact integers.
#pragma once
#include <string>

#include "json_check.hpp"

namespace tp {

enum class Activation { gelu = 0, swiglu = 1 };

// Mixture of experts (JSON model.moe): every `every`-th layer (layer l with (l + 1) % every == 0) replaces its
// MLP by `experts` expert MLPs of ffn_hidden each; a router sends each token to top_k experts; an expert
// processes at most capacity_factor * tokens * top_k / experts tokens (padding counts as compute).
struct Moe {
  long long experts = 0;  // 0 = dense model
  int top_k = 1;
  double capacity_factor = 1.0;
  int every = 1;
};

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
  long long head_dim() const { return hidden / heads; }
  bool is_moe_layer(long long l) const { return moe.experts > 0 && (l + 1) % moe.every == 0; }
  long long moe_layers_in(long long lo, long long hi) const {  // MoE layers among [lo, hi)
    if (moe.experts <= 0) return 0;
    return hi / moe.every - lo / moe.every;
  }
};

// `base_dir` resolves relative hf_config paths (the scenario file's folder).
Transformer read_transformer(const json& v, const std::string& path, const std::string& base_dir, Issues& issues);
Transformer read_hf_config(const std::string& file, const std::string& path, Issues& issues);
json transformer_to_json(const Transformer& m);

}  // namespace tp
