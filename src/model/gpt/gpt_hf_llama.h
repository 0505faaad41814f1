// Hugging Face's LlamaForCausalLM as a file format of the GPT family's Llama-shaped variants
// (issue 36 item 2): its config.json keys and its tensor names. A variant with rotary positions
// over whole heads, RMSNorm and SwiGLU is written in this format (weft's checkpoints of it load
// with transformers' LlamaForCausalLM.from_pretrained), and such folders saved by transformers
// load in weft: q_proj, k_proj and v_proj (out, in) become the columns of weft's fused c_attn
// (in, out), gate_proj and up_proj those of c_fc, o_proj and down_proj their transposes.
// Hugging Face's q and k rows are already in the "rotate half" order weft's rotary positions use.
#pragma once
#include <functional>
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

// The shape a Hugging Face decoder's config.json gives (read by its format), with weft's own name
// and padded vocabulary from its "weft" key when present (`default_name` otherwise); `fill` sets
// the block and the norm. Every InputError is prefixed by `source` once.
// The keys every Hugging Face decoder file of weft's ends with: the head's tying, the init scale,
// no bos/eos token, float32, and weft's own under "weft" (its name, padded vocabulary, block).
void add_hf_decoder_keys(nlohmann::ordered_json& j, const ModelConfig& c);
struct HfShape {
  int n_layer = 0, n_head = 0, C = 0, ctx = 0, vocab = 0, ffn = 0;
};
ModelConfig hf_decoder_config(const nlohmann::json& j, const std::string& source, const char* default_name,
                              const HfShape& shape, const std::function<void(ModelConfig&)>& fill);

}  // namespace weft
