// transformer: the architecture of a GPT-style decoder, from the catalog, inline JSON, or a Hugging Face config.
// Invariants: kv_heads divides heads; head_dim = hidden / heads; counts are exact integers.
#pragma once
#include <string>

#include "json_check.hpp"

namespace tp {

enum class Activation { gelu = 0, swiglu = 1 };

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
  long long head_dim() const { return hidden / heads; }
};

// `base_dir` resolves relative hf_config paths (the scenario file's folder).
Transformer read_transformer(const json& v, const std::string& path, const std::string& base_dir, Issues& issues);
Transformer read_hf_config(const std::string& file, const std::string& path, Issues& issues);
json transformer_to_json(const Transformer& m);

}  // namespace tp
