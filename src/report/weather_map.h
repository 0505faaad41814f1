// A map of one weather field through gnuplot: the forecast beside the truth and their
// difference, on latitude-longitude axes with a colour bar each (`weft eval --map` of a ClimaX
// checkpoint, docs/climax.md).
#pragma once
#include <string>
#include <vector>

#include "report/gnuplot.h"

namespace weft::report {

// One field at one time: H latitudes x W longitudes, latitude outer (data/weather.h's order).
struct WeatherMap {
  std::string title;              // the figure's title (variable, time, lead, source)
  std::string units;              // of the values, e.g. "K"; the colour bars' label
  std::vector<double> lat, lon;   // (H), (W) degrees north / east, as in the file
  std::vector<float> pred, truth; // (H, W) each, physical units
};

// The gnuplot script of the map: three panels (forecast, truth on the same colour range;
// forecast - truth on a range symmetric about 0), reading the data files pred.dat, truth.dat and
// error.dat that write_weather_map_data() writes beside it; draws NAME.png.
std::string weather_map_script(const Gnuplot& gp, const WeatherMap& m, const std::string& name);
// Writes DIR/pred.dat, truth.dat and error.dat: "lon lat value" per grid point.
void write_weather_map_data(const WeatherMap& m, const std::string& dir);

// Draws the map into `png_path` (its folder made if missing): the data and the script go to a
// fresh temporary folder, which is removed afterwards whatever happens. InputError naming the
// sizes when lat, lon, pred and truth disagree, or a value is not finite; RuntimeError from
// gnuplot (run_script).
void draw_weather_map(const Gnuplot& gp, const WeatherMap& m, const std::string& png_path);

}  // namespace weft::report
