// Hugging Face's MptForCausalLM (MosaicML's MPT, seed 001's models) as a file format of the GPT
// family's MPT-shaped variants (issue 36 item 2): its config.json keys and tensor names. A variant
// with ALiBi positions, a LayerNorm without bias, no biases, the exact GELU in a 4C MLP, full
// multi-head attention, a tied head and a sequential residual is written in this format, and such
// folders load in weft. MPT fuses q, k and v in one Wqkv (3C, C) whose rows are q | k | v, each
// with the heads in order: exactly the transpose of weft's c_attn (C, 3C) columns.
// transformers' MptModel always applies ALiBi with alibi_bias_max 8 and a 4C MLP; weft refuses
// files whose attn_config asks for what it (or transformers) does not compute (QK LayerNorm,
// clip_qkv, another softmax scale or bias maximum, learned positions without ALiBi).
#pragma once
#include <string>

#include <nlohmann/json.hpp>

#include "model/config.h"
#include "params/param_layout.h"

namespace weft {

// Whether cfg's block is MPT's (above).
bool hf_mpt_compatible(const ModelConfig& cfg);
// MptForCausalLM's config.json, weft's own under "weft".
nlohmann::ordered_json mpt_config_json(const ModelConfig& cfg);
// A config.json with "model_type": "mpt": the model it describes; InputError naming the key and
// the value for what weft does not compute.
ModelConfig mpt_from_config_json(const nlohmann::json& j, const std::string& source);
// The file names of every tensor of the table (ForeignNames::pieces).
ForeignNames mpt_foreign_names(const ModelConfig& cfg);

}  // namespace weft
