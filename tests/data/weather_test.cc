// Weather data: the NetCDF loader (data/weather.h), the synthetic generator
// (data/weather_synth.h) and `weft prepare --synthetic-weather`. References are independent: the
// netCDF C API read directly, plain loops, closed forms.
#include <gtest/gtest.h>
#include <netcdf.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/rng.h"
#include "data/data_test_util.h"
#include "data/loader.h"
#include "data/weather.h"
#include "data/weather_synth.h"
#include "test_util.h"

namespace weft {
namespace {

namespace fs = std::filesystem;
using testing::ScratchDir;

// Runs `fn` and returns the InputError's message; fails the test if it does not throw one.
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

#define EXPECT_INPUT_ERROR(stmt, ...)                                                         \
  do {                                                                                        \
    const std::string msg_ = input_error([&] { stmt; });                                      \
    for (const std::string& frag_ : std::vector<std::string>{__VA_ARGS__})                   \
      EXPECT_NE(msg_.find(frag_), std::string::npos) << "missing '" << frag_ << "' in: " << msg_; \
  } while (0)

void nc_ok(int st) { ASSERT_EQ(st, NC_NOERR) << nc_strerror(st); }

// A small weather file written with the netCDF API, with switches for every malformation.
// Field "t2m" holds value(t, j, i) = 280 + t + 0.5 j + 0.01 i.
struct TinyFile {
  int T = 4, H = 4, W = 8;
  std::vector<double> times;  // default 0, 6, 12, ...
  std::string time_units = "hours since 2000-01-01 00:00:00";
  bool with_time_units = true;
  std::vector<std::string> field_dims = {"time", "lat", "lon"};
  bool lat_on_other_dim = false;  // the lat coordinate on a dim "nlat" of length H + 1
  bool lat_dim = true;            // false: the latitude dimension is called "y"
  bool poison = false;            // value at (t=2, j=1, i=3) = poison_value
  float poison_value = NAN;
  bool leave_last_time_unwritten = false;  // the last field keeps its fill value
  nc_type type = NC_FLOAT;        // NC_SHORT: packed with scale 0.01, offset 280
  int cmode = NC_NETCDF4;

  static float value(int t, int j, int i) { return 280.0f + t + 0.5f * j + 0.01f * i; }

