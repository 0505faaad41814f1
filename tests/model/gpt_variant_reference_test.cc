// The decoder variants (model/config.h's BlockOptions) against an independent float64 PyTorch
// implementation written from Hugging Face's LlamaForCausalLM, GPTNeoXForCausalLM and GPT-2 (tests/reference/
// llama_reference.py): same weights, same tokens; the loss (relative 1e-6), every gradient
// tensor (relative L2 1e-4) and five AdamW steps (losses and final weights).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <random>

#include "backend/backend.h"
#include "backend/backend_test_util.h"
#include "ckpt/checkpoint.h"
#include "ckpt/safetensors.h"
#include "model/family.h"
#include "model/gpt/gpt.h"
#include "model/gpt/gpt_config.h"
#include "optim/optim.h"

namespace fs = std::filesystem;

namespace weft {
namespace {

struct Variant {
  const char* name;
  std::map<std::string, std::string> settings;
};

const Variant kVariants[] = {
    // Llama: rotary positions, RMSNorm, no biases, SwiGLU, 2 kv heads of 4, an untied head.
    {"llama", {{"position", "rope"}, {"norm", "rmsnorm"}, {"bias", "false"}, {"mlp", "swiglu"}, {"ffn", "48"},
               {"n_kv_head", "2"}, {"tie_embeddings", "false"}}},
    // Multi-query attention, half of each head turning with Llama 3.1's frequency scaling (its
    // original context short enough that the scaling changes some frequencies), biases, GELU, tied.
    {"mqa_partial_llama3", {{"position", "rope"}, {"rope_fraction", "0.5"}, {"rope_scaling", "llama3"},
                            {"rope_factor", "4"}, {"rope_original_context", "16"}, {"rope_base", "500"},
                            {"norm", "rmsnorm"}, {"n_kv_head", "1"}}},
    // GPT-NeoX's block: a quarter of each head turning, LayerNorm with biases, GELU, the parallel
    // residual, an untied head.
    {"neox_parallel", {{"position", "rope"}, {"rope_fraction", "0.25"}, {"parallel_residual", "true"},
                       {"tie_embeddings", "false"}}},
    // ALiBi (MPT's positions, Press et al. 2022; the reference adds MPT's bias, slopes x (key
    // position - (T - 1))), LayerNorm with biases, GELU, an untied head.
    {"alibi", {{"position", "alibi"}, {"tie_embeddings", "false"}}},
    // MPT's block: ALiBi, no biases (a LayerNorm without bias), the exact GELU, tied head.
    {"mpt", {{"position", "alibi"}, {"bias", "false"}, {"mlp", "gelu_exact"}}},
    // Learned positions with RMSNorm, SwiGLU, no biases, an untied head.
    {"learned_swiglu_untied", {{"norm", "rmsnorm"}, {"bias", "false"}, {"mlp", "swiglu"}, {"ffn", "40"},
                               {"tie_embeddings", "false"}}},
};

class GptVariantReference : public ::testing::TestWithParam<Variant> {};

// `values` (the layout's flat buffer: gradients or weights) written as a checkpoint, in the names and
// layout the family's files use (Hugging Face's LlamaForCausalLM names for a Llama block, weft's
// otherwise), each tensor against the reference's `prefix` + name: relative L2 errors by name.
// fix(name, mine, theirs) may adjust a tensor before the comparison.
template <class Fix>
std::map<std::string, double> compare_as_file(const CheckpointData& base, const float* values, const fs::path& dir,
                                              const SafetensorsFile& ref, const std::string& prefix, Fix&& fix) {
  CheckpointData d = base;
  d.params = values;
  save_checkpoint(dir.string(), d);
  const SafetensorsFile mine((dir / "model.safetensors").string());
  std::map<std::string, double> err;
  for (const std::string& n : mine.names()) {
    const auto& info = mine.info(n);
    EXPECT_EQ(ref.info(prefix + n).shape, info.shape) << n;
    std::vector<float> v(static_cast<size_t>(info.numel));
    mine.read_f32(n, info.shape, v.data());
    const double* r = static_cast<const double*>(ref.data(prefix + n));
    std::vector<double> theirs(r, r + info.numel);
    fix(n, v, theirs);
    err[n] = test::rel_l2(v.data(), theirs.data(), info.numel);
  }
  return err;
}

TEST_P(GptVariantReference, LossGradientsAndAdamWMatchPyTorch) {
  const Variant& v = GetParam();
  const ModelConfig base = make_model_config("ref", 2, 4, 32, 24, 301);
  const ModelConfig cfg = base.family->with_settings(base, v.settings);
  const int64_t S = 3, B = 2, T = 20;
  auto be = make_cpu_backend();
  GPT model(cfg, *be);
  model.init(7);
  std::mt19937 rng(11);
  std::normal_distribution<float> nd(0.0f, 0.05f);
  for (const ParamTensor& t : model.layout().tensors()) {  // every live element, norms too
    const int64_t live = t.live >= 0 ? t.live : t.numel;
    for (int64_t i = 0; i < live; ++i) model.params()[t.offset + i] += nd(rng);
  }
  std::vector<int32_t> tokens(S * B * T), targets(S * B * T);
  std::uniform_int_distribution<int32_t> tok(0, cfg.vocab_size - 1);
  for (auto& x : tokens) x = tok(rng);
  for (auto& x : targets) x = tok(rng);

  const fs::path dir = fs::path(WEFT_TEST_TMP) / fmt::format("gpt_variant_reference_{}", v.name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  CheckpointData cd;
  cd.model = &model.config();
  cd.layout = &model.layout();
  cd.params = model.params();
  save_checkpoint((dir / "ckpt").string(), cd);
  write_safetensors((dir / "batch.safetensors").string(),
                    {{"inputs", StDType::kI32, {S, B, T}, tokens.data()}, {"targets", StDType::kI32, {S, B, T}, targets.data()}}, {});
  // Adam's eps 1e-6: an element whose gradient is far below fp32's rounding of its row at its
  // first step (a token's embedding element at 1e-8 of its row's largest) takes a step of
  // g / (|g| + eps) that fp32 and fp64 round apart; eps 1e-6 keeps that step small in both.
  const float lr = 1e-2f, b1 = 0.9f, b2 = 0.95f, eps = 1e-6f, wd = 0.1f;
  const int steps = 5;
  const std::string cmd = fmt::format(
      "/usr/bin/python3 {}/tests/reference/llama_reference.py --checkpoint {} --batch {} --out {} --steps {} --lr {} "
      "--beta1 {} --beta2 {} --eps {} --weight-decay {}",
      WEFT_SOURCE_DIR, (dir / "ckpt").string(), (dir / "batch.safetensors").string(), (dir / "ref.safetensors").string(),
      steps, lr, b1, b2, eps, wd);
  ASSERT_EQ(std::system(cmd.c_str()), 0) << "the PyTorch reference failed (needs Debian's python3-torch): " << cmd;
  SafetensorsFile ref((dir / "ref.safetensors").string());

  model.reserve(B, T, true);
  model.zero_grads();
  const float loss = model.forward_backward(tokens.data(), targets.data(), B, T, 1.0f / (B * T));
  const double ref_loss = static_cast<const double*>(ref.data("loss"))[0];
  EXPECT_NEAR(loss, ref_loss, 1e-6 * ref_loss) << v.name;
  double worst = 0.0;
  const auto none = [](const std::string&, std::vector<float>&, std::vector<double>&) {};
  for (const auto& [name, err] : compare_as_file(cd, model.grads(), dir / "grads", ref, "grad.", none)) {
    worst = std::max(worst, err);
    EXPECT_LT(err, 1e-4) << v.name << " " << name;
  }
  std::printf("%s: loss rel. error %.2e, worst gradient rel. L2 error %.2e\n", v.name,
              std::fabs(loss - ref_loss) / ref_loss, worst);
  AdamW opt(model.layout(), AdamWConfig{lr, b1, b2, eps, wd}, *be);
  const double* ref_losses = static_cast<const double*>(ref.data("losses"));
  for (int k = 0; k < steps; ++k) {
    const int64_t s = k % S;
    model.zero_grads();
    const float l = model.forward_backward(tokens.data() + s * B * T, targets.data() + s * B * T, B, T, 1.0f / (B * T));
    EXPECT_NEAR(l, ref_losses[k], 1e-5 * ref_losses[k]) << v.name << " step " << k;
    opt.step(model.params(), model.grads(), lr, k + 1);
  }
  // The key bias's dimensions that do not turn (partial rotary positions) add q.b to every score
  // of a row, which softmax cancels: their exact gradient is 0 (as GPT-2's whole key bias,
  // gpt_reference_test.cc), so both implementations step on rounding noise. They must stay within
  // the steps Adam can take; every other element within 1e-4 (relative L2, by tensor).
  const int64_t C = cfg.n_embd, hd = cfg.head_dim(), KVH = cfg.kv_heads();
  const int64_t rot = cfg.block.position == PositionKind::kRope ? cfg.rope_dims() : hd;
  // (GPT-NeoX's file: key head j at rows (3 j + 1) hd of query_key_value.)
  const auto key_bias = [&](const std::string& name, std::vector<float>& mine, std::vector<double>& theirs) {
    const bool neox = name.ends_with("attention.query_key_value.bias");
    if (!(neox || name.ends_with("attn.c_attn.bias")) || rot == hd) return;
    for (int64_t j = 0; j < KVH; ++j) {
      const int64_t k0 = neox ? (3 * j + 1) * hd : C + j * hd;
      for (int64_t i = k0 + rot; i < k0 + hd; ++i) {
        EXPECT_LT(std::fabs(mine[i] - theirs[i]), 2.0 * lr * steps) << name << " " << i;
        mine[i] = static_cast<float>(theirs[i]);  // left out of the comparison below
      }
    }
  };
  for (const auto& [name, err] : compare_as_file(cd, model.params(), dir / "final", ref, "final.", key_bias)) {
    EXPECT_LT(err, 1e-4) << v.name << " final " << name;
  }
}

INSTANTIATE_TEST_SUITE_P(Variants, GptVariantReference, ::testing::ValuesIn(kVariants),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace weft
