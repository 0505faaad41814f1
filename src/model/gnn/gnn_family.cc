// The graph-network family (issue 33): presets, validation, config.json, the parameter table and
// the registry's Family object. docs/model-gnn.md.
#include <cmath>
#include <map>
#include <optional>
#include <stdexcept>

#include <fmt/format.h>

#include "core/error.h"
#include "data/atoms/graph_batch.h"
#include "model/config_json.h"
#include "model/family.h"
#include "model/gnn/gnn.h"
#include "model/gnn/gnn_config.h"
#include "model/gnn/gnn_description.h"

namespace weft {
namespace {

struct GnnPreset {
  const char* name;
  GnnLayer layer;
  int layers, hidden, head_hidden;
  double cutoff;
  int max_atoms, max_neighbours;
};

// gnn-tiny, gnn-egnn-tiny, gnn-pna-tiny: the tests' size. gnn-lj / gnn-egnn-lj: configs/gnn-lj.toml's model on the Lennard-Jones
// set (8-216 atoms, r_c 5). hydragnn-gfm-egnn: HydraGNN's GFM baseline (EGNN 4 x 866, r_c 5, at
// most 20 neighbours; examples/multibranch/baseline_GFM260.json).
constexpr GnnPreset kPresets[] = {
    {"gnn-tiny", GnnLayer::kSchnet, 2, 16, 16, 5.0, 32, 16},
    {"gnn-egnn-tiny", GnnLayer::kEgnn, 2, 16, 16, 5.0, 32, 16},
    {"gnn-lj", GnnLayer::kSchnet, 3, 64, 64, 5.0, 216, 32},
    {"gnn-egnn-lj", GnnLayer::kEgnn, 3, 64, 64, 5.0, 216, 32},
    {"gnn-pna-tiny", GnnLayer::kPna, 2, 16, 16, 5.0, 32, 16},
    {"gnn-pna-lj", GnnLayer::kPna, 3, 64, 64, 5.0, 216, 32},
    {"hydragnn-gfm-egnn", GnnLayer::kEgnn, 4, 866, 866, 5.0, 256, 20},
};

ModelConfig make_preset(const GnnPreset& p, const Family* family) {
  ModelConfig c;
  c.name = p.name;
  c.family = family;
  c.n_layer = p.layers, c.n_embd = p.hidden, c.ffn = p.head_hidden;
  c.n_head = 1, c.n_ctx = p.max_atoms, c.vocab_size = 0, c.padded_vocab = 0;
  c.init_std = 1.0f;  // the species embedding's (torch.nn.Embedding's N(0, 1)); matrices use 1/sqrt(fan-in)
  GnnFields f;
  f.layer = p.layer;
  f.cutoff = p.cutoff;
  f.max_atoms = p.max_atoms;
  f.max_neighbours = p.max_neighbours;
  return with_gnn_fields(c, f);
}

// A normal matrix of fan-in `in` (LeCun: std 1/sqrt(in)).
ParamSpec matrix(std::string name, int64_t in, int64_t out, int64_t fan_in = 0) {
  ParamSpec s(std::move(name), 0, {in, out}, TpSplit::kReplicated, true, ParamInit::kNormal);
  s.std = static_cast<float>(1.0 / std::sqrt(static_cast<double>(fan_in > 0 ? fan_in : in)));
  return s;
}
ParamSpec bias(std::string name, int64_t n) {
  return ParamSpec(std::move(name), 0, {n}, TpSplit::kReplicated, false, ParamInit::kZeros);
}

std::vector<ParamSpec> layer_specs(const ModelConfig& cfg, int l) {
  const GnnFields& f = gnn_fields(cfg);
  const int64_t C = cfg.n_embd;
  const std::string p = fmt::format("convs.{}.", l);
  switch (f.layer) {
    case GnnLayer::kSchnet:
      return {matrix(p + "filter.0.weight", f.num_gaussians, C), bias(p + "filter.0.bias", C),
              matrix(p + "filter.2.weight", C, C),                bias(p + "filter.2.bias", C),
              matrix(p + "lin1.weight", C, C),                    matrix(p + "lin2.weight", C, C),
              bias(p + "lin2.bias", C)};
    case GnnLayer::kEgnn:
      return {matrix(p + "edge_mlp.0.weight_receiver", C, C, 2 * C + 1),
              matrix(p + "edge_mlp.0.weight_source", C, C, 2 * C + 1),
              matrix(p + "edge_mlp.0.weight_radial", 1, C, 2 * C + 1),
              bias(p + "edge_mlp.0.bias", C),
              matrix(p + "edge_mlp.2.weight", C, C),
              bias(p + "edge_mlp.2.bias", C),
              matrix(p + "node_mlp.0.weight_node", C, C, 2 * C),
              matrix(p + "node_mlp.0.weight_message", C, C, 2 * C),
              bias(p + "node_mlp.0.bias", C),
              matrix(p + "node_mlp.2.weight", C, C),
              bias(p + "node_mlp.2.bias", C)};
    case GnnLayer::kPna: {
      const int64_t G = f.num_gaussians;
      ParamSpec norm_w(p + "norm.weight", 0, {C}, TpSplit::kReplicated, false, ParamInit::kOnes);
      ParamSpec mean(p + "norm.running_mean", 0, {C}, TpSplit::kReplicated, false, ParamInit::kZeros);
      ParamSpec var(p + "norm.running_var", 0, {C}, TpSplit::kReplicated, false, ParamInit::kOnes);
      mean.statistic_momentum = var.statistic_momentum = 0.1f;  // torch.nn.BatchNorm1d's momentum
      return {matrix(p + "edge_encoder.weight", G, C), bias(p + "edge_encoder.bias", C),
              matrix(p + "pre_nns.0.0.weight", 3 * C, C), bias(p + "pre_nns.0.0.bias", C),
              matrix(p + "post_nns.0.0.weight", 17 * C, C), matrix(p + "lin.weight", C, C),
              norm_w, bias(p + "norm.bias", C), mean, var};
    }
  }
  throw_input("model '{}': graph layer '{}' is not available", cfg.name, gnn_layer_name(f.layer));
}

ParamTable gnn_param_table(const ModelConfig& cfg) {
  const int64_t C = cfg.n_embd, H = cfg.ffn;
  ParamTable t;
  t.front = {ParamSpec("embedding.weight", 0, {kGnnSpecies, C}, TpSplit::kReplicated, true, ParamInit::kNormal)};
  for (int l = 0; l < cfg.n_layer; ++l) t.layers.push_back(layer_specs(cfg, l));
  t.back = {matrix("heads.energy.0.weight", C, H), bias("heads.energy.0.bias", H),
            matrix("heads.energy.2.weight", H, 1), bias("heads.energy.2.bias", 1),
            matrix("heads.forces.0.weight_receiver", C, H, 2 * C + 1),
            matrix("heads.forces.0.weight_source", C, H, 2 * C + 1),
            matrix("heads.forces.0.weight_distance", 1, H, 2 * C + 1), bias("heads.forces.0.bias", H),
            matrix("heads.forces.2.weight", H, 1), bias("heads.forces.2.bias", 1)};
  return t;
}

nlohmann::ordered_json gnn_config_json(const ModelConfig& cfg) {
  const GnnFields& f = gnn_fields(cfg);
  nlohmann::ordered_json j;
  j["model_type"] = "gnn";
  j["mpnn_type"] = gnn_layer_name(f.layer);
  j["num_conv_layers"] = cfg.n_layer;
  j["hidden_dim"] = cfg.n_embd;
  j["head_hidden_dim"] = cfg.ffn;
  j["activation_function"] = activation_name(f.activation);
  j["radius"] = f.cutoff;
  j["num_gaussians"] = f.num_gaussians;
  j["graph_pooling"] = gnn_pooling_name(f.pooling);
  j["task_weights"] = {{"energy", f.energy_weight}, {"forces", f.forces_weight}};
  j["normalisation"] = {{"energy_per_atom_mean", f.energy_mean}, {"energy_per_atom_std", f.energy_std},
                        {"force_scale", f.force_scale}};
  j["max_atoms"] = f.max_atoms;
  j["max_neighbours"] = f.max_neighbours;
  j["data_means"] = {{"in_degree", f.mean_in_degree}, {"atoms", f.mean_atoms}};
  j["pna_delta"] = {f.pna_delta, f.pna_delta_lin};
  j["initializer_range"] = float_for_json(cfg.init_std);
  j["torch_dtype"] = "float32";
  j["weft"] = {{"name", cfg.name}};
  return j;
}

double json_number(const nlohmann::json& j, const char* key, const std::string& source) {
  if (!j.contains(key) || !j.at(key).is_number()) throw_input("{}: key '{}' must be a number", source, key);
  const double v = j.at(key).get<double>();
  if (!std::isfinite(v)) throw_input("{}: key '{}' is not finite", source, key);
  return v;
}
std::string json_string(const nlohmann::json& j, const char* key, const std::string& source) {
  if (!j.contains(key) || !j.at(key).is_string()) throw_input("{}: key '{}' must be a string", source, key);
  return j.at(key).get<std::string>();
}
const nlohmann::json& json_object(const nlohmann::json& j, const char* key, const std::string& source) {
  if (!j.contains(key) || !j.at(key).is_object()) throw_input("{}: key '{}' must be an object", source, key);
  return j.at(key);
}

ModelConfig gnn_from_config_json(const nlohmann::json& j, const std::string& source, const Family* family) {
  try {
    ModelConfig c;
    c.family = family;
    c.name = "gnn";
    if (j.contains("weft") && j.at("weft").is_object() && j.at("weft").contains("name") &&
        j.at("weft").at("name").is_string()) {
      c.name = j.at("weft").at("name").get<std::string>();
    }
    c.n_layer = json_int(j, "num_conv_layers", source, kMaxJsonLayers);
    c.n_embd = json_int(j, "hidden_dim", source, kMaxJsonWidth);
    c.ffn = json_int(j, "head_hidden_dim", source, kMaxJsonWidth);
    c.n_head = 1, c.vocab_size = 0, c.padded_vocab = 0;
    GnnFields f;
    f.layer = parse_gnn_layer(json_string(j, "mpnn_type", source));
    f.activation = parse_activation(json_string(j, "activation_function", source));
    f.cutoff = json_number(j, "radius", source);
    f.num_gaussians = json_int(j, "num_gaussians", source, kMaxJsonWidth);
    f.pooling = parse_gnn_pooling(json_string(j, "graph_pooling", source));
    const auto& w = json_object(j, "task_weights", source);
    f.energy_weight = json_number(w, "energy", source + ": task_weights");
    f.forces_weight = json_number(w, "forces", source + ": task_weights");
    const auto& n = json_object(j, "normalisation", source);
    f.energy_mean = json_number(n, "energy_per_atom_mean", source + ": normalisation");
    f.energy_std = json_number(n, "energy_per_atom_std", source + ": normalisation");
    f.force_scale = json_number(n, "force_scale", source + ": normalisation");
    f.max_atoms = json_int(j, "max_atoms", source, kMaxJsonContext);
    f.max_neighbours = json_int(j, "max_neighbours", source, kMaxJsonContext);
    if (j.contains("data_means")) {
      const auto& d = json_object(j, "data_means", source);
      f.mean_in_degree = json_number(d, "in_degree", source + ": data_means");
      f.mean_atoms = json_number(d, "atoms", source + ": data_means");
    }
    if (j.contains("pna_delta")) {
      const auto& d = j.at("pna_delta");
      if (!d.is_array() || d.size() != 2 || !d[0].is_number() || !d[1].is_number()) {
        throw_input("key 'pna_delta' must be [delta, delta_lin]");
      }
      f.pna_delta = d[0].get<double>(), f.pna_delta_lin = d[1].get<double>();
    }
    if (j.contains("initializer_range") && j.at("initializer_range").is_number()) {
      c.init_std = static_cast<float>(j.at("initializer_range").get<double>());
    }
    c.n_ctx = f.max_atoms;
    c = with_gnn_fields(c, f);
    c.validate();
    return c;
  } catch (const InputError& e) {
    const std::string what = e.what();
    if (what.rfind(source, 0) == 0) throw;
    throw_input("{}: {}", source, what);
  }
}

class GnnFamily final : public Family {
 public:
  const char* name() const override { return "gnn"; }
  // Data parallelism only (with ZeRO and HSDP): the graphs of a micro-batch are not cut between
  // ranks, the layers are not stages, there is no sequence and nothing to generate.
  const ModelCapabilities& capabilities() const override {
    static const ModelCapabilities caps{
        .family = "graph network",
        .tensor_parallel = false,
        .transformer_blocks = false,
        .pipeline_stages = false,
        .sequence_parallel = false,
        .full_recompute = false,
        .selective_recompute = false,
        .mixed_precision = false,
        .causal_attention = false,
        .sparse_embedding_grads = false,
        .tied_head = false,
        .generation = false,
        .residual_stream_16 = false,
        .block_variants = false,
        .data_source = "graphs",
        .generation_note = "it predicts energies and forces of atomic structures; weft eval reports their errors "
                           "(docs/model-gnn.md)",
        .front_ops = "species embedding and message-passing layers",
        .back_ops = "energy and force heads",
        .plan_legend = "times in seconds per step; positions are atoms; memory in GB per device"};
    return caps;
  }

