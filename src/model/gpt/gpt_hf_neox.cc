#include "model/gpt/gpt_hf_neox.h"

#include <fmt/format.h>

#include "core/error.h"
#include "model/config_json.h"
#include "model/gpt/gpt_config.h"
#include "model/gpt/gpt_hf_llama.h"
#include "model/gpt/gpt_variants.h"

namespace weft {

bool hf_neox_compatible(const ModelConfig& c) {
  const BlockOptions& b = c.block;
  return b.position == PositionKind::kRope && b.rope.scaling == "none" && b.norm == NormKind::kLayerNorm && b.bias &&
         (b.mlp == MlpKind::kGelu || b.mlp == MlpKind::kGeluExact) && c.kv_heads() == c.n_head;
}

nlohmann::ordered_json neox_config_json(const ModelConfig& c) {
  const RopeOptions& r = c.block.rope;
  nlohmann::ordered_json j;
  j["architectures"] = {"GPTNeoXForCausalLM"};
  j["model_type"] = "gpt_neox";
  j["vocab_size"] = c.vocab_size;
  j["hidden_size"] = c.n_embd;
  j["num_hidden_layers"] = c.n_layer;
  j["num_attention_heads"] = c.n_head;
  j["intermediate_size"] = c.ffn;
  // GELU's tanh form (NeoX-20B's gelu_fast computes the same), or the exact one (Pythia's "gelu").
  j["hidden_act"] = c.block.mlp == MlpKind::kGeluExact ? "gelu" : "gelu_new";
  j["max_position_embeddings"] = c.n_ctx;
  j["layer_norm_eps"] = float_for_json(c.ln_eps);
  j["use_parallel_residual"] = c.block.parallel_residual;
  j["rotary_pct"] = float_for_json(r.fraction);
  j["rotary_emb_base"] = float_for_json(r.base);
  j["rope_parameters"] = {{"rope_type", "default"},
                          {"rope_theta", float_for_json(r.base)},
                          {"partial_rotary_factor", float_for_json(r.fraction)}};
  j["attention_bias"] = true;
  j["attention_dropout"] = 0.0;
  j["hidden_dropout"] = 0.0;
  add_hf_decoder_keys(j, c);
  return j;
}

namespace {

// rope_parameters (transformers 5) or rotary_pct / rotary_emb_base (4): the default rope only.
void read_neox_rope(const nlohmann::json& j, RopeOptions& r, const std::string& source) {
  r.fraction = json_positive(j, "rotary_pct", 0.25f, source);
  r.base = json_positive(j, "rotary_emb_base", r.base, source);
  if (!j.contains("rope_parameters") || j.at("rope_parameters").is_null()) return;
  const nlohmann::json& p = j.at("rope_parameters");
  if (!p.is_object()) throw_input("{}: key 'rope_parameters' is {}, expected an object", source, p.dump());
  if (p.contains("rope_type") && p.at("rope_type") != "default") {
    throw_input("{}: rope_type {}: weft reads GPT-NeoX files with the default rotary frequencies only", source,
                p.at("rope_type").dump());
  }
  r.fraction = json_positive(p, "partial_rotary_factor", r.fraction, source);
  r.base = json_positive(p, "rope_theta", r.base, source);
}

}  // namespace

ModelConfig neox_from_config_json(const nlohmann::json& j, const std::string& source) {
  const int n_layer = json_int(j, "num_hidden_layers", source, kMaxJsonLayers);
  const int n_head = json_int(j, "num_attention_heads", source, kMaxJsonHeads);
  const int C = json_int(j, "hidden_size", source, kMaxJsonWidth);
  const int ffn = json_int(j, "intermediate_size", source, kMaxJsonWidth);
  const int vocab = json_int(j, "vocab_size", source, kMaxJsonVocab);
  const int ctx = j.contains("max_position_embeddings") ? json_int(j, "max_position_embeddings", source, kMaxJsonContext) : 2048;
  const std::string act = j.contains("hidden_act") && j.at("hidden_act").is_string() ? j.at("hidden_act").get<std::string>() : "gelu";
  const bool exact = act == "gelu";  // Pythia's: the erf GELU
  if (!exact && act != "gelu_new" && act != "gelu_fast" && act != "gelu_pytorch_tanh") {
    throw_input("{}: hidden_act is \"{}\"; weft's GELUs are the exact one (\"gelu\") and the tanh form (\"gelu_new\", "
                "\"gelu_fast\", \"gelu_pytorch_tanh\"): refused rather than run as another model", source, act);
  }
  if (!json_bool(j, "attention_bias", true, source)) {
    throw_input("{}: attention_bias is false; weft's bias setting covers the attention and the MLP (GPT-NeoX's MLP "
                "always has biases)", source);
  }
  return hf_decoder_config(j, source, "gpt-neox", {n_layer, n_head, C, ctx, vocab, ffn}, [&](ModelConfig& c) {
    BlockOptions& b = c.block;
    b.position = PositionKind::kRope;
    b.mlp = exact ? MlpKind::kGeluExact : MlpKind::kGelu;
    b.parallel_residual = json_bool(j, "use_parallel_residual", true, source);
    b.tie_embeddings = json_bool(j, "tie_word_embeddings", false, source);
    read_neox_rope(j, b.rope, source);
    c.ln_eps = json_positive(j, "layer_norm_eps", 1e-5f, source);
  });
}

ForeignNames neox_foreign_names(const ModelConfig& c) {
  const int64_t C = c.n_embd, F = c.ffn, V = c.vocab_size, hd = c.head_dim();
  ForeignNames f;
  f.tied_head = c.block.tie_embeddings ? "embed_out.weight" : "";
  f.ignored_suffixes = {".attention.bias", ".attention.masked_bias", ".attention.rotary_emb.inv_freq"};
  auto& p = f.pieces;
  p["transformer.wte.weight"] = {{"gpt_neox.embed_in.weight", {V, C}}};
  for (int l = 0; l < c.n_layer; ++l) {
    const std::string w = fmt::format("transformer.h.{}.", l), h = fmt::format("gpt_neox.layers.{}.", l);
    p[w + "ln_1.weight"] = {{h + "input_layernorm.weight", {C}}};
    p[w + "ln_1.bias"] = {{h + "input_layernorm.bias", {C}}};
    // weft's q | k | v columns, head by head: rows (h * 3 + part) * hd of query_key_value.
    auto& qkvw = p[w + "attn.c_attn.weight"];
    auto& qkvb = p[w + "attn.c_attn.bias"];
    for (int part = 0; part < 3; ++part) {
      for (int64_t head = 0; head < c.n_head; ++head) {
        const int64_t first = (head * 3 + part) * hd;
        qkvw.push_back({h + "attention.query_key_value.weight", {3 * C, C}, true, first, hd});
        qkvb.push_back({h + "attention.query_key_value.bias", {3 * C}, false, first, hd});
      }
    }
    p[w + "attn.c_proj.weight"] = {{h + "attention.dense.weight", {C, C}, true}};
    p[w + "attn.c_proj.bias"] = {{h + "attention.dense.bias", {C}}};
    p[w + "ln_2.weight"] = {{h + "post_attention_layernorm.weight", {C}}};
    p[w + "ln_2.bias"] = {{h + "post_attention_layernorm.bias", {C}}};
    p[w + "mlp.c_fc.weight"] = {{h + "mlp.dense_h_to_4h.weight", {F, C}, true}};
    p[w + "mlp.c_fc.bias"] = {{h + "mlp.dense_h_to_4h.bias", {F}}};
    p[w + "mlp.c_proj.weight"] = {{h + "mlp.dense_4h_to_h.weight", {C, F}, true}};
    p[w + "mlp.c_proj.bias"] = {{h + "mlp.dense_4h_to_h.bias", {C}}};
  }
  p["transformer.ln_f.weight"] = {{"gpt_neox.final_layer_norm.weight", {C}}};
  p["transformer.ln_f.bias"] = {{"gpt_neox.final_layer_norm.bias", {C}}};
  p["lm_head.weight"] = {{"embed_out.weight", {V, C}}};
  return f;
}

}  // namespace weft
