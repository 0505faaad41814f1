// The graph-network family's settings (issue 33; HydraGNN, Lupo Pasini et al., seed 003):
// ModelConfig::n_layer message-passing layers of width n_embd (hidden), ModelConfig::ffn the
// heads' hidden width; the rest here (ModelConfig::own). The family registers itself in
// model/families.cc; docs/model-gnn.md writes out every equation with its source.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "model/config.h"

namespace weft {

class Family;
const Family& gnn_family();

// The message-passing layer (HydraGNN's mpnn_type).
enum class GnnLayer { kSchnet, kEgnn, kPna };
// How a graph's node states become the energy head's input (HydraGNN's graph_pooling).
enum class GnnPooling { kMean, kAdd };

// Rows of the species embedding: atomic numbers 0..118 (0 is never used by a structure).
inline constexpr int64_t kGnnSpecies = 119;

struct GnnFields final : FamilyFields {
  GnnLayer layer = GnnLayer::kSchnet;
  Activation activation = Activation::kSilu;  // after every layer and inside the heads
  double cutoff = 5.0;        // r_c, Angstrom: the graph's radius and SchNet's cosine cutoff
  int num_gaussians = 32;     // SchNet's radial basis on [0, r_c]
  GnnPooling pooling = GnnPooling::kMean;
  // The loss: task weights (normalised to sum to 1, as HydraGNN) of the graph-level energy (per
  // atom) and the node-level forces.
  double energy_weight = 1.0, forces_weight = 1.0;
  // The targets' normalisation (the training split's statistics, manifest.json): the energy head
  // predicts (E / atoms - energy_mean) / energy_std, the force head F / force_scale.
  double energy_mean = 0.0, energy_std = 1.0, force_scale = 1.0;
  // A micro-batch's capacity per graph: atoms, and receivers' in-edges (the graph's max_neighbours).
  int max_atoms = 64;
  int max_neighbours = 32;
  // The data's mean in-degree (edges per atom) and atoms per structure, for the FLOPs per atom
  // (0: the capacity's max_neighbours and max_atoms). The data source sets them.
  double mean_in_degree = 0.0, mean_atoms = 0.0;
  // PNA's degree scalers: delta = mean of log(d + 1), delta_lin = mean of d over the training
  // split's in-degrees (Corso et al. 2020; PyG's PNAConv).
  double pna_delta = 1.0, pna_delta_lin = 1.0;
};

inline const GnnFields& gnn_fields(const ModelConfig& cfg) { return cfg.own_as<GnnFields>(); }
// The config with new own settings (a new struct: the old one may be shared).
ModelConfig with_gnn_fields(ModelConfig cfg, const GnnFields& f);

// Names in configs and config.json ("schnet", "egnn", "pna"; "mean", "add"; "relu", "silu",
// "ssp"), and the parsers (InputError listing the known names).
const char* gnn_layer_name(GnnLayer l);
GnnLayer parse_gnn_layer(const std::string& s);
const char* gnn_pooling_name(GnnPooling p);
GnnPooling parse_gnn_pooling(const std::string& s);
Activation parse_activation(const std::string& s);

// The task weights normalised to sum to 1: {energy, forces}.
std::pair<double, double> gnn_task_weights(const GnnFields& f);

}  // namespace weft
