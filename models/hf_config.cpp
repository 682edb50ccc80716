// hf_config: a Hugging Face config.json read as a Transformer (Llama / Mistral / Qwen2 / Mixtral / Qwen-MoE /
// DeepSeek / GPT-2 key names). HF configs carry many keys trainplan does not need: the known ones are read and
// type-checked (a wrong type is an error naming "<path> (<file>).<key>"), the rest are ignored, and a key that
// changes the cost but is not modelled (multi-head latent attention, multi-token prediction, a MoE layout
// moe.every cannot express) adds one warning to issues.warnings naming the key and the file. A sliding window is
// recorded in Transformer::sliding_window; the scenario warns once the training sequence length is known.
// Invariants: a JSON null counts as an absent key; the result passes the same shape checks as an inline model.
#include <filesystem>
#include <initializer_list>
#include <set>

#include "transformer.hpp"

namespace tp {

namespace {

// Hugging Face keys without a scenario key of their own (0 experts or shared experts: none).
constexpr Limit kHfExperts{"num_local_experts", 0, lim::experts.hi, LimitKind::integer, ""};
constexpr Limit kHfSharedExperts{"n_shared_experts", 0, 1024, LimitKind::integer, ""};
constexpr Limit kHfDenseLayers{"first_k_dense_replace", 0, lim::layers.hi, LimitKind::integer, ""};

struct HfReader {
  const json& j;
  std::string file, path;
  Issues& issues;

