#include "model/family.h"

#include "model/climax.h"
#include "model/gpt.h"
#include "parallel/pp/partition.h"

namespace weft {

std::unique_ptr<Model> make_model(const ModelConfig& cfg, Backend& backend, bool local_store, int tp_size, int tp_rank,
                                  const StageSpec& stage) {
  if (cfg.is_climax()) return std::make_unique<ClimaX>(cfg, backend, local_store, tp_size, tp_rank);
  return std::make_unique<GPT>(cfg, backend, local_store, tp_size, tp_rank, stage);
}

double pipeline_head_cost(const ModelConfig& cfg) {
  return cfg.is_climax() ? 0.0 : gpt_head_cost_in_layers(cfg.padded_vocab, cfg.n_embd);
}

int64_t fixed_positions(const ModelConfig& cfg) { return cfg.is_climax() ? cfg.num_patches() : 0; }

}  // namespace weft
