// The shapes of a model: the fields every family of transformers shares (layers, heads, width,
// context, MLP size) and, for now, each family's own (the vocabulary of the language family, the
// grid and patches of the weather ViT). Which family a config belongs to is a pointer into the
// family registry (model/family.h): its presets, validation, capabilities and model live in its
// folder, src/model/<family>/.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/model_capabilities.h"

namespace weft {

class Family;
// The first registered family (model/families.cc): a default-constructed config's.
const Family& default_family();

struct ModelConfig {
  std::string name = "tiny";
  const Family* family = &default_family();  // model/family.h
  int n_layer = 4;          // L
  int n_head = 4;           // NH
  int n_embd = 256;         // C
  int n_ctx = 256;          // maximum sequence length (learned positions)
  int vocab_size = 50257;   // V: real vocabulary (GPT-2 BPE)
  int padded_vocab = 50304; // Vp: V rounded up to a multiple of 128 (rows >= V stay zero)
  int ffn = 1024;           // MLP hidden size, 4C for GPT-2
  float ln_eps = 1e-5f;
  float init_std = 0.02f;   // N(0, init_std); c_proj weights use init_std / sqrt(2L)

  // ClimaX (model/climax/): `vars` variables V on an img_h x img_w latitude-longitude grid,
  // cut into patch x patch patches; the sequence is the L = (img_h/patch)(img_w/patch) patches
  // (n_ctx = L); decoder_depth Linear+GELU layers before the output Linear. The GPT's
  // vocabulary sizes are 0.
  int vars = 0;
  int img_h = 0, img_w = 0;
  int patch = 0;
  int decoder_depth = 2;
  // What the family supports (pipeline stages, sequence parallelism, selective recompute, ...).
  const ModelCapabilities& capabilities() const;
  // The family's name ("gpt"), for messages.
  const char* family_name() const;
  int64_t num_patches() const { return patch > 0 ? int64_t{img_h / patch} * (img_w / patch) : 0; }
  int head_dim() const { return n_embd / n_head; }
  // Checks that the shapes are consistent (the family's rules); throws InputError naming the values.
  void validate() const;
};

// Rounds v up to a multiple of `multiple`.
int64_t round_up(int64_t v, int64_t multiple);

// A preset by name, of any registered family (Family::preset_names). Throws InputError listing
// the known names.
ModelConfig model_preset(const std::string& name);
std::vector<std::string> model_preset_names();
}  // namespace weft
