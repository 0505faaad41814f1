#include "model/family.h"

#include <cmath>
#include <stdexcept>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "core/error.h"

namespace weft {

const Family& default_family() { return *registered_families().front(); }

const Family* find_family(std::string_view name) {
  for (const Family* f : registered_families()) {
    if (name == f->name()) return f;
  }
  return nullptr;
}

std::string family_names() {
  std::string out;
  for (const Family* f : registered_families()) out += fmt::format("{}{}", out.empty() ? "" : ", ", f->name());
  return out;
}

const Family& family_of_config_json(const nlohmann::json& j, const std::string& source) {
  if (!j.is_object()) throw_input("{}: expected a JSON object, found a {}", source, j.type_name());
  for (const Family* f : registered_families()) {
    if (f->reads_config_json(j)) return *f;
  }
  throw_input("{}: model_type is {}; weft reads the model types of its families ({})", source,
              j.contains("model_type") ? j.at("model_type").dump() : "missing", family_names());
}

float Family::init_value(const ModelConfig& cfg, const ParamTensor& t, int64_t index) const {
  throw_input("model '{}' ({}): tensor {} asks for the family's initial values, which the family does not give "
              "(element {})",
              cfg.name, name(), t.name, index);
}

std::string Family::describe_shape(const ModelConfig& c) const {
  return fmt::format("{} layers, {} heads, hidden {}, context {}", c.n_layer, c.n_head, c.n_embd, c.n_ctx);
}

double setting_number(const std::string& key, const std::string& v) {
  size_t used = 0;
  double d = 0.0;
  try {
    d = std::stod(v, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != v.size() || v.empty() || !std::isfinite(d)) throw_input("[model] {} must be a number, got '{}'", key, v);
  return d;
}

int setting_int(const std::string& key, const std::string& v, int max) {
  const double d = setting_number(key, v);
  if (d != std::floor(d) || d < 1 || d > max) throw_input("[model] {} must be an integer in 1-{}, got '{}'", key, max, v);
  return static_cast<int>(d);
}

bool setting_bool(const std::string& key, const std::string& v) {
  if (v == "true") return true;
  if (v == "false") return false;
  throw_input("[model] {} must be true or false, got '{}'", key, v);
}

ModelConfig Family::with_settings(const ModelConfig& base, const std::map<std::string, std::string>& settings) const {
  if (settings.empty()) return base;
  const std::vector<std::string> known = setting_names();
  for (const auto& [key, value] : settings) {
    if (std::find(known.begin(), known.end(), key) == known.end()) {
      throw_input("[model] key '{}' ({}) is not a setting of model '{}' ({} models take {})", key, value, base.name,
                  capabilities().family, known.empty() ? std::string("none beyond the shape keys") : fmt::format("{}", fmt::join(known, ", ")));
    }
  }
  throw_input("model '{}' ({}): the family lists settings it does not apply", base.name, name());
}

std::unique_ptr<Model> make_model(const ModelConfig& cfg, Backend& backend, bool local_store, int tp_size, int tp_rank,
                                  const StageSpec& stage) {
  return cfg.family->make_model(cfg, backend, local_store, tp_size, tp_rank, stage);
}

double pipeline_head_cost(const ModelConfig& cfg) { return cfg.family->pipeline_head_cost(cfg); }

int64_t fixed_positions(const ModelConfig& cfg) { return cfg.family->fixed_positions(cfg); }

}  // namespace weft
