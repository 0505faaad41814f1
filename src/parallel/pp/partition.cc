#include "parallel/pp/partition.h"

#include <fmt/ranges.h>

#include <numeric>

#include "core/error.h"

namespace weft {

int chunk_stage(int chunk, int stages) {
  if (stages < 1) throw_input("pipeline needs at least 1 stage, got {}", stages);
  if (chunk < 0) throw_input("model chunk index must be >= 0, got {}", chunk);
  return chunk % stages;
}

int global_chunk(int stage, int local_chunk, int stages) {
  if (stages < 1) throw_input("pipeline needs at least 1 stage, got {}", stages);
  if (stage < 0 || stage >= stages)
    throw_input("pipeline stage {} is out of range for {} stages", stage, stages);
  if (local_chunk < 0) throw_input("virtual chunk index must be >= 0, got {}", local_chunk);
  return local_chunk * stages + stage;
}

std::vector<StageRange> partition_layers(int n_layer, int stages, int virtual_stages,
                                         const std::vector<int>& override_layers,
                                         double head_cost_in_layers) {
  if (stages < 1) throw_input("pipeline needs at least 1 stage, got {}", stages);
  if (virtual_stages < 1)
    throw_input("pipeline needs at least 1 virtual stage per stage, got {}", virtual_stages);
  const int chunks = stages * virtual_stages;
  // One chunk is the whole model, whatever its layers (a family may have none: its front and
  // back groups only).
  if (chunks == 1 && override_layers.empty() && n_layer == 0 && head_cost_in_layers >= 0) {
    return {StageRange{0, 0, true, true}};
  }
  if (n_layer < chunks)
    throw_input(
        "pipeline of {} stages x {} virtual stages needs at least {} layers, the model has {}",
        stages, virtual_stages, chunks, n_layer);
  if (!(head_cost_in_layers >= 0))
    throw_input("head cost must be >= 0 layers, got {}", head_cost_in_layers);

  std::vector<int> counts;
  if (!override_layers.empty()) {
    if (static_cast<int>(override_layers.size()) != chunks)
      throw_input(
          "pipeline layer override has {} entries, the pipeline has {} stages x {} virtual "
          "stages = {} chunks",
          override_layers.size(), stages, virtual_stages, chunks);
    for (size_t c = 0; c < override_layers.size(); ++c) {
      if (override_layers[c] < 1)
        throw_input("pipeline layer override gives chunk {} {} layers, every chunk needs >= 1",
                    c, override_layers[c]);
    }
    const long sum = std::accumulate(override_layers.begin(), override_layers.end(), 0L);
    if (sum != n_layer)
      throw_input("pipeline layer override [{}] sums to {} layers, the model has {}",
                  fmt::join(override_layers, ", "), sum, n_layer);
    counts = override_layers;
  } else {
    counts.assign(chunks, n_layer / chunks);
    for (int c = 0; c < n_layer % chunks; ++c) ++counts[c];
    // Move layers off the last chunk while that lowers the pair's peak cost (see header).
    for (;;) {
      int& last = counts.back();
      int min_c = 0;
      for (int c = 1; c < chunks - 1; ++c)
        if (counts[c] < counts[min_c]) min_c = c;
      if (chunks == 1 || last <= 1 || !(counts[min_c] + 1 < last + head_cost_in_layers)) break;
      --last;
      ++counts[min_c];
    }
  }

  std::vector<StageRange> out(chunks);
  int first = 0;
  for (int c = 0; c < chunks; ++c) {
    out[c].first_layer = first;
    out[c].num_layers = counts[c];
    out[c].has_embedding = c == 0;
    out[c].has_head = c == chunks - 1;
    first += counts[c];
  }
  return out;
}

}  // namespace weft
