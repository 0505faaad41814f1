// Hugging Face's GPTNeoXForCausalLM as a file format of the GPT family's NeoX-shaped variants
// (issue 36 item 2): its config.json keys and tensor names. A variant with rotary positions,
// LayerNorm, biases, a GELU MLP and full multi-head attention (a parallel residual or not) is
// written in this format, and such folders load in weft. NeoX fuses q, k and v in one
// query_key_value (3C, C) whose rows interleave them per head (head h: q_h, k_h, v_h, each of the
// head size); weft's c_attn (C, 3C) holds the columns q | k | v with the heads in order, so each
// of weft's head blocks is a slice of those rows (ForeignPiece::first/count). Its rotary positions
// turn the first rotary_pct of each head in the "rotate half" order weft uses.
#pragma once
#include <string>

#include <nlohmann/json.hpp>

#include "model/config.h"
#include "params/param_layout.h"

namespace weft {

// Whether cfg's block is GPT-NeoX's: rotary positions (no scaling), LayerNorm, biases, GELU,
// as many kv heads as heads.
bool hf_neox_compatible(const ModelConfig& cfg);
// GPTNeoXForCausalLM's config.json (transformers 4's keys and 5's rope_parameters), weft's own
// under "weft".
nlohmann::ordered_json neox_config_json(const ModelConfig& cfg);
// A config.json with "model_type": "gpt_neox": the model it describes; InputError naming the key
// and the value for what weft does not implement (the exact erf GELU, no attention bias, a rope
// type other than the default).
ModelConfig neox_from_config_json(const nlohmann::json& j, const std::string& source);
// The file names of every tensor of the table (ForeignNames::pieces).
ForeignNames neox_foreign_names(const ModelConfig& cfg);

}  // namespace weft