  std::vector<std::string> preset_names() const override {
    std::vector<std::string> names;
    for (const auto& p : kPresets) names.emplace_back(p.name);
    return names;
  }
  std::optional<ModelConfig> preset(const std::string& name) const override {
    for (const auto& p : kPresets) {
      if (name == p.name) return make_preset(p, this);
    }
    return std::nullopt;
  }
  void validate(const ModelConfig& c) const override {
    const GnnFields& f = gnn_fields(c);
    if (c.n_layer <= 0 || c.n_embd <= 0 || c.ffn <= 0 || f.max_atoms <= 0 || f.max_neighbours <= 0) {
      throw_input("model '{}': every size must be positive (layers {}, hidden {}, head hidden {}, max atoms {}, max "
                  "neighbours {})",
                  c.name, c.n_layer, c.n_embd, c.ffn, f.max_atoms, f.max_neighbours);
    }
    if (!(f.cutoff > 0.0) || (f.layer != GnnLayer::kEgnn && f.num_gaussians < 2)) {
      throw_input("model '{}': the radius must be positive and SchNet and PNA need at least 2 Gaussians (radius {}, {})",
                  c.name, f.cutoff, f.num_gaussians);
    }
    if (f.layer == GnnLayer::kPna && !(f.pna_delta > 0.0 && f.pna_delta_lin > 0.0 && std::isfinite(f.pna_delta) &&
                                       std::isfinite(f.pna_delta_lin))) {
      throw_input("model '{}': PNA's degree scalers need positive mean in-degrees (pna_delta {}, pna_delta_lin {})",
                  c.name, f.pna_delta, f.pna_delta_lin);
    }
    if (!(f.energy_weight >= 0.0) || !(f.forces_weight >= 0.0) || !(f.energy_weight + f.forces_weight > 0.0)) {
      throw_input("model '{}': task weights must be non-negative with a positive sum (energy {}, forces {})", c.name,
                  f.energy_weight, f.forces_weight);
    }
    if (!(f.energy_std > 0.0) || !(f.force_scale > 0.0) || !std::isfinite(f.energy_mean)) {
      throw_input("model '{}': the normalisation needs a positive energy std and force scale (mean {}, std {}, force "
                  "scale {})",
                  c.name, f.energy_mean, f.energy_std, f.force_scale);
    }
  }
  // The layers, the width (the heads follow it unless ffn is given) and the heads' width.
  ModelConfig with_overrides(const ModelConfig& base, const ShapeOverrides& o) const override {
    if (!o.any()) return base;
    if (o.n_head != 0 || o.n_ctx != 0 || o.vocab_size != 0) {
      throw_input("n_head {}, n_ctx {} and vocab_size {} do not apply to the graph network '{}'", o.n_head, o.n_ctx,
                  o.vocab_size, base.name);
    }
    ModelConfig c = base;
    c.n_layer = ShapeOverrides::pick(o.n_layer, base.n_layer);
    c.n_embd = ShapeOverrides::pick(o.n_embd, base.n_embd);
    c.ffn = o.ffn > 0 ? static_cast<int>(o.ffn) : o.n_embd > 0 ? c.n_embd : base.ffn;
    return c;
  }

