#include "model/gpt/gpt_variants.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>

#include "core/error.h"
#include "model/config_json.h"
#include "model/family.h"
#include "model/gpt/gpt_config.h"

namespace weft {

namespace {

constexpr float kLlama3Theta = 500000.0f;

PositionKind parse_position(const std::string& v) {
  if (v == "learned") return PositionKind::kLearned;
  if (v == "rope") return PositionKind::kRope;
  if (v == "alibi") return PositionKind::kAlibi;
  throw_input("[model] position must be \"learned\", \"rope\" or \"alibi\", got '{}'", v);
}

NormKind parse_norm(const std::string& v) {
  if (v == "layernorm") return NormKind::kLayerNorm;
  if (v == "rmsnorm") return NormKind::kRmsNorm;
  throw_input("[model] norm must be \"layernorm\" or \"rmsnorm\", got '{}'", v);
}

MlpKind parse_mlp(const std::string& v) {
  if (v == "gelu") return MlpKind::kGelu;
  if (v == "swiglu") return MlpKind::kSwiglu;
  if (v == "gelu_exact") return MlpKind::kGeluExact;
  throw_input("[model] mlp must be \"gelu\" (the tanh form), \"gelu_exact\" (erf) or \"swiglu\", got '{}'", v);
}

float positive(const std::string& key, const std::string& v) {
  const double d = setting_number(key, v);
  if (!(d > 0.0) || !std::isfinite(static_cast<float>(d))) throw_input("[model] {} must be a positive number, got '{}'", key, v);
  return static_cast<float>(d);
}

struct VariantPreset {
  const char* name;
  int layers, heads, kv_heads, hidden, ffn, ctx, vocab;
  float theta;
  bool llama3_scaling, tied;
};
// llama-tiny: the GPT tiny preset's size (4 x 256, 4 heads, GPT-2's vocabulary) with Llama's
// block and 2 key/value heads, its head tied as Llama 3.2's small models do. Llama 3.1 (Dubey et
// al. 2024, Table 3 and the released config.json files): 8B 32 x 4096, 32 heads, 8 kv heads, MLP
// 14336; 70B 80 x 8192, 64 heads, MLP 28672; 405B 126 x 16384, 128 heads, MLP 53248; vocabulary
// 128256, theta 500000 with the llama3 scaling (factor 8, 1, 4, 8192); context: the 8192 tokens of
// pre-training (the released files say 131072, reached by continued training).
constexpr VariantPreset kVariantPresets[] = {
    {"llama-tiny", 4, 4, 2, 256, 768, 256, 50257, 10000.0f, false, true},
    {"llama3-8b", 32, 32, 8, 4096, 14336, 8192, 128256, kLlama3Theta, true, false},
    {"llama3-70b", 80, 64, 8, 8192, 28672, 8192, 128256, kLlama3Theta, true, false},
    {"llama3-405b", 126, 128, 8, 16384, 53248, 8192, 128256, kLlama3Theta, true, false},
};

}  // namespace

int swiglu_ffn(int C) { return static_cast<int>(round_up((8 * int64_t{C} + 2) / 3, 256)); }

std::vector<std::string> gpt_setting_names() {
  return {"position",  "norm",      "bias",       "mlp",          "ffn",         "n_kv_head",          "tie_embeddings",
          "parallel_residual",
          "norm_eps", "rope_base", "rope_fraction", "rope_scaling", "rope_factor", "rope_low_freq_factor",
          "rope_high_freq_factor", "rope_original_context"};
}

namespace {
// Applies one variant setting to c; false when the key is none of them.
bool apply_setting(ModelConfig& c, const std::string& key, const std::string& v) {
  BlockOptions& b = c.block;
  if (key == "position") b.position = parse_position(v);
  else if (key == "norm") b.norm = parse_norm(v);
  else if (key == "bias") b.bias = setting_bool(key, v);
  else if (key == "mlp") b.mlp = parse_mlp(v);
  else if (key == "ffn") c.ffn = setting_int(key, v, kMaxJsonWidth);
  else if (key == "n_kv_head") b.n_kv_head = setting_int(key, v, kMaxJsonHeads);
  else if (key == "tie_embeddings") b.tie_embeddings = setting_bool(key, v);
  else if (key == "parallel_residual") b.parallel_residual = setting_bool(key, v);
  else if (key == "norm_eps") c.ln_eps = positive(key, v);
  else if (key == "rope_base") b.rope.base = positive(key, v);
  else if (key == "rope_fraction") b.rope.fraction = positive(key, v);
  else if (key == "rope_scaling") b.rope.scaling = v;
  else if (key == "rope_factor") b.rope.factor = positive(key, v);
  else if (key == "rope_low_freq_factor") b.rope.low_freq_factor = positive(key, v);
  else if (key == "rope_high_freq_factor") b.rope.high_freq_factor = positive(key, v);
  else if (key == "rope_original_context") b.rope.original_context = setting_int(key, v, kMaxJsonContext);
  else return false;
  return true;
}
}  // namespace

ModelConfig gpt_with_settings(const ModelConfig& base, const std::map<std::string, std::string>& settings) {
  if (settings.empty()) return base;
  ModelConfig c = base;
  for (const auto& [key, v] : settings) {
    if (!apply_setting(c, key, v)) {
      throw_input("[model] key '{}' ({}) is not a setting of model '{}' (GPT models take {})", key, v, base.name,
                  fmt::join(gpt_setting_names(), ", "));
    }
  }
  if (c.block.n_kv_head == c.n_head) c.block.n_kv_head = 0;  // multi-head attention, written one way
  try {
    c.validate();
  } catch (const InputError& e) {
    throw_input("model '{}': {}", base.name, e.what());
  }
  return c;
}

void validate_block_options(const ModelConfig& c) {
  const BlockOptions& b = c.block;
  if (b.n_kv_head < 0 || b.n_kv_head > c.n_head || (b.n_kv_head > 0 && c.n_head % b.n_kv_head != 0)) {
    throw_input("n_kv_head {} must divide the {} attention heads (1: multi-query attention)", b.n_kv_head, c.n_head);
  }
  const RopeOptions& r = b.rope;
  if (b.position != PositionKind::kRope) {
    if (!(r == RopeOptions{})) throw_input("the rope_* settings apply to position = \"rope\", not \"{}\"", position_name(b.position));
    return;
  }
  if (!(r.fraction > 0.0f && r.fraction <= 1.0f)) throw_input("rope_fraction {} must lie in (0, 1]", r.fraction);
  const int64_t rot = c.rope_dims();
  if (rot < 2 || rot % 2 != 0) {
    throw_input("rotary positions turn pairs of dimensions: head size {} x rope_fraction {} = {} dimensions, not an even "
                "number of at least 2", c.head_dim(), r.fraction, rot);
  }
  if (r.scaling != "none" && r.scaling != "linear" && r.scaling != "llama3") {
    throw_input("rope_scaling must be \"none\", \"linear\" or \"llama3\", got '{}'", r.scaling);
  }
  if (r.scaling == "none" && (r.factor != 1.0f)) throw_input("rope_factor {} needs rope_scaling \"linear\" or \"llama3\"", r.factor);
  if (r.scaling != "none" && r.factor < 1.0f) throw_input("rope_factor {} must be at least 1", r.factor);
  if (r.scaling == "llama3" && !(r.high_freq_factor > r.low_freq_factor)) {
    throw_input("rope_high_freq_factor {} must be above rope_low_freq_factor {}", r.high_freq_factor, r.low_freq_factor);
  }
}

namespace {

// GPT-NeoX-20B (Black et al. 2022, Table 1 and the released config.json): 44 x 6144, 64 heads,
// MLP 24576, rotary positions on a quarter of each head (theta 10000), LayerNorm with biases,
// GELU (its gelu_fast: the tanh form), parallel residual, untied head, context 2048, vocabulary
// 50432 (the tokenizer's 50277 padded). 20,554,567,680 parameters.
ModelConfig neox_20b() {
  ModelConfig c = make_model_config("neox-20b", 44, 64, 6144, 2048, 50432, 24576);
  BlockOptions& b = c.block;
  b.position = PositionKind::kRope;
  b.rope.fraction = 0.25f;
  b.tie_embeddings = false;
  b.parallel_residual = true;
  c.ln_eps = 1e-5f;
  c.validate();
  return c;
}

// MPT (MosaicML's LLM Foundry; seed 001 trains MPT-1B/3B and MPT-7B on MI250): ALiBi instead of
// position embeddings, no biases (its LayerNorms have none either), the exact GELU in a 4x MLP,
// the head tied to the embedding, context 2048, vocabulary 50432 (GPT-NeoX-20B's tokenizer
// padded). mpt-1b: mpt-1b-redpajama-200b's 24 x 2048, 16 heads (1,311,344,640 parameters; that
// model's QK LayerNorm is not in weft); mpt-7b: 32 x 4096, 32 heads (6,649,286,656).
ModelConfig mpt(const char* name, int layers, int heads, int C) {
  ModelConfig c = make_model_config(name, layers, heads, C, 2048, 50432, 4 * C);
  set_mpt_block(c.block);
  c.ln_eps = 1e-5f;
  c.validate();
  return c;
}

}  // namespace

void set_mpt_block(BlockOptions& b) {
  b.position = PositionKind::kAlibi;
  b.norm = NormKind::kLayerNorm;
  b.bias = false;
  b.mlp = MlpKind::kGeluExact;
  b.tie_embeddings = true;
}

std::vector<std::string> gpt_variant_preset_names() {
  std::vector<std::string> names;
  for (const auto& p : kVariantPresets) names.emplace_back(p.name);
  names.emplace_back("neox-20b");
  names.emplace_back("mpt-1b");
  names.emplace_back("mpt-7b");
  return names;
}

std::optional<ModelConfig> gpt_variant_preset(const std::string& name) {
  if (name == "neox-20b") return neox_20b();
  if (name == "mpt-1b") return mpt("mpt-1b", 24, 16, 2048);
  if (name == "mpt-7b") return mpt("mpt-7b", 32, 32, 4096);
  for (const auto& p : kVariantPresets) {
    if (name != p.name) continue;
    ModelConfig c = make_model_config(p.name, p.layers, p.heads, p.hidden, p.ctx, p.vocab, p.ffn);
    BlockOptions& b = c.block;
    b.position = PositionKind::kRope;
    b.norm = NormKind::kRmsNorm;
    b.bias = false;
    b.mlp = MlpKind::kSwiglu;
    b.n_kv_head = p.kv_heads;
    b.tie_embeddings = p.tied;
    b.rope.base = p.theta;
    if (p.llama3_scaling) {
      b.rope.scaling = "llama3";
      b.rope.factor = 8.0f;
      b.rope.low_freq_factor = 1.0f;
      b.rope.high_freq_factor = 4.0f;
      b.rope.original_context = 8192;
    }
    c.ln_eps = 1e-5f;
    c.validate();
    return c;
  }
  return std::nullopt;
}

std::string describe_block(const ModelConfig& c) {
  const BlockOptions& b = c.block;
  if (b.is_default()) return "";
  std::string pos = position_name(b.position);
  if (b.position == PositionKind::kRope) {
    pos += fmt::format(" (theta {}", b.rope.base);
    if (b.rope.fraction != 1.0f) pos += fmt::format(", {} of each head", b.rope.fraction);
    if (b.rope.scaling != "none") pos += fmt::format(", {} x{}", b.rope.scaling, b.rope.factor);
    pos += ")";
  }
  return fmt::format("{}, {}, {}, {} {}, {} kv heads, {}{}", pos, norm_name(b.norm), b.bias ? "biases" : "no bias",
                     mlp_name(b.mlp), c.ffn, c.kv_heads(), b.tie_embeddings ? "tied head" : "untied head",
                     b.parallel_residual ? ", parallel residual" : "");
}

nlohmann::ordered_json block_options_json(const BlockOptions& b) {
  nlohmann::ordered_json j;
  j["position"] = position_name(b.position);
  j["norm"] = norm_name(b.norm);
  j["bias"] = b.bias;
  j["mlp"] = mlp_name(b.mlp);
  j["n_kv_head"] = b.n_kv_head;
  j["tie_embeddings"] = b.tie_embeddings;
  j["parallel_residual"] = b.parallel_residual;
  if (b.position == PositionKind::kRope) {
    j["rope"] = {{"base", float_for_json(b.rope.base)},
                 {"fraction", float_for_json(b.rope.fraction)},
                 {"scaling", b.rope.scaling},
                 {"factor", float_for_json(b.rope.factor)},
                 {"low_freq_factor", float_for_json(b.rope.low_freq_factor)},
                 {"high_freq_factor", float_for_json(b.rope.high_freq_factor)},
                 {"original_context", b.rope.original_context}};
  }
  return j;
}

BlockOptions block_options_from_json(const nlohmann::json& j, const std::string& source) {
  if (!j.is_object()) throw_input("{}: key 'weft.block' is {}, expected an object", source, j.dump());
  // Through the settings' parsers: the same names, values and messages as a [model] table.
  std::map<std::string, std::string> s;
  const auto text = [&](const nlohmann::json& v, const std::string& key) -> std::string {
    if (v.is_string()) return v.get<std::string>();
    if (v.is_boolean()) return v.get<bool>() ? "true" : "false";
    if (v.is_number()) return v.dump();
    throw_input("{}: key 'weft.block.{}' is {}, expected a string, number or boolean", source, key, v.dump());
  };
  for (const auto& [key, v] : j.items()) {
    if (key == "rope") {
      if (!v.is_object()) throw_input("{}: key 'weft.block.rope' is {}, expected an object", source, v.dump());
      for (const auto& [rk, rv] : v.items()) {
        const std::string name = rk == "original_context" ? "rope_original_context" : "rope_" + rk;
        s[name] = text(rv, "rope." + rk);
      }
    } else if (key == "n_kv_head" && v.is_number_integer() && v.get<int64_t>() == 0) {
      continue;  // 0: as many as the heads
    } else {
      s[key] = text(v, key);
    }
  }
  ModelConfig parsed;  // the options only; the model's shape checks them (validate)
  for (const auto& [key, v] : s) {
    try {
      if (key == "ffn" || key == "norm_eps" || !apply_setting(parsed, key, v)) throw_input("unknown key 'weft.block.{}'", key);
    } catch (const InputError& e) {
      throw_input("{}: {}", source, e.what());
    }
  }
  return parsed.block;
}

std::vector<float> alibi_slopes(int n_head) {
  int n = 1;
  while (n < n_head) n *= 2;
  std::vector<float> all(static_cast<size_t>(n));
  for (int k = 1; k <= n; ++k) {
    const float m = static_cast<float>(k) * (8.0f / static_cast<float>(n));  // torch: arange * (8 / n), fp32
    all[static_cast<size_t>(k - 1)] = 1.0f / std::pow(2.0f, m);
  }
  if (n == n_head) return all;
  std::vector<float> out;
  for (size_t i = 1; i < all.size(); i += 2) out.push_back(all[i]);
  for (size_t i = 0; i < all.size(); i += 2) out.push_back(all[i]);
  out.resize(static_cast<size_t>(n_head));
  return out;
}

void rope_tables(const ModelConfig& c, int64_t T, std::vector<float>& cos, std::vector<float>& sin) {
  const RopeOptions& r = c.block.rope;
  const int64_t rot = c.rope_dims(), half = rot / 2;
  // Hugging Face's _compute_default_rope_parameters: 1 / base^(arange(0, rot, 2) / rot), in fp32.
  std::vector<float> inv(static_cast<size_t>(half));
  for (int64_t i = 0; i < half; ++i) {
    const float e = static_cast<float>(2 * i) / static_cast<float>(rot);
    inv[static_cast<size_t>(i)] = 1.0f / std::pow(r.base, e);
  }
  if (r.scaling == "linear") {
    for (float& f : inv) f /= r.factor;
  } else if (r.scaling == "llama3") {  // _compute_llama3_parameters
    const float old = static_cast<float>(r.original_context);
    const float low_wavelen = old / r.low_freq_factor, high_wavelen = old / r.high_freq_factor;
    constexpr float kPi = 3.14159265358979323846f;
    for (float& f : inv) {
      const float wavelen = 2.0f * kPi / f;
      if (wavelen > low_wavelen) {
        f = f / r.factor;
      } else if (wavelen >= high_wavelen) {
        const float smooth = (old / wavelen - r.low_freq_factor) / (r.high_freq_factor - r.low_freq_factor);
        f = (1.0f - smooth) * f / r.factor + smooth * f;
      }
    }
  }
  cos.assign(static_cast<size_t>(T * half), 0.0f);
  sin.assign(static_cast<size_t>(T * half), 0.0f);
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t i = 0; i < half; ++i) {
      const float a = static_cast<float>(t) * inv[static_cast<size_t>(i)];
      cos[static_cast<size_t>(t * half + i)] = std::cos(a);
      sin[static_cast<size_t>(t * half + i)] = std::sin(a);
    }
  }
}

}  // namespace weft
