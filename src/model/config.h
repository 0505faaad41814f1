// Model shapes and presets of weft's two families: GPT-2 language models and ClimaX-style
// Vision Transformers for gridded weather fields (model/climax.h). Both are stacks of the same
// pre-LayerNorm transformer block (model/block.h); the family decides what feeds the blocks
// (token embedding, or per-variable patch embedding + variable aggregation) and what reads them
// (the tied vocabulary head, or the patch decoder and the latitude-weighted MSE).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/model_capabilities.h"

namespace weft {

enum class ModelFamily { kGpt, kClimax };

// "gpt", "climax".
const char* family_name(ModelFamily f);
// What the family supports (pipeline stages, sequence parallelism, selective recompute).
const ModelCapabilities& family_capabilities(ModelFamily f);

struct ModelConfig {
  std::string name = "tiny";
  ModelFamily family = ModelFamily::kGpt;
  int n_layer = 4;          // L
  int n_head = 4;           // NH
  int n_embd = 256;         // C
  int n_ctx = 256;          // maximum sequence length (learned positions)
  int vocab_size = 50257;   // V: real vocabulary (GPT-2 BPE)
  int padded_vocab = 50304; // Vp: V rounded up to a multiple of 128 (rows >= V stay zero)
  int ffn = 1024;           // MLP hidden size, 4C for GPT-2
  float ln_eps = 1e-5f;
  float init_std = 0.02f;   // N(0, init_std); c_proj weights use init_std / sqrt(2L)

  // ClimaX (family kClimax): `vars` variables V on an img_h x img_w latitude-longitude grid,
  // cut into patch x patch patches; the sequence is the L = (img_h/patch)(img_w/patch) patches
  // (n_ctx = L); decoder_depth Linear+GELU layers before the output Linear. The GPT's
  // vocabulary sizes are 0.
  int vars = 0;
  int img_h = 0, img_w = 0;
  int patch = 0;
  int decoder_depth = 2;
  bool is_climax() const { return family == ModelFamily::kClimax; }
  const ModelCapabilities& capabilities() const { return family_capabilities(family); }
  int64_t num_patches() const { return patch > 0 ? int64_t{img_h / patch} * (img_w / patch) : 0; }
  int head_dim() const { return n_embd / n_head; }
  // Checks that the shapes are consistent; throws InputError naming the values.
  void validate() const;
};

// Rounds v up to a multiple of `multiple`.
int64_t round_up(int64_t v, int64_t multiple);

// A preset by name: tiny, small, gpt2-124m, gpt2-350m, gpt2-774m, gpt2-1558m, gpt-22b,
// gpt-175b, gpt-1t, and the ClimaX presets (climax_preset_names()). Throws InputError listing
// the known names.
ModelConfig model_preset(const std::string& name);
std::vector<std::string> model_preset_names();

// Builds a config from explicit shapes (ffn 0 means 4C). Padded vocab: multiple of 128.
ModelConfig make_model_config(const std::string& name, int n_layer, int n_head, int n_embd,
                              int n_ctx, int vocab_size, int ffn = 0);

// A ClimaX-style Vision Transformer (ffn 0 means 4C; decoder_depth 2; n_ctx = the patches).
ModelConfig make_climax_config(const std::string& name, int n_layer, int n_head, int n_embd, int vars, int img_h,
                               int img_w, int patch, int ffn = 0);
std::vector<std::string> climax_preset_names();
}  // namespace weft
