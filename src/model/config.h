// The shapes of a model: the fields every family of transformers shares (layers, heads, width,
// context, MLP size), the input its data source reads (tokens: the vocabulary; gridded fields:
// the variables and the grid), and the family's own settings (FamilyFields, defined in the
// family's folder: ClimaX's patch size and decoder depth). Which family a config belongs to is a
// pointer into the family registry (model/family.h): its presets, validation, capabilities and
// model live in its folder, src/model/<family>/.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <typeinfo>
#include <vector>

#include "core/model_capabilities.h"

namespace weft {

class Family;
// The first registered family (model/families.cc): a default-constructed config's.
const Family& default_family();

// A family's own settings beyond the shared fields of ModelConfig: the family derives a struct
// from this in its folder and reads it back with ModelConfig::own_as<T>() (ClimaX: ClimaxFields).
struct FamilyFields {
  virtual ~FamilyFields() = default;
};

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

  // Gridded-field input (the "fields" data source checks its files against them): `vars`
  // variables on an img_h x img_w latitude-longitude grid (0: a token model). A field model's
  // vocabulary sizes are 0.
  int vars = 0;
  int img_h = 0, img_w = 0;
  // The family's own settings (null: none). Copies share them; they are never changed in place (a
  // family that changes one sets a new struct).
  std::shared_ptr<const FamilyFields> own;
  // The family's own settings as its type T; an internal error when they are missing or of
  // another type (a config of another family).
  template <class T>
  const T& own_as() const;
  // What the family supports (pipeline stages, sequence parallelism, selective recompute, ...).
  const ModelCapabilities& capabilities() const;
  // The family's name ("gpt"), for messages.
  const char* family_name() const;
  int head_dim() const { return n_embd / n_head; }
  // Checks that the shapes are consistent (the family's rules); throws InputError naming the values.
  void validate() const;
};

// The message of own_as when the settings are missing or of another type.
[[noreturn]] void throw_own_fields(const ModelConfig& cfg, const char* want);

template <class T>
const T& ModelConfig::own_as() const {
  const T* t = dynamic_cast<const T*>(own.get());
  if (t == nullptr) throw_own_fields(*this, typeid(T).name());
  return *t;
}

// Rounds v up to a multiple of `multiple`.
int64_t round_up(int64_t v, int64_t multiple);

// A preset by name, of any registered family (Family::preset_names). Throws InputError listing
// the known names.
ModelConfig model_preset(const std::string& name);
std::vector<std::string> model_preset_names();
}  // namespace weft
