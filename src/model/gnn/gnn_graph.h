// A GraphBatch (data/atoms/graph_batch.h) as the graph network reads it: the index arrays of the
// segment ops (receivers' CSR, the edges permuted by source, the nodes grouped by species for the
// embedding's backward, graphs' node ranges) and the edge features of the layer type, computed on
// the host from the positions, cells and shifts, and the normalised targets (docs/model-gnn.md).
#pragma once
#include <cstdint>
#include <vector>

#include "data/atoms/graph_batch.h"
#include "model/gnn/gnn_config.h"

namespace weft {

struct GnnHostGraph {
  int64_t N = 0, E = 0, G = 0;
  std::vector<int32_t> species, source, receiver;        // N, E, E
  std::vector<int32_t> recv_offsets, src_perm, src_offsets;  // N + 1, E, N + 1
  std::vector<int32_t> species_perm, species_offsets;    // N, kGnnSpecies + 1
  std::vector<int32_t> graph_offsets;                     // G + 1
  std::vector<float> rbf, cutoff, dist2;                  // E x num_gaussians (SchNet, PNA), E, E (EGNN)
  std::vector<float> degree_scalers;                      // 3 x N (PNA): amplification, attenuation, linear
  std::vector<float> dist, unit;                          // E, 3E: the force head's distance and direction
  std::vector<float> energy, forces;                      // G, 3N normalised targets (when labelled)
  std::vector<float> atoms;                               // G: atoms per graph
  bool has_energy = false, has_forces = false;
};

// The edge vectors pos[source] + shift - pos[receiver] of a batch (3 per edge, Angstrom).
std::vector<double> edge_vectors(const GraphBatch& b);

// SchNet's Gaussian basis (PyG's GaussianSmearing: G centres evenly on [0, r_c], width the
// spacing) and the cosine cutoff 0.5 (cos(pi d / r_c) + 1) (0 from r_c on), at distance d.
void schnet_features(double d, const GnnFields& f, float* rbf_row, float* cutoff);

// PNA's degree scalers (Corso et al. 2020; PyG's DegreeScalerAggregation) of each node from its
// in-degree d: log(d + 1) / delta, delta / log(max(d, 1) + 1), d / delta_lin (PyG clamps only the
// attenuation's; a node without in-edges aggregates zeros anyway), as three rows of N.
std::vector<float> pna_degree_scalers(const std::vector<int32_t>& recv_offsets, const GnnFields& f);

GnnHostGraph build_host_graph(const GraphBatch& b, const GnnFields& f);

}  // namespace weft