  void write(const std::string& path) const {
    int nc = -1;
    nc_ok(nc_create(path.c_str(), cmode | NC_CLOBBER, &nc));
    int dt, dy, dx, dlev = -1, dnlat = -1;
    nc_ok(nc_def_dim(nc, "time", T, &dt));
    nc_ok(nc_def_dim(nc, lat_dim ? "lat" : "y", H, &dy));
    nc_ok(nc_def_dim(nc, "lon", W, &dx));
    if (std::find(field_dims.begin(), field_dims.end(), "level") != field_dims.end()) {
      nc_ok(nc_def_dim(nc, "level", 2, &dlev));
    }
    if (lat_on_other_dim) nc_ok(nc_def_dim(nc, "nlat", H + 1, &dnlat));
    int vt, vy, vx, vf;
    nc_ok(nc_def_var(nc, "time", NC_DOUBLE, 1, &dt, &vt));
    if (with_time_units) nc_ok(nc_put_att_text(nc, vt, "units", time_units.size(), time_units.c_str()));
    nc_ok(nc_def_var(nc, lat_dim ? "lat" : "y", NC_DOUBLE, 1, lat_on_other_dim ? &dnlat : &dy, &vy));
    nc_ok(nc_put_att_text(nc, vy, "units", 13, "degrees_north"));
    nc_ok(nc_def_var(nc, "lon", NC_DOUBLE, 1, &dx, &vx));
    nc_ok(nc_put_att_text(nc, vx, "units", 12, "degrees_east"));
    std::map<std::string, int> ids = {{"time", dt}, {"lat", dy}, {"lon", dx}, {"level", dlev}};
    std::vector<int> fd;
    for (const auto& n : field_dims) fd.push_back(ids.at(n));
    nc_ok(nc_def_var(nc, "t2m", type, static_cast<int>(fd.size()), fd.data(), &vf));
    nc_ok(nc_put_att_text(nc, vf, "units", 1, "K"));
    if (type == NC_SHORT) {
      const double scale = 0.01, offset = 280.0;
      nc_ok(nc_put_att_double(nc, vf, "scale_factor", NC_DOUBLE, 1, &scale));
      nc_ok(nc_put_att_double(nc, vf, "add_offset", NC_DOUBLE, 1, &offset));
    }
    nc_ok(nc_enddef(nc));
    std::vector<double> tv = times;
    if (tv.empty())
      for (int t = 0; t < T; ++t) tv.push_back(6.0 * t);
    nc_ok(nc_put_var_double(nc, vt, tv.data()));
    std::vector<double> lat(lat_on_other_dim ? H + 1 : H), lon(W);
    for (size_t j = 0; j < lat.size(); ++j) lat[j] = -67.5 + 45.0 * j;
    for (int i = 0; i < W; ++i) lon[i] = 45.0 * i;
    nc_ok(nc_put_var_double(nc, vy, lat.data()));
    nc_ok(nc_put_var_double(nc, vx, lon.data()));
    if (field_dims.size() == 3 && field_dims[1] == "lat") {
      for (int t = 0; t < (leave_last_time_unwritten ? T - 1 : T); ++t) {
        std::vector<float> f(H * W);
        for (int j = 0; j < H; ++j)
          for (int i = 0; i < W; ++i) f[j * W + i] = value(t, j, i);
        if (poison && t == 2) f[1 * W + 3] = poison_value;
        const size_t start[3] = {static_cast<size_t>(t), 0, 0}, count[3] = {1, static_cast<size_t>(H), static_cast<size_t>(W)};
        if (type == NC_SHORT) {
          std::vector<short> s(f.size());
          for (size_t k = 0; k < f.size(); ++k) s[k] = static_cast<short>(std::lround((f[k] - 280.0) / 0.01));
          nc_ok(nc_put_vara_short(nc, vf, start, count, s.data()));
        } else {
          nc_ok(nc_put_vara_float(nc, vf, start, count, f.data()));
        }
      }
    }
    nc_ok(nc_close(nc));
  }
};

// ---------------------------------------------------------------------------------------------
// Loader on hand-written files.

TEST(WeatherDataset, ReadsAHandWrittenFile) {
  ScratchDir dir;
  const std::string path = dir / "tiny.nc";
  TinyFile{}.write(path);
  for (int64_t resident_limit : {WeatherDataset::kDefaultResidentBytes, int64_t{0}}) {
    WeatherDataset ds = WeatherDataset::open(path, {}, resident_limit);
    EXPECT_EQ(ds.resident(), resident_limit > 0);
    EXPECT_EQ(ds.variables(), std::vector<std::string>{"t2m"});
    EXPECT_EQ(ds.units(), std::vector<std::string>{"K"});
    EXPECT_EQ(ds.num_times(), 4);
    EXPECT_EQ(ds.height(), 4);
    EXPECT_EQ(ds.width(), 8);
    EXPECT_EQ(ds.step_hours(), 6.0);
    EXPECT_EQ(ds.time_reference(), "2000-01-01 00:00:00");
    EXPECT_EQ(ds.lat(), (std::vector<double>{-67.5, -22.5, 22.5, 67.5}));
    EXPECT_EQ(ds.lon()[7], 315.0);
    std::vector<float> f(ds.sample_size());
    for (int t = 0; t < 4; ++t) {
      ds.read_fields(t, f.data());
      for (int j = 0; j < 4; ++j)
        for (int i = 0; i < 8; ++i) ASSERT_EQ(f[j * 8 + i], TinyFile::value(t, j, i)) << t << " " << j << " " << i;
    }
    // Stats against a plain two-pass loop.
    double sum = 0, sq = 0;
    for (int t = 0; t < 4; ++t)
      for (int j = 0; j < 4; ++j)
        for (int i = 0; i < 8; ++i) sum += TinyFile::value(t, j, i);
    const double mean = sum / 128;
    for (int t = 0; t < 4; ++t)
      for (int j = 0; j < 4; ++j)
        for (int i = 0; i < 8; ++i) sq += (TinyFile::value(t, j, i) - mean) * (TinyFile::value(t, j, i) - mean);
    const WeatherStats s = ds.compute_stats();
    EXPECT_NEAR(s.mean[0], mean, 1e-9 * mean);
    EXPECT_NEAR(s.std[0], std::sqrt(sq / 128), 1e-9);
  }
}

TEST(WeatherDataset, UnpacksScaledShorts) {
  ScratchDir dir;
  TinyFile f;
  f.type = NC_SHORT;
  f.write(dir / "packed.nc");
  WeatherDataset ds = WeatherDataset::open(dir / "packed.nc");
  std::vector<float> v(ds.sample_size());
  ds.read_fields(3, v.data());
  for (int j = 0; j < 4; ++j)
    for (int i = 0; i < 8; ++i) EXPECT_NEAR(v[j * 8 + i], TinyFile::value(3, j, i), 0.006f);
}

TEST(WeatherDataset, BadInputsNameTheValues) {
  ScratchDir dir;
  const std::string missing = dir / "nope.nc";
  EXPECT_INPUT_ERROR(WeatherDataset::open(missing), missing, "not found");

  const std::string text = dir / "text.nc";
  std::ofstream(text) << "this is not netcdf\n";
  EXPECT_INPUT_ERROR(WeatherDataset::open(text), text, "not a readable NetCDF");

  const std::string good = dir / "good.nc";
  TinyFile{}.write(good);
  EXPECT_INPUT_ERROR(WeatherDataset::open(good, {"q700"}), good, "no variable 'q700'", "t2m");
  EXPECT_INPUT_ERROR(WeatherDataset::open(good, {"t2m", "t2m"}), "'t2m' is requested twice");
  EXPECT_INPUT_ERROR(WeatherDataset::open(good, {"lat"}), good, "'lat'", "(lat=4)");

  auto bad = [&](const std::string& name, const std::function<void(TinyFile&)>& edit) {
    TinyFile f;
    edit(f);
    const std::string p = dir / name;
    f.write(p);
    return p;
  };
  std::string p = bad("order.nc", [](TinyFile& f) { f.field_dims = {"time", "lon", "lat"}; });
  EXPECT_INPUT_ERROR(WeatherDataset::open(p, {"t2m"}), p, "(time=4, lon=8, lat=4)", "expected (time, lat, lon)");
  EXPECT_INPUT_ERROR(WeatherDataset::open(p), p, "no float variable with dims (time, lat, lon)", "t2m (time=4, lon=8, lat=4)");

  p = bad("rank.nc", [](TinyFile& f) { f.field_dims = {"time", "level", "lat", "lon"}; });
  EXPECT_INPUT_ERROR(WeatherDataset::open(p, {"t2m"}), p, "rank 4", "level=2");

  p = bad("latlen.nc", [](TinyFile& f) { f.lat_on_other_dim = true; });
  EXPECT_INPUT_ERROR(WeatherDataset::open(p), p, "'lat'", "nlat=5", "lat=4");

  p = bad("nolat.nc", [](TinyFile& f) { f.lat_dim = false; });
  EXPECT_INPUT_ERROR(WeatherDataset::open(p), p, "needs dimensions time, lat and lon", "y=4");

  p = bad("uneven.nc", [](TinyFile& f) { f.times = {0, 6, 13, 19}; });
  EXPECT_INPUT_ERROR(WeatherDataset::open(p), p, "not uniform", "from 6 h to 13 h", "(7 h)", "the first is 6 h");

  p = bad("backwards.nc", [](TinyFile& f) { f.times = {6, 0, -6, -12}; });
  EXPECT_INPUT_ERROR(WeatherDataset::open(p), p, "time must increase");

  p = bad("units.nc", [](TinyFile& f) { f.time_units = "furlongs since 2000-01-01"; });
  EXPECT_INPUT_ERROR(WeatherDataset::open(p), p, "furlongs since 2000-01-01");

  p = bad("nounits.nc", [](TinyFile& f) { f.with_time_units = false; });
  EXPECT_INPUT_ERROR(WeatherDataset::open(p), p, "no units");

  p = bad("short.nc", [](TinyFile& f) { f.T = 1; });
  EXPECT_INPUT_ERROR(WeatherDataset::open(p), p, "at least 2 time steps", "1");

  p = bad("nan.nc", [](TinyFile& f) { f.poison = true; });
  EXPECT_INPUT_ERROR(WeatherDataset::open(p), p, "'t2m'", "non-finite value (nan)", "time index 2", "lat index 1",
                     "lon index 3 (135)");
  p = bad("inf.nc", [](TinyFile& f) {
    f.poison = true;
    f.poison_value = INFINITY;
  });
  EXPECT_INPUT_ERROR(WeatherDataset::open(p), p, "non-finite value (inf)");
  // Read on demand, the bad value is found when its time step is read, not at open.
  {
    WeatherDataset ds = WeatherDataset::open(p, {}, 0);
    std::vector<float> x(ds.sample_size()), y(x.size());
    ds.sample(0, 1, x.data(), y.data());
    EXPECT_INPUT_ERROR(ds.sample(1, 1, x.data(), y.data()), p, "non-finite value (inf)", "time index 2");
  }

  p = bad("unwritten.nc", [](TinyFile& f) { f.leave_last_time_unwritten = true; });
  EXPECT_INPUT_ERROR(WeatherDataset::open(p), p, "missing value", "time index 3");

  // Leads: longer than the file, negative, t out of range.
  WeatherDataset ds = WeatherDataset::open(good);
  std::vector<float> x(ds.sample_size()), y(x.size());
  EXPECT_INPUT_ERROR(ds.sample(0, 4, x.data(), y.data()), good, "lead of 4 steps (24 h)", "4 time steps");
  EXPECT_INPUT_ERROR(ds.sample(2, 2, x.data(), y.data()), "time index 2", "lead of 2 steps", "[0, 2)");
  EXPECT_INPUT_ERROR(ds.sample(-1, 1, x.data(), y.data()), "time index -1");
  EXPECT_INPUT_ERROR(ds.num_samples(-1), "-1");
  EXPECT_EQ(ds.num_samples(3), 1);
  EXPECT_EQ(ds.num_samples(9), 0);
  EXPECT_INPUT_ERROR(ds.read_fields(4, x.data()), "time index 4", "[0, 4)");
  EXPECT_INPUT_ERROR(WeatherSampler(ds, {24.0}, 1), "24 h", "4 time steps");
  EXPECT_INPUT_ERROR(WeatherSampler(ds, {9.0}, 1), "9 h", "6 h step");
  EXPECT_INPUT_ERROR(WeatherSampler(ds, {}, 1), "no lead");
  EXPECT_INPUT_ERROR(WeatherSampler(ds, {-6.0}, 1), "-6 h");

  // Normalisation stats.
  WeatherStats s{{"z500"}, {1.0}, {2.0}};
  EXPECT_INPUT_ERROR(ds.set_normalisation(s), good, "no variable 't2m'", "z500");
  s = {{"t2m"}, {1.0}, {0.0}};
  EXPECT_INPUT_ERROR(ds.set_normalisation(s), "'t2m'", "std 0");
  const std::string js = dir / "stats.json";
  std::ofstream(js) << "{\"format\": \"weft-weather-stats\", \"variables\": [{\"name\": \"t2m\", \"mean\": 1}]}";
  EXPECT_INPUT_ERROR(WeatherStats::load(js), js, "std");
  std::ofstream(js) << "not json";
  EXPECT_INPUT_ERROR(WeatherStats::load(js), js);
  EXPECT_INPUT_ERROR(WeatherStats::load(dir / "none.json"), "none.json");
}

// ---------------------------------------------------------------------------------------------
// Sampler and weights.

TEST(WeatherSampler, FollowsTheDocumentedRuleWhateverTheRankCount) {
  const std::vector<double> leads = {6, 12, 24};
  const int64_t T = 50;
  WeatherSampler a(T, 6.0, leads, 42), b(T, 6.0, leads, 42), c(T, 6.0, leads, 43);
  EXPECT_EQ(a.epoch_size(), 46);
  std::map<double, int> counts;
  bool differs = false;
  for (int64_t i = 0; i < 3 * 46 * 20; ++i) {
    const auto d = a.draw(i), e = b.draw(i);
    ASSERT_EQ(d.t, e.t);
    ASSERT_EQ(d.lead_steps, e.lead_steps);
    differs |= c.draw(i).t != d.t;
    // The documented rule, recomputed.
    const int64_t epoch = i / 46;
    ASSERT_EQ(d.t, epoch_permutation(42, epoch, 46)[i % 46]);
    const uint32_t w = Philox::draw(42, WeatherSampler::kRngStreamWeatherLead, i)[0];
    const int k = static_cast<int>((static_cast<uint64_t>(w) * 3) >> 32);
    ASSERT_EQ(d.lead_hours, leads[k]);
    ASSERT_EQ(d.lead_steps, static_cast<int64_t>(leads[k] / 6));
    ASSERT_LT(d.t + d.lead_steps, T);
    ++counts[d.lead_hours];
  }
  EXPECT_TRUE(differs);
  // Each lead a third of the time: 2760 draws, binomial sd ~ 25.
  for (double h : leads) EXPECT_NEAR(counts[h], 920, 125) << h;
  // An epoch visits every start time once.
  std::set<int64_t> seen;
  for (int64_t i = 46; i < 92; ++i) seen.insert(a.draw(i).t);
  EXPECT_EQ(seen.size(), 46u);
  EXPECT_INPUT_ERROR(a.draw(-1), "-1");
}

TEST(WeatherSampler, BatchesAreTheSameOnAnyNumberOfRanks) {
  ScratchDir dir;
  TinyFile f;
  f.T = 12;
  f.write(dir / "x.nc");
  WeatherDataset ds = WeatherDataset::open(dir / "x.nc");
  ds.set_normalisation(ds.compute_stats());
  const int64_t B = 12, n = ds.sample_size();
  WeatherSampler sampler(ds, {6, 18}, 7);
  for (int64_t step : {0, 1, 5}) {
    std::vector<float> x1(B * n), y1(B * n), l1(B);
    weather_sample_batch(ds, sampler, step, B, 0, B, x1.data(), y1.data(), l1.data());
    for (int ranks : {2, 3, 4}) {
      std::vector<float> x(B * n), y(B * n), l(B);
      for (int r = 0; r < ranks; ++r) {
        const int64_t first = r * B / ranks, count = (r + 1) * B / ranks - first;
        WeatherSampler own(ds, {6, 18}, 7);  // every rank has its own sampler
        weather_sample_batch(ds, own, step, B, first, count, x.data() + first * n, y.data() + first * n,
                             l.data() + first);
      }
      EXPECT_EQ(x, x1) << ranks << " ranks, step " << step;
      EXPECT_EQ(y, y1);
      EXPECT_EQ(l, l1);
    }
  }
  std::vector<float> x(n), y(n);
  EXPECT_INPUT_ERROR(weather_sample_batch(ds, sampler, 0, 4, 3, 2, x.data(), y.data()), "[3, 5)", "[0, 4)");
}

TEST(WeatherMetrics, LatitudeWeightsAndRmse) {
  const std::vector<double> lat = synthetic_weather_lat(32);
  EXPECT_EQ(lat.front(), -87.1875);
  EXPECT_EQ(lat.back(), 87.1875);
  const std::vector<float> w = latitude_weights(lat);
  double sum = 0, csum = 0;
  for (double l : lat) csum += std::cos(l * M_PI / 180);
  for (size_t j = 0; j < w.size(); ++j) {
    sum += w[j];
    EXPECT_NEAR(w[j], std::cos(lat[j] * M_PI / 180) / (csum / 32), 1e-6);
    EXPECT_EQ(w[j], w[31 - j]);
  }
  EXPECT_NEAR(sum / 32, 1.0, 1e-6);
  const std::vector<float> wf = latitude_weights(std::vector<float>(lat.begin(), lat.end()));
  for (size_t j = 0; j < w.size(); ++j) EXPECT_NEAR(wf[j], w[j], 1e-6);
  EXPECT_INPUT_ERROR(latitude_weights(std::vector<double>{}), "no latitudes");
  EXPECT_INPUT_ERROR(latitude_weights(std::vector<double>{0, 91}), "91");

  // RMSE with a constant error e on one row: sqrt(w_j e^2 / H).
  const std::vector<float> w2 = latitude_weights(std::vector<double>{-60, 0, 60});  // cos: .5, 1, .5 -> mean 2/3
  std::vector<float> pred(2 * 3 * 4, 0.0f), truth(pred.size(), 0.0f);
  for (int i = 0; i < 4; ++i) pred[1 * 12 + 1 * 4 + i] = 2.0f;  // variable 1, equator
  const auto r = lat_weighted_rmse(pred.data(), truth.data(), 2, 3, 4, w2);
  EXPECT_EQ(r[0], 0.0);
  EXPECT_NEAR(r[1], std::sqrt(1.5 * 4.0 * 4 / 12.0), 1e-6);
}

// ---------------------------------------------------------------------------------------------
// Generator + loader.

// One small generated dataset shared by the tests below (16 x 32, 6-hourly, 90 + 40 + 20 days).
class WeatherSynth : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = fs::path(WEFT_TEST_TMP) / "data" / fmt::format("WeatherSynth.{}", ::getpid());
    fs::remove_all(dir_);
    opt_ = SyntheticWeatherOptions{};
    opt_.out_dir = (dir_ / "synth").string();
    opt_.height = 16;
    opt_.width = 32;
    opt_.train_days = 90;
    opt_.val_days = 40;
    opt_.test_days = 20;
    opt_.spin_up_days = 10;
    opt_.seed = 5;
    result_ = generate_synthetic_weather(opt_);
  }
  // The folder stays when a test failed, to look at.
  static void TearDownTestSuite() {
    std::error_code ec;
    if (::testing::UnitTest::GetInstance()->failed_test_count() == 0) fs::remove_all(dir_, ec);
  }
  static fs::path dir_;
  static SyntheticWeatherOptions opt_;
  static SyntheticWeatherResult result_;
};
fs::path WeatherSynth::dir_;
SyntheticWeatherOptions WeatherSynth::opt_;
SyntheticWeatherResult WeatherSynth::result_;

