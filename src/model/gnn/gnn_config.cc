#include "model/gnn/gnn_config.h"

#include <memory>

#include "core/error.h"

namespace weft {

ModelConfig with_gnn_fields(ModelConfig cfg, const GnnFields& f) {
  cfg.own = std::make_shared<GnnFields>(f);
  return cfg;
}

namespace {
template <class E, size_t N>
E parse_name(const std::string& s, const std::pair<const char*, E> (&names)[N], const char* what) {
  std::string known;
  for (const auto& [n, v] : names) {
    if (s == n) return v;
    known += (known.empty() ? "" : ", ") + std::string(n);
  }
  throw_input("unknown {} '{}' (known: {})", what, s, known);
}
template <class E, size_t N>
const char* name_of(E v, const std::pair<const char*, E> (&names)[N]) {
  for (const auto& [n, x] : names) {
    if (x == v) return n;
  }
  return "?";
}
constexpr std::pair<const char*, GnnLayer> kLayers[] = {
    {"schnet", GnnLayer::kSchnet}, {"egnn", GnnLayer::kEgnn}, {"pna", GnnLayer::kPna}};
constexpr std::pair<const char*, GnnPooling> kPoolings[] = {{"mean", GnnPooling::kMean}, {"add", GnnPooling::kAdd}};
constexpr std::pair<const char*, Activation> kActivations[] = {
    {"relu", Activation::kRelu}, {"silu", Activation::kSilu}, {"ssp", Activation::kShiftedSoftplus}};
}  // namespace

const char* gnn_layer_name(GnnLayer l) { return name_of(l, kLayers); }
GnnLayer parse_gnn_layer(const std::string& s) { return parse_name(s, kLayers, "graph layer"); }
const char* gnn_pooling_name(GnnPooling p) { return name_of(p, kPoolings); }
GnnPooling parse_gnn_pooling(const std::string& s) { return parse_name(s, kPoolings, "graph pooling"); }
Activation parse_activation(const std::string& s) { return parse_name(s, kActivations, "activation"); }

std::pair<double, double> gnn_task_weights(const GnnFields& f) {
  const double sum = f.energy_weight + f.forces_weight;
  return {f.energy_weight / sum, f.forces_weight / sum};
}

}  // namespace weft
