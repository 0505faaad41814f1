// Gridded weather fields (WeatherBench / ERA5-style NetCDF) for forecasting models: a dataset of
// one file, its normalisation, (x at t, y at t + lead) pairs, the training sampler, and the
// latitude weights and baselines of ClimaX's metrics. Format and rules: docs/formats-weather.md.
//
// Shapes use fixed letters: V variables (fields), T time steps of the file, H latitudes, W
// longitudes. A field at one time is (H, W) row-major with latitude outer; a sample is
// (V, H, W) in the order of variables().
//
// A file holds dimensions time ("time" or "valid_time"), lat ("lat" or "latitude") and lon
// ("lon" or "longitude"), their 1-D coordinate variables (lat in degrees_north, lon in
// degrees_east, time with units "<hours|minutes|seconds|days> since <date>"), and one variable
// per field with dims exactly (time, lat, lon): float or double, or an integer type packed with
// scale_factor/add_offset. Every value must be finite and present (no _FillValue).
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace weft {

// Per-variable mean and standard deviation (physical units) over (time, lat, lon).
struct WeatherStats {
  std::vector<std::string> variables;
  std::vector<double> mean, std;  // (V) each

  // stats.json: {"format": "weft-weather-stats", "version": 1, "source": ..., "about": {...},
  //  "variables": [{"name": "z500", "mean": ..., "std": ..., "units": ...}, ...]}.
  // `source`, `units` (V entries) and `about` (text, e.g. the generator's settings) are
  // descriptive and optional. save() writes atomically.
  void save(const std::string& path, const std::string& source = "", const std::vector<std::string>& units = {},
            const std::map<std::string, std::string>& about = {}) const;
  // Throws InputError naming the path for a missing/unreadable file, bad JSON, a missing key,
  // a non-finite mean or a std that is not positive.
  static WeatherStats load(const std::string& path);
};

class WeatherDataset {
 public:
  // Files up to this many bytes of fields (as float) are read whole at open; larger ones are
  // read one time step at a time on demand (one reader at a time, netCDF-C is not thread-safe).
  static constexpr int64_t kDefaultResidentBytes = int64_t{2} << 30;

  // Opens `path` with the named variables in that order, or with every (time, lat, lon)
  // variable in file order when `variables` is empty. Checks dims, coordinates, the time axis
  // (at least 2 steps, uniform spacing) and, for a file read whole, every value. Throws
  // InputError naming the path and the values: missing file, not NetCDF, missing variable,
  // wrong dims or rank, a coordinate whose length is not its dimension's, non-monotonic or
  // out-of-range latitudes, bad time units, non-uniform time, NaN/inf or missing values.
  static WeatherDataset open(const std::string& path, const std::vector<std::string>& variables = {},
                             int64_t max_resident_bytes = kDefaultResidentBytes);

  WeatherDataset(WeatherDataset&&) noexcept;
  WeatherDataset& operator=(WeatherDataset&&) noexcept;
  ~WeatherDataset();

  const std::string& path() const { return path_; }
  const std::vector<std::string>& variables() const { return variables_; }
  const std::vector<std::string>& units() const { return units_; }  // (V), "" when absent
  int64_t num_variables() const { return static_cast<int64_t>(variables_.size()); }
  int64_t num_times() const { return T_; }
  int64_t height() const { return H_; }  // H = number of latitudes
  int64_t width() const { return W_; }   // W = number of longitudes
  const std::vector<double>& lat() const { return lat_; }  // (H) degrees north, file order
  const std::vector<double>& lon() const { return lon_; }  // (W) degrees east, file order
  // (T) hours since time_reference() ("2000-01-01 00:00:00"); time_units() as in the file.
  const std::vector<double>& times_hours() const { return times_; }
  const std::string& time_units() const { return time_units_; }
  const std::string& time_reference() const { return time_reference_; }
  double step_hours() const { return step_hours_; }  // uniform spacing of the time axis
  bool resident() const { return !data_.empty(); }   // read whole at open
  int64_t sample_size() const { return num_variables() * H_ * W_; }  // V*H*W floats

  // Mean and std per variable over all (time, lat, lon) values, unweighted, in double.
  WeatherStats compute_stats() const;
  // Normalises samples with (value - mean) / std of the stats' entry of the same name (the
  // train split's stats, also for val and test). Until called, samples are in physical units.
  // Throws InputError when a variable of this file is missing from `stats`.
  void set_normalisation(const WeatherStats& stats);
  const std::vector<double>& norm_mean() const { return mean_; }  // (V)
  const std::vector<double>& norm_std() const { return std_; }    // (V)

  // Fields at time t: out (V, H, W), in physical units or normalised (as sample() gives them).
  // InputError for t outside [0, T) or a value that is not finite (a file read on demand).
  void read_fields(int64_t t, float* out, bool normalised = false) const;

  // Pairs with a lead of `lead_steps` steps: max(0, T - lead_steps). InputError if lead_steps < 0.
  int64_t num_samples(int64_t lead_steps) const;
  // x = normalised fields at time t, y = at t + lead_steps; both (V, H, W). InputError naming
  // the values when t < 0, lead_steps < 0 or t + lead_steps >= T.
  void sample(int64_t t, int64_t lead_steps, float* x, float* y) const;

  // The normalised time mean of every field of this file: (V, H, W). Computed from the train
  // split, it is the climatology baseline of val/test (normalise first).
  std::vector<float> climatology() const;

 private:
  WeatherDataset();
  void read_raw(int64_t v, int64_t t, float* out) const;  // (H, W), physical units, checked

  struct Reader;  // the open netCDF file of a dataset read on demand
  std::string path_;
  std::vector<std::string> variables_, units_;
  int64_t T_ = 0, H_ = 0, W_ = 0;
  std::vector<double> lat_, lon_, times_;
  std::string time_units_, time_reference_;
  double step_hours_ = 0.0;
  std::vector<double> mean_, std_;  // normalisation (V); 0 and 1 until set
  std::vector<float> data_;         // resident: (V, T, H, W) physical units
  std::unique_ptr<Reader> reader_;  // otherwise
};

// A prepared folder: DIR/train.nc (required), val.nc and test.nc (each if present), every split
// normalised with DIR/stats.json, or with the train split's compute_stats() when there is no
// stats.json (as `weft prepare --synthetic-weather` writes them).
struct WeatherFolder {
  WeatherDataset train;
  std::optional<WeatherDataset> val, test;
  WeatherStats stats;
};
// Opens the splits with the named variables (empty: train's fields, in its order, for every
// split). InputError naming the files and values when train.nc is missing, or a split differs
// from train in grid (H, W, latitudes, longitudes) or time step.
WeatherFolder open_weather_folder(const std::string& dir, const std::vector<std::string>& variables = {});

// The training order of one split: GLOBAL sample index i -> (t, lead). A pure function of
// (seed, i) and the split's length, never of the number of ranks (a rank that reads samples
// [first, first + count) of a global batch sees what a single process would):
//   N = T - max_lead_steps start times are valid for every lead; epoch e = i / N;
//   t = epoch_permutation(seed, e, N)[i % N] (data/loader.h: Fisher-Yates, stream
//       kRngStreamData + e);
//   lead = lead_hours[k], k = floor(w * K / 2^32), w = word 0 of
//       Philox::draw(seed, kRngStreamWeatherLead, i), K = lead_hours.size().
class WeatherSampler {
 public:
  // The Philox stream of the lead draws: inside the data sampler's range of core/rng.h, far
  // above any epoch number that kRngStreamData + e reaches.
  static constexpr uint64_t kRngStreamWeatherLead = (2ull << 32) + (1ull << 31);

  struct Draw {
    int64_t t = 0;           // start time step
    int64_t lead_steps = 0;  // y is at t + lead_steps
    double lead_hours = 0.0;
  };

  // Throws InputError when lead_hours is empty, a lead is not a positive multiple of
  // step_hours, or the longest lead leaves no start time (lead_steps >= num_times).
  WeatherSampler(int64_t num_times, double step_hours, std::vector<double> lead_hours, uint64_t seed);
  WeatherSampler(const WeatherDataset& ds, std::vector<double> lead_hours, uint64_t seed)
      : WeatherSampler(ds.num_times(), ds.step_hours(), std::move(lead_hours), seed) {}
  WeatherSampler(WeatherSampler&&) noexcept;
  ~WeatherSampler();

  Draw draw(int64_t i) const;  // InputError for i < 0
  int64_t epoch_size() const { return n_; }  // N
  const std::vector<double>& lead_hours() const { return lead_hours_; }
  const std::vector<int64_t>& lead_steps() const { return lead_steps_; }
  uint64_t seed() const { return seed_; }

 private:
  struct Cache;
  std::vector<double> lead_hours_;
  std::vector<int64_t> lead_steps_;
  uint64_t seed_ = 0;
  int64_t n_ = 0;
  std::unique_ptr<Cache> cache_;
};

// Rows [first, first + count) of the global batch of `step` (global sample i = step *
// global_batch + s) drawn by `sampler` from `ds`: x and y (count, V, H, W), lead_hours (count)
// when not null. InputError for a range outside [0, global_batch) or a negative step.
void weather_sample_batch(const WeatherDataset& ds, const WeatherSampler& sampler, int64_t step,
                          int64_t global_batch, int64_t first, int64_t count, float* x, float* y,
                          float* lead_hours = nullptr);

// ClimaX's latitude weights: w_j = cos(lat_j) / mean_k cos(lat_k), (H); their mean is 1.
// InputError for an empty list or a latitude outside [-90, 90].
std::vector<float> latitude_weights(const std::vector<double>& lat_deg);
std::vector<float> latitude_weights(const std::vector<float>& lat_deg);

// Latitude-weighted RMSE of one (V, H, W) prediction, per variable:
// sqrt(mean_{j,i} w_j (pred - truth)^2), weights (H) from latitude_weights.
std::vector<double> lat_weighted_rmse(const float* pred, const float* truth, int64_t V, int64_t H, int64_t W,
                                      const std::vector<float>& weights);

// Baselines on a (normalised) split, as ClimaX reports them: the mean over all start times t of
// the per-sample lat_weighted_rmse, per variable (V).
// Persistence predicts y(t + lead) = x(t).
std::vector<double> persistence_rmse(const WeatherDataset& ds, int64_t lead_steps);
// Climatology predicts `climatology` (V, H, W; normalised, e.g. the train split's
// climatology()) for every time; the targets are the fields at t >= lead_steps.
std::vector<double> climatology_rmse(const WeatherDataset& ds, const std::vector<float>& climatology,
                                     int64_t lead_steps);

// One variable of a weather file: its name and attributes.
struct WeatherVariableInfo {
  std::string name, units, long_name;
};

// Writes a weather file in the format above, one time step at a time. The file is built under
// a temporary name beside `path` ("<path>.tmp-<pid>-<n>") and renamed over `path` by close(),
// so a half-written file never carries the final name. netCDF-4 (HDF5) format, uncompressed
// (deflate saved 25% on these noisy floats and doubled the time to write and read them), chunks
// of one (H, W) field. Coordinates are written as double.
class WeatherWriter {
 public:
  // lat (H) degrees north, lon (W) degrees east; time_units e.g. "hours since 2000-01-01
  // 00:00:00"; global_attributes become text attributes of the file. RuntimeError (naming the
  // path and netCDF's message) when the file cannot be created.
  WeatherWriter(const std::string& path, const std::vector<double>& lat, const std::vector<double>& lon,
                const std::vector<WeatherVariableInfo>& variables, const std::string& time_units,
                const std::map<std::string, std::string>& global_attributes = {});
  WeatherWriter(const WeatherWriter&) = delete;
  WeatherWriter& operator=(const WeatherWriter&) = delete;
  ~WeatherWriter();  // without close(): removes the temporary file

  // Appends time `time_value` (in time_units) with fields (V, H, W).
  void append(double time_value, const float* fields);
  int64_t num_times() const { return t_; }
  // Completes the file and renames it to its final name.
  void close();

 private:
  std::string path_, tmp_;
  int ncid_ = -1, time_var_ = -1;
  std::vector<int> var_ids_;
  int64_t t_ = 0, H_ = 0, W_ = 0;
};

}  // namespace weft