TEST_F(WeatherSynth, WritesFilesTheLoaderReadsBackExactly) {
  EXPECT_EQ(result_.train_steps, 360);
  EXPECT_EQ(result_.val_steps, 160);
  EXPECT_EQ(result_.test_steps, 80);
  for (const auto& e : fs::directory_iterator(opt_.out_dir)) {
    EXPECT_EQ(e.path().string().find(".tmp-"), std::string::npos) << "left behind: " << e.path();
  }
  const std::vector<std::string> names = {"z500", "t850", "t2m", "u10", "v10"};
  WeatherDataset tr = WeatherDataset::open(result_.train_path);
  EXPECT_EQ(tr.variables(), names);
  EXPECT_EQ(tr.units(), (std::vector<std::string>{"m**2 s**-2", "K", "K", "m s**-1", "m s**-1"}));
  EXPECT_EQ(tr.num_times(), 360);
  EXPECT_EQ(tr.height(), 16);
  EXPECT_EQ(tr.width(), 32);
  EXPECT_EQ(tr.step_hours(), 6.0);
  EXPECT_EQ(tr.time_units(), "hours since 2000-01-01 00:00:00");
  EXPECT_EQ(tr.times_hours().front(), 0.0);
  for (int j = 0; j < 16; ++j) EXPECT_EQ(tr.lat()[j], -90.0 + (j + 0.5) * 11.25);
  for (int i = 0; i < 32; ++i) EXPECT_EQ(tr.lon()[i], 11.25 * i);
  // Consecutive periods.
  WeatherDataset va = WeatherDataset::open(result_.val_path), te = WeatherDataset::open(result_.test_path);
  EXPECT_EQ(va.times_hours().front(), 360 * 6.0);
  EXPECT_EQ(te.times_hours().front(), 520 * 6.0);
  EXPECT_EQ(te.num_times(), 80);

  // Values against the netCDF API read independently.
  int nc = -1, var = -1, gatt_len = 0;
  ASSERT_EQ(nc_open(result_.val_path.c_str(), NC_NOWRITE, &nc), NC_NOERR);
  std::vector<float> f(va.sample_size());
  for (int v = 0; v < 5; ++v) {
    ASSERT_EQ(nc_inq_varid(nc, names[v].c_str(), &var), NC_NOERR);
    for (auto [t, j, i] : {std::tuple{0, 0, 0}, std::tuple{17, 5, 30}, std::tuple{159, 15, 31}}) {
      const size_t idx[3] = {static_cast<size_t>(t), static_cast<size_t>(j), static_cast<size_t>(i)};
      float ref = 0;
      ASSERT_EQ(nc_get_var1_float(nc, var, idx, &ref), NC_NOERR);
      va.read_fields(t, f.data());
      EXPECT_EQ(f[(v * 16 + j) * 32 + i], ref) << names[v] << " " << t << " " << j << " " << i;
    }
  }
  size_t len = 0;
  ASSERT_EQ(nc_inq_attlen(nc, NC_GLOBAL, "seed", &len), NC_NOERR);
  std::string seed(len, '\0');
  nc_get_att_text(nc, NC_GLOBAL, "seed", seed.data());
  EXPECT_EQ(seed, "5");
  (void)gatt_len;
  nc_close(nc);

  // stats.json holds the train split's stats.
  const WeatherStats s = WeatherStats::load(result_.stats_path), c = tr.compute_stats();
  EXPECT_EQ(s.variables, names);
  for (int v = 0; v < 5; ++v) {
    EXPECT_NEAR(s.mean[v], c.mean[v], 1e-9 * std::abs(c.mean[v]) + 1e-12) << names[v];
    EXPECT_NEAR(s.std[v], c.std[v], 1e-9 * c.std[v]) << names[v];
  }
  // Physical ranges.
  const double lo[5] = {4.4e4, 215, 215, -40, -40}, hi[5] = {6.2e4, 310, 330, 40, 40};
  for (int64_t t = 0; t < tr.num_times(); t += 5) {
    tr.read_fields(t, f.data());
    for (int v = 0; v < 5; ++v)
      for (int k = 0; k < 16 * 32; ++k) {
        ASSERT_GT(f[v * 512 + k], lo[v]) << names[v] << " t " << t;
        ASSERT_LT(f[v * 512 + k], hi[v]) << names[v] << " t " << t;
      }
  }
}

