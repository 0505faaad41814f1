// The divergence detector: the window's z-score (unit), and a training run whose batch at one
// step is made of random tokens after the model has learned a constant stream (a real loss
// spike, no hook in production code) under each spike_policy.
#include "train/divergence.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>
#include <nlohmann/json.hpp>
#include <random>

#include "core/error.h"
#include "data/loader.h"
#include "test_util.h"
#include "train/trainer.h"

namespace weft {
namespace {

using test::TempDir;
namespace fs = std::filesystem;

// Mean and population std of a list, by hand.
std::pair<double, double> mean_std(const std::vector<double>& v) {
  double m = 0;
  for (double x : v) m += x;
  m /= static_cast<double>(v.size());
  double ss = 0;
  for (double x : v) ss += (x - m) * (x - m);
  return {m, std::sqrt(ss / static_cast<double>(v.size()))};
}

TEST(Divergence, WindowZScoreMinCountAndSliding) {
  OutlierWindow w(4, 3);
  w.push(1.0);
  w.push(2.0);
  EXPECT_TRUE(std::isnan(w.zscore(100.0)));  // 2 values < min count 3
  w.push(3.0);
  auto [m, s] = mean_std({1, 2, 3});
  EXPECT_DOUBLE_EQ(w.zscore(10.0), (10.0 - m) / s);
  EXPECT_DOUBLE_EQ(w.zscore(2.0), 0.0);
  w.push(4.0);
  w.push(9.0);  // the window holds 2, 3, 4, 9: 1 dropped
  EXPECT_EQ(w.count(), 4);
  EXPECT_EQ(w.values().front(), 2.0);
  std::tie(m, s) = mean_std({2, 3, 4, 9});
  EXPECT_DOUBLE_EQ(w.mean(), m);
  EXPECT_DOUBLE_EQ(w.stddev(), s);
  EXPECT_DOUBLE_EQ(w.zscore(5.0), (5.0 - m) / s);
  OutlierWindow flat(3, 2);
  flat.push(1.0);
  flat.push(1.0);
  EXPECT_TRUE(std::isnan(flat.zscore(50.0)));  // std 0: no judgement
}

// 6 steps of a noisy level: loss 2 +- 0.1 (mean 2, std 0.1), grad norm 1 +- 0.05.
void feed_baseline(SpikeDetector& d) {
  for (int i = 0; i < 6; ++i) EXPECT_FALSE(d.judge(2.0 + (i % 2 ? 0.1 : -0.1), 1.0 + (i % 2 ? 0.05 : -0.05)));
  EXPECT_FALSE(d.take().has_value());
}

TEST(Divergence, DetectorFiresAboveThresholdPerPolicy) {
  for (SpikePolicy p : {SpikePolicy::kWarn, SpikePolicy::kSkipStep, SpikePolicy::kStop}) {
    SpikeDetector d(p, 5.0, 8, 4);
    feed_baseline(d);
    EXPECT_FALSE(d.judge(2.4, 1.0));  // z = 4: below 5
    EXPECT_FALSE(d.take().has_value());
    EXPECT_FALSE(d.judge(1.0, 1.0));  // far below: one-sided, no spike
    const bool veto = d.judge(20.0, 1.0);
    EXPECT_EQ(veto, p != SpikePolicy::kWarn) << spike_policy_name(p);
    std::optional<Spike> s = d.take();
    ASSERT_TRUE(s.has_value());
    EXPECT_TRUE(s->loss.spiked);
    EXPECT_FALSE(s->grad_norm.spiked);
    EXPECT_EQ(s->window_count, 8);
    EXPECT_GT(s->loss.z, 5.0);
    EXPECT_FALSE(d.take().has_value());  // taken once
    const nlohmann::json j = spike_json(*s, p);
    EXPECT_DOUBLE_EQ(j["loss_z"].get<double>(), s->loss.z);
  }
}

TEST(Divergence, GradNormSpikeAndLevelShiftStopsFiring) {
  SpikeDetector d(SpikePolicy::kSkipStep, 5.0, 16, 4);
  feed_baseline(d);
  EXPECT_TRUE(d.judge(2.0, 50.0));
  EXPECT_TRUE(d.take()->grad_norm.spiked);
  // A lasting new level: the spikes are part of the window, so it stops firing after a few.
  int fired = 0;
  for (int i = 0; i < 10; ++i) fired += d.judge(2.0, 50.0) ? 1 : 0;
  EXPECT_LT(fired, 10);
  EXPECT_FALSE(d.judge(2.0, 50.0));
}

TEST(Divergence, StopMessageNamesStepValueMeanAndStd) {
  SpikeDetector d(SpikePolicy::kStop, 5.0, 8, 4);
  feed_baseline(d);
  ASSERT_TRUE(d.judge(20.0, 1.0));
  const Spike s = *d.take();
  try {
    act_on_spike(s, d, 42, "runs/x/step-000040");
    FAIL() << "expected RuntimeError";
  } catch (const RuntimeError& e) {
    const std::string msg = e.what();
    for (const char* frag : {"step 42", "loss 20 is", "mean 2 (std 0.1)", "last 6 steps", "spike_zscore = 5",
                             "spike_policy = \"stop\"", "runs/x/step-000040"}) {
      EXPECT_NE(msg.find(frag), std::string::npos) << "missing \"" << frag << "\" in: " << msg;
    }
  }
}

TEST(Divergence, StateRoundTripAndBadStateRefused) {
  SpikeDetector a(SpikePolicy::kSkipStep, 5.0, 8, 4);
  feed_baseline(a);
  const nlohmann::json st = {{"spike_window", a.state()}};
  SpikeDetector b(SpikePolicy::kSkipStep, 5.0, 8, 4);
  b.restore(st, "ck/trainer.json");
  EXPECT_EQ(b.state(), a.state());
  EXPECT_EQ(a.judge(2.5, 1.0), b.judge(2.5, 1.0));
  SpikeDetector c(SpikePolicy::kWarn, 5.0, 8, 4);
  c.restore(nlohmann::json::object(), "old/trainer.json");  // an older checkpoint: empty windows
  EXPECT_EQ(c.state()["loss"].size(), 0u);
  nlohmann::json bad = st;
  bad["spike_window"]["loss"][2] = "x";
  try {
    c.restore(bad, "ck/trainer.json");
    FAIL() << "expected InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("ck/trainer.json: spike_window.loss[2]"), std::string::npos) << e.what();
  }
}

TEST(Divergence, ConfigKeysAreValidated) {
  RunConfig c;
  EXPECT_EQ(c.spike_policy, "warn");
  c.spike_policy = "ignore";
  EXPECT_THROW(c.validate(), InputError);
  c.spike_policy = "skip-step";
  c.spike_zscore = 0;
  EXPECT_THROW(c.validate(), InputError);
  c.spike_zscore = 5;
  c.spike_min_steps = 200;  // > spike_window 128
  EXPECT_THROW(c.validate(), InputError);
  c.spike_min_steps = 16;
  EXPECT_NO_THROW(c.validate());
}

// --- training with a spike ---

constexpr int kV = 512;  // a small vocabulary keeps the steps fast
constexpr int kT = 32, kG = 4;
constexpr int64_t kSpikeStep = 16;  // 1-based step whose batch is random tokens

// A constant stream (token 42), learned in a few steps, except for the four windows that step
// kSpikeStep reads, which hold random tokens: the loss of that step jumps from near 0 to ~11.
void make_spike_corpus(const std::string& dir, int64_t seed) {
  fs::create_directories(dir);
  const std::string train = dir + "/s_train_000000.bin";
  std::vector<int32_t> tokens(20000, 42);
  write_shard(train, tokens, kV);
  write_shard(dir + "/s_val_000000.bin", std::vector<int32_t>(2000, 42), kV);
  TokenDataset ds({train}, kV);
  std::mt19937 g(7);
  for (int s = 0; s < kG; ++s) {
    const int64_t w = ds.sample_window(static_cast<uint64_t>(seed), (kSpikeStep - 1) * kG + s, kT);
    for (int64_t i = w * kT; i <= w * kT + kT; ++i) tokens[static_cast<size_t>(i)] = static_cast<int32_t>(g() % kV);
  }
  write_shard(train, tokens, kV);
}

RunConfig spike_run(const std::string& data, const std::string& out, const std::string& policy) {
  RunConfig c;
  c.model = "tiny";
  c.n_layer = 2;
  c.n_head = 2;
  c.n_embd = 64;
  c.n_ctx = kT;
  c.vocab_size = kV;
  c.data = data;
  c.seq_len = kT;
  c.global_batch = kG;
  c.micro_batch = 2;
  c.steps = 20;
  c.lr = 1e-2;
  c.warmup_steps = 2;
  c.val_batches = 1;
  c.ckpt_every = 1;
  c.keep_last = 0;
  c.out = out;
  c.log_every = 100;
  c.threads = 2;
  c.spike_policy = policy;
  c.spike_window = 6;
  c.spike_min_steps = 6;
  return c;
}

std::vector<nlohmann::json> metric_lines(const std::string& run) {
  std::vector<nlohmann::json> out;
  std::ifstream in(run + "/metrics.jsonl");
  std::string line;
  while (std::getline(in, line)) {
    auto j = nlohmann::json::parse(line);
    if (j.contains("loss")) out.push_back(j);
  }
  return out;
}

std::string step_file(const std::string& run, int64_t step, const char* file) {
  return fmt::format("{}/step-{:06d}/{}", run, step, file);
}

class SpikeRun : public ::testing::Test {
 protected:
  void SetUp() override {
    tmp = std::make_unique<TempDir>("train");
    make_spike_corpus(*tmp / "data", RunConfig{}.seed);
  }
  std::unique_ptr<TempDir> tmp;
};

TEST_F(SpikeRun, WarnMarksTheStepAndChangesNothing) {
  const std::string out = *tmp / "warn";
  TrainResult r = train(spike_run(*tmp / "data", out, "warn"), {});
  EXPECT_EQ(r.steps_done, 20);
  const auto m = metric_lines(out);
  ASSERT_EQ(m.size(), 20u);
  for (const auto& j : m) {
    EXPECT_EQ(j.contains("spike"), j["step"] == kSpikeStep) << j.dump();
  }
  const nlohmann::json& s = m[kSpikeStep - 1]["spike"];
  EXPECT_EQ(s["action"], "warned");
  EXPECT_GT(s["loss_z"].get<double>(), 5.0);
  EXPECT_GT(m[kSpikeStep - 1]["loss"].get<double>(), m[kSpikeStep - 2]["loss"].get<double>() + 1.0);
  // The update was applied: the parameters moved across the spike step.
  EXPECT_NE(test::read_text(step_file(out, kSpikeStep - 1, "model.safetensors")),
            test::read_text(step_file(out, kSpikeStep, "model.safetensors")));
}

TEST_F(SpikeRun, SkipStepKeepsParametersAndContinues) {
  const std::string out = *tmp / "skip";
  TrainResult r = train(spike_run(*tmp / "data", out, "skip-step"), {});
  EXPECT_EQ(r.steps_done, 20);
  const auto m = metric_lines(out);
  ASSERT_EQ(m.size(), 20u);
  EXPECT_EQ(m[kSpikeStep - 1]["spike"]["action"], "skipped");
  // Parameters and moments are bit for bit those of the step before; later steps update again.
  for (const char* f : {"model.safetensors", "optimizer.safetensors"}) {
    EXPECT_EQ(test::read_text(step_file(out, kSpikeStep - 1, f)), test::read_text(step_file(out, kSpikeStep, f))) << f;
    EXPECT_NE(test::read_text(step_file(out, kSpikeStep, f)), test::read_text(step_file(out, kSpikeStep + 1, f))) << f;
  }
  const auto st = nlohmann::json::parse(test::read_text(step_file(out, 20, "trainer.json")));
  EXPECT_EQ(st["optimizer_steps"].get<int64_t>(), 19);
  // The loss after the skipped step is back at the learned level.
  EXPECT_LT(m[kSpikeStep]["loss"].get<double>(), m[kSpikeStep - 2]["loss"].get<double>() * 2 + 0.1);
}

TEST_F(SpikeRun, StopExitsOneAndKeepsTheLastCheckpoint) {
  const std::string out = *tmp / "stop";
  const std::string cfg = *tmp / "run.toml";
  std::ofstream(cfg) << spike_run(*tmp / "data", out, "stop").to_toml();
  const test::RunResult r = test::run_weft(fmt::format("train {} --ckpt_every 5", cfg), *tmp / "cli");
  EXPECT_EQ(r.code, 1) << r.err;
  for (const std::string& frag : std::vector<std::string>{fmt::format("step {}: spike: loss", kSpikeStep), "standard deviations above the mean",
                                 "(std ", "spike_policy = \"stop\"", "step-000015"}) {
    EXPECT_NE(r.err.find(frag), std::string::npos) << "missing \"" << frag << "\" in: " << r.err;
  }
  EXPECT_TRUE(fs::exists(step_file(out, 15, "model.safetensors")));
  EXPECT_FALSE(fs::exists(fmt::format("{}/step-{:06d}", out, kSpikeStep)));
  const auto m = metric_lines(out);  // parses: no torn line
  ASSERT_EQ(m.size(), static_cast<size_t>(kSpikeStep));
  EXPECT_EQ(m.back()["spike"]["action"], "stopped");
}

// Two data-parallel ranks judge the same reduced values: both skip step kSpikeStep (no hang, no
// divergence between ranks) and the curve follows the one-rank run.
TEST_F(SpikeRun, SkipStepIsTheSameOnTwoRanks) {
  const std::string cfg = *tmp / "run.toml";
  std::ofstream(cfg) << spike_run(*tmp / "data", *tmp / "one", "skip-step").to_toml();
  const std::string args = fmt::format("train {} --ckpt_every 0 --threads 1 --comm_timeout 60", cfg);
  const test::RunResult one = test::run_weft(args, *tmp / "one");
  ASSERT_EQ(one.code, 0) << one.err;
  const test::RunResult two =
      test::run_weft_with(test::mpi_launcher(2), args + " --out " + (*tmp / "two"), *tmp / "two");
  ASSERT_EQ(two.code, 0) << two.err;
  const auto a = metric_lines(*tmp / "one"), b = metric_lines(*tmp / "two");
  ASSERT_EQ(a.size(), 20u);
  ASSERT_EQ(b.size(), 20u);
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(b[i].contains("spike"), a[i].contains("spike")) << "step " << i + 1;
    EXPECT_NEAR(b[i]["loss"].get<double>(), a[i]["loss"].get<double>(), 1e-5 * a[i]["loss"].get<double>() + 1e-7)
        << "step " << i + 1;
  }
  EXPECT_EQ(b[kSpikeStep - 1]["spike"]["action"], "skipped");
  EXPECT_NE(two.out.find("dp 2"), std::string::npos) << two.out;
  // Each rank judged the step itself (warnings are printed by every rank).
  EXPECT_NE(two.err.find(fmt::format("[rank 1] step {}: spike", kSpikeStep)), std::string::npos) << two.err;
}

// The windows travel in trainer.json: a run resumed at step 15 (one value after the resume,
// far below spike_min_steps 6 without them) still skips step 16, and its curve is the
// uninterrupted run's, bit for bit.
TEST_F(SpikeRun, ResumedRunJudgesAsTheUninterruptedOne) {
  const std::string full = *tmp / "full", part = *tmp / "part";
  train(spike_run(*tmp / "data", full, "skip-step"), {});
  fs::create_directories(part);
  fs::copy(fmt::format("{}/step-{:06d}", full, kSpikeStep - 1), fmt::format("{}/step-{:06d}", part, kSpikeStep - 1),
           fs::copy_options::recursive);
  {
    std::ofstream out(part + "/metrics.jsonl");
    for (const auto& j : metric_lines(full)) {
      if (j["step"].get<int64_t>() < kSpikeStep) out << j.dump() << "\n";
    }
  }
  const auto st = nlohmann::json::parse(test::read_text(step_file(part, kSpikeStep - 1, "trainer.json")));
  ASSERT_EQ(st["spike_window"]["loss"].size(), 6u);
  TrainOptions opt;
  opt.resume = true;
  const TrainResult r = train(spike_run(*tmp / "data", part, "skip-step"), opt);
  EXPECT_EQ(r.first_step, kSpikeStep - 1);
  const auto a = metric_lines(full), b = metric_lines(part);
  ASSERT_EQ(b.size(), a.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(b[i]["loss"].get<double>(), a[i]["loss"].get<double>()) << "step " << i + 1;
    EXPECT_EQ(b[i].value("spike", nlohmann::json()), a[i].value("spike", nlohmann::json())) << "step " << i + 1;
  }
  EXPECT_EQ(b[kSpikeStep - 1]["spike"]["action"], "skipped");
}

// Issue 34 class 9: a climb the spike detector does not flag is said once.
TEST(DivergenceWatch, WarnsOnceWhenTheLossClimbsBackOrAwayAndNeverOnANoisyDescent) {
  {
    DivergenceWatch w;  // a noisy descent with single bad steps: nothing
    int warned = 0;
    for (int s = 1; s <= 400; ++s) {
      const double loss = 3.0 + 7.8 * std::exp(-s / 40.0) + 0.3 * std::sin(s * 1.7) + (s % 97 == 0 ? 4.0 : 0.0);
      warned += w.observe(s, loss).has_value();
    }
    EXPECT_EQ(warned, 0);
  }
  {
    DivergenceWatch w;  // down from 10.8 to 3, then back up to 7.5 (more than half the way lost)
    std::vector<int64_t> at;
    for (int s = 1; s <= 60; ++s) {
      const double loss = s <= 30 ? 10.8 - 0.26 * s : 7.5;
      if (const auto m = w.observe(s, loss)) {
        at.push_back(s);
        EXPECT_NE(m->find("the run looks diverging: the loss 7.5 has been above"), std::string::npos) << *m;
        EXPECT_NE(m->find("lowest 3 at step 30"), std::string::npos) << *m;
      }
    }
    EXPECT_EQ(at, (std::vector<int64_t>{33}));  // the third step above the limit, and only once
  }
  {
    DivergenceWatch w;  // never came down: 1.5 x the first loss for 3 steps
    std::vector<int64_t> at;
    for (int s = 1; s <= 20; ++s) {
      if (w.observe(s, 10.0 + 2.0 * s)) at.push_back(s);
    }
    EXPECT_EQ(at, (std::vector<int64_t>{7}));  // first 12: above 18 from step 5 (20, 22, 24)
  }
}

}  // namespace
}  // namespace weft