  std::string at(const std::string& key) const { return path + " (" + file + ")." + key; }
  const json* find(const std::string& key) const {
    auto it = j.find(key);
    return it == j.end() || it->is_null() ? nullptr : &*it;
  }
  const char* first_present(std::initializer_list<const char*> keys) const {
    for (const char* k : keys)
      if (find(k)) return k;
    return nullptr;
  }
  // The first present key of `keys` (aliases) as an integer in the range `l`; dflt when none is present.
  long long integer(std::initializer_list<const char*> keys, long long dflt, bool required, const Limit& l) {
    const char* k = first_present(keys);
    if (!k) {
      if (required) {
        std::string also;
        for (auto it = keys.begin() + 1; it != keys.end(); ++it) also += (also.empty() ? " (or " : ", ") + std::string(*it);
        issues.add(at(*keys.begin()), "missing; expected " + limit_text(l) + (also.empty() ? "" : also + ")"));
      }
      return dflt;
    }
    const json& v = *find(k);
    if (!v.is_number_integer() || !within(l, (double)v.get<long long>())) {
      issues.add_got(at(k), limit_text(l), v);
      return dflt;
    }
    return v.get<long long>();
  }
  // The first present key of `keys` as a number in the range `l`; dflt when none is present.
  double number(std::initializer_list<const char*> keys, double dflt, const Limit& l) {
    const char* k = first_present(keys);
    if (!k) return dflt;
    const json& v = *find(k);
    if (!v.is_number() || !within(l, v.get<double>())) {
      issues.add_got(at(k), limit_text(l), v);
      return dflt;
    }
    return v.get<double>();
  }
  bool boolean(const char* key, bool dflt) {
    const json* v = find(key);
    if (!v) return dflt;
    if (!v->is_boolean()) { issues.add_got(at(key), "true or false", *v); return dflt; }
    return v->get<bool>();
  }
  std::string string(std::initializer_list<const char*> keys, const std::string& dflt, const std::string& expected) {
    const char* k = first_present(keys);
    if (!k) return dflt;
    if (!find(k)->is_string()) { issues.add_got(at(k), expected, *find(k)); return dflt; }
    return find(k)->get<std::string>();
  }
  void warn(const std::string& key, const json& value, const std::string& consequence) {
    issues.warn(file + ": " + key + " (" + json_brief(value) + ") is not modelled: " + consequence);
  }
};

// hidden_act / activation_function -> gelu (GPT-style) or swiglu; gated gelu (Gemma's GeGLU) is costed as swiglu.
// Absent or null, it is the family's default in its config class: silu for Llama, Mistral, Mixtral, Qwen2,
// Qwen-MoE and DeepSeek; gelu otherwise (GPT-2's gelu_new).
void read_activation(HfReader& r, const std::string& model_type, Transformer& m) {
  static const std::set<std::string> silu_family = {"llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "deepseek_v2", "deepseek_v3"};
  const char* key = r.first_present({"hidden_act", "hidden_activation", "activation_function"});
  std::string act = r.string({"hidden_act", "hidden_activation", "activation_function"},
                             silu_family.count(model_type) ? "silu" : "gelu", "a string such as \"gelu\" or \"silu\"");
  if (act == "silu" || act == "swish" || act == "swiglu") {
    m.activation = Activation::swiglu;
  } else if (act.rfind("gelu", 0) == 0) {
    m.activation = Activation::gelu;
    if (model_type.rfind("gemma", 0) == 0) {  // Gemma's MLP is gated: gate and up projections, no biases
      m.activation = Activation::swiglu;
      r.warn(key ? key : "hidden_act", act, "gemma's gated gelu (GeGLU) is costed as swiglu (same GEMM shapes)");
    }
  } else {
    r.issues.add(r.at(key ? key : "hidden_act"), "expected a gelu variant or silu, got \"" + act + "\"");
  }
}

// Experts: Mixtral num_local_experts, Qwen-MoE num_experts, DeepSeek n_routed_experts; the layout from
// decoder_sparse_step (Qwen: layer l sparse when (l + 1) % step == 0, trainplan's moe.every) or
// first_k_dense_replace / moe_layer_freq (DeepSeek: l >= k and l % freq == 0).
void read_moe(HfReader& r, Transformer& m) {
  long long experts = r.integer({"num_local_experts", "num_experts", "n_routed_experts"}, 0, false, kHfExperts);
  if (experts < 2) return;  // 0 or 1 expert: a dense model
  Moe& moe = m.moe;
  moe.experts = experts;
  moe.top_k = (int)r.integer({"num_experts_per_tok"}, 1, true, lim::top_k);
  if (moe.top_k > experts) {
    r.issues.add(r.at("num_experts_per_tok"), "must not exceed the experts (" + std::to_string(experts) + "), got " +
                                                  std::to_string(moe.top_k));
    moe.top_k = 1;
  }
  moe.ffn_hidden = r.integer({"moe_intermediate_size"}, m.ffn_hidden, false, lim::moe_ffn_hidden);
  long long shared = r.integer({"n_shared_experts"}, 0, false, kHfSharedExperts);
  moe.shared_ffn_hidden = shared * moe.ffn_hidden;
  if (r.find("shared_expert_intermediate_size"))
    moe.shared_ffn_hidden = r.integer({"shared_expert_intermediate_size"}, 0, false, lim::shared_ffn_hidden);
  // The load-balancing loss weight: Mixtral / Qwen-MoE router_aux_loss_coef, DeepSeek aux_loss_alpha
  // (absent: trainplan's default). It changes no cost; `run` trains with it and `export` passes it on.
  moe.aux_loss_coeff = r.number({"router_aux_loss_coef", "aux_loss_alpha"}, moe.aux_loss_coeff, lim::aux_loss_coeff);
  moe.every = (int)r.integer({"decoder_sparse_step"}, 1, false, lim::moe_every);
  if (const json* only = r.find("mlp_only_layers")) {
    if (!only->is_array()) r.issues.add_got(r.at("mlp_only_layers"), "an array of layer indices", *only);
    else if (!only->empty()) r.warn("mlp_only_layers", *only, "those layers are costed as MoE layers");
  }
  long long first_dense = r.integer({"first_k_dense_replace"}, 0, false, kHfDenseLayers);
  long long freq = r.integer({"moe_layer_freq"}, 1, false, lim::moe_every);
  if (r.find("moe_layer_freq")) moe.every = (int)freq;
  if (first_dense > 0)
    r.warn("first_k_dense_replace", first_dense, "moe.every cannot express leading dense layers: they are costed as "
                                                     "MoE layers (" + std::to_string(m.layers / moe.every) +
                                                     " MoE layers with moe.every " + std::to_string(moe.every) + ")");
  else if (freq > 1 && m.layers % freq != 0)
    r.warn("moe_layer_freq", freq, "MoE layers at l % " + std::to_string(freq) + " == 0 are costed at (l + 1) % " +
                                       std::to_string(freq) + " == 0 (moe.every), one MoE layer fewer");
  if (moe.every > m.layers) {
    r.issues.add(r.at(r.find("moe_layer_freq") ? "moe_layer_freq" : "decoder_sparse_step"),
                 "must not exceed the model's layers (" + std::to_string(m.layers) + "), got " + std::to_string(moe.every));
    moe.every = 1;
  }
}

// Biases of SwiGLU models: Llama attention_bias (q, k, v, o) and mlp_bias, an explicit qkv_bias, Qwen2's q, k, v.
void read_biases(HfReader& r, const std::string& model_type, Transformer& m) {
  bool qwen2 = model_type == "qwen2" || model_type == "qwen2_moe";
  bool attention_bias = r.boolean("attention_bias", false);
  m.qkv_bias = r.boolean("qkv_bias", attention_bias || (qwen2 && !r.find("attention_bias")));
  m.proj_bias = attention_bias;
  m.mlp_bias = r.boolean("mlp_bias", false);
}

// What a framework needs to build the same model but costs nothing: the rotary base, the norm epsilon and Llama
// 3.1's rope scaling (rope_type "llama3"); another scaling type (YaRN, linear, ...) is recorded as factor -1, which
// export refuses (no target states it here), with no warning, since it changes no cost.
void read_export_fields(HfReader& r, Transformer& m) {
  m.rope_theta = r.number({"rope_theta"}, 0, lim::rope_theta);
  m.norm_eps = r.number({"rms_norm_eps", "layer_norm_epsilon", "layer_norm_eps"}, 0, lim::norm_eps);
  const json* rs = r.find("rope_scaling");
  if (!rs) return;
  if (!rs->is_object()) { r.issues.add_got(r.at("rope_scaling"), "an object or null", *rs); return; }
  HfReader sub{*rs, r.file, r.path + ".rope_scaling", r.issues};
  std::string type = sub.string({"rope_type", "type"}, "", "a string");
  if (type != "llama3") {
    m.rope_scaling_factor = -1;
    return;
  }
  m.rope_scaling_factor = sub.number({"factor"}, 8, lim::rope_factor);
  m.rope_low_freq_factor = sub.number({"low_freq_factor"}, 1, lim::rope_freq_factor);
  m.rope_high_freq_factor = sub.number({"high_freq_factor"}, 4, lim::rope_freq_factor);
  m.rope_original_max_position = sub.integer({"original_max_position_embeddings"}, 8192, false, lim::rope_original);
}

// Cost-changing keys trainplan does not model: one warning each.
void warn_unmodelled(HfReader& r, Transformer& m) {
  for (const char* k : {"q_lora_rank", "kv_lora_rank"})
    if (const json* v = r.find(k))
      r.warn(k, *v, "multi-head latent attention is costed as standard attention with head_dim " +
                        std::to_string(m.head_dim()) + " (no low-rank projections)");
  if (const json* v = r.find("num_nextn_predict_layers"); v && !(v->is_number() && v->get<double>() == 0))
    r.warn("num_nextn_predict_layers", *v, "multi-token prediction layers are not costed");
  bool sliding = r.boolean("use_sliding_window", true);
  if (r.find("sliding_window") && sliding) {
    m.sliding_window = r.integer({"sliding_window"}, 0, false, lim::sliding_window);
    m.source = r.file;
  }
}

}  // namespace

Transformer read_hf_config(const std::string& file, const std::string& path, Issues& issues) {
  Transformer m;
  size_t before = issues.count();
  json j = parse_json_file(file, path, issues);
  if (issues.count() != before) return m;
  if (!j.is_object()) { issues.add_got(path, "a Hugging Face config object", j); return m; }
  HfReader r{j, file, path, issues};
  std::string model_type = r.string({"model_type"}, "", "a string");
  bool gpt2 = r.find("n_embd") != nullptr;
  m.name = std::filesystem::path(file).parent_path().filename().string();
  if (m.name.empty()) m.name = "hf-config";
  m.hidden = r.integer({"hidden_size", "n_embd"}, 1, true, lim::hidden);
  m.layers = r.integer({"num_hidden_layers", "n_layer"}, 1, true, lim::layers);
  m.heads = r.integer({"num_attention_heads", "n_head"}, 1, true, lim::heads);
  m.kv_heads = r.integer({"num_key_value_heads"}, m.heads, false, lim::kv_heads);
  m.attn_head_dim = r.integer({"head_dim"}, 0, false, lim::head_dim);
  m.ffn_hidden = r.integer({"intermediate_size", "n_inner"}, 4 * m.hidden, false, lim::ffn_hidden);
  m.vocab = r.integer({"vocab_size"}, 1, true, lim::vocab);
  m.seq_len = r.integer({"max_position_embeddings", "n_positions"}, 2048, false, lim::model_seq_len);
  read_activation(r, model_type, m);
  // PretrainedConfig defaults to tied embeddings; these families' config classes default to untied.
  static const std::set<std::string> untied = {"llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "deepseek_v2", "deepseek_v3"};
  m.tied_embeddings = r.boolean("tie_word_embeddings", gpt2 || !untied.count(model_type));
  m.dropout = m.activation == Activation::gelu;
  read_biases(r, model_type, m);
  read_moe(r, m);  // after an error its result is discarded; it still reports its own fields' problems
  warn_unmodelled(r, m);
  read_export_fields(r, m);
  if (issues.count() == before) check_transformer_shape(m, path, issues);
  return m;
}

}  // namespace tp
