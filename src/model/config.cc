#include "model/config.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/error.h"

namespace weft {

int64_t round_up(int64_t v, int64_t multiple) { return (v + multiple - 1) / multiple * multiple; }

const char* family_name(ModelFamily f) { return f == ModelFamily::kClimax ? "climax" : "gpt"; }

const ModelCapabilities& family_capabilities(ModelFamily f) {
  static const ModelCapabilities gpt{};
  // ClimaX's front (patch embeddings, variable aggregation) and back (decoder) are not cut into
  // stages, its tokens are patches of one grid (no sequence split), its attention is the
  // bidirectional reference (no selective recompute), its embeddings are reduced whole.
  static const ModelCapabilities climax{.family = "ClimaX",
                                        .pipeline_stages = false,
                                        .sequence_parallel = false,
                                        .selective_recompute = false,
                                        .causal_attention = false,
                                        .sparse_embedding_grads = false};
  return f == ModelFamily::kClimax ? climax : gpt;
}

void ModelConfig::validate() const {
  if (is_climax()) {
    if (n_layer <= 0 || n_head <= 0 || n_embd <= 0 || ffn <= 0 || vars <= 0 || img_h <= 0 || img_w <= 0 ||
        patch <= 0 || decoder_depth < 0) {
      throw_input(
          "model '{}': every size must be positive (layers {}, heads {}, hidden {}, ffn {}, variables {}, grid {}x{}, "
          "patch {}, decoder depth {})",
          name, n_layer, n_head, n_embd, ffn, vars, img_h, img_w, patch, decoder_depth);
    }
    if (img_h % patch != 0 || img_w % patch != 0) {
      throw_input("model '{}': the grid {}x{} is not divisible by the patch size {}", name, img_h, img_w, patch);
    }
    if (n_embd % n_head != 0) {
      throw_input("model '{}': hidden size {} is not divisible by the number of heads {}", name, n_embd, n_head);
    }
    if (n_embd % 4 != 0) {
      throw_input("model '{}': hidden size {} must be a multiple of 4 (the 2-D sine-cosine position embedding)", name,
                  n_embd);
    }
    if (n_ctx != num_patches()) {
      throw_input("model '{}': n_ctx {} must equal the {} patches of a {}x{} grid in {}x{} patches", name, n_ctx,
                  num_patches(), img_h, img_w, patch, patch);
    }
    return;
  }
  if (n_layer <= 0 || n_head <= 0 || n_embd <= 0 || n_ctx <= 0 || vocab_size <= 0 || ffn <= 0) {
    throw_input("model '{}': every size must be positive (layers {}, heads {}, hidden {}, context {}, vocab {}, ffn {})",
                name, n_layer, n_head, n_embd, n_ctx, vocab_size, ffn);
  }
  if (n_embd % n_head != 0) {
    throw_input("model '{}': hidden size {} is not divisible by the number of heads {}", name, n_embd, n_head);
  }
  if (padded_vocab < vocab_size) {
    throw_input("model '{}': padded vocabulary {} is smaller than the vocabulary {}", name, padded_vocab, vocab_size);
  }
}

ModelConfig make_model_config(const std::string& name, int n_layer, int n_head, int n_embd,
                              int n_ctx, int vocab_size, int ffn) {
  ModelConfig c;
  c.name = name;
  c.n_layer = n_layer;
  c.n_head = n_head;
  c.n_embd = n_embd;
  c.n_ctx = n_ctx;
  c.vocab_size = vocab_size;
  c.padded_vocab = static_cast<int>(round_up(vocab_size, 128));
  c.ffn = ffn > 0 ? ffn : 4 * n_embd;
  c.validate();
  return c;
}

ModelConfig make_climax_config(const std::string& name, int n_layer, int n_head, int n_embd, int vars, int img_h,
                               int img_w, int patch, int ffn) {
  ModelConfig c;
  c.name = name;
  c.family = ModelFamily::kClimax;
  c.n_layer = n_layer;
  c.n_head = n_head;
  c.n_embd = n_embd;
  c.vars = vars;
  c.img_h = img_h;
  c.img_w = img_w;
  c.patch = patch;
  c.n_ctx = patch > 0 ? static_cast<int>(c.num_patches()) : 0;
  c.vocab_size = 0;
  c.padded_vocab = 0;
  c.ffn = ffn > 0 ? ffn : 4 * n_embd;
  c.validate();
  return c;
}

namespace {
// ClimaX-style presets. climax: the ClimaX paper's 5.625-degree model (Nguyen et al. 2023,
// microsoft/ClimaX configs: 32x64 grid, patch 2, embedding 1024, 8 blocks, 16 heads, 48
// variables). orbit-*: the ORBIT classes (Wang et al. 2024, SC24: 115M, 1B, 10B, 113B) on
// ORBIT's 1.40625-degree grid (128x256, patch 4, 91 CMIP6 variables). ORBIT's size table is not
// public: orbit-115m is ClimaX's base shape at 91 variables (112M parameters), the larger ones
// keep 64-dimensional heads and are deepened to their class (docs/climax.md lists the counts).
// climax-tiny: the test preset (5 variables of the synthetic data at 5.625 degrees).
struct ClimaxPreset {
  const char* name;
  int layers, heads, hidden, vars, h, w, patch;
};
constexpr ClimaxPreset kClimaxPresets[] = {
    {"climax-tiny", 2, 4, 64, 5, 32, 64, 4},
    {"climax", 8, 16, 1024, 48, 32, 64, 2},
    {"orbit-115m", 8, 16, 1024, 91, 128, 256, 4},
    {"orbit-1b", 20, 32, 2048, 91, 128, 256, 4},
    {"orbit-10b", 32, 80, 5120, 91, 128, 256, 4},
    {"orbit-113b", 62, 192, 12288, 91, 128, 256, 4},
};

struct Preset {
  const char* name;
  int layers, heads, hidden, ctx;
  int vocab = 50257;  // GPT-2's BPE (padded to a multiple of 128 by make_model_config)
};
// GPT-2 sizes from Radford et al. 2019 / the Hugging Face configs; 22B/175B/1T as trained
// on Frontier (Dash et al. 2023, "Optimizing Distributed Training on Frontier for Large
// Language Models", Table II: 48x6144x48, 96x12288x96, 128x25600x160, sequence 2048).
// gpt-20b: GPT-NeoX-20B's shape (Black et al. 2022, "GPT-NeoX-20B: An Open-Source
// Autoregressive Language Model", Table 1: 44 layers, hidden 6144, 64 heads, context 2048,
// vocabulary 50432), the 20B GPT of Xu et al. 2025 (arXiv 2501.04266) as weft's model:
// learned positions and a tied head instead of NeoX's rotary embeddings and untied head.
constexpr Preset kPresets[] = {
    {"tiny", 4, 4, 256, 256},          {"small", 6, 6, 384, 256},
    {"gpt2-124m", 12, 12, 768, 1024},  {"gpt2-350m", 24, 16, 1024, 1024},
    {"gpt2-774m", 36, 20, 1280, 1024}, {"gpt2-1558m", 48, 25, 1600, 1024},
    {"gpt-22b", 48, 48, 6144, 2048},   {"gpt-175b", 96, 96, 12288, 2048},
    {"gpt-1t", 128, 160, 25600, 2048}, {"gpt-20b", 44, 64, 6144, 2048, 50432},
};
}  // namespace

std::vector<std::string> climax_preset_names() {
  std::vector<std::string> names;
  for (const auto& p : kClimaxPresets) names.emplace_back(p.name);
  return names;
}

std::vector<std::string> model_preset_names() {
  std::vector<std::string> names;
  for (const auto& p : kPresets) names.emplace_back(p.name);
  for (const auto& p : kClimaxPresets) names.emplace_back(p.name);
  return names;
}

ModelConfig model_preset(const std::string& name) {
  for (const auto& p : kPresets) {
    if (name == p.name) return make_model_config(p.name, p.layers, p.heads, p.hidden, p.ctx, p.vocab);
  }
  for (const auto& p : kClimaxPresets) {
    if (name == p.name) return make_climax_config(p.name, p.layers, p.heads, p.hidden, p.vars, p.h, p.w, p.patch);
  }
  throw_input("unknown model preset '{}' (known: {})", name, fmt::join(model_preset_names(), ", "));
}

}  // namespace weft
