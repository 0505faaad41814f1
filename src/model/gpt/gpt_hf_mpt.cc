#include "model/gpt/gpt_hf_mpt.h"

#include <fmt/format.h>

#include "core/error.h"
#include "model/config_json.h"
#include "model/gpt/gpt_config.h"
#include "model/gpt/gpt_hf_llama.h"
#include "model/gpt/gpt_variants.h"

namespace weft {

bool hf_mpt_compatible(const ModelConfig& c) {
  const BlockOptions& b = c.block;
  return b.position == PositionKind::kAlibi && b.norm == NormKind::kLayerNorm && !b.bias &&
         b.mlp == MlpKind::kGeluExact && c.ffn == 4 * c.n_embd && c.kv_heads() == c.n_head && b.tie_embeddings &&
         !b.parallel_residual;
}

nlohmann::ordered_json mpt_config_json(const ModelConfig& c) {
  nlohmann::ordered_json j;
  j["architectures"] = {"MptForCausalLM"};
  j["model_type"] = "mpt";
  j["d_model"] = c.n_embd;
  j["n_heads"] = c.n_head;
  j["n_layers"] = c.n_layer;
  j["expansion_ratio"] = 4;
  j["max_seq_len"] = c.n_ctx;
  j["vocab_size"] = c.vocab_size;
  j["layer_norm_epsilon"] = float_for_json(c.ln_eps);
  j["learned_pos_emb"] = false;
  j["no_bias"] = true;
  j["norm_type"] = "low_precision_layernorm";
  j["attn_config"] = {{"attn_type", "multihead_attention"}, {"attn_impl", "torch"}, {"alibi", true},
                      {"alibi_bias_max", 8},  {"qk_ln", false},         {"clip_qkv", nullptr},
                      {"softmax_scale", nullptr}, {"attn_pdrop", 0}};
  j["resid_pdrop"] = 0.0;
  j["emb_pdrop"] = 0.0;
  j["logit_scale"] = nullptr;
  add_hf_decoder_keys(j, c);
  return j;
}

namespace {

// attn_config: ALiBi (bias maximum 8), no QK LayerNorm, no clipping, the default scale.
void check_mpt_attention(const nlohmann::json& j, const std::string& source) {
  if (!j.contains("attn_config") || j.at("attn_config").is_null()) return;
  const nlohmann::json& a = j.at("attn_config");
  if (!a.is_object()) throw_input("{}: key 'attn_config' is {}, expected an object", source, a.dump());
  const std::string where = source + ": attn_config";
  if (!json_bool(a, "alibi", true, where)) {
    throw_input("{}: alibi is false; weft reads MPT files with ALiBi positions (transformers' MptModel applies "
                "them always)", where);
  }
  if (json_bool(a, "qk_ln", false, where)) throw_input("{}: qk_ln is true; weft has no QK LayerNorm", where);
  for (const char* key : {"clip_qkv", "softmax_scale"}) {
    if (a.contains(key) && !a.at(key).is_null()) {
      throw_input("{}: {} is {}; weft computes MPT's attention without it (null)", where, key, a.at(key).dump());
    }
  }
  if (a.contains("alibi_bias_max") && !(a.at("alibi_bias_max").is_number() && a.at("alibi_bias_max").get<double>() == 8.0)) {
    throw_input("{}: alibi_bias_max is {}; weft's ALiBi slopes are MPT's with 8", where, a.at("alibi_bias_max").dump());
  }
}

}  // namespace

ModelConfig mpt_from_config_json(const nlohmann::json& j, const std::string& source) {
  const int n_layer = json_int(j, "n_layers", source, kMaxJsonLayers);
  const int n_head = json_int(j, "n_heads", source, kMaxJsonHeads);
  const int C = json_int(j, "d_model", source, kMaxJsonWidth);
  const int vocab = json_int(j, "vocab_size", source, kMaxJsonVocab);
  const int ctx = j.contains("max_seq_len") ? json_int(j, "max_seq_len", source, kMaxJsonContext) : 2048;
  if (j.contains("expansion_ratio") && !(j.at("expansion_ratio").is_number() && j.at("expansion_ratio").get<double>() == 4.0)) {
    throw_input("{}: expansion_ratio is {}; transformers' MptMLP is 4 x d_model wide", source,
                j.at("expansion_ratio").dump());
  }
  if (!json_bool(j, "no_bias", true, source)) throw_input("{}: no_bias is false; MPT's layers have no biases", source);
  if (j.contains("logit_scale") && !j.at("logit_scale").is_null()) {
    throw_input("{}: logit_scale is {}; weft's head has no logit scale", source, j.at("logit_scale").dump());
  }
  if (!json_bool(j, "tie_word_embeddings", true, source)) {
    throw_input("{}: tie_word_embeddings is false; MPT's head is its token embedding", source);
  }
  check_mpt_attention(j, source);
  return hf_decoder_config(j, source, "mpt", {n_layer, n_head, C, ctx, vocab, 4 * C}, [&](ModelConfig& c) {
    set_mpt_block(c.block);
    c.ln_eps = json_positive(j, "layer_norm_epsilon", 1e-5f, source);
  });
}

ForeignNames mpt_foreign_names(const ModelConfig& c) {
  const int64_t C = c.n_embd, F = c.ffn, V = c.vocab_size;
  ForeignNames f;
  f.tied_head = "lm_head.weight";
  auto& p = f.pieces;
  p["transformer.wte.weight"] = {{"transformer.wte.weight", {V, C}}};
  for (int l = 0; l < c.n_layer; ++l) {
    const std::string w = fmt::format("transformer.h.{}.", l), h = fmt::format("transformer.blocks.{}.", l);
    p[w + "ln_1.weight"] = {{h + "norm_1.weight", {C}}};
    p[w + "attn.c_attn.weight"] = {{h + "attn.Wqkv.weight", {3 * C, C}, true}};  // rows q | k | v
    p[w + "attn.c_proj.weight"] = {{h + "attn.out_proj.weight", {C, C}, true}};
    p[w + "ln_2.weight"] = {{h + "norm_2.weight", {C}}};
    p[w + "mlp.c_fc.weight"] = {{h + "ffn.up_proj.weight", {F, C}, true}};
    p[w + "mlp.c_proj.weight"] = {{h + "ffn.down_proj.weight", {C, F}, true}};
  }
  p["transformer.ln_f.weight"] = {{"transformer.norm_f.weight", {C}}};
  return f;
}

}  // namespace weft