TEST_F(WeatherSynth, OpensThePreparedFolder) {
  WeatherFolder f = open_weather_folder(opt_.out_dir, {"t2m", "z500"});
  ASSERT_TRUE(f.val && f.test);
  EXPECT_EQ(f.train.variables(), (std::vector<std::string>{"t2m", "z500"}));
  EXPECT_EQ(f.test->variables(), f.train.variables());
  const WeatherStats s = WeatherStats::load(result_.stats_path);
  EXPECT_EQ(f.stats.mean, s.mean);
  EXPECT_EQ(f.test->norm_mean(), (std::vector<double>{s.mean[2], s.mean[0]}));
  EXPECT_EQ(f.val->norm_std(), (std::vector<double>{s.std[2], s.std[0]}));

  // Without stats.json the train split's stats are computed; a split on another grid is refused.
  test::TempDir dir("data");
  fs::copy_file(result_.train_path, dir / "train.nc");
  TinyFile{}.write(dir / "val.nc");
  EXPECT_INPUT_ERROR(open_weather_folder(dir.path().string(), {"t2m"}), dir / "val.nc", "4x8", "16x32");
  fs::remove(dir / "val.nc");
  WeatherFolder g = open_weather_folder(dir.path().string());
  EXPECT_FALSE(g.val || g.test);
  EXPECT_NEAR(g.stats.mean[1], s.mean[1], 1e-9 * s.mean[1]);
  EXPECT_INPUT_ERROR(open_weather_folder(dir / "nothing"), "nothing", "not a folder");
  fs::remove(dir / "train.nc");
  EXPECT_INPUT_ERROR(open_weather_folder(dir.path().string()), "no train.nc");
}

