// The ClimaX family's shapes (model/climax/climax_family.cc registers it): its presets and a
// config made from explicit shapes.
#pragma once
#include <string>
#include <vector>

#include "model/config.h"

namespace weft {

class Family;
const Family& climax_family();

// A ClimaX-style Vision Transformer (ffn 0 means 4C; decoder_depth 2; n_ctx = the patches).
ModelConfig make_climax_config(const std::string& name, int n_layer, int n_head, int n_embd, int vars, int img_h,
                               int img_w, int patch, int ffn = 0);
std::vector<std::string> climax_preset_names();

}  // namespace weft
