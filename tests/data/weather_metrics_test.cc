// Forecast scores (data/weather_metrics.h) and the forecast map (report/weather_map.h). The
// references are independent: hand-computed values, closed forms (a perfect forecast, a negated
// anomaly, the climatology), and plain loops written here from the formulas of
// docs/climax.md.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "data/data_test_util.h"
#include "data/weather.h"
#include "data/weather_metrics.h"
#include "data/weather_synth.h"
#include "report/gnuplot.h"
#include "report/weather_map.h"

namespace weft {
namespace {

namespace fs = std::filesystem;
using testing::ScratchDir;

std::string input_error(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const InputError& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected InputError, got: " << e.what();
    return "";
  }
  ADD_FAILURE() << "expected InputError, nothing was thrown";
  return "";
}

#define EXPECT_INPUT_ERROR(stmt, ...)                                                             \
  do {                                                                                            \
    const std::string msg_ = input_error([&] { stmt; });                                          \
    for (const std::string& frag_ : std::vector<std::string>{__VA_ARGS__})                       \
      EXPECT_NE(msg_.find(frag_), std::string::npos) << "missing '" << frag_ << "' in: " << msg_; \
  } while (0)

// The ACC of one variable written from the formula in long double, as a separate pass per sum:
// w_j = cos(lat_j) / mean cos; f = pred - clim, a = truth - clim, each centred by its plain
// grid mean; sum w f a / sqrt(sum w f^2 sum w a^2).
double reference_acc(const std::vector<float>& pred, const std::vector<float>& truth, const std::vector<float>& clim,
                     const std::vector<double>& lat, int64_t H, int64_t W, int64_t v) {
  std::vector<long double> w(H);
  long double cs = 0;
  for (int64_t j = 0; j < H; ++j) cs += std::cos(static_cast<long double>(lat[j]) * M_PI / 180.0L);
  for (int64_t j = 0; j < H; ++j) w[j] = std::cos(static_cast<long double>(lat[j]) * M_PI / 180.0L) / (cs / H);
  const int64_t o = v * H * W;
  long double fm = 0, am = 0;
  for (int64_t k = 0; k < H * W; ++k) fm += static_cast<long double>(pred[o + k]) - clim[o + k];
  for (int64_t k = 0; k < H * W; ++k) am += static_cast<long double>(truth[o + k]) - clim[o + k];
  fm /= H * W;
  am /= H * W;
  long double num = 0, ff = 0, aa = 0;
  for (int64_t j = 0; j < H; ++j) {
    for (int64_t i = 0; i < W; ++i) {
      const int64_t k = o + j * W + i;
      const long double f = pred[k] - static_cast<long double>(clim[k]) - fm;
      const long double a = truth[k] - static_cast<long double>(clim[k]) - am;
      num += w[j] * f * a;
      ff += w[j] * f * f;
      aa += w[j] * a * a;
    }
  }
  return static_cast<double>(num / std::sqrt(ff * aa));
}

TEST(WeatherMetrics, AccOfAHandComputedForecast) {
  // One variable on a 2 x 2 grid at latitudes 0 and 60: cos 1 and 0.5, mean 0.75, so the
  // weights are 4/3 and 2/3. Climatology 0; truth 1 2 / 3 4, forecast 1 2 / 4 3.
  // Centred: a = -1.5 -0.5 / 0.5 1.5, f = -1.5 -0.5 / 1.5 0.5.
  // sum w f a = 4/3 (2.25 + 0.25) + 2/3 (0.75 + 0.75) = 13/3; sum w f^2 = sum w a^2 = 5.
  const std::vector<float> w = latitude_weights(std::vector<double>{0, 60});
  const std::vector<float> clim(4, 0.0f), truth{1, 2, 3, 4}, pred{1, 2, 4, 3};
  const auto acc = lat_weighted_acc(pred.data(), truth.data(), clim.data(), 1, 2, 2, w);
  ASSERT_EQ(acc.size(), 1u);
  EXPECT_NEAR(acc[0], 13.0 / 15.0, 1e-7);
  // A constant climatology changes nothing (the anomalies are centred); adding the same offset
  // to forecast and truth neither.
  const std::vector<float> clim5(4, 5.0f), truth7{8, 9, 10, 11}, pred7{8, 9, 11, 10};
  EXPECT_NEAR(lat_weighted_acc(pred7.data(), truth7.data(), clim5.data(), 1, 2, 2, w)[0], 13.0 / 15.0, 1e-7);
  EXPECT_INPUT_ERROR(lat_weighted_acc(pred.data(), truth.data(), clim.data(), 1, 2, 2, std::vector<float>{1}),
                     "1 weights for 2 latitudes");
}

TEST(WeatherMetrics, AccClosedFormsAndThePlainLoop) {
  const int64_t V = 3, H = 8, W = 16;
  std::vector<double> lat(H);
  for (int64_t j = 0; j < H; ++j) lat[j] = -90.0 + (j + 0.5) * 180.0 / H;
  const std::vector<float> w = latitude_weights(lat);
  std::mt19937 g(7);
  std::normal_distribution<float> nd;
  std::vector<float> clim(V * H * W), truth(clim.size()), pred(clim.size());
  for (size_t k = 0; k < clim.size(); ++k) {
    clim[k] = 0.3f * nd(g) + static_cast<float>(k % 5) * 0.1f;
    truth[k] = clim[k] + nd(g);
    pred[k] = truth[k] + 0.7f * nd(g);
  }
  // The random forecast against the plain loop.
  const auto acc = lat_weighted_acc(pred.data(), truth.data(), clim.data(), V, H, W, w);
  for (int64_t v = 0; v < V; ++v) {
    EXPECT_NEAR(acc[v], reference_acc(pred, truth, clim, lat, H, W, v), 1e-6) << v;
    EXPECT_GT(acc[v], 0.5);
    EXPECT_LT(acc[v], 0.95);
  }
  // Perfect: 1. Negated anomaly (pred = clim - (truth - clim)): -1. A positive multiple of the
  // anomaly plus a constant: 1. The climatology itself: 0 by definition.
  std::vector<float> neg(clim.size()), scaled(clim.size());
  for (size_t k = 0; k < clim.size(); ++k) {
    neg[k] = 2.0f * clim[k] - truth[k];
    scaled[k] = clim[k] + 0.25f * (truth[k] - clim[k]) + 3.0f;
  }
  const auto one = lat_weighted_acc(truth.data(), truth.data(), clim.data(), V, H, W, w);
  const auto minus = lat_weighted_acc(neg.data(), truth.data(), clim.data(), V, H, W, w);
  const auto sc = lat_weighted_acc(scaled.data(), truth.data(), clim.data(), V, H, W, w);
  const auto zero = lat_weighted_acc(clim.data(), truth.data(), clim.data(), V, H, W, w);
  for (int64_t v = 0; v < V; ++v) {
    EXPECT_NEAR(one[v], 1.0, 1e-6);
    EXPECT_NEAR(minus[v], -1.0, 1e-6);
    EXPECT_NEAR(sc[v], 1.0, 1e-6);
    EXPECT_EQ(zero[v], 0.0);
  }
  // Normalised and physical units give the same ACC: x * s_v + m_v for all three fields.
  std::vector<float> pp(clim.size()), tp(clim.size()), cp(clim.size());
  const double s[] = {2617.7, 15.2, 0.5}, m[] = {54874.5, 275.0, -1.0};
  for (size_t k = 0; k < clim.size(); ++k) {
    const size_t v = k / (H * W);
    pp[k] = static_cast<float>(pred[k] * s[v] + m[v]);
    tp[k] = static_cast<float>(truth[k] * s[v] + m[v]);
    cp[k] = static_cast<float>(clim[k] * s[v] + m[v]);
  }
  const auto phys = lat_weighted_acc(pp.data(), tp.data(), cp.data(), V, H, W, w);
  for (int64_t v = 0; v < V; ++v) EXPECT_NEAR(phys[v], acc[v], 2e-4) << v;  // float rounding of 5e4-sized values
}

TEST(WeatherMetrics, ScoresAreMeansOverForecasts) {
  const int64_t V = 2, H = 4, W = 8;
  const std::vector<double> lat{-67.5, -22.5, 22.5, 67.5};
  const std::vector<float> w = latitude_weights(lat);
  std::mt19937 g(3);
  std::normal_distribution<float> nd;
  std::vector<float> clim(V * H * W);
  for (float& c : clim) c = nd(g);
  ForecastScores s(V, H, W, w, clim);
  std::vector<double> rsum(V, 0), asum(V, 0);
  for (int f = 0; f < 5; ++f) {
    std::vector<float> truth(clim.size()), pred(clim.size());
    for (size_t k = 0; k < clim.size(); ++k) {
      truth[k] = clim[k] + nd(g);
      pred[k] = truth[k] + 0.5f * nd(g);
    }
    s.add(pred.data(), truth.data());
    for (int64_t v = 0; v < V; ++v) {
      double e = 0;  // RMSE from its formula: sqrt(mean_{j,i} w_j d^2)
      for (int64_t j = 0; j < H; ++j)
        for (int64_t i = 0; i < W; ++i) {
          const double d = static_cast<double>(pred[(v * H + j) * W + i]) - truth[(v * H + j) * W + i];
          e += w[j] * d * d;
        }
      rsum[v] += std::sqrt(e / (H * W));
      asum[v] += reference_acc(pred, truth, clim, lat, H, W, v);
    }
  }
  EXPECT_EQ(s.count(), 5);
  for (int64_t v = 0; v < V; ++v) {
    EXPECT_NEAR(s.rmse()[v], rsum[v] / 5, 1e-6);
    EXPECT_NEAR(s.acc()[v], asum[v] / 5, 1e-6);
  }
  EXPECT_INPUT_ERROR(ForecastScores(V, H, W, w, std::vector<float>(3)), "3 values", "64");
  EXPECT_INPUT_ERROR(ForecastScores(V, H, W, std::vector<float>(2), clim).count(), "2 latitude weights");
  ForecastScores empty(V, H, W, w, clim);
  EXPECT_INPUT_ERROR(empty.rmse(), "no forecast");
}

TEST(WeatherMetrics, StartTimes) {
  EXPECT_EQ(forecast_start_times(10, 2, 1, 0), (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(forecast_start_times(10, 2, 3, 0), (std::vector<int64_t>{0, 3, 6}));
  EXPECT_EQ(forecast_start_times(10, 2, 3, 2), (std::vector<int64_t>{0, 3}));
  EXPECT_EQ(forecast_start_times(10, 9, 1, 0), (std::vector<int64_t>{0}));
  EXPECT_INPUT_ERROR(forecast_start_times(10, 10, 1, 0), "lead of 10 time steps", "10 time steps");
  EXPECT_INPUT_ERROR(forecast_start_times(10, 2, 0, 0), "stride of 0");
  EXPECT_INPUT_ERROR(forecast_start_times(10, 2, 3, 4), "4 samples", "3 start times");
  EXPECT_INPUT_ERROR(forecast_start_times(10, 2, 1, -1), "-1 samples");
}

// A small generated dataset: the baselines through ForecastScores against data/weather.h's own
// persistence_rmse and climatology_rmse (a separate code path), and their ACC against the loop.
TEST(WeatherMetrics, BaselinesMatchTheDatasetFunctions) {
  ScratchDir dir;
  SyntheticWeatherOptions o;
  o.out_dir = dir / "wx";
  o.height = 8;
  o.width = 16;
  o.train_days = 6;
  o.val_days = 3;
  o.test_days = 3;
  o.spin_up_days = 2;
  o.seed = 3;
  const SyntheticWeatherResult r = generate_synthetic_weather(o);
  WeatherDataset train = WeatherDataset::open(r.train_path), test = WeatherDataset::open(r.test_path);
  const WeatherStats stats = WeatherStats::load(r.stats_path);
  train.set_normalisation(stats);
  test.set_normalisation(stats);
  const std::vector<float> clim = train.climatology();
  for (int64_t lead : {1, 4}) {
    const std::vector<int64_t> all = forecast_start_times(test.num_times(), lead, 1, 0);
    ASSERT_EQ(static_cast<int64_t>(all.size()), test.num_times() - lead);
    const ForecastScores p = baseline_scores(test, WeatherBaseline::kPersistence, clim, lead, all);
    const ForecastScores c = baseline_scores(test, WeatherBaseline::kClimatology, clim, lead, all);
    const std::vector<double> p_ref = persistence_rmse(test, lead), c_ref = climatology_rmse(test, clim, lead);
    std::vector<double> acc_ref(test.num_variables(), 0.0);
    std::vector<float> x(test.sample_size()), y(x.size());
    for (int64_t t : all) {
      test.sample(t, lead, x.data(), y.data());
      for (int64_t v = 0; v < test.num_variables(); ++v) {
        acc_ref[v] += reference_acc(x, y, clim, test.lat(), test.height(), test.width(), v) / all.size();
      }
    }
    for (int64_t v = 0; v < test.num_variables(); ++v) {
      EXPECT_NEAR(p.rmse()[v], p_ref[v], 1e-9 * p_ref[v]) << "lead " << lead << " var " << v;
      EXPECT_NEAR(c.rmse()[v], c_ref[v], 1e-9 * c_ref[v]) << "lead " << lead << " var " << v;
      EXPECT_NEAR(p.acc()[v], acc_ref[v], 1e-6) << "lead " << lead << " var " << v;
      EXPECT_EQ(c.acc()[v], 0.0);
      EXPECT_GT(p.acc()[v], 0.0);  // a 6-24 h persistence keeps the sign of the anomaly
      EXPECT_LE(p.acc()[v], 1.0);
    }
  }
  EXPECT_STREQ(baseline_name(WeatherBaseline::kPersistence), "persistence");
  EXPECT_INPUT_ERROR(baseline_scores(test, WeatherBaseline::kPersistence, clim, 1, {test.num_times() - 1}),
                     std::to_string(test.num_times() - 1));
}

// The PNG file signature and the image size from its IHDR chunk.
struct PngInfo {
  bool signature = false;
  uint32_t width = 0, height = 0;
};
PngInfo read_png_info(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  unsigned char b[24] = {};
  f.read(reinterpret_cast<char*>(b), sizeof b);
  PngInfo p;
  const unsigned char sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  p.signature = f.gcount() == 24 && std::equal(sig, sig + 8, b) && std::string(reinterpret_cast<char*>(b + 12), 4) == "IHDR";
  p.width = (uint32_t{b[16]} << 24) | (uint32_t{b[17]} << 16) | (uint32_t{b[18]} << 8) | b[19];
  p.height = (uint32_t{b[20]} << 24) | (uint32_t{b[21]} << 16) | (uint32_t{b[22]} << 8) | b[23];
  return p;
}

TEST(WeatherMap, DrawsAPngAndLeavesNoTemporaryFiles) {
  // gnuplot is one of weft's dependencies (scripts/setup.sh installs gnuplot-nox): no skip.
  const report::Gnuplot gp = report::find_gnuplot();
  ScratchDir dir;
  report::WeatherMap m;
  m.title = "t2m (K): 6 h forecast\nline two with a \"quote\" and under_score";
  m.units = "K";
  for (int j = 0; j < 16; ++j) m.lat.push_back(-90.0 + (j + 0.5) * 180.0 / 16);
  for (int i = 0; i < 32; ++i) m.lon.push_back(i * 360.0 / 32);
  for (int j = 0; j < 16; ++j) {
    for (int i = 0; i < 32; ++i) {
      const double t = 288.0 - 40.0 * std::pow(std::sin(m.lat[j] * M_PI / 180), 2) + 5 * std::sin(m.lon[i] * M_PI / 90);
      m.truth.push_back(static_cast<float>(t));
      m.pred.push_back(static_cast<float>(t + 0.5 * std::cos(m.lon[i] * M_PI / 180)));
    }
  }
  const std::string png = dir / "sub/map.png";
  report::draw_weather_map(gp, m, png);
  const PngInfo info = read_png_info(png);
  EXPECT_TRUE(info.signature);
  EXPECT_EQ(info.width, 1800u);
  EXPECT_EQ(info.height, 380u);
  EXPECT_GT(fs::file_size(png), 20000u);  // three filled panels, not an empty canvas
  for (const auto& e : fs::directory_iterator(fs::temp_directory_path())) {
    EXPECT_EQ(e.path().filename().string().rfind("weft-map-", 0), std::string::npos) << "left behind: " << e.path();
  }
  // The script reads the three data files and keeps the colour range of forecast and truth.
  const std::string script = report::weather_map_script(gp, m, "map");
  for (const char* frag : {"'pred.dat'", "'truth.dat'", "'error.dat'", "set multiplot layout 1,3", "noenhanced",
                           "(K)", "set size ratio -1"}) {
    EXPECT_NE(script.find(frag), std::string::npos) << frag << " in:\n" << script;
  }
  report::WeatherMap bad = m;
  bad.pred.pop_back();
  EXPECT_INPUT_ERROR(report::draw_weather_map(gp, bad, dir / "bad.png"), "16 x 32", "511");
  bad = m;
  bad.truth[40] = NAN;
  EXPECT_INPUT_ERROR(report::draw_weather_map(gp, bad, dir / "bad.png"), "not finite");
  EXPECT_FALSE(fs::exists(dir / "bad.png"));
}

}  // namespace
}  // namespace weft