TEST_F(WeatherSynth, SameSeedSameFieldsOtherSeedOtherFields) {
  test::TempDir dir("data");
  SyntheticWeatherOptions o = opt_;
  o.train_days = 10;  // a prefix of the shared run: the same integration
  o.val_days = o.test_days = 2;
  o.out_dir = dir / "same";
  const auto r = generate_synthetic_weather(o);
  o.out_dir = dir / "other";
  o.seed = 6;
  const auto r2 = generate_synthetic_weather(o);
  WeatherDataset full = WeatherDataset::open(result_.train_path), same = WeatherDataset::open(r.train_path),
                 other = WeatherDataset::open(r2.train_path);
  std::vector<float> a(full.sample_size()), b(a.size()), c(a.size());
  for (int64_t t = 0; t < same.num_times(); ++t) {
    full.read_fields(t, a.data());
    same.read_fields(t, b.data());
    ASSERT_EQ(a, b) << "time " << t;
  }
  other.read_fields(39, c.data());
  full.read_fields(39, a.data());
  EXPECT_NE(a, c);
  // Outputs of other settings are protected; the same settings are regenerated in place.
  o.seed = 7;
  EXPECT_INPUT_ERROR(generate_synthetic_weather(o), dir / "other", "--overwrite", "train.nc");
  o.seed = 6;
  EXPECT_NO_THROW(generate_synthetic_weather(o));
  o.seed = 7;
  o.overwrite = true;
  EXPECT_NO_THROW(generate_synthetic_weather(o));
}

