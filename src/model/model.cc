#include "model/model.h"

#include "model/family.h"

#include "core/error.h"

namespace weft {

void Model::forward_logits(const int32_t*, int64_t T, int64_t from, float*) {
  throw_input("model '{}' is a {} model: it computes no token logits (positions [{}, {}) asked for)", config().name,
              config().capabilities().family, from, T);
}

void Model::stage_logits(int, int64_t T, int64_t from, float* logits_out) { forward_logits(nullptr, T, from, logits_out); }

void Model::forward_outputs(const MicroBatch&, int64_t B, float*) {
  throw_input("model '{}' is a {} model: it has no outputs to score beyond its loss ({} samples asked for)",
              config().name, config().capabilities().family, B);
}

void Model::set_latitudes(const std::vector<float>& lat_deg) {
  throw_input("model '{}' ({}) reads no latitude grid ({} latitudes given)", config().name, config().family_name(),
              lat_deg.size());
}

double train_flops_per_position(const ModelConfig& m, int64_t T) { return m.family->train_flops_per_position(m, T); }

}  // namespace weft
