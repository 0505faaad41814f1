// The one GPT on the cpu-guarded backend (device memory fenced from the host) gives bitwise
// the losses, gradients and logits of the cpu backend: the model, its tensor-parallel layers
// (tp = 1 here; tp > 1 runs in the engine's multi-rank tests) and its local parameter store do
// all their work on device buffers through the backend. Any host access to device memory
// would fault; any host pointer handed to an op would throw.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backend/registry.h"
#include "model/gpt/gpt.h"
#include "model/gpt/gpt_config.h"

namespace weft {
namespace {

struct Case {
  const char* name;
  Recompute recompute;
  Precision precision;
  bool stages;  // two pipeline stages, three micro-batches in flight (GPipe order)
};

struct Result {
  std::vector<double> losses;
  std::vector<std::vector<float>> grads;  // per stage
  std::vector<float> logits;              // whole model: the last position's
};

Result run(const std::string& backend, const Case& c) {
  const ModelConfig cfg = make_model_config("g", 4, 2, 32, 16, 301);
  const int64_t B = 2, T = 16, M = 3;
  auto be = make_backend(backend);
  std::mt19937 rng(7);
  std::uniform_int_distribution<int32_t> tok(0, cfg.vocab_size - 1);
  std::vector<int32_t> in(M * B * T), tg(M * B * T);
  for (auto& x : in) x = tok(rng);
  for (auto& x : tg) x = tok(rng);
  const float scale = 1.0f / static_cast<float>(M * B * T);
  const std::vector<StageSpec> cut = c.stages ? std::vector<StageSpec>{{0, 2, true, false}, {2, 2, false, true}}
                                              : std::vector<StageSpec>{StageSpec{}};
  std::vector<std::unique_ptr<GPT>> st;
  for (const auto& s : cut) {
    st.push_back(std::make_unique<GPT>(cfg, *be, true, 1, 0, s));
    st.back()->init(3);
    st.back()->set_recompute(c.recompute);
    st.back()->set_precision(c.precision);
    st.back()->reserve(B, T, true, 0, c.stages ? static_cast<int>(M) : 1);
    st.back()->zero_grads();
  }
  Result r;
  if (!c.stages) {
    for (int m = 0; m < M; ++m) {
      r.losses.push_back(st[0]->forward_backward(in.data() + m * B * T, tg.data() + m * B * T, B, T, scale));
    }
    r.losses.push_back(st[0]->forward_loss(in.data(), tg.data(), B, T));
  } else {
    for (int m = 0; m < M; ++m) {
      st[0]->stage_forward(m, in.data() + m * B * T, nullptr, B, T, true);
      st[1]->stage_forward(m, nullptr, st[0]->stage_output(m), B, T, true);
    }
    for (int m = 0; m < M; ++m) {
      r.losses.push_back(st[1]->stage_backward(m, nullptr, tg.data() + m * B * T, nullptr, B, T, scale));
      st[0]->stage_backward(m, in.data() + m * B * T, nullptr, st[1]->stage_input_grad(), B, T, scale);
    }
  }
  for (auto& g : st) {
    r.grads.emplace_back(static_cast<size_t>(g->num_params()));
    g->download_grads(r.grads.back().data());
  }
  if (!c.stages) {
    st[0]->reserve(1, T, false);
    r.logits.resize(static_cast<size_t>(cfg.vocab_size));
    st[0]->forward_last_logits(in.data(), T, r.logits.data());
  }
  return r;
}

class GptGuarded : public ::testing::TestWithParam<Case> {};

TEST_P(GptGuarded, BitwiseEqualToCpu) {
  const Result a = run("cpu", GetParam());
  const Result b = run("cpu-guarded", GetParam());
  ASSERT_EQ(a.losses.size(), b.losses.size());
  for (size_t i = 0; i < a.losses.size(); ++i) {
    EXPECT_EQ(std::memcmp(&a.losses[i], &b.losses[i], sizeof(double)), 0) << "loss " << i << ": " << a.losses[i]
                                                                           << " vs " << b.losses[i];
  }
  ASSERT_EQ(a.grads.size(), b.grads.size());
  for (size_t s = 0; s < a.grads.size(); ++s) {
    ASSERT_EQ(a.grads[s].size(), b.grads[s].size());
    EXPECT_EQ(std::memcmp(a.grads[s].data(), b.grads[s].data(), a.grads[s].size() * sizeof(float)), 0)
        << "gradients of stage " << s;
    double norm = 0.0;
    for (float g : a.grads[s]) norm += static_cast<double>(g) * g;
    EXPECT_GT(norm, 0.0) << "stage " << s << " has no gradient";
  }
  ASSERT_EQ(a.logits.size(), b.logits.size());
  if (!a.logits.empty()) {
    EXPECT_EQ(std::memcmp(a.logits.data(), b.logits.data(), a.logits.size() * sizeof(float)), 0);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Cases, GptGuarded,
    ::testing::Values(Case{"fp32", Recompute::kNone, Precision::kFp32, false},
                      Case{"selective_bf16", Recompute::kSelective, Precision::kBf16, false},
                      Case{"full_fp16", Recompute::kFull, Precision::kFp16, false},
                      Case{"stages_fp32", Recompute::kNone, Precision::kFp32, true},
                      Case{"stages_full_bf16", Recompute::kFull, Precision::kBf16, true},
                      Case{"stages_bf16", Recompute::kNone, Precision::kBf16, true},
                      Case{"stages_selective_bf16", Recompute::kSelective, Precision::kBf16, true},
                      Case{"stages_full_fp32", Recompute::kFull, Precision::kFp32, true}),
    [](const ::testing::TestParamInfo<Case>& i) { return std::string(i.param.name); });

}  // namespace
}  // namespace weft
