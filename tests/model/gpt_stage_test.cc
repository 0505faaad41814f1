// A model cut into pipeline stages (in one process, activations handed over by hand, several
// micro-batches in flight in activation slots) computes the whole model's loss and gradients.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "backend/backend.h"
#include "backend/backend_test_util.h"
#include "model/gpt/gpt.h"
#include "model/gpt/gpt_config.h"

namespace weft {
namespace {


TEST(GptStages, StagesReproduceTheWholeModel) {
  const ModelConfig cfg = make_model_config("s", 4, 2, 32, 16, 301);
  const int64_t B = 2, T = 16, M = 3;  // three micro-batches in flight
  auto be = make_cpu_backend();
  std::mt19937 rng(3);
  std::uniform_int_distribution<int32_t> tok(0, cfg.vocab_size - 1);
  std::vector<int32_t> in(M * B * T), tg(M * B * T);
  for (auto& x : in) x = tok(rng);
  for (auto& x : tg) x = tok(rng);
  const float scale = 1.0f / static_cast<float>(M * B * T);

  GPT whole(cfg, *be);
  whole.init(5);
  whole.reserve(B, T, true);
  whole.zero_grads();
  double whole_loss = 0;
  for (int m = 0; m < M; ++m) whole_loss += whole.forward_backward(in.data() + m * B * T, tg.data() + m * B * T, B, T, scale) * B * T;

  for (const std::vector<StageSpec>& cut : std::vector<std::vector<StageSpec>>{
           {{0, 2, true, false}, {2, 2, false, true}}, {{0, 1, true, false}, {1, 2, false, false}, {3, 1, false, true}}}) {
    const int P = static_cast<int>(cut.size());
    std::vector<std::unique_ptr<GPT>> st;
    for (const auto& s : cut) {
      st.push_back(std::make_unique<GPT>(cfg, *be, true, 1, 0, s));
      st.back()->init(5);
      st.back()->reserve(B, T, true, 0, static_cast<int>(M));
      st.back()->zero_grads();
    }
    // GPipe order: every forward, then every backward.
    for (int m = 0; m < M; ++m) {
      CView x;
      for (int p = 0; p < P; ++p) {
        st[p]->stage_forward(m, in.data() + m * B * T, x, B, T, true);
        x = st[p]->stage_output(m);
      }
    }
    double loss = 0;
    for (int m = M - 1; m >= 0; --m) {
      CView dy;
      for (int p = P - 1; p >= 0; --p) {
        loss += st[p]->stage_backward(m, in.data() + m * B * T, tg.data() + m * B * T, dy, B, T, scale);
        dy = st[p]->stage_input_grad();
      }
    }
    EXPECT_NEAR(loss, whole_loss, 1e-5 * whole_loss) << P << " stages";
    // Every stage's gradients equal the whole model's; the tied embedding's gradient is split
    // between the first stage (lookup) and the last (head).
    for (const ParamTensor& t : whole.layout().tensors()) {
      std::vector<float> sum(t.numel, 0.0f);
      for (int p = 0; p < P; ++p) {
        const ParamTensor* pt = st[p]->layout().find(t.name);
        if (!pt) continue;
        for (int64_t i = 0; i < t.numel; ++i) sum[i] += st[p]->grads()[pt->offset + i];
      }
      EXPECT_LT(test::rel_l2(sum.data(), whole.grads() + t.offset, t.numel), 1e-5) << t.name << ", " << P << " stages";
    }
  }
}

}  // namespace
}  // namespace weft