  std::vector<std::string> setting_names() const override {
    return {"layer", "activation", "pooling", "num_gaussians", "head_hidden", "energy_weight", "forces_weight",
            "max_atoms", "max_neighbours", "radius", "energy_mean", "energy_std", "force_scale", "mean_in_degree", "mean_atoms",
            "pna_delta", "pna_delta_lin"};
  }
  ModelConfig with_settings(const ModelConfig& base, const std::map<std::string, std::string>& settings) const override {
    if (settings.empty()) return base;
    ModelConfig c = base;
    GnnFields f = gnn_fields(base);
    for (const auto& [key, v] : settings) {
      if (key == "layer") f.layer = parse_gnn_layer(v);
      else if (key == "activation") f.activation = parse_activation(v);
      else if (key == "pooling") f.pooling = parse_gnn_pooling(v);
      else if (key == "num_gaussians") f.num_gaussians = setting_int(key, v, kMaxJsonWidth);
      else if (key == "head_hidden") c.ffn = setting_int(key, v, kMaxJsonWidth);
      else if (key == "energy_weight") f.energy_weight = setting_number(key, v);
      else if (key == "forces_weight") f.forces_weight = setting_number(key, v);
      else if (key == "max_atoms") f.max_atoms = setting_int(key, v, kMaxJsonContext);
      else if (key == "max_neighbours") f.max_neighbours = setting_int(key, v, kMaxJsonContext);
      else if (key == "radius") f.cutoff = setting_number(key, v);
      else if (key == "energy_mean") f.energy_mean = setting_number(key, v);
      else if (key == "energy_std") f.energy_std = setting_number(key, v);
      else if (key == "force_scale") f.force_scale = setting_number(key, v);
      else if (key == "mean_in_degree") f.mean_in_degree = setting_number(key, v);
      else if (key == "mean_atoms") f.mean_atoms = setting_number(key, v);
      else if (key == "pna_delta") f.pna_delta = setting_number(key, v);
      else if (key == "pna_delta_lin") f.pna_delta_lin = setting_number(key, v);
      else return Family::with_settings(base, {{key, v}});  // names the key and the settings
    }
    c.n_ctx = f.max_atoms;
    c = with_gnn_fields(c, f);
    c.validate();
    return c;
  }

