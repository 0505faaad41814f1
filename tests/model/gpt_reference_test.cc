// The whole model against an independent PyTorch implementation (tests/reference, float64):
// same weights, same tokens; loss, every gradient tensor, and ten AdamW steps.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <random>

#include "backend/backend.h"
#include "backend/backend_test_util.h"
#include "ckpt/checkpoint.h"
#include "ckpt/safetensors.h"
#include "model/gpt/gpt.h"
#include "model/gpt/gpt_config.h"
#include "optim/optim.h"

namespace fs = std::filesystem;

namespace weft {
namespace {

bool is_qkv_bias(const ParamTensor& t) { return t.name.ends_with("attn.c_attn.bias"); }


TEST(GptReference, LossGradientsAndAdamWMatchPyTorch) {
  // Small but complete: padded vocabulary (301 -> 384), T < n_ctx, several heads and layers.
  const ModelConfig cfg = make_model_config("ref", 2, 4, 32, 24, 301);
  ASSERT_EQ(cfg.padded_vocab, 384);
  const int64_t S = 3, B = 2, T = 20;
  auto be = make_cpu_backend();
  GPT model(cfg, *be);
  model.init(7);
  // Perturb every parameter (biases and LayerNorm too) so that no gradient path is trivial.
  std::mt19937 rng(11);
  std::normal_distribution<float> nd(0.0f, 0.05f);
  for (const ParamTensor& t : model.layout().tensors()) {
    int64_t live = t.tied_head ? int64_t{cfg.vocab_size} * cfg.n_embd : t.numel;
    for (int64_t i = 0; i < live; ++i) model.params()[t.offset + i] += nd(rng);
  }
  std::vector<int32_t> tokens(S * B * T), targets(S * B * T);
  std::uniform_int_distribution<int32_t> tok(0, cfg.vocab_size - 1);
  for (auto& x : tokens) x = tok(rng);
  for (auto& x : targets) x = tok(rng);
  tokens[0] = cfg.vocab_size - 1;  // the last real row of wte
  targets[1] = cfg.vocab_size - 1;

  const fs::path dir = fs::path(WEFT_TEST_TMP) / "gpt_reference";
  fs::remove_all(dir);
  fs::create_directories(dir);
  CheckpointData cd;
  cd.model = &model.config();
  cd.layout = &model.layout();
  cd.params = model.params();
  save_checkpoint((dir / "ckpt").string(), cd);
  write_safetensors((dir / "batch.safetensors").string(),
                    {{"inputs", StDType::kI32, {S, B, T}, tokens.data()}, {"targets", StDType::kI32, {S, B, T}, targets.data()}}, {});
  const float lr = 1e-2f, b1 = 0.9f, b2 = 0.95f, eps = 1e-8f, wd = 0.1f;
  const int steps = 10;
  const std::string cmd = fmt::format(
      "/usr/bin/python3 {}/tests/reference/gpt2_reference.py --checkpoint {} --batch {} --out {} --steps {} --lr {} "
      "--beta1 {} --beta2 {} --eps {} --weight-decay {}",
      WEFT_SOURCE_DIR, (dir / "ckpt").string(), (dir / "batch.safetensors").string(), (dir / "ref.safetensors").string(),
      steps, lr, b1, b2, eps, wd);
  ASSERT_EQ(std::system(cmd.c_str()), 0) << "the PyTorch reference failed (needs Debian's python3-torch): " << cmd;
  SafetensorsFile ref((dir / "ref.safetensors").string());

  // Loss and gradients at the initial weights, batch 0.
  model.reserve(B, T, true);
  model.zero_grads();
  const float loss = model.forward_backward(tokens.data(), targets.data(), B, T, 1.0f / (B * T));
  const double ref_loss = static_cast<const double*>(ref.data("loss"))[0];
  EXPECT_NEAR(loss, ref_loss, 1e-5 * ref_loss);
  double worst_grad = 0.0;
  for (const ParamTensor& t : model.layout().tensors()) {
    const auto& info = ref.info("grad." + t.name);
    ASSERT_EQ(info.shape, t.hf_shape) << t.name;
    const double* g = static_cast<const double*>(ref.data("grad." + t.name));
    const double err = test::rel_l2(model.grads() + t.offset, g, info.numel);
    if (!is_qkv_bias(t)) worst_grad = std::max(worst_grad, err);
    EXPECT_LT(err, 1e-4) << t.name;
    if (is_qkv_bias(t)) {  // the key bias has an exact gradient of 0 (see below)
      for (int64_t i = cfg.n_embd; i < 2 * cfg.n_embd; ++i) {
        EXPECT_LT(std::fabs(model.grads()[t.offset + i]), 1e-6);
        EXPECT_LT(std::fabs(g[i]), 1e-12);
      }
    }
    if (t.tied_head) {  // padded rows get no gradient
      for (int64_t i = info.numel; i < t.numel; ++i) ASSERT_EQ(model.grads()[t.offset + i], 0.0f);
    }
  }

  std::printf("loss rel. error %.2e, worst gradient rel. L2 error %.2e\n", std::fabs(loss - ref_loss) / ref_loss, worst_grad);
  // Ten AdamW steps, constant learning rate, no clipping; step k uses batch k % S.
  AdamW opt(model.layout(), AdamWConfig{lr, b1, b2, eps, wd}, *be);
  const double* ref_losses = static_cast<const double*>(ref.data("losses"));
  for (int k = 0; k < steps; ++k) {
    const int64_t s = k % S;
    model.zero_grads();
    float l = model.forward_backward(tokens.data() + s * B * T, targets.data() + s * B * T, B, T, 1.0f / (B * T));
    EXPECT_NEAR(l, ref_losses[k], 1e-5 * ref_losses[k]) << "step " << k;
    opt.step(model.params(), model.grads(), lr, k + 1);
  }
  for (const ParamTensor& t : model.layout().tensors()) {
    const auto& info = ref.info("final." + t.name);
    const double* p = static_cast<const double*>(ref.data("final." + t.name));
    if (is_qkv_bias(t)) {
      // The key bias adds q.b_k to every score of a row, which softmax cancels: its exact
      // gradient is 0, so Adam's m/sqrt(v) amplifies rounding noise (1e-9 in fp32, 1e-17 in
      // fp64) into full-size steps in both implementations. Compare the query and value
      // parts; the key part must stay within the steps Adam can take.
      const int64_t C = cfg.n_embd;
      EXPECT_LT(test::rel_l2(model.params() + t.offset, p, C), 1e-4) << t.name << " (query part)";
      EXPECT_LT(test::rel_l2(model.params() + t.offset + 2 * C, p + 2 * C, C), 1e-4) << t.name << " (value part)";
      for (int64_t i = C; i < 2 * C; ++i) EXPECT_LT(std::fabs(model.params()[t.offset + i] - p[i]), 2.0 * lr * steps);
      continue;
    }
    EXPECT_LT(test::rel_l2(model.params() + t.offset, p, info.numel), 1e-4) << t.name;
  }
}

}  // namespace
}  // namespace weft
