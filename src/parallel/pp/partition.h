// Pipeline partition: which transformer layers each pipeline model chunk owns.
//
// L layers are split over K = stages * virtual_stages model chunks, in model order (chunk 0
// holds layers [0, n0), chunk 1 the next n1, ...). Chunk 0 also carries the token/position
// embedding, chunk K-1 the final layer norm, the output head and the loss.
//
// Balance. Every layer costs 1; the embedding is free; the head + loss costs
// `head_cost_in_layers` (h >= 0, default 0). The split starts from the even split
// n_c = L/K, with the L%K extra layers on the first chunks (0, 1, ...), and then, while the
// last chunk keeps at least one layer and n_min + 1 < n_last + h, moves one layer from the
// last chunk to the first chunk with the fewest layers. Each move lowers the larger cost of
// the two chunks involved, so it never raises the peak cost. With h = 0 this is exactly the
// even split; e.g. L=8, K=4, h=1.5 gives 3,2,2,1 (costs 3,2,2,2.5).
//
// Virtual stages (Megatron's interleaved assignment, Narayanan et al. 2021 sec. 2.2): chunk c
// lives on pipeline stage c % stages, as that stage's local chunk c / stages. With
// stages=2, virtual_stages=2 and 8 layers: stage 0 holds layers 0-1 and 4-5, stage 1 holds
// 2-3 and 6-7.
//
// `override_layers` (size K, every entry >= 1, sum L) pins the layer counts per chunk.
#pragma once
#include <cstdint>
#include <vector>

namespace weft {

struct StageRange {
  int first_layer = 0;  // index of the chunk's first layer in the model
  int num_layers = 0;
  bool has_embedding = false;  // chunk 0
  bool has_head = false;       // chunk K-1: final norm, output head, loss
};

// One entry per model chunk, in model order (global chunk index c = 0..K-1).
// InputError (with the numbers) for stages < 1, virtual_stages < 1, L < K, a negative head
// cost, or an override of the wrong size, with an entry < 1, or not summing to L.
std::vector<StageRange> partition_layers(int n_layer, int stages, int virtual_stages = 1,
                                         const std::vector<int>& override_layers = {},
                                         double head_cost_in_layers = 0);

// The pipeline stage that owns global chunk c: c % stages.
int chunk_stage(int chunk, int stages);
// The global chunk index of local chunk `local_chunk` (0..v-1) on `stage`:
// local_chunk * stages + stage.
int global_chunk(int stage, int local_chunk, int stages);

}  // namespace weft
