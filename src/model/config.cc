#include "model/config.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/error.h"
#include "model/family.h"

namespace weft {

const char* position_name(PositionKind p) {
  switch (p) {
    case PositionKind::kLearned: return "learned";
    case PositionKind::kRope: return "rope";
    case PositionKind::kAlibi: return "alibi";
  }
  return "?";
}

const char* norm_name(NormKind n) { return n == NormKind::kRmsNorm ? "rmsnorm" : "layernorm"; }

const char* mlp_name(MlpKind m) {
  switch (m) {
    case MlpKind::kGelu: return "gelu";
    case MlpKind::kSwiglu: return "swiglu";
    case MlpKind::kGeluExact: return "gelu_exact";
  }
  return "?";
}

int64_t round_up(int64_t v, int64_t multiple) { return (v + multiple - 1) / multiple * multiple; }

const ModelCapabilities& ModelConfig::capabilities() const { return family->capabilities(); }

const char* ModelConfig::family_name() const { return family->name(); }

void ModelConfig::validate() const {
  if (!block.is_default() && !capabilities().block_variants) {
    throw_input("model '{}': {} models have GPT-2's block; the decoder variants (position {}, norm {}, bias {}, mlp {}, "
                "n_kv_head {}, tie_embeddings {}) apply to GPT models", name, capabilities().family,
                position_name(block.position), norm_name(block.norm), block.bias, mlp_name(block.mlp), block.n_kv_head,
                block.tie_embeddings);
  }
  family->validate(*this);
}

int64_t ModelConfig::rope_dims() const {
  if (block.position != PositionKind::kRope) return 0;
  return static_cast<int64_t>(static_cast<double>(head_dim()) * static_cast<double>(block.rope.fraction));
}

bool ModelConfig::tied_head() const { return capabilities().tied_head && block.tie_embeddings; }

void throw_own_fields(const ModelConfig& cfg, const char* want) {
  const FamilyFields* own = cfg.own.get();
  throw RuntimeError(fmt::format("internal check failed: model '{}' ({}): its family settings are {}, not {}", cfg.name,
                                 cfg.family_name(), own != nullptr ? typeid(*own).name() : "missing", want));
}

std::vector<std::string> model_preset_names() {
  std::vector<std::string> names;
  for (const Family* f : registered_families()) {
    for (std::string& n : f->preset_names()) names.push_back(std::move(n));
  }
  return names;
}

ModelConfig model_preset(const std::string& name) {
  for (const Family* f : registered_families()) {
    if (std::optional<ModelConfig> c = f->preset(name)) return *c;
  }
  throw_input("unknown model preset '{}' (known: {})", name, fmt::join(model_preset_names(), ", "));
}

}  // namespace weft
