// A 16-bit GPT's staging arena (backend.h's typed ops stage the 16-bit operands in fp32): the
// description's staging_elems() (what GPT::reserve reserves and the planner counts as
// workspace) is exactly the most any one op stages in a step, over a table of runs on one rank
// (bf16 and fp16; recompute none, selective, full; the whole model and first and last pipeline
// parts; training and forward only; the default row chunk and a small one that cuts every
// row-chunked op into many; exact and fast products, native bf16 ones where the CPU has them),
// on cpu and cpu-guarded: the arena never grows during a step and holds nothing it does not
// use. An fp32 run stages nothing.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "backend/registry.h"
#include "model/gpt/gpt.h"
#include "model/gpt/gpt_config.h"
#include "model/gpt/gpt_description.h"

namespace weft {
namespace {

struct StagingRun {
  Precision precision;
  Recompute recompute;
  StageSpec stage;
  bool training;
  int64_t chunk = kStagingChunk;
  MatmulMode matmul = MatmulMode::kExact;
  std::string name() const {
    return fmt::format("{} {} layers {}+{} emb {} head {} training {} chunk {} matmul {}", precision_name(precision),
                       recompute_name(recompute), stage.first_layer, stage.num_layers, stage.embedding, stage.head,
                       training, chunk, matmul_mode_name(matmul));
  }
};

void check(const std::string& backend, const StagingRun& r) {
  const ModelConfig cfg = make_model_config("g", 4, 2, 32, 16, 301);
  const int64_t B = 2, T = 16;
  auto be = make_backend(backend);
  be->set_staging_chunk(r.chunk);
  be->set_products({r.precision, r.matmul, ""});
  GPT g(cfg, *be, true, 1, 0, r.stage);
  g.init(3);
  g.set_recompute(r.recompute);
  g.set_precision(r.precision);
  g.reserve(B, T, r.training, 0, 1);
  g.zero_grads();
  const GptDescription d({.model = cfg, .B = B, .T = T, .tp = 1, .recompute = r.recompute,
                          .precision = r.precision, .stage = g.layout().stage(), .training = r.training,
                          .staging_chunk = r.chunk, .native_products = be->native_16bit_products()});
  const int64_t reserved = be->staging_bytes();
  EXPECT_EQ(reserved, d.staging_bytes()) << r.name();
  std::mt19937 rng(5);
  std::uniform_int_distribution<int32_t> tok(0, cfg.vocab_size - 1);
  std::vector<int32_t> in(B * T), tg(B * T);
  for (auto& x : in) x = tok(rng);
  for (auto& x : tg) x = tok(rng);
  const StageSpec& s = g.layout().stage();
  // A later stage's input from a previous one (any values), in the residual stream's dtype.
  const DType res = d.residual_dtype();
  DeviceBuffer x(*be, res, B * T * cfg.n_embd);
  x.fill(0.25f);
  g.stage_forward(0, in.data(), s.embedding ? CView() : CView(x.raw(), res), B, T, r.training);
  if (r.training) {
    DeviceBuffer dy(*be, res, B * T * cfg.n_embd);
    dy.fill(0.01f);
    g.stage_backward(0, in.data(), tg.data(), s.head ? CView() : CView(dy.raw(), res), B, T, 1.0f);
  } else if (s.head) {
    g.stage_loss(0, tg.data(), B, T);  // an evaluation's loss: the head's logits
  }
  EXPECT_EQ(be->staging_high_water() * 4, d.staging_bytes()) << r.name() << ": the most one op staged";
  EXPECT_EQ(be->staging_bytes(), reserved) << r.name() << ": the arena grew during the step";
}

class GptStaging : public ::testing::TestWithParam<std::string> {};

TEST_P(GptStaging, DescriptionIsTheMostOneOpStages) {
  const std::vector<StageSpec> stages = {StageSpec{}, {0, 2, true, false}, {2, 2, false, true}};
  int runs = 0;
  for (Precision p : {Precision::kBf16, Precision::kFp16}) {
    for (Recompute rc : {Recompute::kNone, Recompute::kSelective, Recompute::kFull}) {
      for (const StageSpec& st : stages) {
        for (bool training : {true, false}) {
          if (!training && rc != Recompute::kNone) continue;
          for (int64_t chunk : {kStagingChunk, int64_t{100}}) {
            for (MatmulMode mm : {MatmulMode::kExact, MatmulMode::kFast}) {
              const StagingRun run{p, rc, st, training, chunk, mm};
              SCOPED_TRACE(run.name());
              check(GetParam(), run);
              ++runs;
            }
          }
        }
      }
    }
  }
  EXPECT_EQ(runs, 96);
}

TEST_P(GptStaging, Fp32StagesNothing) {
  auto be = make_backend(GetParam());
  const ModelConfig cfg = make_model_config("g", 4, 2, 32, 16, 301);
  GPT g(cfg, *be);
  g.init(3);
  g.reserve(2, 16, true);
  std::vector<int32_t> in(32, 1), tg(32, 2);
  g.forward_backward(in.data(), tg.data(), 2, 16, 1.0f);
  EXPECT_EQ(be->staging_high_water(), 0);
  EXPECT_EQ(be->staging_bytes(), 0);
}

INSTANTIATE_TEST_SUITE_P(Backends, GptStaging, ::testing::Values("cpu", "cpu-guarded"),
                         [](const auto& info) { return info.param == "cpu" ? std::string("cpu") : std::string("guarded"); });

}  // namespace
}  // namespace weft
