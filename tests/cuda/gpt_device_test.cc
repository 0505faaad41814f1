// The one GPT (model/gpt.h) on the CUDA backend against the same GPT on the CPU backend (the
// reference): the tiny preset, tp = pp = dp = 1, the same init_params seed (GPT::init), reserve,
// zero_grads and one forward_backward of the same host token ids; the gradients are read back
// from GPT::grads() (device memory on cuda) with Backend::copy_to_host. Compared by
// normalised error ||x - ref|| / ||ref||:
//   fp32  loss relative error <= 1e-4; the whole gradient buffer <= 1e-4 and every gradient
//         tensor <= 1e-3. Both sides compute the same math in fp32 (the CUDA backend's fp32
//         products are strict-fp32 cuBLAS, no TF32), in other summation orders (cuBLAS
//         against OpenBLAS, the LayerNorm, softmax and column-sum reductions): single ops
//         agree to ~1e-6 (tests/cuda/cuda_ops_test.cc), about ten layers of backward amplify
//         that, and small tensors that sum many cancelling terms (LayerNorm and bias
//         gradients) get the looser per-tensor bound. The padded vocabulary rows' gradient
//         is exactly zero on both.
//   bf16  both sides store bf16 values in fp32 buffers (GPT::set_precision(kBf16): round_to
//         after every stored activation and activation gradient; parameters rounded once as
//         the engine does): the same roundings of nearly the same fp32 values. Where the fp32
//         values differ in their last bits across a bf16 rounding boundary the stored values
//         land one bf16 step (2^-8 relative) apart, and such flips propagate: loss within
//         1e-3, the whole gradient buffer within 1e-2, every gradient tensor within 3e-2.
// Nothing CUDA has run yet: these tolerances are reasoned, not measured; every test prints its
// measured errors so that a GPU session can tighten them (docs/cuda.md).
// The test needs GPT on device buffers (params() and grads() device memory of the backend,
// token ids taken from the host); it asserts that first, with a message. Without a visible
// GPU the tests are skipped with the reason.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend_test_util.h"
#include "backend/backend.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/gpu_runtime.h"
#include "core/precision.h"
#include "core/rng.h"
#include "model/config.h"
#include "model/gpt/gpt.h"

namespace weft {
namespace {

using Vec = std::vector<float>;


// A batch with structure: sequences over a 512-token subset of the vocabulary where each
// token is 31 x the previous plus a random 0..7 (mod 512). inputs = seq[0, T), targets = seq[1, T].
void make_batch(uint64_t seed, int64_t B, int64_t T, std::vector<int32_t>& in, std::vector<int32_t>& tg) {
  in.resize(static_cast<size_t>(B * T));
  tg.resize(static_cast<size_t>(B * T));
  for (int64_t b = 0; b < B; ++b) {
    auto r0 = Philox::draw(seed, kRngStreamBench, static_cast<uint64_t>(b * (T + 1)));
    int32_t tok = static_cast<int32_t>(r0[0] % 512);
    for (int64_t t = 0; t <= T; ++t) {
      if (t < T) in[static_cast<size_t>(b * T + t)] = tok;
      if (t > 0) tg[static_cast<size_t>(b * T + t - 1)] = tok;
      auto r = Philox::draw(seed, kRngStreamBench, static_cast<uint64_t>(b * (T + 1) + t + 1));
      tok = static_cast<int32_t>((tok * 31 + static_cast<int32_t>(r[0] % 8)) % 512);
    }
  }
}

// The loss and the gradients (host copy) of one forward_backward.
struct Step {
  float loss = 0.0f;
  Vec grads;
};

class GptDevice : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (gpu::device_count(&why) == 0) GTEST_SKIP() << "no CUDA device visible (" << why << ")";
    cpu_ = make_cpu_backend();
    gpu_ = cuda::make_cuda_backend();
  }

