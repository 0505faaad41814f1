// The GPT family's shapes (model/gpt/gpt_family.cc registers it): GPT-2's presets and a config
// made from explicit shapes.
#pragma once
#include <string>

#include "model/config.h"

namespace weft {

class Family;
const Family& gpt_family();

// Builds a GPT config from explicit shapes (ffn 0 means 4C). Padded vocab: multiple of 128.
ModelConfig make_model_config(const std::string& name, int n_layer, int n_head, int n_embd, int n_ctx, int vocab_size,
                              int ffn = 0);

}  // namespace weft
