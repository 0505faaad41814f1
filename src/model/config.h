// GPT-2 model shapes and presets.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace weft {

struct ModelConfig {
  std::string name = "tiny";
  int n_layer = 4;          // L
  int n_head = 4;           // NH
  int n_embd = 256;         // C
  int n_ctx = 256;          // maximum sequence length (learned positions)
  int vocab_size = 50257;   // V: real vocabulary (GPT-2 BPE)
  int padded_vocab = 50304; // Vp: V rounded up to a multiple of 128 (rows >= V stay zero)
  int ffn = 1024;           // MLP hidden size, 4C for GPT-2
  float ln_eps = 1e-5f;
  float init_std = 0.02f;   // N(0, init_std); c_proj weights use init_std / sqrt(2L)

  int head_dim() const { return n_embd / n_head; }
  // Checks that the shapes are consistent; throws InputError naming the values.
  void validate() const;
};

// Rounds v up to a multiple of `multiple`.
int64_t round_up(int64_t v, int64_t multiple);

// A preset by name: tiny, small, gpt2-124m, gpt2-350m, gpt2-774m, gpt2-1558m, gpt-22b,
// gpt-175b, gpt-1t. Throws InputError listing the known names.
ModelConfig model_preset(const std::string& name);
std::vector<std::string> model_preset_names();

// Builds a config from explicit shapes (ffn 0 means 4C). Padded vocab: multiple of 128.
ModelConfig make_model_config(const std::string& name, int n_layer, int n_head, int n_embd,
                              int n_ctx, int vocab_size, int ffn = 0);

}  // namespace weft