TEST_F(WeatherSynth, NormalisedSamplesAndClimatology) {
  const WeatherStats stats = WeatherStats::load(result_.stats_path);
  WeatherDataset tr = WeatherDataset::open(result_.train_path);
  tr.set_normalisation(stats);
  const int64_t n = tr.sample_size(), HW = 16 * 32;
  std::vector<float> f(n);
  std::vector<double> sum(5, 0), sq(5, 0), clim(n, 0);
  for (int64_t t = 0; t < tr.num_times(); ++t) {
    tr.read_fields(t, f.data(), true);
    for (int v = 0; v < 5; ++v)
      for (int64_t k = 0; k < HW; ++k) {
        sum[v] += f[v * HW + k];
        sq[v] += static_cast<double>(f[v * HW + k]) * f[v * HW + k];
      }
    for (int64_t k = 0; k < n; ++k) clim[k] += f[k];
  }
  const double N = 360.0 * HW;
  for (int v = 0; v < 5; ++v) {
    EXPECT_NEAR(sum[v] / N, 0.0, 1e-4) << v;
    EXPECT_NEAR(std::sqrt(sq[v] / N - (sum[v] / N) * (sum[v] / N)), 1.0, 1e-4) << v;
  }
  const std::vector<float> c = tr.climatology();
  for (int64_t k = 0; k < n; ++k) ASSERT_NEAR(c[k], clim[k] / 360.0, 1e-5) << k;

  // Pairs: y at t + lead is the field at t + lead; x the field at t.
  WeatherDataset va = WeatherDataset::open(result_.val_path);
  va.set_normalisation(stats);
  EXPECT_EQ(va.norm_mean(), stats.mean);
  EXPECT_EQ(va.norm_std(), stats.std);
  std::vector<float> x(n), y(n), ref(n);
  for (auto [t, lead] : {std::pair{0, 1}, std::pair{10, 4}, std::pair{100, 12}, std::pair{158, 1}}) {
    va.sample(t, lead, x.data(), y.data());
    va.read_fields(t + lead, ref.data(), true);
    EXPECT_EQ(y, ref);
    va.read_fields(t, ref.data(), true);
    EXPECT_EQ(x, ref);
    // (value - mean) / std by hand for one value per variable.
    va.read_fields(t + lead, ref.data());
    for (int v = 0; v < 5; ++v) EXPECT_NEAR(y[v * HW + 7], (ref[v * HW + 7] - stats.mean[v]) / stats.std[v], 1e-5);
  }
  EXPECT_EQ(va.num_samples(12), 148);
}

