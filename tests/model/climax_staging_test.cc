// A 16-bit ClimaX's staging arena, as gpt_staging_test.cc for GPT: the description's
// staging_elems() (what ClimaX::reserve reserves and the planner counts as workspace) is exactly
// the most any one op stages in a step (the blocks and the front and back ends), over bf16 and
// fp16, recompute none and full, training and forward only, the default row chunk and a small
// one, exact and fast products (native bf16 ones where the CPU has them), on cpu and cpu-guarded.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "backend/registry.h"
#include "model/climax/climax.h"
#include "model/climax/climax_config.h"
#include "model/climax/climax_description.h"

namespace weft {
namespace {

struct ClimaxRun {
  Precision precision;
  Recompute recompute;
  bool training;
  int64_t chunk;
  MatmulMode matmul;
  std::string name() const {
    return fmt::format("{} {} training {} chunk {} matmul {}", precision_name(precision), recompute_name(recompute),
                       training, chunk, matmul_mode_name(matmul));
  }
};

void check(const std::string& backend, const ClimaxRun& r) {
  const int V = 3, H = 8, W = 16;
  const ModelConfig cfg = make_climax_config("s", 2, 4, 32, V, H, W, 2);
  const int64_t B = 2, field = int64_t{V} * H * W;
  auto be = make_backend(backend);
  be->set_staging_chunk(r.chunk);
  be->set_products({r.precision, r.matmul, ""});
  ClimaX m(cfg, *be);
  m.init(3);
  m.set_recompute(r.recompute, -1);
  m.set_precision(r.precision);
  m.reserve(B, r.training);
  m.zero_grads();
  const ClimaxDescription d({.model = cfg, .B = B, .tp = 1, .recompute = r.recompute, .precision = r.precision,
                             .training = r.training, .staging_chunk = r.chunk,
                             .native_products = be->native_16bit_products()});
  const int64_t reserved = be->staging_bytes();
  EXPECT_EQ(reserved, 4 * d.staging_elems());
  std::mt19937 rng(5);
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::vector<float> x(B * field), y(B * field), lead(B, 24.0f);
  for (auto& v : x) v = g(rng);
  for (auto& v : y) v = g(rng);
  const ClimaxBatch mb{x.data(), y.data(), lead.data()};
  if (r.training) {
    m.forward_backward(mb, B, 1.0f);
  } else {
    m.forward_loss(mb, B);
  }
  EXPECT_EQ(be->staging_high_water(), d.staging_elems()) << "the most one op staged";
  EXPECT_EQ(be->staging_bytes(), reserved) << "the arena grew during the step";
}

class ClimaxStaging : public ::testing::TestWithParam<std::string> {};

TEST_P(ClimaxStaging, DescriptionIsTheMostOneOpStages) {
  int runs = 0;
  for (Precision p : {Precision::kBf16, Precision::kFp16}) {
    for (Recompute rc : {Recompute::kNone, Recompute::kFull}) {
      for (bool training : {true, false}) {
        if (!training && rc != Recompute::kNone) continue;
        for (int64_t chunk : {kStagingChunk, int64_t{100}}) {
          for (MatmulMode mm : {MatmulMode::kExact, MatmulMode::kFast}) {
            const ClimaxRun run{p, rc, training, chunk, mm};
            SCOPED_TRACE(run.name());
            check(GetParam(), run);
            ++runs;
          }
        }
      }
    }
  }
  EXPECT_EQ(runs, 24);
}

INSTANTIATE_TEST_SUITE_P(Backends, ClimaxStaging, ::testing::Values("cpu", "cpu-guarded"),
                         [](const auto& info) { return info.param == "cpu" ? std::string("cpu") : std::string("guarded"); });

}  // namespace
}  // namespace weft
