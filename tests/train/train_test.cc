// The training loop: resume is bit-identical, gradient accumulation is layout-invariant,
// validation and metrics are written.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "test_util.h"
#include "train/trainer.h"

namespace weft {
namespace {

using test::TempDir;
namespace fs = std::filesystem;

RunConfig small_run(const std::string& data, const std::string& out) {
  RunConfig c;
  c.model = "tiny";
  c.n_layer = 2;
  c.n_head = 2;
  c.n_embd = 64;
  c.n_ctx = 32;
  c.data = data;
  c.seq_len = 32;
  c.global_batch = 4;
  c.micro_batch = 2;
  c.steps = 8;
  c.lr = 3e-3;
  c.warmup_steps = 2;
  c.val_every = 4;
  c.val_batches = 2;
  c.ckpt_every = 4;
  c.keep_last = 0;
  c.out = out;
  c.log_every = 100;
  c.threads = 2;
  return c;
}

std::vector<nlohmann::json> read_metrics(const std::string& path) {
  std::vector<nlohmann::json> out;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) out.push_back(nlohmann::json::parse(line));
  return out;
}

std::vector<double> train_losses(const std::vector<nlohmann::json>& m) {
  std::vector<double> out;
  for (const auto& j : m) {
    if (j.contains("loss")) out.push_back(j["loss"].get<double>());
  }
  return out;
}

TEST(Train, ResumeIsBitIdentical) {
  TempDir tmp("train");
  test::make_random_corpus(tmp / "data", 20000, 2000);
  RunConfig full = small_run(tmp / "data", tmp / "full");
  TrainResult a = train(full, {});
  ASSERT_EQ(a.steps_done, 8);

  // A second run folder that holds only the step-4 checkpoint and the metrics up to there
  // plus a torn line, as a crash right after step 5 would leave it.
  const std::string part = tmp / "part";
  fs::create_directories(part);
  fs::copy(tmp / "full/step-000004", part + "/step-000004", fs::copy_options::recursive);
  {
    auto m = read_metrics(tmp / "full/metrics.jsonl");
    std::ofstream out(part + "/metrics.jsonl");
    for (const auto& j : m) {
      if (j["step"].get<int64_t>() <= 5) out << j.dump() << "\n";
    }
    out << "{\"step\": 6, \"lo";  // torn write
  }
  TrainOptions opt;
  opt.resume = true;
  TrainResult b = train(small_run(tmp / "data", part), opt);
  EXPECT_EQ(b.first_step, 4);
  EXPECT_EQ(b.steps_done, 8);

  auto ma = read_metrics(tmp / "full/metrics.jsonl");
  auto mb = read_metrics(part + "/metrics.jsonl");
  ASSERT_EQ(ma.size(), mb.size());
  for (size_t i = 0; i < ma.size(); ++i) {
    ASSERT_EQ(ma[i]["step"], mb[i]["step"]);
    for (const char* k : {"loss", "lr", "grad_norm", "val_loss"}) {
      if (ma[i].contains(k)) {
        ASSERT_TRUE(mb[i].contains(k));
        // bit for bit: the doubles printed with full round-trip precision are identical
        EXPECT_EQ(ma[i][k].get<double>(), mb[i][k].get<double>()) << k << " at step " << ma[i]["step"];
      }
    }
  }
  // The final weights are identical to the last bit.
  EXPECT_EQ(test::read_text(tmp / "full/step-000008/model.safetensors"), test::read_text(part + "/step-000008/model.safetensors"));
  EXPECT_EQ(test::read_text(tmp / "full/step-000008/optimizer.safetensors"),
            test::read_text(part + "/step-000008/optimizer.safetensors"));
}

// The same global batch split into 1, 2 or 4 micro-batches follows the same loss curve.
TEST(Train, GradientAccumulationIsLayoutInvariant) {
  TempDir tmp("train");
  test::make_random_corpus(tmp / "data", 20000, 2000);
  std::vector<std::vector<double>> curves;
  for (int64_t mb : {4, 2, 1}) {
    RunConfig c = small_run(tmp / "data", tmp / fmt::format("mb{}", mb));
    c.micro_batch = mb;
    c.val_batches = 0;
    c.steps = 12;
    c.ckpt_every = 0;
    train(c, {});
    curves.push_back(train_losses(read_metrics(tmp / fmt::format("mb{}/metrics.jsonl", mb))));
  }
  ASSERT_EQ(curves[0].size(), 12u);
  for (size_t k = 1; k < curves.size(); ++k) {
    for (size_t s = 0; s < curves[0].size(); ++s) {
      EXPECT_NEAR(curves[k][s], curves[0][s], 1e-5 * curves[0][s]) << "micro-batch split " << k << ", step " << s + 1;
    }
  }
  // And the model learns the corpus' cycle: the loss falls well below its start.
  EXPECT_LT(curves[0].back(), curves[0].front() - 1.0);
}

TEST(Train, MetricsValidationAndCheckpoints) {
  TempDir tmp("train");
  test::make_random_corpus(tmp / "data", 20000, 2000);
  RunConfig c = small_run(tmp / "data", tmp / "run");
  c.keep_last = 1;
  TrainResult r = train(c, {});
  auto m = read_metrics(tmp / "run/metrics.jsonl");
  int steps = 0, vals = 0;
  for (const auto& j : m) {
    if (j.contains("loss")) {
      ++steps;
      for (const char* k : {"step", "loss", "lr", "grad_norm", "tokens_per_s"}) EXPECT_TRUE(j.contains(k)) << k;
      EXPECT_GT(j["tokens_per_s"].get<double>(), 0.0);
    }
    if (j.contains("val_loss")) ++vals;
  }
  EXPECT_EQ(steps, 8);
  EXPECT_EQ(vals, 3);  // before training, step 4, step 8
  EXPECT_LT(r.last_val_loss, r.first_val_loss);
  // keep_last = 1: only the final checkpoint remains
  EXPECT_FALSE(fs::exists(tmp / "run/step-000004"));
  EXPECT_TRUE(fs::exists(tmp / "run/step-000008/model.safetensors"));
  EXPECT_EQ(find_latest_checkpoint(tmp / "run"), tmp / "run/step-000008");
  EXPECT_TRUE(fs::exists(tmp / "run/config.toml"));
}

}  // namespace
}  // namespace weft

