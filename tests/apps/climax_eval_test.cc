// `weft eval` of a ClimaX checkpoint (apps/eval_weather.cc): a climax-tiny trained for 3 steps
// on generated weather, scored on the test split. The baselines in its JSON are checked against
// data/weather.h's persistence_rmse / climatology_rmse, the model's scores against forecasts made
// here one at a time with the ClimaX class, the map's PNG by its header; bad input ends with one
// line and exit code 2.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "backend/registry.h"
#include "ckpt/checkpoint.h"
#include "data/weather.h"
#include "data/weather_metrics.h"
#include "model/climax/climax.h"
#include "model/config.h"
#include "model/gpt/gpt_config.h"
#include "report/gnuplot.h"
#include "test_util.h"

namespace weft {
namespace {

namespace fs = std::filesystem;
using test::RunResult;

class ClimaxEval : public ::testing::Test {
 protected:
  // One dataset (32 x 64, the model's grid; 20 + 5 + 5 days, 6-hourly) and one 3-step run for
  // every test of the suite.
  static void SetUpTestSuite() {
    root_ = fs::path(WEFT_TEST_TMP) / "apps" / fmt::format("ClimaxEval.{}", ::getpid());
    fs::remove_all(root_);
    fs::create_directories(root_);
    data_ = (root_ / "wx").string();
    RunResult r = test::run_weft(
        "prepare --synthetic-weather " + data_ + " --days 20 --val-days 5 --test-days 5 --seed 3",
        (root_ / "prep").string());
    ASSERT_EQ(r.code, 0) << r.err;
    run_ = (root_ / "run").string();
    r = test::run_weft("train configs/climax-tiny.toml --data " + data_ +
                           " --steps 3 --global_batch 2 --micro_batch 2 --warmup_steps 1 --val_every 0 --threads 1"
                           " --ckpt_every 3 --out " + run_,
                       (root_ / "train").string());
    ASSERT_EQ(r.code, 0) << r.err;
  }
  static void TearDownTestSuite() {
    std::error_code ec;
    if (::testing::UnitTest::GetInstance()->failed_test_count() == 0) fs::remove_all(root_, ec);
  }
  RunResult eval(const std::string& args) {
    return test::run_weft("eval --checkpoint " + run_ + " --data " + data_ + " " + args,
                          (root_ / fmt::format("eval{}", n_++)).string());
  }
  static std::string checkpoint() {
    std::string last;
    for (const auto& e : fs::directory_iterator(run_)) {
      const std::string name = e.path().filename().string();
      if (name.rfind("step-", 0) == 0 && name.find('.') == std::string::npos) last = std::max(last, e.path().string());
    }
    return last;
  }
  static fs::path root_;
  static std::string data_, run_;
  int n_ = 0;
};
fs::path ClimaxEval::root_;
std::string ClimaxEval::data_, ClimaxEval::run_;

const std::vector<std::string> kFields = {"z500", "t850", "t2m", "u10", "v10"};

TEST_F(ClimaxEval, ScoresEveryFieldAgainstTheBaselinesAndDrawsTheMap) {
  // gnuplot is one of weft's dependencies (scripts/setup.sh installs gnuplot-nox): the map is
  // always drawn and checked.
  report::find_gnuplot();
  // Three steps leave the model near its initial values: its forecasts are close to 0 and hardly
  // depend on the lead. The checkpoint scored here is the trained one with the output layer
  // scaled up (forecasts of the size of the fields) and lead_time_embed.weight set to O(1)
  // values, so that a wrong lead, or a forecast paired with another sample's truth within a
  // batch, shows in the scores.
  std::unique_ptr<Backend> be = make_backend("cpu");
  const ModelConfig mc = load_checkpoint_config(checkpoint());
  ClimaX model(mc, *be);
  model.reserve(1, false);
  std::vector<float> host(static_cast<size_t>(model.layout().total()));
  load_checkpoint_params(checkpoint(), model.layout(), host.data());
  const ParamTensor* lead_w = model.layout().find("lead_time_embed.weight");
  ASSERT_NE(lead_w, nullptr);
  for (int64_t c = 0; c < lead_w->numel; ++c) host[lead_w->offset + c] = 5.0f * std::sin(0.7f * c + 0.3f);
  const ParamTensor* out_w = model.layout().find("head.4.weight");
  ASSERT_NE(out_w, nullptr);
  for (int64_t c = 0; c < out_w->numel; ++c) host[out_w->offset + c] *= 20.0f;
  const std::string ckpt = (root_ / "sharp/step-000003").string();
  CheckpointData cd;
  cd.model = &model.config();
  cd.layout = &model.layout();
  cd.params = host.data();
  cd.trainer = {{"step", 3}};
  save_checkpoint(ckpt, cd);
  be->copy_to_device(model.params(), 0, host.data(), host.size() * sizeof(float));

  const std::string json_path = (root_ / "scores.json").string(), png = (root_ / "maps/t2m.png").string();
  const RunResult r = test::run_weft(
      "eval --checkpoint " + ckpt + " --data " + data_ + " --out " + json_path + " --batch 4" +
          " --map " + png + " --map-var t2m --map-sample 2",
      (root_ / "eval-sharp").string());
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("ACC is 0 by definition"), std::string::npos) << r.out;
  for (const auto& f : kFields) EXPECT_NE(r.out.find(f), std::string::npos) << r.out;
  const nlohmann::json j = nlohmann::json::parse(test::read_text(json_path));
  EXPECT_EQ(j["split"], "test");
  EXPECT_EQ(j["model"], "climax-tiny");
  EXPECT_EQ(j["step"], 3);
  EXPECT_EQ(j["variables"].get<std::vector<std::string>>(), kFields);
  ASSERT_EQ(j["leads"].size(), 1u);
  const nlohmann::json& l = j["leads"][0];
  EXPECT_EQ(l["lead_hours"], 6.0);
  EXPECT_EQ(l["lead_steps"], 1);

