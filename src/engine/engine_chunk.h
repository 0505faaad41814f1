// Engine internals shared by engine.cc and engine_state.cc: one model chunk with its store
// and optimizer shard.
#pragma once
#include <memory>

#include "engine/engine.h"
#include "model/model.h"

namespace weft {

struct Engine::Chunk {
  int global = 0;  // global chunk index (0..K-1)
  StageSpec spec;
  std::unique_ptr<Model> model;  // GPT or ClimaX
  std::unique_ptr<DataParallel> store;
  std::unique_ptr<AdamW> optim;
  int64_t n() const { return model->num_params(); }
};

}  // namespace weft
