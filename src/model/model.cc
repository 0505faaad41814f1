#include "model/model.h"

#include "model/family.h"

#include "core/error.h"

namespace weft {

namespace {
[[noreturn]] void refuse_logits(const ModelConfig& c, int64_t from, int64_t T) {
  throw_input("model '{}' is a {} model: it computes no token logits (positions [{}, {}) asked for)", c.name,
              c.capabilities().family, from, T);
}
}  // namespace

void Model::forward_logits(const int32_t*, int64_t T, int64_t from, float*) { refuse_logits(config(), from, T); }

void Model::stage_logits(int, int64_t T, int64_t from, float*) { refuse_logits(config(), from, T); }

void Model::reserve_generation(int64_t T) { refuse_logits(config(), 0, T); }

void Model::stage_forward_tokens(int, const int32_t*, CView, int64_t T) { refuse_logits(config(), 0, T); }

void Model::forward_outputs(const HostBatch& mb, float*) {
  throw_input("model '{}' is a {} model: it has no outputs to score beyond its loss ({} samples asked for)",
              config().name, config().capabilities().family, mb.samples());
}

void Model::set_latitudes(const std::vector<float>& lat_deg) {
  throw_input("model '{}' ({}) reads no latitude grid ({} latitudes given)", config().name, config().family_name(),
              lat_deg.size());
}

double train_flops_per_position(const ModelConfig& m, int64_t T) { return m.family->train_flops_per_position(m, T); }

}  // namespace weft
