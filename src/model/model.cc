#include "model/model.h"

#include "model/climax_description.h"
#include "model/gpt_description.h"

namespace weft {

double train_flops_per_position(const ModelConfig& m, int64_t T) {
  return m.is_climax() ? ClimaxDescription::train_flops_per_token(m) : GptDescription::train_flops_per_token(m, T);
}

}  // namespace weft
