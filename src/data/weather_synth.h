// Synthetic weather: a small, seeded model of the atmosphere on a regular lat-lon grid whose
// output has the format of data/weather.h (WeatherBench-style NetCDF). It is synthetic, not a
// climate model: its point is data with learnable dynamics where persistence is a meaningful
// but beatable baseline and errors grow with lead time. Physics: docs/formats-weather.md.
//
// Fields (V = 5, in this order): z500 geopotential at 500 hPa [m**2 s**-2], t850 temperature
// at 850 hPa [K], t2m 2 m temperature [K], u10 / v10 10 m wind [m s**-1].
//  - z500 = balanced zonal jet (gradient wind of a seasonal jet profile) + travelling
//    Rossby-Haurwitz waves whose amplitudes are damped, stochastically forced (Ornstein-
//    Uhlenbeck) and rotate at the Rossby-Haurwitz phase speed.
//  - t850: semi-Lagrangian advection by the (geostrophic) wind of z500, diffusion on the
//    sphere, Newtonian relaxation to a seasonal radiative-equilibrium profile.
//  - t2m: relaxes to t850 + lapse rate + a solar daily cycle (cosine of the solar zenith
//    angle, moving west with the sun), faster and stronger over a fixed land mask; small noise.
//  - u10, v10: the geostrophic wind of z500, reduced and turned towards low geopotential,
//    plus seasonal trade winds.
// Deterministic for a seed: the same options give the same values.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "data/weather.h"

namespace weft {

struct SyntheticWeatherOptions {
  std::string out_dir;          // created if missing: train.nc, val.nc, test.nc, stats.json
  int64_t height = 32;          // H latitudes, cell-centred: -90 + (j + 0.5) * 180 / H
  int64_t width = 64;           // W longitudes: i * 360 / W
  int64_t step_hours = 6;       // output spacing, in [1, 24]
  double train_days = 730.0;    // consecutive periods: train, then val, then test
  double val_days = 91.0;
  double test_days = 91.0;
  double spin_up_days = 30.0;   // integrated before train starts, not written
  uint64_t seed = 1337;
  bool overwrite = false;       // replace outputs of other settings in out_dir
};

struct SyntheticWeatherResult {
  std::string train_path, val_path, test_path, stats_path;
  int64_t train_steps = 0, val_steps = 0, test_steps = 0;  // time steps per file
  int64_t bytes = 0;      // size of the four files
  double seconds = 0.0;   // generation wall time
};

// Throws InputError naming the value for a grid below 8 x 16 or above 721 x 1440, a step
// outside [1, 24] h, a split shorter than 2 steps, a spin-up outside [0, 3650] days, or an
// empty out_dir.
void check_synthetic_weather_options(const SyntheticWeatherOptions& o);

// Generates the four files (each NetCDF file is renamed into place when complete; stats.json,
// the train split's WeatherStats, is written last, so a folder without it is incomplete).
// An out_dir that already holds outputs of other settings is refused (InputError) unless
// o.overwrite; the same settings are regenerated in place.
SyntheticWeatherResult generate_synthetic_weather(const SyntheticWeatherOptions& o);

// The generator's grid (degrees) and variables.
std::vector<double> synthetic_weather_lat(int64_t H);
std::vector<double> synthetic_weather_lon(int64_t W);
const std::vector<WeatherVariableInfo>& synthetic_weather_variables();
// Its fixed land fraction in [0, 1] at (lat, lon) degrees: smoothed continents.
double synthetic_land_fraction(double lat_deg, double lon_deg);

}  // namespace weft