  // GPT on `be`: init(seed) (parameters rounded to p for a 16-bit p, as the engine's state
  // does), reserve, zero_grads, forward_backward with loss scale 1/(B T).
  void run(Backend& be, const ModelConfig& cfg, Precision p, uint64_t seed, const std::vector<int32_t>& in,
           const std::vector<int32_t>& tg, int64_t B, int64_t T, Step& out) {
    GPT g(cfg, be);
    g.set_precision(p);
    g.init(seed);
    ASSERT_NE(g.params(), nullptr);
    ASSERT_TRUE(be.is_device_memory(g.params()) && be.is_device_memory(g.grads()))
        << be.name() << ": GPT::params()/grads() are not device memory of the backend: the model has not moved "
        << "onto device buffers yet";
    if (p != Precision::kFp32) be.round_to(g.params(), g.num_params(), p);
    g.reserve(B, T, /*training=*/true);
    g.zero_grads();
    out.loss = g.forward_backward(in.data(), tg.data(), B, T, 1.0f / static_cast<float>(B * T));
    out.grads.assign(static_cast<size_t>(g.num_params()), 0.0f);
    be.copy_to_host(out.grads.data(), g.grads(), 0, out.grads.size() * sizeof(float));
  }

  // Per-tensor normalised errors of g against ref (each <= tol_tensor, the whole buffer <=
  // tol_all); prints the worst tensor and the whole buffer's error.
  void compare_grads(const ParamLayout& layout, const Vec& g, const Vec& ref, double tol_tensor, double tol_all,
                     const char* what) {
    ASSERT_EQ(g.size(), ref.size());
    double worst = 0.0;
    std::string worst_name;
    for (const ParamTensor& t : layout.tensors()) {
      const double e = test::rel_l2(g.data() + t.offset, ref.data() + t.offset, t.numel);
      EXPECT_LE(e, tol_tensor) << what << ": gradient of " << t.name;
      if (e > worst) worst = e, worst_name = t.name;
    }
    const double all = test::rel_l2(g.data(), ref.data(), static_cast<int64_t>(g.size()));
    EXPECT_LE(all, tol_all) << what << ": whole gradient buffer";
    std::printf("%s: worst gradient tensor error %.3g (%s), whole buffer %.3g\n", what, worst, worst_name.c_str(), all);
  }

  std::unique_ptr<Backend> cpu_;
  std::unique_ptr<cuda::CudaBackend> gpu_;
};

TEST_F(GptDevice, Fp32LossAndEveryGradientMatchTheCpuModel) {
  const ModelConfig cfg = model_preset("tiny");
  const int64_t B = 2, T = 48;  // T not a multiple of any tile
  std::vector<int32_t> in, tg;
  make_batch(7, B, T, in, tg);
  Step ref, got;
  run(*cpu_, cfg, Precision::kFp32, 11, in, tg, B, T, ref);
  if (HasFatalFailure()) return;
  run(*gpu_, cfg, Precision::kFp32, 11, in, tg, B, T, got);
  if (HasFatalFailure()) return;
  const double le = std::abs(static_cast<double>(got.loss) - ref.loss) / ref.loss;
  std::printf("fp32: loss %.7f (CPU %.7f), relative error %.3g\n", got.loss, ref.loss, le);
  EXPECT_LE(le, 1e-4);
  const ParamLayout layout = param_layout(cfg);
  compare_grads(layout, got.grads, ref.grads, 1e-3, 1e-4, "fp32 cuda vs cpu");
  // The padded vocabulary rows stay outside the softmax: their gradient is exactly zero.
  const ParamTensor* wte = layout.find("transformer.wte.weight");
  ASSERT_NE(wte, nullptr);
  for (int64_t i = int64_t{cfg.vocab_size} * cfg.n_embd; i < int64_t{cfg.padded_vocab} * cfg.n_embd; ++i) {
    ASSERT_EQ(got.grads[static_cast<size_t>(wte->offset + i)], 0.0f) << "padding row gradient at " << i;
  }
}

TEST_F(GptDevice, Bf16StorageLossAndGradientsFollowTheCpuModel) {
  const ModelConfig cfg = model_preset("tiny");
  const int64_t B = 2, T = 64;
  std::vector<int32_t> in, tg;
  make_batch(9, B, T, in, tg);
  Step ref, got;
  run(*cpu_, cfg, Precision::kBf16, 21, in, tg, B, T, ref);
  if (HasFatalFailure()) return;
  run(*gpu_, cfg, Precision::kBf16, 21, in, tg, B, T, got);
  if (HasFatalFailure()) return;
  const double le = std::abs(static_cast<double>(got.loss) - ref.loss) / ref.loss;
  std::printf("bf16 storage: loss %.6f (CPU %.6f), relative error %.3g\n", got.loss, ref.loss, le);
  EXPECT_LE(le, 1e-3);
  compare_grads(param_layout(cfg), got.grads, ref.grads, 3e-2, 1e-2, "bf16 cuda vs cpu");
}

}  // namespace
}  // namespace weft
