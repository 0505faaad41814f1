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

// The variants of the shared transformer block (model/block.h) and of a decoder's ends, as the
// models users train today differ from GPT-2 (issue 36): the defaults are GPT-2's (learned
// positions, LayerNorm with biases, GELU MLP, multi-head attention, a tied head). Llama: rope,
// rmsnorm, no biases, swiglu, grouped-query attention, untied head.
enum class PositionKind { kLearned, kRope, kAlibi };
enum class NormKind { kLayerNorm, kRmsNorm };
enum class MlpKind { kGelu, kSwiglu, kGeluExact };  // GELU: the tanh form (GPT-2's); exact: erf (MPT's, Pythia's)
const char* position_name(PositionKind p);  // "learned", "rope", "alibi"
const char* norm_name(NormKind n);          // "layernorm", "rmsnorm"
const char* mlp_name(MlpKind m);            // "gelu", "swiglu"

// Rotary positions (Su et al. 2021) and their scaling: "none"; "linear" (positions divided by
// factor); "llama3" (Llama 3.1's: wavelengths beyond original_context / low_freq_factor slowed
// by factor, those below original_context / high_freq_factor kept, a smooth blend between).
struct RopeOptions {
  float base = 10000.0f;     // theta: inverse frequencies base^(-2i/rot)
  float fraction = 1.0f;     // the share of each head's dimensions that turn (GPT-NeoX's rotary_pct)
  std::string scaling = "none";
  float factor = 1.0f, low_freq_factor = 1.0f, high_freq_factor = 4.0f;
  int original_context = 8192;
  bool operator==(const RopeOptions&) const = default;
};

struct BlockOptions {
  PositionKind position = PositionKind::kLearned;
  NormKind norm = NormKind::kLayerNorm;
  bool bias = true;            // the linear layers' and the norms' biases
  MlpKind mlp = MlpKind::kGelu;
  int n_kv_head = 0;           // key/value heads (grouped-query attention; 1 = multi-query); 0: n_head
  bool tie_embeddings = true;  // the output head reads the token embedding
  // GPT-NeoX's (and GPT-J's) parallel residual: x + attn(ln_1(x)) + mlp(ln_2(x)), the second norm
  // reading the block's input instead of x + attn(ln_1(x)).
  bool parallel_residual = false;
  RopeOptions rope;
  // Whether it is GPT-2's block and ends (every family's default).
  bool is_default() const { return *this == BlockOptions{}; }
  bool operator==(const BlockOptions&) const = default;
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
  // The block's variant (BlockOptions above; GPT-2's by default). ln_eps is the norm's epsilon,
  // RMSNorm's too.
  BlockOptions block;

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
  // Whether the output head reads the token embedding (the family ties it and the block options
  // keep it tied): the order of parameter accesses ZeRO-3's gathers follow (plan/comm_model.h).
  bool tied_head() const;
  int kv_heads() const { return block.n_kv_head > 0 ? block.n_kv_head : n_head; }
  // Columns of the fused q, k, v projection: C + 2 kv_heads head_dim.
  int64_t qkv_width() const { return int64_t{n_embd} + 2 * int64_t{kv_heads()} * head_dim(); }
  // Tensor parallelism over tp ranks splits the kv heads when tp divides them, else (tp a multiple
  // of them, Megatron-LM's replication for grouped-query attention) gives each rank one kv head,
  // the same on tp / kv_heads consecutive ranks (check_tp_split refuses the other cases).
  int kv_heads_local(int tp) const { return kv_heads() % tp == 0 ? kv_heads() / tp : 1; }
  // The ranks holding each kv head (1: split).
  int kv_replicas(int tp) const { return kv_heads() % tp == 0 ? 1 : tp / kv_heads(); }
  // This rank's columns of the fused projection: C / tp + 2 kv_heads_local head_dim.
  int64_t qkv_width_local(int tp) const {
    return int64_t{n_embd} / tp + 2 * int64_t{kv_heads_local(tp)} * head_dim();
  }
  // The rotary dimensions of a head: head_dim x rope.fraction with rotary positions, else 0.
  int64_t rope_dims() const;
  // Columns of the MLP's first projection: F, or 2F for SwiGLU's gate and up.
  int64_t fc_width() const { return (block.mlp == MlpKind::kSwiglu ? 2 : 1) * int64_t{ffn}; }
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
