// What the layers above the model need of a family that is not a plain fact (those are its
// ModelCapabilities, model/config.h): the model itself, the output head's share of a pipeline
// partition, the positions per sample it fixes. Dispatched here, inside src/model/, so that no
// engine, trainer or planner file tests which family a model is (issue 31: the start of the
// family registry).
#pragma once
#include <cstdint>
#include <memory>

#include "model/config.h"
#include "model/model.h"

namespace weft {

class Backend;

// The family's model of `cfg` for tensor-parallel part tp_rank of tp_size, holding the layers
// of `stage` (a family without pipeline stages takes the whole model).
std::unique_ptr<Model> make_model(const ModelConfig& cfg, Backend& backend, bool local_store, int tp_size, int tp_rank,
                                  const StageSpec& stage);

// The output head (and loss) as a cost in transformer layers, for partition_layers: the GPT's
// vocabulary head counts Vp / (12 C) layers; 0 for a family without pipeline stages.
double pipeline_head_cost(const ModelConfig& cfg);

// The positions of one sample when the model fixes them (ClimaX: its patches), else 0 (the run's
// seq_len decides: GPT).
int64_t fixed_positions(const ModelConfig& cfg);

}  // namespace weft