  std::string describe_shape(const ModelConfig& c) const override {
    const GnnFields& f = gnn_fields(c);
    return fmt::format("{} x {} {} layers, heads of {}, {}, radius {} A, up to {} atoms and {} neighbours a structure",
                       c.n_layer, c.n_embd, gnn_layer_name(f.layer), c.ffn, activation_name(f.activation), f.cutoff,
                       f.max_atoms, f.max_neighbours);
  }
  bool reads_config_json(const nlohmann::json& j) const override {
    return j.contains("model_type") && j.at("model_type") == "gnn";
  }
  ModelConfig from_config_json(const nlohmann::json& j, const std::string& source) const override {
    return gnn_from_config_json(j, source, this);
  }
  nlohmann::ordered_json to_config_json(const ModelConfig& cfg) const override { return gnn_config_json(cfg); }
  ParamTable param_table(const ModelConfig& cfg) const override { return gnn_param_table(cfg); }

  std::unique_ptr<Model> make_model(const ModelConfig& cfg, Backend& backend, bool local_store, int tp_size, int,
                                    const StageSpec&) const override {
    if (tp_size != 1) throw_input("graph network models run without tensor parallelism: tp must be 1, got {}", tp_size);
    return std::make_unique<GnnModel>(cfg, backend, local_store);
  }
  // Up to `capacity` graphs of at most max_atoms atoms, each atom with at most max_neighbours
  // in-edges.
  std::unique_ptr<HostBatch> make_batch(const ModelConfig& cfg, int64_t capacity, int64_t) const override {
    const GnnCapacity c = gnn_capacity(cfg, capacity);
    return std::make_unique<GraphBatch>(GraphBudget{c.N, c.E, c.G});
  }
  std::unique_ptr<ModelDescription> describe(const RunSpec& spec) const override { return describe_gnn(spec); }
  double train_flops_per_position(const ModelConfig& cfg, int64_t) const override {
    RunSpec spec;
    spec.model = cfg;
    return describe_gnn(spec)->train_flops_per_position();
  }
};

}  // namespace

const Family& gnn_family() {
  static const GnnFamily family;
  return family;
}

}  // namespace weft
