// Text generation from a model: temperature and top-k sampling, driven by the counter-based
// RNG so that (seed, prompt) fixes the output.
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "engine/engine.h"
#include "model/model.h"

namespace weft {

struct SampleOptions {
  int64_t max_tokens = 64;
  double temperature = 1.0;  // > 0
  int64_t top_k = 40;        // 0: the whole vocabulary
  uint64_t seed = 1337;
  int32_t stop_token = -1;   // stop after emitting this token (-1: never)
};

// Extends `prompt` (at least one token) by up to max_tokens tokens; the context slides to the
// model's last n_ctx tokens. on_token (optional) is called with each new token as it comes.
// The logits (V real entries) after the last of T tokens.
using LogitsFn = std::function<void(const int32_t* tokens, int64_t T, float* logits)>;
std::vector<int32_t> sample_tokens(const LogitsFn& logits, int64_t vocab, int64_t n_ctx,
                                   const std::vector<int32_t>& prompt, const SampleOptions& opt,
                                   const std::function<void(int32_t)>& on_token = {});
// With a whole model on one process, or an engine in any layout without pp (every rank calls it).
std::vector<int32_t> sample_tokens(Model& model, const std::vector<int32_t>& prompt, const SampleOptions& opt,
                                   const std::function<void(int32_t)>& on_token = {});
std::vector<int32_t> sample_tokens(Engine& engine, const std::vector<int32_t>& prompt, const SampleOptions& opt,
                                   const std::function<void(int32_t)>& on_token = {});

// Picks one token from logits (V) with temperature and top-k, using uniform draw u in (0, 1].
int32_t pick_token(const float* logits, int64_t V, double temperature, int64_t top_k, float u);

}  // namespace weft