namespace weft {
namespace {

// init_from: a run starts from another run's weights (the model's shape read from its
// config.json), with a fresh optimizer at step 0; its validation before training equals the
// source's last validation bit for bit. A shape key that disagrees is refused with both values.
TEST(Train, InitFromStartsFromTheCheckpointsWeights) {
  TempDir tmp("train");
  test::make_random_corpus(tmp / "data", 20000, 2000);
  RunConfig src = small_run(tmp / "data", tmp / "src");
  TrainResult a = train(src, {});
  ASSERT_EQ(a.steps_done, 8);

  RunConfig ft = small_run(tmp / "data", tmp / "ft");
  ft.model = "gpt2-124m";  // not used: the checkpoint's config.json gives the model
  ft.n_layer = ft.n_head = ft.n_embd = ft.n_ctx = 0;
  ft.init_from = tmp / "src/step-000008";
  ft.steps = 4;
  ft.lr = 1e-3;
  TrainResult b = train(ft, {});
  EXPECT_EQ(b.first_step, 0);
  EXPECT_EQ(b.steps_done, 4);
  EXPECT_EQ(b.first_val_loss, a.last_val_loss);
  EXPECT_NE(test::read_text(tmp / "src/step-000008/model.safetensors"), test::read_text(tmp / "ft/step-000004/model.safetensors"));
  EXPECT_EQ(ft.model_config().n_embd, 64);

  RunConfig bad = ft;
  bad.out = tmp / "bad";
  bad.n_embd = 128;
  try {
    train(bad, {});
    FAIL() << "expected InputError";
  } catch (const InputError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("n_embd = 128"), std::string::npos) << msg;
    EXPECT_NE(msg.find("n_embd = 64"), std::string::npos) << msg;
  }
  EXPECT_FALSE(fs::exists(tmp / "bad/metrics.jsonl"));

  bad.n_embd = 0;
  bad.init_from = tmp / "nowhere";
  EXPECT_THROW(train(bad, {}), InputError);
}

}  // namespace
}  // namespace weft
