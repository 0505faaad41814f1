// The ClimaX family's shapes (model/climax/climax_family.cc registers it): its presets and a
// config made from explicit shapes.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "model/config.h"

namespace weft {

class Family;
const Family& climax_family();

// ClimaX's own settings (ModelConfig::own): the grid (ModelConfig::vars, img_h, img_w) is cut
// into patch x patch patches, the sequence is the L = (img_h/patch)(img_w/patch) patches
// (n_ctx = L); decoder_depth Linear+GELU layers come before the output Linear.
struct ClimaxFields final : FamilyFields {
  int patch = 0;
  int decoder_depth = 2;
};
inline const ClimaxFields& climax_fields(const ModelConfig& cfg) { return cfg.own_as<ClimaxFields>(); }
// The patches of the grid (the sequence length).
inline int64_t num_patches(const ModelConfig& cfg) {
  const int p = climax_fields(cfg).patch;
  return p > 0 ? int64_t{cfg.img_h / p} * (cfg.img_w / p) : 0;
}
// Grid points per patch (patch x patch).
inline int64_t patch_area(const ModelConfig& cfg) {
  const int64_t p = climax_fields(cfg).patch;
  return p * p;
}
// The config with other own settings (a new ClimaxFields: the old one may be shared).
ModelConfig with_climax_fields(ModelConfig cfg, int patch, int decoder_depth);

// A ClimaX-style Vision Transformer (ffn 0 means 4C; decoder_depth 2; n_ctx = the patches).
ModelConfig make_climax_config(const std::string& name, int n_layer, int n_head, int n_embd, int vars, int img_h,
                               int img_w, int patch, int ffn = 0);
std::vector<std::string> climax_preset_names();

}  // namespace weft
