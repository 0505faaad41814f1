// The GPT family's decoder variants (issue 36; model/config.h's BlockOptions): the [model]
// settings that choose them, the family's rules for them, the Llama presets with their published
// shapes, their config.json keys, and the rotary tables the block reads.
#pragma once
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/config.h"

namespace weft {

// The variant settings of a GPT model's [model] table (position, norm, bias, mlp, ffn, n_kv_head,
// tie_embeddings, norm_eps, rope_*).
std::vector<std::string> gpt_setting_names();
// `base` with the settings applied and validated; InputError naming the key and its text.
ModelConfig gpt_with_settings(const ModelConfig& base, const std::map<std::string, std::string>& settings);
// The family's rules for the variant (InputError naming the values): kv heads divide the heads,
// rotary positions need an even number of turning dimensions, what is not implemented yet
// (ALiBi, a LayerNorm without bias) is refused.
void validate_block_options(const ModelConfig& c);
// Llama's MLP size for width C (Touvron et al. 2023): 2/3 of 4C, rounded up to a multiple of 256.
int swiglu_ffn(int C);

// The presets of the variants: llama-tiny and Llama 3.1's 8B, 70B and 405B (Dubey et al. 2024,
// "The Llama 3 Herd of Models", Table 3).
std::vector<std::string> gpt_variant_preset_names();
std::optional<ModelConfig> gpt_variant_preset(const std::string& name);
// "rope (theta 500000, llama3 x8), rmsnorm, no bias, swiglu 14336, 8 kv heads, untied" for
// describe_shape; "" for GPT-2's block.
std::string describe_block(const ModelConfig& c);

// config.json: the options under "weft": {"block": {...}} (nothing for GPT-2's block), and back.
nlohmann::ordered_json block_options_json(const BlockOptions& b);
BlockOptions block_options_from_json(const nlohmann::json& j, const std::string& source);

// Rotary positions' cos and sin tables (T rows of rot/2, rot = ModelConfig::rope_dims) for
// positions 0..T-1, as Hugging Face computes them (inverse frequencies in fp32, scaled as
// rope.scaling says, the angle t * inv_freq in fp32, its cos and sin in fp32).
void rope_tables(const ModelConfig& c, int64_t T, std::vector<float>& cos, std::vector<float>& sin);

// ALiBi's slopes of n_head heads (Press et al. 2022, as MPT's gen_slopes with alibi_bias_max 8):
// for n = n_head rounded up to a power of two, 1 / 2^(8 k / n), k = 1..n; when n_head is not a
// power of two the odd-indexed then the even-indexed ones, the first n_head of them.
// MPT's block (MosaicML): ALiBi, LayerNorm without biases, no linear biases, the exact GELU,
// the head tied to the embedding. The shape (heads, hidden, MLP width) is the caller's.
void set_mpt_block(BlockOptions& b);

std::vector<float> alibi_slopes(int n_head);

}  // namespace weft
