// The ClimaX model against an independent float64 PyTorch implementation
// (tests/reference/climax_torch.py, driven by climax_reference.py): same weights, same fields;
// the parameter names, shapes and order of the contract (docs: the ClimaX spec), the
// latitude-weighted MSE, every gradient tensor, and five AdamW steps.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "backend/backend.h"
#include "backend/backend_test_util.h"
#include "ckpt/checkpoint.h"
#include "ckpt/safetensors.h"
#include "model/climax/climax.h"
#include "model/climax/climax_config.h"
#include "optim/optim.h"

namespace fs = std::filesystem;

namespace weft {
namespace {

// The contract's parameter tensors in flat-buffer order, matrices (in, out).
std::vector<std::pair<std::string, std::vector<int64_t>>> spec_tensors(int64_t depth, int64_t D, int64_t V,
                                                                        int64_t p, int64_t L) {
  const int64_t F = 4 * D;
  std::vector<std::pair<std::string, std::vector<int64_t>>> s = {
      {"token_embeds.weight", {V, p * p, D}},
      {"token_embeds.bias", {V, D}},
      {"var_embed", {V, D}},
      {"var_query", {D}},
      {"var_agg.q.weight", {D, D}},
      {"var_agg.q.bias", {D}},
      {"var_agg.kv.weight", {D, 2 * D}},
      {"var_agg.kv.bias", {2 * D}},
      {"var_agg.out_proj.weight", {D, D}},
      {"var_agg.out_proj.bias", {D}},
      {"pos_embed", {L, D}},
      {"lead_time_embed.weight", {1, D}},
      {"lead_time_embed.bias", {D}},
  };
  for (int64_t l = 0; l < depth; ++l) {
    const std::string b = fmt::format("blocks.{}.", l);
    s.push_back({b + "norm1.weight", {D}});
    s.push_back({b + "norm1.bias", {D}});
    s.push_back({b + "attn.qkv.weight", {D, 3 * D}});
    s.push_back({b + "attn.qkv.bias", {3 * D}});
    s.push_back({b + "attn.proj.weight", {D, D}});
    s.push_back({b + "attn.proj.bias", {D}});
    s.push_back({b + "norm2.weight", {D}});
    s.push_back({b + "norm2.bias", {D}});
    s.push_back({b + "mlp.fc1.weight", {D, F}});
    s.push_back({b + "mlp.fc1.bias", {F}});
    s.push_back({b + "mlp.fc2.weight", {F, D}});
    s.push_back({b + "mlp.fc2.bias", {D}});
  }
  for (auto& t : std::vector<std::pair<std::string, std::vector<int64_t>>>{
           {"norm.weight", {D}},
           {"norm.bias", {D}},
           {"head.0.weight", {D, D}},
           {"head.0.bias", {D}},
           {"head.2.weight", {D, D}},
           {"head.2.bias", {D}},
           {"head.4.weight", {D, V * p * p}},
           {"head.4.bias", {V * p * p}},
       }) {
    s.push_back(std::move(t));
  }
  return s;
}

// The elements [begin, end) of a key bias: a bias on the keys adds q.b_k to every score of a
// softmax row, which softmax cancels, so its exact gradient is 0 (blocks' attn.qkv.bias columns
// [D, 2D), var_agg.kv.bias columns [0, D)). {0, 0} for other tensors.
std::pair<int64_t, int64_t> key_bias_range(const std::string& name, int64_t D) {
  if (name == "var_agg.kv.bias") return {0, D};
  if (name.rfind("blocks.", 0) == 0 && name.size() > 14 && name.compare(name.size() - 14, 14, ".attn.qkv.bias") == 0) {
    return {D, 2 * D};
  }
  return {0, 0};
}

// Relative L2 error over the tensor without its key-bias part [kb, ke).
template <typename R>
double rel_l2_outside(const float* x, const R* ref, int64_t n, int64_t kb, int64_t ke) {
  double num = 0.0, den = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    if (i >= kb && i < ke) continue;
    const double d = static_cast<double>(x[i]) - static_cast<double>(ref[i]);
    num += d * d;
    den += static_cast<double>(ref[i]) * static_cast<double>(ref[i]);
  }
  return den == 0.0 ? std::sqrt(num) : std::sqrt(num / den);
}

TEST(ClimaxReference, LossGradientsAndAdamWMatchPyTorch) {
  // Small but complete: several variables, heads and layers, a non-square grid (8 x 16,
  // patch 2: 4 x 8 = 32 patches), three batches.
  const int depth = 2, heads = 4, embd = 32, V = 3, H = 8, W = 16, p = 2;
  const ModelConfig cfg = make_climax_config("ref", depth, heads, embd, V, H, W, p);
  const int64_t S = 3, B = 2, L = (H / p) * (W / p), D = embd;
  const int64_t field = int64_t{V} * H * W;  // floats per sample of x or y
  auto be = make_cpu_backend();
  ClimaX model(cfg, *be);
  model.init(7);

  // The layout is the contract's: names, shapes (checkpoint shapes) and flat-buffer order.
  const auto spec = spec_tensors(depth, D, V, p, L);
  const auto& tensors = model.layout().tensors();
  ASSERT_EQ(tensors.size(), spec.size());
  int64_t expect_offset = 0;
  for (size_t i = 0; i < spec.size(); ++i) {
    EXPECT_EQ(tensors[i].name, spec[i].first) << "tensor " << i;
    EXPECT_EQ(tensors[i].hf_shape, spec[i].second) << spec[i].first;
    EXPECT_EQ(tensors[i].offset, expect_offset) << spec[i].first;
    expect_offset += tensors[i].numel;
  }
  ASSERT_FALSE(::testing::Test::HasFailure()) << "the parameter layout differs from the contract";

  // Perturb every parameter (biases, norms, var_query too) so that no gradient path is
  // trivial. The attention inputs get more: with an init-sized query (var_query starts at 0 in
  // ClimaX) both attentions are almost uniform, and a wrong score (scale, head split, the
  // variable softmax) would barely change the loss. With this noise the variable attention
  // weights span about [0.09, 0.68] (uniform 1/3) and the blocks' rows peak at about 0.17
  // (uniform 1/32) (tests/reference/climax_selftest.py, section 5).
  std::mt19937 rng(11);
  std::normal_distribution<float> nd(0.0f, 0.05f);
  auto extra_std = [](const std::string& n) -> float {
    if (n == "var_query") return 1.0f;
    if (n == "var_agg.q.weight" || n == "var_agg.kv.weight") return 0.2f;
    if (n.size() > 16 && n.compare(n.size() - 16, 16, ".attn.qkv.weight") == 0) return 0.3f;
    return 0.0f;
  };
  for (const ParamTensor& t : tensors) {
    const float extra = extra_std(t.name);
    std::normal_distribution<float> ne(0.0f, extra > 0.0f ? extra : 1.0f);
    for (int64_t i = 0; i < t.numel; ++i) {
      model.params()[t.offset + i] += nd(rng);
      if (extra > 0.0f) model.params()[t.offset + i] += ne(rng);
    }
  }

  // Fields, targets correlated with them, lead times in [6, 72] hours, latitudes at the cell
  // centres of H rows from pole to pole.
  std::vector<float> x(S * B * field), y(S * B * field), lead(S * B), lat(H);
  std::normal_distribution<float> unit(0.0f, 1.0f);
  for (auto& v : x) v = unit(rng);
  for (size_t i = 0; i < y.size(); ++i) y[i] = 0.5f * x[i] + unit(rng);
  std::uniform_real_distribution<float> hours(6.0f, 72.0f);
  for (auto& v : lead) v = hours(rng);
  for (int r = 0; r < H; ++r) lat[r] = static_cast<float>(-90.0 + (r + 0.5) * 180.0 / H);
  model.set_latitudes(lat);

  const fs::path dir = fs::path(WEFT_TEST_TMP) / "climax_reference";
  fs::remove_all(dir);
  fs::create_directories(dir);
  CheckpointData cd;
  cd.model = &model.config();
  cd.layout = &model.layout();
  cd.params = model.params();
  save_checkpoint((dir / "ckpt").string(), cd);
  write_safetensors((dir / "batch.safetensors").string(),
                    {{"x", StDType::kF32, {S, B, V, H, W}, x.data()},
                     {"y", StDType::kF32, {S, B, V, H, W}, y.data()},
                     {"lead", StDType::kF32, {S, B}, lead.data()},
                     {"lat", StDType::kF32, {H}, lat.data()}},
                    {});
  const float lr = 1e-2f, b1 = 0.9f, b2 = 0.95f, eps = 1e-8f, wd = 0.1f;
  const int steps = 5;
  // The shapes are passed explicitly: the reference checks them against the checkpoint's
  // tensors and config.json, and needs nothing else from the config.
  const std::string cmd = fmt::format(
      "/usr/bin/python3 {}/tests/reference/climax_reference.py --checkpoint {} --batch {} --out {} --steps {} "
      "--lr {} --beta1 {} --beta2 {} --eps {} --weight-decay {} --heads {} --vars {} --img-h {} --img-w {} "
      "--patch {}",
      WEFT_SOURCE_DIR, (dir / "ckpt").string(), (dir / "batch.safetensors").string(),
      (dir / "ref.safetensors").string(), steps, lr, b1, b2, eps, wd, heads, V, H, W, p);
  ASSERT_EQ(std::system(cmd.c_str()), 0) << "the PyTorch reference failed (needs Debian's python3-torch): " << cmd;
  SafetensorsFile ref((dir / "ref.safetensors").string());

  // AdamW's decay flags are the reference's list (climax_torch.weight_decays).
  {
    std::set<std::string> ref_decay;
    std::stringstream ss(ref.metadata().at("decay"));
    for (std::string n; std::getline(ss, n, ',');) ref_decay.insert(n);
    for (const ParamTensor& t : tensors) {
      EXPECT_EQ(t.weight_decay, ref_decay.count(t.name) == 1) << t.name << ": weight decay differs from the reference's";
    }
  }

  // Loss and gradients at the initial weights, batch 0. forward_backward accumulates the
  // gradient of loss_scale * B * L * (mean loss): 1 / (B * L) gives the mean loss's.
  model.reserve(B, /*training=*/true);
  model.zero_grads();
  const ClimaxBatch mb0{x.data(), y.data(), lead.data()};
  const double loss = model.forward_backward(mb0, B, static_cast<float>(1.0 / static_cast<double>(B * L)));
  const double ref_loss = static_cast<const double*>(ref.data("loss"))[0];
  EXPECT_NEAR(loss, ref_loss, 1e-5 * ref_loss);
  EXPECT_NEAR(model.forward_loss(mb0, B), ref_loss, 1e-5 * ref_loss) << "forward_loss";
  double worst_grad = 0.0;
  std::string worst_name;
  for (const ParamTensor& t : tensors) {
    const auto& info = ref.info("grad." + t.name);
    ASSERT_EQ(info.shape, t.hf_shape) << t.name;
    ASSERT_EQ(info.numel, t.numel) << t.name;
    const double* g = static_cast<const double*>(ref.data("grad." + t.name));
    const float* mine = model.grads() + t.offset;
    const auto [kb, ke] = key_bias_range(t.name, D);
    const double err = rel_l2_outside(mine, g, info.numel, kb, ke);
    if (err > worst_grad) {
      worst_grad = err;
      worst_name = t.name;
    }
    EXPECT_LT(err, 1e-4) << t.name << (ke > kb ? " (without the key part)" : "");
    for (int64_t i = kb; i < ke; ++i) {  // the key bias: exact gradient 0 in both
      EXPECT_LT(std::fabs(mine[i]), 1e-6) << t.name << "[" << i << "]";
      EXPECT_LT(std::fabs(g[i]), 1e-12) << t.name << "[" << i << "] (reference)";
    }
  }
  std::printf("loss %.9f, rel. error %.2e; worst gradient rel. L2 error %.2e (%s)\n", ref_loss,
              std::fabs(loss - ref_loss) / ref_loss, worst_grad, worst_name.c_str());

  // Five AdamW steps, constant learning rate, no clipping; step k uses batch k % S.
  AdamW opt(model.layout(), AdamWConfig{lr, b1, b2, eps, wd}, *be);
  const double* ref_losses = static_cast<const double*>(ref.data("losses"));
  ASSERT_EQ(ref.info("losses").numel, steps);
  for (int k = 0; k < steps; ++k) {
    const int64_t s = k % S;
    const ClimaxBatch mb{x.data() + s * B * field, y.data() + s * B * field, lead.data() + s * B};
    model.zero_grads();
    const double l = model.forward_backward(mb, B, static_cast<float>(1.0 / static_cast<double>(B * L)));
    EXPECT_NEAR(l, ref_losses[k], 1e-5 * ref_losses[k]) << "step " << k;
    opt.step(model.params(), model.grads(), lr, k + 1);
  }
  {
    const int64_t s = steps % S;
    const ClimaxBatch mb{x.data() + s * B * field, y.data() + s * B * field, lead.data() + s * B};
    const double ref_final = static_cast<const double*>(ref.data("final_loss"))[0];
    EXPECT_NEAR(model.forward_loss(mb, B), ref_final, 1e-5 * ref_final) << "loss after the steps";
  }
  double worst_param = 0.0;
  std::string worst_param_name;
  for (const ParamTensor& t : tensors) {
    const auto& info = ref.info("param." + t.name);
    ASSERT_EQ(info.shape, t.hf_shape) << t.name;
    const double* pr = static_cast<const double*>(ref.data("param." + t.name));
    const float* mine = model.params() + t.offset;
    // A key bias's gradient is rounding noise (1e-9 in fp32, 1e-17 in fp64) that Adam's
    // m/sqrt(v) amplifies into steps of up to lr in both implementations: compare the rest of
    // the tensor, and bound the key part by the steps Adam can take.
    const auto [kb, ke] = key_bias_range(t.name, D);
    const double err = rel_l2_outside(mine, pr, info.numel, kb, ke);
    if (err > worst_param) {
      worst_param = err;
      worst_param_name = t.name;
    }
    EXPECT_LT(err, 1e-4) << t.name << (ke > kb ? " (without the key part)" : "");
    for (int64_t i = kb; i < ke; ++i) EXPECT_LT(std::fabs(mine[i] - pr[i]), 2.0 * lr * steps) << t.name << "[" << i << "]";
  }
  std::printf("after %d AdamW steps: worst parameter rel. L2 error %.2e (%s)\n", steps, worst_param,
              worst_param_name.c_str());
}

}  // namespace
}  // namespace weft
