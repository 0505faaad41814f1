#include "model/gpt/gpt_hf_llama.h"

#include <fmt/format.h>

#include <cmath>

#include "core/error.h"
#include "model/config_json.h"
#include "model/gpt/gpt_config.h"
#include "model/gpt/gpt_variants.h"

namespace weft {

bool hf_llama_compatible(const ModelConfig& c) {
  const BlockOptions& b = c.block;
  return b.position == PositionKind::kRope && b.rope.fraction == 1.0f && b.norm == NormKind::kRmsNorm &&
         b.mlp == MlpKind::kSwiglu;
}

nlohmann::ordered_json llama_config_json(const ModelConfig& c) {
  const RopeOptions& r = c.block.rope;
  nlohmann::ordered_json j;
  j["architectures"] = {"LlamaForCausalLM"};
  j["model_type"] = "llama";
  j["vocab_size"] = c.vocab_size;
  j["hidden_size"] = c.n_embd;
  j["intermediate_size"] = c.ffn;
  j["num_hidden_layers"] = c.n_layer;
  j["num_attention_heads"] = c.n_head;
  j["num_key_value_heads"] = c.kv_heads();
  j["head_dim"] = c.head_dim();
  j["max_position_embeddings"] = c.n_ctx;
  j["hidden_act"] = "silu";
  j["rms_norm_eps"] = float_for_json(c.ln_eps);
  j["rope_theta"] = float_for_json(r.base);
  if (r.scaling == "none") {
    j["rope_scaling"] = nullptr;
  } else if (r.scaling == "linear") {
    j["rope_scaling"] = {{"rope_type", "linear"}, {"factor", float_for_json(r.factor)}};
  } else {
    j["rope_scaling"] = {{"rope_type", "llama3"},
                         {"factor", float_for_json(r.factor)},
                         {"low_freq_factor", float_for_json(r.low_freq_factor)},
                         {"high_freq_factor", float_for_json(r.high_freq_factor)},
                         {"original_max_position_embeddings", r.original_context}};
  }
  j["attention_bias"] = c.block.bias;
  j["mlp_bias"] = c.block.bias;
  j["attention_dropout"] = 0.0;
  j["pretraining_tp"] = 1;
  add_hf_decoder_keys(j, c);
  return j;
}

namespace {

// rope_scaling (or transformers 5's rope_parameters): none, linear or llama3.
void read_rope(const nlohmann::json& j, RopeOptions& r, const std::string& source) {
  const nlohmann::json* s = nullptr;
  if (j.contains("rope_parameters") && j.at("rope_parameters").is_object()) s = &j.at("rope_parameters");
  if (j.contains("rope_scaling") && !j.at("rope_scaling").is_null()) s = &j.at("rope_scaling");
  if (s != nullptr && !s->is_object()) throw_input("{}: key 'rope_scaling' is {}, expected an object", source, s->dump());
  r.base = json_positive(j, "rope_theta", s != nullptr ? json_positive(*s, "rope_theta", r.base, source) : r.base, source);
  if (s == nullptr) return;
  const char* key = s->contains("rope_type") ? "rope_type" : s->contains("type") ? "type" : nullptr;
  if (key != nullptr && !s->at(key).is_string()) {
    throw_input("{}: key 'rope_scaling.{}' is {}, expected a string", source, key, s->at(key).dump());
  }
  const std::string type = key != nullptr ? s->at(key).get<std::string>() : "default";
  if (type == "default") return;
  if (type != "linear" && type != "llama3") {
    throw_input("{}: rope_type '{}' is not implemented (weft: default, linear, llama3)", source, type);
  }
  r.scaling = type;
  r.factor = json_positive(*s, "factor", 1.0f, source);
  if (type == "llama3") {
    r.low_freq_factor = json_positive(*s, "low_freq_factor", 1.0f, source);
    r.high_freq_factor = json_positive(*s, "high_freq_factor", 4.0f, source);
    r.original_context = json_int(*s, "original_max_position_embeddings", source, kMaxJsonContext);
  }
}

}  // namespace

ModelConfig llama_from_config_json(const nlohmann::json& j, const std::string& source) {
  const int n_layer = json_int(j, "num_hidden_layers", source, kMaxJsonLayers);
  const int n_head = json_int(j, "num_attention_heads", source, kMaxJsonHeads);
  const int C = json_int(j, "hidden_size", source, kMaxJsonWidth);
  const int ffn = json_int(j, "intermediate_size", source, kMaxJsonWidth);
  const int vocab = json_int(j, "vocab_size", source, kMaxJsonVocab);
  const int ctx = j.contains("max_position_embeddings") ? json_int(j, "max_position_embeddings", source, kMaxJsonContext) : 2048;
  const int kv = j.contains("num_key_value_heads") && !j.at("num_key_value_heads").is_null()
                     ? json_int(j, "num_key_value_heads", source, kMaxJsonHeads)
                     : n_head;
  if (j.contains("hidden_act") && j.at("hidden_act") != "silu") {
    throw_input("{}: hidden_act is {}, weft's SwiGLU MLP implements \"silu\"", source, j.at("hidden_act").dump());
  }
  if (j.contains("head_dim") && !j.at("head_dim").is_null() && n_head > 0 &&
      json_int(j, "head_dim", source, kMaxJsonWidth) * n_head != C) {
    throw_input("{}: head_dim {} x {} heads is not hidden_size {}: weft's heads split the hidden size", source,
                j.at("head_dim").dump(), n_head, C);
  }
  const bool attention_bias = json_bool(j, "attention_bias", false, source);
  const bool mlp_bias = json_bool(j, "mlp_bias", false, source);
  if (attention_bias != mlp_bias) {
    throw_input("{}: attention_bias {} and mlp_bias {} differ: weft's bias setting covers both", source, attention_bias,
                mlp_bias);
  }
  if (j.contains("pretraining_tp") && !j.at("pretraining_tp").is_null() && j.at("pretraining_tp") != 1) {
    throw_input("{}: pretraining_tp is {}, weft computes the products whole (1)", source, j.at("pretraining_tp").dump());
  }
  return hf_decoder_config(j, source, "llama", {n_layer, n_head, C, ctx, vocab, ffn}, [&](ModelConfig& c) {
    BlockOptions& b = c.block;
    b.position = PositionKind::kRope;
    b.norm = NormKind::kRmsNorm;
    b.mlp = MlpKind::kSwiglu;
    b.bias = attention_bias;
    b.n_kv_head = kv == n_head ? 0 : kv;
    b.tie_embeddings = json_bool(j, "tie_word_embeddings", true, source);
    read_rope(j, b.rope, source);
    c.ln_eps = json_positive(j, "rms_norm_eps", 1e-6f, source);
  });
}

void add_hf_decoder_keys(nlohmann::ordered_json& j, const ModelConfig& c) {
  j["tie_word_embeddings"] = c.block.tie_embeddings;
  j["initializer_range"] = float_for_json(c.init_std);
  j["bos_token_id"] = nullptr;
  j["eos_token_id"] = nullptr;
  j["torch_dtype"] = "float32";
  j["weft"] = {{"name", c.name}, {"padded_vocab", c.padded_vocab}, {"block", block_options_json(c.block)}};
}

ModelConfig hf_decoder_config(const nlohmann::json& j, const std::string& source, const char* default_name,
                              const HfShape& s, const std::function<void(ModelConfig&)>& fill) {
  std::string name = default_name;
  int padded = 0;
  if (j.contains("weft") && j.at("weft").is_object()) {
    const auto& w = j.at("weft");
    if (w.contains("name") && w.at("name").is_string()) name = w.at("name").get<std::string>();
    if (w.contains("padded_vocab")) padded = json_int(w, "padded_vocab", source + ": weft", kMaxJsonVocab + 128);
  }
  ModelConfig c;
  try {
    c = make_model_config(name, s.n_layer, s.n_head, s.C, s.ctx, s.vocab, s.ffn);
    if (padded != 0) c.padded_vocab = padded;
    fill(c);
    c.init_std = json_positive(j, "initializer_range", c.init_std, source);
    c.validate();
  } catch (const InputError& e) {
    const std::string what = e.what();
    if (what.rfind(source, 0) == 0) throw;
    throw_input("{}: {}", source, what);
  }
  return c;
}

ForeignNames llama_foreign_names(const ModelConfig& c) {
  const int64_t C = c.n_embd, F = c.ffn, V = c.vocab_size, KV = int64_t{c.kv_heads()} * c.head_dim();
  const bool bias = c.block.bias;
  ForeignNames f;
  f.tied_head = c.block.tie_embeddings ? "lm_head.weight" : "";
  f.ignored_suffixes = {".rotary_emb.inv_freq"};
  auto& p = f.pieces;
  p["transformer.wte.weight"] = {{"model.embed_tokens.weight", {V, C}}};
  for (int l = 0; l < c.n_layer; ++l) {
    const std::string w = fmt::format("transformer.h.{}.", l), h = fmt::format("model.layers.{}.", l);
    p[w + "ln_1.weight"] = {{h + "input_layernorm.weight", {C}}};
    p[w + "attn.c_attn.weight"] = {{h + "self_attn.q_proj.weight", {C, C}, true},
                                   {h + "self_attn.k_proj.weight", {KV, C}, true},
                                   {h + "self_attn.v_proj.weight", {KV, C}, true}};
    p[w + "attn.c_proj.weight"] = {{h + "self_attn.o_proj.weight", {C, C}, true}};
    p[w + "ln_2.weight"] = {{h + "post_attention_layernorm.weight", {C}}};
    p[w + "mlp.c_fc.weight"] = {{h + "mlp.gate_proj.weight", {F, C}, true}, {h + "mlp.up_proj.weight", {F, C}, true}};
    p[w + "mlp.c_proj.weight"] = {{h + "mlp.down_proj.weight", {C, F}, true}};
    if (bias) {
      p[w + "attn.c_attn.bias"] = {{h + "self_attn.q_proj.bias", {C}}, {h + "self_attn.k_proj.bias", {KV}},
                                   {h + "self_attn.v_proj.bias", {KV}}};
      p[w + "attn.c_proj.bias"] = {{h + "self_attn.o_proj.bias", {C}}};
      p[w + "mlp.c_fc.bias"] = {{h + "mlp.gate_proj.bias", {F}}, {h + "mlp.up_proj.bias", {F}}};
      p[w + "mlp.c_proj.bias"] = {{h + "mlp.down_proj.bias", {C}}};
    }
  }
  p["transformer.ln_f.weight"] = {{"model.norm.weight", {C}}};
  p["lm_head.weight"] = {{"lm_head.weight", {V, C}}};
  return f;
}

}  // namespace weft
