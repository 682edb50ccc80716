// transformer: model JSON reading (inline, catalog, or Hugging Face config via hf_config.cpp) and writing.
// See transformer.hpp. Invariant: transformer_to_json writes a key that has a default only when it differs from
// that default, so older results keep their exact text and every written model reads back as itself.
#include "transformer.hpp"

#include <filesystem>

#include "catalog.hpp"

namespace tp {

void check_transformer_shape(Transformer& m, const std::string& path, Issues& issues) {
  if (m.heads > 0 && m.attn_head_dim == 0 && m.hidden % m.heads != 0)
    issues.add(path + ".heads", "must divide hidden (" + std::to_string(m.hidden) + ") unless head_dim is given, got " +
                                    std::to_string(m.heads));
  // An explicit head_dim equal to the default is the default: one representation per architecture.
  if (m.heads > 0 && m.hidden % m.heads == 0 && m.attn_head_dim == m.hidden / m.heads) m.attn_head_dim = 0;
  if (m.moe.experts > 0 && m.moe.ffn_hidden == m.ffn_hidden) m.moe.ffn_hidden = 0;
  if (m.kv_heads > 0 && m.heads % m.kv_heads != 0)
    issues.add(path + ".kv_heads", "must divide heads (" + std::to_string(m.heads) + "), got " + std::to_string(m.kv_heads));
}

// model.moe = {experts, top_k, capacity_factor, every, ffn_hidden, shared_ffn_hidden, aux_loss_coeff}.
static Moe read_moe(const json& v, const std::string& path, long long layers, Issues& issues) {
  Moe moe;
  Reader r(v, path, issues);
  if (!r.ok()) return moe;
  size_t before = issues.count();
  moe.experts = r.req_int("experts", lim::experts);
  moe.top_k = (int)r.opt_int("top_k", 1, lim::top_k);
  moe.capacity_factor = r.opt_num("capacity_factor", 1.0, lim::capacity_factor);
  moe.every = (int)r.opt_int("every", 1, lim::moe_every);
  moe.ffn_hidden = r.opt_int("ffn_hidden", 0, lim::moe_ffn_hidden);
  moe.shared_ffn_hidden = r.opt_int("shared_ffn_hidden", 0, lim::shared_ffn_hidden);
  moe.aux_loss_coeff = r.opt_num("aux_loss_coeff", 0.01, lim::aux_loss_coeff);
  r.finish({"experts", "top_k", "capacity_factor", "every", "ffn_hidden", "shared_ffn_hidden", "aux_loss_coeff"});
  if (issues.count() != before) return moe;
  if (moe.top_k > moe.experts)
    issues.add(r.at("top_k"), "must not exceed experts (" + std::to_string(moe.experts) + "), got " + std::to_string(moe.top_k));
  if (layers > 0 && moe.every > layers)
    issues.add(r.at("every"), "must not exceed the model's layers (" + std::to_string(layers) + "), got " + std::to_string(moe.every));
  return moe;
}

// model.rope_scaling = {factor, low_freq_factor, high_freq_factor, original_max_position} (Llama 3.1's "llama3").
static void read_rope_scaling(const json& v, const std::string& path, Transformer& m, Issues& issues) {
  Reader r(v, path, issues);
  if (!r.ok()) return;
  m.rope_scaling_factor = r.req_num("factor", lim::rope_factor);
  m.rope_low_freq_factor = r.opt_num("low_freq_factor", 1, lim::rope_freq_factor);
  m.rope_high_freq_factor = r.opt_num("high_freq_factor", 4, lim::rope_freq_factor);
  m.rope_original_max_position = r.opt_int("original_max_position", 8192, lim::rope_original);
  r.finish({"factor", "low_freq_factor", "high_freq_factor", "original_max_position"});
}

static Transformer read_inline(const json& v, const std::string& path, Issues& issues) {
  Transformer m;
  size_t before = issues.count();
  Reader r(v, path, issues);
  if (!r.ok()) return m;
  m.name = r.opt_str("name", "");
  r.opt_str("about", "");
  m.layers = r.req_int("layers", lim::layers);
  m.hidden = r.req_int("hidden", lim::hidden);
  m.heads = r.req_int("heads", lim::heads);
  m.kv_heads = r.opt_int("kv_heads", m.heads, lim::kv_heads);
  m.ffn_hidden = r.opt_int("ffn_hidden", 4 * m.hidden, lim::ffn_hidden);
  m.vocab = r.req_int("vocab", lim::vocab);
  m.seq_len = r.req_int("seq_len", lim::model_seq_len);
  m.activation = (Activation)r.opt_enum("activation", {"gelu", "swiglu"}, 0);
  m.tied_embeddings = r.opt_bool("tied_embeddings", true);
  m.dropout = r.opt_bool("dropout", m.activation == Activation::gelu);
  if (const json* moe = r.get("moe")) m.moe = read_moe(*moe, r.at("moe"), m.layers, issues);
  m.attn_head_dim = r.opt_int("head_dim", 0, lim::head_dim);
  // GPT-style (gelu) models always have every bias: the flags may only restate that.
  for (auto [key, flag] : {std::pair{"qkv_bias", &m.qkv_bias}, {"proj_bias", &m.proj_bias}, {"mlp_bias", &m.mlp_bias}}) {
    size_t before_flag = issues.count();
    *flag = r.opt_bool(key, false);
    if (m.activation == Activation::gelu && r.has(key) && !*flag && issues.count() == before_flag)
      issues.add(r.at(key), "GPT-style (gelu) models always have biases; remove this key or use swiglu");
  }
  m.sliding_window = r.opt_int("sliding_window", 0, lim::sliding_window);
  if (m.sliding_window > 0) m.source = path;
  m.rope_theta = r.opt_num("rope_theta", 0, lim::rope_theta);
  m.norm_eps = r.opt_num("norm_eps", 0, lim::norm_eps);
  if (const json* rs = r.get("rope_scaling")) read_rope_scaling(*rs, r.at("rope_scaling"), m, issues);
  r.finish({"name", "about", "layers", "hidden", "heads", "kv_heads", "ffn_hidden", "vocab", "seq_len", "activation",
            "tied_embeddings", "dropout", "moe", "head_dim", "qkv_bias", "proj_bias", "mlp_bias", "sliding_window",
            "rope_theta", "norm_eps", "rope_scaling"});
  // shapes of defaulted fields would mislead
  if (issues.count() == before) check_transformer_shape(m, path, issues);
  return m;
}

Transformer read_transformer(const json& v, const std::string& path, const std::string& base_dir, Issues& issues) {
  if (v.is_string()) {
    const json* e = catalog_find("models", v.get<std::string>());
    if (!e) {
      add_unknown_catalog_name(issues, path, "models", "model", ", an inline model object, or {\"hf_config\": path}", v);
      return Transformer{};
    }
    Transformer m = read_inline(*e, "catalog models." + v.get<std::string>(), issues);
    m.name = v.get<std::string>();
    return m;
  }
  if (v.is_object() && v.contains("hf_config")) {
    Reader r(v, path, issues);
    size_t before = issues.count();
    std::string f = r.req_str("hf_config");
    r.finish({"hf_config"});
    if (f.empty()) {
      if (issues.count() == before) issues.add(path + ".hf_config", "expected a path to a Hugging Face config.json, got \"\"");
      return Transformer{};
    }
    if (f.find('\0') != std::string::npos) {  // "\u0000": the file system would read the path only up to there
      issues.add(path + ".hf_config", "expected a path to a Hugging Face config.json, got a path with a NUL character (\\u0000)");
      return Transformer{};
    }
    std::filesystem::path p(f);
    if (p.is_relative()) p = std::filesystem::path(base_dir) / p;
    // Only regular files: a directory or a device (/dev/zero, a FIFO) would give a useless message or never end.
    std::error_code ec;
    auto st = std::filesystem::status(p, ec);
    if (std::filesystem::exists(st) && !std::filesystem::is_regular_file(st)) {
      issues.add(path + ".hf_config", "expected a path to a Hugging Face config.json file, got \"" + p.string() +
                                          "\", which is not a regular file");
      return Transformer{};
    }
    return read_hf_config(p.string(), path + ".hf_config", issues);
  }
  return read_inline(v, path, issues);
}

json transformer_to_json(const Transformer& m) {
  json j = {{"name", m.name},       {"layers", m.layers},   {"hidden", m.hidden},
          {"heads", m.heads},     {"kv_heads", m.kv_heads}, {"ffn_hidden", m.ffn_hidden},
          {"vocab", m.vocab},     {"seq_len", m.seq_len},
          {"activation", m.activation == Activation::gelu ? "gelu" : "swiglu"},
          {"tied_embeddings", m.tied_embeddings}};
  if (m.dropout != (m.activation == Activation::gelu)) j["dropout"] = m.dropout;  // only when not the default
  if (m.moe.experts > 0) {
    j["moe"] = {{"experts", m.moe.experts}, {"top_k", m.moe.top_k}, {"capacity_factor", m.moe.capacity_factor},
                {"every", m.moe.every}};
    if (m.moe.ffn_hidden > 0 && m.moe.ffn_hidden != m.ffn_hidden) j["moe"]["ffn_hidden"] = m.moe.ffn_hidden;
    if (m.moe.shared_ffn_hidden > 0) j["moe"]["shared_ffn_hidden"] = m.moe.shared_ffn_hidden;
    if (m.moe.aux_loss_coeff != 0.01) j["moe"]["aux_loss_coeff"] = m.moe.aux_loss_coeff;  // only when not the default
  }
  if (m.attn_head_dim > 0) j["head_dim"] = m.attn_head_dim;
  if (m.activation == Activation::swiglu) {
    if (m.qkv_bias) j["qkv_bias"] = true;
    if (m.proj_bias) j["proj_bias"] = true;
    if (m.mlp_bias) j["mlp_bias"] = true;
  }
  if (m.sliding_window > 0) j["sliding_window"] = m.sliding_window;
  if (m.rope_theta > 0) j["rope_theta"] = m.rope_theta;
  if (m.norm_eps > 0) j["norm_eps"] = m.norm_eps;
  if (m.rope_scaling_factor > 0)
    j["rope_scaling"] = {{"factor", m.rope_scaling_factor}, {"low_freq_factor", m.rope_low_freq_factor},
                         {"high_freq_factor", m.rope_high_freq_factor},
                         {"original_max_position", m.rope_original_max_position}};
  return j;
}

}  // namespace tp
