// A run's engine from its config: the layout (validated), the model chunking, ZeRO, recompute,
// precision, optimizer and loss scaling settings.
#pragma once
#include "engine/engine.h"
#include "train/config.h"

namespace weft {

// dp is derived as world / (tp x pp) when the config leaves it 0. InputError naming the
// values for a layout that does not divide or is not supported.
EngineConfig engine_config(const RunConfig& cfg, int world_size);
// The same for a model given apart from the config's preset (a checkpoint's).
EngineConfig engine_config(const RunConfig& cfg, const ModelConfig& model, int world_size);

}  // namespace weft
