// An inference-only engine (EngineConfig::training = false: weft eval, weft generate) holds
// the parameters and the forward's buffers only: no gradient buffers, no optimizer state, no
// gradient scratch, in every ZeRO stage; and it evaluates what the training engine evaluates.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "backend/backend.h"
#include "comm/self_comm.h"
#include "core/error.h"
#include "core/memory.h"
#include "train/engine_config.h"

namespace weft {
namespace {

EngineConfig tiny_config(int zero, bool training) {
  RunConfig rc;
  rc.model = "tiny";
  rc.seq_len = 32;
  rc.global_batch = 2;
  rc.micro_batch = 2;
  rc.zero = zero;
  EngineConfig ec = engine_config(rc, 1);
  ec.training = training;
  return ec;
}

TEST(InferenceEngine, HoldsNoGradientsOrOptimizerState) {
  auto be = make_cpu_backend();
  auto world = make_self_communicator();
  for (int zero : {0, 1, 3}) {
    const MemorySnapshot before = memory_tracker().snapshot();
    int64_t params = 0;
    {
      Engine train(tiny_config(zero, true), *world, *be);
      const MemorySnapshot m = memory_tracker().snapshot();
      params = m[MemCategory::kParams] - before[MemCategory::kParams];
      EXPECT_GT(m[MemCategory::kGrads] - before[MemCategory::kGrads], 0) << "zero " << zero;
      EXPECT_GT(m[MemCategory::kOptimizer] - before[MemCategory::kOptimizer], 0) << "zero " << zero;
    }
    Engine eval(tiny_config(zero, false), *world, *be);
    const MemorySnapshot m = memory_tracker().snapshot();
    EXPECT_EQ(m[MemCategory::kGrads] - before[MemCategory::kGrads], 0) << "zero " << zero;
    EXPECT_EQ(m[MemCategory::kOptimizer] - before[MemCategory::kOptimizer], 0) << "zero " << zero;
    EXPECT_EQ(m[MemCategory::kParams] - before[MemCategory::kParams], params) << "zero " << zero;
    EXPECT_EQ(eval.store_memory().grads, 0) << "zero " << zero;
  }
}

TEST(InferenceEngine, EvaluatesLikeTheTrainingEngine) {
  auto be = make_cpu_backend();
  auto world = make_self_communicator();
  Engine train(tiny_config(0, true), *world, *be);
  Engine eval(tiny_config(0, false), *world, *be);
  train.init_params(11);
  eval.init_params(11);
  std::vector<int32_t> tokens(2 * 32 + 1);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int32_t>((i * 7919) % 50257);
  std::vector<float> a(50257), b(50257);
  train.begin_generation();
  eval.begin_generation();
  train.last_logits(tokens.data(), 20, a.data());
  eval.last_logits(tokens.data(), 20, b.data());
  EXPECT_EQ(a, b);
}

// Engine::logits (weft eval --logits): row t of one forward over T tokens is the last row of
// the forward over the first t + 1 tokens (causal attention), and the last row is exactly
// last_logits; a range from `from` is the tail of the whole.
TEST(InferenceEngine, PositionLogitsAreThePrefixesLastLogits) {
  auto be = make_cpu_backend();
  auto world = make_self_communicator();
  Engine eval(tiny_config(0, false), *world, *be);
  eval.init_params(5);
  const int64_t T = 12, V = 50257;
  std::vector<int32_t> tokens(T);
  for (int64_t i = 0; i < T; ++i) tokens[static_cast<size_t>(i)] = static_cast<int32_t>((i * 104729 + 17) % V);
  eval.begin_generation();
  std::vector<float> all(static_cast<size_t>(T * V)), last(static_cast<size_t>(V));
  eval.logits(tokens.data(), T, 0, all.data());
  double worst = 0;
  for (int64_t t = 0; t < T; ++t) {
    eval.last_logits(tokens.data(), t + 1, last.data());
    for (int64_t v = 0; v < V; ++v) {
      worst = std::max(worst, static_cast<double>(std::abs(all[static_cast<size_t>(t * V + v)] - last[static_cast<size_t>(v)])));
    }
    if (t == T - 1) {
      EXPECT_TRUE(std::equal(last.begin(), last.end(), all.begin() + (T - 1) * V)) << "the last row is last_logits";
    }
  }
  EXPECT_LT(worst, 1e-5);
  std::vector<float> tail(static_cast<size_t>(4 * V));
  eval.logits(tokens.data(), T, T - 4, tail.data());
  EXPECT_TRUE(std::equal(tail.begin(), tail.end(), all.begin() + (T - 4) * V));
  EXPECT_THROW(eval.logits(tokens.data(), T, T, tail.data()), InputError);
}

}  // namespace
}  // namespace weft
