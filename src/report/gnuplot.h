// Plots through gnuplot, run as a subprocess on a script file: finding the program and a PNG
// terminal, writing a script with its data inline (so the .gp file beside each PNG redraws it
// by itself: `gnuplot loss.gp`), and checking what gnuplot says.
#pragma once
#include <string>
#include <vector>

namespace weft::report {

struct Gnuplot {
  std::string program;   // the gnuplot executable
  std::string terminal;  // "pngcairo" (antialiased) or "png" (libgd), whichever this build has
};

// gnuplot on PATH with a PNG terminal. InputError when there is no gnuplot (it is a
// dependency, installed by scripts/setup.sh as gnuplot-nox) or it has neither terminal.
Gnuplot find_gnuplot();

// Writes `script` to DIR/NAME.gp and runs gnuplot on it in DIR, which must produce DIR/NAME.png.
// RuntimeError with gnuplot's messages when it exits non-zero or writes no PNG; what it prints
// on stderr otherwise (warnings) is logged.
void run_script(const Gnuplot& gp, const std::string& dir, const std::string& name, const std::string& script);

// The lines every plot starts with: terminal and size, output NAME.png, a grid, the key.
std::string script_header(const Gnuplot& gp, const std::string& name, int width, int height);
// A gnuplot datablock: "$NAME << EOD", the rows, "EOD".
std::string datablock(const std::string& name, const std::vector<std::string>& rows);
// A single-quoted gnuplot string ('it''s').
std::string quoted(const std::string& s);

// The colour of run `run` (0, 1) and series `k` within it: one hue family per run, so that an
// overlay tells the runs apart by colour.
std::string series_colour(int run, int k);

// A byte unit for values up to `max_bytes`: {"KiB", 1024}, {"MiB", 1048576}, ...
struct ByteUnit {
  const char* name;
  double scale;
};
ByteUnit byte_unit(double max_bytes);

}  // namespace weft::report
