#include "report/weather_map.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "core/error.h"
#include "data/text_util.h"

namespace fs = std::filesystem;

namespace weft::report {

namespace {

// A double-quoted gnuplot string: `\n` breaks the line; quotes and backslashes of `s` are
// replaced (gnuplot would read them as escapes).
std::string dquoted(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '\n') {
      out += "\\n";
    } else {
      out += c == '"' ? '\'' : c == '\\' ? '/' : c;
    }
  }
  return out + "\"";
}

void check_map(const WeatherMap& m) {
  const size_t H = m.lat.size(), W = m.lon.size();
  if (H < 2 || W < 2) throw_input("a weather map needs at least 2 x 2 grid points, got {} x {}", H, W);
  if (m.pred.size() != H * W || m.truth.size() != H * W) {
    throw_input("a weather map of {} x {} points: the forecast has {} values, the truth {}", H, W, m.pred.size(),
                m.truth.size());
  }
  for (size_t k = 0; k < H * W; ++k) {
    if (!std::isfinite(m.pred[k]) || !std::isfinite(m.truth[k])) {
      throw_input("a weather map: the value at latitude {} longitude {} is not finite (forecast {}, truth {})",
                  m.lat[k / W], m.lon[k % W], m.pred[k], m.truth[k]);
    }
  }
}

// Half the spacing of the first two coordinates: the pixels are centred on the grid points.
double half_cell(const std::vector<double>& c) { return std::abs(c[1] - c[0]) / 2.0; }

std::string axis_range(const std::vector<double>& c) {
  const auto [lo, hi] = std::minmax_element(c.begin(), c.end());
  const double h = half_cell(c);
  return fmt::format("[{:.6g}:{:.6g}]", *lo - h, *hi + h);
}

// Perceptually uniform for the fields (viridis' key colours), blue-white-red for the error.
constexpr const char* kFieldPalette =
    "set palette defined (0 '#440154', 0.25 '#3b528b', 0.5 '#21918c', 0.75 '#5ec962', 1 '#fde725')\n";
constexpr const char* kErrorPalette = "set palette defined (0 '#2166ac', 0.5 '#f7f7f7', 1 '#b2182b')\n";

}  // namespace

std::string weather_map_script(const Gnuplot& gp, const WeatherMap& m, const std::string& name) {
  check_map(m);
  float lo = m.pred[0], hi = m.pred[0], err = 0.0f;
  for (size_t k = 0; k < m.pred.size(); ++k) {
    lo = std::min({lo, m.pred[k], m.truth[k]});
    hi = std::max({hi, m.pred[k], m.truth[k]});
    err = std::max(err, std::abs(m.pred[k] - m.truth[k]));
  }
  if (hi <= lo) hi = lo + std::max(1e-6f, std::abs(lo) * 1e-6f);  // a constant field: a range gnuplot accepts
  if (err <= 0.0f) err = std::max(1e-6f, (hi - lo) * 1e-6f);
  const std::string font = gp.terminal == "pngcairo" ? " font 'sans,10'" : "";
  const std::string units = m.units.empty() ? "" : " (" + m.units + ")";
  std::string s = fmt::format("set terminal {} size 1800,380{}\nset output {}\nset termoption noenhanced\n", gp.terminal,
                              font, quoted(name + ".png"));
  // Fixed panel areas with room between them for a colour bar's tics and label and the next
  // panel's latitude axis (a free layout lets long tic labels, 58000, run into the neighbour).
  s += fmt::format("set multiplot layout 1,3 title {} margins 0.045,0.935,0.17,0.83 spacing 0.1,0\n",
                   dquoted(m.title));
  s += fmt::format("set xrange {}\nset yrange {}\nset size ratio -1\n", axis_range(m.lon), axis_range(m.lat));
  s += "set xlabel 'longitude (degrees east)'\nset ylabel 'latitude (degrees north)'\n"
       "set xtics 60 out nomirror\nset ytics 30 out nomirror\nset cbtics out\nset tics front\nunset key\n";
  s += fmt::format("set cblabel {}\n", quoted("value" + units));
  s += kFieldPalette;
  s += fmt::format("set cbrange [{:.7g}:{:.7g}]\n", lo, hi);
  s += "set title 'forecast'\nplot 'pred.dat' using 1:2:3 with image\n";
  s += "set title 'truth'\nplot 'truth.dat' using 1:2:3 with image\n";
  s += kErrorPalette;
  s += fmt::format("set cbrange [{:.7g}:{:.7g}]\n", -err, err);
  s += fmt::format("set cblabel {}\n", quoted("forecast - truth" + units));
  s += "set title 'error'\nplot 'error.dat' using 1:2:3 with image\n";
  s += "unset multiplot\n";
  return s;
}

void write_weather_map_data(const WeatherMap& m, const std::string& dir) {
  check_map(m);
  const size_t H = m.lat.size(), W = m.lon.size();
  std::string pred, truth, error;
  pred.reserve(H * W * 28);
  truth.reserve(H * W * 28);
  error.reserve(H * W * 28);
  for (size_t j = 0; j < H; ++j) {
    for (size_t i = 0; i < W; ++i) {
      const size_t k = j * W + i;
      const std::string at = fmt::format("{:.7g} {:.7g} ", m.lon[i], m.lat[j]);
      pred += at + fmt::format("{:.7g}\n", m.pred[k]);
      truth += at + fmt::format("{:.7g}\n", m.truth[k]);
      error += at + fmt::format("{:.7g}\n", m.pred[k] - m.truth[k]);
    }
  }
  write_file_atomic((fs::path(dir) / "pred.dat").string(), pred);
  write_file_atomic((fs::path(dir) / "truth.dat").string(), truth);
  write_file_atomic((fs::path(dir) / "error.dat").string(), error);
}

void draw_weather_map(const Gnuplot& gp, const WeatherMap& m, const std::string& png_path) {
  check_map(m);
  std::string templ = (fs::temp_directory_path() / "weft-map-XXXXXX").string();
  if (::mkdtemp(templ.data()) == nullptr) {
    throw_runtime("cannot make a temporary folder {}: {}", templ, std::strerror(errno));
  }
  const std::string tmp = templ;
  struct Cleanup {
    std::string dir;
    ~Cleanup() {
      std::error_code ec;
      fs::remove_all(dir, ec);
    }
  } cleanup{tmp};
  write_weather_map_data(m, tmp);
  run_script(gp, tmp, "map", weather_map_script(gp, m, "map"));
  const fs::path out(png_path);
  std::error_code ec;
  if (out.has_parent_path()) fs::create_directories(out.parent_path(), ec);
  if (ec) throw_runtime("cannot create the folder {}: {}", out.parent_path().string(), ec.message());
  write_file_atomic(png_path, read_file((fs::path(tmp) / "map.png").string()));
}

}  // namespace weft::report
