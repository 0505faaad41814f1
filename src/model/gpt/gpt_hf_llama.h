// Hugging Face's LlamaForCausalLM as a file format of the GPT family's Llama-shaped variants
// (issue 36 item 2): its config.json keys and its tensor names. A variant with rotary positions
// over whole heads, RMSNorm and SwiGLU is written in this format (weft's checkpoints of it load
// with transformers' LlamaForCausalLM.from_pretrained), and such folders saved by transformers
// load in weft: q_proj, k_proj and v_proj (out, in) become the columns of weft's fused c_attn
// (in, out), gate_proj and up_proj those of c_fc, o_proj and down_proj their transposes.
// Hugging Face's q and k rows are already in the "rotate half" order weft's rotary positions use.
#pragma once
#include <string>

#include <nlohmann/json.hpp>

#include "model/config.h"
#include "params/param_layout.h"

namespace weft {

// Whether cfg's block is Llama's: rotary positions turning whole heads, RMSNorm, SwiGLU (biases
// either way: attention_bias and mlp_bias together).
bool hf_llama_compatible(const ModelConfig& cfg);
// LlamaForCausalLM's config.json, with weft's own keys under "weft".
nlohmann::ordered_json llama_config_json(const ModelConfig& cfg);
// A config.json with "model_type": "llama": the model it describes; InputError naming the key and
// the value for what weft does not implement (another activation, a head size other than
// hidden / heads, different attention and MLP biases, an unknown rope type).
ModelConfig llama_from_config_json(const nlohmann::json& j, const std::string& source);
// The file names of every tensor of the table (ForeignNames::pieces).
ForeignNames llama_foreign_names(const ModelConfig& cfg);

}  // namespace weft
