// Activation recompute: selective and full recompute give bitwise the losses and gradients of
// no recompute (the same code runs on the same inputs), on a whole model and on pipeline
// stages with several micro-batches in flight, and they stash less: full < selective < none,
// by exactly the bytes Korthikanti et al.'s accounting says.
#include <gtest/gtest.h>

#include <random>

#include "backend/backend.h"
#include "core/error.h"
#include "core/memory.h"
#include "core/buffer.h"
#include "model/gpt/gpt.h"
#include "model/gpt/gpt_config.h"

namespace weft {
namespace {

struct Result {
  std::vector<double> losses;
  std::vector<float> grads;
  int64_t stash = 0, workspace = 0;
};

// Three micro-batches, forward then backward each (whole model) or GPipe order on two stages.
Result run(Recompute mode, int full_layers, bool stages) {
  const ModelConfig cfg = make_model_config("r", 4, 2, 32, 16, 301);
  const int64_t B = 2, T = 16, M = 3;
  auto be = make_cpu_backend();
  std::mt19937 rng(11);
  std::uniform_int_distribution<int32_t> tok(0, cfg.vocab_size - 1);
  std::vector<int32_t> in(M * B * T), tg(M * B * T);
  for (auto& x : in) x = tok(rng);
  for (auto& x : tg) x = tok(rng);
  const float scale = 1.0f / static_cast<float>(M * B * T);
  Result r;
  std::vector<StageSpec> cut = stages ? std::vector<StageSpec>{{0, 2, true, false}, {2, 2, false, true}}
                                      : std::vector<StageSpec>{StageSpec{}};
  std::vector<std::unique_ptr<GPT>> st;
  for (const auto& s : cut) {
    st.push_back(std::make_unique<GPT>(cfg, *be, true, 1, 0, s));
    st.back()->init(5);
    st.back()->set_recompute(mode, full_layers);
    st.back()->reserve(B, T, true, 0, stages ? static_cast<int>(M) : 1);
    st.back()->zero_grads();
  }
  if (!stages) {
    for (int m = 0; m < M; ++m) {
      r.losses.push_back(st[0]->forward_backward(in.data() + m * B * T, tg.data() + m * B * T, B, T, scale));
    }
  } else {
    for (int m = 0; m < M; ++m) {
      st[0]->stage_forward(m, in.data() + m * B * T, nullptr, B, T, true);
      st[1]->stage_forward(m, nullptr, st[0]->stage_output(m), B, T, true);
    }
    for (int m = 0; m < M; ++m) {
      r.losses.push_back(st[1]->stage_backward(m, nullptr, tg.data() + m * B * T, nullptr, B, T, scale));
      const float* g = st[1]->stage_input_grad().as_f32();
      std::vector<float> dy(g, g + B * T * cfg.n_embd);
      st[0]->stage_backward(m, in.data() + m * B * T, nullptr, dy.data(), B, T, scale);
    }
  }
  for (auto& g : st) {
    r.grads.insert(r.grads.end(), g->grads(), g->grads() + g->num_params());
    r.stash += g->activation_bytes();
    r.workspace += g->workspace_bytes();
  }
  return r;
}

TEST(Recompute, SelectiveAndFullAreBitwiseNoRecompute) {
  for (bool stages : {false, true}) {
    const Result none = run(Recompute::kNone, -1, stages);
    for (auto [mode, k] : std::vector<std::pair<Recompute, int>>{
             {Recompute::kSelective, -1}, {Recompute::kFull, -1}, {Recompute::kFull, 1}}) {
      const Result r = run(mode, k, stages);
      const std::string what = fmt::format("{} (layers {}), {}", recompute_name(mode), k, stages ? "stages" : "whole");
      EXPECT_EQ(r.losses, none.losses) << what;
      ASSERT_EQ(r.grads.size(), none.grads.size());
      EXPECT_TRUE(r.grads == none.grads) << what;
    }
  }
}

TEST(Recompute, StashShrinksByTheRecomputedTerms) {
  // Whole model, one micro-batch: N = B*T = 32 rows, C 32, F 128, 2 heads, T 16, 4 layers.
  const int64_t N = 32, C = 32, F = 128, att = 2 * 2 * 16 * 16, L = 4;
  const int64_t layer = N * C + 4 * N + 3 * N * C + att + N * C + N * C + N * C + 2 * N * F + N * C;
  const int64_t outer = N * C + N * C + 2 * N;  // stage input; ln_f output and statistics
  const Result none = run(Recompute::kNone, -1, false);
  const Result sel = run(Recompute::kSelective, -1, false);
  const Result full = run(Recompute::kFull, -1, false);
  const Result full1 = run(Recompute::kFull, 1, false);
  EXPECT_EQ(none.stash, 4 * (outer + L * layer));
  EXPECT_EQ(sel.stash, 4 * (outer + L * (layer - att)));
  EXPECT_EQ(full.stash, 4 * (outer + L * N * C));
  EXPECT_EQ(full1.stash, 4 * (outer + N * C + (L - 1) * layer));
  EXPECT_LT(full.stash, sel.stash);
  EXPECT_LT(sel.stash, none.stash);
  // The workspace gains one set of probabilities (selective), one rematerialised layer (full).
  EXPECT_EQ(sel.workspace - none.workspace, 4 * att);
  EXPECT_EQ(full.workspace - none.workspace, 4 * (layer - N * C));
}

TEST(Recompute, ModesParseAndBadNamesAreRefused) {
  EXPECT_EQ(parse_recompute("none"), Recompute::kNone);
  EXPECT_EQ(parse_recompute("selective"), Recompute::kSelective);
  EXPECT_EQ(parse_recompute("full"), Recompute::kFull);
  try {
    parse_recompute("partial");
    FAIL() << "no error";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("'partial'"), std::string::npos) << e.what();
  }
}

TEST(MemoryTracker, BuffersCountTheirBytesByCategory) {
  const MemorySnapshot before = memory_tracker().snapshot();
  {
    Buffer<float> a(1000, MemCategory::kOptimizer);
    Buffer<float> b(10, MemCategory::kComm);
    b.resize(500);
    const MemorySnapshot mid = memory_tracker().snapshot();
    EXPECT_EQ(mid[MemCategory::kOptimizer] - before[MemCategory::kOptimizer], 4000);
    EXPECT_EQ(mid[MemCategory::kComm] - before[MemCategory::kComm], 2000);
    EXPECT_GE(mid.peak_of(MemCategory::kOptimizer), mid[MemCategory::kOptimizer]);
    Buffer<float> c = std::move(a);  // moves keep one count
    EXPECT_EQ(memory_tracker().snapshot()[MemCategory::kOptimizer] - before[MemCategory::kOptimizer], 4000);
    c.set_category(MemCategory::kParams);
    EXPECT_EQ(memory_tracker().snapshot()[MemCategory::kOptimizer], before[MemCategory::kOptimizer]);
  }
  const MemorySnapshot after = memory_tracker().snapshot();
  for (int i = 0; i < kMemCategories; ++i) EXPECT_EQ(after.current[i], before.current[i]) << i;
}

}  // namespace
}  // namespace weft
