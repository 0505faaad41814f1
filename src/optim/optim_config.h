// AdamW's hyper-parameters on their own, for readers of a run's settings that do not run the
// optimizer (the engine's configuration, the planner).
#pragma once

namespace weft {

struct AdamWConfig {
  float lr = 6e-4f;
  float beta1 = 0.9f;
  float beta2 = 0.95f;
  float eps = 1e-8f;
  float weight_decay = 0.1f;  // decoupled; applied to tensors with weight_decay set (matrices, embeddings)
};

}  // namespace weft