  // The library's baselines over every start time of the test split, computed here.
  WeatherDataset train = WeatherDataset::open(data_ + "/train.nc"), test = WeatherDataset::open(data_ + "/test.nc");
  const WeatherStats stats = WeatherStats::load(data_ + "/stats.json");
  train.set_normalisation(stats);
  test.set_normalisation(stats);
  const int64_t n = test.num_times() - 1, V = 5, H = 32, W = 64;
  EXPECT_EQ(j["samples"], n);
  const std::vector<float> clim = train.climatology(), w = latitude_weights(test.lat());
  const std::vector<double> p_rmse = persistence_rmse(test, 1), c_rmse = climatology_rmse(test, clim, 1);

  // The model's forecasts one at a time (the command ran batches of 4 over 19 start times).
  std::vector<double> m_rmse(V, 0.0), m_acc(V, 0.0), p_acc(V, 0.0);
  std::vector<float> x(V * H * W), y(x.size()), pred(x.size()), pred12(x.size());
  const float lead = 6.0f, lead12 = 12.0f;
  test.sample(0, 1, x.data(), y.data());
  model.predict(x.data(), &lead, 1, pred.data());
  model.predict(x.data(), &lead12, 1, pred12.data());
  // The check below can see a wrong lead: 6 and 12 hours give forecasts 1% of the error or more apart.
  EXPECT_GT(lat_weighted_rmse(pred.data(), pred12.data(), V, H, W, w)[0],
            1e-2 * lat_weighted_rmse(pred.data(), y.data(), V, H, W, w)[0]);
  for (int64_t t = 0; t < n; ++t) {
    test.sample(t, 1, x.data(), y.data());
    model.predict(x.data(), &lead, 1, pred.data());
    const auto r1 = lat_weighted_rmse(pred.data(), y.data(), V, H, W, w);
    const auto a1 = lat_weighted_acc(pred.data(), y.data(), clim.data(), V, H, W, w);
    const auto pa = lat_weighted_acc(x.data(), y.data(), clim.data(), V, H, W, w);
    for (int64_t v = 0; v < V; ++v) {
      m_rmse[v] += r1[v] / n;
      m_acc[v] += a1[v] / n;
      p_acc[v] += pa[v] / n;
    }
  }
  double mean_model = 0;
  for (int64_t v = 0; v < V; ++v) {
    const nlohmann::json& s = l["scores"][kFields[v]];
    const double sd = stats.std[v];
    EXPECT_NEAR(s["persistence"]["rmse"].get<double>(), p_rmse[v], 1e-9 * p_rmse[v]) << kFields[v];
    EXPECT_NEAR(s["climatology"]["rmse"].get<double>(), c_rmse[v], 1e-9 * c_rmse[v]) << kFields[v];
    EXPECT_NEAR(s["persistence"]["rmse_physical"].get<double>(), p_rmse[v] * sd, 1e-9 * p_rmse[v] * sd);
    EXPECT_NEAR(s["climatology"]["rmse_physical"].get<double>(), c_rmse[v] * sd, 1e-9 * c_rmse[v] * sd);
    EXPECT_NEAR(s["persistence"]["acc"].get<double>(), p_acc[v], 1e-9) << kFields[v];
    EXPECT_EQ(s["climatology"]["acc"].get<double>(), 0.0) << kFields[v];
    // Batches of 4 against single forecasts: the same float arithmetic per sample, up to the
    // order of the GEMM's sums.
    EXPECT_NEAR(s["model"]["rmse"].get<double>(), m_rmse[v], 1e-5 * m_rmse[v]) << kFields[v];
    EXPECT_NEAR(s["model"]["rmse_physical"].get<double>(), s["model"]["rmse"].get<double>() * sd, 1e-9 * m_rmse[v] * sd);
    EXPECT_NEAR(s["model"]["acc"].get<double>(), m_acc[v], 1e-5) << kFields[v];
    for (const char* k : {"model", "persistence", "climatology"}) {
      EXPECT_GE(s[k]["acc"].get<double>(), -1.0);
      EXPECT_LE(s[k]["acc"].get<double>(), 1.0);
      EXPECT_GT(s[k]["rmse"].get<double>(), 0.0);
    }
    EXPECT_GT(s["persistence"]["acc"].get<double>(), 0.5) << kFields[v];  // 6 h persistence is good
    mean_model += s["model"]["rmse"].get<double>() / V;
  }
  EXPECT_NEAR(l["mean"]["model"]["rmse"].get<double>(), mean_model, 1e-12);