TEST_F(WeatherSynth, PersistenceErrorGrowsWithLeadAndT2mHasADailyCycle) {
  const WeatherStats stats = WeatherStats::load(result_.stats_path);
  WeatherDataset va = WeatherDataset::open(result_.val_path);
  va.set_normalisation(stats);
  const auto p6 = persistence_rmse(va, 1), p12 = persistence_rmse(va, 2), p24 = persistence_rmse(va, 4),
             p72 = persistence_rmse(va, 12);
  const char* names[5] = {"z500", "t850", "t2m", "u10", "v10"};
  double m6 = 0, m24 = 0, m72 = 0;
  for (int v = 0; v < 5; ++v) {
    m6 += p6[v] / 5;
    m24 += p24[v] / 5;
    m72 += p72[v] / 5;
    EXPECT_GT(p6[v], 0.005) << names[v];  // the fields move
    if (v == 2) continue;                 // t2m: the daily cycle, below
    EXPECT_LT(p6[v], p24[v]) << names[v];
    EXPECT_LT(p24[v], p72[v]) << names[v];
  }
  EXPECT_LT(m6, m24);
  EXPECT_LT(m24, m72);
  // Climatology (of train) is worse than 6-hour persistence: persistence is a meaningful baseline.
  WeatherDataset tr = WeatherDataset::open(result_.train_path);
  tr.set_normalisation(stats);
  const auto cl = climatology_rmse(va, tr.climatology(), 1);
  for (int v = 0; v < 5; ++v) EXPECT_GT(cl[v], 1.5 * p6[v]) << names[v];

  // t2m: a day later is closer than half a day later.
  EXPECT_LT(p24[2], p12[2]);
  // The mean daily cycle at the most continental mid-latitude cell peaks in the local afternoon
  // and spans several kelvin; over the ocean it is flatter.
  WeatherDataset raw = WeatherDataset::open(result_.val_path);
  int best_j = 0, best_i = 0, sea_j = 0, sea_i = 0;
  double best = -1, sea = 2;
  for (int j = 0; j < 16; ++j)
    for (int i = 0; i < 32; ++i) {
      if (std::abs(raw.lat()[j]) > 50 || std::abs(raw.lat()[j]) < 15) continue;
      const double L = synthetic_land_fraction(raw.lat()[j], raw.lon()[i]);
      if (L > best) best = L, best_j = j, best_i = i;
      if (L < sea) sea = L, sea_j = j, sea_i = i;
    }
  ASSERT_GT(best, 0.9);
  ASSERT_LT(sea, 0.1);
  std::vector<double> land_hour(4, 0), sea_hour(4, 0);
  std::vector<float> f(raw.sample_size());
  for (int64_t t = 0; t < raw.num_times(); ++t) {
    raw.read_fields(t, f.data());
    const int h = static_cast<int>(std::fmod(raw.times_hours()[t], 24.0) / 6);
    land_hour[h] += f[2 * 512 + best_j * 32 + best_i] / 40.0;
    sea_hour[h] += f[2 * 512 + sea_j * 32 + sea_i] / 40.0;
  }
  const int warmest = static_cast<int>(std::max_element(land_hour.begin(), land_hour.end()) - land_hour.begin());
  const double local = std::fmod(warmest * 6 + raw.lon()[best_i] / 15.0 + 24.0, 24.0);
  EXPECT_GE(local, 11.0) << "warmest at UTC " << warmest * 6 << ", lon " << raw.lon()[best_i];
  EXPECT_LE(local, 19.0) << "warmest at UTC " << warmest * 6 << ", lon " << raw.lon()[best_i];
  const auto [lmin, lmax] = std::minmax_element(land_hour.begin(), land_hour.end());
  const auto [smin, smax] = std::minmax_element(sea_hour.begin(), sea_hour.end());
  EXPECT_GT(*lmax - *lmin, 3.0);
  EXPECT_LT(*smax - *smin, 0.5 * (*lmax - *lmin));
}

// Issue 34 class 7: a NetCDF-4 file cut short reads zeros where its data was, which surfaced as
// "latitude is not strictly monotonic"; the HDF5 superblock's end-of-file address says it is
// truncated. And a folder that cannot hold the output is refused before anything is written.
TEST_F(WeatherSynth, ATruncatedFileIsSaidToBeTruncated) {
  const fs::path cut = dir_ / "cut.nc";
  fs::copy_file(result_.val_path, cut, fs::copy_options::overwrite_existing);
  const auto size = fs::file_size(cut);
  EXPECT_NO_THROW(WeatherDataset::open(cut.string(), {}));
  for (const auto keep : {size - 1, size / 2, uintmax_t{4096}}) {
    fs::resize_file(cut, keep);
    EXPECT_INPUT_ERROR(WeatherDataset::open(cut.string(), {}), "cut.nc: truncated",
                       fmt::format("{} bytes", keep), fmt::format("ends at byte {}", size));
  }
}

TEST(WeatherSynthSpace, AFolderWithoutTheSpaceIsRefusedBeforeWriting) {
  test::TempDir dir("weather-space");
  SyntheticWeatherOptions o;
  o.out_dir = dir / "w";
  o.height = 721;
  o.width = 1440;
  o.train_days = 100 * 365;  // ~2.9 TB of fields
  EXPECT_INPUT_ERROR(generate_synthetic_weather(o), "needs about", "MiB free");
  EXPECT_TRUE(fs::is_empty(dir / "w"));
}

