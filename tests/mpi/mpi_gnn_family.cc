// Layout parity of the graph-network family (issue 33, item 4): the same seed and global batch of
// 24 periodic Lennard-Jones structures (8 and 27 atoms: the ranks' shares hold different numbers
// of atoms and edges) on dp = world ranks reproduce the one-rank losses, gradient norms and
// parameters within 1e-5 relative, at ZeRO 0-3 and with HSDP, for SchNet, EGNN and PNA. Only a loss
// whose forces term is averaged over the global batch's atoms and whose energy term over its
// graphs is layout invariant. tp > 1 is refused with the numbers.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "mpi_test_util.h"
#include "backend/backend.h"
#include "comm/self_comm.h"
#include "core/error.h"
#include "data/atoms/graph_batch.h"
#include "data/atoms/lennard_jones.h"
#include "engine/engine.h"
#include "model/config.h"
#include "model/gnn/gnn_config.h"

namespace weft {
namespace {

constexpr int64_t kGlobalBatch = 24;

struct Run {
  std::vector<StepResult> steps;
  std::vector<float> params;
  double val = 0.0;
};

GraphSample structure(int64_t index) {
  LjSetOptions o;
  o.structures = 1000, o.min_cells = 2, o.max_cells = 3, o.species = 2, o.seed = 11;
  return make_graph_sample(lj_structure(o, index), RadiusGraphOptions{5.0, 0});
}

ModelConfig config(const char* preset) {
  ModelConfig c = model_preset(preset);
  GnnFields f = gnn_fields(c);
  f.energy_mean = -3.0, f.energy_std = 0.5, f.force_scale = 2.0;
  f.forces_weight = 2.0;
  return with_gnn_fields(c, f);
}

Run train(Communicator& world, const char* preset, int zero, int64_t micro_batch, int replicate, float lr) {
  EngineConfig cfg;
  cfg.model = config(preset);
  cfg.seq = 0;
  cfg.layout.micro_batch = micro_batch;
  cfg.global_batch = kGlobalBatch;
  cfg.layout.dp = world.size();
  cfg.layout.dp_replicate = replicate;
  cfg.layout.zero = zero;
  cfg.adamw.weight_decay = 0.1f;
  auto be = make_cpu_backend();
  Engine engine(cfg, world, *be);
  engine.init_params(5);
  Run out;
  for (int step = 0; step < 4; ++step) {
    out.steps.push_back(engine.step(lr, [&](int64_t first, int64_t count, HostBatch& hb) {
      for (int64_t i = 0; i < count; ++i) dynamic_cast<GraphBatch&>(hb).append(structure(first + i));  // one batch, so the loss falls
    }));
  }
  const auto n = static_cast<size_t>(engine.whole_layout().total());
  std::vector<float> m(n), v(n);
  out.params.resize(n);
  engine.gather_state(out.params.data(), m.data(), v.data());
  out.val = engine.evaluate_rows(
      [](int64_t first, int64_t count, HostBatch& hb) {
        for (int64_t i = 0; i < count; ++i) dynamic_cast<GraphBatch&>(hb).append(structure(500 + first + i));
      },
      10);
  return out;
}

// One rank runs the global batch in micro-batches of 4 (or, with same_micro_batches, of the
// ranks' size: BatchNorm normalises over a micro-batch's atoms, so PNA's losses depend on how
// the global batch is cut into micro-batches, not on how they are dealt to ranks).
void expect_one_rank_curve(const char* preset, int zero, int replicate = 1, bool same_micro_batches = false,
                           float lr = 1e-2f) {
  std::unique_ptr<Communicator> world = test::fresh_world();
  // HSDP needs dp_replicate to divide the ranks: on 3 ranks it cannot be laid out (the 2, 4 and 8
  // rank runs of the same binary cover it).
  if (world->size() % replicate != 0) GTEST_SKIP() << "dp_replicate " << replicate << " does not divide the ranks";
  const int64_t mb = kGlobalBatch % (2 * world->size()) == 0 ? 2 : 1;
  const Run many = train(*world, preset, zero, mb, replicate, lr);
  std::unique_ptr<Communicator> self = make_self_communicator();
  const Run one = train(*self, preset, zero, same_micro_batches ? mb : 4, 1, lr);
  ASSERT_EQ(many.steps.size(), one.steps.size());
  for (size_t s = 0; s < one.steps.size(); ++s) {
    EXPECT_NEAR(many.steps[s].loss, one.steps[s].loss, 1e-5 * std::abs(one.steps[s].loss)) << preset << " step " << s;
    EXPECT_NEAR(many.steps[s].grad_norm, one.steps[s].grad_norm, 1e-5 * one.steps[s].grad_norm) << preset << " step " << s;
  }
  double worst = 0.0;
  for (size_t i = 0; i < one.params.size(); ++i) {
    worst = std::max(worst, std::abs(static_cast<double>(many.params[i]) - one.params[i]) /
                                std::max(1.0, std::abs(static_cast<double>(one.params[i]))));
  }
  EXPECT_LT(worst, 1e-5) << preset << ": parameters after the steps";
  EXPECT_NEAR(many.val, one.val, 1e-5 * one.val);
  EXPECT_LT(one.steps.back().loss, one.steps.front().loss) << preset << ": it learns";
}

TEST(GnnFamily, SchnetOnDpRanksFollowsTheOneRankCurveAtEveryZeroStage) {
  for (int zero : {0, 1, 2, 3}) expect_one_rank_curve("gnn-tiny", zero);
}

TEST(GnnFamily, EgnnOnDpRanksFollowsTheOneRankCurveAtZero1And3) {
  expect_one_rank_curve("gnn-egnn-tiny", 1);
  expect_one_rank_curve("gnn-egnn-tiny", 3);
}

TEST(GnnFamily, HsdpFollowsTheOneRankCurve) { expect_one_rank_curve("gnn-tiny", 3, 2); }

// PNA: BatchNorm's batch statistics in training, its running statistics (summed over the step's
// micro-batches and ranks in their gradient slots, blended in by the optimizer) in evaluation.
// At lr 1e-3: these cells' atoms have nearly equal in-degrees, so the degree scalers are nearly
// constant and the edge encoder's and pre's biases nearly null directions of a normalised layer;
// AdamW turns their rounding-level gradients into steps of about lr that differ between layouts
// (at lr 1e-2 the gradient norms part by 2e-5 after 4 steps; the losses still agree).
TEST(GnnFamily, PnaOnDpRanksFollowsTheOneRankCurveAtZero0And3AndHsdp) {
  expect_one_rank_curve("gnn-pna-tiny", 0, 1, true, 1e-3f);
  expect_one_rank_curve("gnn-pna-tiny", 3, 1, true, 1e-3f);
  expect_one_rank_curve("gnn-pna-tiny", 2, 2, true, 1e-3f);
}

TEST(GnnFamily, TensorParallelIsRefusedWithTheNumbers) {
  std::unique_ptr<Communicator> world = test::fresh_world();
  // tp 2 x dp needs an even world; on 3 ranks another error (the layout does not divide) would
  // come first. The 2, 4 and 8 rank runs check the refusal.
  if (world->size() % 2 != 0) GTEST_SKIP() << "tp 2 needs an even number of ranks";
  EngineConfig cfg;
  cfg.model = config("gnn-tiny");
  cfg.seq = 0;
  cfg.layout.tp = 2;
  cfg.layout.dp = world->size() / 2;
  cfg.layout.micro_batch = 1;
  cfg.global_batch = kGlobalBatch;
  auto be = make_cpu_backend();
  try {
    Engine engine(cfg, *world, *be);
    FAIL() << "tp 2 was accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("graph network models run without tensor parallelism: tp must be 1, got 2"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace weft