  {
    std::ifstream f(png, std::ios::binary);
    char sig[8] = {};
    f.read(sig, 8);
    EXPECT_EQ(std::string(sig, 8), std::string("\x89PNG\r\n\x1a\n", 8));
    EXPECT_GT(fs::file_size(png), 20000u);
    EXPECT_LT(fs::file_size(png), 5000000u);
    EXPECT_EQ(j["map"]["variable"], "t2m");
    EXPECT_EQ(j["map"]["sample"], 2);
    EXPECT_NE(r.out.find("wrote " + png), std::string::npos) << r.out;
  }
}

TEST_F(ClimaxEval, LeadListStrideAndSamples) {
  const RunResult r = eval("--lead-hours 6,12 --stride 2 --samples 5 --split val --format json");
  ASSERT_EQ(r.code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["split"], "val");
  EXPECT_EQ(j["samples"], 5);
  ASSERT_EQ(j["leads"].size(), 2u);
  EXPECT_EQ(j["leads"][1]["lead_hours"], 12.0);
  EXPECT_EQ(j["leads"][1]["lead_steps"], 2);
  const double t0 = j["start_hours"][0].get<double>(), t1 = j["start_hours"][1].get<double>();
  EXPECT_EQ(t1 - t0, 4 * 2 * 6.0);  // start times 0, 2, 4, 6, 8 of a 6-hourly file
  // Persistence over those start times, here from its definition through the library's RMSE.
  WeatherDataset val = WeatherDataset::open(data_ + "/val.nc");
  val.set_normalisation(WeatherStats::load(data_ + "/stats.json"));
  const std::vector<float> w = latitude_weights(val.lat());
  std::vector<float> x(val.sample_size()), y(x.size());
  std::vector<double> p(5, 0.0);
  for (int64_t t : {0, 2, 4, 6, 8}) {
    val.sample(t, 2, x.data(), y.data());
    const auto r1 = lat_weighted_rmse(x.data(), y.data(), 5, 32, 64, w);
    for (int v = 0; v < 5; ++v) p[v] += r1[v] / 5;
  }
  for (int v = 0; v < 5; ++v) {
    EXPECT_NEAR(j["leads"][1]["scores"][kFields[v]]["persistence"]["rmse"].get<double>(), p[v], 1e-9 * p[v]);
  }
}

// The scores go through the engine: tp 2 x dp 2 with ZeRO-3, and HSDP, give the one-process
// scores (every model score within 1e-6 relative; the baselines do not depend on the layout).
TEST_F(ClimaxEval, AnyLayoutGivesTheOneProcessScores) {
  const std::string args = "--lead-hours 6,12 --samples 10 --batch 2 --format json";
  const RunResult one = eval(args);
  ASSERT_EQ(one.code, 0) << one.err;
  const nlohmann::json want = nlohmann::json::parse(one.out);
  for (const auto& [np, layout] : {std::pair{4, "--tp 2 --dp 2 --zero 3"}, {4, "--dp-shard 2 --dp-replicate 2 --zero 1"},
                                   {2, "--dp 2 --micro-batch 1"}}) {
    const RunResult r = test::run_weft_with(test::mpi_launcher(np),
                                            "eval --checkpoint " + run_ + " --data " + data_ + " " + args + " " + layout,
                                            (root_ / fmt::format("layout{}", n_++)).string());
    ASSERT_EQ(r.code, 0) << layout << ": " << r.err;
    const nlohmann::json got = nlohmann::json::parse(r.out);
    ASSERT_EQ(got["leads"].size(), 2u) << layout;
    double worst = 0.0;
    for (size_t k = 0; k < 2; ++k) {
      for (const std::string& v : kFields) {
        for (const char* kind : {"model", "persistence", "climatology"}) {
          for (const char* m : {"rmse", "acc"}) {
            const double w = want["leads"][k]["scores"][v][kind][m].get<double>();
            const double g = got["leads"][k]["scores"][v][kind][m].get<double>();
            EXPECT_NEAR(g, w, 1e-6 * std::max(std::abs(w), 1e-12)) << layout << " lead " << k << " " << v << " " << kind
                                                                     << " " << m;
            worst = std::max(worst, std::abs(g - w) / std::max(std::abs(w), 1e-12));
          }
        }
      }
    }
    std::printf("%s: worst relative difference of a score %.3g\n", layout, worst);
  }
}

TEST_F(ClimaxEval, BadInputIsOneLineWithTheValues) {
  auto bad = [&](const RunResult& b, const std::vector<std::string>& frags) {
    EXPECT_EQ(b.code, 2) << b.err;
    EXPECT_EQ(std::count(b.err.begin(), b.err.end(), '\n'), 1) << "one line: " << b.err;
    for (const auto& f : frags) EXPECT_NE(b.err.find(f), std::string::npos) << "missing '" << f << "' in: " << b.err;
  };
  const std::string out = (root_ / "never.json").string();
  // A GPT checkpoint (its config.json, as Hugging Face writes it without a manifest, is all eval
  // reads before refusing) with weather data, and with a ClimaX option.
  const std::string gpt = (root_ / "gpt").string();
  fs::create_directories(gpt);
  nlohmann::json gpt_config = checkpoint_config_json(make_model_config("gpt-t", 2, 2, 64, 32, 256));
  gpt_config.erase("weft");
  std::ofstream(gpt + "/config.json") << gpt_config.dump();
  RunResult b = test::run_weft("eval --checkpoint " + gpt + " --data " + data_, (root_ / "b1").string());
  bad(b, {data_, "weather fields", "is a GPT model"});
  b = test::run_weft("eval --checkpoint " + gpt + " --data " + data_ + " --lead-hours 6 --out " + out,
                     (root_ / "b2").string());
  bad(b, {"--lead-hours, --out", "ClimaX checkpoint", "GPT model"});
  // The ClimaX checkpoint with token shards, or with an option of GPT checkpoints.
  const std::string tok = (root_ / "tokens").string();
  test::make_random_corpus(tok, 2000, 2000);
  b = test::run_weft("eval --checkpoint " + run_ + " --data " + tok, (root_ / "b3").string());
  bad(b, {tok, "token shards", "ClimaX model 'climax-tiny' (5 variables on a 32x64 grid)"});
  bad(eval("--windows 4"), {"--windows", "GPT checkpoint", "ClimaX"});
  // A layout the family does not allow, or that the ranks do not make.
  bad(eval("--tp 2"), {"tp 2", "world"});
  // A variable the file does not have; a grid that is not the model's.
  bad(eval("--variables z500,t850,t2m,u10,q700 --out " + out), {"q700", "z500"});
  // A list with an empty name is refused, never read as fewer fields or as every field (issue 34
  // class 8).
  bad(eval("--variables ' ,,'"), {"--variables ' ,,'", "name 1", "empty"});
  bad(eval("--variables z500,,t850"), {"--variables 'z500,,t850'", "name 2", "empty"});
  bad(eval("--variables z500,t850,"), {"name 3", "empty"});
  const std::string small = (root_ / "wx16").string();
  ASSERT_EQ(test::run_weft("prepare --synthetic-weather " + small + " --days 3 --val-days 2 --test-days 2 --grid 16x32",
                           (root_ / "prep16").string())
                .code,
            0);
  b = test::run_weft("eval --checkpoint " + run_ + " --data " + small, (root_ / "b4").string());
  bad(b, {"16x32", "32x64", "climax-tiny"});
  b = test::run_weft("eval --checkpoint " + run_ + " --data " + data_ + " --variables z500,t850",
                     (root_ / "b5").string());
  bad(b, {"2 fields (z500, t850)", "5 variables", "--variables"});
  // A lead that is no multiple of the 6-hour step; a split the folder lacks or that does not exist.
  bad(eval("--lead-hours 5"), {"--lead-hours 5", "6 h time step"});
  bad(eval("--lead-hours 6,0"), {"--lead-hours 0"});
  const std::string nosplit = (root_ / "nosplit").string();
  fs::create_directories(nosplit);
  fs::copy_file(data_ + "/train.nc", nosplit + "/train.nc");
  fs::copy_file(data_ + "/stats.json", nosplit + "/stats.json");
  b = test::run_weft("eval --checkpoint " + run_ + " --data " + nosplit + " --split val", (root_ / "b6").string());
  bad(b, {"--split val", "no val.nc", "splits there: train"});
  bad(eval("--split train"), {"--split train", "test or val"});
  // More samples than start times, a map of a field that is not there, or of a start time beyond.
  bad(eval("--samples 1000"), {"1000 samples", "19 start times"});
  bad(eval("--map " + (root_ / "m.png").string() + " --map-var q"), {"--map-var q", "z500, t850, t2m, u10, v10"});
  bad(eval("--samples 3 --map " + (root_ / "m.png").string() + " --map-sample 3"), {"--map-sample 3", "3 start times"});
  EXPECT_FALSE(fs::exists(out));
  EXPECT_FALSE(fs::exists(root_ / "m.png"));
  // weft generate points a ClimaX checkpoint to eval --map.
  b = test::run_weft("generate --checkpoint " + run_, (root_ / "b7").string());
  bad(b, {"ClimaX model 'climax-tiny'", "weft eval", "--map"});
}

}  // namespace
}  // namespace weft