// A disk that fills while the NetCDF files are written: one line naming the file, exit 1, no
// temporary file left, and no crash at exit (HDF5's exit handler crashed on the file the failed
// close left open: exit 139 after the message). The writes fail through the disk-full shim
// (tests/train/diskfull_shim.c, inject mode from the start).
TEST(WeatherCli, ADiskThatFillsWhileWritingIsOneLineAndNoCrash) {
  test::TempDir dir("weather-full");
  const std::string out = dir / "w";
  fs::create_directories(out);
  for (const char* leave : {"0", "200000", "1500000"}) {
    const test::RunResult r = test::run_weft_with(
        fmt::format("LD_PRELOAD={} WEFT_DISKFULL_DIR={} WEFT_DISKFULL_MODE=inject WEFT_DISKFULL_AT_LINE=0 "
                    "WEFT_DISKFULL_LEAVE={}",
                    WEFT_DISKFULL_SHIM, out, leave),
        fmt::format("prepare --synthetic-weather {} --days 30 --val-days 2 --test-days 2 --overwrite", out),
        dir / fmt::format("full-{}", leave));
    EXPECT_EQ(r.code, 1) << leave << ": " << r.err;
    EXPECT_NE(r.err.find(".nc.tmp-"), std::string::npos) << r.err;
    for (const auto& e : fs::directory_iterator(out)) {
      EXPECT_EQ(e.path().filename().string().find(".tmp-"), std::string::npos) << "left behind: " << e.path();
    }
    EXPECT_FALSE(fs::exists(out + "/stats.json"));
  }
}

TEST(WeatherSynthOptions, BadValuesNameThem) {
  SyntheticWeatherOptions o;
  o.out_dir = "x";
  auto with = [&](const std::function<void(SyntheticWeatherOptions&)>& edit) {
    SyntheticWeatherOptions b = o;
    edit(b);
    return b;
  };
  EXPECT_INPUT_ERROR(check_synthetic_weather_options(with([](auto& b) { b.height = 4; })), "4x64");
  EXPECT_INPUT_ERROR(check_synthetic_weather_options(with([](auto& b) { b.width = 5000; })), "32x5000");
  EXPECT_INPUT_ERROR(check_synthetic_weather_options(with([](auto& b) { b.step_hours = 0; })), "step of 0 h");
  EXPECT_INPUT_ERROR(check_synthetic_weather_options(with([](auto& b) { b.val_days = 0.1; })), "val", "0.1 days");
  EXPECT_INPUT_ERROR(check_synthetic_weather_options(with([](auto& b) { b.train_days = NAN; })), "train");
  EXPECT_INPUT_ERROR(check_synthetic_weather_options(with([](auto& b) { b.spin_up_days = -1; })), "spin-up of -1");
  EXPECT_INPUT_ERROR(check_synthetic_weather_options(with([](auto& b) { b.out_dir = ""; })), "no output folder");
  EXPECT_NO_THROW(check_synthetic_weather_options(o));
}

// ---------------------------------------------------------------------------------------------
// The command line.

TEST(WeatherCli, PrepareSyntheticWeather) {
  test::TempDir dir("data");
  const std::string out = dir / "wx";
  test::RunResult r = test::run_weft(
      "prepare --synthetic-weather " + out + " --days 4 --val-days 2 --test-days 2 --grid 8x16 --step-hours 3 --seed 9",
      dir / "ok");
  ASSERT_EQ(r.code, 0) << r.err;
  WeatherDataset ds = WeatherDataset::open(out + "/test.nc");
  EXPECT_EQ(ds.height(), 8);
  EXPECT_EQ(ds.width(), 16);
  EXPECT_EQ(ds.step_hours(), 3.0);
  EXPECT_EQ(ds.num_times(), 16);
  EXPECT_TRUE(fs::exists(out + "/stats.json"));

  auto bad = [&](const std::string& args, const std::vector<std::string>& frags) {
    const test::RunResult b = test::run_weft("prepare " + args, dir / "bad");
    EXPECT_EQ(b.code, 2) << args << ": " << b.err;
    EXPECT_EQ(std::count(b.err.begin(), b.err.end(), '\n'), 1) << "one line: " << b.err;
    for (const auto& f : frags) EXPECT_NE(b.err.find(f), std::string::npos) << "missing '" << f << "' in: " << b.err;
  };
  const std::string o2 = dir / "wx2";
  bad("--synthetic-weather " + o2 + " --grid 32by64", {"--grid", "32by64", "32x64"});
  bad("--synthetic-weather " + o2 + " --grid 4x8", {"4x8"});
  bad("--synthetic-weather " + o2 + " --step-hours 0", {"step of 0 h"});
  bad("--synthetic-weather " + o2 + " --years 1 --days 3", {"--years 1", "--days 3"});
  bad("--synthetic-weather " + o2 + " --years -2", {"--years", "-2"});
  bad("--synthetic-weather " + o2 + " --input " + out, {"--input"});
  bad("--input " + out + " --out " + o2 + " --grid 8x16", {"--grid", "--synthetic-weather"});
  bad("--out " + o2, {"--input"});
  bad("--synthetic-weather " + out + " --days 5 --val-days 2 --test-days 2 --grid 8x16 --step-hours 3 --seed 9",
      {out, "--overwrite"});
  EXPECT_FALSE(fs::exists(o2));
}

}  // namespace
}  // namespace weft
